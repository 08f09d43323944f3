package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
)

const contract = "http.idempotency.v1"

// eachDB runs fn as parallel subtests "sqlite" (a fresh file) and
// "postgres" (a fresh database of the shared pgtest cluster).
func eachDB(t *testing.T, fn func(t *testing.T, dsn string)) {
	pgtest.EachDriver(t, "e2e.db", func(t *testing.T, _, dsn string) { fn(t, dsn) })
}

// eachEngine is eachDB plus a parallel subtest "mysql" on a fresh
// database of the shared MariaDB server (internal/mytest), for the
// scenarios that run on all three engines.
func eachEngine(t *testing.T, fn func(t *testing.T, dsn string)) {
	eachDB(t, fn)
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		fn(t, mytest.URL(t))
	})
}

// problem is the part of an RFC 9457 body the tests read.
type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// wantProblem checks that r is an application/problem+json response with
// the status and code.
func wantProblem(t *testing.T, what string, r reply, status int, code string) {
	t.Helper()
	if msg := problemErr(r, status, code); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

func problemErr(r reply, status int, code string) string {
	var p problem
	err := json.Unmarshal(r.body, &p)
	mt := strings.TrimSpace(strings.Split(r.header.Get("Content-Type"), ";")[0])
	if r.status != status || mt != "application/problem+json" || err != nil || p.Code != code || p.Status != status {
		return fmt.Sprintf("got %v; want %d application/problem+json with code %s", r, status, code)
	}
	return ""
}

// wantCreated checks a first execution: 201, contract headers, not a
// replay, and returns its operation ID.
func wantCreated(t *testing.T, what string, r reply) string {
	t.Helper()
	op := r.header.Get("Idempotency-Operation")
	if r.status != http.StatusCreated || op == "" || r.header.Get("Idempotency-Contract") != contract ||
		r.header.Get("Idempotent-Replayed") != "" || r.header.Get("Location") == "" {
		t.Fatalf("%s: got %v %v; want 201 with Location, Idempotency-Contract %s, Idempotency-Operation and no Idempotent-Replayed",
			what, r, r.header, contract)
	}
	return op
}

// wantReplay checks that got replays first: same status, media type,
// Location and body bytes, same operation, contract headers, and
// Idempotent-Replayed: true.
func wantReplay(t *testing.T, what string, first, got reply) {
	t.Helper()
	if msg := replayErr(first, got); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

func replayErr(first, got reply) string {
	var diffs []string
	for _, h := range []string{"Content-Type", "Location", "Idempotency-Operation"} {
		if got.header.Get(h) != first.header.Get(h) {
			diffs = append(diffs, fmt.Sprintf("%s %q, first response had %q", h, got.header.Get(h), first.header.Get(h)))
		}
	}
	if got.status != first.status || !bytes.Equal(got.body, first.body) {
		diffs = append(diffs, fmt.Sprintf("replay %v, first response %v", got, first))
	}
	if got.header.Get("Idempotent-Replayed") != "true" || got.header.Get("Idempotency-Contract") != contract {
		diffs = append(diffs, fmt.Sprintf("headers %v; want Idempotent-Replayed: true and Idempotency-Contract: %s", got.header, contract))
	}
	return strings.Join(diffs, "; ")
}

// wantInProgress checks a 409 IN_PROGRESS answer for operation op: a
// Retry-After, a monitor link to the operation and its ID.
func wantInProgress(t *testing.T, what string, r reply, op string) {
	t.Helper()
	if msg := inProgressErr(r, op); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

var secondsRE = regexp.MustCompile(`^\d+$`)

func inProgressErr(r reply, op string) string {
	if msg := problemErr(r, http.StatusConflict, "IN_PROGRESS"); msg != "" {
		return msg
	}
	link := "</v1/operations/" + op + `>; rel="monitor"`
	if !secondsRE.MatchString(r.header.Get("Retry-After")) || r.header.Get("Link") != link || r.header.Get("Idempotency-Operation") != op {
		return fmt.Sprintf("headers %v; want Retry-After seconds, Link %s, Idempotency-Operation %s", r.header, link, op)
	}
	return ""
}

// payment decodes a payment body.
func payment(t *testing.T, what string, body []byte) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("%s: body %s: %v", what, body, err)
	}
	return p
}

// counts are rows in the database.
type counts struct {
	Payments, Outbox       int // of one operation
	AllPayments, AllOutbox int // in the whole database
}

// countRows counts, directly in the database, the payment and outbox rows
// of operation op and in total. SQLite is opened read-only.
func countRows(t *testing.T, dsn, op string) counts {
	t.Helper()
	ctx := context.Background()
	var count func(q string, args ...any) (int, error)
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		count = func(q string, args ...any) (n int, err error) {
			err = db.QueryRowContext(ctx, q, args...).Scan(&n)
			return n, err
		}
	} else {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		count = func(q string, args ...any) (n int, err error) {
			err = conn.QueryRow(ctx, q, args...).Scan(&n)
			return n, err
		}
	}
	var c counts
	for _, q := range []struct {
		n    *int
		sql  string
		args []any
	}{
		{&c.Payments, `SELECT count(*) FROM payments WHERE operation_id = $1`, []any{op}},
		{&c.Outbox, `SELECT count(*) FROM idem_outbox WHERE operation_id = $1`, []any{op}},
		{&c.AllPayments, `SELECT count(*) FROM payments`, nil},
		{&c.AllOutbox, `SELECT count(*) FROM idem_outbox`, nil},
	} {
		n, err := count(q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
		*q.n = n
	}
	return c
}
