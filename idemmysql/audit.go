package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed audit.sql
var auditFiles embed.FS

// auditQueries are the named queries of audit.sql.
var auditQueries = sqlfile.MustLoad(auditFiles, "audit.sql")

var (
	_ registry.Auditor       = (*Store)(nil)
	_ registry.PruneLog      = (*Store)(nil)
	_ registry.LookupLog     = (*Store)(nil)
	_ registry.ApprovalStore = (*Store)(nil)
)

// txNow reads the statement time "now" (the injected time or the
// database's) inside tx, for inserts that return it.
func txNow(ctx context.Context, tx *sql.Tx, now any) (int64, error) {
	var at int64
	err := queryRow(ctx, tx, auditQueries.Get("Now"), now).Scan(&at)
	return at, err
}

// insertSeq runs an insert in tx and returns the AUTO_INCREMENT value it
// assigned.
func insertSeq(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	text, args, err := bind(query, args)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, text, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// AppendAudit appends an entry to the audit log and returns it with its
// sequence number and time. The log is append-only in the database
// (triggers; TRUNCATE refused by idem_truncate_guard). ctx governs the
// call.
func (s *Store) AppendAudit(ctx context.Context, e registry.AuditEntry) (registry.AuditEntry, error) {
	if err := e.Validate(); err != nil {
		return registry.AuditEntry{}, fmt.Errorf("idemmysql: %w", err)
	}
	var op any
	if e.OperationID != "" {
		op = e.OperationID
	}
	var at int64
	err := s.writeTx(ctx, "append audit", func(tx *sql.Tx, now any) (err error) {
		if at, err = txNow(ctx, tx, now); err != nil {
			return err
		}
		e.Seq, err = insertSeq(ctx, tx, auditQueries.Get("AppendAudit"), at, e.Actor, e.Action, op, e.Detail)
		return err
	})
	if err != nil {
		return registry.AuditEntry{}, err
	}
	e.At = fromMicros(at)
	return e, nil
}

// AuditLog returns the entries f selects, newest first. ctx governs the
// query.
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
	rows, err := queryRows(ctx, s.db, auditQueries.Get("AuditLog"), op, before, f.LimitOrDefault())
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

// RecordPruneRun records a pruning pass and, in the same transaction,
// deletes the runs older than the newest registry.MaxPruneRuns. ctx
// governs the call.
func (s *Store) RecordPruneRun(ctx context.Context, r registry.PruneRun) error {
	r, err := r.Check()
	if err != nil {
		return fmt.Errorf("idemmysql: %w", err)
	}
	return s.writeTx(ctx, "record prune run", func(tx *sql.Tx, _ any) error {
		if _, err := exec(ctx, tx, auditQueries.Get("RecordPruneRun"), r.Actor, r.StartedAt.UnixMicro(), r.FinishedAt.UnixMicro(),
			r.Result.Retired, r.Result.Deleted, r.Error); err != nil {
			return err
		}
		var cutoff int64
		err := queryRow(ctx, tx, auditQueries.Get("PruneRunsCutoff"), registry.MaxPruneRuns).Scan(&cutoff)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // no more than MaxPruneRuns runs
		}
		if err != nil {
			return err
		}
		_, err = exec(ctx, tx, auditQueries.Get("TrimPruneRuns"), cutoff)
		return err
	})
}

// PruneRuns returns up to limit recent pruning passes, newest first. ctx
// governs the query.
func (s *Store) PruneRuns(ctx context.Context, limit int) ([]registry.PruneRun, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	rows, err := queryRows(ctx, s.db, auditQueries.Get("PruneRuns"), limit)
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

// RecordLookup appends a downstream lookup of an effect and returns it
// with its sequence number and time. ctx governs the call.
func (s *Store) RecordLookup(ctx context.Context, l registry.Lookup) (registry.Lookup, error) {
	if err := l.Validate(); err != nil {
		return registry.Lookup{}, fmt.Errorf("idemmysql: %w", err)
	}
	var at int64
	err := s.writeTx(ctx, "record lookup", func(tx *sql.Tx, now any) (err error) {
		if at, err = txNow(ctx, tx, now); err != nil {
			return err
		}
		l.Seq, err = insertSeq(ctx, tx, auditQueries.Get("RecordLookup"), at, l.OperationID, l.Effect, l.DownstreamKey,
			l.Answer, l.Handle, l.Detail, l.Actor)
		return err
	})
	if err != nil {
		return registry.Lookup{}, err
	}
	l.At = fromMicros(at)
	return l, nil
}

// Lookups returns an operation's lookups, oldest first. ctx governs the
// query.
func (s *Store) Lookups(ctx context.Context, operationID string) ([]registry.Lookup, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := queryRows(ctx, s.db, auditQueries.Get("Lookups"), operationID)
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

// RequestSettlement records a settlement waiting for a second operator;
// the first request of an operation stands (created false, the stored one
// returned, for a later one). ctx governs the call.
func (s *Store) RequestSettlement(ctx context.Context, p registry.PendingSettlement) (registry.PendingSettlement, bool, error) {
	if err := p.Validate(); err != nil {
		return registry.PendingSettlement{}, false, fmt.Errorf("idemmysql: %w", err)
	}
	var (
		got     registry.PendingSettlement
		created bool
	)
	err := s.writeTx(ctx, "request settlement", func(tx *sql.Tx, now any) error {
		_, err := exec(ctx, tx, auditQueries.Get("RequestSettlement"), now, p.OperationID, p.Outcome, p.Handle, p.Evidence, p.RequestedBy)
		if key, dup := duplicateKey(err); err != nil && !(dup && key == "PRIMARY") {
			return err
		}
		created = err == nil
		got, err = scanPending(queryRow(ctx, tx, auditQueries.Get("PendingSettlement"), p.OperationID))
		return err
	})
	if err != nil {
		return registry.PendingSettlement{}, false, err
	}
	return got, created, nil
}

// PendingSettlement returns an operation's pending settlement, or
// registry.ErrNotFound. ctx governs the query.
func (s *Store) PendingSettlement(ctx context.Context, operationID string) (registry.PendingSettlement, error) {
	if err := s.checkOpen(); err != nil {
		return registry.PendingSettlement{}, err
	}
	p, err := scanPending(queryRow(ctx, s.db, auditQueries.Get("PendingSettlement"), operationID))
	if err != nil {
		return registry.PendingSettlement{}, s.fail("pending settlement "+operationID, err)
	}
	return p, nil
}

// ApproveSettlement records the second operator's approval, once and by
// someone other than the requester (one compare-and-set);
// registry.ErrFenced otherwise, registry.ErrNotFound when there is no
// request. ctx governs the call.
func (s *Store) ApproveSettlement(ctx context.Context, operationID, approver string) (registry.PendingSettlement, error) {
	if approver == "" {
		return registry.PendingSettlement{}, errors.New("idemmysql: approve settlement: empty approver")
	}
	var p registry.PendingSettlement
	err := s.writeTx(ctx, "approve settlement "+operationID, func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, auditQueries.Get("ApproveSettlement"), now, operationID, approver)
		if err != nil {
			return err
		}
		p, err = scanPending(queryRow(ctx, tx, auditQueries.Get("PendingSettlement"), operationID))
		if err != nil {
			return err // sql.ErrNoRows: there is no request
		}
		if n == 0 {
			return registry.ErrFenced
		}
		return nil
	})
	return p, err
}

func scanPending(row scanner) (registry.PendingSettlement, error) {
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
