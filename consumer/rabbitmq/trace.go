package rabbitmq

import (
	"context"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/tracing"
)

// traceContext returns ctx with the trace context of a delivery's
// headers (W3C traceparent with propagation.TraceContext{}) extracted by
// the Config's Propagator, so that the Processor's run and its handler
// continue the producer's trace (docs/tracing.md). ctx is returned as it
// is when the headers carry none.
func traceContext(ctx context.Context, h amqp.Table, cfg Config) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return tracing.Propagator(cfg.Propagator).Extract(ctx, tableCarrier(h))
}

// tableCarrier reads AMQP headers for a propagator: a string or a byte
// string value, under its name in any case.
type tableCarrier amqp.Table

func (c tableCarrier) Get(key string) string {
	v, ok := c[key]
	if !ok {
		for k, x := range c {
			if strings.EqualFold(k, key) {
				v, ok = x, true
				break
			}
		}
	}
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

func (c tableCarrier) Set(key, value string) { c[key] = value }

func (c tableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
