package registrytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// testResponseSnapshotReplayed: a replay returns exactly the snapshot —
// status, media type, Location, ETag and body — with its digest stored.
func testResponseSnapshotReplayed(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Location", "/payments/pay_123")
	h.Set("ETag", `W/"7"`)
	h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
	h.Set("Set-Cookie", "session=secret")
	h.Set("X-Trace-Id", "trace")
	for _, tc := range []struct {
		name   string
		status int
		body   []byte
	}{
		{"full", 201, []byte("{\"id\":\"pay_123\"}\x00\xff")},
		{"empty body", 204, []byte{}},
		{"body at the cap", 200, []byte(strings.Repeat("x", idem.DefaultMaxResponseBody))},
	} {
		resp, err := idem.NewResponse(tc.status, h, tc.body, 0)
		if err != nil {
			t.Fatalf("%s: NewResponse: %v", tc.name, err)
		}
		c := e.claim("conformance.snapshot")
		done := e.complete(e.reserve(c), registry.Outcome{State: idem.StateSucceeded, Response: resp})
		if !sameResponse(done.Response, resp) {
			t.Errorf("%s: Complete returned %+v, want %+v", tc.name, done.Response, resp)
		}
		rec, created, err := e.h.Store.Reserve(e.ctx, c)
		if err != nil || created || registry.Decide(rec, false, c.Fingerprint) != registry.Replay {
			t.Fatalf("%s: duplicate Reserve: created %v err %v state %s, want a replay", tc.name, created, err, rec.State)
		}
		if !sameResponse(rec.Response, resp) {
			t.Errorf("%s: replayed %+v, want exactly %+v", tc.name, rec.Response, resp)
		}
		d := resp.Digest()
		if n := e.count(countDigest, c.Scope[:], d[:]); n != 1 {
			t.Errorf("%s: stored digest is not the response's digest", tc.name)
		}
	}
}

// testCompleteValidatesOutcome: Complete records only terminal outcomes
// that are legal from the record's state, and returns a business
// function's error unchanged.
func testCompleteValidatesOutcome(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.outcome")
	rec := e.reserve(c)
	for _, s := range []idem.State{"", idem.StateReserved, idem.StateExecuting, idem.StateUnknown, "BOGUS"} {
		out := outcome("bad", 1)
		out.State = s
		if _, err := e.h.Store.Complete(e.ctx, rec, effect("bad", out)); err == nil {
			t.Errorf("Complete with outcome state %q succeeded", s)
		}
	}
	if n := e.effects(rec.OperationID) + e.outbox(rec.OperationID); n != 0 {
		t.Errorf("refused outcomes left %d business and outbox rows", n)
	}
	if got, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || got.State != idem.StateReserved {
		t.Errorf("after refused outcomes: state %s err %v, want RESERVED", got.State, err)
	}
	if _, err := e.h.Store.Complete(e.ctx, rec, failing(errBusiness)); !errors.Is(err, errBusiness) {
		t.Errorf("Complete with a failing business function: %v, want its error", err)
	}

	for _, s := range []idem.State{idem.StateSucceeded, idem.StateFailedFinal, idem.StateRejected} {
		c := e.claim("conformance.outcome")
		out := outcome(string(s), 0)
		out.State, out.Response.Status = s, 422
		done := e.complete(e.reserve(c), out)
		got, err := e.h.Store.Get(e.ctx, c.Scope)
		if err != nil || done.State != s || got.State != s || !sameResponse(got.Response, out.Response) {
			t.Errorf("Complete to %s: returned %s, stored %s %+v (err %v)", s, done.State, got.State, got.Response, err)
		}
	}

	// EXECUTING may end SUCCEEDED but not REJECTED.
	c = e.claim("conformance.outcome")
	e.reserve(c)
	if err := e.move(c.Scope, idem.StateExecuting); err != nil {
		t.Fatalf("move to EXECUTING: %v", err)
	}
	rec, err := e.h.Store.Get(e.ctx, c.Scope)
	if err != nil || rec.State != idem.StateExecuting {
		t.Fatalf("Get: state %s err %v", rec.State, err)
	}
	rejected := outcome("rejected", 1)
	rejected.State = idem.StateRejected
	if _, err := e.h.Store.Complete(e.ctx, rec, effect("rejected", rejected)); err == nil {
		t.Errorf("Complete EXECUTING -> REJECTED succeeded")
	}
	if n := e.effects(rec.OperationID) + e.outbox(rec.OperationID); n != 0 {
		t.Errorf("the refused EXECUTING -> REJECTED left %d business and outbox rows", n)
	}
	if done := e.complete(rec, outcome("executing", 0)); done.State != idem.StateSucceeded {
		t.Errorf("Complete EXECUTING -> SUCCEEDED: state %s", done.State)
	}
}

// testGetByIDAndTimestamps: Reserve, Get and GetByID return the same
// record, with the claim's fields and times derived from "now"; a
// completed record expires the retention after its completion.
func testGetByIDAndTimestamps(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.times")
	c.Lease, c.Retention = 45*time.Second, 48*time.Hour
	rec := e.reserve(c)
	checkRecord(t, "reserved", rec, c, base, base)
	if !rec.LeaseUntil.Equal(base.Add(c.Lease)) || !rec.ExpiresAt.Equal(base.Add(c.Retention)) {
		t.Errorf("lease until %v expires %v, want %v and %v", rec.LeaseUntil, rec.ExpiresAt, base.Add(c.Lease), base.Add(c.Retention))
	}
	checkReads(e, rec)
	if lo, hi, ok := idem.OperationIDScopeRange(rec.OperationID); !ok || lo[0] != c.Scope[0] || hi[0] != c.Scope[0] {
		t.Errorf("operation ID %q is not an idem operation ID leading to its scope %x", rec.OperationID, c.Scope[:])
	}

	e.setNow(base.Add(10 * time.Second))
	out := outcome("times", 0)
	done, err := e.h.Store.Complete(e.ctx, rec, func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		if tx.Native() == nil {
			return out, fmt.Errorf("Tx.Native returned nil")
		}
		if _, err := effect("times", out)(ctx, tx, r); err != nil {
			return out, err
		}
		var n int64 // the transaction sees its own write
		if err := tx.QueryRow(ctx, countEffects, r.OperationID).Scan(&n); err != nil || n != 1 {
			return out, fmt.Errorf("QueryRow in the business transaction: %d rows, %v", n, err)
		}
		return out, nil
	})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	checkRecord(t, "completed", done, c, base, base.Add(10*time.Second))
	// Retention counts from settlement: the full retention after Complete.
	if want := base.Add(10*time.Second + c.Retention); done.State != idem.StateSucceeded || !done.ExpiresAt.Equal(want) {
		t.Errorf("completed: state %s expires %v, want SUCCEEDED %v", done.State, done.ExpiresAt, want)
	}
	checkReads(e, done)

	// Database time, defaults for zero lease and retention.
	e.setNow(time.Time{})
	c = e.claim("conformance.times")
	before := time.Now()
	rec = e.reserve(c)
	if d := rec.CreatedAt.Sub(before); d < -time.Minute || d > time.Minute {
		t.Errorf("CreatedAt %v is %v away from the test's clock %v", rec.CreatedAt, d, before)
	}
	checkRecord(t, "database time", rec, c, rec.CreatedAt, rec.CreatedAt)
	if d := rec.LeaseUntil.Sub(rec.CreatedAt); d < registry.DefaultLease-time.Second || d > registry.DefaultLease+time.Second {
		t.Errorf("default lease: LeaseUntil - CreatedAt = %v, want %v", d, registry.DefaultLease)
	}
	if d := rec.ExpiresAt.Sub(rec.CreatedAt); d < registry.DefaultRetention-time.Second || d > registry.DefaultRetention+time.Second {
		t.Errorf("default retention: ExpiresAt - CreatedAt = %v, want %v", d, registry.DefaultRetention)
	}
	checkReads(e, rec)

	for _, f := range []func() error{
		func() error { _, err := e.h.Store.Get(e.ctx, idem.ScopeHash(e.bytes32())); return err },
		func() error {
			_, err := e.h.Store.GetByID(e.ctx, idem.NewOperationID(base, idem.ScopeHash(e.bytes32())))
			return err
		},
	} {
		if err := f(); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("read of a missing record: %v, want ErrNotFound", err)
		}
	}
}

// checkRecord checks rec carries the claim's fields and the given times.
func checkRecord(t *testing.T, what string, rec registry.Record, c registry.Claim, created, updated time.Time) {
	t.Helper()
	if rec.Scope != c.Scope || rec.Fingerprint != c.Fingerprint || rec.Operation != c.Operation ||
		rec.Owner != c.Owner || rec.WriterEpoch != c.WriterEpoch || rec.Contract != idem.ContractVersion {
		t.Errorf("%s: record %+v does not carry the claim %+v and contract %s", what, rec, c, idem.ContractVersion)
	}
	if !rec.CreatedAt.Equal(created) || !rec.UpdatedAt.Equal(updated) || rec.UpdatedAt.Before(rec.CreatedAt) {
		t.Errorf("%s: created %v updated %v, want %v and %v", what, rec.CreatedAt, rec.UpdatedAt, created, updated)
	}
	if !rec.LeaseUntil.After(rec.CreatedAt) {
		t.Errorf("%s: LeaseUntil %v not after CreatedAt %v", what, rec.LeaseUntil, rec.CreatedAt)
	}
	for _, tm := range []time.Time{rec.CreatedAt, rec.UpdatedAt, rec.LeaseUntil, rec.ExpiresAt} {
		if tm.Location() != time.UTC {
			t.Errorf("%s: time %v is not in UTC", what, tm)
		}
	}
}

// checkReads checks Get and GetByID both return want.
func checkReads(e *env, want registry.Record) {
	e.t.Helper()
	for name, read := range map[string]func() (registry.Record, error){
		"Get":     func() (registry.Record, error) { return e.h.Store.Get(e.ctx, want.Scope) },
		"GetByID": func() (registry.Record, error) { return e.h.Store.GetByID(e.ctx, want.OperationID) },
	} {
		got, err := read()
		if err != nil {
			e.t.Errorf("%s: %v", name, err)
		} else if d := recordDiff(got, want); d != nil {
			e.t.Errorf("%s differs from the record returned before: %v", name, d)
		}
	}
}

// testClosedStoreErrors: a store whose connections are closed returns
// errors wrapping registry.ErrUnavailable — never "created", "not found"
// or a panic.
func testClosedStoreErrors(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.closed")
	e.reserve(c)
	e.h.Store.Close()
	call := func(name string, f func() error) {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s on a closed store panicked: %v", name, p)
			}
		}()
		err := f()
		switch {
		case err == nil:
			t.Errorf("%s on a closed store returned no error", name)
		case !errors.Is(err, registry.ErrUnavailable):
			t.Errorf("%s on a closed store returned %v, want an error wrapping ErrUnavailable", name, err)
		}
	}
	call("Reserve", func() error {
		_, created, err := e.h.Store.Reserve(e.ctx, e.claim("conformance.closed"))
		if created {
			t.Errorf("Reserve on a closed store reported created")
		}
		return err
	})
	call("Reserve of an existing scope", func() error { _, _, err := e.h.Store.Reserve(e.ctx, c); return err })
	call("Get", func() error { _, err := e.h.Store.Get(e.ctx, c.Scope); return err })
	call("InTx", func() error {
		return e.h.Store.InTx(e.ctx, func(context.Context, registry.Tx) error {
			t.Errorf("InTx on a closed store ran its function")
			return nil
		})
	})
}
