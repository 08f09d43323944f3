package check

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Bounds of the in-flight scenario.
const (
	inFlightRounds     = 10 // attempts to catch an original in flight
	inFlightDuplicates = 3  // duplicates sent once the original is written
)

// oneEffect judges all the answers to one key (what says which requests
// they were): one resource among the 2xx answers, no answer other than
// 2xx or retry-later, and a count grown by one since before. It fails res
// and returns false otherwise. ctx governs the count request.
func (r *runner) oneEffect(ctx context.Context, res *Result, what string, before int, answers []exchange) bool {
	resources, unexpected := r.sortAnswers(answers)
	switch {
	case len(resources) > 1:
		res.fail("%s created %d resources for one key: %s", what, len(resources), list(resources, 5))
	case len(resources) == 0:
		res.fail("%s: no answer accepted the key, even after retrying", what)
		res.note("last answer: %s", answers[len(answers)-1])
	case len(unexpected) > 0:
		res.fail("%s: %d answers neither 2xx nor retry-later (409, 425, 429, 503)", what, len(unexpected))
		res.note("first of them: %s", unexpected[0])
	default:
		if msg := r.growth(ctx, before, 1); msg != "" {
			res.fail("%s: %s", what, msg)
			return false
		}
		return true
	}
	return false
}

// sortAnswers returns the distinct resources of the 2xx answers, in
// order of first appearance, and the answers that are neither 2xx nor
// retry-later.
func (r *runner) sortAnswers(answers []exchange) (resources []string, unexpected []exchange) {
	for _, e := range answers {
		switch {
		case e.accepted():
			if id := r.resource(e); !slices.Contains(resources, id) {
				resources = append(resources, id)
			}
		case !e.retryLater():
			unexpected = append(unexpected, e)
		}
	}
	return resources, unexpected
}

// checkConcurrent: Concurrency identical requests with one key, released
// at once, then a patient retry to learn the outcome; one resource.
func checkConcurrent(ctx context.Context, r *runner, res *Result) {
	before, err := r.count(ctx)
	if err != nil {
		res.fail("cannot read the count before: %v", err)
		return
	}
	n := r.cfg.Concurrency
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	answers := make([]exchange, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = r.send(ctx, key, body, r.cfg.Header, nil)
		})
	}
	r.logf("concurrent: %d identical requests with one key", n)
	close(start)
	wg.Wait()
	res.tally(answers...)
	final := r.settle(ctx, key, body, r.cfg.Header)
	res.note("answers: %s; then a retry: %s", statusList(res.Statuses), final.statusText())
	if r.oneEffect(ctx, res, strconv.Itoa(n)+" identical requests at once", before, append(answers, final)) {
		res.pass("%d identical requests at once caused one resource (%s)", n, r.resource(final))
	}
}

// checkInFlight: an original request, and duplicates sent as soon as it
// is written, before it is answered. A round in which some duplicate was
// told to retry later, or was answered before the original, caught the
// original in flight; rounds repeat until one does. Each round must cause
// one resource.
func checkInFlight(ctx context.Context, r *runner, res *Result) {
	for round := 1; round <= inFlightRounds; round++ {
		before, err := r.count(ctx)
		if err != nil {
			res.fail("cannot read the count before: %v", err)
			return
		}
		key, body := newKey(), r.payload(newUnique(), VariantSame)
		var (
			orig    exchange
			dups    = make([]exchange, inFlightDuplicates)
			written = make(chan struct{})
			once    sync.Once
			wg      sync.WaitGroup
		)
		release := func() { once.Do(func() { close(written) }) }
		wg.Go(func() {
			orig = r.send(ctx, key, body, r.cfg.Header, release)
			release() // also when the request failed before it was written
		})
		for i := range dups {
			wg.Go(func() {
				<-written
				dups[i] = r.send(ctx, key, body, r.cfg.Header, nil)
			})
		}
		wg.Wait()
		caught := false
		for _, d := range dups {
			caught = caught || d.retryLater() || (d.Err == nil && orig.Err == nil && d.Answered.Before(orig.Answered))
		}
		res.tally(append(dups, orig)...)
		final := r.settle(ctx, key, body, r.cfg.Header)
		var got []string
		for _, d := range dups {
			got = append(got, d.statusText())
		}
		res.note("round %d: original %s, duplicates %s, then a retry %s", round, orig.statusText(), strings.Join(got, ", "), final.statusText())
		if !r.oneEffect(ctx, res, "an original and "+strconv.Itoa(inFlightDuplicates)+" duplicates sent while it was in flight", before, append(dups, orig, final)) {
			return
		}
		if caught {
			res.pass("duplicates sent while the original was in flight answered %s; one resource (%s)", strings.Join(got, ", "), r.resource(final))
			return
		}
	}
	res.skip("in %d rounds the API answered every original before any duplicate was told to wait or answered; in-flight handling was not observed (no violation either)", inFlightRounds)
}
