package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/idemkit/idem"
)

// TestOneTxDuplicateRace (V1: concurrency, one-transaction style, made
// deterministic with the failpoint before-commit=wait): a first request
// of idem serve --one-transaction stops at before-commit with its payment
// written but not committed; then a duplicate (another byte form of the
// payload) and a request with another amount arrive with the same key.
// On PostgreSQL each of the three goes to its own server process (A, B,
// C on one database): B and C find no record, and their transactions
// wait on A's claim (idem_claim's advisory lock, seen in pg_locks) before
// any business statement; one SIGUSR1 to A releases it, it commits, and
// B and C then meet its record without running a business statement —
// only A's handler reaches before-commit. On SQLite one server gets all three: the later two
// wait for the execution of their key in the process (idem_joined_total
// shows two) and then meet the committed record, so the first request
// wins and only its handler ran. Either way: exactly one 201 is an
// execution; a request with the winner's payload gets its byte-identical
// replay, one with the other payload 422 PAYLOAD_CONFLICT; no 409 or 503;
// the database holds one payment and one outbox row.
func TestOneTxDuplicateRace(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		pg := !strings.HasPrefix(dsn, "sqlite:")
		env := []string{"IDEM_FAILPOINTS=before-commit=wait"}
		servers := []*server{f.serve("A", env, false, oneTxFlag)}
		if pg {
			servers = append(servers, f.serve("B", env, false, oneTxFlag), f.serve("C", env, false, oneTxFlag))
		} else {
			servers = append(servers, servers[0], servers[0])
		}
		key, amount, memo := f.key("onetx-race"), f.amount(), f.key("memo")
		other := f.amount()
		for other == amount {
			other = f.amount()
		}
		bodies := []string{
			`{"amount":"` + amount + `","currency":"EUR","payee":"acct_1","memo":"` + memo + `"}`,
			`{"memo":"` + memo + `","payee":"acct_1","currency":"EUR","amount":"` + amount + `"}`,
			`{"amount":"` + other + `","currency":"EUR","payee":"acct_1","memo":"` + memo + `"}`,
		}
		replies := make([]reply, len(bodies))
		errs := make([]error, len(bodies))
		var wg sync.WaitGroup
		send := func(i int) {
			wg.Go(func() { replies[i], errs[i] = f.post(servers[i], "/v1/payments", "demo", key, bodies[i]) })
		}
		const waiting = "failpoint before-commit waiting"

		send(0)
		awaitLog(t, servers[0], waiting)
		send(1)
		send(2)
		var seen string
		if pg {
			watch := pgConn(t, t.Context(), dsn)
			await(t, "the transactions of B and C wait on A's claim", func() bool {
				var n int
				err := watch.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks
					WHERE locktype = 'advisory' AND classid = 1768187245 AND NOT granted`).Scan(&n)
				seen = strconv.Itoa(n) + " waiting"
				return err == nil && n == 2
			}, &seen)
		} else {
			await(t, "two requests wait for the execution of their key", func() bool {
				n := servers[0].metric(t, "idem_joined_total")
				seen = strconv.Itoa(n) + " joined"
				return n == 2
			}, &seen)
		}
		if err := servers[0].child.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		winner := -1
		for i, r := range replies {
			if errs[i] != nil {
				t.Fatalf("request #%d: %v", i, errs[i])
			}
			if r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "" {
				if winner >= 0 {
					t.Fatalf("requests #%d and #%d both executed: %v, %v", winner, i, replies[winner], r)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("no request executed: %v", replies)
		}
		wantCreated(t, "the winner", replies[winner])
		if winner != 0 {
			t.Errorf("request #%d won; want #0, which held the claim", winner)
		}
		for i, r := range replies {
			switch {
			case i == winner:
			case (i == 2) == (winner == 2): // the winner's payload
				wantReplay(t, "request #"+strconv.Itoa(i)+" with the winner's payload", replies[winner], r)
			default:
				wantProblem(t, "request #"+strconv.Itoa(i)+" with the other payload", r, http.StatusUnprocessableEntity, string(idem.CodePayloadConflict))
			}
		}
		reached := 0
		for _, s := range servers[:map[bool]int{true: 3, false: 1}[pg]] {
			reached += strings.Count(s.child.Log(), waiting)
		}
		if reached != 1 {
			t.Errorf("%d handlers reached before-commit; want 1 (the duplicates wait for the first execution, then meet the record)", reached)
		}
		counts := f.check(allow{})
		if counts["executed"] != 1 || counts["in_progress"] != 0 {
			t.Errorf("answers %v; want one execution and no IN_PROGRESS", counts)
		}
		if len(f.last.Payments) != 1 || len(f.last.Outbox) != 1 || len(f.last.Operations) != 1 {
			t.Errorf("database: %d payments, %d outbox rows, %d records; want one of each", len(f.last.Payments), len(f.last.Outbox), len(f.last.Operations))
		}
		t.Logf("request #%d won (%s)", winner, replies[winner].header.Get("Idempotency-Operation"))
	})
}
