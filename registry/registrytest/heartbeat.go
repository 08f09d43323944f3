package registrytest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// testExtendLease: the heartbeat moves the lease of an in-flight record
// still owned at the caller's generation, so recovery cannot take it over
// while it beats; a stale generation or a finished record is fenced.
func testExtendLease(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.heartbeat")
	c.Lease = time.Minute
	rec := e.reserve(c)

	e.setNow(base.Add(50 * time.Second))
	until, err := e.h.Store.ExtendLease(e.ctx, rec, time.Minute)
	if err != nil || !until.Equal(base.Add(110*time.Second)) {
		t.Fatalf("ExtendLease: %v, %v; want lease until %v", until, err, base.Add(110*time.Second))
	}
	e.setNow(base.Add(90 * time.Second)) // past the first lease, inside the extended one
	if _, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver inside the extended lease: %v, want ErrFenced", err)
	}
	if recs, err := e.h.Store.ExpiredLeases(e.ctx, 10); err != nil || len(recs) != 0 {
		t.Errorf("ExpiredLeases inside the extended lease: %d records, %v", len(recs), err)
	}
	got, err := e.h.Store.Get(e.ctx, rec.Scope)
	if err != nil || !got.LeaseUntil.Equal(until) || got.OwnerGen != 1 {
		t.Errorf("record after the heartbeat: lease %v gen %d err %v", got.LeaseUntil, got.OwnerGen, err)
	}

	e.setNow(base.Add(10 * time.Minute))
	taken, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute)
	if err != nil {
		t.Fatalf("TakeOver after the lease ran out: %v", err)
	}
	if _, err := e.h.Store.ExtendLease(e.ctx, rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("heartbeat of the old generation: %v, want ErrFenced", err)
	}
	if _, err := e.h.Store.ExtendLease(e.ctx, taken, time.Minute); err != nil {
		t.Errorf("heartbeat of the new generation: %v", err)
	}
	done := e.complete(taken, outcome("heartbeat", 0))
	if _, err := e.h.Store.ExtendLease(e.ctx, done, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("heartbeat of a finished record: %v, want ErrFenced", err)
	}
}
