package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

func TestDecideRetired(t *testing.T) {
	fp, other := idem.Fingerprint{1}, idem.Fingerprint{2}
	for _, s := range []idem.State{idem.StateSucceeded, idem.StateFailedFinal, idem.StateRejected} {
		rec := registry.Record{State: s, Fingerprint: fp, RetiredAt: time.Unix(1, 0)}
		if !rec.Retired() {
			t.Fatalf("a record with RetiredAt set is not Retired")
		}
		for _, c := range []struct {
			created bool
			fp      idem.Fingerprint
			want    registry.Verdict
		}{
			{false, fp, registry.Retired},
			{false, other, registry.Conflict},
			{true, other, registry.Conflict},
		} {
			if got := registry.Decide(rec, c.created, c.fp); got != c.want {
				t.Errorf("Decide(retired %s, created %v, same fp %v) = %v, want %v", s, c.created, c.fp == fp, got, c.want)
			}
		}
	}
	if (registry.Record{State: idem.StateSucceeded}).Retired() {
		t.Errorf("a record without RetiredAt is Retired")
	}
	if registry.Retired.String() != "retired" {
		t.Errorf("Retired.String() = %q", registry.Retired.String())
	}
	for _, c := range []struct{ ttl, want time.Duration }{{0, 0}, {-time.Second, 0}, {time.Hour, time.Hour}} {
		if got := (registry.Claim{TombstoneTTL: c.ttl}).TombstoneTTLOrForever(); got != c.want {
			t.Errorf("TombstoneTTLOrForever(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}

// fakePruner returns the results of script in turn, then zeros.
type fakePruner struct {
	script []registry.PruneResult
	err    error
	calls  int
	limits []int
}

func (f *fakePruner) Prune(_ context.Context, limit int) (registry.PruneResult, error) {
	f.limits = append(f.limits, limit)
	f.calls++
	if f.calls > len(f.script) {
		return registry.PruneResult{}, f.err
	}
	return f.script[f.calls-1], nil
}

func TestPruneAll(t *testing.T) {
	p := &fakePruner{script: []registry.PruneResult{{Retired: 2, Deleted: 0}, {Retired: 1, Deleted: 2}, {Retired: 1, Deleted: 1}}}
	var batches int
	total, err := registry.PruneAll(context.Background(), p, 2, func(registry.PruneResult) { batches++ })
	if err != nil || total != (registry.PruneResult{Retired: 4, Deleted: 3}) || p.calls != 3 || batches != 3 {
		t.Errorf("PruneAll = %+v, %v after %d calls (%d batches); want 4 retired, 3 deleted after 3", total, err, p.calls, batches)
	}
	p = &fakePruner{}
	if _, err := registry.PruneAll(context.Background(), p, 0, nil); err != nil || p.limits[0] != registry.DefaultPruneBatch {
		t.Errorf("PruneAll with batch 0: limit %v err %v, want %d", p.limits, err, registry.DefaultPruneBatch)
	}
	boom := errors.New("boom")
	p = &fakePruner{script: []registry.PruneResult{{Retired: 1}}, err: boom}
	if total, err := registry.PruneAll(context.Background(), p, 1, nil); !errors.Is(err, boom) || total.Retired != 1 {
		t.Errorf("PruneAll with a failing batch: %+v, %v; want the first batch's count and the error", total, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := registry.PruneAll(ctx, &fakePruner{}, 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("PruneAll with a cancelled context: %v", err)
	}
}
