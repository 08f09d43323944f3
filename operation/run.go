package operation

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// Request is a request reduced by its door to what the contract decides
// on.
type Request struct {
	Identity    idem.Identity
	Scope       idem.ScopeHash
	Fingerprint idem.Fingerprint
	// Wait is how long the client asked to wait for an operation in
	// flight (HTTP: Prefer: wait), already capped; 0: answer at once.
	Wait time.Duration
	// Unbounded drops the per-principal bound (Config.MaxActiveKeys): a
	// shadow request is not enforce's to bound.
	Unbounded bool
}

// Answer is what one execution answered, as the door saw it.
type Answer struct {
	// State is the terminal state to store (Config.StateFor).
	State idem.State
	// Response is the snapshot stored and replayed.
	Response idem.Response
	// Outbox is the messages to write with the outcome.
	Outbox []registry.Message
	// Status is the status the execution answered with, stored or not
	// (logs; a 4xx that could not be recorded is still sent).
	Status int
	// Failed is the first error a statement of the execution got through
	// its transaction: when recording then fails for a reason that is
	// not storage trouble, that statement is why (HANDLER_ERROR).
	Failed error
}

// Errors an Execute returns when nothing may be recorded: the door then
// sends its execution's own answer (ErrRelease: a status that releases, a
// panic) or the core refuses RESPONSE_TOO_LARGE (ErrTooLarge). Any other
// error is a failure to record: the record is read again, and else
// STORE_UNAVAILABLE.
var (
	ErrRelease  = errors.New("operation: the answer releases the reservation")
	ErrTooLarge = errors.New("operation: the answer exceeds the snapshot cap")
)

// Door is the transport's side of a run. Execute runs the operation's
// business once: in tx, the fenced business transaction, whose writes
// commit with the outcome — or, for an effect-bearing operation, with tx
// nil and Effect available through ctx. It may be called again if the
// store retries the transaction. A Door may also implement
// VerdictCounter and Shadower.
type Door interface {
	Execute(ctx context.Context, tx registry.Tx, rec registry.Record) (Answer, error)
}

// ExecuteFunc is a Door made of its Execute function.
type ExecuteFunc func(ctx context.Context, tx registry.Tx, rec registry.Record) (Answer, error)

// Execute calls f.
func (f ExecuteFunc) Execute(ctx context.Context, tx registry.Tx, rec registry.Record) (Answer, error) {
	return f(ctx, tx, rec)
}

// VerdictCounter is a Door that counts the rollout verdict of its
// request (registry.Verdict*): CountVerdict is called with each verdict
// the run reaches; the door counts the first.
type VerdictCounter interface{ CountVerdict(verdict string) }

// Shadower is a Door that may serve its request in shadow: asked for a
// request enforce would answer from a record, AnswerPlainly reports
// whether it executes plainly instead (Result Plain); an error refuses
// it (fail closed).
type Shadower interface {
	AnswerPlainly(ctx context.Context) (bool, error)
}

// Kind says what a Result is.
type Kind uint8

const (
	// Executed: the execution's outcome is committed in Result.Record.
	// The door sends its execution's own answer, or the stored one when
	// Rendered.
	Executed Kind = iota + 1
	// Replayed: Result.Record's stored answer is sent as a replay.
	Replayed
	// Released: nothing was recorded; the door sends its execution's own
	// answer, which is not stored (a retry executes afresh).
	Released
	// Refused: Result.Refusal says the code.
	Refused
	// Plain: shadow — the door executes the request without a record.
	Plain
)

// Result is the outcome of a run, for the door to render.
type Result struct {
	Kind Kind
	// Record is the outcome's record (Executed, Replayed).
	Record registry.Record
	// Rendered (Executed): the stored answer, rendered from the
	// operation's effects, is sent, not the execution's own.
	Rendered bool
	// Waited (Replayed): the replay answers a wait the client asked for
	// (HTTP: Preference-Applied).
	Waited  time.Duration
	Refusal Refusal

	// err, within a run: the request is refused for this error (Refuse,
	// at the run's one exit, finish).
	err error
}

// Observer receives a run's counts and latencies; every method must be
// safe for concurrent use. nil observes nothing.
type Observer interface {
	Outcome(operation, outcome string)
	Tamper(operation string)
	Join(operation string)
	ObserveReservation(operation string, d time.Duration)
	Inflight(operation string, delta float64)
}

type noObserver struct{}

func (noObserver) Outcome(string, string)                   {}
func (noObserver) Tamper(string)                            {}
func (noObserver) Join(string)                              {}
func (noObserver) ObserveReservation(string, time.Duration) {}
func (noObserver) Inflight(string, float64)                 {}

// DefaultWaitCap caps a wait (Request.Wait, and a duplicate's wait for an
// execution of its key in this Core).
const DefaultWaitCap = 10 * time.Second

// DefaultResolveWait is how long a run whose outcome could not be
// recorded because the store was unreachable keeps reading its record
// (Core.ResolveWait).
const DefaultResolveWait = 10 * time.Second

// The backoff of those reads.
const (
	resolvePollStart = 50 * time.Millisecond
	resolvePollMax   = time.Second
)

// Core runs one operation's requests. Build it with its fields set and
// keep it for as long as its door serves (NewCore); it must not be
// changed afterwards and is safe for concurrent use. Store and Config
// are required.
type Core struct {
	Store  registry.Store
	Config *Config
	// Admit, if set, is asked before a new operation is accepted (never
	// before a replay); an error with a contract code refuses with it.
	Admit func(ctx context.Context) error
	// WriterEpoch is stored with every claim.
	WriterEpoch int64
	// WaitCap caps waiting for an execution of the same key in this
	// Core; 0 means DefaultWaitCap, negative waits not at all.
	WaitCap time.Duration
	// ResolveWait bounds reading the record after a failed write whose
	// commit is unknown; 0 means DefaultResolveWait, negative reads once.
	ResolveWait time.Duration
	// PollStart and PollMax, when set, replace await's polling bounds.
	PollStart, PollMax time.Duration
	// Observer receives counts and latencies; nil: none.
	Observer Observer
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider traces each run (trace.go); nil means
	// otel.GetTracerProvider(), which traces nothing until the
	// application sets one.
	TracerProvider trace.TracerProvider

	flights *flightSet
	cache   *replayCache // nil: off (Config.ReplayCache)
}

// NewCore returns c ready to run: its set of executions in flight is
// made (a duplicate of a key executing in this Core waits for it).
func NewCore(c Core) *Core {
	c.flights = newFlightSet()
	c.cache = newReplayCache(c.Config.ReplayCache)
	return &c
}

func (c *Core) log() *slog.Logger { return cmp.Or(c.Logger, slog.Default()) }

func (c *Core) obs() Observer {
	if c.Observer == nil {
		return noObserver{}
	}
	return c.Observer
}

func (c *Core) name() string { return c.Config.Name }

func (c *Core) resolveWait() time.Duration { return orDefault(c.ResolveWait, DefaultResolveWait) }

func (c *Core) waitCap() time.Duration { return orDefault(c.WaitCap, DefaultWaitCap) }

// orDefault reads a field whose zero value means a default and a
// negative one off: def for 0, 0 for v < 0, v otherwise.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Run is the contract for one prepared request: claim, decide, then
// execute, replay, wait or refuse. A OneTransaction operation reserves
// nothing: it looks the scope up and executes in one transaction when
// there is no record (onetx.go); a record it meets is decided the same
// way. A duplicate of an operation this Core is executing waits for that
// execution, in both styles, instead of being refused IN_PROGRESS.
//
// In shadow (d is a Shadower) a request enforce would answer from a
// record may come back Plain; the run's verdicts go to d when it is a
// VerdictCounter. ctx is the request's (see the package doc).
//
// The styles say what happened — an error, a record to replay, a
// refusal — and Run's one exit turns that into the Result (finish,
// refuse.go).
func (c *Core) Run(ctx context.Context, req Request, d Door) Result {
	ctx, span := c.startRun(ctx) // trace.go
	res := c.run(ctx, req, d)
	return c.endRun(ctx, span, c.finish(ctx, res)) // refuse.go, trace.go
}

func (c *Core) run(ctx context.Context, req Request, d Door) Result {
	claim := c.Config.Claim(req.Scope, req.Fingerprint, req.Identity, c.WriterEpoch)
	if req.Unbounded {
		claim.MaxActive = 0
	}
	for attempt := 0; ; attempt++ {
		var rec registry.Record
		var created bool
		var err error
		cached := false
		if attempt == 0 {
			// A settled record cached by an earlier replay is decided
			// below exactly as the registry's own would be (replaycache.go).
			rec, cached = c.cache.get(claim)
			if cached {
				if co, ok := c.Observer.(ReplayCacheObserver); ok {
					co.ReplayCacheHit(c.name())
				}
				markCached(ctx) // trace.go
			}
		}
		switch {
		case cached:
		case c.Config.OneTransaction:
			var res Result
			var answered bool
			rec, res, answered, err = c.executeOnce(ctx, claim, d) // onetx.go
			if answered {
				return res
			}
		default:
			rec, created, err = c.reserve(ctx, claim) // twophase.go
		}
		if err != nil {
			return Result{Kind: Refused, err: err}
		}
		dec := Decide(rec, created, req)
		countVerdict(d, decisionVerdict(dec, rec))
		if sh, ok := d.(Shadower); ok && !executes(dec, rec) {
			plain, err := sh.AnswerPlainly(ctx)
			if err != nil {
				return Result{Kind: Refused, err: err}
			}
			if plain {
				return Result{Kind: Plain}
			}
		}
		if created {
			if err := failpoint.Hit(failpoint.AfterReserve); err != nil {
				c.release(context.WithoutCancel(ctx), rec)
				return Result{Kind: Refused, err: err}
			}
		}
		if dec.Verdict == registry.InProgress && !leaseExpired(rec) && attempt == 0 {
			if done, ok := c.flights.executing(claim.Scope); ok {
				// This Core is executing the key: wait for that execution
				// rather than refuse and have the client poll, then decide
				// again (replay, conflict, or run it if it was released)
				// — for at most the wait cap.
				c.obs().Join(c.name())
				if c.awaitFlight(ctx, done) {
					continue
				}
				if err := ctx.Err(); gone(ctx, err) {
					return Result{Kind: Refused, err: err}
				}
				return Result{Kind: Refused, Refusal: Refusal{Code: dec.Code, OperationID: rec.OperationID, Monitor: true}}
			}
		}
		switch {
		case dec.Verdict == registry.Execute:
			return c.executeTracked(ctx, claim.Scope, rec, d) // below: two-phase or effects
		case dec.Verdict == registry.Replay:
			if !cached {
				c.cache.put(rec, claim)
			}
			return Result{Kind: Replayed, Record: rec}
		case dec.Verdict == registry.Unknown && c.Config.Effects != nil:
			return c.settleUnknown(ctx, rec) // settle.go
		case dec.Verdict == registry.InProgress && leaseExpired(rec):
			mine, res, ok := c.takeOver(ctx, rec) // settle.go
			if !ok {
				return res
			}
			return c.executeTracked(ctx, claim.Scope, mine, d)
		case dec.Wait:
			rec, err = c.await(ctx, rec, req.Wait) // wait.go
			if errors.Is(err, registry.ErrNotFound) && attempt == 0 {
				continue // released while we waited: this request may run it
			}
			if err == nil && rec.State.Terminal() && !rec.Retired() {
				res := Result{Kind: Replayed, Record: rec}
				res.Waited = req.Wait
				return res
			}
			if err != nil && !errors.Is(err, registry.ErrNotFound) {
				return Result{Kind: Refused, err: err}
			}
			dec = Decide(rec, false, req)
		}
		if dec.Verdict == registry.Conflict {
			// Never reveal the first request, not even its operation ID.
			return Result{Kind: Refused, Refusal: Refusal{Code: dec.Code, Detail: "the key was used for a different request"}}
		}
		if dec.Verdict == registry.Retired {
			return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeKeyRetired, Detail: detailRetired, OperationID: rec.OperationID}}
		}
		if rec.OperationID == "" { // released and not retried
			return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeInProgress, Detail: "the operation is in progress"}}
		}
		return Result{Kind: Refused, Refusal: Refusal{Code: dec.Code, OperationID: rec.OperationID, Monitor: true}}
	}
}

func countVerdict(d Door, verdict string) {
	if vc, ok := d.(VerdictCounter); ok {
		vc.CountVerdict(verdict)
	}
}

// gone reports whether err, the failure of serving a request whose
// context is ctx, is its client going away: ctx was cancelled (HTTP: the
// connection closed or was half-closed) and err is that cancellation.
// Timing alone is not enough: a store error that is not the cancellation
// stays storage trouble even when the client left meanwhile, and a
// deadline the application put on the request is not the client going.
func gone(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// executeTracked runs the execution (two-phase, or with effects) registered in the Core's flights under
// scope, so that a duplicate arriving meanwhile waits for it (Run). If an
// execution of scope is still registered — one that released its
// reservation and has not returned yet — nothing is registered: this
// request's duplicates then get the two-phase answers (IN_PROGRESS, or a
// wait).
func (c *Core) executeTracked(ctx context.Context, scope idem.ScopeHash, rec registry.Record, d Door) Result {
	if done, leader := c.flights.lead(scope); leader {
		defer c.flights.land(scope, done)
	}
	if c.Config.Effects != nil {
		return c.executeEffects(ctx, rec, d) // effects.go: no business transaction
	}
	return c.execute(ctx, rec, d) // twophase.go
}
