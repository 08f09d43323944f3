package check

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"time"
)

// checkScoping: the first credential's request, then the same key and
// payload with the second credential, which must not get the first
// credential's resource or answer: a resource of its own or a refusal.
func checkScoping(ctx context.Context, r *runner, res *Result) {
	if r.cfg.AltHeader == nil {
		res.skip("no second credential (--alt-header): scoping cannot be checked")
		return
	}
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	first, ok := r.first(ctx, res, key, body, r.cfg.Header)
	if !ok {
		return
	}
	alt := r.settle(ctx, key, body, r.alt)
	res.tally(first, alt)
	switch {
	case alt.Status == http.StatusUnauthorized || alt.Status == http.StatusForbidden:
		res.fail("cannot judge: the second credential was refused with %s; --alt-header must authenticate another principal", alt.statusText())
	case alt.accepted() && (bytes.Equal(alt.Body, first.Body) || r.resource(alt) == r.resource(first)):
		res.fail("the second credential reusing the key got the first credential's outcome: %d with %s", alt.Status, r.resource(alt))
	case alt.accepted():
		res.pass("the second credential reusing the key got a resource of its own (%s, the first's %s)", r.resource(alt), r.resource(first))
		return
	case alt.refused():
		res.pass("the second credential reusing the key was refused with %s, without the first credential's outcome", alt.statusText())
		return
	default:
		res.fail("the second credential reusing the key answered %s", alt.statusText())
	}
	res.note("first credential: %s", first)
	res.note("second credential: %s", alt)
}

// dateGap is how long the hygiene scenario waits before its replay, so
// that a fresh Date (one-second resolution, server clock) differs from
// the first answer's.
const dateGap = 1100 * time.Millisecond

// checkHygiene: the first request, a pause of dateGap, then a replay,
// which must carry a later Date than the first answer and none of its
// Set-Cookie lines.
func checkHygiene(ctx context.Context, r *runner, res *Result) {
	key, body := newKey(), r.payload(newUnique(), VariantSame)
	first, ok := r.first(ctx, res, key, body, r.cfg.Header)
	if !ok {
		return
	}
	r.logf("hygiene: waiting %s so that a fresh Date differs from the first answer's", dateGap)
	t := time.NewTimer(dateGap)
	select {
	case <-ctx.Done():
		t.Stop()
		res.fail("interrupted while waiting")
		return
	case <-t.C:
	}
	again := r.send(ctx, key, body, r.cfg.Header, nil)
	res.tally(first, again)
	if !again.accepted() {
		res.fail("cannot judge: the replay was not accepted (%s)", again.statusText())
		res.note("replay: %s", again)
		return
	}
	cookies := first.Header.Values("Set-Cookie")
	for _, c := range again.Header.Values("Set-Cookie") {
		if slices.Contains(cookies, c) {
			res.fail("the replay repeats the first answer's Set-Cookie %q", c)
		}
	}
	d1, err1 := http.ParseTime(first.Header.Get("Date"))
	d2, err2 := http.ParseTime(again.Header.Get("Date"))
	switch {
	case err1 == nil && err2 == nil && !d2.After(d1):
		res.fail("the replay's Date %q is not later than the first answer's %q, %s later: it was replayed, not fresh",
			again.Header.Get("Date"), first.Header.Get("Date"), dateGap)
	case again.Header.Get("Date") != "" && err2 != nil:
		res.fail("the replay's Date %q is not an HTTP date", again.Header.Get("Date"))
	}
	if res.Status == Failed {
		res.note("first answer's Date %q, Set-Cookie %q", first.Header.Get("Date"), cookies)
		res.note("replay's Date %q, Set-Cookie %q", again.Header.Get("Date"), again.Header.Values("Set-Cookie"))
		return
	}
	what := "a fresh Date"
	if err1 != nil || err2 != nil {
		what = "no Date to compare"
	}
	if len(cookies) == 0 {
		res.pass("%s; the first answer set no cookie, so none could leak", what)
	} else {
		res.pass("%s; none of the first answer's %d Set-Cookie lines repeated", what, len(cookies))
	}
}
