package idempg

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// ExecuteOnce is the one-transaction style (registry.Store.ExecuteOnce):
// fn runs first, in a new transaction, and the scope's record is then
// inserted already terminal — response snapshot, digest and outbox rows
// included — in that same transaction, which commits durably. fn gets
// the record as it will be stored: a new operation ID, owner generation
// 1, state EXECUTING; its times are set at the insert.
//
// The claim comes first: BEGIN, the claim (queries.sql, ClaimScope;
// migration 011) and fn's first statement go to the server in one
// pipelined batch (lazytx.go), and the claim takes a transaction-scoped
// advisory lock named after the scope and looks for its record before
// that statement runs. A concurrent call for the same scope — in another
// process: within one process idemhttp already makes duplicates wait —
// therefore waits for this transaction to end instead of running its
// business statements; when this one committed, the duplicate's
// statements never run and its result is the committed record's verdict
// (below). fn itself is still called (its code up to its first
// statement runs); a business function with no statement takes no lock.
//
// Round trips: the claim adds none. The
// insert (queries.sql, InsertOutcome) and COMMIT go together in one
// pipelined batch. So the registry adds one statement to the business
// transaction and nothing else: no reservation, no second write of the
// record, no lease.
//
// The insert is the acceptance point. When a concurrent transaction has
// inserted the scope, the insert waits for it to end and then fails,
// which rolls fn's writes back; the record is then read afresh and the
// result is registry.Decide's verdict on it (Replay, Conflict, …) with a
// nil error, as for a lost ClaimAndExecute. If there is no record to
// read, the insert's own error is returned, never a conflict.
//
// An error from fn is returned unchanged, all rolled back; so is an
// outcome that is not terminal. c.Lease and c.MaxActive
// do not apply: nothing is ever in flight in the registry. Writer fence:
// registry.ErrWriterFenced, all rolled back, when c.WriterEpoch is older
// than the registry's (control.go) and the scope has no record; an
// existing record still gets its verdict. ctx governs the whole transaction, fn
// included.
func (s *Store) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	now, goNow := s.clock()
	rec := registry.Record{
		Scope: c.Scope, OperationID: newOperationID(c, goNow), Operation: c.Operation,
		Owner: c.Owner, Fingerprint: c.Fingerprint, Contract: idem.ContractVersion,
		State: idem.StateExecuting, OwnerGen: 1, WriterEpoch: c.WriterEpoch,
		TombstoneTTL: max(c.TombstoneTTL, 0), TenantHash: registry.TenantHash(c.Tenant),
	}
	done, insertErr, err := s.runLazy(ctx, "execute once", rec, claimLock(c.Scope), fn, func(out registry.Outcome) (string, []any, error) {
		if !out.State.Terminal() {
			return "", nil, fmt.Errorf("idempg: execute once: outcome state %q is not terminal", out.State)
		}
		if err := out.Response.Storable(); err != nil {
			return "", nil, fmt.Errorf("idempg: execute once: %w", err)
		}
		ids, topics, payloads, payloadKeys, traces, err := s.outboxArgs(rec.OperationID, out.Outbox)
		if err != nil {
			return "", nil, err
		}
		resp := out.Response
		digest := resp.Digest()
		key, body, err := s.sealResponse(c.Scope, rec.OperationID, digest[:], resp.Body)
		if err != nil {
			return "", nil, err
		}
		return queries.Get("InsertOutcome"), []any{
			c.Scope[:], rec.OperationID, c.Operation, c.Owner[:], c.Fingerprint[:],
			idem.ContractVersion, c.WriterEpoch, micros(c.RetentionOrDefault()), now, tombstoneTTL(c),
			string(out.State), resp.Status, resp.MediaType, resp.Location, resp.ETag,
			body, digest[:], ids, topics, payloads, key, payloadKeys, tenantArg(c), traces,
		}, nil
	})
	switch {
	case err != nil:
		return registry.Result{}, err
	case isFenced(insertErr):
		// The writer fence is the only way to insert nothing. It stops new
		// acceptances only: an existing record still decides.
		insertErr = cmp.Or(writerFenced(ctx, s.lane, c.WriterEpoch), registry.ErrWriterFenced)
		fallthrough
	case insertErr != nil:
		res, err := s.lostInsert(ctx, "execute once", c, insertErr)
		if err == nil && res.Record.OperationID == rec.OperationID {
			// The statement's answer was lost (the connection broke)
			// after its COMMIT went through: the record is this call's.
			res.Verdict = registry.Execute
		}
		return res, err
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil
}

// claimLock returns ClaimScope's arguments for scope: the scope and the
// advisory lock's key, its first four bytes.
func claimLock(scope idem.ScopeHash) []any {
	return []any{scope[:], int32(binary.BigEndian.Uint32(scope[:4]))}
}
