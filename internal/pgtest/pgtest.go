// Package pgtest gives Go tests a real, throwaway PostgreSQL server.
//
// Each test binary that uses the package must call [Main] from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// The first call to [DSN] in the test binary starts one shared cluster
// (lazily, exactly once); every call to DSN then creates a fresh, empty
// database for the calling test and drops it when the test finishes, so tests
// — including parallel ones — never see each other's data.
//
// The cluster is built from the initdb, pg_ctl and postgres binaries found on
// PATH (PostgreSQL 15 is expected); all other helpers (createdb, dropdb) come
// from the same installation directory. Defaults:
//
//   - data, log and unix socket live in a fresh directory under
//     [os.TempDir] named idem-pgtest-*, removed by Main;
//   - the server listens only on 127.0.0.1, on a free port chosen at start;
//   - superuser "postgres", trust authentication, no TLS;
//   - UTF8 encoding, C locale;
//   - fsync=on, synchronous_commit=on, max_connections=200,
//     shared_buffers=128MB.
//
// When the tests run as root, the server binaries are run as the "postgres"
// OS user, which must exist.
//
// If the binaries are missing, DSN skips the test, unless the environment
// variable IDEM_REQUIRE_POSTGRES=1 is set, in which case it fails it.
//
// With IDEM_TEST_PGBOUNCER=1 ([PoolerEnv]) the cluster gets PgBouncer in
// transaction pooling mode in front of it, and DSN returns connection
// strings on PgBouncer's port with idem_pooler=transaction, the
// parameter that tells idempg.Open so (docs/operations.md, "Connection
// poolers"); PgBouncer ignores it when a test connects with pgx directly.
//
// Besides the shared cluster: [NewPair] starts a primary and a streaming
// standby that a test promotes by hand, and [NewHACluster] a
// pg_auto_failover formation (pg_autoctl from PATH, or the binary
// [AutoctlEnv] names) whose monitor fails over by itself.
//
// When the server log records a server process that died abnormally (a
// crash, or a signal from outside: PostgreSQL then ends every connection
// and recovers), Main prints those lines to standard error and a failing
// createdb or dropdb carries them in its error.
//
// If the test binary is killed (or panics, e.g. on -timeout) before Main
// returns, the server and its directory outlive it. The next cluster started
// on the machine reaps them: each directory records its owner's process ID
// (owner.pid), and a cluster whose owner no longer exists is stopped and
// deleted (reap.go). Until then they can be found by the idem-pgtest-
// prefix.
package pgtest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// RequireEnv is the environment variable that turns a missing PostgreSQL
// installation from a skip into a test failure when set to "1".
const RequireEnv = "IDEM_REQUIRE_POSTGRES"

// maxIdentLen is PostgreSQL's identifier length limit (NAMEDATALEN-1).
const maxIdentLen = 63

var (
	mainCalled atomic.Bool   // set by Main; DSN refuses to run without it
	dbCounter  atomic.Uint64 // makes database names unique within the binary

	shared struct {
		once sync.Once
		c    *cluster // the running cluster, set by once
		err  error    // why the cluster is not available, set by once
	}
)

// errStopped is recorded if Main finishes before any test asked for a DSN,
// so that nothing can start a cluster that would never be stopped.
var errStopped = errors.New("pgtest: cluster requested after pgtest.Main finished")

// Main runs the tests and then stops and deletes the shared cluster, if one
// was started, and exits with the tests' exit code (1 if the cluster could not
// be stopped). Call it from TestMain; it does not return. m is the
// *testing.M, or something that runs it (mytest.Runner, for a test binary
// that needs both servers).
func Main(m interface{ Run() int }) {
	mainCalled.Store(true)
	code := m.Run()
	// After this Do, the once has run: either the cluster exists, start
	// failed, or nothing was ever started and no later start is possible.
	shared.once.Do(func() { shared.err = errStopped })
	if c := shared.c; c != nil {
		// A backend that died takes every connection with it; tests then
		// fail far from the cause. Say so, whether or not they failed.
		if crash := c.crashLines(); crash != "" {
			fmt.Fprintf(os.Stderr, "pgtest: the shared cluster's log records server processes that died:\n%s\n", crash)
		}
		if err := c.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// DSN returns the connection string of a new, empty database that belongs to
// t alone, starting the shared cluster first if needed. The database is
// dropped (WITH (FORCE), so open connections do not block it) by a t.Cleanup.
//
// The result has the form
//
//	postgres://postgres@127.0.0.1:PORT/t_<test name>_<n>?sslmode=disable
//
// DSN is safe for concurrent use by parallel tests. Like t.Fatal, it must be
// called from the goroutine running the test. It skips or fails t when
// PostgreSQL is not installed (see the package documentation) and fails t,
// including the server log tail, if the cluster cannot be started.
func DSN(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("pgtest: call pgtest.Main(m) from TestMain so the cluster is stopped after the tests")
	}
	shared.once.Do(func() { shared.c, shared.err = startCluster() })
	c, err := shared.c, shared.err
	switch {
	case errors.Is(err, errNoBinaries) && os.Getenv(RequireEnv) != "1":
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}

	name := dbName(t.Name(), dbCounter.Add(1))
	if err := c.client("createdb", "--", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.client("dropdb", "--force", "--if-exists", "--", name); err != nil {
			t.Error(err)
		}
	})
	if c.pool != nil {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&idem_pooler=transaction", c.pool.port, name)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// dbName builds a valid, unquoted PostgreSQL identifier of the form
// t_<sanitised test name>_<n>, truncating the test name to fit 63 bytes.
func dbName(test string, n uint64) string {
	suffix := "_" + strconv.FormatUint(n, 10)
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= maxIdentLen-len(suffix) {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + suffix
}
