package registry

import (
	"context"

	"github.com/idemkit/idem"
)

// Watcher is an optional interface of a Store: a wake-up for a waiter
// (idemhttp's Prefer: wait) when a record may have left the in-flight
// states, so that it need not poll the registry. idempg implements it
// with LISTEN/NOTIFY; a Store without it is polled.
//
// Watch starts watching scope. changed is closed, at most once, when the
// record of scope may have left RESERVED or EXECUTING — it finished, its
// reservation was released, it was taken over or marked UNKNOWN — by any
// process sharing the registry. It is a hint, never the record: it may be
// closed spuriously, and a change may be missed (a lost connection, a
// commit racing the watch), so callers must read the record after Watch
// returns, again after every wake, and keep a slower fallback poll. A nil
// changed means no wake-up is available (the caller polls); it is never
// an error. ctx governs setting the watch up only, not its lifetime.
//
// stop, never nil, ends the watch and releases what it holds; it must be
// called exactly once, also after changed was closed. Watch and stop are
// safe for concurrent use, for any number of watches of the same or
// different scopes.
type Watcher interface {
	Watch(ctx context.Context, scope idem.ScopeHash) (changed <-chan struct{}, stop func())
}
