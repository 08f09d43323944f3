package check

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// checkLoad: LoadKeys keys, each sent twice in a row through Concurrency
// workers, so a key's two requests are usually in flight together; keys
// without a 2xx answer are then retried patiently. Every key must cause
// exactly one resource and get no answer other than 2xx or retry-later;
// the count, if any, must grow by LoadKeys. It reports throughput and
// latency percentiles of the stream.
func checkLoad(ctx context.Context, r *runner, res *Result) {
	keys := r.cfg.LoadKeys
	if keys == 0 {
		res.skip("no load keys (--load 0)")
		return
	}
	before, err := r.count(ctx)
	if err != nil {
		res.fail("cannot read the count before: %v", err)
		return
	}
	type keyed struct {
		key  string
		body []byte
	}
	ks := make([]keyed, keys)
	for i := range ks {
		ks[i] = keyed{newKey(), r.payload(newUnique(), VariantSame)}
	}
	answers := make([]exchange, 2*keys) // answers[2i], answers[2i+1]: key i
	jobs := make(chan int)
	var done atomic.Int64
	step := max(1, len(answers)/10)
	workers := min(r.cfg.Concurrency, len(answers))
	r.logf("load: %d keys, each sent twice, %d requests in flight", keys, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				k := ks[j/2]
				answers[j] = r.send(ctx, k.key, k.body, r.cfg.Header, nil)
				if n := done.Add(1); n%int64(step) == 0 {
					r.logf("load: %d/%d requests", n, len(answers))
				}
			}
		})
	}
	for j := range answers {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	res.tally(answers...)

	fig := &LoadFigures{Keys: keys, Requests: len(answers), Concurrency: workers,
		ThroughputRPS: float64(len(answers)) / elapsed.Seconds()}
	lat := make([]time.Duration, len(answers))
	for i, e := range answers {
		lat[i] = e.latency()
	}
	slices.Sort(lat)
	fig.P50MS, fig.P99MS, fig.MaxMS = ms(lat[len(lat)/2]), ms(lat[(len(lat)*99)/100]), ms(lat[len(lat)-1])
	res.Load = fig

	var unexpected []exchange
	for i, k := range ks {
		ids, odd := r.sortAnswers(answers[2*i : 2*i+2])
		unexpected = append(unexpected, odd...)
		if len(ids) == 0 {
			final := r.settle(ctx, k.key, k.body, r.cfg.Header)
			if final.accepted() {
				ids = append(ids, r.resource(final))
			} else {
				fig.UnsettledKeys++
				res.note("key %s: no answer accepted it, the last %s", k.key, final)
			}
		}
		if len(ids) > 1 {
			if fig.DuplicateKeys < 3 {
				res.note("key %s: %s", k.key, list(ids, 5))
			}
			fig.DuplicateKeys++
		}
	}
	res.note("%d requests in %s: %.0f requests/s, latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; answers %s",
		len(answers), elapsed.Round(time.Millisecond), fig.ThroughputRPS, fig.P50MS, fig.P99MS, fig.MaxMS, statusList(res.Statuses))
	switch {
	case fig.DuplicateKeys > 0:
		res.fail("%d of %d keys created more than one resource", fig.DuplicateKeys, keys)
	case fig.UnsettledKeys > 0:
		res.fail("%d of %d keys were never accepted", fig.UnsettledKeys, keys)
	case len(unexpected) > 0:
		res.fail("%d answers neither 2xx nor retry-later (409, 425, 429, 503)", len(unexpected))
		res.note("first of them: %s", unexpected[0])
	default:
		if msg := r.growth(ctx, before, keys); msg != "" {
			res.fail("%s", msg)
			return
		}
		res.pass("%d keys, one resource each, %.0f requests/s at %d in flight (p99 %.1f ms)", keys, fig.ThroughputRPS, workers, fig.P99MS)
	}
}
