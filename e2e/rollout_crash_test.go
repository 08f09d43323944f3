package e2e

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestRolloutShadowCrash: a server serving payments.create in shadow
// dies by SIGKILL at the failpoint just before or just after the commit
// that holds the payment and its shadow record (one transaction in
// either style: shadow executes a new key exactly as enforce does), then
// the operation is switched to enforce ("idem rollout payments.create
// enforce") and the client retries on a new server: after the commit the
// retry replays the committed operation; before it (nothing committed in
// the one-transaction style, a reservation without its payment in the
// two-phase style) the retry executes once — after 409 IN_PROGRESS
// until the reservation's lease expired. Either way the key ends with
// exactly one payment: the retry never executes a second time.
// Proves threat:shadow-crash-reexecution (docs/threat-model.md).
func TestRolloutShadowCrash(t *testing.T) {
	cases := []struct {
		name, seam string
		flags      []string
	}{
		{"one-tx/before-commit", "before-commit", []string{oneTxFlag}},
		{"one-tx/after-commit", "after-commit", []string{oneTxFlag}},
		{"two-phase/before-commit", "before-commit", []string{twoPhaseFlag, "--lease", "2s", "--recover-interval", "200ms"}},
		{"two-phase/after-commit", "after-commit", []string{twoPhaseFlag, "--lease", "2s", "--recover-interval", "200ms"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachDB(t, func(t *testing.T, dsn string) { shadowCrash(t, dsn, c.seam, c.flags) })
		})
	}
}

func shadowCrash(t *testing.T, dsn, seam string, flags []string) {
	f := newFault(t, dsn)
	memo := "shadow-crash-" + f.amount()
	key, body := f.key("sc"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"`+memo+`"}`
	shadow := append([]string{"--mode", opCreate + "=shadow"}, flags...)

	f.crashAt(seam, key, body, shadow...)
	snap := f.takeSnapshot()
	committed := ""
	switch paid := paymentsWithMemo(t, dsn, memo); {
	case seam == "after-commit" && (paid != 1 || len(snap.Operations) != 1 || snap.Operations[0]["state"] != "SUCCEEDED"):
		t.Fatalf("after a kill after the commit: %d payments, records %v; want one payment and its SUCCEEDED record", paid, snap.Operations)
	case seam == "after-commit":
		committed = snap.Operations[0]["operation_id"]
	case paid != 0:
		t.Errorf("after a kill before the commit: %d payments; want none", paid)
	}

	rollout(t, dsn, opCreate, "enforce", "--reason", "e2e: shadow → enforce after a crash")
	b := f.serve("B", nil, true, shadow...) // configured shadow: the row enforces every tenant
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	var first reply
	for first.status != http.StatusCreated {
		if ctx.Err() != nil {
			t.Fatalf("no 201 for the retry within %v (last answer %v)", awaitTimeout, first)
		}
		first = f.mustPost(b, "/v1/payments", "demo", key, body, "Prefer", "wait=2")
		switch {
		case first.status == http.StatusCreated:
		case problemErr(first, http.StatusConflict, "IN_PROGRESS") == "" && seam == "before-commit" && slices.Contains(flags, twoPhaseFlag):
			sleepCtx(ctx, retryAfter(first)) // the dead server's reservation, until its lease expires
		case first.status == http.StatusServiceUnavailable:
			sleepCtx(ctx, 50*time.Millisecond)
		default:
			t.Fatalf("retry after the switch to enforce: %v %v; want 201", first, first.header)
		}
	}
	replayed := first.header.Get("Idempotent-Replayed") == "true"
	switch {
	case seam == "after-commit" && (!replayed || first.header.Get("Idempotency-Operation") != committed):
		t.Errorf("the retry after the switch executed again: %v %v; want a replay of operation %s", first, first.header, committed)
	case seam == "before-commit" && replayed:
		t.Errorf("the retry replayed %v, but nothing was committed before the kill", first.header)
	}
	wantReplay(t, "a further retry", first, f.mustPost(b, "/v1/payments", "demo", key, body))
	if n := paymentsWithMemo(t, dsn, memo); n != 1 {
		t.Errorf("the key has %d payments after the retries; want exactly 1", n)
	}
}

// TestRolloutRevisionDeploy: a payment accepted by a server at API
// revision v1 is retried after a deploy of revision v2. Declared
// compatible ("--api-revision v2 --revision payments.create=v2:v1": v2
// accepts v1's records as its own), the retry replays v1's answer byte
// for byte, a different payload conflicts with it (422
// PAYLOAD_CONFLICT), and a v1 server still running beside v2 during the
// deploy replays it too: one payment. Undeclared ("--revision
// payments.create=v2"), the seed's rule stands and the retry executes
// anew under v2 (TestFaultRevision): two payments.
// Proves threat:revision-crossing-retry (docs/threat-model.md).
func TestRolloutRevisionDeploy(t *testing.T) {
	for _, c := range []struct {
		name     string
		revision string
		payments int
	}{
		{"declared", opCreate + "=v2:v1", 1},
		{"undeclared", opCreate + "=v2", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachDB(t, func(t *testing.T, dsn string) {
				f := newFault(t, dsn)
				memo := "deploy-" + f.amount()
				key, body := f.key("dep"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"`+memo+`"}`
				v1 := f.serve("A", nil, false) // terminated below
				first := f.mustPost(v1, "/v1/payments", "demo", key, body)
				op := wantCreated(t, "v1 POST", first)
				terminate(t, v1)

				v2 := f.serve("B", nil, true, "--api-revision", "v2", "--revision", c.revision)
				retry := f.mustPost(v2, "/v1/payments", "demo", key, body)
				if c.payments == 1 {
					wantReplay(t, "the retry after the deploy", first, retry)
					wantProblem(t, "another payload after the deploy", f.mustPost(v2, "/v1/payments", "demo", key, `{"amount":"1.00","currency":"EUR","payee":"acct_9"}`),
						http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
					old := f.serve("C", nil, true) // a v1 server still running during the deploy
					wantReplay(t, "the retry on a v1 server beside v2", first, f.mustPost(old, "/v1/payments", "demo", key, body))
				} else if again := wantCreated(t, "the retry after an undeclared deploy", retry); again == op {
					t.Errorf("the undeclared v2 answered with v1's operation %s", op)
				}
				if n := paymentsWithMemo(t, dsn, memo); n != c.payments {
					t.Errorf("the key has %d payments; want %d", n, c.payments)
				}
			})
		})
	}
}
