package operation

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// The one-transaction style (Config.OneTransaction).
//
// executeOnce is its acceptance point. It reads the scope's record first,
// so a retry of a finished operation (the common retry) is answered
// without running anything: the record is returned with answered false
// for Run to decide, as a reserved scope's would be. With no record, a
// request whose key is already executing in this Core waits for that
// execution and reads again (flights.go). Otherwise it asks Admit, runs
// d and records its outcome in one transaction (registry.Store.
// ExecuteOnce), and returns the run's Result (answered true). When
// another request inserted the scope first, everything this one wrote
// was rolled back and the record that won is returned with answered
// false.
//
// The reservation latency gets the time spent in the acceptance point:
// the lookup, plus, for an execution, ExecuteOnce's time outside d
// (record insert and the durable commit it shares with the business
// rows). A request that waited for an execution of its key in this
// process, or lost the scope to a concurrent one in another, waited as a
// duplicate waits for an operation in flight: only its lookups count.
func (c *Core) executeOnce(ctx context.Context, cl registry.Claim, d Door) (rec registry.Record, res Result, answered bool, err error) {
	st := c.startOnce(ctx, cl, d)
	if st.land != nil {
		defer st.land()
	}
	if st.land == nil || st.err != nil {
		return st.rec, st.res, st.answered, st.err
	}
	if c.Config.Effects != nil {
		return c.executeOnceEffects(ctx, cl, d, st.lookup, st.land) // onetxeffects.go
	}
	lookup, land := st.lookup, st.land
	// Past this point the client going away no longer cancels the
	// request (A8): it runs to its commit or its time limit.
	xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Config.ExecutionLimit())
	defer cancel()
	xctx, span := c.span(xctx, SpanExecute, registry.Record{})
	c.obs().Inflight(c.name(), 1)
	defer c.obs().Inflight(c.name(), -1)
	var ans Answer
	business := c.business(d, &ans)
	var ran registry.Record // as the execution saw it: its operation ID
	var handling time.Duration
	start := time.Now()
	out, err := c.Store.ExecuteOnce(xctx, cl, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		ran = rec
		t := time.Now()
		defer func() { handling = time.Since(t) }()
		return business(ctx, tx, rec)
	})
	endSpan(span, out.Record, err)
	land() // the outcome is committed, or nothing will be: the waiters may look
	if err != nil || out.Verdict == registry.Execute {
		countVerdict(d, registry.VerdictExecute)
	}
	if err == nil && out.Verdict != registry.Execute {
		// Another request won the scope: this one's insert waited for
		// the winner's transaction, as a duplicate of an operation in
		// flight waits for its outcome — not time of the acceptance
		// point, which is its lookup.
		c.observeReservation(ctx, lookup)
		return out.Record, Result{}, false, nil
	}
	c.observeReservation(ctx, lookup+time.Since(start)-handling)
	return registry.Record{}, c.answer(xctx, ran, out.Record, err, ans, false), true, nil
}

// onceStart is how the acceptance point of the one-transaction style
// began: with land set, this request leads the execution of its key in
// this Core (err: Admit refused it); else rec, res, answered and err are
// executeOnce's answer.
type onceStart struct {
	rec      registry.Record
	res      Result
	answered bool
	err      error
	lookup   time.Duration // the time of the lookups
	land     func()        // wakes this key's waiters; at once after the commit, at the latest on return
}

// startOnce reads the scope's record and, with none, leads the key's
// execution in this Core — waiting first for an execution of the key
// already in flight here — and asks Admit (executeOnce).
func (c *Core) startOnce(ctx context.Context, cl registry.Claim, d Door) onceStart {
	var lookup time.Duration
	for {
		start := time.Now()
		sctx, span := c.span(ctx, SpanClaim, registry.Record{}) // trace.go
		rec, err := c.Store.Get(sctx, cl.Scope)
		endSpan(span, rec, err)
		lookup += time.Since(start)
		if !errors.Is(err, registry.ErrNotFound) {
			c.observeReservation(ctx, lookup)
			return onceStart{rec: rec, err: err, lookup: lookup}
		}
		done, leader := c.flights.lead(cl.Scope)
		if leader {
			st := onceStart{lookup: lookup, land: sync.OnceFunc(func() { c.flights.land(cl.Scope, done) })}
			if c.Admit != nil {
				st.err = c.Admit(ctx)
			}
			return st
		}
		// This key is executing in this Core: wait for it, then look
		// again (found: replay or conflict; released: run) — for at most
		// the wait cap, like a two-phase duplicate's wait; longer, or
		// when the client goes away, it is refused as in progress.
		c.obs().Join(c.name())
		if !c.awaitFlight(ctx, done) {
			if err := ctx.Err(); gone(ctx, err) {
				return onceStart{res: Result{Kind: Refused, err: err}, answered: true, lookup: lookup}
			}
			countVerdict(d, registry.VerdictInFlight) // enforce's answer: the first request is in flight
			res := Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeInProgress, Detail: "the first request with this key is still executing"}}
			res.Refusal.RetryAfter = "1"
			return onceStart{res: res, answered: true, lookup: lookup}
		}
	}
}
