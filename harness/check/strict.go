package check

import (
	"bytes"
	"context"
	"time"
)

// The scenarios of ProfileStrict beyond the IETF ones: what tells a
// strict API from a merely correct one. Each applies only when the run
// is told what the API declares (the {{lexical}} placeholder,
// Config.Expiry, Config.FaultHeader); otherwise it is skipped, never
// passed.

// Values of {{lexical}}: the same number written two ways.
const (
	LexicalFirst = "10.0"
	LexicalRetry = "10"
)

// checkLexicalNumber: the template marks, with {{lexical}}, a member
// whose scale the API declares significant; the first request carries
// 10.0, its retry with the same key 10. They are different requests: the
// retry must be refused (a 4xx that creates nothing), never answered with
// the first's outcome — an API that canonicalises numbers away (JCS does)
// replays it.
func checkLexicalNumber(ctx context.Context, r *runner, res *Result) {
	if !bytes.Contains([]byte(r.cfg.Body), []byte(placeLexical)) {
		res.skip("the body template marks no member with {{lexical}} (a number whose scale the API declares significant)")
		return
	}
	before, err := r.count(ctx)
	if err != nil {
		res.fail("cannot read the count before: %v", err)
		return
	}
	key, unique := newKey(), newUnique()
	first, ok := r.first(ctx, res, key, r.payload(unique, VariantSame), r.cfg.Header)
	if !ok {
		return
	}
	retry := r.send(ctx, key, []byte(renderLexical(r.cfg.Body, unique, VariantSame, LexicalRetry)), r.cfg.Header, nil)
	res.tally(first, retry)
	if r.refusesOther(ctx, res, before, first, retry, "the retry with "+LexicalRetry) {
		res.pass("%s and %s are different requests: the retry was refused with %s", LexicalFirst, LexicalRetry, retry.statusText())
	}
}

// checkExpiry: with Config.Expiry (how long the API documents that it
// keeps a key), a retry sent after that time must not cause a second
// effect: it is refused (a tombstone: idem answers 409 KEY_RETIRED) or
// still answered with the first outcome. An API that forgets the key and
// executes the request again fails.
func checkExpiry(ctx context.Context, r *runner, res *Result) {
	if r.cfg.Expiry <= 0 {
		res.skip("no --expiry: the key's documented lifetime is not known")
		return
	}
	before, err := r.count(ctx)
	if err != nil {
		res.fail("cannot read the count before: %v", err)
		return
	}
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	first, ok := r.first(ctx, res, key, body, r.cfg.Header)
	if !ok {
		return
	}
	wait := r.cfg.Expiry + time.Second // past the expiry, whatever the clocks' rounding
	r.logf("strict-expiry: waiting %s, past the key's documented expiry", wait)
	t := time.NewTimer(wait) // the property is about time passing: this wait is the scenario
	select {
	case <-ctx.Done():
		t.Stop()
		res.fail("interrupted while waiting for the expiry")
		return
	case <-t.C:
	}
	retry := r.settle(ctx, key, body, r.cfg.Header)
	res.tally(first, retry)
	switch {
	case retry.accepted() && r.resource(retry) != r.resource(first):
		res.fail("a retry after the expiry was executed again: %s besides the first's %s", r.resource(retry), r.resource(first))
	case retry.accepted() || retry.refused():
		if msg := r.growth(ctx, before, 1); msg != "" {
			res.fail("the retry after the expiry answered %s, but %s", retry.statusText(), msg)
			break
		}
		res.pass("a retry %s after the first answered %s and caused nothing new", wait, retry.statusText())
		return
	default:
		res.fail("the retry after the expiry answered %s", retry.statusText())
	}
	res.note("first answer: %s", first)
	res.note("retry's answer: %s", retry)
}

// check5xxReplay: with Config.FaultHeader (headers that make the API
// fail the request with a 5xx, an option some APIs expose for tests), the
// first request is sent with them and must answer 5xx; its retry, without
// them, must then be executed — a 5xx says nothing was decided, and an
// API that stored and replays it keeps the client from ever succeeding.
func check5xxReplay(ctx context.Context, r *runner, res *Result) {
	if len(r.cfg.FaultHeader) == 0 {
		res.skip("no --fault-header: the API's way to fail a request on purpose is not known")
		return
	}
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	faulty := r.cfg.Header.Clone()
	for name, values := range r.cfg.FaultHeader {
		faulty[name] = values
	}
	failed := r.send(ctx, key, body, faulty, nil)
	if failed.Err != nil || failed.Status < 500 {
		res.fail("cannot judge: the request with the fault header answered %s, not a 5xx", failed.statusText())
		res.note("answer: %s", failed)
		return
	}
	// One retry, at once: a patient client's further retries could outlast
	// a store that forgets keys, and hide the replay.
	retry := r.send(ctx, key, body, r.cfg.Header, nil)
	res.tally(failed, retry)
	switch {
	case retry.accepted():
		res.pass("the %s was not replayed: the retry was executed (%d, %s)", failed.statusText(), retry.Status, r.resource(retry))
		return
	case retry.Status == failed.Status && bytes.Equal(retry.Body, failed.Body):
		res.fail("the %s was stored and replayed to the retry", failed.statusText())
	default:
		res.fail("the retry after a %s answered %s, not an execution", failed.statusText(), retry.statusText())
	}
	res.note("failed answer: %s", failed)
	res.note("retry's answer: %s", retry)
}
