package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idemkit/idem/harness/gate"
)

// runGate implements "idem gate" (SPEC V2), the launch gate: it starts
// --instances "idem serve" processes (of --bin, by default this binary)
// on --db, sends --requests requests — --requests/--retries keys, the
// --retries requests of one key at once to different instances — with at
// most --concurrency in flight, optionally kills one instance with SIGKILL
// midway and restarts it (--crash), then verifies the database and prints
// the report: a summary on stdout, or with --json one object
// ({"requests":…, "duplicate_effects":…, "passed":…}; see package gate),
// and with --html FILE a self-contained HTML report. Progress goes to
// stderr. Exit status 0 only when every gate holds, 1 when one fails or
// the gate cannot run, 2 on bad usage. SIGINT or SIGTERM stops the load
// and the instances, and exits 1 without a report. --two-phase
// starts every instance with that flag (gate.Config.TwoPhase).
//
// --workload transfers (default payments) drives POST /v1/transfers
// instead, through an "idem provider" child the gate starts and injects
// faults into (every --fault-interval, at most --fault-keys new keys a
// phase), with --provider-timeout passed to the instances; a key must settle within --unknown-slo of its first
// request (gate.Config.Workload, docs/gate.md). With --retention it also
// runs the late-settlement phase: the instances run with that short
// retention and prune every --prune-interval, the provider is out for
// --outage (longer than the retention) as the load starts, and every
// operation that stayed UNKNOWN for longer than the retention must replay
// its settled answer when retried after a prune pass
// (gate.Config.Retention).
//
// --shard NAME=DSN (repeatable, instead of --db) with --shard-default
// NAME and --shard-map FILE runs the instances over several registries
// ("idem serve --shard") and verifies each shard with its tenants' keys,
// and that no tenant's records are on another tenant's shard
// (gate.Config.Shards; --tenants N spreads the principals over N
// tenants, tenant-0 …).
//
// --rollout runs the rollout phase instead (gate.Config.Rollout,
// docs/gate.md "The rollout phase"): the instances serve payments.create
// as the registry's rollout row says, and the gate ramps that row from
// shadow through enforce 10 %, 50 % (killing one instance midway), back
// to shadow and on to 100 % under load — with "idem rollout" as a
// process — then checks that no key executed again once the operation
// was enforced and that no answered key's answer changed, and reports
// shadow's predicted verdicts against enforce's answered ones.
//
// --replay-prune runs the replay-prune phase instead (gate.RunReplayPrune,
// docs/gate.md "Replays while pruning"): --instances instances with the
// replay cache on, a 3 s retention and a prune every 200 ms are sent
// only replays of settled keys until every key is retired, and no replay
// may be served to a request sent after the key's retirement was seen
// (a KEY_RETIRED answer, or the gate's own read of the registry). It
// prints one line (or --json the report) and exits 0 when it passed.
func runGate(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("gate", "--db DSN [--workload payments|transfers] [--instances N] [--requests N] [--retries R] [--concurrency C] [--crash] [--rollout] [--json] [--html FILE] …", std)
	var cfg gate.Config
	fs.StringVar(&cfg.DSN, "db", "", "database `DSN` every instance serves from: postgres://…, mysql://… or sqlite:PATH (required)")
	fs.StringVar(&cfg.Bin, "bin", "", "idem `binary` to start instances from (default: this one)")
	fs.IntVar(&cfg.Instances, "instances", gate.DefaultInstances, "server instances to start")
	fs.IntVar(&cfg.Requests, "requests", gate.DefaultRequests, "planned requests (keys × retries); re-sends come on top")
	fs.IntVar(&cfg.Retries, "retries", gate.DefaultRetries, "concurrent requests per key (R)")
	fs.IntVar(&cfg.Concurrency, "concurrency", gate.DefaultConcurrency, "requests in flight at most (a multiple of --retries)")
	fs.IntVar(&cfg.Principals, "principals", gate.DefaultPrincipals, "authenticated principals the keys are spread over")
	fs.Float64Var(&cfg.ConflictRate, "conflicts", gate.DefaultConflictRate, "share of keys that also get a different payload (must be refused)")
	fs.Float64Var(&cfg.RefusalRate, "refusals", gate.DefaultRefusalRate, "share of keys with an amount above the limit (stored 422 AMOUNT_LIMIT)")
	fs.StringVar(&cfg.Workload, "workload", gate.WorkloadPayments, "`WORKLOAD`: payments (POST /v1/payments) or transfers (POST /v1/transfers through an idem provider with injected faults)")
	fs.DurationVar(&cfg.UnknownSLO, "unknown-slo", gate.DefaultUnknownSLO, "transfers: how long a key may go without a definite answer after its first request")
	fs.DurationVar(&cfg.ProviderTimeout, "provider-timeout", gate.DefaultProviderTimeout, "transfers: --provider-timeout of the instances (if idem serve has the flag)")
	fs.DurationVar(&cfg.FaultInterval, "fault-interval", gate.DefaultFaultInterval, "transfers: length of each phase of the provider fault schedule")
	fs.IntVar(&cfg.FaultKeys, "fault-keys", gate.DefaultFaultKeys, "transfers: requests with a new key one fault phase hits at most (negative: no bound)")
	fs.DurationVar(&cfg.Retention, "retention", 0, "transfers: the late-settlement phase — instances run with this --retention and prune often, the provider is out for --outage first, and every operation UNKNOWN for longer than the retention must replay once settled (0: no such phase)")
	fs.DurationVar(&cfg.Outage, "outage", 0, "transfers, with --retention: length of the opening provider outage, longer than the retention (0: twice the retention)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", gate.DefaultPruneInterval, "transfers, with --retention: --prune-interval of the instances")
	fs.BoolVar(&cfg.Crash, "crash", false, "kill one instance with SIGKILL midway and restart it")
	fs.BoolVar(&cfg.Rollout, "rollout", false, "the rollout phase instead of the replay storm: ramp payments.create shadow → enforce 10 % → 50 % (one instance killed with SIGKILL midway) → shadow → 100 % in the registry under load, then judge duplicate effects, changed answers and shadow's predictions (docs/gate.md)")
	fs.DurationVar(&cfg.LatencyBudget, "latency-budget", gate.DefaultLatencyBudget, "the endpoint's latency budget; reservation p99 must stay within 5 % of it")
	fs.DurationVar(&cfg.RecoverySLO, "recovery-slo", gate.DefaultRecoverySLO, "how long an operation may stay UNKNOWN")
	fs.DurationVar(&cfg.Wait, "wait", gate.DefaultWait, "Prefer: wait of every request; negative: none")
	fs.DurationVar(&cfg.KeyTimeout, "key-timeout", gate.DefaultKeyTimeout, "how long a request is re-sent before it counts as unanswered")
	fs.DurationVar(&cfg.Lease, "lease", gate.DefaultLease, "--lease of the instances")
	fs.DurationVar(&cfg.RecoverInterval, "recover-interval", gate.DefaultRecoverInterval, "--recover-interval of the instances")
	fs.StringVar(&cfg.EncryptionKeys, "encryption-keys", "", "key ring `FILE` passed to every instance (--encryption-keys: bodies sealed at rest) and used to read the registry when verifying")
	fs.BoolVar(&cfg.TwoPhase, "two-phase", false, "start every instance with --two-phase (POST /v1/payments reserves its key, then executes; default: payment, outbox message and record in one database transaction, nothing reserved first)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of amounts, conflicts and refusals (0: from the clock)")
	replayPrune := fs.Bool("replay-prune", false, "the replay-prune phase instead of the replay storm: instances with --replay-cache and a short retention, pruning, get only replays of settled keys until every key is retired; no replay may be served after its key's retirement was seen (docs/gate.md)")
	shards := addGateShardFlags(fs.FlagSet, &cfg)
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	html := fs.String("html", "", "also write a self-contained HTML report to `FILE`")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	var u usageError
	switch err := shards.apply(&cfg); {
	case errors.As(err, &u):
		return fs.usage(err.Error())
	case err != nil:
		fmt.Fprintln(std.err, "idem gate:", err)
		return exitRefused
	}
	if len(words) != 0 || (cfg.DSN == "" && cfg.Shards == nil) {
		return fs.usage("--db (or --shard) is required, and nothing else but flags")
	}
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(std.err, "idem gate: cannot find this binary; pass --bin:", err)
			return exitRefused
		}
		cfg.Bin = exe
	}
	cfg.Progress = std.err
	if *replayPrune {
		return runReplayPruneGate(ctx, cfg, *asJSON, std)
	}
	rep, err := gate.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(std.err, "idem", err) // Run's errors start with "gate: "
		return exitRefused
	}
	if *html != "" {
		if err := writeHTMLReport(*html, rep); err != nil {
			fmt.Fprintln(std.err, "idem gate:", err)
			return exitRefused
		}
	}
	if *asJSON {
		if err := printJSON(std.out, rep); err != nil {
			fmt.Fprintln(std.err, "idem gate:", err)
			return exitRefused
		}
	} else {
		rep.WriteText(std.out)
	}
	if !rep.Passed {
		return exitRefused
	}
	return exitOK
}

// runReplayPruneGate runs the replay-prune phase with cfg's database,
// binary, instances and seed and prints its report.
func runReplayPruneGate(ctx context.Context, cfg gate.Config, asJSON bool, std stdio) int {
	rep, err := gate.RunReplayPrune(ctx, gate.ReplayPruneConfig{
		DSN: cfg.DSN, Bin: cfg.Bin, Instances: cfg.Instances, Seed: cfg.Seed, Progress: std.err,
	})
	if err != nil {
		fmt.Fprintln(std.err, "idem", err)
		return exitRefused
	}
	if asJSON {
		if err := printJSON(std.out, rep); err != nil {
			fmt.Fprintln(std.err, "idem gate:", err)
			return exitRefused
		}
	} else {
		fmt.Fprintf(std.out, "replay-prune: %d keys, %d requests, %d replays (%d from the cache), %d KEY_RETIRED: passed %v\n",
			rep.Keys, rep.Requests, rep.Replays, rep.CacheHits, rep.Retired, rep.Pass)
		for _, p := range rep.Problems {
			fmt.Fprintf(std.out, "  %s\n", p)
		}
	}
	if !rep.Pass {
		return exitRefused
	}
	return exitOK
}

func writeHTMLReport(path string, rep *gate.Report) error {
	return writeHTMLFile(path, rep.WriteHTML)
}

// writeHTMLFile creates path and writes a report into it with write
// (gate.Report.WriteHTML, check.Report.WriteHTML).
func writeHTMLFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
