package gate

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/registry"
)

// RolloutReport is the rollout phase's part of a Report (Report.Rollout).
type RolloutReport struct {
	// Tenants is the number of the plan's tenants (one principal each).
	Tenants int `json:"tenants"`
	// Changes says how the stages were set: "idem rollout" (the command,
	// as a process) or "registry.RolloutStore.SetRollout".
	Changes string               `json:"changes"`
	Stages  []RolloutStageResult `json:"stages"`
	// EnforcedAt is the row's EnforcedAt after the run (set by the first
	// stage that enforced); FirstEnforce when the gate's change of that
	// stage returned, the line VerifyRollout judges attempts by.
	EnforcedAt   time.Time `json:"enforced_at"`
	FirstEnforce time.Time `json:"first_enforce"`
	// Verification is what the database says (VerifyRollout).
	Verification RolloutVerification `json:"verification"`
	// Verdicts compares, per verdict, what shadow predicted with what
	// enforce answered over the run's tenants (the probes' left out),
	// from the registry's totals (RolloutStore.Verdicts). Predicted and
	// Answered are counts, the ratios shares of each mode's total.
	Verdicts       []VerdictComparison `json:"verdicts"`
	ShadowTotal    int64               `json:"shadow_total"`
	EnforceTotal   int64               `json:"enforce_total"`
	ProbesExcluded int64               `json:"probe_verdicts_excluded"`
}

// VerdictComparison is one verdict's row of RolloutReport.Verdicts.
type VerdictComparison struct {
	Verdict        string  `json:"verdict"`
	Predicted      int64   `json:"shadow_predicted"`
	PredictedRatio float64 `json:"shadow_predicted_ratio"`
	Answered       int64   `json:"enforce_answered"`
	AnsweredRatio  float64 `json:"enforce_answered_ratio"`
}

// verdictOrder is the order verdicts are reported in.
var verdictOrder = []string{registry.VerdictExecute, registry.VerdictReplay, registry.VerdictConflict, registry.VerdictInFlight,
	registry.VerdictKeyRefused, registry.VerdictKeyRetired, registry.VerdictRefused}

// compareVerdicts sums counts per mode and verdict, leaving out the
// probes' tenants.
func compareVerdicts(counts []registry.VerdictCount, probes rolloutProbes) (out []VerdictComparison, shadow, enforce, excluded int64) {
	pred, ans := map[string]int64{}, map[string]int64{}
	for _, c := range counts {
		switch {
		case probes.isProbe(c.Tenant):
			excluded += c.Count
		case c.Mode == registry.RolloutShadow:
			pred[c.Verdict] += c.Count
			shadow += c.Count
		case c.Mode == registry.RolloutEnforce:
			ans[c.Verdict] += c.Count
			enforce += c.Count
		}
	}
	names := slices.Clone(verdictOrder)
	for v := range pred {
		if !slices.Contains(names, v) {
			names = append(names, v)
		}
	}
	for v := range ans {
		if !slices.Contains(names, v) {
			names = append(names, v)
		}
	}
	ratio := func(n, total int64) float64 {
		if total == 0 {
			return 0
		}
		return float64(n) / float64(total)
	}
	for _, v := range names {
		out = append(out, VerdictComparison{Verdict: v, Predicted: pred[v], PredictedRatio: ratio(pred[v], shadow),
			Answered: ans[v], AnsweredRatio: ratio(ans[v], enforce)})
	}
	return out, shadow, enforce, excluded
}

// newRolloutReport builds the report of a rollout phase; Run's caller
// adds the instances' problems and decides.
func newRolloutReport(cfg Config, plan Plan, res RolloutResult, v RolloutVerification, row registry.Rollout, counts []registry.VerdictCount, probes rolloutProbes) *Report {
	cfg = cfg.withDefaults()
	r := &Report{
		Run: plan.Run, Seed: cfg.Seed, Workload: cfg.Workload, Instances: cfg.Instances, Crash: true,
		OneTransaction: !cfg.TwoPhase,
		Keys:           len(plan.Keys), Retries: plan.Retries, Concurrency: cfg.keyWorkers() * plan.Retries,
		Planned: len(plan.Keys) * plan.Retries, Requests: res.Requests, Resends: res.Resends,
		ClientHistogram: res.Latency, LatencyBudgetMs: ms(cfg.LatencyBudget), LoadSeconds: res.Elapsed.Seconds(),
		RecoverySLOSeconds: cfg.RecoverySLO.Seconds(),
	}
	if res.Elapsed > 0 {
		r.ThroughputRPS = float64(res.Requests) / res.Elapsed.Seconds()
	}
	r.ClientP50Ms = finite(res.Latency.Quantile(0.5) * 1000)
	r.ClientP99Ms = finite(res.Latency.Quantile(0.99) * 1000)
	ro := &RolloutReport{Tenants: len(plan.Principals), Stages: res.Stages, EnforcedAt: row.EnforcedAt,
		FirstEnforce: res.Enforced, Verification: v, Changes: "registry.RolloutStore.SetRollout"}
	ro.Verdicts, ro.ShadowTotal, ro.EnforceTotal, ro.ProbesExcluded = compareVerdicts(counts, probes)
	r.Rollout = ro
	for i, rk := range res.Keys {
		if len(rk.Answers) > 0 {
			switch a := rk.Answers[0]; {
			case a.succeeded():
				r.Succeeded++
			default:
				r.Refused++
			}
		}
		for _, a := range rk.Answers {
			if a.Replayed {
				r.Replays++
			}
			if a.Conflict {
				r.ConflictsSent++
				if a.Code == "PAYLOAD_CONFLICT" {
					r.ConflictsRefused++
				}
			}
		}
		r.UnansweredRequests += rk.Unanswered
		r.UnexpectedAnswers += len(rk.Unexpected)
		for j, u := range rk.Unexpected {
			if j == 0 || u != rk.Unexpected[j-1] {
				r.problem(fmt.Sprintf("key %d: unexpected answer %s", i, u))
			}
		}
		if rk.Unanswered > 0 {
			r.problem(fmt.Sprintf("key %d: %d requests without an answer", i, rk.Unanswered))
		}
	}
	for _, p := range v.Problems {
		r.problem(p)
	}
	r.DuplicateEffects = v.DuplicateEffects
	if len(res.Stages) != len(RolloutStages) {
		r.problem(fmt.Sprintf("only %d of the %d stages ran", len(res.Stages), len(RolloutStages)))
	}
	r.decide()
	return r
}

// rolloutGates are the gates of a rollout phase (Report.decide).
func (r *Report) rolloutGates() []Gate {
	ro := r.Rollout
	v := ro.Verification
	contract := r.UnansweredRequests + r.UnexpectedAnswers + v.MissingEffects + v.InFlight + v.ConflictsAccepted
	stages := len(ro.Stages)
	enforcedAt := !ro.EnforcedAt.IsZero()
	verdicts := ro.ShadowTotal > 0 && ro.EnforceTotal > 0
	return []Gate{
		{Name: "duplicate_effects", Value: float64(v.DuplicateEffects), Limit: "= 0", Passed: v.DuplicateEffects == 0},
		{Name: "answers_changed", Value: float64(v.AnswersChanged), Limit: "= 0", Passed: v.AnswersChanged == 0},
		// The ramp ran whole, each stage in effect on every instance,
		// and the first enforcing stage set EnforcedAt.
		{Name: "rollout_stages", Value: float64(stages), Limit: fmt.Sprintf("= %d", len(RolloutStages)),
			Passed: stages == len(RolloutStages) && enforcedAt && !ro.FirstEnforce.IsZero()},
		// Predictions and outcomes were both recorded in the registry.
		{Name: "verdicts_recorded", Value: float64(ro.ShadowTotal + ro.EnforceTotal), Limit: "> 0 in each mode", Passed: verdicts},
		{Name: "contract_violations", Value: float64(contract), Limit: "= 0", Passed: contract == 0},
		{Name: "instance_problems", Value: float64(r.InstanceProblems), Limit: "= 0", Passed: r.InstanceProblems == 0},
	}
}

// writeRolloutText writes the rollout lines of the text report.
func (r *Report) writeRolloutText(w io.Writer) {
	ro := r.Rollout
	v := ro.Verification
	var stages []string
	for _, s := range ro.Stages {
		x := fmt.Sprintf("%v (%d/%d tenants, %d new keys, %d retried, in effect after %s", s.RolloutStage, s.TenantsEnforced, ro.Tenants,
			s.NewKeys, s.Retried, seconds(s.EffectSeconds))
		if s.Crash {
			x += ", SIGKILL midway"
		}
		stages = append(stages, x+")")
	}
	fmt.Fprintf(w, "  ramp      changed with %s: %s\n", ro.Changes, strings.Join(stages, " → "))
	fmt.Fprintf(w, "  database  %d operations, %d payment rows (%d executed in shadow before enforce, by design), %d outbox messages; enforced at %s\n",
		v.Operations, v.PaymentRows, v.ShadowExecutions, v.OutboxRows, ro.EnforcedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  answers   %d answers to attempts sent after enforce matched the stored answer, %d changed\n", v.ReplaysAfterEnforce, v.AnswersChanged)
	fmt.Fprintf(w, "  verdicts  shadow predicted (%d) vs enforce answered (%d), probes' %d left out:\n", ro.ShadowTotal, ro.EnforceTotal, ro.ProbesExcluded)
	for _, c := range ro.Verdicts {
		if c.Predicted == 0 && c.Answered == 0 {
			continue
		}
		fmt.Fprintf(w, "            %-12s %7d (%6.2f %%)  %7d (%6.2f %%)\n", c.Verdict, c.Predicted, 100*c.PredictedRatio, c.Answered, 100*c.AnsweredRatio)
	}
}
