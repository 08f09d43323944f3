package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// ShardReport is one shard's part of a sharded run (Config.Shards): its
// own verification, and what it holds of other shards' tenants.
type ShardReport struct {
	Name    string   `json:"name"`
	Tenants []string `json:"tenants"` // the plan's tenants the map sends to it
	Keys    int      `json:"keys"`
	// Operations ... DuplicateOutbox are its Verification's.
	Operations        int `json:"operations"`
	AnsweredKeys      int `json:"answered_keys"`
	ConsistentKeys    int `json:"consistent_keys"`
	AcknowledgedLost  int `json:"acknowledged_lost"`
	ReExecuted        int `json:"re_executed"`
	DuplicatePayments int `json:"duplicate_payments"`
	DuplicateOutbox   int `json:"duplicate_outbox"`
	// ReplayDigestConsistency is ConsistentKeys / AnsweredKeys.
	ReplayDigestConsistency float64 `json:"replay_digest_consistency"`
	// Misplaced counts records and payment rows of the other shards'
	// keys found on this shard: each must be on its tenant's shard only.
	Misplaced int `json:"misplaced"`
}

// sharded reports whether the run serves from several registries.
func (c Config) sharded() bool { return len(c.Shards) > 0 }

// shardOf is the shard the run's map sends tenant to.
func (c Config) shardOf(tenant string) string { return cmp.Or(c.ShardMap[tenant], c.ShardDefault) }

// validateShards reports a sharded configuration Run cannot use.
func (c Config) validateShards() error {
	if !c.sharded() {
		if c.ShardDefault != "" || len(c.ShardMap) > 0 {
			return errors.New("gate: a shard default or map needs shards")
		}
		return nil
	}
	for name, dsn := range c.Shards {
		if idemstore.Kind(dsn) == "" {
			return fmt.Errorf("gate: shard %s: the database must be postgres://… or sqlite:PATH", name)
		}
	}
	if _, ok := c.Shards[c.ShardDefault]; !ok {
		return fmt.Errorf("gate: the shard default %q is not a shard", c.ShardDefault)
	}
	for tenant, name := range c.ShardMap {
		if _, ok := c.Shards[name]; !ok {
			return fmt.Errorf("gate: the map sends %s to %q, not a shard", tenant, name)
		}
	}
	if c.transfers() || c.Rollout || c.Retention > 0 {
		return errors.New("gate: a sharded run drives the payments workload, without rollout or retention")
	}
	return nil
}

// runStore is one registry the run verifies: the only one, or a shard.
type runStore struct {
	name, dsn string
	store     registry.Store
	mark      int64 // the outbox sequence number before the run
}

// openStores opens the run's registries (cfg.DSN, or every shard in
// name order) and reads their outbox marks; close closes them.
func openStores(ctx context.Context, cfg Config, opts idemstore.Options) (_ []runStore, close func(), err error) {
	var out []runStore
	close = func() {
		for _, s := range out {
			s.store.Close()
		}
	}
	defer func() {
		if err != nil {
			close()
		}
	}()
	dsns := map[string]string{"": cfg.DSN}
	if cfg.sharded() {
		dsns = cfg.Shards
	}
	for _, name := range slices.Sorted(maps.Keys(dsns)) {
		st, err := idemstore.Open(ctx, dsns[name], opts)
		if err != nil {
			return nil, close, fmt.Errorf("gate: opening the database %s: %w", name, err)
		}
		out = append(out, runStore{name: name, dsn: dsns[name], store: st})
		if out[len(out)-1].mark, err = OutboxMark(ctx, st); err != nil {
			return nil, close, err
		}
	}
	return out, close, nil
}

// dbArgs are the instances' database flags: --db, or the shards with
// the map written as a --shard-map file in dir.
func dbArgs(cfg Config, dir string) ([]string, error) {
	if !cfg.sharded() {
		return []string{"--db", cfg.DSN}, nil
	}
	tenants := cfg.ShardMap
	if tenants == nil {
		tenants = map[string]string{}
	}
	b, err := json.Marshal(map[string]any{"default": cfg.ShardDefault, "tenants": tenants})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "shards.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	return append(shardArgs(cfg), "--shard-map", path), nil
}

// ShardPlan returns the part of plan and res whose keys keep accepts, in
// order; each Key keeps its Index (the memo's number).
func ShardPlan(plan Plan, res LoadResult, keep func(Key) bool) (Plan, LoadResult) {
	sub, subRes := plan, res
	sub.Keys, subRes.Keys = nil, nil
	for i, k := range plan.Keys {
		if !keep(k) {
			continue
		}
		sub.Keys = append(sub.Keys, k)
		if i < len(res.Keys) {
			subRes.Keys = append(subRes.Keys, res.Keys[i])
		}
	}
	return sub, subRes
}

// verifyShards verifies each shard with its tenants' keys (Verify), sums
// the verifications, and counts on each shard the records and payment
// rows of the other shards' keys, but for those of tenants that moves
// took away from it.
func verifyShards(ctx context.Context, cfg Config, stores []runStore, plan Plan, res LoadResult, moves []MoveReport) (Verification, []ShardReport, error) {
	var total Verification
	var reports []ShardReport
	tenantShard := func(k Key) string { return cfg.shardOf(plan.Principals[k.Principal].Identity.Tenant) }
	for _, s := range stores {
		mine, mineRes := ShardPlan(plan, res, func(k Key) bool { return tenantShard(k) == s.name })
		v, err := Verify(ctx, s.store, mine, mineRes, s.mark, cfg.RecoverySLO)
		if err != nil {
			return total, nil, fmt.Errorf("gate: shard %s: %w", s.name, err)
		}
		// A tenant moved away leaves its fenced copy behind
		// (checkMovedCopies judges it): not misplaced.
		left := func(k Key) bool {
			return slices.ContainsFunc(moves, func(m MoveReport) bool {
				return m.Done && m.From == s.name && m.Tenant == plan.Principals[k.Principal].Identity.Tenant
			})
		}
		others, _ := ShardPlan(plan, res, func(k Key) bool { return tenantShard(k) != s.name && !left(k) })
		misplaced, err := countMisplaced(ctx, s.store, others)
		if err != nil {
			return total, nil, fmt.Errorf("gate: shard %s: %w", s.name, err)
		}
		r := ShardReport{Name: s.name, Keys: len(mine.Keys), Operations: v.Operations, AnsweredKeys: v.AnsweredKeys,
			ConsistentKeys: v.ConsistentKeys, AcknowledgedLost: v.AcknowledgedLost, ReExecuted: v.ReExecuted,
			DuplicatePayments: v.DuplicatePayments, DuplicateOutbox: v.DuplicateOutbox, Misplaced: misplaced}
		if v.AnsweredKeys > 0 {
			r.ReplayDigestConsistency = float64(v.ConsistentKeys) / float64(v.AnsweredKeys)
		}
		for _, p := range plan.Principals {
			if t := p.Identity.Tenant; cfg.shardOf(t) == s.name && !slices.Contains(r.Tenants, t) {
				r.Tenants = append(r.Tenants, t)
			}
		}
		if misplaced > 0 {
			v.problem("shard %s holds %d records or payments of other shards' tenants", s.name, misplaced)
		}
		total.add(v)
		reports = append(reports, r)
	}
	return total, reports, nil
}

// countMisplaced counts the records and payment rows store holds of
// others' keys.
func countMisplaced(ctx context.Context, store registry.Store, others Plan) (int, error) {
	recs, err := readRecords(ctx, store, others, payments.OperationCreate)
	if err != nil {
		return 0, err
	}
	pays, _, err := readEffects(ctx, store, others, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for i, r := range recs {
		if !errors.Is(r.err, registry.ErrNotFound) {
			n++ // a record (or an unreadable one): either way it is here
		}
		n += len(pays[i])
	}
	return n, nil
}

// add adds o's counts and problems to v.
func (v *Verification) add(o Verification) {
	v.Operations += o.Operations
	v.PaymentRows += o.PaymentRows
	v.OutboxRows += o.OutboxRows
	v.DuplicatePayments += o.DuplicatePayments
	v.DuplicateOutbox += o.DuplicateOutbox
	v.MissingEffects += o.MissingEffects
	v.TerminalAnswers += o.TerminalAnswers
	v.DigestMismatches += o.DigestMismatches
	v.AnsweredKeys += o.AnsweredKeys
	v.ConsistentKeys += o.ConsistentKeys
	v.AcknowledgedLost += o.AcknowledgedLost
	v.ReExecuted += o.ReExecuted
	v.CorruptSnapshots += o.CorruptSnapshots
	v.UnknownPastSLO += o.UnknownPastSLO
	v.InFlight += o.InFlight
	v.Stored5xx += o.Stored5xx
	for _, p := range o.Problems {
		v.problem("%s", p)
	}
}

// SpreadTenants puts the plan's principals in n tenants, "tenant-0" to
// "tenant-(n-1)", round robin (NewPlan uses two).
func (p Plan) SpreadTenants(n int) {
	for i := range p.Principals {
		p.Principals[i].Identity.Tenant = fmt.Sprintf("tenant-%d", i%n)
	}
}
