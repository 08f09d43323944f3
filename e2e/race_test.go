package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// shot is one request of a race and its answer.
type shot struct {
	body string
	r    reply
	err  error
}

// race sends one POST per body at once, all with the same token and key,
// spreading them over the servers round-robin, and returns the answers.
func race(servers []*server, token, key string, bodies []string) []shot {
	shots := make([]shot, len(bodies))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, body := range bodies {
		s := servers[i%len(servers)]
		shots[i].body = body
		wg.Go(func() {
			<-start
			shots[i].r, shots[i].err = s.send(http.MethodPost, "/v1/payments", token, postHeader(key), body)
		})
	}
	close(start)
	wg.Wait()
	return shots
}

// checkRace asserts the per-scope invariants over the answers of a race on
// one key: exactly one answer executed; every 201 carries that one
// operation and its exact response; a request with the winner's body got
// that replay or 409 IN_PROGRESS for that operation; every other body got
// 422 PAYLOAD_CONFLICT. It returns the winning answer and its body.
func checkRace(t *testing.T, shots []shot) (winner reply, winnerBody string) {
	t.Helper()
	executed, answers := 0, map[string]int{}
	for _, s := range shots {
		if s.err != nil {
			answers["error: "+s.err.Error()]++
			continue
		}
		var p problem
		json.Unmarshal(s.r.body, &p)
		answers[fmt.Sprintf("%d %s replayed=%q", s.r.status, p.Code, s.r.header.Get("Idempotent-Replayed"))]++
		if s.r.status == http.StatusCreated && s.r.header.Get("Idempotent-Replayed") == "" {
			executed++
			winner, winnerBody = s.r, s.body
		}
	}
	if executed != 1 {
		t.Fatalf("%d requests executed, want exactly 1; answers: %v", executed, answers)
	}
	op := winner.header.Get("Idempotency-Operation")
	if op == "" {
		t.Fatalf("the executed answer has no Idempotency-Operation: %v", winner.header)
	}
	tally := map[string]int{}
	var bad []string
	for i, s := range shots {
		var msg string
		switch {
		case s.err != nil:
			msg = s.err.Error()
		case s.body != winnerBody:
			tally["conflict"]++
			msg = problemErr(s.r, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		case s.r.status == http.StatusCreated && s.r.header.Get("Idempotent-Replayed") == "":
			tally["executed"]++
		case s.r.status == http.StatusCreated:
			tally["replayed"]++
			msg = replayErr(winner, s.r)
		case s.r.status == http.StatusConflict:
			tally["in progress"]++
			msg = inProgressErr(s.r, op)
		default:
			msg = fmt.Sprintf("%v %v; want a 201 replay or 409 IN_PROGRESS", s.r, s.r.header)
		}
		if msg != "" {
			bad = append(bad, fmt.Sprintf("request %d (body %s): %s", i, s.body, msg))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d answers break the invariants, the first %d:\n%s", len(bad), len(shots), min(len(bad), 5),
			strings.Join(bad[:min(len(bad), 5)], "\n"))
	}
	t.Logf("answers: %v", tally)
	return winner, winnerBody
}

// TestTwoInstances: two servers on one PostgreSQL database share the
// registry: one replays the other's outcome, a race spread over both
// executes once, and Prefer: wait on either sees an outcome committed
// elsewhere.
func TestTwoInstances(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.DSN(t)
		a, b := startServer(t, dsn), startServer(t, dsn)

		first := a.post(t, "demo", "k-two-1", payBody)
		op := wantCreated(t, "POST to A", first)
		wantReplay(t, "same POST to B", first, b.post(t, "demo", "k-two-1", payBody))
		wantReplay(t, "equivalent POST to B", first, b.post(t, "demo", "k-two-1", `{"memo":"x","payee":"acct_1","currency":"EUR","amount":"12.5"}`))
		wantProblem(t, "other amount to B", b.post(t, "demo", "k-two-1", `{"amount":"1.00","currency":"EUR","payee":"acct_1","memo":"x"}`),
			http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		if g := b.get(t, "demo", first.header.Get("Location")); g.status != http.StatusOK {
			t.Errorf("GET A's payment from B: %v", g)
		}
		if c := countRows(t, dsn, op); c != (counts{1, 1, 1, 1}) {
			t.Errorf("rows after one execution on A and replays on B: %+v", c)
		}

		bodies := make([]string, 50)
		for i := range bodies {
			bodies[i] = `{"amount":"7.00","currency":"EUR","payee":"acct_2"}`
		}
		winner, _ := checkRace(t, race([]*server{a, b}, "demo", "k-two-2", bodies))
		wantReplay(t, "retry on A after the race", winner, a.post(t, "demo", "k-two-2", bodies[0]))
		wantReplay(t, "retry on B after the race", winner, b.post(t, "demo", "k-two-2", bodies[0]))
		raceOp := winner.header.Get("Idempotency-Operation")
		if c := countRows(t, dsn, raceOp); c.Payments != 1 || c.Outbox != 1 || c.AllPayments != 2 || c.AllOutbox != 2 {
			t.Errorf("rows after the race over two instances: %+v; want one payment and one outbox row for %s (two of each in all)", c, raceOp)
		}

		testWait(t, dsn, []*server{a, b}, "k-two-3")
	})
}
