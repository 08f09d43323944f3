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
// C on one database): all three find no record, run their handlers and
// stop at before-commit in their own transactions; one SIGUSR1 to each
// releases them, one record insert wins and the other two wait for it,
// fail and roll back. On SQLite one server gets all three: the later two
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
			await(t, "the handlers of B and C wait at before-commit, uncommitted", func() bool {
				b, c := strings.Count(servers[1].child.Log(), waiting), strings.Count(servers[2].child.Log(), waiting)
				seen = strconv.Itoa(b) + " and " + strconv.Itoa(c) + " waiting"
				return b == 1 && c == 1
			}, &seen)
		} else {
			await(t, "two requests wait for the execution of their key", func() bool {
				n := servers[0].metric(t, "idem_joined_total")
				seen = strconv.Itoa(n) + " joined"
				return n == 2
			}, &seen)
		}
		for _, s := range servers[:map[bool]int{true: 3, false: 1}[pg]] {
			if err := s.child.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
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
		if !pg && winner != 0 {
			t.Errorf("on SQLite request #%d won; want #0, which held the write lock", winner)
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
		if !pg {
			if n := strings.Count(servers[0].child.Log(), waiting); n != 1 {
				t.Errorf("%d handlers reached before-commit on SQLite; want 1 (the duplicates wait for the first execution, then meet the record)", n)
			}
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
