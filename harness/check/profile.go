package check

import (
	"fmt"
	"slices"
	"strings"
)

// Profiles (Config.Profile): sets of scenarios, run after the base ones,
// that score an API against a standard rather than against retry safety
// alone. A profile's scorecard (Report.Scorecards) lists its scenarios'
// verdicts.
const (
	// ProfileIETF scores the answers the IETF draft "The Idempotency-Key
	// HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header) names,
	// with RFC 9457 problem details: 400 for a missing key, 422 for a key
	// reused with another payload, 409 (with Retry-After) for a request in
	// flight, and problem+json bodies.
	ProfileIETF = "ietf"
	// ProfileStrict is ProfileIETF and what tells a strict API from a
	// merely correct one: numbers that differ only lexically are not the
	// same request where scale matters, keys are scoped per credential, a
	// key reused after its expiry is not executed again, and a 5xx is
	// never replayed.
	ProfileStrict = "strict"
)

// Profiles lists the profiles, in order.
func Profiles() []string { return []string{ProfileIETF, ProfileStrict} }

// profileScenarios lists the scenarios each profile scores: its own, and
// base or other profiles' scenarios it counts as well.
var profileScenarios = map[string][]string{
	ProfileIETF:   {"ietf-missing-key", "ietf-problem-details", "ietf-conflict-422", "ietf-in-flight-409"},
	ProfileStrict: {"ietf-missing-key", "ietf-problem-details", "ietf-conflict-422", "ietf-in-flight-409", "strict-lexical-number", "scoping", "strict-expiry", "strict-5xx-replay"},
}

// runsIn reports whether a scenario of profile p (Scenario.Profile; ""
// for the base scenarios) runs when the run's profile is run.
func runsIn(p, run string) bool {
	switch p {
	case "":
		return true
	case ProfileIETF:
		return run == ProfileIETF || run == ProfileStrict
	}
	return p == run
}

// Scorecard is one profile's verdicts.
type Scorecard struct {
	Profile string `json:"profile"`
	// Passed is true when none of the profile's scenarios failed and at
	// least one passed. A skipped scenario (its option was not given, or
	// it could not apply) never counts as passed.
	Passed  bool `json:"passed"`
	Score   int  `json:"score"` // scenarios passed
	Of      int  `json:"of"`    // scenarios scored
	Failed  int  `json:"failed"`
	Skipped int  `json:"skipped"`
	// Scenarios are the scored scenarios with their verdicts, in order.
	Scenarios []ScoredScenario `json:"scenarios"`
}

// ScoredScenario is one line of a scorecard.
type ScoredScenario struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// scorecards builds the scorecards of the run's profile: strict scores
// the IETF profile too.
func (rep *Report) scorecards(run string) {
	rep.Scorecards = nil
	for _, p := range Profiles() {
		if !runsIn(p, run) {
			continue
		}
		sc := Scorecard{Profile: p}
		for _, name := range profileScenarios[p] {
			res, ok := rep.Result(name)
			if !ok {
				continue
			}
			sc.Scenarios = append(sc.Scenarios, ScoredScenario{Name: name, Status: res.Status, Detail: res.Detail})
			sc.Of++
			switch res.Status {
			case Passed:
				sc.Score++
			case Failed:
				sc.Failed++
			default:
				sc.Skipped++
			}
		}
		sc.Passed = sc.Failed == 0 && sc.Score > 0
		rep.Scorecards = append(rep.Scorecards, sc)
	}
}

// writeScorecards writes the scorecards as text.
func (rep *Report) writeScorecards(b *strings.Builder) {
	for _, sc := range rep.Scorecards {
		verdict := "PASSED"
		if !sc.Passed {
			verdict = "FAILED"
		}
		fmt.Fprintf(b, "\nprofile %s: %s, %d of %d scenarios passed", sc.Profile, verdict, sc.Score, sc.Of)
		if sc.Failed > 0 || sc.Skipped > 0 {
			fmt.Fprintf(b, " (%d failed, %d skipped)", sc.Failed, sc.Skipped)
		}
		b.WriteString("\n")
		for _, s := range sc.Scenarios {
			fmt.Fprintf(b, "  %-22s %s\n", s.Name, strings.ToUpper(verdictWord(s.Status)))
		}
	}
}

// validProfile reports whether p names a profile ("" for none).
func validProfile(p string) bool { return p == "" || slices.Contains(Profiles(), p) }
