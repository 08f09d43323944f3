package check

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
)

// replays is how many times the replay scenario retries its first request.
const replays = 2

// first sends the first request of a scenario's key, as a patient client
// would (see settle), and fails res unless it was accepted: the
// properties are about retrying a request the API accepts.
func (r *runner) first(ctx context.Context, res *Result, key string, body []byte, cred http.Header) (exchange, bool) {
	e := r.settle(ctx, key, body, cred)
	if !e.accepted() {
		res.fail("cannot judge: the first request was not accepted (%s); check the URL, --body and --header", e.statusText())
		res.note("first answer: %s", e)
		return e, false
	}
	return e, true
}

// checkReplay: the first request, then replays with the same key and
// payload, each of which must answer the first's status, Location and
// body bytes.
func checkReplay(ctx context.Context, r *runner, res *Result) {
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	first, ok := r.first(ctx, res, key, body, r.cfg.Header)
	if !ok {
		return
	}
	res.tally(first)
	for i := 1; i <= replays; i++ {
		again := r.send(ctx, key, body, r.cfg.Header, nil)
		res.tally(again)
		switch {
		case again.Err != nil:
			res.fail("replay %d failed: %v", i, again.Err)
		case again.Status != first.Status:
			res.fail("replay %d answered %s, the first request %d", i, again.statusText(), first.Status)
		case !bytes.Equal(again.Body, first.Body):
			res.fail("replay %d changed the body: %s", i, bodyDiff(first.Body, again.Body))
		case again.Header.Get("Location") != first.Header.Get("Location"):
			res.fail("replay %d changed the Location from %q to %q", i, first.Header.Get("Location"), again.Header.Get("Location"))
		default:
			continue
		}
		res.note("first answer: %s", first)
		res.note("replay %d: %s", i, again)
		return
	}
	res.pass("%d replays answered %d with the first answer's %d-byte body (%s)", replays, first.Status, len(first.Body), r.resource(first))
}

// bodyDiff says where two bodies first differ.
func bodyDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-24)
	return fmt.Sprintf("%d bytes, then %d; they differ from byte %d: first %s, replay %s",
		len(a), len(b), i, excerpt(a[from:min(len(a), i+40)]), excerpt(b[from:min(len(b), i+40)]))
}

// checkConflict: the first request, then the same key with the changed
// payload, which must be refused (4xx) without creating a resource.
func checkConflict(ctx context.Context, r *runner, res *Result) {
	if r.cfg.Body == "" || render(r.cfg.Body, "", VariantSame) == render(r.cfg.Body, "", VariantChanged) {
		res.skip("the body template has no {{variant}}, so there is no changed payload to send")
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
	changed := r.send(ctx, key, r.payload(unique, VariantChanged), r.cfg.Header, nil)
	res.tally(first, changed)
	if r.refusesOther(ctx, res, before, first, changed, "changed payload") {
		res.pass("changed payload refused with %s", changed.statusText())
	}
}

// refusesOther judges other, the answer to a request that differs from
// first's (named what) under first's key: it must be refused — a 4xx
// that created nothing (CountURL grew by first's one resource alone) —
// never answered with first's outcome nor executed. It fails res with
// the evidence otherwise.
func (r *runner) refusesOther(ctx context.Context, res *Result, before int, first, other exchange, what string) bool {
	switch {
	case other.accepted() && (bytes.Equal(other.Body, first.Body) || r.resource(other) == r.resource(first)):
		res.fail("%s replayed the first outcome: %d with %s", what, other.Status, r.resource(other))
	case other.accepted():
		res.fail("%s accepted: %d created %s besides the first's %s", what, other.Status, r.resource(other), r.resource(first))
	case !other.refused():
		res.fail("%s answered %s; a refusal is a 4xx", what, other.statusText())
	default:
		msg := r.growth(ctx, before, 1)
		if msg == "" {
			return true
		}
		res.fail("%s refused with %s, but %s", what, other.statusText(), msg)
	}
	res.note("first answer: %s", first)
	res.note("%s's answer: %s", what, other)
	return false
}
