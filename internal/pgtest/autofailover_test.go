package pgtest_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// haWait bounds each wait for the monitor in TestHACluster.
const haWait = 2 * time.Minute

// TestHACluster: under pg_auto_failover the monitor, not the test, fails
// over. A synchronous formation acknowledges a commit once the
// secondary has it; after the primary's postmaster is SIGKILLed the
// monitor promotes the secondary by itself, the multi-host DSN writes to
// it, and the old primary rejoins as its secondary (pg_rewind) with the
// row committed before the kill; after the new primary's whole node is
// killed (StopNode) the monitor promotes the first node back, and the
// restarted node rejoins as a secondary. Every row committed before each
// failure is on the node promoted after it.
// threat:ha-failover-acknowledged-loss
func TestHACluster(t *testing.T) {
	t.Parallel()
	h := pgtest.NewHACluster(t, true)
	dsn, err := h.DSN("ha")
	if err != nil {
		t.Fatal(err)
	}
	a, b := h.Ports()
	if got := psql(t, dsn, "select inet_server_port()"); got != strconv.Itoa(a) {
		t.Fatalf("before any failover the DSN reaches port %s, want %s's %d", got, pgtest.NodeA, a)
	}
	if got := psql(t, dsn, "show synchronous_standby_names"); got == "" {
		t.Fatalf("the synchronous formation's primary runs without synchronous_standby_names\n%s", h.StateText())
	}
	psql(t, dsn, "create table t (n int); insert into t values (1)")

	start := time.Now()
	if _, err := h.KillPostmaster(pgtest.NodeA); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitState(haWait, pgtest.NodeB, "primary", pgtest.NodeA, "secondary"); err != nil {
		t.Fatal(err)
	}
	t.Logf("postmaster killed: %s primary, %s secondary again after %v\n%s", pgtest.NodeB, pgtest.NodeA, time.Since(start).Round(time.Millisecond), h.StateText())
	if got := psql(t, dsn, "select inet_server_port()"); got != strconv.Itoa(b) {
		t.Errorf("after the failover the DSN reaches port %s, want %s's %d", got, pgtest.NodeB, b)
	}
	if got := psql(t, dsn, "select count(*) from t"); got != "1" {
		t.Errorf("after the failover the table holds %s rows, want the 1 committed before the kill", got)
	}
	psql(t, dsn, "insert into t values (2)")

	start = time.Now()
	if _, err := h.StopNode(pgtest.NodeB); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitState(haWait, pgtest.NodeA, "wait_primary"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node stopped: %s promoted after %v", pgtest.NodeA, time.Since(start).Round(time.Millisecond))
	if got := psql(t, dsn, "select count(*) from t"); got != "2" {
		t.Errorf("after the second failover the table holds %s rows, want the 2 committed before", got)
	}
	if err := h.RestartNode(pgtest.NodeB); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitState(haWait, pgtest.NodeA, "primary", pgtest.NodeB, "secondary"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s rejoined after %v\n%s", pgtest.NodeB, time.Since(start).Round(time.Millisecond), h.StateText())
	if got := psql(t, dsn, "select inet_server_port()"); got != strconv.Itoa(a) {
		t.Errorf("after the failover back the DSN reaches port %s, want %s's %d", got, pgtest.NodeA, a)
	}
}
