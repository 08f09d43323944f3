package idemhttp

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/tracing"
)

// traceContext is r's context for the core's run: as it is when a span
// is already in it (an instrumentation in front of the middleware), else
// with the caller's trace context extracted from r's headers by
// Middleware.Propagator (docs/tracing.md).
func (m *Middleware) traceContext(r *http.Request) context.Context {
	ctx := r.Context()
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return tracing.Propagator(m.Propagator).Extract(ctx, propagation.HeaderCarrier(r.Header))
}
