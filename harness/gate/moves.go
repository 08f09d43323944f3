package gate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/shard"
	"github.com/idemkit/idem/shard/shardmap"
)

// The tenant-move phase of a sharded run (Config.Moves): midway through
// the load, "idem shard move" moves tenants between shards while the
// instances serve them, the first move killed once with SIGKILL and
// resumed. The instances read the shard map from the directory table of
// the default shard, so they follow each switch; the verification then
// judges every key on its tenant's shard after the moves.

// TenantMove is one tenant the run moves to shard To.
type TenantMove struct {
	Tenant string `json:"tenant"`
	To     string `json:"to"`
}

// MoveReport is one tenant move of the run.
type MoveReport struct {
	Tenant string `json:"tenant"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Crashed: the mover was killed with SIGKILL once (after the copy,
	// before the switch) and the move was resumed.
	Crashed bool `json:"crashed"`
	// Seconds is the move's wall time, resumption included.
	Seconds float64 `json:"seconds"`
	// Done: the move finished (the directory names To, not draining).
	Done bool `json:"done"`
	// StaleCopies counts the tenant's records left on the old shard that
	// the new shard does not hold with the same operation and answer.
	StaleCopies int `json:"stale_copies"`
}

// moveCrashPoint is where the first move is killed: after its copy, the
// step whose resumption must not import twice nor switch early.
const moveCrashPoint = "shard-" + shard.StepCopy

// moving reports whether the run moves tenants.
func (c Config) moving() bool { return len(c.Moves) > 0 }

// validateMoves reports a move configuration Run cannot use.
func (c Config) validateMoves() error {
	if !c.moving() {
		if c.MoveCrash {
			return errors.New("gate: a mover crash needs tenant moves")
		}
		return nil
	}
	if !c.sharded() || idemstore.Kind(c.Shards[c.ShardDefault]) != "postgres" {
		return errors.New("gate: tenant moves need shards whose default is PostgreSQL (it holds the directory)")
	}
	seen := map[string]bool{}
	for _, m := range c.Moves {
		switch _, ok := c.Shards[m.To]; {
		case !ok:
			return fmt.Errorf("gate: tenant %s moves to %q, not a shard", m.Tenant, m.To)
		case seen[m.Tenant]:
			return fmt.Errorf("gate: tenant %s moves twice", m.Tenant)
		case c.shardOf(m.Tenant) == m.To:
			return fmt.Errorf("gate: tenant %s is on %s already", m.Tenant, m.To)
		}
		seen[m.Tenant] = true
	}
	return nil
}

// directoryArgs writes the run's map into the directory table of the
// default shard and returns the instances' shard flags, which make them
// read it there.
func directoryArgs(ctx context.Context, cfg Config, stores []runStore) ([]string, error) {
	var pg *idempg.Store
	for _, s := range stores {
		if p, ok := s.store.(*idempg.Store); ok && s.name == cfg.ShardDefault {
			pg = p
		}
	}
	if pg == nil {
		return nil, errors.New("gate: the default shard is not PostgreSQL")
	}
	dir := pg.ShardDirectory(slices.Sorted(maps.Keys(cfg.Shards)))
	if def, err := dir.InitDefault(ctx, cfg.ShardDefault, "idem gate"); err != nil || def != cfg.ShardDefault {
		return nil, fmt.Errorf("gate: the directory's default is %q (%v), want %q", def, err, cfg.ShardDefault)
	}
	for _, tenant := range slices.Sorted(maps.Keys(cfg.ShardMap)) {
		e, err := dir.Lookup(ctx, tenant)
		if err == nil && (e.Shard != cfg.ShardMap[tenant] || e.Draining) {
			_, err = dir.Set(ctx, shardmap.Entry{Tenant: tenant, Shard: cfg.ShardMap[tenant]}, e.Version, "idem gate")
		}
		if err != nil {
			return nil, fmt.Errorf("gate: the directory entry of %s: %w", tenant, err)
		}
	}
	return shardArgs(cfg), nil
}

// shardArgs are the --shard and --shard-default flags of the run.
func shardArgs(cfg Config) []string {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Shards)) {
		args = append(args, "--shard", name+"="+cfg.Shards[name])
	}
	return append(args, "--shard-default", cfg.ShardDefault)
}

// runMoves moves each tenant with "idem shard move", killing the first
// mover once when cfg.MoveCrash; a failed move is a report problem.
func runMoves(ctx context.Context, cfg Config, say func(string, ...any)) ([]MoveReport, []string) {
	var reports []MoveReport
	var problems []string
	for i, m := range cfg.Moves {
		r := MoveReport{Tenant: m.Tenant, From: cfg.shardOf(m.Tenant), To: m.To}
		start := time.Now()
		if i == 0 && cfg.MoveCrash {
			say("moving %s from %s to %s with %s=%s=kill", m.Tenant, r.From, m.To, failpoint.Env, moveCrashPoint)
			out, err := mover(ctx, cfg, m, failpoint.Env+"="+moveCrashPoint+"=kill")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				problems = append(problems, fmt.Sprintf("the mover of %s was to be killed after its copy: %v\n%s", m.Tenant, err, out))
				reports = append(reports, r)
				continue
			}
			r.Crashed = true
			say("mover of %s killed after its copy; resuming", m.Tenant)
		} else {
			say("moving %s from %s to %s", m.Tenant, r.From, m.To)
		}
		out, err := mover(ctx, cfg, m)
		r.Seconds = time.Since(start).Seconds()
		if err != nil {
			problems = append(problems, fmt.Sprintf("moving %s: %v\n%s", m.Tenant, err, out))
		} else {
			r.Done = true
			say("moved %s in %.1fs", m.Tenant, r.Seconds)
		}
		reports = append(reports, r)
	}
	return reports, problems
}

// mover runs "idem shard move" for m with env added.
func mover(ctx context.Context, cfg Config, m TenantMove, env ...string) (string, error) {
	args := append([]string{"shard", "move", m.Tenant, "--to", m.To, "--actor", "idem-gate",
		"--reason", "gate tenant-move phase"}, shardArgs(cfg)...)
	if cfg.EncryptionKeys != "" {
		args = append(args, "--encryption-keys", cfg.EncryptionKeys)
	}
	cmd := exec.CommandContext(ctx, cfg.Bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// movedMap is the run's shard map after the moves that finished.
func movedMap(cfg Config, moves []MoveReport) map[string]string {
	m := maps.Clone(cfg.ShardMap)
	if m == nil {
		m = map[string]string{}
	}
	for _, r := range moves {
		if r.Done {
			m[r.Tenant] = r.To
		}
	}
	return m
}

// checkMovedCopies counts, for each finished move, the tenant's records
// on the old shard that the new shard does not hold with the same
// operation ID, state and answer: the old shard's fenced copy must be
// what the new shard holds, nothing more.
func checkMovedCopies(ctx context.Context, cfg Config, stores []runStore, plan Plan, res LoadResult, moves []MoveReport) error {
	byName := map[string]runStore{}
	for _, s := range stores {
		byName[s.name] = s
	}
	for i, m := range moves {
		if !m.Done {
			continue
		}
		keys, _ := ShardPlan(plan, res, func(k Key) bool { return plan.Principals[k.Principal].Identity.Tenant == m.Tenant })
		old, err := readRecords(ctx, byName[m.From].store, keys, payments.OperationCreate)
		if err != nil {
			return err
		}
		moved, err := readRecords(ctx, byName[m.To].store, keys, payments.OperationCreate)
		if err != nil {
			return err
		}
		for j := range old {
			if old[j].err != nil {
				continue // not on the old shard: accepted after the switch
			}
			a, b := old[j].rec, moved[j].rec
			if moved[j].err != nil || a.OperationID != b.OperationID || a.State != b.State ||
				(a.Response == nil) != (b.Response == nil) || a.Response != nil && a.Response.Digest() != b.Response.Digest() {
				moves[i].StaleCopies++
			}
		}
	}
	return nil
}
