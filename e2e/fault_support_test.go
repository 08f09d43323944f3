package e2e

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// awaitTimeout bounds every poll of the fault suite.
const awaitTimeout = 30 * time.Second

// await polls cond every 10ms until it holds, failing the test after
// awaitTimeout; the failure shows *last, if given (what cond saw).
func await(t *testing.T, what string, cond func() bool, last ...*string) {
	t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			if len(last) > 0 {
				what += " (last seen: " + *last[0] + ")"
			}
			t.Fatalf("%s: not within %v", what, awaitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitLog waits until s has logged a line containing substr, failing
// the test after awaitTimeout or once s exited without it.
func awaitLog(t *testing.T, s *server, substr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if err := s.child.WaitLog(ctx, substr); err != nil {
		t.Fatalf("idem %s: %v", s.name, err)
	}
}

// awaitLogFrom is awaitLog looking only at what s wrote from the mark
// from (s.child.LogSize()) on.
func awaitLogFrom(t *testing.T, s *server, substr string, from int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if err := s.child.WaitLogFrom(ctx, substr, from); err != nil {
		t.Fatalf("idem %s: %v", s.name, err)
	}
}

// terminate stops s with SIGTERM and checks that it exits cleanly (after
// stopTimeout it kills the process group and fails the test).
func terminate(t *testing.T, s *server) {
	t.Helper()
	s.client.CloseIdleConnections()
	if err := s.child.Stop(stopTimeout); err != nil {
		t.Fatalf("idem serve %s: %v", s.name, err)
	}
}

// pgConn opens a connection of the test's own to the PostgreSQL
// database; ctx bounds the whole test's use of it.
func pgConn(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// withParams returns dsn with extra query parameters (pgx passes the
// ones it does not know to PostgreSQL as run-time settings).
func withParams(t *testing.T, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}
