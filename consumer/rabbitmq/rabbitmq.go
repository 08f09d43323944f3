// Package rabbitmq runs a consumer.Processor on the messages of a
// RabbitMQ queue (AMQP 0-9-1, amqp091-go): each message is processed once
// through the registry and acknowledged only after its transaction
// committed (docs/consumers.md).
//
// A message's key is its Idempotency-Key header (the producer's key),
// else its message-id property (as "amqp-message-id:<id>", so it never
// meets a producer's key); AMQP gives a message no ID of its own, so a
// message with neither goes to the dead-letter path. The attempt is the
// x-delivery-count header that quorum queues keep, plus one; a classic
// queue keeps no count, so there a failing message is dead-lettered at
// its first redelivery: use a quorum queue for MaxAttempts to apply.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// Headers of a dead letter, beside the message's own.
const (
	// HeaderDeadReason says why the message went to the dead-letter path.
	HeaderDeadReason = "idem-dead-reason"
	// HeaderOriginalQueue is the queue it was consumed from.
	HeaderOriginalQueue = "idem-original-queue"
	// KeyHeader is the header a producer sets the message's key in.
	KeyHeader = "Idempotency-Key"
)

// AfterCommit is the failpoint hit after a message's transaction
// committed and before its ack (internal/failpoint).
const AfterCommit = "consumer-after-commit"

// Config is how Consume handles messages besides processing them.
type Config struct {
	// Queue is the queue to consume. Required.
	Queue string
	// DeadLetterQueue is where a message goes, with its headers and
	// HeaderDeadReason, when the Processor decides so: it is published
	// there (default exchange, persistent, with a publisher confirm)
	// before the original is acknowledged, so nothing is lost. The queue
	// must exist (Consume checks) and be durable. Required.
	DeadLetterQueue string
	// Prefetch bounds the unacknowledged messages the broker sends this
	// consumer; 0 means 1.
	Prefetch int
	// Propagator extracts the producer's trace context from a delivery's
	// headers into the context its processing runs in (trace.go); nil
	// means otel.GetTextMapPropagator(), which extracts nothing until the
	// application sets one (propagation.TraceContext{}: W3C traceparent).
	Propagator propagation.TextMapPropagator
}

// Consume processes cfg.Queue's messages with p on conn until ctx ends,
// one at a time (run several Consume for concurrency: each has its own
// channels). ctx governs the deliveries and each message's processing;
// it returns ctx's error, or the error that closed the channel.
func Consume(ctx context.Context, conn *amqp.Connection, p *consumer.Processor, cfg Config) error {
	if cfg.Queue == "" || cfg.DeadLetterQueue == "" {
		return errors.New("rabbitmq: Consume needs Config.Queue and Config.DeadLetterQueue")
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer closeChannel(ch)
	dead, err := conn.Channel() // publishes dead letters, with confirms
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer closeChannel(dead)
	if _, err := dead.QueueDeclarePassive(cfg.DeadLetterQueue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: the dead-letter queue %q: %w", cfg.DeadLetterQueue, err)
	}
	if err := dead.Confirm(false); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	if err := ch.Qos(max(cfg.Prefetch, 1), 0, false); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("rabbitmq: the channel closed")
			}
			handle(ctx, d, dead, p, cfg)
		}
	}
}

// closeWait bounds how long Consume waits for the broker to confirm a
// channel's close when it returns.
const closeWait = 5 * time.Second

// closeChannel closes ch, waiting at most closeWait: a broker that does
// not answer (seen under heavy load) must not hold Consume's return; the
// close finishes, or fails, when the connection closes. Unacknowledged
// messages go back to the queue either way.
func closeChannel(ch *amqp.Channel) {
	done := make(chan struct{})
	go func() { ch.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

// handle processes one delivery and acts on the decision. A failed ack
// or nack is left to the broker: it delivers the message again when the
// channel closes, and the registry answers it.
func handle(ctx context.Context, d amqp.Delivery, dead *amqp.Channel, p *consumer.Processor, cfg Config) {
	m := consumer.Message{Key: key(d), Subject: d.Exchange + "/" + d.RoutingKey, Body: d.Body, Attempt: attempt(d)}
	dec := p.Process(traceContext(ctx, d.Headers, cfg), m) // trace.go
	switch dec.Action {
	case consumer.Ack:
		if dec.Verdict == registry.Execute {
			failpoint.Hit(AfterCommit) // the commit is done either way
		}
		d.Ack(false)
	case consumer.Retry:
		// AMQP has no delayed requeue: hold the message (its prefetch
		// slot) for the delay, then requeue it.
		select {
		case <-ctx.Done():
		case <-time.After(dec.Delay):
		}
		d.Nack(false, true)
	case consumer.DeadLetter:
		if err := deadLetter(ctx, dead, d, dec.Reason, cfg); err != nil {
			d.Nack(false, true) // not stored anywhere yet: keep it
			return
		}
		d.Ack(false)
	}
}

// deadLetter publishes d to the dead-letter queue and waits for the
// broker's confirm.
func deadLetter(ctx context.Context, ch *amqp.Channel, d amqp.Delivery, reason string, cfg Config) error {
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h[HeaderDeadReason] = reason
	h[HeaderOriginalQueue] = cfg.Queue
	// Consume checked the queue exists, so the default exchange routes
	// the message there, and the broker's confirm means it is stored.
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", cfg.DeadLetterQueue, false, false, amqp.Publishing{
		Headers: h, ContentType: d.ContentType, MessageId: d.MessageId, Body: d.Body, DeliveryMode: amqp.Persistent, Timestamp: d.Timestamp,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("rabbitmq: the broker refused the dead letter")
	}
	return nil
}

// attempt is the delivery's number, 1 for the first. A classic queue
// keeps no count: a redelivery there is taken as the last attempt
// (unknownAttempt), so a message whose handler keeps failing goes to the
// dead-letter path at its first redelivery instead of being requeued for
// ever.
func attempt(d amqp.Delivery) int {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(n) + 1
	case int32:
		return int(n) + 1
	case int:
		return n + 1
	}
	if d.Redelivered {
		return unknownAttempt
	}
	return 1
}

// unknownAttempt is the attempt of a redelivery whose number the queue
// does not keep: past any MaxAttempts.
const unknownAttempt = math.MaxInt32

// key is the delivery's idempotency key: the producer's, or the
// message-id property marked as such, so that a producer's key never
// meets another message's ID.
func key(d amqp.Delivery) string {
	if k, ok := d.Headers[KeyHeader].(string); ok && k != "" {
		return k
	}
	if d.MessageId == "" {
		return ""
	}
	return "amqp-message-id:" + d.MessageId
}
