package operation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Effects outside the database (SPEC E1–E2).
//
// An operation whose handler calls a downstream system that cannot join
// the local transaction declares Operation.Effects: the downstream system
// of each effect, by name, and the Renderer of the operation's result. Its
// execution runs WITHOUT a business transaction (Door.Execute gets tx
// nil; HTTP: Tx returns nil): on SQLite
// the business transaction holds the single write lock, so the durable
// BeginEffect transaction could not commit while it is open, and a
// downstream call must never sit inside an open database transaction
// anyway. The execution checks the request and calls Effect for every
// downstream call; the core then records the outcome with
// Store.Complete.
//
// What is stored (docs/contract.md §8):
//
//   - Once an effect was begun, the response is never the handler's: when
//     every begun effect is settled on evidence (package effect), the
//     outcome is what Operation.Effects.Render renders from the stored
//     effects — the same rendering a reconciliation stores later, so a
//     replay answers the same business result however the operation was
//     settled. What the execution answered after its first Effect call is
//     discarded.
//   - If an answer is no evidence (5xx, 429, timeout, reset, unreadable),
//     the operation is marked UNKNOWN and the request is refused
//     OUTCOME_UNKNOWN with the monitor and the operation ID; a
//     retry settles it on evidence if it can (the same key is re-sent,
//     never a new one) and otherwise gets the same 409, and the recovery
//     worker settles it meanwhile. Nothing is ever stored for a 5xx.
//   - Before any effect: 2xx is stored as SUCCEEDED and a declared 4xx
//     (Config.FinalStatuses) as REJECTED — refused after acceptance,
//     nothing happened — or as FAILED_FINAL when the execution queued an
//     outbox message, which commits with it; anything else releases the
//     reservation, as for every operation.

// ErrOutcomeUnknown is wrapped in Effect's error when the downstream's
// answer was no evidence: the effect may or may not have happened. The
// operation is then UNKNOWN and every later Effect call of the execution
// returns it without calling anything.
var ErrOutcomeUnknown = errors.New("operation: downstream outcome unknown")

// ErrEffectDeclined is wrapped in Effect's error when the downstream
// refused the key with an answer its contract defines as final: the
// effect did not and never will happen. The attempt is stored as failed;
// the rendered outcome says what the client gets.
var ErrEffectDeclined = errors.New("operation: downstream declined the effect")

// ErrScopeTaken is wrapped in Effect's error, in the one-transaction
// style (Config.OneTransaction), when another request's record for the
// key was stored first: nothing was written and nothing sent, and the
// execution's answer is discarded — the request is answered from the
// record that won (replay, conflict or in progress).
var ErrScopeTaken = errors.New("operation: another request with this key was accepted first; nothing was sent")

// effectRun is the effect state of one effect-bearing execution.
type effectRun struct {
	store registry.Store
	rec   registry.Record
	op    *effect.Operation
	mu    sync.Mutex
	// effects holds the begun effects as stored, by name, with the result
	// recorded so far ("" while unsettled) — in the one-transaction style
	// also the answers not stored yet (held).
	effects map[string]registry.Effect
	order   []string
	unknown bool // the record was marked UNKNOWN
	fenced  bool // MarkUnknown failed: the record's state is not ours to tell

	// The one-transaction style (onetxeffects.go). claim, until the first
	// Effect: the record is not stored yet, and that Effect stores it
	// with its attempt (Store.ReserveEffect).
	claim *registry.Claim
	// holds: a definite answer is kept in memory for the outcome's
	// transaction (Store.CompleteEffects) instead of being stored at
	// once; held lists, in order, the names whose answer is so kept.
	holds bool
	held  []string
	// lost is the record that won the scope (ErrScopeTaken); refused is
	// why the reservation failed, nothing written (storage, the writer
	// fence, the active limit).
	lost    *registry.Record
	refused error
	// reserved is called once the record is stored (the lease starts);
	// reserving is the time ReserveEffect took.
	reserved  func(registry.Record)
	reserving time.Duration
}

type effectKey struct{}

func withEffects(ctx context.Context, er *effectRun) context.Context {
	return context.WithValue(ctx, effectKey{}, er)
}

// Effect makes one downstream call of an effect-bearing operation (SPEC
// E1): it durably stores the attempt with Store.BeginEffect — its stable
// downstream key registry.DownstreamKey(operation ID, name) and request —
// then sends request with that key through the operation's Downstream for
// name, and stores the answer with Store.RecordEffect if it is evidence.
// It returns the attempt as stored. Calling Effect twice with the same
// name in one execution sends nothing the second time: it returns the
// attempt as settled by the first call (or ErrOutcomeUnknown). The
// failpoint after-downstream is hit once the downstream answered.
//
// In the one-transaction style (Config.OneTransaction) the first call
// stores the record with the attempt instead (Store.ReserveEffect), and a
// definite answer is kept in memory and stored with the outcome
// (onetxeffects.go): the attempt returned carries it all the same.
//
// Errors: one wrapping ErrEffectDeclined for a final refusal (the attempt
// is returned, stored as failed); one wrapping ErrOutcomeUnknown when the
// answer was no evidence or could not be stored (the operation is then
// UNKNOWN); ErrScopeTaken when another request's record for the key was
// stored first (one-transaction style); any other error means nothing was
// sent (no such downstream, storage trouble or fencing before the call).
// Outside an effect-bearing execution it returns an error and calls
// nothing. ctx bounds the calls.
func Effect(ctx context.Context, name string, request []byte) (registry.Effect, error) {
	er, _ := ctx.Value(effectKey{}).(*effectRun)
	if er == nil {
		return registry.Effect{}, errors.New("operation: Effect called outside an effect-bearing operation")
	}
	d := er.op.Downstreams[name]
	if d == nil {
		return registry.Effect{}, fmt.Errorf("operation: no downstream for effect %q", name)
	}
	er.mu.Lock()
	defer er.mu.Unlock() // effects of one operation run one at a time
	switch {
	case er.unknown || er.fenced:
		return registry.Effect{}, ErrOutcomeUnknown
	case er.lost != nil:
		return registry.Effect{}, ErrScopeTaken
	case er.refused != nil:
		return registry.Effect{}, fmt.Errorf("operation: accepting the operation: %w", er.refused)
	}
	if eff, ok := er.effects[name]; ok && eff.Result != "" && er.holds {
		return eff, declined(eff) // settled in this execution: its answer may be held
	}
	bctx, span := tracing.Child(ctx, SpanEffectBegin, tracing.Effect.String(name))
	eff, err := er.begin(bctx, name, request) // onetxeffects.go
	endSpan(span, registry.Record{}, err)     // trace.go
	if err != nil {
		// Nothing was written and nothing sent.
		return registry.Effect{}, fmt.Errorf("operation: beginning effect %s: %w", name, err)
	}
	if _, ok := er.effects[name]; !ok {
		er.order = append(er.order, name)
	}
	er.effects[name] = eff
	if eff.Result != "" {
		return eff, declined(eff)
	}
	a := effect.Send(ctx, d, name, eff.DownstreamKey, eff.Request) // in its span idem.downstream.send
	if err := failpoint.Hit(failpoint.AfterDownstream); err != nil {
		return eff, er.markUnknown(ctx, fmt.Errorf("after the downstream call: %w", err))
	}
	result, ok := a.Evidence()
	if !ok {
		return eff, er.markUnknown(ctx, fmt.Errorf("effect %s: %s", name, a.Detail))
	}
	if !er.holds {
		if err := er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, a.Handle, result, a.Body); err != nil {
			// The downstream answered but the answer is not stored: unknown.
			return eff, er.markUnknown(ctx, fmt.Errorf("recording effect %s: %w", name, err))
		}
	}
	eff.Result, eff.Answer = result, a.Body
	if a.Handle != "" {
		eff.Handle = a.Handle
	}
	er.effects[name] = eff
	er.hold(name) // onetxeffects.go: the one-transaction style stores it with the outcome
	return eff, declined(eff)
}

// declined returns an error wrapping ErrEffectDeclined for a failed
// attempt, else nil.
func declined(eff registry.Effect) error {
	if eff.Result == registry.EffectFailed {
		return fmt.Errorf("%w: %s (key %s)", ErrEffectDeclined, eff.Name, eff.DownstreamKey)
	}
	return nil
}

// markUnknown moves the record to UNKNOWN and returns cause wrapped with
// ErrOutcomeUnknown. Called with er.mu held.
func (er *effectRun) markUnknown(ctx context.Context, cause error) error {
	er.storeHeld(ctx) // a definite answer held in memory is stored first
	if _, err := er.store.MarkUnknown(context.WithoutCancel(ctx), er.rec); err != nil {
		er.fenced = true
		return fmt.Errorf("%w: %w (marking it unknown failed: %v)", ErrOutcomeUnknown, cause, err)
	}
	er.unknown = true
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
}

// state returns the begun effects in the order they began, and whether
// every one is settled and the record was not marked UNKNOWN (or could not
// be).
func (er *effectRun) state() (effs []registry.Effect, settled, unknown bool) {
	er.mu.Lock()
	defer er.mu.Unlock()
	settled = true
	for _, name := range er.order {
		e := er.effects[name]
		effs = append(effs, e)
		if e.Result == "" {
			settled = false
		}
	}
	return effs, settled, er.unknown || er.fenced
}

// executeEffects is execute for an effect-bearing operation: d runs
// without a business transaction, with Effect available through its
// context; the outcome is then recorded by Complete (see the policy
// above).
func (c *Core) executeEffects(ctx context.Context, rec registry.Record, d Door) Result {
	xctx, stop := c.executionContext(ctx, rec) // settle.go
	defer stop()
	c.obs().Inflight(c.name(), 1)
	defer c.obs().Inflight(c.name(), -1)
	er := &effectRun{store: c.Store, rec: rec, op: c.Config.Effects, effects: map[string]registry.Effect{}}
	xctx, span := c.span(xctx, SpanExecute, rec) // trace.go
	defer span.End()
	ans, err := d.Execute(withEffects(xctx, er), nil, rec)
	if res, ok := c.endEffects(xctx, er); ok {
		return res
	}
	return c.completeWithoutEffects(xctx, rec, ans, err)
}

// endEffects ends an effect-bearing execution that began an effect (ok
// true; false: none was begun): refused OUTCOME_UNKNOWN when the record
// was marked UNKNOWN (or replayed, if a retry or the worker settled it
// meanwhile), marked UNKNOWN when an effect is unsettled, and else the
// rendered outcome is recorded.
func (c *Core) endEffects(ctx context.Context, er *effectRun) (Result, bool) {
	effs, settled, unknown := er.state()
	rec := er.rec
	switch {
	case len(effs) == 0:
		return Result{}, false
	case unknown:
		if now, ok := c.settled(ctx, rec); ok {
			return Result{Kind: Replayed, Record: now}, true // fenced: a retry or the worker took over and settled it
		}
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeOutcomeUnknown, OperationID: rec.OperationID, Monitor: true}}, true
	case !settled:
		er.storeHeld(ctx)
		return c.markUnknown(ctx, rec, "an effect was begun but not settled"), true
	}
	return c.completeRendered(ctx, er, effs), true
}

// completeRendered records the outcome that the operation renders from
// its settled effects: Executed, Rendered. The answers er holds in
// memory (the one-transaction style) commit with it
// (Store.CompleteEffects); when the outcome cannot be rendered or
// recorded they are stored on their own before the record is marked
// UNKNOWN, so no definite answer that could be stored is lost.
func (c *Core) completeRendered(ctx context.Context, er *effectRun, effs []registry.Effect) Result {
	rec := er.rec
	rec.State = idem.StateExecuting // as BeginEffect left it
	out, err := c.Config.Effects.Outcome(rec, effs)
	tracing.Stamp(ctx, out.Outbox)
	if err != nil {
		c.log().Error("rendering the outcome failed", "operation", c.name(), "operation_id", rec.OperationID, "err", err)
		er.storeHeld(ctx)
		return c.markUnknown(ctx, rec, "the outcome could not be rendered")
	}
	var done registry.Record
	if answers := er.heldAnswers(); len(answers) > 0 {
		if err = failpoint.Hit(failpoint.BeforeCommit); err == nil {
			done, err = c.Store.CompleteEffects(ctx, rec, answers, out)
		}
	} else {
		done, err = c.Store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
				return registry.Outcome{}, err
			}
			return out, nil
		})
	}
	if err == nil {
		er.stored()
		err = failpoint.Hit(failpoint.AfterCommit) // the outcome is committed either way
	}
	if err != nil {
		c.log().Error("recording the outcome failed after a downstream call", "operation", c.name(), "operation_id", rec.OperationID, "err", err)
		if now, ok := c.resolve(ctx, rec, err); ok {
			return Result{Kind: Replayed, Record: now}
		}
		er.storeHeld(ctx)
		return c.markUnknown(ctx, rec, "the outcome could not be recorded after a downstream call")
	}
	c.obs().Outcome(c.name(), "executed")
	c.log().Info("operation executed", "operation", c.name(), "operation_id", done.OperationID, "state", done.State, "status", out.Response.Status)
	return Result{Kind: Executed, Record: done, Rendered: true}
}

// completeWithoutEffects records the answer of an execution that began
// no effect: 2xx as SUCCEEDED, a declared 4xx as REJECTED (refused after
// acceptance, nothing happened) or, with an outbox message, FAILED_FINAL
// (ans, as Execute returned it with err); anything else releases the
// reservation.
func (c *Core) completeWithoutEffects(ctx context.Context, rec registry.Record, ans Answer, err error) Result {
	if err != nil {
		c.release(ctx, rec)
		if errors.Is(err, ErrTooLarge) {
			return Result{Kind: Refused, Refusal: Refusal{Code: CodeResponseTooLarge, Detail: "the response exceeds the size that can be stored for replay"}}
		}
		c.obs().Outcome(c.name(), "released")
		return Result{Kind: Released}
	}
	done, err := c.Store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		tracing.Stamp(ctx, ans.Outbox)
		return registry.Outcome{State: ans.State, Response: ans.Response, Outbox: ans.Outbox}, nil
	})
	ans.Failed = nil // the execution ran no statement in this transaction
	return c.answer(ctx, rec, done, err, ans, true)
}

// markUnknown moves an EXECUTING record whose outcome cannot be stored to
// UNKNOWN and refuses OUTCOME_UNKNOWN; if even that fails it refuses
// STORE_UNAVAILABLE (the lease expires and recovery takes over; the
// record is never released).
func (c *Core) markUnknown(ctx context.Context, rec registry.Record, why string) Result {
	if _, err := c.Store.MarkUnknown(ctx, rec); err != nil {
		c.log().Error("marking the operation unknown failed", "operation", c.name(), "operation_id", rec.OperationID, "why", why, "err", err)
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeStoreUnavailable, Detail: "the outcome could not be recorded", OperationID: rec.OperationID}}
	}
	c.log().Warn("operation outcome unknown", "operation", c.name(), "operation_id", rec.OperationID, "why", why)
	return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeOutcomeUnknown, OperationID: rec.OperationID, Monitor: true}}
}
