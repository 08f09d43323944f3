package shard

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard/shardmap"
)

// Defaults of a Move.
const (
	// DefaultMoveSettle is how long Move waits after draining the tenant
	// before it counts the executions in flight, when Move.Settle is 0:
	// twice DefaultRefresh, so that a Router whose directory answers has
	// read the drain (one whose directory fails may use its cached entry
	// up to MaxAge; the count after the fence covers it).
	DefaultMoveSettle = 2 * DefaultRefresh
	// DefaultMovePoll is how often Move counts the executions in flight
	// while it waits for them to end, when Move.Poll is 0.
	DefaultMovePoll = 200 * time.Millisecond
)

// Steps of a move, in order (MoveStep.Step).
const (
	StepDrain   = "drain"   // the tenant's entry is draining: new keys refused 503 DRAINING
	StepWait    = "wait"    // no execution of the tenant holds a live lease on the old shard
	StepFence   = "fence"   // the old shard refuses every write of the tenant (TENANT_MOVED)
	StepCopy    = "copy"    // the tenant's records are on the new shard
	StepData    = "data"    // the tenant's business rows are on the new shard (Move.Data)
	StepSwitch  = "switch"  // the directory names the new shard (still draining)
	StepUndrain = "undrain" // the tenant's new keys are accepted, on the new shard
	StepAbort   = "abort"   // Abort lifted the fence and the drain
)

// ErrMoveRefused: the move cannot run as asked — an unknown shard, a
// shard whose store cannot move tenants, a tenant the directory cannot
// hold, or a copy that the new shard does not hold whole. Nothing was
// switched.
var ErrMoveRefused = errors.New("shard: tenant move refused")

// Move moves one tenant's operations from the shard the directory names
// to the shard To, without a second execution of any of its keys and
// without changing any answer it gave (docs/shards-move.md): drain,
// wait until nothing of the tenant is in flight, fence the old shard,
// copy the records (and, through Data, the business rows), switch the
// directory with a compare-and-set, undrain.
//
// Every step can be run again, so a Move that stopped anywhere — a
// crash, a lost connection, an ended ctx — is resumed by running it
// again: Run reads where the tenant is from the directory (still on the
// old shard and draining: the steps up to the switch are done again,
// each idempotent; on To and draining: only the undrain is left).
//
// Set the fields before Run and do not change them. A Move is safe for
// concurrent use, and two Runs of the same tenant at once are safe too:
// the directory's compare-and-set lets one switch.
type Move struct {
	// Directory is the shard map. Required; a StaticDirectory moves only
	// within the process.
	Directory shardmap.Directory
	// Shards are the shards' stores by name; the old and the new shard's
	// must be registry.TenantMover (every driver's Store is; a wrapper
	// such as registry.WithTimeout's is not). Required.
	Shards map[string]registry.Store
	// Tenant is the tenant to move.
	Tenant string
	// To is the shard the tenant moves to.
	To string
	// Actor is who moves it, for the directory's UpdatedBy and the audit
	// log. Required.
	Actor string
	// Reason is written into the audit entries; optional.
	Reason string
	// Settle is how long Run waits after the drain before it counts the
	// executions in flight: at least the Routers' Refresh. 0 or less
	// means DefaultMoveSettle.
	Settle time.Duration
	// Poll is how often Run counts the executions in flight; 0 or less
	// means DefaultMovePoll.
	Poll time.Duration
	// Data, if set, copies the tenant's business rows from the old
	// shard's database to the new one's, after the fence and before the
	// switch. It must be idempotent (Run may call it again after a
	// crash) and fail if the new shard does not hold them all; its
	// summary is shown as the step's Note. nil: the service keeps no
	// business rows of its own beside the registry.
	Data func(ctx context.Context, from, to registry.Store, tenant string) (string, error)
	// Progress, if set, is called after each step with what it did; an
	// error it returns stops Run there (the move resumes from that step).
	Progress func(MoveStep) error
}

// MoveStep is one step of a move that Run or Abort finished.
type MoveStep struct {
	// Step is one of the Step constants.
	Step string
	// From and To are the old and the new shard.
	From, To string
	// Entry is the tenant's directory entry after the step.
	Entry shardmap.Entry
	// Counts are the step's counts: in flight (StepWait), the records
	// copied and those the new shard holds (StepCopy).
	Counts registry.TenantCounts
	// Note says what the step did, in words.
	Note string
}

// Run moves the tenant, or finishes a move that stopped; a tenant
// already on To and not draining is left alone. ctx governs the whole
// move: when it ends, Run stops at the step it is in and returns ctx's
// error, and running it again resumes.
func (m *Move) Run(ctx context.Context) error {
	if _, ok := m.Shards[m.To]; !ok || !shardmap.Storable(m.Tenant) || m.Actor == "" {
		return fmt.Errorf("%w: tenant, actor and a known destination shard are required (to %q)", ErrMoveRefused, m.To)
	}
	e, err := m.Directory.Lookup(ctx, m.Tenant)
	if err != nil {
		return fmt.Errorf("shard: move: reading the tenant's entry: %w", err)
	}
	if e.Shard == m.To {
		if !e.Draining {
			return m.progress(MoveStep{Step: StepUndrain, From: e.Shard, To: m.To, Entry: e, Note: "the tenant is already on " + m.To})
		}
		return m.undrain(ctx, e, e.Shard)
	}
	from := e.Shard
	src, dst, err := m.movers(from)
	if err != nil {
		return err
	}
	if !e.Draining {
		// A fresh move: the new shard must not hold the tenant already (an
		// earlier move's copy, fenced there or left by an abort), or the
		// import would stop the move after the fence.
		if have, err := dst.TenantInFlight(ctx, m.Tenant); err != nil {
			return fmt.Errorf("shard: move: counting the tenant's records on %s: %w", m.To, err)
		} else if have.Records > 0 {
			return fmt.Errorf("%w: %s already holds %d records of the tenant (the copy of an earlier move); nothing was changed", ErrMoveRefused, m.To, have.Records)
		}
		if e, err = m.set(ctx, shardmap.Entry{Tenant: m.Tenant, Shard: from, Draining: true}, e.Version); err != nil {
			return err
		}
	}
	if err := m.progress(MoveStep{Step: StepDrain, From: from, To: m.To, Entry: e, Note: "new keys of the tenant are refused 503 DRAINING; replays are served"}); err != nil {
		return err
	}
	if err := sleep(ctx, cmp.Or(max(m.Settle, 0), DefaultMoveSettle)); err != nil {
		return err
	}
	counts, err := m.waitIdle(ctx, src)
	if err != nil {
		return err
	}
	if err := m.progress(MoveStep{Step: StepWait, From: from, To: m.To, Entry: e, Counts: counts,
		Note: fmt.Sprintf("nothing in flight; %d records, %d unknown", counts.Records, counts.Unknown)}); err != nil {
		return err
	}
	fence := registry.AuditEntry{Actor: m.Actor, Action: registry.AuditTenantFence, Detail: m.detail("fenced, moving to shard " + m.To)}
	if err := registry.Audited(ctx, m.Shards[from], fence, func() error { return src.FenceTenant(ctx, m.Tenant, m.To) }); err != nil {
		return fmt.Errorf("shard: move: fencing the tenant on %s: %w", from, err)
	}
	if err := m.fenced(ctx, from); err != nil {
		return err
	}
	// A server that read the directory before the drain (its cache may be
	// as old as the Router's MaxAge while the directory fails to answer)
	// may have started a key after the first count; the fence returned
	// only once every such write ended, so this count is final.
	if counts, err = m.waitIdle(ctx, src); err != nil {
		return err
	}
	if err := m.progress(MoveStep{Step: StepFence, From: from, To: m.To, Entry: e, Counts: counts,
		Note: "the old shard refuses the tenant's writes (TENANT_MOVED)"}); err != nil {
		return err
	}
	if err := m.copy(ctx, e, from, src, dst); err != nil {
		return err
	}
	if m.Data != nil {
		note, err := m.Data(ctx, m.Shards[from], m.Shards[m.To], m.Tenant)
		if err != nil {
			return fmt.Errorf("shard: move: copying the tenant's business rows: %w", err)
		}
		if err := m.progress(MoveStep{Step: StepData, From: from, To: m.To, Entry: e, Note: note}); err != nil {
			return err
		}
	}
	if e, err = m.set(ctx, shardmap.Entry{Tenant: m.Tenant, Shard: m.To, Draining: true}, e.Version); err != nil {
		return err
	}
	if err := m.progress(MoveStep{Step: StepSwitch, From: from, To: m.To, Entry: e, Note: "the directory names " + m.To}); err != nil {
		return err
	}
	return m.undrain(ctx, e, from)
}

// Abort undoes a move that has not switched: the tenant is undrained on
// the shard it is on and the fence there is lifted. A move that has
// switched cannot be undone (its new keys may be on the new shard): Abort
// then only undrains it there. The undrain comes first: it changes the
// entry's Version, so a Run still going can no longer switch, and a Run
// that fences after it sees the entry undrained and lifts its own fence
// (fenced). The fence is lifted even when no move is under way — a
// tenant is never rightly fenced on the shard that serves it — so an
// Abort stopped between its two steps is finished by running it again.
// ctx governs the whole call.
func (m *Move) Abort(ctx context.Context) error {
	e, err := m.Directory.Lookup(ctx, m.Tenant)
	if err != nil {
		return fmt.Errorf("shard: abort: reading the tenant's entry: %w", err)
	}
	note := "no move of the tenant was under way; its fence on " + e.Shard + ", if any, is lifted"
	if e.Draining {
		if e, err = m.set(ctx, shardmap.Entry{Tenant: m.Tenant, Shard: e.Shard}, e.Version); err != nil {
			return err
		}
		note = "the tenant is undrained and its fence lifted on " + e.Shard
	}
	if err := m.unfence(ctx, e.Shard, "move aborted"); err != nil {
		return fmt.Errorf("shard: abort: %w", err)
	}
	return m.progress(MoveStep{Step: StepAbort, From: e.Shard, Entry: e, Note: note})
}

// fenced checks, after the fence, that the move still owns the tenant's
// entry: drained on from. An Abort that undrained it meanwhile means the
// fence must go again (the tenant is served from from); a switch by
// another Run leaves it. Either way the move stops with ErrStale.
func (m *Move) fenced(ctx context.Context, from string) error {
	now, err := m.Directory.Lookup(ctx, m.Tenant)
	switch {
	case err != nil:
		return fmt.Errorf("shard: move: reading the tenant's entry after the fence: %w", err)
	case now.Shard == from && now.Draining:
		return nil
	case now.Shard == from:
		if err := m.unfence(ctx, from, "the move was aborted while it fenced"); err != nil {
			return fmt.Errorf("shard: move: %w", err)
		}
		return fmt.Errorf("shard: move: %w: the move was aborted; the fence on %s is lifted", shardmap.ErrStale, from)
	default:
		return fmt.Errorf("shard: move: %w: the tenant was switched to %s meanwhile", shardmap.ErrStale, now.Shard)
	}
}

// unfence lifts the tenant's fence on shard name, audited.
func (m *Move) unfence(ctx context.Context, name, why string) error {
	st, ok := m.Shards[name].(registry.TenantMover)
	if !ok {
		return fmt.Errorf("%w: shard %q cannot move tenants", ErrMoveRefused, name)
	}
	e := registry.AuditEntry{Actor: m.Actor, Action: registry.AuditTenantUnfence, Detail: m.detail(why)}
	if err := registry.Audited(ctx, m.Shards[name], e, func() error { return st.UnfenceTenant(ctx, m.Tenant) }); err != nil {
		return fmt.Errorf("lifting the fence on %s: %w", name, err)
	}
	return nil
}

// movers returns the old and the new shard as TenantMovers.
func (m *Move) movers(from string) (src, dst registry.TenantMover, err error) {
	src, ok1 := m.Shards[from].(registry.TenantMover)
	dst, ok2 := m.Shards[m.To].(registry.TenantMover)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%w: shard %q or %q is unknown or cannot move tenants", ErrMoveRefused, from, m.To)
	}
	return src, dst, nil
}

// waitIdle polls the old shard until no execution of the tenant holds a
// live lease.
func (m *Move) waitIdle(ctx context.Context, src registry.TenantMover) (registry.TenantCounts, error) {
	for {
		c, err := src.TenantInFlight(ctx, m.Tenant)
		if err != nil {
			return c, fmt.Errorf("shard: move: counting the tenant's executions in flight: %w", err)
		}
		if c.InFlight == 0 {
			return c, nil
		}
		if err := sleep(ctx, cmp.Or(max(m.Poll, 0), DefaultMovePoll)); err != nil {
			return c, err
		}
	}
}

// copy exports the fenced tenant from the old shard and imports it into
// the new one, then checks the new shard holds every record.
func (m *Move) copy(ctx context.Context, e shardmap.Entry, from string, src, dst registry.TenantMover) error {
	var stream bytes.Buffer
	out, err := src.ExportTenant(ctx, m.Tenant, &stream)
	if err != nil {
		return fmt.Errorf("shard: move: exporting the tenant from %s: %w", from, err)
	}
	imp := registry.AuditEntry{Actor: m.Actor, Action: registry.AuditTenantImport,
		Detail: m.detail(fmt.Sprintf("imported from shard %s: %d records, %d effects, %d outbox messages", from, out.Records, out.Effects, out.Outbox))}
	var in registry.TenantCounts
	if err := registry.Audited(ctx, m.Shards[m.To], imp, func() (err error) { in, err = dst.ImportTenant(ctx, &stream); return err }); err != nil {
		return fmt.Errorf("shard: move: importing the tenant into %s: %w", m.To, err)
	}
	have, err := dst.TenantInFlight(ctx, m.Tenant)
	if err != nil {
		return fmt.Errorf("shard: move: counting the tenant's records on %s: %w", m.To, err)
	}
	if have.Records != out.Records {
		return fmt.Errorf("%w: %s holds %d records of the tenant after the import, the export had %d", ErrMoveRefused, m.To, have.Records, out.Records)
	}
	return m.progress(MoveStep{Step: StepCopy, From: from, To: m.To, Entry: e, Counts: out,
		Note: fmt.Sprintf("%d records (%d new), %d tombstones, %d effects, %d outbox messages", out.Records, in.Records, out.Tombstones, out.Effects, out.Outbox)})
}

// undrain accepts the tenant's new keys on the shard it is on.
func (m *Move) undrain(ctx context.Context, e shardmap.Entry, from string) error {
	e, err := m.set(ctx, shardmap.Entry{Tenant: m.Tenant, Shard: e.Shard}, e.Version)
	if err != nil {
		return err
	}
	return m.progress(MoveStep{Step: StepUndrain, From: from, To: e.Shard, Entry: e, Note: "the tenant's new keys are accepted on " + e.Shard})
}

// set writes the entry with a compare-and-set on seen.
func (m *Move) set(ctx context.Context, e shardmap.Entry, seen int64) (shardmap.Entry, error) {
	got, err := m.Directory.Set(ctx, e, seen, m.Actor)
	if err != nil {
		return shardmap.Entry{}, fmt.Errorf("shard: move: setting the tenant's entry (shard %s, draining %t): %w", e.Shard, e.Draining, err)
	}
	return got, nil
}

// progress reports a finished step.
func (m *Move) progress(s MoveStep) error {
	if m.Progress == nil {
		return nil
	}
	return m.Progress(s)
}

// detail is an audit entry's text: what happened to which tenant, and why.
func (m *Move) detail(what string) string {
	d := fmt.Sprintf("tenant %x: %s", registry.TenantHash(m.Tenant), what)
	if m.Reason != "" {
		d += "; reason: " + m.Reason
	}
	return d
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
