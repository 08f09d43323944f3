package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed lookups.sql
var lookupFiles embed.FS

// lookupQueries are the named queries of recorded lookups and pending
// settlements (lookups.sql).
var lookupQueries = sqlfile.MustLoad(lookupFiles, "lookups.sql")

var _ registry.LookupLog = (*Store)(nil)
var _ registry.ApprovalStore = (*Store)(nil)

// RecordLookup appends l, durably, dated by the store's clock; see
// registry.LookupLog. ctx governs the call.
func (s *Store) RecordLookup(ctx context.Context, l registry.Lookup) (registry.Lookup, error) {
	if err := l.Validate(); err != nil {
		return registry.Lookup{}, fmt.Errorf("idemsqlite: %w", err)
	}
	var at int64
	err := s.writeTx(ctx, "record lookup", func(tx *sql.Tx, now any) error {
		return tx.QueryRowContext(ctx, lookupQueries.Get("RecordLookup"), now, l.OperationID, l.Effect, l.DownstreamKey,
			l.Answer, l.Handle, l.Detail, l.Actor).Scan(&l.Seq, &at)
	})
	if err != nil {
		return registry.Lookup{}, err
	}
	l.At = fromMicros(at)
	return l, nil
}

// Lookups lists an operation's recorded lookups, oldest first; see
// registry.LookupLog. ctx governs the query.
func (s *Store) Lookups(ctx context.Context, operationID string) ([]registry.Lookup, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, lookupQueries.Get("Lookups"), operationID)
	if err != nil {
		return nil, s.fail("lookups", err)
	}
	defer rows.Close()
	var ls []registry.Lookup
	for rows.Next() {
		var (
			l  registry.Lookup
			at int64
		)
		if err := rows.Scan(&l.Seq, &l.OperationID, &l.Effect, &l.DownstreamKey, &l.Answer, &l.Handle, &l.Detail, &l.Actor, &at); err != nil {
			return nil, s.fail("lookups", err)
		}
		l.At = fromMicros(at)
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("lookups", err)
	}
	return ls, nil
}

// RequestSettlement stores p, or returns the operation's request; see
// registry.ApprovalStore. One write transaction. ctx governs it.
func (s *Store) RequestSettlement(ctx context.Context, p registry.PendingSettlement) (registry.PendingSettlement, bool, error) {
	if err := p.Validate(); err != nil {
		return registry.PendingSettlement{}, false, fmt.Errorf("idemsqlite: %w", err)
	}
	var (
		got     registry.PendingSettlement
		created bool
	)
	err := s.writeTx(ctx, "request settlement", func(tx *sql.Tx, now any) error {
		res, err := tx.ExecContext(ctx, lookupQueries.Get("RequestSettlement"), now, p.OperationID, p.Outcome, p.Handle, p.Evidence, p.RequestedBy)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		got, err = scanPending(tx.QueryRowContext(ctx, lookupQueries.Get("PendingSettlement"), p.OperationID))
		return err
	})
	if err != nil {
		return registry.PendingSettlement{}, false, err
	}
	return got, created, nil
}

// PendingSettlement returns the operation's request; see
// registry.ApprovalStore. ctx governs the query.
func (s *Store) PendingSettlement(ctx context.Context, operationID string) (registry.PendingSettlement, error) {
	if err := s.checkOpen(); err != nil {
		return registry.PendingSettlement{}, err
	}
	p, err := scanPending(s.db.QueryRowContext(ctx, lookupQueries.Get("PendingSettlement"), operationID))
	if err != nil {
		return registry.PendingSettlement{}, s.fail("pending settlement "+operationID, err)
	}
	return p, nil
}

// ApproveSettlement approves the operation's request in one
// compare-and-set; see registry.ApprovalStore. ctx governs the call.
func (s *Store) ApproveSettlement(ctx context.Context, operationID, approver string) (registry.PendingSettlement, error) {
	if approver == "" {
		return registry.PendingSettlement{}, errors.New("idemsqlite: approve settlement: empty approver")
	}
	var p registry.PendingSettlement
	err := s.writeTx(ctx, "approve settlement "+operationID, func(tx *sql.Tx, now any) error {
		var err error
		p, err = scanPending(tx.QueryRowContext(ctx, lookupQueries.Get("ApproveSettlement"), now, operationID, approver))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := scanPending(tx.QueryRowContext(ctx, lookupQueries.Get("PendingSettlement"), operationID)); err != nil {
			return err // sql.ErrNoRows: there is no request
		}
		return registry.ErrFenced
	})
	return p, err
}

// scanPending scans a pending settlement row.
func scanPending(row *sql.Row) (registry.PendingSettlement, error) {
	var (
		p         registry.PendingSettlement
		requested int64
		approved  sql.NullInt64
	)
	if err := row.Scan(&p.OperationID, &p.Outcome, &p.Handle, &p.Evidence, &p.RequestedBy, &requested, &p.ApprovedBy, &approved); err != nil {
		return registry.PendingSettlement{}, err
	}
	p.RequestedAt = fromMicros(requested)
	if approved.Valid {
		p.ApprovedAt = fromMicros(approved.Int64)
	}
	return p, nil
}
