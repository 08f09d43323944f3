package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Defaults of a Processor.
const (
	// DefaultMaxAttempts is how many deliveries of a message whose handler
	// fails a Processor allows before the dead-letter path, when
	// Processor.MaxAttempts is 0.
	DefaultMaxAttempts = 5
	// DefaultRetryDelay is how long the broker is asked to wait before it
	// delivers a message again, when Processor.RetryDelay is 0.
	DefaultRetryDelay = time.Second
	// MaxKeyLength bounds a message's key, in bytes.
	MaxKeyLength = idem.MaxKeyLength
)

// fingerprintDomain separates a message's fingerprint from every other
// hash of idem.
const fingerprintDomain = "idem.consumer.v1/fingerprint"

// Message is one delivery of a broker, as an adapter hands it over.
type Message struct {
	// Key is the message's idempotency key: one the producer set, else
	// the broker's ID of the message (the same at every redelivery).
	// Required: a message without one goes to the dead-letter path.
	Key string
	// Subject is where it was published (NATS subject, AMQP exchange and
	// routing key); bound into the fingerprint with Body.
	Subject string
	// Body is the payload, as published.
	Body []byte
	// Attempt is the delivery's number as the broker counts it, 1 for the
	// first; 0 if the broker does not count.
	Attempt int
}

// Handler processes a message inside the registry's transaction tx: its
// writes commit together with the record of the message. It returns the
// answer to store (replayed to nobody, but kept as the record's response
// for operators) and any outbox messages. An error rolls everything back;
// the message is delivered again, up to MaxAttempts.
type Handler func(ctx context.Context, tx registry.Tx, m Message) (Result, error)

// Result is what a Handler did.
type Result struct {
	// Answer is stored as the record's response body (JSON is best);
	// nil stores an empty body.
	Answer []byte
	// Outbox are messages to publish, committed with the handler's writes.
	Outbox []registry.Message
}

// Action is what an adapter does with a delivery.
type Action int

const (
	// Ack: the message is done (executed now, or before: a replay).
	Ack Action = iota + 1
	// Retry: deliver it again after Decision.Delay; nothing was recorded.
	Retry
	// DeadLetter: move it to the dead-letter path, then acknowledge it;
	// Decision.Reason says why.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return "invalid"
}

// Decision is what Process decided about one delivery.
type Decision struct {
	Action Action
	// Verdict is the registry's verdict (registry.Execute, Replay, …);
	// 0 when the registry was not asked (no key) or failed.
	Verdict registry.Verdict
	// OperationID is the message's operation, when the registry knows it.
	OperationID string
	// Delay is how long to wait before a Retry.
	Delay time.Duration
	// Reason says why, for a Retry or a DeadLetter.
	Reason string
}

// Processor runs messages exactly once. Set the fields before the first
// Process and do not change them; safe for concurrent use.
type Processor struct {
	// Store is the registry beside the handler's business tables.
	// Required.
	Store registry.Store
	// Operation names what the messages do, APIRevision its revision; both
	// are part of every message's scope. Required.
	Operation, APIRevision string
	// Source is who publishes the messages, as the registry's caller: one
	// source's keys never meet another's. Required: at least a Principal.
	Source idem.Identity
	// Handler processes a message. Required.
	Handler Handler
	// MaxAttempts is how many deliveries of a message whose handler fails
	// are allowed before the dead-letter path; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// RetryDelay is the delay of a Retry; 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// Retention is how long a message's record is kept with its answer
	// (registry.Claim.Retention); 0 means registry.DefaultRetention. The
	// broker must not redeliver a message later than that.
	Retention time.Duration
	// MaxDuration bounds one run of the handler, from the moment the
	// message is accepted: past it the handler's ctx is done and nothing
	// is recorded. 0 means registry.DefaultLease (30 s).
	MaxDuration time.Duration
	// WriterEpoch is the epoch the Processor writes at.
	WriterEpoch int64
	// Observe, if set, is called with every decision (metrics, logs).
	Observe func(Message, Decision)
	// Observer receives the core's counts and latencies, under the
	// Operation's name (operation.Observer; idemhttp's metrics implement
	// it); nil: none.
	Observer operation.Observer
	// Logger receives the core's logs; nil means slog.Default().
	Logger *slog.Logger

	once    sync.Once
	core    *operation.Core // made at the first Process
	coreErr error           // why the fields make no core
}

// Process runs m's handler once through the registry and returns what
// the adapter must do with the delivery. The run is the core's
// (operation.Core, the one-transaction style, with no per-source bound on
// operations in flight): a message whose key is recorded is a replay, a
// duplicate delivered while the first runs in this process waits for it,
// and the handler's writes, the record and the outbox messages commit
// together. ctx governs the registry's reads until the message is
// accepted; from then on the run is bounded by MaxDuration, not by ctx.
func (p *Processor) Process(ctx context.Context, m Message) Decision {
	d := p.process(ctx, m)
	if p.Observe != nil {
		p.Observe(m, d)
	}
	return d
}

func (p *Processor) process(ctx context.Context, m Message) Decision {
	switch {
	case m.Key == "":
		return Decision{Action: DeadLetter, Reason: "the message has no key: neither a producer's key nor a message ID"}
	case len(m.Key) > MaxKeyLength:
		return Decision{Action: DeadLetter, Reason: fmt.Sprintf("the message's key is longer than %d bytes", MaxKeyLength)}
	}
	key, err := idem.ParseKey([]string{idem.QuoteKey(m.Key)}, idem.KeyPolicy{MinLength: 1})
	if err != nil {
		return Decision{Action: DeadLetter, Reason: "the message's key is not printable ASCII: " + err.Error()}
	}
	core, err := p.coreOf()
	if err != nil { // the Processor's fault, not the message's: never dead-lettered
		return Decision{Action: Retry, Delay: p.retryDelay(), Reason: err.Error()}
	}
	d := &door{handler: p.Handler, m: m}
	res := core.Run(ctx, operation.Request{
		Identity:    p.Source,
		Scope:       idem.ScopeOf(p.Source, p.Operation, p.APIRevision, key),
		Fingerprint: idem.Fingerprint(idem.HashStrings(fingerprintDomain, m.Subject, string(m.Body))),
		Unbounded:   true, // a broker's backlog is not a client holding keys
	}, d)
	switch res.Kind {
	case operation.Executed:
		return Decision{Action: Ack, Verdict: registry.Execute, OperationID: res.Record.OperationID}
	case operation.Replayed:
		return Decision{Action: Ack, Verdict: registry.Replay, OperationID: res.Record.OperationID}
	case operation.Released:
		return p.failed(m, d.err) // the handler failed: nothing recorded
	}
	return p.refused(m, res.Refusal)
}

// coreOf returns the Processor's core, made from its fields at the
// first call.
func (p *Processor) coreOf() (*operation.Core, error) {
	p.once.Do(func() {
		op := &operation.Config{
			Name: p.Operation, APIRevision: p.APIRevision, Retention: p.Retention,
			MaxDuration: p.MaxDuration, OneTransaction: true,
		}
		if p.Store == nil || p.Handler == nil {
			p.coreErr = errors.New("consumer: the Processor needs a Store and a Handler")
			return
		}
		if err := op.Validate(); err != nil {
			p.coreErr = fmt.Errorf("consumer: the Processor's fields: %w", err)
			return
		}
		p.core = operation.NewCore(operation.Core{
			Store: p.Store, Config: op, WriterEpoch: p.WriterEpoch, Observer: p.Observer, Logger: p.Logger,
		})
	})
	return p.core, p.coreErr
}

// refused decides about a delivery the core refused.
func (p *Processor) refused(m Message, r operation.Refusal) Decision {
	reason := string(r.Code)
	if r.Detail != "" {
		reason += ": " + r.Detail
	}
	switch r.Code {
	case idem.CodeKeyRetired:
		return Decision{Action: Ack, Verdict: registry.Retired, OperationID: r.OperationID,
			Reason: "the message was processed long ago (its record is a tombstone)"}
	case idem.CodePayloadConflict:
		return Decision{Action: DeadLetter, Verdict: registry.Conflict,
			Reason: "the key was used for another message (another subject or body)"}
	case idem.CodeInProgress, idem.CodeOutcomeUnknown:
		// Another style's record in flight, or this process's execution
		// of the key still running past the wait cap.
		v := registry.InProgress
		if r.Code == idem.CodeOutcomeUnknown {
			v = registry.Unknown
		}
		return Decision{Action: Retry, Verdict: v, OperationID: r.OperationID, Delay: p.retryDelay(),
			Reason: "the message's operation is " + v.String()}
	case operation.CodeHandlerError, operation.CodeResponseTooLarge:
		// The handler's fault: it counts toward the dead-letter path.
		return p.failed(m, errors.New(reason))
	}
	// Storage trouble, a fenced writer, a moved tenant, a stored answer
	// that cannot be read: never the message's fault, never counted.
	return Decision{Action: Retry, Delay: p.retryDelay(), Reason: reason}
}

// door is one delivery's side of a run (operation.Door).
type door struct {
	handler Handler
	m       Message
	err     error // the handler's, when it failed
}

// Execute runs the handler in the business transaction; its error
// releases (nothing is recorded).
func (d *door) Execute(ctx context.Context, tx registry.Tx, _ registry.Record) (operation.Answer, error) {
	r, err := d.handler(ctx, tx, d.m)
	if err != nil {
		d.err = err
		return operation.Answer{}, fmt.Errorf("%w: %w", operation.ErrRelease, err)
	}
	return operation.Answer{State: idem.StateSucceeded, Outbox: r.Outbox, Status: 200,
		Response: idem.Response{Status: 200, MediaType: "application/json", Body: r.Answer}}, nil
}

// failed decides about a delivery whose handler failed: retried, until
// the MaxAttempts-th delivery goes to the dead-letter path.
func (p *Processor) failed(m Message, err error) Decision {
	reason := err.Error()
	if errors.Is(err, registry.ErrUnavailable) || errors.Is(err, registry.ErrWriterFenced) || errors.Is(err, registry.ErrTenantMoved) {
		// The handler failed on storage trouble, which is not the
		// message's fault: it never counts toward the dead-letter path.
		return Decision{Action: Retry, Delay: p.retryDelay(), Reason: reason}
	}
	if m.Attempt >= p.maxAttempts() {
		return Decision{Action: DeadLetter, Reason: fmt.Sprintf("the handler failed at delivery %d of %d: %s", m.Attempt, p.maxAttempts(), reason)}
	}
	return Decision{Action: Retry, Delay: p.retryDelay(), Reason: reason}
}

func (p *Processor) maxAttempts() int {
	if p.MaxAttempts > 0 {
		return p.MaxAttempts
	}
	return DefaultMaxAttempts
}

// RetryDelayOrDefault is the delay of a Retry: RetryDelay, or
// DefaultRetryDelay.
func (p *Processor) RetryDelayOrDefault() time.Duration { return p.retryDelay() }

func (p *Processor) retryDelay() time.Duration {
	if p.RetryDelay > 0 {
		return p.RetryDelay
	}
	return DefaultRetryDelay
}
