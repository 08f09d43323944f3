package jetstream

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idem/internal/tracing"
)

// traceContext returns ctx with the trace context of msg's headers
// (W3C traceparent with propagation.TraceContext{}) extracted by the
// Config's Propagator, so that the Processor's run and its handler
// continue the producer's trace (docs/tracing.md). ctx is returned as it
// is when the headers carry none.
func traceContext(ctx context.Context, h nats.Header, cfg Config) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return tracing.Propagator(cfg.Propagator).Extract(ctx, headerCarrier(h))
}

// headerCarrier reads NATS headers for a propagator. NATS header names
// are case-sensitive; a producer may have written traceparent in any
// case, so a missing exact name is looked up without regard to case.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
