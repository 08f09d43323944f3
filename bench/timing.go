package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/registry"
)

// timedStore is the registry the service runs on: the run's store, with
// every Reserve timed into the current samples, if any. The wrapper costs
// two clock reads and, while recording, one mutex-guarded append after
// the call; it is in the idempotent variants' path only.
type timedStore struct {
	registry.Store
	into atomic.Pointer[samples] // nil: not recording
}

func (s *timedStore) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	rec, created, err := s.Store.Reserve(ctx, c)
	d := time.Since(start)
	if into := s.into.Load(); into != nil && err == nil {
		into.add(d)
	}
	return rec, created, err
}

// record makes Reserve durations go to into until the returned function
// is called.
func (s *timedStore) record(into *samples) (stop func()) {
	s.into.Store(into)
	return func() { s.into.Store(nil) }
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
