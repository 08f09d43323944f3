package registry

import (
	"context"
	"time"
)

// Recovery (SPEC E3). A recovery worker lists EXECUTING records whose
// lease has expired — their owner began an effect outside the database
// and crashed or hung — and takes each over with TakeOver, a
// compare-and-set on the owner generation: several workers may list the
// same record, only one TakeOver wins, the others get ErrFenced and skip
// it. Listing therefore locks nothing. An expired RESERVED record (nothing
// outside the database began; its business transaction committed nothing,
// or the record would be terminal) is not listed: the client's retry takes
// it over and continues the same operation, and nothing deletes it while
// its business transaction may still be pending.

// DefaultRecoverBatch is the batch size of the recovery worker of
// "idem serve" and the default of "idem recover --batch".
const DefaultRecoverBatch = 100

// LeaseScanner finds in-flight records whose lease has expired. Every
// Store implements it.
type LeaseScanner interface {
	// ExpiredLeases returns up to limit records in EXECUTING whose
	// LeaseUntil is at or before the store's "now" (database time
	// unless injected), oldest lease first, operation ID breaking ties. It
	// is a plain read: it locks nothing and a listed record may have moved
	// on by the time the caller acts on it. limit <= 0 returns nothing.
	ExpiredLeases(ctx context.Context, limit int) ([]Record, error)
	// ExtendLease is the heartbeat of a long execution: it moves the lease
	// of rec's record to now + LeaseOrDefault(lease) if the record
	// is still RESERVED or EXECUTING at rec.OwnerGen, and returns the new
	// LeaseUntil; ErrFenced otherwise.
	ExtendLease(ctx context.Context, rec Record, lease time.Duration) (time.Time, error)
}
