package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// openWindow is what one open-loop stretch of a cell did.
type openWindow struct {
	// window holds the requests answered and the time from the first
	// scheduled send to the last answer.
	window
	// scheduled is how many requests the schedule held; late how many of
	// them found every one of the outstanding slots busy at their
	// scheduled time and were sent when a slot freed (their latency still
	// counts from the scheduled time).
	scheduled, late int64
	// sojourn is the sum of every answered request's latency from its
	// scheduled send time: ÷ elapsed it is the mean number in the system.
	sojourn time.Duration
}

// scheduleAt returns the scheduled send time of request i of a schedule
// at rate per second starting at start: start + i/rate, computed from i
// so that rounding does not drift.
func scheduleAt(start time.Time, rate float64, i int64) time.Time {
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// driveOpen sends requests at a fixed rate per second for d, whatever the
// answers do: request i is scheduled at start + i/rate. At most
// outstanding requests are in flight; a request whose scheduled time
// finds them all busy is counted late and sent as soon as one frees,
// and the ones after it keep their own scheduled times. Every answered
// request's latency is measured from its scheduled send time, not from
// when it was sent (so a stalled server is not hidden by the requests it
// kept from being sent: no coordinated omission), and goes to lat if it
// is not nil. seq numbers the requests. The first error stops the
// schedule and is returned once the requests in flight have ended. ctx
// governs the requests. rate and outstanding must be positive.
func driveOpen(ctx context.Context, rate float64, d time.Duration, outstanding int, seq *atomic.Int64, do op, lat *samples) (openWindow, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		w        openWindow
		inFlight atomic.Int64
		done     atomic.Int64
		mu       sync.Mutex // guards w.sojourn
		wg       sync.WaitGroup
	)
	slots := make(chan time.Time)
	for range outstanding {
		wg.Go(func() {
			for at := range slots {
				if ctx.Err() == nil {
					if err := do(ctx, seq.Add(1)); err != nil {
						cancel(err)
					} else {
						l := time.Since(at)
						if lat != nil {
							lat.add(l)
						}
						mu.Lock()
						w.sojourn += l
						mu.Unlock()
						done.Add(1)
					}
				}
				inFlight.Add(-1)
			}
		})
	}
	start := time.Now()
	end := start.Add(d)
	timer := time.NewTimer(0)
	<-timer.C
schedule:
	for i := int64(0); ; i++ {
		at := scheduleAt(start, rate, i)
		if !at.Before(end) {
			break
		}
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break schedule
			}
		}
		// Only this loop adds to inFlight, so the check cannot go stale
		// the wrong way: a slot can only free up meanwhile.
		if inFlight.Load() >= int64(outstanding) {
			w.late++
		}
		inFlight.Add(1)
		select {
		case slots <- at:
			w.scheduled++
		case <-ctx.Done():
			inFlight.Add(-1)
			break schedule
		}
	}
	close(slots)
	wg.Wait()
	w.requests, w.elapsed = done.Load(), time.Since(start)
	return w, context.Cause(ctx)
}

// timedOp returns do with the latency of every successful call added to
// lat and to *sojourn (under lat's lock): the closed-loop counterpart of
// driveOpen's measurement, where a request is sent the moment it is
// scheduled.
func timedOp(do op, lat *samples, sojourn *time.Duration) op {
	return func(ctx context.Context, n int64) error {
		start := time.Now()
		if err := do(ctx, n); err != nil {
			return err
		}
		l := time.Since(start)
		lat.mu.Lock()
		lat.d = append(lat.d, l)
		*sojourn += l
		lat.mu.Unlock()
		return nil
	}
}
