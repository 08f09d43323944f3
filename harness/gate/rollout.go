package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// The rollout phase (Config.Rollout, docs/gate.md "The rollout phase").

// RolloutStage is one step of the rollout phase's ramp: the mode and
// percentage the registry's row of payments.create is set to.
type RolloutStage struct {
	Mode    string `json:"mode"`    // registry.RolloutShadow or registry.RolloutEnforce
	Percent int    `json:"percent"` // with enforce: the share of tenants enforced
}

func (s RolloutStage) String() string {
	if s.Mode == registry.RolloutEnforce {
		return fmt.Sprintf("enforce %d%%", s.Percent)
	}
	return s.Mode
}

// RolloutStages is the ramp of the rollout phase: shadow (0 %), enforce
// for 10 %, 50 % (instance 0 is killed with SIGKILL and restarted midway
// through this stage), back to shadow, then forward to 100 %.
var RolloutStages = []RolloutStage{
	{registry.RolloutShadow, 0},
	{registry.RolloutEnforce, 10},
	{registry.RolloutEnforce, 50},
	{registry.RolloutShadow, 0},
	{registry.RolloutEnforce, 100},
}

// rolloutCrashStage is the stage of RolloutStages midway through which
// instance 0 is killed.
const rolloutCrashStage = 2

// DefaultRolloutTenants is the number of tenants (one principal each)
// the rollout phase spreads its keys over when Config.Principals is not
// larger: enough that 10 % and 50 % select different, non-empty sets.
const DefaultRolloutTenants = 40

// rolloutEffectTimeout bounds how long a stage change may take to show on
// every instance (the registry row's refresh is 1 s by default).
const rolloutEffectTimeout = 30 * time.Second

// rolloutActor is the actor of the phase's rollout changes (audited).
const rolloutActor = "idem-gate"

// runRollout is Run for Config.Rollout: the rollout phase.
func runRollout(ctx context.Context, cfg Config) (*Report, error) {
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
	store, err := idemstore.Open(ctx, cfg.DSN, opts)
	if err != nil {
		return nil, fmt.Errorf("gate: opening the database: %w", err)
	}
	defer store.Close()
	rs, ok := any(store).(registry.RolloutStore)
	if !ok {
		return nil, errors.New("gate: this database driver keeps no rollouts")
	}
	mark, err := OutboxMark(ctx, store)
	if err != nil {
		return nil, err
	}

	plan := NewPlan(cfg.keys(), cfg.Retries, max(cfg.Principals, DefaultRolloutTenants), cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	plan.TenantPerPrincipal()
	probes := newRolloutProbes(plan.Run)
	dir, err := os.MkdirTemp("", "idem-gate-")
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	defer os.RemoveAll(dir)
	withProbes := plan
	withProbes.Principals = append(append([]Principal(nil), plan.Principals...), probes.principals()...)
	auth, err := withProbes.AuthFile()
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	authPath := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authPath, auth, 0o600); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}

	// The row exists, in shadow, before any instance starts: an instance
	// configured to enforce would otherwise mark the operation enforced
	// with its first request.
	sw := &switcher{cfg: cfg, rs: rs, cli: hasCommand(ctx, cfg.Bin, "rollout")}
	if _, err := sw.set(ctx, RolloutStages[0]); err != nil {
		return nil, err
	}
	args := []string{"--db", cfg.DSN, "--auth", authPath, "--lease", cfg.Lease.String(),
		"--recover-interval", cfg.RecoverInterval.String(), "--prune-interval", "0"}
	if serveHasFlag(ctx, cfg.Bin, "mode") {
		args = append(args, "--mode", payments.OperationCreate+"="+registry.RolloutShadow)
	}
	if cfg.TwoPhase {
		args = append(args, "--two-phase")
	}
	if cfg.EncryptionKeys != "" {
		args = append(args, "--encryption-keys", cfg.EncryptionKeys)
	}
	if serveHasFlag(ctx, cfg.Bin, "admin-host") {
		args = append(args, "--admin-addr", "127.0.0.1:0")
	}
	fleet := &fleet{bin: cfg.Bin, args: args}
	defer fleet.stopAll()
	for i := range cfg.Instances {
		if err := fleet.start(ctx, i, nil); err != nil {
			return nil, err
		}
		say("instance %d listening on %s", i, fleet.instances[i].url)
	}
	how := "registry.RolloutStore.SetRollout"
	if sw.cli {
		how = "idem rollout"
	}
	say("rollout run %s: %d keys × %d retries over %d tenants on %s; stages %v, changed with %s", plan.Run, cfg.keys(), cfg.Retries,
		len(plan.Principals), idemstore.Kind(cfg.DSN), RolloutStages, how)

	loadBefore := loadAverage()
	res := rolloutLoad(ctx, cfg, plan, fleet, sw, probes, say)
	loadAfter := loadAverage()
	if err := ctx.Err(); err != nil {
		fleet.stopAll()
		return nil, fmt.Errorf("gate: interrupted; instances stopped: %w", err)
	}
	say("load done: %d requests in %v", res.Requests, res.Elapsed.Round(time.Millisecond))
	problems := append([]string(nil), res.Problems...)
	problems = append(problems, fleet.stopAll()...) // serve flushes its verdict counts as it stops
	say("instances stopped; verification")

	row, err := rs.Rollout(ctx, payments.OperationCreate)
	if err != nil {
		return nil, fmt.Errorf("gate: reading the rollout: %w", err)
	}
	verdicts, err := rs.Verdicts(ctx, payments.OperationCreate)
	if err != nil {
		return nil, fmt.Errorf("gate: reading the verdicts: %w", err)
	}
	worker := &recovery.Worker{Store: store, Lease: cfg.Lease}
	if rep, err := worker.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("gate: final recovery pass: %w", err)
	} else if rep != (recovery.Report{}) {
		say("recovery pass: recovered %d, unknown %d", rep.Recovered, rep.Unknown)
	}
	rv, err := VerifyRollout(ctx, store, plan, res, mark)
	if err != nil {
		return nil, err
	}
	r := newRolloutReport(cfg, plan, res, rv, row, verdicts, probes)
	r.Rollout.Changes = how
	r.DB = idemstore.Kind(cfg.DSN)
	r.ServeFlags = fleet.serveFlags()
	r.Crashes = fleet.crashes
	r.LoadAverage = [2]float64{loadBefore, loadAfter}
	if fleet.crashes == 0 {
		problems = append(problems, "no instance was killed during the ramp")
	}
	for _, p := range problems {
		r.problem(p)
	}
	r.InstanceProblems = len(problems)
	r.decide()
	return r, nil
}

// TenantPerPrincipal gives every principal of the plan a tenant of its
// own ("tenant-INDEX"), so a ramp by tenant has as many callers to choose
// from as there are principals.
func (p Plan) TenantPerPrincipal() {
	for i := range p.Principals {
		p.Principals[i].Identity.Tenant = fmt.Sprintf("tenant-%d", i)
	}
}

// switcher changes the rollout row: with "idem rollout" when the binary
// has that command (the operator's way), else through the store.
type switcher struct {
	cfg Config
	rs  registry.RolloutStore
	cli bool
}

// set applies stage and returns when the change is committed.
func (s *switcher) set(ctx context.Context, st RolloutStage) (time.Time, error) {
	reason := "idem gate rollout phase: " + st.String()
	if s.cli {
		args := []string{"rollout", payments.OperationCreate, st.Mode, "--db", s.cfg.DSN, "--actor", rolloutActor, "--reason", reason}
		if st.Mode == registry.RolloutEnforce {
			args = append(args, "--percent", strconv.Itoa(st.Percent))
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, s.cfg.Bin, args...).CombinedOutput()
		if err != nil {
			return time.Time{}, fmt.Errorf("gate: idem %s: %v: %s", strings.Join(args[:3], " "), err, strings.TrimSpace(string(out)))
		}
		return time.Now(), nil
	}
	for {
		cur, err := s.rs.Rollout(ctx, payments.OperationCreate)
		if err != nil {
			return time.Time{}, fmt.Errorf("gate: reading the rollout: %w", err)
		}
		_, err = s.rs.SetRollout(ctx, registry.RolloutChange{Operation: payments.OperationCreate, Mode: st.Mode, Percent: st.Percent,
			Seen: cur.Version, Actor: rolloutActor, Reason: reason})
		switch {
		case errors.Is(err, registry.ErrRolloutStale):
			continue // another change came between the read and the write
		case err != nil:
			return time.Time{}, fmt.Errorf("gate: setting the rollout to %v: %w", st, err)
		}
		return time.Now(), nil
	}
}

// hasCommand reports whether "BIN help" lists the command.
func hasCommand(ctx context.Context, bin, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "help").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}
