package operation

import (
	"context"
	"slices"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Effects in the one-transaction style (Config.OneTransaction with
// Effects): two durable commits per execution, the least any design that
// survives a crash can pay — one holding the downstream key before the
// call, one holding the answer after it (registry/effects.go).
//
// executeOnceEffects is executeOnce for an effect-bearing operation. The
// scope had no record and this request leads its key's execution in this
// Core. Nothing is written before the handler runs: it runs without a
// business transaction, and with the operation ID it would get (made
// here, Claim.OperationID) but no record yet.
//
//   - Its first Effect call stores the record, directly EXECUTING with
//     its lease, AND the attempt with its downstream key in ONE durable
//     transaction (Store.ReserveEffect); only then is the downstream
//     called. If another request's record was stored first, nothing was
//     written and nothing is sent: Effect returns ErrScopeTaken, the
//     handler's answer is discarded, and the request is answered from the
//     record that won, as Run decides for any record it meets (replay,
//     conflict, in progress). If the reservation fails (storage, the
//     writer fence, the active limit) nothing was written either, and the
//     request is refused for that error.
//   - A definite answer is kept in memory, not stored by a transaction of
//     its own: it commits with the rendered outcome and outbox
//     (Store.CompleteEffects). A crash between the answer and that commit
//     leaves the attempt unsettled with its key durable, and recovery
//     settles it on evidence (a lookup by key, or a re-send with the same
//     key), as after a crash during the call (docs/contract.md §7a). When
//     the outcome cannot be rendered or committed, or an answer is no
//     evidence, every answer held is stored (RecordEffect) before the
//     record is marked UNKNOWN.
//   - A later Effect call of the same execution begins its attempt with
//     BeginEffect, durably, as in the two-phase style; answers held so
//     far stay held until the outcome's commit.
//   - An execution that called no Effect wrote nothing: a 2xx or a
//     declared 4xx is stored as executeOnce stores it — the record,
//     terminal, with its response and outbox, in one transaction
//     (Store.ExecuteOnce, with no business statement) — and any other
//     answer is sent as it is, nothing stored (Released).
//
// The reservation latency gets the lookups plus ReserveEffect's time (or
// ExecuteOnce's, for an execution without effect).
func (c *Core) executeOnceEffects(ctx context.Context, cl registry.Claim, d Door, lookup time.Duration, land func()) (registry.Record, Result, bool, error) {
	cl.OperationID = idem.NewOperationID(time.Now(), cl.Scope)
	rec := registry.Record{
		Scope: cl.Scope, OperationID: cl.OperationID, Operation: cl.Operation, Owner: cl.Owner,
		Fingerprint: cl.Fingerprint, Contract: idem.ContractVersion, State: idem.StateExecuting,
		OwnerGen: 1, WriterEpoch: cl.WriterEpoch, TombstoneTTL: max(cl.TombstoneTTL, 0),
		TenantHash: registry.TenantHash(cl.Tenant),
	}
	// Past this point the client going away no longer cancels the
	// request (A8): it runs to its commit or its time limit.
	xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Config.ExecutionLimit())
	defer cancel()
	xctx, span := c.span(xctx, SpanExecute, rec) // trace.go
	defer span.End()
	c.obs().Inflight(c.name(), 1)
	defer c.obs().Inflight(c.name(), -1)
	hctx, stopBeat := context.WithCancel(xctx)
	beat := func() {}
	defer func() { stopBeat(); beat() }()
	er := &effectRun{store: c.Store, rec: rec, op: c.Config.Effects, effects: map[string]registry.Effect{},
		claim: &cl, holds: true}
	er.reserved = func(rec registry.Record) { beat = c.heartbeat(hctx, rec) } // the lease starts now
	ans, err := d.Execute(withEffects(xctx, er), nil, rec)
	switch {
	case er.lost != nil:
		// Another request's record won: nothing was written or sent.
		c.observeReservation(ctx, lookup+er.reserving)
		return *er.lost, Result{}, false, nil
	case er.refused != nil:
		c.observeReservation(ctx, lookup+er.reserving)
		return registry.Record{}, Result{}, false, er.refused
	case er.claim == nil:
		countVerdict(d, registry.VerdictExecute)
		c.observeReservation(ctx, lookup+er.reserving)
		res, _ := c.endEffects(xctx, er) // effects.go
		land()
		return registry.Record{}, res, true, nil
	}
	return c.onceWithoutEffects(xctx, cl, d, rec, ans, err, lookup, land)
}

// onceWithoutEffects records the answer of a one-transaction execution
// that called no Effect (executeOnceEffects): nothing was written, so a
// 2xx or a declared 4xx is stored by Store.ExecuteOnce and anything else
// is sent as it is.
func (c *Core) onceWithoutEffects(ctx context.Context, cl registry.Claim, d Door, ran registry.Record, ans Answer, err error, lookup time.Duration, land func()) (registry.Record, Result, bool, error) {
	if err != nil {
		countVerdict(d, registry.VerdictExecute)
		c.observeReservation(ctx, lookup)
		return registry.Record{}, c.answer(ctx, ran, registry.Record{}, err, ans, false), true, nil
	}
	start := time.Now()
	out, err := c.Store.ExecuteOnce(ctx, cl, func(ctx context.Context, _ registry.Tx, _ registry.Record) (registry.Outcome, error) {
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		tracing.Stamp(ctx, ans.Outbox)
		return registry.Outcome{State: ans.State, Response: ans.Response, Outbox: ans.Outbox}, nil
	})
	land()
	if err == nil && out.Verdict != registry.Execute {
		c.observeReservation(ctx, lookup) // the insert waited for the winner: see executeOnce
		return out.Record, Result{}, false, nil
	}
	countVerdict(d, registry.VerdictExecute)
	c.observeReservation(ctx, lookup+time.Since(start))
	ans.Failed = nil // the execution ran no statement in this transaction
	return registry.Record{}, c.answer(ctx, ran, out.Record, err, ans, false), true, nil
}

// begin stores the attempt of the effect name before its downstream
// call: with the record, in the one-transaction style's first Effect
// (Store.ReserveEffect; a lost scope sets er.lost and returns
// ErrScopeTaken, a failed reservation sets er.refused), else with
// BeginEffect. Called with er.mu held.
func (er *effectRun) begin(ctx context.Context, name string, request []byte) (registry.Effect, error) {
	if er.claim == nil {
		return er.store.BeginEffect(ctx, er.rec, name, request)
	}
	start := time.Now()
	res, eff, err := er.store.ReserveEffect(ctx, *er.claim, name, request)
	er.reserving = time.Since(start)
	switch {
	case err != nil:
		er.refused = err
		return registry.Effect{}, err
	case res.Verdict != registry.Execute:
		er.lost = &res.Record
		return registry.Effect{}, ErrScopeTaken
	}
	er.claim, er.rec = nil, res.Record
	if er.reserved != nil {
		er.reserved(res.Record)
	}
	return eff, nil
}

// hold keeps the answer of the effect name, just settled in er.effects,
// for the outcome's transaction, in the one-transaction style. Called
// with er.mu held.
func (er *effectRun) hold(name string) {
	if er.holds && !slices.Contains(er.held, name) {
		er.held = append(er.held, name)
	}
}

// heldAnswers returns the answers held for the outcome's transaction.
func (er *effectRun) heldAnswers() []registry.EffectAnswer {
	er.mu.Lock()
	defer er.mu.Unlock()
	answers := make([]registry.EffectAnswer, 0, len(er.held))
	for _, name := range er.held {
		e := er.effects[name]
		answers = append(answers, registry.EffectAnswer{Name: name, Handle: e.Handle, Result: e.Result, Answer: e.Answer})
	}
	return answers
}

// stored forgets the held answers: they committed with the outcome.
func (er *effectRun) stored() {
	er.mu.Lock()
	er.held = nil
	er.mu.Unlock()
}

// storeHeld stores every held answer on its own (RecordEffect), when the
// outcome will not commit them: a definite answer that can be stored is
// never lost. A failure is not fatal and is ignored: the attempt stays
// unsettled with its key durable, and is settled on evidence. Called with er.mu held, or by the execution's
// goroutine once the handler returned.
func (er *effectRun) storeHeld(ctx context.Context) {
	for _, name := range er.held {
		e := er.effects[name]
		_ = er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, e.Handle, e.Result, e.Answer)
	}
	er.held = nil
}
