package console

import (
	"math"
	"net"
	"sync"
	"time"
)

// Login throttling. Every refused login token takes one attempt from two
// buckets: its source address's and the console's own (every source
// together). An operator token is not named by the login form, so a
// wrong guess is a guess at every operator's token at once: the
// console-wide bucket is the per-operator one, and it also bounds an
// attacker who spreads guesses over many addresses. While either bucket
// is empty, every login from that source — a right token included, so
// that the answer reveals nothing — gets 429 LOGIN_THROTTLED with
// Retry-After, and the token is not even compared.
//
// The cost: someone who fills the console-wide bucket (100 guesses, then
// one a second) keeps operators out while they do. The console listens
// on a loopback or otherwise private address (docs/console.md), where
// that is a small price for tokens that cannot be guessed online.
const (
	sourceBurst  = 10               // refused logins a source may make at once
	sourceRefill = 6 * time.Second  // then one more each this long (10 a minute)
	globalBurst  = 100              // refused logins of all sources together at once
	globalRefill = time.Second      // then one more each this long
	maxSources   = 10000            // sources remembered; full buckets are forgotten first
	throttleNote = 5 * time.Minute  // at most one audit entry a source per this, while throttled
	globalSource = "(every source)" // the console-wide bucket's key
)

// bucket is one token bucket: tokens left at t.
type bucket struct {
	tokens float64
	t      time.Time
	// refused counts the logins refused with 429 since noted, the time
	// the last login.throttled audit entry was written for this bucket.
	refused int
	noted   time.Time
}

// level returns the bucket's tokens at now, refilled one per every.
func (b *bucket) level(now time.Time, burst int, every time.Duration) float64 {
	return math.Min(float64(burst), b.tokens+float64(now.Sub(b.t))/float64(every))
}

// throttle holds the buckets. Its zero value is not usable: newThrottle.
// It is safe for concurrent use.
type throttle struct {
	mu      sync.Mutex
	sources map[string]*bucket
	global  bucket
}

// newThrottle returns a throttle whose buckets are full.
func newThrottle() *throttle {
	return &throttle{sources: map[string]*bucket{}} // a zero t: full at any time
}

// sourceOf is the throttling key of a request's remote address: its host
// (the port changes with every connection).
func sourceOf(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// wait reports how long source must wait before its next login is
// looked at: 0 when it may try now. A positive wait counts as one
// refused attempt; note is then the key and count of refused attempts
// to write in a login.throttled audit entry ("" when none is due: at
// most one a key per throttleNote).
func (t *throttle) wait(source string, now time.Time) (wait time.Duration, noteKey string, noteCount int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.sources[source]
	var key string
	var over *bucket
	switch {
	case b != nil && b.level(now, sourceBurst, sourceRefill) < 1:
		wait = time.Duration((1 - b.level(now, sourceBurst, sourceRefill)) * float64(sourceRefill))
		key, over = source, b
	case t.global.level(now, globalBurst, globalRefill) < 1:
		wait = time.Duration((1 - t.global.level(now, globalBurst, globalRefill)) * float64(globalRefill))
		key, over = globalSource, &t.global
	default:
		return 0, "", 0
	}
	over.refused++
	if now.Sub(over.noted) >= throttleNote {
		noteKey, noteCount = key, over.refused
		over.refused, over.noted = 0, now
	}
	return max(wait, time.Second), noteKey, noteCount
}

// failed takes one attempt from source's bucket and the console-wide one.
func (t *throttle) failed(source string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.sources[source]
	if b == nil {
		if len(t.sources) >= maxSources {
			t.forget(now)
		}
		b = &bucket{tokens: sourceBurst, t: now}
		t.sources[source] = b
	}
	b.tokens, b.t = b.level(now, sourceBurst, sourceRefill)-1, now
	t.global.tokens, t.global.t = t.global.level(now, globalBurst, globalRefill)-1, now
}

// forget drops the sources whose buckets are full again, and when none
// is, every one of them: the console-wide bucket still bounds them.
func (t *throttle) forget(now time.Time) {
	for k, b := range t.sources {
		if b.level(now, sourceBurst, sourceRefill) >= sourceBurst {
			delete(t.sources, k)
		}
	}
	if len(t.sources) >= maxSources {
		clear(t.sources)
	}
}
