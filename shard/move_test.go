package shard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
	"github.com/idemkit/idem/shard/shardmap"
)

// copyNotes is the tests' Move.Data: it copies the tenant's notes rows
// and checks the new shard holds them all.
func copyNotes(ctx context.Context, from, to registry.Store, tenant string) (string, error) {
	var ids []string
	err := from.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM notes WHERE tenant = $1`, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return "", err
	}
	var have int
	err = to.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		for _, id := range ids {
			if _, err := tx.Exec(ctx, `INSERT INTO notes (id, tenant) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, tenant); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM notes WHERE tenant = $1`, tenant).Scan(&have)
	})
	if err != nil {
		return "", err
	}
	if have < len(ids) {
		return "", fmt.Errorf("the new shard holds %d notes of the tenant, the old one %d", have, len(ids))
	}
	return fmt.Sprintf("%d notes", len(ids)), nil
}

// moveFixture is a server over three shards with a static directory
// whose default is a, and tenant acme's answered keys on a.
type moveFixture struct {
	stores map[string]registry.Store
	dir    *shardmap.StaticDirectory
	url    string
	tenant string            // the tenant the tests move
	keys   map[string]answer // its keys and their first answers
}

func newMoveFixture(t *testing.T, stores map[string]registry.Store, tenant string) *moveFixture {
	t.Helper()
	dir, err := shardmap.NewStaticDirectory("a", nil, shardNames)
	if err != nil {
		t.Fatal(err)
	}
	f := &moveFixture{stores: stores, dir: dir, tenant: tenant, keys: map[string]answer{}}
	f.url = server(t, &shard.Router{Shards: stores, Directory: dir, Refresh: time.Nanosecond}) // every request reads the directory
	for range 4 {
		key := idem.NewKey()
		a := do(t, http.MethodPost, f.url+"/v1/notes", tenant, key)
		if a.status != http.StatusCreated || a.shard != "a" {
			t.Fatalf("acme before the move: %+v, want 201 from a", a)
		}
		f.keys[key] = a
	}
	return f
}

// move returns a Move of acme to b with the tests' fast timings.
func (f *moveFixture) move(progress func(shard.MoveStep) error) *shard.Move {
	return &shard.Move{Directory: f.dir, Shards: f.stores, Tenant: f.tenant, To: "b", Actor: "test",
		Settle: 50 * time.Millisecond, Poll: 10 * time.Millisecond, Data: copyNotes, Progress: progress}
}

// checkMoved checks that acme's old keys replay from b byte for byte, a
// new key executes on b, b holds every note of acme once, and the old
// shard refuses acme's new keys in the database (TENANT_MOVED).
func (f *moveFixture) checkMoved(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	e, _ := f.dir.Lookup(ctx, f.tenant)
	if e.Shard != "b" || e.Draining {
		t.Fatalf("acme's entry after the move: %+v, want b, not draining", e)
	}
	for key, first := range f.keys {
		again := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, key)
		if again.status != first.status || !again.replayed || again.op != first.op || again.shard != first.shard {
			t.Errorf("key %s after the move: %+v, want the replay of %+v", key, again, first)
		}
		if _, err := f.stores["b"].GetByID(ctx, first.op); err != nil {
			t.Errorf("record %s on b: %v", first.op, err)
		}
	}
	if n := notes(t, f.stores["b"], f.tenant); n != len(f.keys) {
		t.Errorf("b holds %d notes of acme, want %d (each key executed once)", n, len(f.keys))
	}
	fresh := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, idem.NewKey())
	if fresh.status != http.StatusCreated || fresh.shard != "b" {
		t.Errorf("a new key of acme after the move: %+v, want 201 from b", fresh)
	}
	_, _, err := f.stores["a"].Reserve(ctx, registry.Claim{Scope: idem.ScopeHash{1}, Operation: "notes.create",
		Tenant: f.tenant, Owner: [32]byte{2}, Fingerprint: idem.Fingerprint{3}, Lease: time.Minute})
	if !errors.Is(err, registry.ErrTenantMoved) {
		t.Errorf("a claim of acme on the old shard: %v, want ErrTenantMoved", err)
	}
}

// TestMoveTenant: a move drains, fences, copies and switches the
// tenant; each step is reported once, in order; its old keys replay from
// the new shard and its new keys execute there; another tenant on the
// old shard is not disturbed; moving it back onto the old shard, which
// holds its fenced copy, is refused before anything changes.
// threat:tenant-move-interrupted
func TestMoveTenant(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		f := newMoveFixture(t, stores, "acme")
		var steps []string
		if err := f.move(func(s shard.MoveStep) error { steps = append(steps, s.Step); return nil }).Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]string{shard.StepDrain, shard.StepWait, shard.StepFence, shard.StepCopy, shard.StepData, shard.StepSwitch, shard.StepUndrain})
		if fmt.Sprint(steps) != want {
			t.Errorf("steps %v, want %s", steps, want)
		}
		f.checkMoved(t)
		if other := do(t, http.MethodPost, f.url+"/v1/notes", "zeta", idem.NewKey()); other.status != http.StatusCreated || other.shard != "a" {
			t.Errorf("another tenant on a during and after the move: %+v, want 201 from a", other)
		}
		back := f.move(nil)
		back.To = "a"
		if err := back.Run(t.Context()); !errors.Is(err, shard.ErrMoveRefused) {
			t.Errorf("moving the tenant back onto its old copy: %v, want ErrMoveRefused", err)
		}
		if e, _ := f.dir.Lookup(t.Context(), f.tenant); e.Shard != "b" || e.Draining {
			t.Errorf("the entry after the refused move back: %+v, want b, not draining", e)
		}
		log, err := stores["a"].AuditLog(t.Context(), registry.AuditFilter{})
		if err != nil || len(log) == 0 || log[0].Action != registry.AuditTenantFence {
			t.Errorf("the old shard's audit log: %+v, %v; want the fence first", log, err)
		}
	})
}

// TestMoveResumesAfterEveryStep: a move stopped after any step (its
// Progress fails there, as a crash would stop it) leaves the tenant
// refusing new keys on its old shard, and running it again finishes it
// with every key executed once and every old answer replayed.
// threat:tenant-move-interrupted
func TestMoveResumesAfterEveryStep(t *testing.T) {
	steps := []string{shard.StepDrain, shard.StepWait, shard.StepFence, shard.StepCopy, shard.StepData, shard.StepSwitch}
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		for i, stop := range steps {
			t.Run(stop, func(t *testing.T) {
				// Each step moves its own tenant between fresh names, so the
				// subtests share the stores without sharing a tenant.
				f := newMoveFixture(t, stores, fmt.Sprintf("acme-%d", i))
				stopped := errors.New("stopped")
				err := f.move(func(s shard.MoveStep) error {
					if s.Step == stop {
						return stopped
					}
					return nil
				}).Run(t.Context())
				if !errors.Is(err, stopped) {
					t.Fatalf("the move stopped after %s: %v", stop, err)
				}
				if got := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, idem.NewKey()); got.status != http.StatusServiceUnavailable {
					t.Errorf("a new key while the move is stopped after %s: %+v, want 503", stop, got)
				}
				if err := f.move(nil).Run(t.Context()); err != nil {
					t.Fatalf("resuming after %s: %v", stop, err)
				}
				f.checkMoved(t)
			})
		}
	})
}

// TestMoveAbort: a move stopped after its copy is aborted: the fence is
// lifted and the tenant executes new keys on its old shard again; a Run
// still going when Abort bumped the entry cannot switch.
func TestMoveAbort(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		f := newMoveFixture(t, stores, "acme")
		var m *shard.Move
		m = f.move(func(s shard.MoveStep) error {
			if s.Step == shard.StepData {
				return m.Abort(context.Background())
			}
			return nil
		})
		if err := m.Run(t.Context()); !errors.Is(err, shardmap.ErrStale) {
			t.Fatalf("a move whose tenant was aborted before its switch: %v, want ErrStale", err)
		}
		e, _ := f.dir.Lookup(t.Context(), f.tenant)
		if e.Shard != "a" || e.Draining {
			t.Fatalf("acme after the abort: %+v, want a, not draining", e)
		}
		fresh := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, idem.NewKey())
		if fresh.status != http.StatusCreated || fresh.shard != "a" {
			t.Errorf("a new key of acme after the abort: %+v, want 201 from a", fresh)
		}
		for key, first := range f.keys {
			if again := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, key); !again.replayed || again.op != first.op {
				t.Errorf("key %s after the abort: %+v, want the replay of %+v", key, again, first)
			}
		}
	})
}

// recordingDirectory logs each Set of a Directory into a shared log.
type recordingDirectory struct {
	shardmap.Directory
	log *[]string
}

func (d recordingDirectory) Set(ctx context.Context, e shardmap.Entry, seen int64, actor string) (shardmap.Entry, error) {
	got, err := d.Directory.Set(ctx, e, seen, actor)
	*d.log = append(*d.log, fmt.Sprintf("set %s draining=%t: %v", e.Shard, e.Draining, err == nil))
	return got, err
}

// recordingMover logs each UnfenceTenant of a store into a shared log.
type recordingMover struct {
	registry.Store
	log *[]string
}

func (s recordingMover) mover() registry.TenantMover { return s.Store.(registry.TenantMover) }
func (s recordingMover) TenantInFlight(ctx context.Context, t string) (registry.TenantCounts, error) {
	return s.mover().TenantInFlight(ctx, t)
}
func (s recordingMover) FenceTenant(ctx context.Context, t, to string) error {
	return s.mover().FenceTenant(ctx, t, to)
}
func (s recordingMover) UnfenceTenant(ctx context.Context, t string) error {
	*s.log = append(*s.log, "unfence")
	return s.mover().UnfenceTenant(ctx, t)
}
func (s recordingMover) ExportTenant(ctx context.Context, t string, w io.Writer) (registry.TenantCounts, error) {
	return s.mover().ExportTenant(ctx, t, w)
}
func (s recordingMover) ImportTenant(ctx context.Context, r io.Reader) (registry.TenantCounts, error) {
	return s.mover().ImportTenant(ctx, r)
}

// TestAbortBumpsBeforeUnfence: Abort changes the tenant's entry (the
// undrain) before it lifts the fence, so a Run that read the entry
// earlier cannot switch the tenant away from a shard that is accepting
// its writes again.
// threat:tenant-move-interrupted
func TestAbortBumpsBeforeUnfence(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		f := newMoveFixture(t, stores, "acme")
		var log []string
		m := f.move(nil)
		m.Directory = recordingDirectory{Directory: f.dir, log: &log}
		m.Shards = map[string]registry.Store{"a": recordingMover{Store: stores["a"], log: &log}, "b": stores["b"]}
		m.Progress = func(s shard.MoveStep) error {
			if s.Step == shard.StepFence {
				return errors.New("stopped")
			}
			return nil
		}
		if err := m.Run(t.Context()); err == nil {
			t.Fatal("the move did not stop after the fence")
		}
		log = nil
		m.Progress = nil
		if err := m.Abort(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]string{"set a draining=false: true", "unfence"})
		if fmt.Sprint(log) != want {
			t.Errorf("Abort's steps %q, want %s", log, want)
		}
	})
}

// TestMoveAbortedWhileWaiting: an Abort that runs while a Run waits for
// the executions in flight (before its fence) leaves the tenant served
// by its old shard: the Run, fencing after the Abort, finds the entry
// undrained, lifts its own fence and stops with ErrStale, and the
// tenant's new keys execute on the old shard.
// threat:tenant-move-interrupted
func TestMoveAbortedWhileWaiting(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		f := newMoveFixture(t, stores, "acme")
		var m *shard.Move
		m = f.move(func(s shard.MoveStep) error {
			if s.Step == shard.StepWait {
				return m.Abort(context.Background())
			}
			return nil
		})
		if err := m.Run(t.Context()); !errors.Is(err, shardmap.ErrStale) {
			t.Fatalf("a move aborted while it waited: %v, want ErrStale", err)
		}
		e, _ := f.dir.Lookup(t.Context(), f.tenant)
		if e.Shard != "a" || e.Draining {
			t.Fatalf("the entry after the abort: %+v, want a, not draining", e)
		}
		if got := do(t, http.MethodPost, f.url+"/v1/notes", f.tenant, idem.NewKey()); got.status != http.StatusCreated || got.shard != "a" {
			t.Errorf("a new key after the aborted move: %+v, want 201 from a (no fence left)", got)
		}
	})
}
