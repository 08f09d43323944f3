package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// maxProblems bounds the problems a verification or a report lists;
// the counters of each kind count them all.
const maxProblems = 20

// Verification is what the database says about a run.
type Verification struct {
	// Operations counts the keys that have a registry record.
	Operations int `json:"operations"`
	// PaymentRows and OutboxRows count the run's business rows.
	PaymentRows int `json:"payment_rows"`
	OutboxRows  int `json:"outbox_rows"`
	// DuplicatePayments and DuplicateOutbox count rows beyond what the
	// keys' recorded outcomes committed: at most one payment and one
	// "payment.created" message per SUCCEEDED operation, under its
	// operation ID, none for any other key.
	DuplicatePayments int `json:"duplicate_payments"`
	DuplicateOutbox   int `json:"duplicate_outbox"`
	// MissingEffects counts SUCCEEDED operations without their payment
	// row or outbox message.
	MissingEffects int `json:"missing_effects"`
	// TerminalAnswers counts the terminal answers clients got;
	// DigestMismatches those whose digest or operation ID differs from
	// the stored snapshot's (or whose snapshot is missing or fails its
	// own digest). AnsweredKeys counts keys with a terminal answer,
	// ConsistentKeys those whose every answer matched.
	TerminalAnswers  int `json:"terminal_answers"`
	DigestMismatches int `json:"digest_mismatches"`
	AnsweredKeys     int `json:"answered_keys"`
	ConsistentKeys   int `json:"consistent_keys"`
	// AcknowledgedLost counts keys with a terminal answer whose operation
	// the database does not hold: no record, or a record under another
	// operation ID than one of the key's terminal answers (what a failover
	// to a standby that had not received the commit loses).
	// ReExecuted counts keys whose terminal answers name two or more
	// different operation IDs: the key was executed again. Both are
	// digest mismatches too; each fails the run on its own gate.
	AcknowledgedLost int `json:"acknowledged_lost"`
	ReExecuted       int `json:"re_executed"`
	// CorruptSnapshots counts stored responses that fail their digest.
	CorruptSnapshots int `json:"corrupt_snapshots"`
	// UnknownPastSLO counts operations UNKNOWN for longer than the
	// recovery SLO — in the transfers workload, keys without a definite
	// answer within the unknown SLO of their first request, or UNKNOWN at
	// the check; InFlight those still RESERVED or EXECUTING.
	UnknownPastSLO int `json:"unknown_past_slo"`
	InFlight       int `json:"in_flight"`
	// The transfers workload only. ProviderExecutions counts the
	// provider's executions for the run's payees; DuplicateTransfers the
	// keys (payees) with more than one; DeclinedExecuted the keys
	// answered with a 422 that have one nonetheless; Stored5xx the run's
	// operation records whose stored response status is 5xx.
	ProviderExecutions int `json:"provider_executions,omitempty"`
	DuplicateTransfers int `json:"duplicate_transfers,omitempty"`
	DeclinedExecuted   int `json:"declined_executed,omitempty"`
	Stored5xx          int `json:"stored_5xx"`
	// RetiredKeys (transfers) counts answered keys whose record is a
	// tombstone at the check: retired during a run with a short
	// retention (Config.Retention), its response gone, so their answers
	// are held to its operation ID only (checkRetired). Without a
	// retention NewReport counts each as a digest mismatch.
	RetiredKeys int `json:"retired_keys,omitempty"`
	// Problems describes the first failures found.
	Problems []string `json:"problems,omitempty"`
}

func (v *Verification) problem(format string, args ...any) {
	if len(v.Problems) < maxProblems {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// Verify reads the registry records and business rows of plan's keys from
// store and checks them against what the clients got (res). outboxMark is
// the outbox sequence number before the run (OutboxMark). An operation
// counts as UNKNOWN past the SLO when it is UNKNOWN and was created more
// than slo before now (the gate's clock). ctx governs the reads.
func Verify(ctx context.Context, store registry.Store, plan Plan, res LoadResult, outboxMark int64, slo time.Duration) (Verification, error) {
	var v Verification
	recs, err := readRecords(ctx, store, plan, payments.OperationCreate)
	if err != nil {
		return v, err
	}
	pays, outbox, err := readEffects(ctx, store, plan, outboxMark)
	if err != nil {
		return v, err
	}
	now := time.Now()
	for i, k := range plan.Keys {
		r := recs[i]
		var kr KeyResult
		if i < len(res.Keys) {
			kr = res.Keys[i]
		}
		if r.err == nil {
			v.Operations++
		}
		switch {
		case errors.Is(r.err, idem.ErrDigestMismatch):
			v.CorruptSnapshots++
			v.problem("key %d (%s): the stored response fails its digest", k.Index, k.Key)
		case r.err != nil && !errors.Is(r.err, registry.ErrNotFound):
			return v, fmt.Errorf("gate: reading the record of key %d: %w", i, r.err)
		case r.err == nil && r.rec.State == idem.StateUnknown && now.Sub(r.rec.CreatedAt) > slo:
			v.UnknownPastSLO++
			v.problem("key %d: operation %s UNKNOWN since %v", k.Index, r.rec.OperationID, r.rec.CreatedAt)
		case r.err == nil && r.rec.State.InFlight():
			v.InFlight++
			v.problem("key %d: operation %s still %s after the recovery pass", k.Index, r.rec.OperationID, r.rec.State)
		}
		// Problems name a key by its Index: its position in the run's
		// plan, also when plan is one shard's part of it.
		v.checkAnswers(k.Index, k, kr, r)
		v.checkEffects(k.Index, k, r, pays[i], outbox[i])
	}
	for _, n := range pays {
		v.PaymentRows += len(n)
	}
	for _, n := range outbox {
		v.OutboxRows += len(n)
	}
	return v, nil
}

// checkAnswers compares a key's terminal answers with its stored snapshot.
func (v *Verification) checkAnswers(i int, k Key, kr KeyResult, r keyRecord) {
	if len(kr.Answers) == 0 {
		return
	}
	v.AnsweredKeys++
	v.TerminalAnswers += len(kr.Answers)
	bad := 0
	var want [32]byte
	stored := r.err == nil && r.rec.Response != nil
	if stored {
		want = r.rec.Response.Digest()
	}
	ops := map[string]bool{}
	lost := errors.Is(r.err, registry.ErrNotFound)
	for _, a := range kr.Answers {
		if !stored || a.Digest != want || a.OperationID != r.rec.OperationID {
			bad++
		}
		ops[a.OperationID] = true
		lost = lost || r.err == nil && a.OperationID != r.rec.OperationID
	}
	if lost {
		v.AcknowledgedLost++
		v.problem("key %d (%s): acknowledged operation lost — answers name %s, the database holds %s", i, k.Key, opList(ops), describe(r))
	}
	if len(ops) > 1 {
		v.ReExecuted++
		v.problem("key %d (%s): executed again — the terminal answers name %d operations: %s", i, k.Key, len(ops), opList(ops))
	}
	if bad == 0 {
		v.ConsistentKeys++
		return
	}
	v.DigestMismatches += bad
	if !stored {
		v.problem("key %d (%s): %d terminal answers but no stored response (%v)", i, k.Key, bad, r.err)
	} else {
		v.problem("key %d (%s): %d of %d terminal answers differ from operation %s's stored response", i, k.Key, bad, len(kr.Answers), r.rec.OperationID)
	}
}

// checkEffects counts a key's payment rows and outbox messages against
// what its recorded outcome committed.
func (v *Verification) checkEffects(i int, k Key, r keyRecord, pays, outbox []string) {
	want := ""
	if r.err == nil && r.rec.State == idem.StateSucceeded {
		want = r.rec.OperationID
	}
	// A snapshot that fails its digest hides the record: its one effect
	// cannot be told from a stray one, so the first is taken as the
	// operation's (the key already fails replay consistency).
	corrupt := errors.Is(r.err, idem.ErrDigestMismatch)
	extra := func(ops []string, what string) (dups int, found bool) {
		for _, op := range ops {
			if (op == want || corrupt) && !found {
				found = true
				continue
			}
			dups++
			v.problem("key %d (%s): %s of operation %s is a second effect (recorded outcome: %s)", i, k.Key, what, op, describe(r))
		}
		return dups, found
	}
	dp, payFound := extra(pays, "payment")
	do, msgFound := extra(outbox, "outbox message")
	v.DuplicatePayments += dp
	v.DuplicateOutbox += do
	if want != "" && (!payFound || !msgFound) {
		v.MissingEffects++
		v.problem("key %d (%s): operation %s SUCCEEDED without its payment (%v) or outbox message (%v)", i, k.Key, want, payFound, msgFound)
	}
}

// opList lists operation IDs, sorted.
func opList(ops map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(ops)), ", ")
}

func describe(r keyRecord) string {
	if r.err != nil {
		return r.err.Error()
	}
	return r.rec.OperationID + " " + string(r.rec.State)
}

type keyRecord struct {
	scope idem.ScopeHash
	rec   registry.Record
	err   error
}

// readRecords reads every key's record of operation op (Store.Get, which
// checks the stored response's digest), a few at a time.
func readRecords(ctx context.Context, store registry.Store, plan Plan, op string) ([]keyRecord, error) {
	out := make([]keyRecord, len(plan.Keys))
	idx := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range idx {
				k := plan.Keys[i]
				key, err := idem.ParseKey([]string{k.Key}, idem.KeyPolicy{})
				if err != nil {
					out[i].err = err
					continue
				}
				scope := idem.ScopeOf(plan.Principals[k.Principal].Identity, op, payments.APIRevision, key)
				out[i].scope = scope
				out[i].rec, out[i].err = store.Get(ctx, scope)
			}
		})
	}
	for i := range plan.Keys {
		idx <- i
	}
	close(idx)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// readEffects returns, per key, the operation IDs of the run's payment
// rows and "payment.created" outbox messages, attributed to keys by the
// memo each payment carries.
func readEffects(ctx context.Context, store registry.Store, plan Plan, outboxMark int64) (pays, outbox [][]string, err error) {
	pays = make([][]string, len(plan.Keys))
	outbox = make([][]string, len(plan.Keys))
	prefix := plan.MemoPrefix()
	// The memo names a key by its Index, which is its position in
	// plan.Keys unless plan is one shard's part of a run's (ShardPlan).
	pos := make(map[int]int, len(plan.Keys))
	for i, k := range plan.Keys {
		pos[k.Index] = i
	}
	keyOf := func(memo string) (int, bool) {
		s, ok := strings.CutPrefix(memo, prefix)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(s)
		i, ok := pos[n]
		return i, err == nil && ok
	}
	var ops []string // operations with "payment.created" messages since the mark
	err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		if err := eachRow(ctx, tx, queries.Get("payments_of_run"), []any{prefix + "%"}, func(scan func(...any) error) error {
			var memo, op string
			if err := scan(&memo, &op); err != nil {
				return err
			}
			if i, ok := keyOf(memo); ok {
				pays[i] = append(pays[i], op)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("payments: %w", err)
		}
		return eachRow(ctx, tx, queries.Get("outbox_ops_since"), []any{payments.TopicCreated, outboxMark}, func(scan func(...any) error) error {
			var op string
			if err := scan(&op); err != nil {
				return err
			}
			ops = append(ops, op)
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("gate: reading the business rows: %w", err)
	}
	// The payloads through the Store, which opens them when they are
	// sealed (--encryption-keys).
	for _, op := range ops {
		msgs, err := store.OperationOutbox(ctx, op)
		if err != nil {
			return nil, nil, fmt.Errorf("gate: reading the outbox of %s: %w", op, err)
		}
		for _, m := range msgs {
			if m.Topic != payments.TopicCreated || m.Seq <= outboxMark {
				continue
			}
			if m.Unreadable != nil {
				return nil, nil, fmt.Errorf("gate: %w", m.Unreadable)
			}
			var p payments.Payment
			if json.Unmarshal(m.Payload, &p) != nil || p.Memo == nil {
				continue // not one of the run's
			}
			if i, ok := keyOf(*p.Memo); ok {
				outbox[i] = append(outbox[i], op)
			}
		}
	}
	return pays, outbox, nil
}
