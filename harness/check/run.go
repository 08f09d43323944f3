package check

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario is one property the checker verifies.
type Scenario struct {
	// Name is the scenario's stable name, used in reports and Config.Only.
	Name string
	// Property is the property it checks, in one line.
	Property string
	// Profile is the profile that adds it (ProfileIETF, ProfileStrict);
	// "" for the base scenarios every run checks.
	Profile string
	run     func(ctx context.Context, r *runner, res *Result)
}

// Scenarios returns the scenarios in the order a run checks them.
func Scenarios() []Scenario {
	return []Scenario{
		{"replay", "a retry with the same key gets the same status and body", "", checkReplay},
		{"conflict", "a changed payload with the same key is refused and creates nothing", "", checkConflict},
		{"concurrent", "N concurrent identical requests cause one effect", "", checkConcurrent},
		{"in-flight", "duplicates of a request still in flight are not executed again", "", checkInFlight},
		{"scoping", "keys are scoped per credential: another credential never gets the first one's outcome", "", checkScoping},
		{"hygiene", "a replay has a fresh Date and does not repeat the first answer's Set-Cookie", "", checkHygiene},
		{"load", "many keys at --concurrency: one resource per key; throughput", "", checkLoad},
		{"key-entropy", "a low-entropy key is refused (accepting one is a warning, not a failure)", "", checkKeyEntropy},
		{"ietf-missing-key", "a request without a key is refused 400 and creates nothing", ProfileIETF, checkMissingKey},
		{"ietf-problem-details", "refusals are RFC 9457 problem details (application/problem+json)", ProfileIETF, checkProblemDetails},
		{"ietf-conflict-422", "a key reused with another payload is refused 422", ProfileIETF, checkConflict422},
		{"ietf-in-flight-409", "a duplicate in flight gets 409 with Retry-After, or the first outcome", ProfileIETF, checkInFlight409},
		{"strict-lexical-number", "a number written another way ({{lexical}}: 10.0, then 10) is another request", ProfileStrict, checkLexicalNumber},
		{"strict-expiry", "a key retried after its documented expiry (--expiry) causes no second effect", ProfileStrict, checkExpiry},
		{"strict-5xx-replay", "a 5xx is never replayed: the retry executes (--fault-header)", ProfileStrict, check5xxReplay},
	}
}

// runner holds what the scenarios of one run share.
type runner struct {
	cfg      Config
	alt      http.Header  // the second credential's headers: Header, AltHeader's names replaced
	requests atomic.Int64 // requests sent so far
	mu       sync.Mutex   // serialises progress lines
}

// logf writes one progress line.
func (r *runner) logf(format string, a ...any) {
	if r.cfg.Progress == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.cfg.Progress, "idem check: "+format+"\n", a...)
}

// payload renders the body template for one key.
func (r *runner) payload(unique, variant string) []byte {
	return []byte(render(r.cfg.Body, unique, variant))
}

// Run checks the endpoint cfg describes, one scenario after the other,
// and returns the report. It returns an error without a report only when
// cfg is invalid. When ctx ends, the scenario running fails (its requests
// fail), the remaining ones are skipped, and Run returns the report with
// ctx's error. Run is safe to call concurrently with distinct Configs;
// runs against the same target with a CountURL disturb each other's
// counts.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, alt: altHeaders(cfg.Header, cfg.AltHeader)}
	start := time.Now()
	rep := &Report{Target: cfg.Method + " " + cfg.URL, StartedAt: start.UTC()}
	var all []Scenario
	for _, sc := range Scenarios() {
		if runsIn(sc.Profile, cfg.Profile) {
			all = append(all, sc)
		}
	}
	for i, sc := range all {
		res := Result{Name: sc.Name, Property: sc.Property}
		switch {
		case !cfg.selected(sc.Name):
			res.skip("not selected")
		case ctx.Err() != nil:
			res.skip("interrupted before it ran")
		default:
			r.logf("[%d/%d] %s: %s", i+1, len(all), sc.Name, sc.Property)
			began, sent := time.Now(), r.requests.Load()
			sc.run(ctx, r, &res)
			if res.Status == "" {
				res.fail("no verdict (a defect of the checker)")
			}
			if ctx.Err() != nil && res.Status != Passed {
				res.Status, res.Passed = Failed, false
				res.Detail = "interrupted: " + res.Detail
			}
			res.Requests = int(r.requests.Load() - sent)
			res.DurationMS = ms(time.Since(began))
			r.logf("[%d/%d] %s: %s — %s", i+1, len(all), sc.Name, verdictWord(res.Status), res.Detail)
		}
		rep.Scenarios = append(rep.Scenarios, res)
	}
	rep.finish(start)
	rep.scorecards(cfg.Profile)
	return rep, ctx.Err()
}

// altHeaders is h with the fields of alt replacing the same-named ones.
func altHeaders(h, alt http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for name, values := range alt {
		out[name] = values
	}
	return out
}
