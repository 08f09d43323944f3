package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem/registry"
)

var _ registry.TenantMover = (*Store)(nil)

// errNotFenced: ExportTenant of a tenant that is not fenced.
var errNotFenced = errors.New("the tenant is not fenced: fence it first (FenceTenant), so that nothing of it changes while it is copied")

// ExportTenant writes the fenced tenant's rows to w (registry.TenantCopier,
// registry/tenantstream.go), read in one REPEATABLE READ, read-only
// transaction: one snapshot of every table (InnoDB's consistent read). The rows are held in memory while the stream is
// written. An unfenced tenant is an error, nothing written. ctx governs
// the reads; writing to w is not interrupted by it.
func (s *Store) ExportTenant(ctx context.Context, tenant string, w io.Writer) (registry.TenantCounts, error) {
	if err := s.checkOpen(); err != nil {
		return registry.TenantCounts{}, err
	}
	h := registry.TenantHash(tenant)
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return registry.TenantCounts{}, s.fail("export tenant", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	var fenced bool
	if err := queryRow(ctx, tx, tenantQueries.Get("TenantFenced"), h[:]).Scan(&fenced); err != nil {
		return registry.TenantCounts{}, s.fail("export tenant", err)
	}
	if !fenced {
		return registry.TenantCounts{}, fmt.Errorf("idemmysql: export tenant: %w", errNotFenced)
	}
	d, err := readTenant(ctx, tx, h)
	if err != nil {
		return registry.TenantCounts{}, s.fail("export tenant", err)
	}
	if err := tx.Rollback(); err != nil {
		return registry.TenantCounts{}, s.fail("export tenant", err)
	}
	return registry.WriteTenantStream(w, d)
}

// ImportTenant reads a tenant stream (registry.ReadTenantStream checks
// it whole first) and inserts, in one transaction (run again on a
// deadlock), every operation the registry lacks, with its rows; an
// operation held with the same content is skipped, one held with other
// content fails the import (registry.ErrTenantImportConflict), nothing
// imported. The counts are those inserted. ctx governs the call.
func (s *Store) ImportTenant(ctx context.Context, r io.Reader) (registry.TenantCounts, error) {
	in, err := registry.ReadTenantStream(r)
	if err != nil {
		return registry.TenantCounts{}, fmt.Errorf("idemmysql: import tenant: %w", err)
	}
	var done registry.TenantCounts
	err = s.writeTx(ctx, "import tenant", func(tx *sql.Tx, _ any) error {
		have, err := readTenant(ctx, tx, in.TenantHash)
		if err != nil {
			return err
		}
		plan, err := registry.PlanTenantImport(in, have)
		if err != nil {
			return err
		}
		for _, op := range plan {
			if err := insertOperation(ctx, tx, op); err != nil {
				return fmt.Errorf("operation %s: %w", op.Record.OperationID, err)
			}
		}
		done = registry.TenantDump{Operations: plan}.Counts()
		return nil
	})
	return done, err
}

// readTenant reads every row of the tenant in tx.
func readTenant(ctx context.Context, tx *sql.Tx, h [32]byte) (registry.TenantDump, error) {
	recs, err := collect(ctx, tx, "ExportRecords", h, func(sc scanner) (x registry.TenantRecord, err error) {
		var lease, expires, created, updated int64
		var status, retired, until, ttl sql.NullInt64
		var media, loc, etag, key sql.NullString
		err = sc.Scan(&x.Scope, &x.OperationID, &x.Operation, &x.Owner, &x.Fingerprint, &x.Contract, &x.State,
			&x.OwnerGen, &x.WriterEpoch, &lease, &expires, &created, &updated, &status, &media, &loc, &etag,
			&x.RespBody, &x.RespDigest, &key, &retired, &until, &ttl, &x.TenantHash)
		x.LeaseUntil, x.ExpiresAt, x.CreatedAt, x.UpdatedAt = fromMicros(lease), fromMicros(expires), fromMicros(created), fromMicros(updated)
		x.RespStatus, x.TombstoneTTL = intPtr(status), intPtr(ttl)
		x.RespMediaType, x.RespLocation, x.RespETag, x.RespKey = nullable(media), nullable(loc), nullable(etag), nullable(key)
		x.RetiredAt, x.TombstoneUntil = timePtr(retired), timePtr(until)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	effs, err := collect(ctx, tx, "ExportEffects", h, func(sc scanner) (x registry.TenantEffect, err error) {
		var created, updated int64
		var handle, result, reqKey, ansKey sql.NullString
		err = sc.Scan(&x.OperationID, &x.Name, &x.DownstreamKey, &x.OwnerGen, &handle, &result, &created, &updated,
			&x.Request, &x.Answer, &reqKey, &ansKey)
		x.CreatedAt, x.UpdatedAt = fromMicros(created), fromMicros(updated)
		x.Handle, x.Result, x.RequestKey, x.AnswerKey = nullable(handle), nullable(result), nullable(reqKey), nullable(ansKey)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	looks, err := collect(ctx, tx, "ExportLookups", h, func(sc scanner) (x registry.TenantLookup, err error) {
		var at int64
		err = sc.Scan(&x.OperationID, &x.Effect, &x.DownstreamKey, &x.Answer, &x.Handle, &x.Detail, &x.Actor, &at)
		x.At = fromMicros(at)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	recons, err := collect(ctx, tx, "ExportReconciliations", h, func(sc scanner) (x registry.TenantReconciliation, err error) {
		var at int64
		err = sc.Scan(&x.OperationID, &x.Outcome, &x.Method, &x.Actor, &x.Evidence, &at)
		x.CreatedAt = fromMicros(at)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	sets, err := collect(ctx, tx, "ExportSettlements", h, func(sc scanner) (x registry.TenantSettlement, err error) {
		var at int64
		var approver sql.NullString
		var approved sql.NullInt64
		err = sc.Scan(&x.OperationID, &x.Outcome, &x.Handle, &x.Evidence, &x.RequestedBy, &at, &approver, &approved)
		x.RequestedAt, x.ApprovedBy, x.ApprovedAt = fromMicros(at), nullable(approver), timePtr(approved)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	outs, err := collect(ctx, tx, "ExportOutbox", h, func(sc scanner) (x registry.TenantOutbox, err error) {
		var created int64
		var key, lastErr, trace sql.NullString
		var claimed, published, lastAt, dead sql.NullInt64
		err = sc.Scan(&x.MessageID, &x.OperationID, &x.Topic, &x.Payload, &key, &created, &claimed, &published,
			&x.Attempts, &lastErr, &lastAt, &dead, &trace)
		x.CreatedAt, x.PayloadKey, x.LastError, x.TraceParent = fromMicros(created), nullable(key), nullable(lastErr), nullable(trace)
		x.ClaimedUntil, x.PublishedAt, x.LastAttemptAt, x.DeadAt = timePtr(claimed), timePtr(published), timePtr(lastAt), timePtr(dead)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	audit, err := collect(ctx, tx, "ExportAudit", h, func(sc scanner) (x registry.TenantAudit, err error) {
		var at int64
		err = sc.Scan(&x.OperationID, &at, &x.Actor, &x.Action, &x.Detail)
		x.At = fromMicros(at)
		return x, err
	})
	if err != nil {
		return registry.TenantDump{}, err
	}
	return registry.GroupTenantRows(h, recs, effs, looks, recons, sets, outs, audit)
}

// collect runs the named export query for h and scans its rows with scan.
func collect[T any](ctx context.Context, tx *sql.Tx, query string, h [32]byte, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := queryRows(ctx, tx, tenantQueries.Get(query), h[:])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		x, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// insertOperation inserts op's record and rows in tx.
func insertOperation(ctx context.Context, tx *sql.Tx, op registry.TenantOperation) error {
	r := op.Record
	if _, err := exec(ctx, tx, tenantQueries.Get("ImportRecord"), r.Scope, r.OperationID, r.Operation, r.Owner,
		r.Fingerprint, r.Contract, r.State, r.OwnerGen, r.WriterEpoch, r.LeaseUntil.UnixMicro(), r.ExpiresAt.UnixMicro(),
		r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro(), r.RespStatus, r.RespMediaType, r.RespLocation, r.RespETag,
		r.RespBody, r.RespDigest, r.RespKey, micros(r.RetiredAt), micros(r.TombstoneUntil), r.TombstoneTTL, r.TenantHash); err != nil {
		return err
	}
	for _, x := range op.Effects {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportEffect"), x.OperationID, x.Name, x.DownstreamKey,
			x.OwnerGen, x.Handle, x.Result, x.CreatedAt.UnixMicro(), x.UpdatedAt.UnixMicro(), x.Request, x.Answer,
			x.RequestKey, x.AnswerKey); err != nil {
			return err
		}
	}
	for _, x := range op.Lookups {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportLookup"), x.OperationID, x.Effect, x.DownstreamKey,
			x.Answer, x.Handle, x.Detail, x.Actor, x.At.UnixMicro()); err != nil {
			return err
		}
	}
	for _, x := range op.Reconciliations {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportReconciliation"), x.OperationID, x.Outcome, x.Method,
			x.Actor, x.Evidence, x.CreatedAt.UnixMicro()); err != nil {
			return err
		}
	}
	for _, x := range op.Settlements {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportSettlement"), x.OperationID, x.Outcome, x.Handle,
			x.Evidence, x.RequestedBy, x.RequestedAt.UnixMicro(), x.ApprovedBy, micros(x.ApprovedAt)); err != nil {
			return err
		}
	}
	for _, x := range op.Outbox {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportOutbox"), x.MessageID, x.OperationID, x.Topic, x.Payload,
			x.PayloadKey, x.CreatedAt.UnixMicro(), micros(x.ClaimedUntil), micros(x.PublishedAt), x.Attempts, x.LastError,
			micros(x.LastAttemptAt), micros(x.DeadAt), x.TraceParent); err != nil {
			return err
		}
	}
	for _, x := range op.Audit {
		if _, err := exec(ctx, tx, tenantQueries.Get("ImportAudit"), x.OperationID, x.At.UnixMicro(),
			x.Actor, x.Action, x.Detail); err != nil {
			return err
		}
	}
	return nil
}

// micros is a nullable time as stored: Unix µs, or NULL.
func micros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// timePtr is a nullable stored time: nil for NULL.
func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// intPtr is a nullable integer: nil for NULL.
func intPtr(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}
