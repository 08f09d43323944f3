package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Options are the optional settings of New. The zero value is the
// defaults.
type Options struct {
	// MonitorPrefix is where the application mounts MonitorHandler, for
	// example "/v1/operations/"; "" (the default) sends no Link with a 409
	// (Middleware.MonitorPrefix).
	MonitorPrefix string
	// Challenge is the WWW-Authenticate value of a 401 ("Bearer"); "" sends
	// none.
	Challenge string
	// Admit, if set, is asked before a new operation is accepted
	// (Middleware.Admit; ControlAdmitter honours drain and writer epochs).
	Admit func(ctx context.Context) error
	// WriterEpoch, if set, is the writer epoch claims are written at; nil
	// means the registry's epoch when New runs, so that a later
	// "idem epoch bump" fences this writer.
	WriterEpoch *int64
	// WaitCap caps Prefer: wait; 0 means DefaultWaitCap.
	WaitCap time.Duration
	// Metrics, if set, receives counts and latencies (NewMetrics, once per
	// Prometheus registry).
	Metrics *Metrics
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider and Propagator trace the requests
	// (Middleware.TracerProvider, Middleware.Propagator); nil means the
	// global ones, which do nothing until the application sets them.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

// New returns the middleware of op on store, with identity authenticating
// every request (an error answers 401 UNAUTHENTICATED), and checks the
// configuration — what Handler would panic on is an error here. Defaults
// beyond the zero values of Operation: keys must follow
// idem.StrictKeyPolicy (opaque, high-entropy: 16 to 128 characters, at
// least 64 estimated bits, no e-mail address or card number) unless
// op.KeyPolicy is set, and the writer epoch is the registry's
// (read with ctx, which governs only that read). Wrap store with
// registry.WithTimeout to fail requests closed when the database does not
// answer. The returned Middleware must not be changed once Handler is
// called; its handlers are safe for concurrent use.
func New(ctx context.Context, store registry.Store, op Operation, identity func(*http.Request) (idem.Identity, error), opts Options) (*Middleware, error) {
	if store == nil || identity == nil {
		return nil, errors.New("idemhttp: New needs a store and an identity function")
	}
	if op.KeyPolicy == (idem.KeyPolicy{}) {
		op.KeyPolicy = idem.StrictKeyPolicy
	}
	if err := validate(&op); err != nil {
		return nil, err
	}
	m := &Middleware{
		Store: store, Operation: op, Identity: identity,
		Challenge: opts.Challenge, Admit: opts.Admit, WaitCap: opts.WaitCap,
		MonitorPrefix: opts.MonitorPrefix, Metrics: opts.Metrics, Logger: opts.Logger,
		TracerProvider: opts.TracerProvider, Propagator: opts.Propagator,
	}
	if opts.WriterEpoch != nil {
		m.WriterEpoch = *opts.WriterEpoch
	} else {
		ctl, err := store.Control(ctx)
		if err != nil {
			return nil, fmt.Errorf("idemhttp: reading the writer epoch: %w", err)
		}
		m.WriterEpoch = ctl.WriterEpoch
	}
	return m, nil
}
