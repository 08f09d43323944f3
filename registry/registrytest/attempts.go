package registrytest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// testRecoveryAttempts: RecordRecoveryAttempt inserts an operation's row
// on the first failed attempt and moves it forward with a compare-and-set
// after that, losing no attempt when workers write at once; the last
// error is cut to MaxAuditDetail and made valid; LastRecoveryAttempt
// reads it back and says ErrNotFound for none; ForgetRecoveryAttempts
// deletes it, one operation's only.
//
// threat:unknown-without-reason
func testRecoveryAttempts(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	rec := e.reserve(e.claim("conformance.attempts"))
	other := e.reserve(e.claim("conformance.attempts"))
	if _, err := registry.LastRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("LastRecoveryAttempt before any: %v, want ErrNotFound", err)
	}
	at := time.UnixMilli(1_800_000_000_123)
	check := func(id string, want registry.RecoveryAttempt) {
		t.Helper()
		got, err := registry.LastRecoveryAttempt(e.ctx, e.h.Store, id)
		if err != nil || got.Attempts != want.Attempts || got.LastError != want.LastError || !got.At.Equal(want.At) || !got.NextAt.Equal(want.NextAt) {
			t.Fatalf("LastRecoveryAttempt(%s) = %+v, %v; want %+v", id, got, err, want)
		}
	}
	got, err := registry.RecordRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID, "GET /transfers/k: connection refused", at, at.Add(time.Second))
	want := registry.RecoveryAttempt{OperationID: rec.OperationID, Attempts: 1, LastError: "GET /transfers/k: connection refused", At: at, NextAt: at.Add(time.Second)}
	if err != nil || got != want {
		t.Fatalf("first RecordRecoveryAttempt = %+v, %v; want %+v", got, err, want)
	}
	check(rec.OperationID, want)
	long := "\xff" + strings.Repeat("é", registry.MaxAuditDetail)
	if _, err := registry.RecordRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID, long, at.Add(time.Second), at.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	a, err := registry.LastRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID)
	if err != nil || a.Attempts != 2 || len(a.LastError) > registry.MaxAuditDetail || strings.HasPrefix(a.LastError, "\xff") || !strings.Contains(a.LastError, "é") {
		t.Fatalf("after a long, invalid error: %+v (%d bytes), %v; want attempt 2, cut to %d valid bytes", a.Attempts, len(a.LastError), err, registry.MaxAuditDetail)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := registry.RecordRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID, "refused", at.Add(time.Duration(i)*time.Millisecond), at.Add(time.Minute))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent RecordRecoveryAttempt: %v", err)
		}
	}
	a, err = registry.LastRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID)
	if err != nil || a.Attempts != 2+writers || a.LastError != "refused" {
		t.Fatalf("after %d concurrent attempts: %+v, %v; want %d attempts, none lost", writers, a, err, 2+writers)
	}
	if _, err := registry.RecordRecoveryAttempt(e.ctx, e.h.Store, other.OperationID, "503", at, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := registry.ForgetRecoveryAttempts(e.ctx, e.h.Store, rec.OperationID); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.LastRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("LastRecoveryAttempt after Forget: %v, want ErrNotFound", err)
	}
	check(other.OperationID, registry.RecoveryAttempt{OperationID: other.OperationID, Attempts: 1, LastError: "503", At: at, NextAt: at.Add(time.Hour)})
	if err := registry.ForgetRecoveryAttempts(e.ctx, e.h.Store, rec.OperationID); err != nil {
		t.Fatalf("ForgetRecoveryAttempts of none: %v", err)
	}
}
