package idemhttp

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Response headers of the contract.
const (
	HeaderContract  = "Idempotency-Contract"
	HeaderOperation = "Idempotency-Operation"
	HeaderReplayed  = "Idempotent-Replayed"
)

// DefaultWaitCap caps Prefer: wait (operation.DefaultWaitCap).
const DefaultWaitCap = operation.DefaultWaitCap

// DefaultResolveWait is how long a request whose outcome could not be
// recorded because the store was unreachable keeps reading its record
// (Middleware.ResolveWait): long enough for an automatic PostgreSQL
// failover on loopback or a LAN, short enough that a client's own retry
// is not held back much longer than a Prefer: wait.
const DefaultResolveWait = operation.DefaultResolveWait

// Middleware makes one operation's handler idempotent under
// http.idempotency.v1. Configure it, then call Handler once; it must not
// be changed afterwards. Handlers it wraps are safe for concurrent use.
type Middleware struct {
	// Store is the registry. Required.
	Store registry.Store
	// Operation configures the operation. Required.
	Operation Operation
	// Identity returns the authenticated caller of a request, after the
	// application's authentication. An error answers 401
	// UNAUTHENTICATED; the error's text is not shown to the client.
	// Required.
	Identity func(r *http.Request) (idem.Identity, error)
	// Challenge is the WWW-Authenticate value sent with that 401 (RFC 9110
	// §11.6.1 requires one), for example "Bearer"; empty sends none.
	Challenge string
	// Admit, if set, is asked before a new operation is accepted (never
	// before a replay); an error with a contract code (for example
	// DRAINING, WRITER_FENCED) refuses it with that code.
	Admit func(ctx context.Context) error
	// WriterEpoch is stored with every claim.
	WriterEpoch int64
	// WaitCap caps Prefer: wait; 0 means DefaultWaitCap, negative
	// disables waiting.
	WaitCap time.Duration
	// ResolveWait bounds how long a request whose outcome could not be
	// recorded because the store was unreachable — the connection died,
	// maybe around COMMIT, or the database is failing over — keeps
	// reading its record to learn whether the commit happened: found,
	// the committed outcome is sent (marked as a replay); not found or
	// not answered in time, 503 STORE_UNAVAILABLE, and the client's
	// retry decides. Nothing is executed again meanwhile. 0 means
	// DefaultResolveWait; negative reads once.
	ResolveWait time.Duration
	// MonitorPrefix is the path prefix under which the application serves
	// the operation monitor (MonitorHandler), for example
	// "/v1/operations/": 409 answers for an operation in flight or UNKNOWN
	// then carry Link: <{MonitorPrefix}{operation ID}>; rel="monitor".
	// Empty, the default, sends no Link: a link the application does not
	// serve would answer 404.
	MonitorPrefix string
	// Rollouts, if set, makes the registry's rollout row of the operation
	// govern each request's mode (Rollouts, registry.Rollout.ModeFor):
	// enforce, shadow, off, or read-only for an operation that was
	// enforced and is configured off; Operation.Mode is then the mode
	// used while the row sets none. It also records, before this process
	// first accepts a request under enforce, that the operation has been
	// enforced (registry.RolloutStore.MarkEnforced), and keeps the
	// verdict counts per tenant. nil: Operation.Mode alone and no
	// read-only guard; shadow is the same safe shadow, and enforce still
	// commits EnforcedAt (MarkEnforced, once per Handler) before its first
	// acceptance, so a server in shadow never executes plainly a retry
	// whose answer an enforcing one gave.
	Rollouts *Rollouts
	// Metrics, if set, receives counts and latencies.
	Metrics *Metrics
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider traces each request the core runs (span idem.run
	// and its steps, docs/tracing.md); nil means otel.GetTracerProvider(),
	// which traces nothing until the application sets one.
	TracerProvider trace.TracerProvider
	// Propagator extracts the caller's trace context from the request's
	// headers when no span is in its context yet (an instrumentation in
	// front, such as otelhttp, put none there); nil means
	// otel.GetTextMapPropagator(), which extracts nothing until the
	// application sets one (propagation.TraceContext{}: W3C traceparent).
	Propagator propagation.TextMapPropagator

	// pollStart and pollMax, when set, replace await's fallback polling
	// interval bounds (operation.Core.PollStart, PollMax); tests only.
	pollStart, pollMax time.Duration
}

func (m *Middleware) log() *slog.Logger { return cmp.Or(m.Logger, slog.Default()) }

// setMonitorLink adds the Link to operation id's monitor to a refusal,
// when the application serves one (MonitorPrefix).
func (m *Middleware) setMonitorLink(w http.ResponseWriter, id string) {
	if m.MonitorPrefix != "" {
		w.Header().Set("Link", "<"+m.MonitorPrefix+id+`>; rel="monitor"`)
	}
}

func (m *Middleware) waitCap() time.Duration { return orDefault(m.WaitCap, DefaultWaitCap) }

// orDefault is the reading of the configuration fields whose zero value
// means a default and a negative one means off: def for 0, 0 for v < 0,
// v otherwise.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Handler returns next wrapped by the middleware. It panics if the
// configuration is invalid, as http.Handle does for a bad pattern.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if m.Store == nil || m.Identity == nil {
		panic("idemhttp: Middleware needs a Store and an Identity function")
	}
	if err := validate(&m.Operation); err != nil {
		panic(err)
	}
	// This handler's core: its executions in flight are this handler's.
	core := operation.NewCore(operation.Core{
		Store: m.Store, Config: &m.Operation, Admit: m.Admit, WriterEpoch: m.WriterEpoch,
		WaitCap: m.WaitCap, ResolveWait: m.ResolveWait, PollStart: m.pollStart, PollMax: m.pollMax,
		Observer: observer{m.Metrics}, Logger: m.Logger, TracerProvider: m.TracerProvider,
	})
	marked := new(atomic.Bool) // without Rollouts: MarkEnforced succeeded for this handler
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, idErr := m.Identity(r) // once per request: every mode uses it
		if idErr != nil {
			// Not authenticated: nothing Identity returned alongside its
			// error is used — not for the ramp, the verdict's tenant, nor
			// the caller a plain execution's handler is given (Caller).
			id = idem.Identity{}
		}
		c := &call{m: m, id: id, idErr: idErr, mode: string(m.Operation.EffectiveMode())}
		if m.Rollouts != nil {
			row, err := m.Rollouts.Rollout(r.Context(), m.Operation.Name)
			if err != nil {
				w.Header().Set(HeaderContract, idem.ContractVersion)
				m.refuseErr(w, r, err) // no row in hand: fail closed
				return
			}
			c.row, c.mode = row, row.ModeFor(c.mode, id)
		}
		switch c.mode {
		case registry.RolloutOff:
			m.serveOff(w, r, next, c)
		case registry.RolloutReadOnly:
			m.serveReadOnly(w, r, c)
		default:
			m.serveEnforce(w, r, next, core, marked, c)
		}
	})
}
