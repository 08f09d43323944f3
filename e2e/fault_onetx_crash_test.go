package e2e

import (
	"net/http"
	"testing"
	"time"
)

// oneTxFlag names the style these tests run explicitly: "idem serve"
// runs POST /v1/payments in one database transaction
// (idemhttp.Operation.OneTransaction), its default.
const oneTxFlag = "--two-phase=false"

// twoPhaseFlag makes "idem serve" reserve the key of POST /v1/payments
// (committed) before it executes: the tests of what a reservation in
// flight does (after-reserve seams, a reserved key's lease) need it.
const twoPhaseFlag = "--two-phase"

// TestOneTxCrashPayments (V1: SIGKILL, one-transaction style): idem serve
// --one-transaction dies by SIGKILL at the failpoints before-commit and
// after-commit of POST /v1/payments. Before-commit: the database holds no
// record, payment or outbox row afterwards (nothing was reserved, the
// transaction never committed), and the first 201 of a restarted server
// (also --one-transaction) is a first execution. After-commit: the
// database already holds the terminal record, its payment and its outbox
// row, and the first 201 after the restart replays exactly that
// operation. Either way the restarted server answers the retry with 201
// at once — never 409 IN_PROGRESS, there is nothing in flight to wait for
// — every later retry replays it byte for byte, and the database ends
// with one payment and one outbox row for the key.
func TestOneTxCrashPayments(t *testing.T) {
	for _, seam := range []string{"before-commit", "after-commit"} {
		t.Run(seam, func(t *testing.T) {
			t.Parallel()
			eachEngine(t, func(t *testing.T, dsn string) { crashOneTx(t, dsn, seam) })
		})
	}
}

func crashOneTx(t *testing.T, dsn, seam string) {
	f := newFault(t, dsn)
	key, body := f.key("onetx-"+seam), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`

	began, killed := f.crashAt(seam, key, body, oneTxFlag)

	// What the crash left behind, read directly from the database.
	snap := f.takeSnapshot()
	var committed string // the operation ID committed before the crash
	switch seam {
	case "before-commit":
		if len(snap.Operations) != 0 || len(snap.Payments) != 0 || len(snap.Outbox) != 0 {
			t.Fatalf("after a crash before the commit the database holds %d records, %d payments, %d outbox rows; want none: %+v",
				len(snap.Operations), len(snap.Payments), len(snap.Outbox), snap)
		}
	case "after-commit":
		if len(snap.Operations) != 1 || snap.Operations[0]["state"] != "SUCCEEDED" || snap.Operations[0]["owner_gen"] != "1" {
			t.Fatalf("after a crash after the commit the records are %v; want one SUCCEEDED record of generation 1", snap.Operations)
		}
		committed = snap.Operations[0]["operation_id"]
		if len(snap.Payments) != 1 || snap.Payments[0]["operation_id"] != committed ||
			len(snap.Outbox) != 1 || snap.Outbox[0]["operation_id"] != committed {
			t.Fatalf("after a crash after the commit: payments %v, outbox %v; want one of each for operation %s", snap.Payments, snap.Outbox, committed)
		}
	}

	b := f.serve("B", nil, true, oneTxFlag)
	restarted := time.Now()
	// A one-transaction server has nothing in flight to wait for: the
	// retry gets 201 at once (postUntil re-sends only after 503, as a
	// loaded machine may answer, and fails on anything else).
	first := f.postUntil(b, "/v1/payments", "demo", key, body, func(r reply) bool { return r.status == http.StatusCreated })
	settled := time.Now()

	replayed := first.header.Get("Idempotent-Replayed") == "true"
	switch {
	case seam == "after-commit" && !replayed:
		t.Errorf("first 201 after a crash after the commit was executed again (no Idempotent-Replayed: true): %v %v", first, first.header)
	case seam == "after-commit" && first.header.Get("Idempotency-Operation") != committed:
		t.Errorf("first 201 after the restart names operation %q; the crashed server committed %s", first.header.Get("Idempotency-Operation"), committed)
	case seam == "before-commit":
		wantCreated(t, "first 201 after a crash before the commit (nothing was committed)", first)
	}
	again := f.mustPost(b, "/v1/payments", "demo", key, body) // a further retry: a replay
	wantReplay(t, "retry after the first 201", first, again)

	counts := f.check(allow{Errors: true})
	wantExecuted := map[string]int{"before-commit": 1, "after-commit": 0}[seam]
	if counts["executed"] != wantExecuted || counts["replayed"] != 2-wantExecuted || counts["transport error"] != 1 {
		t.Errorf("answers %v; want executed %d, replayed %d and the crashed request's transport error", counts, wantExecuted, 2-wantExecuted)
	}
	if len(f.last.Payments) != 1 || len(f.last.Outbox) != 1 || len(f.last.Operations) != 1 {
		t.Errorf("database at the end: %d payments, %d outbox rows, %d records; want one of each", len(f.last.Payments), len(f.last.Outbox), len(f.last.Operations))
	}
	t.Logf("%s: killed after %v, restarted in %v, 201 %v after the restart (replayed=%v)",
		seam, killed.Sub(began).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
		settled.Sub(restarted).Round(time.Millisecond), replayed)
}
