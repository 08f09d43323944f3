package e2e

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/myproxy"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestFaultDroppedCommitReply (V1: dropped commit reply).
//
// PostgreSQL: the server reaches its database through internal/pgproxy,
// armed to cut the connection right after PostgreSQL answered the COMMIT
// of the transaction that inserted the payment: the payment, the outbox
// row and the outcome are committed, but the server's commit fails with a
// broken connection. The middleware reads the record again; the client
// gets the committed outcome (201, marked as a replay) — or, if that read
// fails too, a retryable 503 — and every retry replays the SAME payment:
// one payment and one outbox row.
//
// MariaDB: the same through internal/myproxy, which withholds the
// server's answer to the COMMIT of the transaction that inserted the
// payment and closes the connection.
//
// SQLite runs in the server's process, so there is no reply to lose; the
// analogue is a commit that succeeded while the caller is told it failed
// (failpoint after-commit=error), which takes the same path through the
// middleware.
func TestFaultDroppedCommitReply(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f, proxy := proxiedFault(t)
		s := f.serve("A", nil, true)
		droppedCommitRounds(t, f, s, proxy.CutCommitOf, func() bool {
			select {
			case <-proxy.Cuts():
				return true
			case <-time.After(awaitTimeout):
				return false
			}
		})
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		native := mytest.DSN(t) // root@tcp(127.0.0.1:PORT)/DB
		_, rest, _ := strings.Cut(native, "@tcp(")
		addr, db, _ := strings.Cut(rest, ")/")
		proxy, err := myproxy.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		f := newFault(t, mytest.AsURL(t, native))
		f.serverDSN = "mysql://root@" + proxy.Addr() + "/" + db
		s := f.serve("A", nil, true)
		droppedCommitRounds(t, f, s, proxy.CutCommitOf, func() bool {
			select {
			case <-proxy.Cuts():
				return true
			case <-time.After(awaitTimeout):
				return false
			}
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f := newFault(t, "sqlite:"+filepath.Join(t.TempDir(), "fault.db"))
		s := f.serve("A", []string{"IDEM_FAILPOINTS=after-commit=error"}, false)
		key, body := f.key("commit"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
		first := f.mustPost(s, "/v1/payments", "demo", key, body)
		if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the answer after a commit reported as failed: %v %v; want the committed 201, marked as a replay", first, first.header)
		}
		f.mustPost(s, "/v1/payments", "demo", key, body)
		f.check(allow{})
	})
}

// TestFaultCommitLostInOutage (issue 15: an in-flight commit during a
// failover). The proxy cuts the connection right after PostgreSQL
// committed the payment and, in the same step, makes the database
// unreachable — every pooled connection breaks and new ones are refused —
// as a primary that dies right after a commit. The server cannot read the
// record back at once; it keeps reading (Middleware.ResolveWait) and,
// once the database is reachable again, answers with the committed
// outcome instead of a 503: the one payment, marked as a replay, which
// every retry replays. Nothing runs twice.
func TestFaultCommitLostInOutage(t *testing.T) {
	t.Parallel()
	f, proxy := proxiedFault(t)
	s := f.serve("A", nil, true)
	key, body := f.key("outage"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
	proxy.CutCommitOfThenDown("INSERT INTO payments")
	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := f.post(s, "/v1/payments", "demo", key, body)
		done <- result{r, err}
	}()
	select {
	case <-proxy.Cuts():
	case <-time.After(awaitTimeout):
		t.Fatal("the proxy cut no commit reply")
	}
	awaitLog(t, s, "the outcome's commit is unknown: reading the record until the store answers")
	// A read refused after that line: the server is still reading
	// while the database is away.
	for len(proxy.Refused()) > 0 {
		<-proxy.Refused()
	}
	select {
	case <-proxy.Refused():
	case <-time.After(awaitTimeout):
		t.Fatal("no connection was refused during the outage")
	}
	proxy.Up()
	var first result
	select {
	case first = <-done:
	case <-time.After(awaitTimeout):
		t.Fatal("the request whose commit was lost got no answer after the database came back")
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	if first.r.status != http.StatusCreated || first.r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the answer after a commit lost in an outage: %v %v; want the committed 201, marked as a replay", first.r, first.r.header)
	}
	awaitLog(t, s, "committed=true")
	again := f.mustPost(s, "/v1/payments", "demo", key, body)
	wantReplay(t, "a retry after the outage", first.r, again)
	if counts := f.check(allow{}); counts["executed"] != 0 {
		t.Errorf("answers %v: an answer claims a fresh execution, but the commit reply was lost", counts)
	}
}

// proxiedFault starts a scenario on a fresh PostgreSQL database whose
// servers reach it through internal/pgproxy (the test's own connections
// go straight to it).
func proxiedFault(t *testing.T) (*faultRun, *pgproxy.Proxy) {
	t.Helper()
	dsn := pgtest.DSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pgproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	f := newFault(t, dsn)
	u.Host = proxy.Addr()
	f.serverDSN = u.String()
	return f, proxy
}

// droppedCommitRounds runs TestFaultDroppedCommitReply's rounds on a
// server whose database connections go through a proxy that cuts a
// COMMIT's reply (cut arms it, cutDone waits for it): each first answer
// is the committed outcome replayed or a 503, each retry replays it, the
// server logs the failed recording in that round, and no answer claims a
// fresh execution.
func droppedCommitRounds(t *testing.T, f *faultRun, s *server, cut func(string), cutDone func() bool) {
	t.Helper()
	for round := range pick(3, 12) {
		key, body := f.key("commit"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
		mark := s.child.LogSize()
		cut("INSERT INTO payments")
		first := f.mustPost(s, "/v1/payments", "demo", key, body)
		if !cutDone() {
			t.Fatalf("round %d: the proxy cut no commit reply", round)
		}
		switch {
		case first.status == http.StatusCreated:
			if first.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("round %d: the answer after a lost commit reply is not marked as a replay of the committed outcome: %v", round, first.header)
			}
		default:
			wantProblem(t, "the request whose commit reply was lost", first, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
		}
		f.mustPost(s, "/v1/payments", "demo", key, body)
		f.mustPost(s, "/v1/payments", "demo", `"`+key+`"`, body)
		awaitLogFrom(t, s, "recording the outcome failed", mark) // this round's, not an earlier one's
	}
	if counts := f.check(allow{Unavailable: true}); counts["executed"] != 0 {
		t.Errorf("answers %v: an answer claims a fresh execution, but every commit reply was lost", counts)
	}
}
