package bench

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// timedStore is the registry the services run on: the run's store, with
// every Reserve timed into the current samples, if any, and the
// one-transaction server's lookups and ExecuteOnce calls timed per
// request (timeAcceptance). The wrapper costs two clock reads per timed
// call and, while recording, one mutex-guarded append per request; it is
// in the idempotent variants' path only. On the 2-core development
// machine a clock read took about 0.4 µs and the append 0.06–0.24 µs with
// 64 goroutines appending at once (BenchmarkSamplesAdd), against some
// 350 µs of CPU per request of the fastest variant (replay, about 5600/s
// on 2 cores): well under 1 %, so the samples are not kept per client.
type timedStore struct {
	registry.Store
	into  atomic.Pointer[samples]     // nil: not recording
	parts atomic.Pointer[acceptParts] // nil: acceptance not split
}

// acceptParts splits the one-transaction acceptance time: the scope
// lookups (Get) and the rest (ExecuteOnce's own part: the record insert,
// the durable COMMIT, a wait for a concurrent winner).
type acceptParts struct{ lookup, rest samples }

func (s *timedStore) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	rec, created, err := s.Store.Reserve(ctx, c)
	d := time.Since(start)
	if into := s.into.Load(); into != nil && err == nil {
		into.add(d)
	}
	return rec, created, err
}

// acceptanceKey is the context key of a request's *acceptance.
type acceptanceKey struct{}

// acceptance accumulates the time one request of the one-transaction
// server spends in the registry outside its handler: the lookup and
// ExecuteOnce's own part (record insert, durable commit, a wait for a
// concurrent winner; the pool connection is taken at the handler's first
// statement, so waiting for it is handler time unless the handler ran
// none). A request's calls run one after the
// other on its goroutine, so it needs no lock.
type acceptance struct{ d, lookup time.Duration }

// timeAcceptance wraps the one-transaction server's handler: every
// request gets an acceptance in its context, and when it has been
// answered its total goes to the current samples, if any and if the
// request reached the registry.
func (s *timedStore) timeAcceptance(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := &acceptance{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), acceptanceKey{}, a)))
		if into := s.into.Load(); into != nil && a.d > 0 {
			into.add(a.d)
		}
		if parts := s.parts.Load(); parts != nil && a.d > 0 {
			parts.lookup.add(a.lookup)
			parts.rest.add(a.d - a.lookup)
		}
	})
}

func (s *timedStore) Get(ctx context.Context, scope idem.ScopeHash) (registry.Record, error) {
	start := time.Now()
	rec, err := s.Store.Get(ctx, scope)
	if a, ok := ctx.Value(acceptanceKey{}).(*acceptance); ok {
		d := time.Since(start)
		a.d += d
		a.lookup += d
	}
	return rec, err
}

func (s *timedStore) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	a, timed := ctx.Value(acceptanceKey{}).(*acceptance)
	if !timed {
		return s.Store.ExecuteOnce(ctx, c, fn)
	}
	var inFn time.Duration
	start := time.Now()
	res, err := s.Store.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		t := time.Now()
		defer func() { inFn += time.Since(t) }()
		return fn(ctx, tx, rec)
	})
	a.d += time.Since(start) - inFn
	return res, err
}

// record makes Reserve durations, and the acceptance times of the
// one-transaction server's requests, go to into until the returned
// function is called.
func (s *timedStore) record(into *samples) (stop func()) {
	s.into.Store(into)
	return func() { s.into.Store(nil) }
}

// recordParts makes the one-transaction acceptance times, split into
// lookup and the rest, go to into until the returned function is called.
func (s *timedStore) recordParts(into *acceptParts) (stop func()) {
	s.parts.Store(into)
	return func() { s.parts.Store(nil) }
}

// samples collects durations; safe for concurrent use.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// quantile returns the q-quantile (nearest rank, 0 < q ≤ 1) in
// milliseconds and the number of samples; 0, 0 without samples.
func (s *samples) quantile(q float64) (ms float64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return 0, 0
	}
	slices.Sort(s.d)
	rank := max(1, int(math.Ceil(q*float64(len(s.d)))))
	return float64(s.d[rank-1]) / float64(time.Millisecond), len(s.d)
}

// median returns the median of v (the mean of the middle two for an even
// count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
