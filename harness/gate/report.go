package gate

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/internal/chart"
)

// Gate is one condition of the launch gate.
type Gate struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit string  `json:"limit"` // the condition, e.g. "= 0", "≤ 0.05"
	// Means says what the condition is in the run's own units, where a
	// ratio hides them ("p99 ≤ 10ms"); "" when Limit says it all.
	Means  string `json:"means,omitempty"`
	Passed bool   `json:"passed"`
}

// Rule is the gate's rule as the reports show it beside its value:
// "≤ 0.1 (p99 ≤ 10ms)".
func (g Gate) Rule() string {
	if g.Means == "" {
		return g.Limit
	}
	return g.Limit + " (" + g.Means + ")"
}

// Report is a gate run's result: the machine-readable report of
// "idem gate --json" and the data of the text and HTML reports.
type Report struct {
	Passed bool   `json:"passed"`
	DB     string `json:"db"` // "postgres", "mysql" or "sqlite"
	Run    string `json:"run"`
	Seed   int64  `json:"seed"`

	// Workload is "payments" or "transfers" (Config.Workload).
	Workload  string `json:"workload"`
	Instances int    `json:"instances"`
	// OneTransaction: the instances ran POST /v1/payments in one
	// database transaction (Config.TwoPhase false, the default); false
	// for two-phase payments and for the transfers workload.
	OneTransaction bool `json:"one_transaction"`
	// ServeFlags are the arguments every instance got after "idem serve"
	// (the --db and --auth values shown as "…"); set by Run.
	ServeFlags []string `json:"serve_flags,omitempty"`
	// Shards is each shard's part of a sharded run (Config.Shards).
	Shards []ShardReport `json:"shards,omitempty"`
	// Moves are the tenant moves of a sharded run (Config.Moves).
	Moves       []MoveReport `json:"moves,omitempty"`
	Crash       bool         `json:"crash"`
	Crashes     int          `json:"crashes"` // instances killed and restarted
	Keys        int          `json:"keys"`
	Retries     int          `json:"retries"`
	Concurrency int          `json:"concurrency"`
	// Planned is keys × retries; Requests every request sent.
	Planned  int              `json:"planned_requests"`
	Requests int64            `json:"requests"`
	Resends  map[string]int64 `json:"resends"`

	DuplicateEffects        int     `json:"duplicate_effects"`
	FalseConflicts          int     `json:"false_conflicts"`
	ReplayDigestMismatches  int     `json:"replay_digest_mismatches"`
	ReplayDigestConsistency float64 `json:"replay_digest_consistency"`
	UnknownPastSLORatio     float64 `json:"unknown_past_slo_ratio"`
	// AcknowledgedLost and ReExecuted are the verification's counters
	// (Verification.AcknowledgedLost, ReExecuted): keys whose
	// acknowledged operation the database lost, keys executed twice.
	AcknowledgedLost int `json:"acknowledged_lost"`
	ReExecuted       int `json:"re_executed"`
	// ResentKeys counts the keys sent once more after the load
	// (Config.Resend).
	ResentKeys         int     `json:"resent_keys,omitempty"`
	RecoverySLOSeconds float64 `json:"recovery_slo_seconds"`
	ReservationP99Ms   float64 `json:"reservation_p99_ms"`
	// Stored5xx (transfers) counts the run's operation records whose
	// stored response status is 5xx; it must be 0.
	Stored5xx int `json:"stored_5xx"`
	// UnknownSLOSeconds (transfers) is Config.UnknownSLO, the bound of
	// unknown_past_slo_ratio there; ProviderTimeoutSeconds the servers'
	// provider timeout (their default when "idem serve" has no
	// --provider-timeout; set by Run); Faults the phases of each provider
	// mode the fault schedule ran, FaultRequests the requests with a new
	// key each mode decided in them (counted phases only; set by Run).
	UnknownSLOSeconds      float64        `json:"unknown_slo_seconds,omitempty"`
	ProviderTimeoutSeconds float64        `json:"provider_timeout_seconds,omitempty"`
	Faults                 map[string]int `json:"faults,omitempty"`
	FaultRequests          map[string]int `json:"fault_requests,omitempty"`
	// The late-settlement phase (Config.Retention): RetentionSeconds is
	// the instances' --retention, OutageSeconds how long the opening
	// provider outage lasted (set by Run), Late what the retries of the
	// late-settled keys got after their settlement and
	// LateSettledReplayed the share of them that replayed (the gate: = 1,
	// with at least one late-settled key). nil and 0 without the phase.
	RetentionSeconds    float64     `json:"retention_seconds,omitempty"`
	OutageSeconds       float64     `json:"outage_seconds,omitempty"`
	Late                *LateCounts `json:"late_settled,omitempty"`
	LateSettledReplayed float64     `json:"late_settled_replayed,omitempty"`
	// InstanceProblems counts what went wrong with the instances
	// themselves: a histogram that could not be scraped (the latency gate
	// would judge part of the run), an instance that exited on its own or
	// did not stop cleanly, or a crash asked for (Config.Crash) that did
	// not happen. Set by Run; any fails the run.
	InstanceProblems       int     `json:"instance_problems"`
	Reservations           uint64  `json:"reservations"`
	LatencyBudgetMs        float64 `json:"latency_budget_ms"`
	ReservationBudgetRatio float64 `json:"reservation_budget_ratio"`
	ThroughputRPS          float64 `json:"throughput_rps"`
	LoadSeconds            float64 `json:"load_seconds"`
	ClientP50Ms            float64 `json:"client_p50_ms"`
	ClientP99Ms            float64 `json:"client_p99_ms"`

	// Outcome counts.
	Succeeded          int `json:"succeeded_keys"` // keys answered 201 (transfers: 2xx)
	Refused            int `json:"refused_keys"`   // keys answered 422 AMOUNT_LIMIT
	Declined           int `json:"declined_keys"`  // (transfers) keys answered another stored 422: the provider declined
	Replays            int `json:"replays"`        // terminal answers marked Idempotent-Replayed
	ConflictsSent      int `json:"conflicts_sent"`
	ConflictsRefused   int `json:"conflicts_refused"` // of those, 422 PAYLOAD_CONFLICT
	UnknownAnswers     int `json:"unknown_answers"`
	UnansweredRequests int `json:"unanswered_requests"`
	UnexpectedAnswers  int `json:"unexpected_answers"`

	// LoadAverage is the machine's 1-minute load average when the load
	// phase started and when it ended (-1: unknown); with more than about
	// the number of cores, other jobs share the CPU and the latencies show it.
	LoadAverage [2]float64 `json:"load_average"`

	Verification Verification `json:"verification"`
	// Rollout is the rollout phase's part (Config.Rollout); nil for
	// other runs. Its gates replace the others' (Report.decide).
	Rollout *RolloutReport `json:"rollout,omitempty"`
	Gates   []Gate         `json:"gates"`
	// Problems lists the first 20 failures: the clients' answers, then
	// the verification's, then the instances'.
	Problems []string `json:"problems,omitempty"`

	ReservationHistogram Histogram `json:"reservation_histogram"`
	ClientHistogram      Histogram `json:"client_histogram"`

	// Load is the load's own result, not in the JSON: every key's
	// answers with their times, for callers that measure more than the
	// report does (a failover test's time to recover). Set by Run.
	Load LoadResult `json:"-"`
}

// NewReport combines the load, the verification and the merged
// reservation histogram into a report and decides the gates.
func NewReport(cfg Config, plan Plan, res LoadResult, v Verification, reservations Histogram) *Report {
	cfg = cfg.withDefaults()
	r := &Report{
		Run: plan.Run, Seed: cfg.Seed, Workload: cfg.Workload, Instances: cfg.Instances, Crash: cfg.Crash,
		OneTransaction: cfg.Workload == WorkloadPayments && !cfg.TwoPhase,
		Keys:           len(plan.Keys), Retries: plan.Retries, Concurrency: cfg.keyWorkers() * plan.Retries,
		Planned: len(plan.Keys) * plan.Retries, Requests: res.Requests, Resends: res.Resends,
		Verification: v, ReservationHistogram: reservations, ClientHistogram: res.Latency,
		RecoverySLOSeconds: cfg.RecoverySLO.Seconds(),
		LatencyBudgetMs:    ms(cfg.LatencyBudget),
		LoadSeconds:        res.Elapsed.Seconds(),
	}
	if res.Elapsed > 0 {
		r.ThroughputRPS = float64(res.Requests) / res.Elapsed.Seconds()
	}
	for i, kr := range res.Keys {
		if !kr.Done {
			r.UnansweredRequests += plan.Retries
			r.problem(fmt.Sprintf("key %d: never sent (the load was interrupted)", i))
			continue
		}
		if len(kr.Answers) > 0 {
			switch a := kr.Answers[0]; {
			case a.succeeded():
				r.Succeeded++
			case a.Code == payments.CodeAmountLimit:
				r.Refused++
			default:
				r.Declined++
			}
		}
		for _, a := range kr.Answers {
			if a.Replayed {
				r.Replays++
			}
		}
		r.FalseConflicts += kr.FalseConflicts
		r.UnknownAnswers += kr.Unknown
		r.UnansweredRequests += kr.Unanswered
		r.UnexpectedAnswers += len(kr.Unexpected)
		if kr.ConflictSent {
			r.ConflictsSent++
			if kr.ConflictCode == idem.CodePayloadConflict {
				r.ConflictsRefused++
			} else if kr.ConflictCode != "" {
				r.UnexpectedAnswers++
				r.problem(fmt.Sprintf("key %d: a different payload got %s, want %s", i, kr.ConflictCode, idem.CodePayloadConflict))
			}
		}
		for j, u := range kr.Unexpected {
			if j > 0 && u == kr.Unexpected[j-1] {
				continue // one line for a key's retries that got the same answer
			}
			r.problem(fmt.Sprintf("key %d: unexpected answer %s", i, u))
		}
		if kr.FalseConflicts > 0 {
			r.problem(fmt.Sprintf("key %d: %d false PAYLOAD_CONFLICT for an identical payload", i, kr.FalseConflicts))
		}
		if kr.Unanswered > 0 {
			r.problem(fmt.Sprintf("key %d: %d requests without a terminal answer", i, kr.Unanswered))
		}
	}
	for _, p := range v.Problems {
		r.problem(p)
	}
	r.DuplicateEffects = v.DuplicatePayments + v.DuplicateOutbox
	r.AcknowledgedLost, r.ReExecuted, r.ResentKeys = v.AcknowledgedLost, v.ReExecuted, res.ResentKeys
	if cfg.transfers() {
		r.DuplicateEffects = v.DuplicateTransfers
		r.Stored5xx = v.Stored5xx
		r.UnknownSLOSeconds = cfg.UnknownSLO.Seconds()
	}
	r.ReplayDigestMismatches = v.DigestMismatches
	consistent := v.ConsistentKeys
	if cfg.Retention == 0 && v.RetiredKeys > 0 {
		// Nothing may retire within the default retention: each such
		// key's answers have no stored response to match.
		consistent -= v.RetiredKeys
		r.ReplayDigestMismatches += v.RetiredKeys
		r.problem(fmt.Sprintf("%d answered keys' records retired during a run without a retention", v.RetiredKeys))
	}
	r.ReplayDigestConsistency = 1
	if v.AnsweredKeys > 0 {
		r.ReplayDigestConsistency = float64(consistent) / float64(v.AnsweredKeys)
	}
	if cfg.transfers() && cfg.Retention > 0 {
		c, problems := countLate(res)
		r.Late, r.RetentionSeconds = &c, cfg.Retention.Seconds()
		if c.Settled > 0 {
			r.LateSettledReplayed = float64(c.Replayed) / float64(c.Settled)
		}
		r.ReExecuted += c.Executed // a second execution of a settled key
		for _, p := range problems {
			r.problem(p)
		}
		if c.Settled == 0 {
			r.problem("no key was UNKNOWN for longer than the retention: the late-settlement phase proved nothing")
		}
	}
	switch {
	case cfg.transfers() && len(plan.Keys) > 0:
		// Per key: one never sent or never settled counts too.
		r.UnknownPastSLORatio = float64(v.UnknownPastSLO) / float64(len(plan.Keys))
	case v.Operations > 0:
		r.UnknownPastSLORatio = float64(v.UnknownPastSLO) / float64(v.Operations)
	}
	r.Reservations = reservations.Count()
	r.ReservationP99Ms = finite(reservations.Quantile(0.99) * 1000) // 0 without reservations: the gate fails
	if r.LatencyBudgetMs > 0 {
		r.ReservationBudgetRatio = r.ReservationP99Ms / r.LatencyBudgetMs
	}
	r.ClientP50Ms = finite(res.Latency.Quantile(0.5) * 1000)
	r.ClientP99Ms = finite(res.Latency.Quantile(0.99) * 1000)
	r.decide()
	return r
}

func (r *Report) problem(p string) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, p)
	}
}

// decide evaluates the gates of SPEC V2 and the run's own sanity checks.
func (r *Report) decide() {
	v := r.Verification
	contract := r.UnansweredRequests + r.UnexpectedAnswers + v.MissingEffects + v.InFlight + (r.ConflictsSent - r.ConflictsRefused)
	if r.Workload == WorkloadTransfers {
		// A request without a definite answer is a key past the unknown
		// SLO, judged there; a declined key must have no execution.
		contract += v.DeclinedExecuted - r.UnansweredRequests
	}
	r.Gates = []Gate{
		{Name: "duplicate_effects", Value: float64(r.DuplicateEffects), Limit: "= 0", Passed: r.DuplicateEffects == 0},
		{Name: "false_conflicts", Value: float64(r.FalseConflicts), Limit: "= 0", Passed: r.FalseConflicts == 0},
		{Name: "replay_digest_consistency", Value: r.ReplayDigestConsistency, Limit: "= 1", Passed: r.ReplayDigestConsistency == 1 && r.ReplayDigestMismatches == 0},
		{Name: "acknowledged_lost", Value: float64(r.AcknowledgedLost), Limit: "= 0", Passed: r.AcknowledgedLost == 0},
		{Name: "re_executed", Value: float64(r.ReExecuted), Limit: "= 0", Passed: r.ReExecuted == 0},
		{Name: "unknown_past_slo_ratio", Value: r.UnknownPastSLORatio, Limit: fmt.Sprintf("< %g", MaxUnknownRatio), Passed: r.UnknownPastSLORatio < MaxUnknownRatio},
		{Name: "stored_5xx", Value: float64(r.Stored5xx), Limit: "= 0", Passed: r.Stored5xx == 0},
		{Name: "reservation_budget_ratio", Value: r.ReservationBudgetRatio, Limit: fmt.Sprintf("≤ %g", DefaultReservationPart),
			Means:  fmt.Sprintf("reservation p99 ≤ %s of the %s latency budget", chart.Seconds(r.LatencyBudgetMs/1000*DefaultReservationPart), chart.Seconds(r.LatencyBudgetMs/1000)),
			Passed: r.Reservations > 0 && r.ReservationBudgetRatio <= DefaultReservationPart},
		// Not a V2 number, but a run whose keys were not all answered,
		// whose accepted payments are missing, or whose different payloads
		// were not refused proves nothing.
		{Name: "contract_violations", Value: float64(contract), Limit: "= 0", Passed: contract == 0},
		// Nor is this: a server that crashed unasked, or whose reservation
		// histogram is missing from the p99, fails the run it was part of.
		{Name: "instance_problems", Value: float64(r.InstanceProblems), Limit: "= 0", Passed: r.InstanceProblems == 0},
	}
	if r.Shards != nil {
		// Every shard consistent on its own, and no tenant's records or
		// payments on another tenant's shard.
		misplaced, consistent := 0, 0
		for _, s := range r.Shards {
			misplaced += s.Misplaced
			if s.AnsweredKeys > 0 && s.ReplayDigestConsistency == 1 {
				consistent++
			}
		}
		r.Gates = append(r.Gates, Gate{Name: "shard_placement", Value: float64(misplaced), Limit: "= 0", Passed: misplaced == 0},
			Gate{Name: "consistent_shards", Value: float64(consistent), Limit: fmt.Sprintf("= %d", len(r.Shards)), Passed: consistent == len(r.Shards)})
	}
	if r.Moves != nil {
		// Every tenant moved, the crashed mover included, and the old
		// shards' fenced copies are what the new shards hold.
		done, stale := 0, 0
		for _, m := range r.Moves {
			if m.Done {
				done++
			}
			stale += m.StaleCopies
		}
		r.Gates = append(r.Gates, Gate{Name: "tenants_moved", Value: float64(done), Limit: fmt.Sprintf("= %d", len(r.Moves)), Passed: done == len(r.Moves)},
			Gate{Name: "moved_copies_stale", Value: float64(stale), Limit: "= 0", Passed: stale == 0})
	}
	if r.Late != nil {
		// Retention from settlement: every retry of a key that settled
		// after an outage longer than the retention replays its answer.
		r.Gates = append(r.Gates, Gate{Name: "late_settled_replayed", Value: r.LateSettledReplayed, Limit: "= 1",
			Passed: r.Late.Settled > 0 && r.Late.Replayed == r.Late.Settled})
	}
	if r.Rollout != nil {
		// Shadow executes duplicates as without idempotency before the
		// operation is enforced: the rollout phase has gates of its own.
		r.Gates = r.rolloutGates()
	}
	if r.Workload != WorkloadTransfers {
		// Payments store 201 and 422 only; the gate is the transfers'.
		r.Gates = slices.DeleteFunc(r.Gates, func(g Gate) bool { return g.Name == "stored_5xx" })
	}
	r.Passed = true
	for _, g := range r.Gates {
		r.Passed = r.Passed && g.Passed
	}
	if r.Keys == 0 {
		r.Passed = false
	}
}

// WriteText writes the human-readable summary.
func (r *Report) WriteText(w io.Writer) {
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "idem gate %s — run %s on %s, %d instance(s)%s%s%s%s\n", verdict, r.Run, r.DB, r.Instances, rolloutText(r), workloadText(r), styleText(r), crashText(r))
	if len(r.ServeFlags) > 0 {
		fmt.Fprintf(w, "  servers   idem serve %s\n", strings.Join(r.ServeFlags, " "))
	}
	fmt.Fprintf(w, "  load      %d keys × %d retries = %d planned, %d requests sent in %s (%.0f req/s), concurrency %d\n",
		r.Keys, r.Retries, r.Planned, r.Requests, time.Duration(r.LoadSeconds*float64(time.Second)).Round(time.Millisecond), r.ThroughputRPS, r.Concurrency)
	for _, s := range r.Shards {
		fmt.Fprintf(w, "  shard %-3s %s: %d keys, %d operations, digest consistency %.3f, acknowledged lost %d, re-executed %d, duplicate payments %d, duplicate outbox %d, misplaced %d\n",
			s.Name, strings.Join(s.Tenants, ","), s.Keys, s.Operations, s.ReplayDigestConsistency, s.AcknowledgedLost, s.ReExecuted, s.DuplicatePayments, s.DuplicateOutbox, s.Misplaced)
	}
	for _, m := range r.Moves {
		crashed := ""
		if m.Crashed {
			crashed = ", mover killed once after its copy and resumed"
		}
		fmt.Fprintf(w, "  move      %s %s → %s: done %t in %.1fs%s, stale copies %d\n", m.Tenant, m.From, m.To, m.Done, m.Seconds, crashed, m.StaleCopies)
	}
	if r.Workload == WorkloadTransfers {
		fmt.Fprintf(w, "  outcomes  %d succeeded, %d refused (AMOUNT_LIMIT), %d declined, %d replays, %d/%d different payloads refused\n",
			r.Succeeded, r.Refused, r.Declined, r.Replays, r.ConflictsRefused, r.ConflictsSent)
		var faults []string
		for _, m := range slices.Sorted(maps.Keys(r.Faults)) {
			faults = append(faults, fmt.Sprintf("%s %d (%d requests)", m, r.Faults[m], r.FaultRequests[m]))
		}
		fmt.Fprintf(w, "  provider  %d executions for the run's payees; provider timeout %s; fault phases: %s\n",
			r.Verification.ProviderExecutions, time.Duration(r.ProviderTimeoutSeconds*float64(time.Second)), cmp.Or(strings.Join(faults, ", "), "none"))
	} else {
		fmt.Fprintf(w, "  outcomes  %d succeeded, %d refused (AMOUNT_LIMIT), %d replays, %d/%d different payloads refused\n",
			r.Succeeded, r.Refused, r.Replays, r.ConflictsRefused, r.ConflictsSent)
	}
	if r.Rollout != nil {
		r.writeRolloutText(w)
	}
	if r.ResentKeys > 0 || r.AcknowledgedLost > 0 || r.ReExecuted > 0 {
		fmt.Fprintf(w, "  failover  %d keys re-sent after the load; %d acknowledged operations lost, %d keys executed again\n",
			r.ResentKeys, r.AcknowledgedLost, r.ReExecuted)
	}
	if l := r.Late; l != nil {
		fmt.Fprintf(w, "  late      outage %s, retention %s: %d late-settled operations, %d replayed, %d KEY_RETIRED, %d executed again, %d other, %d not judged in time\n",
			seconds(r.OutageSeconds), seconds(r.RetentionSeconds), l.Settled, l.Replayed, l.Retired, l.Executed, l.Other, l.Unjudged)
	}
	if len(r.Resends) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Resends)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Resends[k]))
		}
		fmt.Fprintf(w, "  re-sent   %s\n", strings.Join(parts, ", "))
	}
	switch {
	case r.Rollout != nil: // its own database line
	case r.Workload == WorkloadTransfers:
		fmt.Fprintf(w, "  database  %d operations, %d storing a 5xx response, %d answered keys' records retired during the run\n",
			r.Verification.Operations, r.Stored5xx, r.Verification.RetiredKeys)
	default:
		fmt.Fprintf(w, "  database  %d operations, %d payment rows, %d outbox messages\n",
			r.Verification.Operations, r.Verification.PaymentRows, r.Verification.OutboxRows)
	}
	if r.Rollout != nil {
		fmt.Fprintf(w, "  latency   client p50 %.1f ms, p99 %.1f ms\n", r.ClientP50Ms, r.ClientP99Ms)
	} else {
		fmt.Fprintf(w, "  latency   reservation p99 %.2f ms (%d reservations), client p50 %.1f ms, p99 %.1f ms\n",
			r.ReservationP99Ms, r.Reservations, r.ClientP50Ms, r.ClientP99Ms)
	}
	if r.LoadAverage[0] >= 0 {
		fmt.Fprintf(w, "  machine   load average %.1f at the start of the load, %.1f at its end\n", r.LoadAverage[0], r.LoadAverage[1])
	}
	for _, g := range r.Gates {
		mark := "ok  "
		if !g.Passed {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-26s %-10s — rule: %s\n", mark, g.Name, formatValue(g.Value), g.Rule())
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
}

func rolloutText(r *Report) string {
	if r.Rollout == nil {
		return ""
	}
	return ", rollout phase"
}

func workloadText(r *Report) string {
	if r.Workload != WorkloadTransfers {
		return ""
	}
	return ", POST /v1/transfers through idem provider"
}

func styleText(r *Report) string {
	if !r.OneTransaction {
		return ""
	}
	return " in the one-transaction style"
}

func crashText(r *Report) string {
	if !r.Crash {
		return ""
	}
	return fmt.Sprintf(", %d killed with SIGKILL and restarted", r.Crashes)
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// seconds formats a number of seconds as a duration, to the millisecond.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finite returns x, or 0 for NaN and infinities (JSON has neither).
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}
