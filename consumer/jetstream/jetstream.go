// Package jetstream runs a consumer.Processor on the messages of a NATS
// JetStream consumer (nats.go's jetstream package): each message is
// processed once through the registry and acknowledged only after its
// transaction committed (docs/consumers.md).
//
// A message's key is its Idempotency-Key header (the producer's key; a
// duplicate publish carries the same), else "nats-msg-id:" and its
// Nats-Msg-Id header, else "nats-stream-seq:<stream>/<stream sequence>" —
// the same at every redelivery, but not across duplicate publishes, nor
// after a stream is recreated: producers that may publish twice set a
// key.
// The consumer must use explicit acks (jetstream.AckExplicitPolicy).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// Headers of a dead letter, beside the message's own.
const (
	// HeaderDeadReason says why the message went to the dead-letter path.
	HeaderDeadReason = "Idem-Dead-Reason"
	// HeaderOriginalSubject is the subject it was published on.
	HeaderOriginalSubject = "Idem-Original-Subject"
	// KeyHeader is the header a producer sets the message's key in.
	KeyHeader = "Idempotency-Key"
)

// AfterCommit is the failpoint hit after a message's transaction
// committed and before its ack (internal/failpoint): the fault suite
// kills the consumer there.
const AfterCommit = "consumer-after-commit"

// Config is how Consume handles messages besides processing them.
type Config struct {
	// JetStream publishes dead letters. Required.
	JetStream js.JetStream
	// DeadLetterSubject is where a message goes, with its headers and
	// HeaderDeadReason, when the Processor decides so; a stream must
	// capture it (so the publish is acknowledged and nothing is lost).
	// Required.
	DeadLetterSubject string
	// Propagator extracts the producer's trace context from a message's
	// headers into the context its processing runs in (trace.go); nil
	// means otel.GetTextMapPropagator(), which extracts nothing until the
	// application sets one (propagation.TraceContext{}: W3C traceparent).
	Propagator propagation.TextMapPropagator
}

// Consume processes cons's messages with p until ctx ends, one at a time
// (run several Consume for concurrency). ctx governs the fetches and each
// message's processing; it returns ctx's error, or the error that made
// the consumer unusable.
func Consume(ctx context.Context, cons js.Consumer, p *consumer.Processor, cfg Config) error {
	if cfg.JetStream == nil || cfg.DeadLetterSubject == "" {
		return errors.New("jetstream: Consume needs Config.JetStream and Config.DeadLetterSubject")
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("jetstream: %w", err)
		}
		handle(ctx, msg, p, cfg)
	}
}

// handle processes one message and acts on the decision. A failed ack or
// nak is left to the server: it delivers the message again after its
// AckWait, and the registry answers it.
func handle(ctx context.Context, msg js.Msg, p *consumer.Processor, cfg Config) {
	m := consumer.Message{Key: key(msg), Subject: msg.Subject(), Body: msg.Data()}
	if meta, err := msg.Metadata(); err == nil {
		m.Attempt = int(meta.NumDelivered)
	}
	d := p.Process(traceContext(ctx, msg.Headers(), cfg), m) // trace.go
	switch d.Action {
	case consumer.Ack:
		if d.Verdict == registry.Execute {
			failpoint.Hit(AfterCommit) // the commit is done either way
		}
		msg.DoubleAck(ctx)
	case consumer.Retry:
		msg.NakWithDelay(d.Delay)
	case consumer.DeadLetter:
		dead := &nats.Msg{Subject: cfg.DeadLetterSubject, Data: msg.Data(), Header: nats.Header{}}
		for k, v := range msg.Headers() {
			dead.Header[k] = v
		}
		dead.Header.Set(HeaderDeadReason, d.Reason)
		dead.Header.Set(HeaderOriginalSubject, msg.Subject())
		dead.Header.Del("Nats-Msg-Id") // the dead-letter stream must not drop it as a duplicate
		if _, err := cfg.JetStream.PublishMsg(ctx, dead); err != nil {
			msg.NakWithDelay(p.RetryDelayOrDefault()) // not stored anywhere yet: keep it
			return
		}
		msg.Term()
	}
}

// key is the message's idempotency key.
func key(msg js.Msg) string {
	h := msg.Headers()
	if k := h.Get(KeyHeader); k != "" {
		return k
	}
	// The broker's IDs are marked as such, so a producer's key never
	// meets them.
	if k := h.Get("Nats-Msg-Id"); k != "" {
		return "nats-msg-id:" + k
	}
	meta, err := msg.Metadata()
	if err != nil {
		return ""
	}
	return "nats-stream-seq:" + meta.Stream + "/" + strconv.FormatUint(meta.Sequence.Stream, 10)
}
