package gate

import "testing"

// TestReportProblemsCapped: the answers' and the verification's problems
// together stay within maxProblems, the clients' first, while the
// counters count them all.
func TestReportProblemsCapped(t *testing.T) {
	plan := NewPlan(maxProblems+5, 2, 2, 0, 0, 1)
	res := LoadResult{Keys: make([]KeyResult, len(plan.Keys))}
	for i := range res.Keys {
		res.Keys[i] = KeyResult{Done: true, FalseConflicts: 1}
	}
	var v Verification
	for i := range maxProblems + 5 {
		v.problem("verification problem %d", i)
	}
	r := NewReport(Config{Seed: 1}, plan, res, v, Histogram{})
	if len(r.Problems) != maxProblems || r.FalseConflicts != len(plan.Keys) {
		t.Fatalf("%d problems (want %d), %d false conflicts (want %d)", len(r.Problems), maxProblems, r.FalseConflicts, len(plan.Keys))
	}
	if want := "key 0: 1 false PAYLOAD_CONFLICT for an identical payload"; r.Problems[0] != want {
		t.Errorf("first problem %q, want %q", r.Problems[0], want)
	}
	if r.Passed {
		t.Error("a report with false conflicts passed")
	}
}
