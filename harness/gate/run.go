package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/recovery"
)

// Run is the whole gate: it opens (and migrates) cfg.DSN, starts
// cfg.Instances "idem serve" processes of cfg.Bin on it with an --auth
// file of the plan's principals, runs Load through them — killing and
// restarting one instance midway if cfg.Crash, then calling cfg.Midway
// if set, and re-sending every answered key after the load if
// cfg.Resend — scrapes every instance's
// reservation histogram, stops the instances (SIGTERM), runs one recovery
// pass (recovery.Worker.RunOnce, no provider) and verifies the database
// (Verify). It returns the report; an error means the gate could not run
// (the database or an instance did not come up), not that it failed.
//
// With cfg.Retention (transfers), the late-settlement phase: the instances
// run with that --retention and prune every cfg.PruneInterval, the fault
// schedule opens with a provider outage of cfg.Outage, and the load sends
// every key that was UNKNOWN for longer than the retention once more after
// it settled (Config.Retention, latesettle.go).
//
// The transfers workload (cfg.Workload) also starts an "idem provider"
// child first and gives every instance --provider (and
// --provider-timeout cfg.ProviderTimeout, when "idem serve" has that
// flag); during the load it runs the fault schedule (startFaults) on the
// provider, and with cfg.Crash the instance killed midway is started
// again with IDEM_FAILPOINTS=after-downstream=kill, so that it also dies
// right after its first successful provider call, and then once more
// without. The recovery pass asks the provider, whose executions
// (GET /transfers) VerifyTransfers then checks; the provider is stopped
// last.
//
// Instances run in their own process groups and are stopped before Run
// returns, also when ctx is cancelled: the load then stops early and Run
// returns ctx's error without a report. ctx governs the whole run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Bin == "" {
		return nil, errors.New("gate: no idem binary to start instances from")
	}
	if cfg.Rollout {
		return runRollout(ctx, cfg)
	}
	// The midway crash and the load's progress ticker write concurrently.
	cfg.Progress = &syncWriter{w: cfg.Progress}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "gate: "+format+"\n", args...) }

	var opts idemstore.Options
	if cfg.EncryptionKeys != "" {
		ring, err := keyring.Load(cfg.EncryptionKeys)
		if err != nil {
			return nil, fmt.Errorf("gate: %w", err)
		}
		opts.Sealer = ring
	}
	stores, closeStores, err := openStores(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer closeStores()
	store, mark := stores[0].store, stores[0].mark // the only one unless sharded

	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	if cfg.transfers() {
		plan.PayeePerKey()
	}
	if cfg.Tenants > 0 {
		plan.SpreadTenants(cfg.Tenants)
	}
	dir, err := os.MkdirTemp("", "idem-gate-")
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	defer os.RemoveAll(dir)
	auth, err := plan.AuthFile()
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	authPath := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authPath, auth, 0o600); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	args, err := dbArgs(cfg, dir)
	if cfg.moving() {
		args, err = directoryArgs(ctx, cfg, stores)
	}
	if err != nil {
		return nil, err
	}
	args = append(args, "--auth", authPath, "--lease", cfg.Lease.String(),
		"--recover-interval", cfg.RecoverInterval.String())
	if cfg.Retention > 0 {
		// The late-settlement phase: a short retention, which the
		// retention windows checked at start-up must allow, and a prune
		// pass every PruneInterval.
		args = append(args, "--retention", cfg.Retention.String(), "--prune-interval", cfg.PruneInterval.String(),
			"--client-retry-window", "0s", "--queue-backlog-window", "0s", "--reconciliation-window", "0s", "--restore-window", "0s")
		cfg.pruneLog = store
	} else {
		args = append(args, "--prune-interval", "0")
	}
	if cfg.TwoPhase {
		args = append(args, "--two-phase")
	}
	if cfg.EncryptionKeys != "" {
		args = append(args, "--encryption-keys", cfg.EncryptionKeys)
	}
	if serveHasFlag(ctx, cfg.Bin, "admin-host") { // metrics are on the admin listener only
		args = append(args, "--admin-addr", "127.0.0.1:0")
	}

	var prov *instance
	var provider providerClient
	providerTimeout := cfg.ProviderTimeout
	if cfg.transfers() {
		if prov, err = startChild(ctx, "provider", cfg.Bin, []string{"provider", "--addr", "127.0.0.1:0"}, nil); err != nil {
			return nil, err
		}
		defer func() {
			if prov != nil {
				prov.kill()
			}
		}()
		provider = newProviderClient(prov.url)
		say("provider listening on %s", prov.url)
		args = append(args, "--provider", prov.url)
		if serveHasFlag(ctx, cfg.Bin, "provider-timeout") {
			args = append(args, "--provider-timeout", cfg.ProviderTimeout.String())
		} else {
			providerTimeout = payments.DefaultProviderTimeout
			say("idem serve has no --provider-timeout: its provider calls time out after %v", providerTimeout)
		}
	}

	fleet := &fleet{bin: cfg.Bin, args: args}
	if cfg.transfers() {
		fleet.op = payments.OperationTransfer
	}
	defer fleet.stopAll() // on every path; a no-op once stopped
	for i := range cfg.Instances {
		if err := fleet.start(ctx, i, nil); err != nil {
			return nil, err
		}
		say("instance %d listening on %s", i, fleet.instances[i].url)
	}

	say("run %s: %d keys × %d retries on %s, concurrency %d, seed %d", plan.Run, cfg.keys(), cfg.Retries,
		idemstore.Kind(stores[0].dsn), cfg.keyWorkers()*cfg.Retries, cfg.Seed)
	crash := func() {
		say("killing instance 0 with SIGKILL")
		var env []string
		if cfg.transfers() {
			env = []string{failpoint.Env + "=" + failpoint.AfterDownstream + "=kill"}
		}
		if err := fleet.crash(ctx, 0, env); err != nil {
			say("%v", err)
			return
		}
		say("instance 0 restarted on %s", fleet.instances[0].url)
		if env == nil {
			return
		}
		say("instance 0 runs with %s until its first successful provider call", env[0])
		if err := fleet.awaitFailpoint(ctx, 0, say); err != nil {
			say("%v", err)
			return
		}
		say("instance 0 restarted without failpoints on %s", fleet.instances[0].url)
	}
	var midway func()
	var midwayErr error // written by midway, read after Load waited for it
	var moves []MoveReport
	var moveProblems []string // both written by midway, read after Load waited for it
	if cfg.Crash || cfg.Midway != nil || cfg.moving() {
		midway = func() {
			if cfg.Crash {
				crash()
			}
			if cfg.moving() {
				moves, moveProblems = runMoves(ctx, cfg, say)
			}
			if cfg.Midway == nil {
				return
			}
			say("midway hook")
			if err := cfg.Midway(ctx, Midpoint{URLs: fleet.urls(), Say: say}); err != nil {
				midwayErr = fmt.Errorf("gate: midway hook: %w", err)
				say("%v", midwayErr)
				return
			}
			say("midway hook done")
		}
	}
	stopFaults := func() faultStats { return faultStats{} }
	if cfg.transfers() {
		stopFaults = startFaults(ctx, provider, cfg.FaultInterval, providerTimeout*3/2, cfg.FaultKeys, cfg.Outage, say)
	}
	loadBefore := loadAverage()
	res := Load(ctx, cfg, plan, fleet.targets, midway)
	loadAfter := loadAverage()
	faults := stopFaults()
	if err := ctx.Err(); err != nil {
		fleet.stopAll()
		return nil, fmt.Errorf("gate: interrupted after %d requests; instances stopped: %w", res.Requests, err)
	}
	say("load done: %d requests in %v (%.0f/s)", res.Requests, res.Elapsed.Round(1e6), float64(res.Requests)/res.Elapsed.Seconds())

	reservations, problems := fleet.scrapeAll(ctx)
	if midwayErr != nil {
		problems = append(problems, midwayErr.Error())
	}
	problems = append(problems, moveProblems...)
	if cfg.moving() {
		cfg.ShardMap = movedMap(cfg, moves) // each key is judged on its tenant's shard after the moves
	}
	problems = append(problems, fleet.stopAll()...)
	say("instances stopped; recovery pass and verification")

	worker := &recovery.Worker{Store: store, Lease: cfg.Lease}
	if cfg.transfers() {
		worker.Effects = effect.Set{payments.OperationTransfer: payments.TransferEffects(prov.url, 30*time.Second)}
	}
	for _, s := range stores {
		worker.Store = s.store
		rep, err := worker.RunOnce(ctx)
		if err != nil {
			return nil, fmt.Errorf("gate: final recovery pass %s: %w", s.name, err)
		}
		if rep != (recovery.Report{}) {
			say("recovery pass %s: recovered %d, unknown %d, reconciled %d, unsettled %d", s.name, rep.Recovered, rep.Unknown, rep.Reconciled, rep.Unsettled)
		}
	}
	var v Verification
	var shards []ShardReport
	if cfg.sharded() {
		if v, shards, err = verifyShards(ctx, cfg, stores, plan, res, moves); err != nil {
			return nil, err
		}
		if err := checkMovedCopies(ctx, cfg, stores, plan, res, moves); err != nil {
			return nil, err
		}
	} else if cfg.transfers() {
		list, err := provider.transfers(ctx)
		if err != nil {
			return nil, err
		}
		if err := prov.stop(); err != nil {
			problems = append(problems, err.Error())
		}
		prov = nil
		v, err = VerifyTransfers(ctx, store, plan, res, list, cfg.UnknownSLO)
		if err != nil {
			return nil, err
		}
	} else if v, err = Verify(ctx, store, plan, res, mark, cfg.RecoverySLO); err != nil {
		return nil, err
	}
	r := NewReport(cfg, plan, res, v, reservations)
	if cfg.transfers() {
		r.ProviderTimeoutSeconds = providerTimeout.Seconds()
		r.Faults, r.FaultRequests = faults.phases, faults.requests
		r.OutageSeconds = faults.outage.Seconds()
		if cfg.Retention > 0 && faults.outage <= cfg.Retention {
			problems = append(problems, fmt.Sprintf("the provider outage lasted %v, not longer than the retention %v", faults.outage, cfg.Retention))
		}
	}
	r.DB = idemstore.Kind(stores[0].dsn)
	r.Shards = shards
	r.Moves = moves
	r.ServeFlags = fleet.serveFlags()
	r.Crashes = fleet.crashes
	r.LoadAverage = [2]float64{loadBefore, loadAfter}
	r.Load = res
	if cfg.Crash && fleet.crashes == 0 {
		problems = append(problems, "crash injection was asked for but no instance was killed")
	}
	for _, p := range problems {
		r.problem(p)
	}
	r.InstanceProblems = len(problems)
	r.decide()
	return r, nil
}

// fleet is the run's instances. start and crash are called from one
// goroutine at a time; targets are read concurrently by the load.
type fleet struct {
	bin  string
	args []string
	// op is the operation whose reservation histogram is scraped; ""
	// means payments.OperationCreate.
	op        string
	instances []*instance
	targets   []*Target
	// killed holds the histograms scraped from instances just before they
	// were killed (what they observed after that scrape is lost).
	killed  []Histogram
	crashes int
	stopped bool
}

// start starts instance i, with env added to its environment.
func (f *fleet) start(ctx context.Context, i int, env []string) error {
	in, err := startInstance(ctx, "instance "+strconv.Itoa(i), f.bin, f.args, env)
	if err != nil {
		return err
	}
	in.op = f.op
	if i == len(f.instances) {
		f.instances = append(f.instances, in)
		f.targets = append(f.targets, NewTarget(in.url))
		return nil
	}
	f.instances[i] = in
	f.targets[i].Set(in.url)
	return nil
}

// urls returns the instances' current base URLs ("" for one down).
func (f *fleet) urls() []string {
	out := make([]string, len(f.targets))
	for i, t := range f.targets {
		out[i] = t.URL()
	}
	return out
}

// serveFlags returns the arguments the instances were started with after
// "serve", as their command line shows them (instance 0's: all share
// them), with the values of --db and --auth left out: a DSN may hold a
// password, and the auth file is gone once Run returns.
func (f *fleet) serveFlags() []string {
	if len(f.instances) == 0 {
		return nil
	}
	args := f.instances[0].child.Args()
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if i == 0 && a == "serve" {
			continue
		}
		out = append(out, a)
		if (a == "--db" || a == "--auth" || a == "--shard" || a == "--shard-map") && i+1 < len(args) {
			out = append(out, "…")
			i++
		}
	}
	return out
}

// crash scrapes instance i, kills it with SIGKILL and starts it again,
// with env added to its environment.
func (f *fleet) crash(ctx context.Context, i int, env []string) error {
	in := f.instances[i]
	h, err := in.scrape(ctx)
	if err == nil {
		f.killed = append(f.killed, h)
	}
	f.targets[i].Set("")
	in.kill()
	f.crashes++
	return f.restart(ctx, i, env)
}

// restart starts instance i again after the gate killed it.
func (f *fleet) restart(ctx context.Context, i int, env []string) error {
	if err := f.start(ctx, i, env); err != nil {
		return err
	}
	f.instances[i].restarted = true
	return nil
}

// awaitFailpoint waits until instance i, started with a failpoint that
// kills it, has died of it — or kills it itself after failpointWait —
// and starts it again without failpoints. What the instance observed is
// lost with it (its histogram cannot be scraped).
func (f *fleet) awaitFailpoint(ctx context.Context, i int, say func(string, ...any)) error {
	in := f.instances[i]
	timer := time.NewTimer(failpointWait)
	defer timer.Stop()
	select {
	case <-in.child.Exited():
		say("%s died at the failpoint (%v)", in.name, in.child.Wait())
	case <-timer.C:
		say("%s did not reach the failpoint within %v; killing it", in.name, failpointWait)
	case <-ctx.Done():
	}
	f.targets[i].Set("")
	in.kill()
	f.crashes++
	return f.restart(ctx, i, nil)
}

// scrapeAll merges the reservation histograms of the running instances and
// of the killed ones.
func (f *fleet) scrapeAll(ctx context.Context) (Histogram, []string) {
	var total Histogram
	var problems []string
	for _, h := range f.killed {
		if err := total.Add(h); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, in := range f.instances {
		h, err := in.scrape(ctx)
		if err == nil {
			err = total.Add(h)
		}
		if errors.Is(err, errNoHistogram) && in.restarted {
			continue // restarted late in a short load: it reserved nothing
		}
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	return total, problems
}

// stopAll stops every instance once; later calls do nothing.
func (f *fleet) stopAll() []string {
	if f.stopped {
		return nil
	}
	f.stopped = true
	var problems []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, in := range f.instances {
		wg.Go(func() {
			if err := in.stop(); err != nil {
				mu.Lock()
				problems = append(problems, err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return problems
}

// syncWriter serialises writes to w, so progress lines from several
// goroutines neither race nor interleave.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
