package idempg

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/registry"
)

var _ registry.TenantMover = (*Store)(nil)

// ExportTenant writes the fenced tenant's rows to w (registry.TenantCopier,
// registry/tenantstream.go), read in one REPEATABLE READ, read-only
// transaction: one snapshot of every table. The rows are held in memory
// while the stream is written. An unfenced tenant is an error, nothing
// written. ctx governs the reads; writing to w is not interrupted by it.
func (s *Store) ExportTenant(ctx context.Context, tenant string, w io.Writer) (registry.TenantCounts, error) {
	h := registry.TenantHash(tenant)
	var d registry.TenantDump
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var fenced bool
		if err := tx.QueryRow(ctx, tenantQueries.Get("TenantFenced"), h[:]).Scan(&fenced); err != nil {
			return err
		}
		if !fenced {
			return errNotFenced
		}
		var err error
		d, err = readTenant(ctx, tx, h)
		return err
	})
	if err != nil {
		return registry.TenantCounts{}, fmt.Errorf("idempg: export tenant: %w", translate(err))
	}
	return registry.WriteTenantStream(w, d)
}

// errNotFenced: ExportTenant of a tenant that is not fenced.
var errNotFenced = errors.New("the tenant is not fenced: fence it first (FenceTenant), so that nothing of it changes while it is copied")

// ImportTenant reads a tenant stream (registry.ReadTenantStream checks
// it whole first) and inserts, in one transaction that commits durably,
// every operation the registry lacks, with its rows; an operation held
// with the same content is skipped, one held with other content fails
// the import (registry.ErrTenantImportConflict), nothing imported. The
// counts are those inserted. ctx governs the transaction.
func (s *Store) ImportTenant(ctx context.Context, r io.Reader) (registry.TenantCounts, error) {
	in, err := registry.ReadTenantStream(r)
	if err != nil {
		return registry.TenantCounts{}, fmt.Errorf("idempg: import tenant: %w", err)
	}
	var done registry.TenantCounts
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
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
	if err != nil {
		return registry.TenantCounts{}, fmt.Errorf("idempg: import tenant: %w", translate(err))
	}
	return done, nil
}

// readTenant reads every row of the tenant in tx.
func readTenant(ctx context.Context, tx pgx.Tx, h [32]byte) (registry.TenantDump, error) {
	recs, err := collect[registry.TenantRecord](ctx, tx, "ExportRecords", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	effs, err := collect[registry.TenantEffect](ctx, tx, "ExportEffects", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	looks, err := collect[registry.TenantLookup](ctx, tx, "ExportLookups", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	recons, err := collect[registry.TenantReconciliation](ctx, tx, "ExportReconciliations", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	sets, err := collect[registry.TenantSettlement](ctx, tx, "ExportSettlements", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	outs, err := collect[registry.TenantOutbox](ctx, tx, "ExportOutbox", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	audit, err := collect[registry.TenantAudit](ctx, tx, "ExportAudit", h)
	if err != nil {
		return registry.TenantDump{}, err
	}
	return registry.GroupTenantRows(h, recs, effs, looks, recons, sets, outs, audit)
}

// collect runs the named export query for h and scans its rows into T by
// position.
func collect[T any](ctx context.Context, tx pgx.Tx, query string, h [32]byte) ([]T, error) {
	rows, err := tx.Query(ctx, tenantQueries.Get(query), h[:])
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[T])
}

// insertOperation inserts op's record and rows in tx.
func insertOperation(ctx context.Context, tx pgx.Tx, op registry.TenantOperation) error {
	r := op.Record
	if _, err := tx.Exec(ctx, tenantQueries.Get("ImportRecord"), r.Scope, r.OperationID, r.Operation, r.Owner,
		r.Fingerprint, r.Contract, r.State, r.OwnerGen, r.WriterEpoch, r.LeaseUntil, r.ExpiresAt, r.CreatedAt,
		r.UpdatedAt, r.RespStatus, r.RespMediaType, r.RespLocation, r.RespETag, r.RespBody, r.RespDigest,
		r.RespKey, r.RetiredAt, r.TombstoneUntil, r.TombstoneTTL, r.TenantHash); err != nil {
		return err
	}
	for _, x := range op.Effects {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportEffect"), x.OperationID, x.Name, x.DownstreamKey,
			x.OwnerGen, x.Handle, x.Result, x.CreatedAt, x.UpdatedAt, x.Request, x.Answer, x.RequestKey, x.AnswerKey); err != nil {
			return err
		}
	}
	for _, x := range op.Lookups {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportLookup"), x.OperationID, x.Effect, x.DownstreamKey,
			x.Answer, x.Handle, x.Detail, x.Actor, x.At); err != nil {
			return err
		}
	}
	for _, x := range op.Reconciliations {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportReconciliation"), x.OperationID, x.Outcome, x.Method,
			x.Actor, x.Evidence, x.CreatedAt); err != nil {
			return err
		}
	}
	for _, x := range op.Settlements {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportSettlement"), x.OperationID, x.Outcome, x.Handle,
			x.Evidence, x.RequestedBy, x.RequestedAt, x.ApprovedBy, x.ApprovedAt); err != nil {
			return err
		}
	}
	for _, x := range op.Outbox {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportOutbox"), x.MessageID, x.OperationID, x.Topic, x.Payload,
			x.PayloadKey, x.CreatedAt, x.ClaimedUntil, x.PublishedAt, x.Attempts, x.LastError, x.LastAttemptAt, x.DeadAt, x.TraceParent); err != nil {
			return err
		}
	}
	for _, x := range op.Audit {
		if _, err := tx.Exec(ctx, tenantQueries.Get("ImportAudit"), x.OperationID, x.At, x.Actor, x.Action, x.Detail); err != nil {
			return err
		}
	}
	return nil
}
