package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// VerifyTransfers is Verify for the transfers workload: it reads the
// records of plan's keys (operation payments.OperationTransfer) and the
// run's stored 5xx responses from store, and checks them and the clients'
// answers (res) against the provider's executions (list, from its GET
// /transfers), attributed to keys by payee:
//
//   - a key with more than one execution is a duplicate effect;
//   - a key answered 2xx (201, or a reconciliation's stored 200) must
//     have exactly one, a key answered with a 422 (AMOUNT_LIMIT, the
//     provider's decline) none;
//   - a key counts as UNKNOWN past the SLO when its first definite answer
//     came later than slo after its first request, or never, or when its
//     operation is UNKNOWN now;
//   - no record of the run may store a 5xx response (a 5xx is never
//     evidence of an outcome);
//   - a key whose record retired (a tombstone: the response is gone) has
//     its answers held to the record's operation ID only (checkRetired).
//
// ctx governs the reads.
func VerifyTransfers(ctx context.Context, store registry.Store, plan Plan, res LoadResult, list []ProviderTransfer, slo time.Duration) (Verification, error) {
	var v Verification
	recs, err := readRecords(ctx, store, plan, payments.OperationTransfer)
	if err != nil {
		return v, err
	}
	fives, err := read5xx(ctx, store)
	if err != nil {
		return v, err
	}
	execs := executionsByKey(plan, list)
	for i, k := range plan.Keys {
		r := recs[i]
		var kr KeyResult
		if i < len(res.Keys) {
			kr = res.Keys[i]
		}
		if r.err == nil {
			v.Operations++
		}
		if f, ok := fives[r.scope]; ok {
			v.Stored5xx++
			v.problem("key %d (%s): operation %s stored a %d response", i, k.Key, f.op, f.status)
		}
		switch {
		case errors.Is(r.err, idem.ErrDigestMismatch):
			v.CorruptSnapshots++
			v.problem("key %d (%s): the stored response fails its digest", i, k.Key)
		case r.err != nil && !errors.Is(r.err, registry.ErrNotFound):
			return v, fmt.Errorf("gate: reading the record of key %d: %w", i, r.err)
		case r.err == nil && r.rec.State.InFlight():
			v.InFlight++
			v.problem("key %d: operation %s still %s after the recovery pass", i, r.rec.OperationID, r.rec.State)
		}
		switch {
		case !kr.Settled:
			v.UnknownPastSLO++
			v.problem("key %d (%s): no definite answer within %v of its first request (record: %s)", i, k.Key, slo, describe(r))
		case kr.SettledAfter > slo:
			v.UnknownPastSLO++
			v.problem("key %d (%s): settled %v after its first request, past the %v SLO", i, k.Key, kr.SettledAfter.Round(time.Millisecond), slo)
		case r.err == nil && r.rec.State == idem.StateUnknown:
			v.UnknownPastSLO++
			v.problem("key %d: operation %s answered, yet UNKNOWN at the check", i, r.rec.OperationID)
		}
		if r.err == nil && r.rec.Retired() {
			v.checkRetired(i, k, kr, r)
		} else {
			v.checkAnswers(i, k, kr, r)
		}
		v.checkTransfers(i, k, kr, execs[i])
	}
	for _, e := range execs {
		v.ProviderExecutions += len(e)
	}
	return v, nil
}

// checkRetired is checkAnswers for a key whose record r is a tombstone:
// its response is gone, so every answer must name its operation, and no
// digest can be compared.
func (v *Verification) checkRetired(i int, k Key, kr KeyResult, r keyRecord) {
	if len(kr.Answers) == 0 {
		return
	}
	v.AnsweredKeys++
	v.TerminalAnswers += len(kr.Answers)
	v.RetiredKeys++
	ops := map[string]bool{}
	bad := 0
	for _, a := range kr.Answers {
		ops[a.OperationID] = true
		if a.OperationID != r.rec.OperationID {
			bad++
		}
	}
	if len(ops) > 1 {
		v.ReExecuted++
		v.problem("key %d (%s): executed again — the terminal answers name %d operations: %s", i, k.Key, len(ops), opList(ops))
	}
	if bad > 0 {
		v.AcknowledgedLost++
		v.DigestMismatches += bad
		v.problem("key %d (%s): acknowledged operation lost — answers name %s, the database holds %s", i, k.Key, opList(ops), describe(r))
		return
	}
	v.ConsistentKeys++
}

// checkTransfers checks a key's provider executions against its answers.
func (v *Verification) checkTransfers(i int, k Key, kr KeyResult, execs []string) {
	if len(execs) > 1 {
		v.DuplicateTransfers++
		v.problem("key %d (%s): the provider executed %d transfers for payee %s: %v", i, k.Key, len(execs), k.Payee, execs)
	}
	if len(kr.Answers) == 0 {
		return
	}
	switch a := kr.Answers[0]; {
	case a.succeeded() && len(execs) == 0:
		v.MissingEffects++
		v.problem("key %d (%s): answered %d but the provider executed nothing for payee %s", i, k.Key, a.Status, k.Payee)
	case !a.succeeded() && len(execs) > 0:
		v.DeclinedExecuted++
		v.problem("key %d (%s): answered %d %s but the provider executed %v", i, k.Key, a.Status, a.Code, execs)
	}
}

// stored5xx is a record whose stored response is a 5xx.
type stored5xx struct {
	op     string
	status int
}

// read5xx returns every transfer operation record whose stored response is
// a 5xx, by scope. It reads the table rather than Store.Get, so that a
// record whose snapshot fails its digest is counted too.
func read5xx(ctx context.Context, store registry.Store) (map[idem.ScopeHash]stored5xx, error) {
	out := map[idem.ScopeHash]stored5xx{}
	err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return eachRow(ctx, tx, queries.Get("records_5xx"), []any{payments.OperationTransfer}, func(scan func(...any) error) error {
			var scope []byte
			var f stored5xx
			if err := scan(&scope, &f.op, &f.status); err != nil {
				return err
			}
			var h idem.ScopeHash
			if len(scope) != len(h) {
				return fmt.Errorf("a scope of %d bytes", len(scope))
			}
			copy(h[:], scope)
			out[h] = f
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("gate: reading the stored 5xx responses: %w", err)
	}
	return out, nil
}
