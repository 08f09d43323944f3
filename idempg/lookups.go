package idempg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed lookups.sql
var lookupsFS embed.FS

// lookupQueries are the named queries of recorded lookups and pending
// settlements (lookups.sql).
var lookupQueries = sqlfile.MustLoad(lookupsFS, "lookups.sql")

var _ registry.LookupLog = (*Store)(nil)
var _ registry.ApprovalStore = (*Store)(nil)

// RecordLookup appends l, durably, dated by the store's clock; see
// registry.LookupLog. ctx governs the statement.
func (s *Store) RecordLookup(ctx context.Context, l registry.Lookup) (registry.Lookup, error) {
	if err := l.Validate(); err != nil {
		return registry.Lookup{}, fmt.Errorf("idempg: %w", err)
	}
	now, _ := s.clock()
	err := s.pool.QueryRow(ctx, lookupQueries.Get("RecordLookup"), l.OperationID, l.Effect, l.DownstreamKey,
		l.Answer, l.Handle, l.Detail, l.Actor, now).Scan(&l.Seq, &l.At)
	if err != nil {
		return registry.Lookup{}, fmt.Errorf("idempg: record lookup: %w", translate(err))
	}
	l.At = l.At.UTC()
	return l, nil
}

// Lookups lists an operation's recorded lookups, oldest first; see
// registry.LookupLog. ctx governs the query.
func (s *Store) Lookups(ctx context.Context, operationID string) ([]registry.Lookup, error) {
	rows, err := s.pool.Query(ctx, lookupQueries.Get("Lookups"), operationID)
	if err != nil {
		return nil, fmt.Errorf("idempg: lookups: %w", translate(err))
	}
	ls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.Lookup, error) {
		var l registry.Lookup
		err := row.Scan(&l.Seq, &l.OperationID, &l.Effect, &l.DownstreamKey, &l.Answer, &l.Handle, &l.Detail, &l.Actor, &l.At)
		l.At = l.At.UTC()
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: lookups: %w", translate(err))
	}
	return ls, nil
}

// RequestSettlement stores p, or returns the operation's request; see
// registry.ApprovalStore. One statement. ctx governs it.
func (s *Store) RequestSettlement(ctx context.Context, p registry.PendingSettlement) (registry.PendingSettlement, bool, error) {
	if err := p.Validate(); err != nil {
		return registry.PendingSettlement{}, false, fmt.Errorf("idempg: %w", err)
	}
	now, _ := s.clock()
	got, created, err := scanPending(s.pool.QueryRow(ctx, lookupQueries.Get("RequestSettlement"),
		p.OperationID, p.Outcome, p.Handle, p.Evidence, p.RequestedBy, now))
	if err != nil {
		return registry.PendingSettlement{}, false, fmt.Errorf("idempg: request settlement: %w", translate(err))
	}
	return got, created, nil
}

// PendingSettlement returns the operation's request; see
// registry.ApprovalStore. ctx governs the query.
func (s *Store) PendingSettlement(ctx context.Context, operationID string) (registry.PendingSettlement, error) {
	p, _, err := scanPending(s.pool.QueryRow(ctx, lookupQueries.Get("PendingSettlement"), operationID))
	if err != nil {
		return registry.PendingSettlement{}, fmt.Errorf("idempg: pending settlement %s: %w", operationID, translate(err))
	}
	return p, nil
}

// ApproveSettlement approves the operation's request in one
// compare-and-set; see registry.ApprovalStore. ctx governs the calls.
func (s *Store) ApproveSettlement(ctx context.Context, operationID, approver string) (registry.PendingSettlement, error) {
	if approver == "" {
		return registry.PendingSettlement{}, errors.New("idempg: approve settlement: empty approver")
	}
	now, _ := s.clock()
	p, _, err := scanPending(s.pool.QueryRow(ctx, lookupQueries.Get("ApproveSettlement"), operationID, approver, now))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.PendingSettlement(ctx, operationID); err != nil {
			return registry.PendingSettlement{}, err
		}
		return registry.PendingSettlement{}, fmt.Errorf("idempg: approve settlement %s: %w", operationID, registry.ErrFenced)
	}
	if err != nil {
		return registry.PendingSettlement{}, fmt.Errorf("idempg: approve settlement %s: %w", operationID, translate(err))
	}
	return p, nil
}

// scanPending scans a pending settlement row and its "created" column.
func scanPending(row pgx.Row) (registry.PendingSettlement, bool, error) {
	var (
		p        registry.PendingSettlement
		approved *time.Time
		created  bool
	)
	err := row.Scan(&p.OperationID, &p.Outcome, &p.Handle, &p.Evidence, &p.RequestedBy, &p.RequestedAt, &p.ApprovedBy, &approved, &created)
	p.RequestedAt = p.RequestedAt.UTC()
	if approved != nil {
		p.ApprovedAt = approved.UTC()
	}
	return p, created, err
}
