package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed audit.sql
var auditFiles embed.FS

// auditQueries are the named queries of the audit log and the prune runs
// (audit.sql).
var auditQueries = sqlfile.MustLoad(auditFiles, "audit.sql")

var _ registry.Auditor = (*Store)(nil)
var _ registry.PruneLog = (*Store)(nil)

// AppendAudit appends e to the audit log, durably, dated by the store's
// clock; see registry.Auditor. ctx governs the call.
func (s *Store) AppendAudit(ctx context.Context, e registry.AuditEntry) (registry.AuditEntry, error) {
	if err := e.Validate(); err != nil {
		return registry.AuditEntry{}, fmt.Errorf("idemsqlite: %w", err)
	}
	var op any
	if e.OperationID != "" {
		op = e.OperationID
	}
	var at int64
	err := s.writeTx(ctx, "append audit", func(tx *sql.Tx, now any) error {
		return tx.QueryRowContext(ctx, auditQueries.Get("AppendAudit"), now, e.Actor, e.Action, op, e.Detail).Scan(&e.Seq, &at)
	})
	if err != nil {
		return registry.AuditEntry{}, err
	}
	e.At = fromMicros(at)
	return e, nil
}

// AuditLog returns the entries f selects, newest first; see
// registry.Auditor. ctx governs the query.
func (s *Store) AuditLog(ctx context.Context, f registry.AuditFilter) ([]registry.AuditEntry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var op, before any
	if f.OperationID != "" {
		op = f.OperationID
	}
	if f.Before > 0 {
		before = f.Before
	}
	rows, err := s.db.QueryContext(ctx, auditQueries.Get("AuditLog"), op, before, f.LimitOrDefault())
	if err != nil {
		return nil, s.fail("audit log", err)
	}
	defer rows.Close()
	var log []registry.AuditEntry
	for rows.Next() {
		var (
			e  registry.AuditEntry
			at int64
		)
		if err := rows.Scan(&e.Seq, &at, &e.Actor, &e.Action, &e.OperationID, &e.Detail); err != nil {
			return nil, s.fail("audit log", err)
		}
		e.At = fromMicros(at)
		log = append(log, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("audit log", err)
	}
	return log, nil
}

// RecordPruneRun stores r and keeps the newest registry.MaxPruneRuns
// runs, in one write transaction; see registry.PruneLog. ctx governs it.
func (s *Store) RecordPruneRun(ctx context.Context, r registry.PruneRun) error {
	r, err := r.Check()
	if err != nil {
		return fmt.Errorf("idemsqlite: %w", err)
	}
	return s.writeTx(ctx, "record prune run", func(tx *sql.Tx, _ any) error {
		if _, err := tx.ExecContext(ctx, auditQueries.Get("RecordPruneRun"), r.Actor, r.StartedAt.UnixMicro(), r.FinishedAt.UnixMicro(),
			r.Result.Retired, r.Result.Deleted, r.Error); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, auditQueries.Get("TrimPruneRuns"), registry.MaxPruneRuns)
		return err
	})
}

// PruneRuns returns up to limit runs, newest first; see
// registry.PruneLog. ctx governs the query.
func (s *Store) PruneRuns(ctx context.Context, limit int) ([]registry.PruneRun, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, auditQueries.Get("PruneRuns"), limit)
	if err != nil {
		return nil, s.fail("prune runs", err)
	}
	defer rows.Close()
	var runs []registry.PruneRun
	for rows.Next() {
		var (
			r                 registry.PruneRun
			started, finished int64
		)
		if err := rows.Scan(&r.Seq, &r.Actor, &started, &finished, &r.Result.Retired, &r.Result.Deleted, &r.Error); err != nil {
			return nil, s.fail("prune runs", err)
		}
		r.StartedAt, r.FinishedAt = fromMicros(started), fromMicros(finished)
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("prune runs", err)
	}
	return runs, nil
}
