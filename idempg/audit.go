package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed audit.sql
var auditFS embed.FS

// auditQueries are the named queries of the audit log and the prune runs
// (audit.sql).
var auditQueries = sqlfile.MustLoad(auditFS, "audit.sql")

var _ registry.Auditor = (*Store)(nil)
var _ registry.PruneLog = (*Store)(nil)

// AppendAudit appends e to the audit log, durably, dated by the store's
// clock; see registry.Auditor. ctx governs the statement.
func (s *Store) AppendAudit(ctx context.Context, e registry.AuditEntry) (registry.AuditEntry, error) {
	if err := e.Validate(); err != nil {
		return registry.AuditEntry{}, fmt.Errorf("idempg: %w", err)
	}
	now, _ := s.clock()
	var op *string
	if e.OperationID != "" {
		op = &e.OperationID
	}
	if err := s.pool.QueryRow(ctx, auditQueries.Get("AppendAudit"), e.Actor, e.Action, op, e.Detail, now).Scan(&e.Seq, &e.At); err != nil {
		return registry.AuditEntry{}, fmt.Errorf("idempg: append audit: %w", translate(err))
	}
	e.At = e.At.UTC()
	return e, nil
}

// AuditLog returns the entries f selects, newest first; see
// registry.Auditor. ctx governs the query.
func (s *Store) AuditLog(ctx context.Context, f registry.AuditFilter) ([]registry.AuditEntry, error) {
	var (
		op     *string
		before *int64
	)
	if f.OperationID != "" {
		op = &f.OperationID
	}
	if f.Before > 0 {
		before = &f.Before
	}
	rows, err := s.pool.Query(ctx, auditQueries.Get("AuditLog"), op, before, f.LimitOrDefault())
	if err != nil {
		return nil, fmt.Errorf("idempg: audit log: %w", translate(err))
	}
	log, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.AuditEntry, error) {
		var e registry.AuditEntry
		err := row.Scan(&e.Seq, &e.At, &e.Actor, &e.Action, &e.OperationID, &e.Detail)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: audit log: %w", translate(err))
	}
	return log, nil
}

// RecordPruneRun stores r and keeps the newest registry.MaxPruneRuns
// runs, in one statement; see registry.PruneLog. ctx governs it.
func (s *Store) RecordPruneRun(ctx context.Context, r registry.PruneRun) error {
	r, err := r.Check()
	if err != nil {
		return fmt.Errorf("idempg: %w", err)
	}
	if _, err := s.pool.Exec(ctx, auditQueries.Get("RecordPruneRun"), r.Actor, r.StartedAt, r.FinishedAt,
		r.Result.Retired, r.Result.Deleted, r.Error, registry.MaxPruneRuns); err != nil {
		return fmt.Errorf("idempg: record prune run: %w", translate(err))
	}
	return nil
}

// PruneRuns returns up to limit runs, newest first; see
// registry.PruneLog. ctx governs the query.
func (s *Store) PruneRuns(ctx context.Context, limit int) ([]registry.PruneRun, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, auditQueries.Get("PruneRuns"), limit)
	if err != nil {
		return nil, fmt.Errorf("idempg: prune runs: %w", translate(err))
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.PruneRun, error) {
		var r registry.PruneRun
		err := row.Scan(&r.Seq, &r.Actor, &r.StartedAt, &r.FinishedAt, &r.Result.Retired, &r.Result.Deleted, &r.Error)
		r.StartedAt, r.FinishedAt = r.StartedAt.UTC(), r.FinishedAt.UTC()
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: prune runs: %w", translate(err))
	}
	return runs, nil
}
