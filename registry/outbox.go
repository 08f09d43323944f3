package registry

import (
	"context"
	"time"
)

// Outbox delivery (SPEC E4). A message written by an outcome is pending
// until a relay delivers it (Store.MarkPublished) or gives up on it. A
// failed delivery attempt is recorded with FailOutbox: the attempt count
// rises by one and the message is not claimed again before its backoff
// has passed — or, when the relay decided so (too many attempts, too old),
// it becomes a dead letter: never claimed again, listed by DeadLetters,
// until an operator requeues it with RequeueOutbox. Every one of these
// changes is a single compare-and-set statement.
//
// States of a message:
//
//	pending   published_at and dead_at unset; claimable once no claim or
//	          backoff holds it
//	published published_at set (terminal)
//	dead      dead_at set, published_at unset; RequeueOutbox makes it
//	          pending again with no attempts
type OutboxDelivery interface {
	// FailOutbox records a failed delivery attempt of the message f.ID,
	// if it is still pending with f.Attempts attempts (as claimed): its
	// attempt count rises by one, f.Error is kept as its last error, and
	// it is not claimed again before the store's "now" + f.RetryAfter —
	// or, with f.Dead, it becomes a dead letter. ErrFenced, with nothing
	// changed, when the message is unknown, published, dead or another
	// attempt was recorded meanwhile (another relay claimed it after this
	// claim expired).
	FailOutbox(ctx context.Context, f OutboxFailure) error
	// DeadLetters returns up to limit dead letters, oldest (lowest Seq)
	// first; limit <= 0 returns none.
	DeadLetters(ctx context.Context, limit int) ([]OutboxMessage, error)
	// RequeueOutbox makes the dead letter id pending again with no
	// attempts, claimable at once; its last error is kept. ErrNotFound if
	// there is no such message, ErrFenced if it is not dead.
	RequeueOutbox(ctx context.Context, id string) error
	// OutboxStats counts the pending and dead messages and dates the
	// oldest pending one.
	OutboxStats(ctx context.Context) (OutboxStats, error)
	// OperationOutbox returns the messages an operation's outcome wrote,
	// in the order it wrote them, each with its delivery state
	// (PublishedAt, DeadAt, Attempts, LastError); none is not an error.
	// Messages Prune deleted with their tombstone are gone.
	OperationOutbox(ctx context.Context, operationID string) ([]OutboxMessage, error)
}

// OutboxFailure is one failed delivery attempt, for FailOutbox.
type OutboxFailure struct {
	// ID is the message's ID.
	ID string
	// Attempts is the message's Attempts when it was claimed: the
	// compare-and-set's expected value.
	Attempts int
	// Error says why the attempt failed; it becomes the message's
	// LastError.
	Error string
	// RetryAfter is the backoff: the message is not claimed again before
	// the store's "now" plus RetryAfter. Negative means 0.
	RetryAfter time.Duration
	// Dead makes the message a dead letter instead of scheduling another
	// attempt.
	Dead bool
}

// OutboxStats describes the undelivered messages.
type OutboxStats struct {
	// Pending counts the messages neither published nor dead.
	Pending int64
	// OldestPending is the CreatedAt of the oldest pending message; zero
	// when there is none.
	OldestPending time.Time
	// Dead counts the dead letters.
	Dead int64
}

// Delivery states of an outbox message (OutboxMessage.DeliveryState).
const (
	OutboxPending   = "pending"
	OutboxPublished = "published"
	OutboxDead      = "dead"
)

// DeliveryState returns the message's state as its PublishedAt and DeadAt
// say: OutboxPublished, OutboxDead or OutboxPending. Only
// OperationOutbox sets both; a message from ClaimOutbox is pending.
func (m OutboxMessage) DeliveryState() string {
	switch {
	case !m.PublishedAt.IsZero():
		return OutboxPublished
	case !m.DeadAt.IsZero():
		return OutboxDead
	}
	return OutboxPending
}
