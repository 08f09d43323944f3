package registrytest

import (
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Cases of the recovery worker's listing (SPEC E3).

// testExpiredLeases: ExpiredLeases lists the EXECUTING records whose lease
// has expired at the store's "now" (the boundary included), oldest lease
// first, up to the limit; RESERVED (the client's retry continues those),
// unexpired, terminal and UNKNOWN records are not listed, and a takeover's
// new lease hides the record again until it expires.
func testExpiredLeases(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	reserve := func(op string, lease time.Duration) registry.Record {
		c := e.claim(op)
		c.Lease = lease
		return e.reserve(c)
	}
	reserved := reserve("conformance.expired-reserved", 5*time.Second)
	older := reserve("conformance.expired-older", 10*time.Second)
	e.beginEffect(older, "transfer")
	executing := reserve("conformance.expired-executing", 20*time.Second)
	e.beginEffect(executing, "transfer")
	boundary := reserve("conformance.expired-boundary", time.Minute)
	e.beginEffect(boundary, "transfer")
	live := reserve("conformance.expired-live", time.Hour)
	done := reserve("conformance.expired-done", time.Second)
	e.complete(done, outcome("done", 0))
	unknown := e.unknown(e.claim("conformance.expired-unknown"))

	list := func(limit int) []string {
		t.Helper()
		recs, err := e.h.Store.ExpiredLeases(e.ctx, limit)
		if err != nil {
			t.Fatalf("ExpiredLeases(%d): %v", limit, err)
		}
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.OperationID
			if !r.State.InFlight() || r.LeaseUntil.After(base.Add(time.Minute)) {
				t.Errorf("ExpiredLeases lists %s in %s with lease until %v", r.OperationID, r.State, r.LeaseUntil)
			}
		}
		return ids
	}
	if got := list(10); len(got) != 0 {
		t.Errorf("at the start ExpiredLeases lists %v, want none", got)
	}
	e.setNow(base.Add(time.Minute))
	want := []string{older.OperationID, executing.OperationID, boundary.OperationID}
	if got := list(10); !slices.Equal(got, want) {
		t.Errorf("ExpiredLeases = %v, want %v (not reserved %s, live %s, done %s, unknown %s)",
			got, want, reserved.OperationID, live.OperationID, done.OperationID, unknown.OperationID)
	}
	if got := list(2); !slices.Equal(got, want[:2]) {
		t.Errorf("ExpiredLeases(2) = %v, want %v", got, want[:2])
	}
	if got := list(0); len(got) != 0 {
		t.Errorf("ExpiredLeases(0) = %v, want none", got)
	}
	recs, err := e.h.Store.ExpiredLeases(e.ctx, 10)
	if err != nil || len(recs) == 0 {
		t.Fatalf("ExpiredLeases: %v, %v", recs, err)
	}
	for _, r := range recs {
		if r.State != "EXECUTING" {
			t.Errorf("%s listed in state %s; want EXECUTING", r.OperationID, r.State)
		}
	}
	if _, err := e.h.Store.TakeOver(e.ctx, recs[0], time.Hour); err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	if got := list(10); !slices.Equal(got, want[1:]) {
		t.Errorf("after a takeover ExpiredLeases = %v, want %v", got, want[1:])
	}
}
