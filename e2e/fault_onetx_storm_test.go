package e2e

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

// TestOneTxStorm (V1: concurrency, one-transaction style): the storm of
// TestFaultStorm — 100 concurrent requests with one key and one payload in
// equivalent byte forms, plus one with another amount, all at once —
// against idem serve --one-transaction. There every duplicate runs the
// handler too and its record insert loses, so the answers differ from
// the two-phase style: no request gets 409 IN_PROGRESS (nothing is in
// flight in the registry); every request with the payload gets 201 — one
// executed, the others byte-identical replays — and the odd one 422
// PAYLOAD_CONFLICT (or, if it won, every other one gets 422). The losers'
// writes are rolled back: the database holds one payment and one outbox
// row per storm. A request may also fail closed (503 STORE_UNAVAILABLE)
// on an overloaded machine, as in TestFaultStorm; sequential retries then
// settle it. The long form repeats it with more keys.
// Proves threat:concurrent-duplicates (docs/threat-model.md).
func TestOneTxStorm(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		s := f.serve("A", nil, true, oneTxFlag)
		rounds := pick(1, 5)
		unavailable := 0
		for round := range rounds {
			key := f.key("onetx-storm")
			forms, bodies, odd := f.stormBodies()

			replies := make([]reply, len(bodies))
			errs := make([]error, len(bodies))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, body := range bodies {
				wg.Go(func() {
					<-start
					replies[i], errs[i] = f.post(s, "/v1/payments", "demo", key, body)
				})
			}
			close(start)
			wg.Wait()

			// The storm's own answers. Which payload won is the one whose
			// requests got 201 (none, if every one of them failed closed).
			var created, executed, oddCreated int
			for i, r := range replies {
				switch {
				case errs[i] != nil:
					t.Errorf("round %d, request #%d: %v", round, i, errs[i])
				case r.status == http.StatusCreated:
					created++
					if r.header.Get("Idempotent-Replayed") != "true" {
						executed++
					}
					if i == odd {
						oddCreated++
					}
				case problemErr(r, http.StatusUnprocessableEntity, string(idem.CodePayloadConflict)) == "":
				case problemErr(r, http.StatusServiceUnavailable, string(idem.CodeStoreUnavailable)) == "":
					unavailable++
				default:
					t.Errorf("round %d, request #%d: %v %v; want 201, 422 PAYLOAD_CONFLICT or 503 STORE_UNAVAILABLE (never 409 from a one-transaction server)",
						round, i, r, r.header)
				}
			}
			if executed > 1 {
				t.Errorf("round %d: %d answers executed the operation; want at most one", round, executed)
			}
			if oddCreated == 1 && created != 1 {
				t.Errorf("round %d: the odd payload won, yet %d requests got 201; want only it", round, created)
			}

			// Sequential retries after the storm: the winning payload's
			// retry replays the outcome, the other's is a conflict — also
			// when the storm's own answers were 503.
			settle := func(r reply) bool {
				return r.status == http.StatusCreated || problemErr(r, http.StatusUnprocessableEntity, string(idem.CodePayloadConflict)) == ""
			}
			same := f.postUntil(s, "/v1/payments", "demo", key, forms[f.rng.IntN(len(forms))], settle)
			diff := f.postUntil(s, "/v1/payments", "demo", key, bodies[odd], settle)
			if (same.status == http.StatusCreated) == (diff.status == http.StatusCreated) {
				t.Errorf("round %d: retries after the storm got %v and %v; want 201 for exactly one of the two payloads", round, same, diff)
			}
			t.Logf("round %d: key %s, the odd request was #%d of the storm; %d created, %d executed, odd won: %v",
				round, key, odd, created, executed, oddCreated == 1)
		}
		// The checker also holds every request with the winning payload
		// to 201 or 503 (a 422 would be a false hit) and every 201 of it to
		// the same bytes.
		counts := f.check(allow{Unavailable: true})
		t.Logf("%d answers of the storms failed closed (503)", unavailable)
		if counts["executed"] != rounds {
			t.Errorf("%d executions; want exactly one per storm", counts["executed"])
		}
		if counts["conflict"] < rounds {
			t.Errorf("%d conflicts; want at least one per storm (the odd payload)", counts["conflict"])
		}
		if counts["in_progress"] != 0 || counts["outcome_unknown"] != 0 {
			t.Errorf("answers %v; a one-transaction server never answers IN_PROGRESS or OUTCOME_UNKNOWN", counts)
		}
		if len(f.last.Payments) != rounds || len(f.last.Outbox) != rounds || len(f.last.Operations) != rounds {
			t.Errorf("database: %d payments, %d outbox rows, %d records; want %d of each", len(f.last.Payments), len(f.last.Outbox), len(f.last.Operations), rounds)
		}
	})
}
