package check

import (
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// The scenarios of ProfileIETF: the answers the IETF draft names and the
// RFC 9457 shape of refusals.

// checkMissingKey: a request without the key header is refused 400 (the
// draft's answer where the key is required) and creates nothing.
func checkMissingKey(ctx context.Context, r *runner, res *Result) {
	before, err := r.count(ctx)
	if err != nil {
		res.fail("cannot read the count before: %v", err)
		return
	}
	e := r.send(ctx, "", r.payload(newUnique(), VariantSame), r.cfg.Header, nil)
	res.tally(e)
	switch {
	case e.accepted():
		res.fail("a request without %s was executed (%d, %s): its retry would run it again", r.cfg.KeyHeader, e.Status, r.resource(e))
	case e.Status != http.StatusBadRequest:
		res.fail("a request without %s answered %s; the draft's answer is 400", r.cfg.KeyHeader, e.statusText())
	default:
		if msg := r.growth(ctx, before, 0); msg != "" {
			res.fail("refused with %s, but %s", e.statusText(), msg)
			break
		}
		res.pass("a request without %s was refused with %s", r.cfg.KeyHeader, e.statusText())
		return
	}
	res.note("answer: %s", e)
}

// checkProblemDetails: the refusals of a missing key and of a reused key
// with another payload are RFC 9457 problem details: media type
// application/problem+json, a JSON object with a type or a title, and a
// status member, when present, equal to the answer's status.
func checkProblemDetails(ctx context.Context, r *runner, res *Result) {
	refusals := []exchange{r.send(ctx, "", r.payload(newUnique(), VariantSame), r.cfg.Header, nil)}
	if r.hasVariant() {
		key, unique := newKey(), newUnique()
		first, ok := r.first(ctx, res, key, r.payload(unique, VariantSame), r.cfg.Header)
		if !ok {
			return
		}
		refusals = append(refusals, r.send(ctx, key, r.payload(unique, VariantChanged), r.cfg.Header, nil))
		res.tally(first)
	}
	res.tally(refusals...)
	checked := 0
	for _, e := range refusals {
		if !e.refused() {
			continue // the other scenarios judge the status itself
		}
		checked++
		if why := notProblem(e); why != "" {
			res.fail("the %s refusal is not problem details: %s", e.statusText(), why)
			res.note("answer: %s (Content-Type %q)", e, e.Header.Get("Content-Type"))
			return
		}
	}
	if checked == 0 {
		res.skip("no refusal to judge: the API refused neither a missing key nor a changed payload")
		return
	}
	res.pass("%d refusals are application/problem+json with a status that matches", checked)
}

// notProblem says why e is not RFC 9457 problem details, or "".
func notProblem(e exchange) string {
	mt, _, err := mime.ParseMediaType(e.Header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return "its Content-Type is " + strconv.Quote(e.Header.Get("Content-Type"))
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(e.Body, &p); err != nil {
		return "its body is not a JSON object"
	}
	if p["type"] == nil && p["title"] == nil {
		return "it has neither a type nor a title"
	}
	if s, ok := p["status"]; ok && string(s) != strconv.Itoa(e.Status) {
		return "its status member " + string(s) + " is not the answer's " + strconv.Itoa(e.Status)
	}
	return ""
}

// checkConflict422: a key reused with another payload is refused 422.
func checkConflict422(ctx context.Context, r *runner, res *Result) {
	if !r.hasVariant() {
		res.skip("the body template has no {{variant}}, so there is no changed payload to send")
		return
	}
	key, unique := newKey(), newUnique()
	first, ok := r.first(ctx, res, key, r.payload(unique, VariantSame), r.cfg.Header)
	if !ok {
		return
	}
	changed := r.send(ctx, key, r.payload(unique, VariantChanged), r.cfg.Header, nil)
	res.tally(first, changed)
	if changed.Status != http.StatusUnprocessableEntity {
		res.fail("a key reused with another payload answered %s; the draft's answer is 422", changed.statusText())
		res.note("answer: %s", changed)
		return
	}
	res.pass("a key reused with another payload was refused with %s", changed.statusText())
}

// checkInFlight409: duplicates of a request still in flight are either
// told 409 — problem details with a Retry-After — or answered with the
// first request's own outcome once it is known (waiting for it is
// allowed). Rounds repeat until one catches the original in flight.
func checkInFlight409(ctx context.Context, r *runner, res *Result) {
	for round := 1; round <= inFlightRounds; round++ {
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
			release()
		})
		for i := range dups {
			wg.Go(func() {
				<-written
				dups[i] = r.send(ctx, key, body, r.cfg.Header, nil)
			})
		}
		wg.Wait()
		res.tally(append(dups, orig)...)
		// Any of them may have been overtaken: the one told 409 is not
		// always the one sent first.
		caught, resource := false, ""
		for _, d := range append(dups, orig) {
			switch {
			case d.Status == http.StatusConflict:
				caught = true
				if why := notProblem(d); why != "" {
					res.fail("a request in flight got 409 that is not problem details: %s", why)
					res.note("answer: %s", d)
					return
				}
				if _, err := strconv.Atoi(d.Header.Get("Retry-After")); err != nil {
					res.fail("a request in flight got 409 without a Retry-After in seconds (%q)", d.Header.Get("Retry-After"))
					res.note("answer: %s", d)
					return
				}
			case d.accepted():
				if resource != "" && r.resource(d) != resource {
					res.fail("duplicates in flight created %s and %s", resource, r.resource(d))
					return
				}
				resource = r.resource(d)
				caught = caught || (orig.Err == nil && d.Answered.Before(orig.Answered))
			default:
				res.fail("a request in flight answered %s; the draft's answer is 409, or the first request's outcome", d.statusText())
				res.note("answer: %s", d)
				return
			}
		}
		if caught {
			var got []string
			for _, d := range dups {
				got = append(got, d.statusText())
			}
			res.pass("duplicates in flight answered %s", strings.Join(got, ", "))
			return
		}
	}
	res.skip("in %d rounds no duplicate caught the original in flight (none was told 409 nor answered before it)", inFlightRounds)
}

// hasVariant reports whether the body template has a changed payload.
func (r *runner) hasVariant() bool {
	return r.cfg.Body != "" && render(r.cfg.Body, "", VariantSame) != render(r.cfg.Body, "", VariantChanged)
}
