package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// op performs one request of a variant; n is unique within the run.
type op func(ctx context.Context, n int64) error

// window is what one timed (or warm-up) stretch of a cell did.
type window struct {
	requests int64
	elapsed  time.Duration
}

func (w window) rps() float64 { return float64(w.requests) / w.elapsed.Seconds() }

// drive runs do from clients goroutines, each issuing its next request as
// soon as its last one is answered, until d has passed; requests started
// before then are waited for and counted, and elapsed runs until the last
// of them finished. Every client issues at least one request. seq numbers
// the requests. The first error stops every client and is returned. ctx
// governs the requests.
func drive(ctx context.Context, clients int, d time.Duration, seq *atomic.Int64, do op) (window, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := do(ctx, seq.Add(1)); err != nil {
					cancel(err)
					return
				}
				done.Add(1)
				if !time.Now().Before(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	w := window{requests: done.Load(), elapsed: time.Since(start)}
	if err := context.Cause(ctx); err != nil {
		return w, err
	}
	return w, nil
}
