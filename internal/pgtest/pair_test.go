package pgtest_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestPair: a row committed before the primary is killed is on the
// promoted standby (synchronous pair); between the kill and the promotion
// the multi-host DSN reaches no writable server; after it the same DSN
// writes to the former standby, whose commits do not wait for a standby
// of their own.
func TestPair(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync", false: "async"}[sync], func(t *testing.T) {
			t.Parallel()
			p := pgtest.NewPair(t, sync)
			dsn, err := p.DSN("pair")
			if err != nil {
				t.Fatal(err)
			}
			primary, standby := p.Ports()
			if got := psql(t, dsn, "select inet_server_port()"); got != strconv.Itoa(primary) {
				t.Fatalf("before the failover the DSN reaches port %s, want the primary's %d", got, primary)
			}
			psql(t, dsn, "create table t (n int); insert into t values (1)")
			if err := p.KillPrimary(); err != nil {
				t.Fatal(err)
			}
			if err := p.KillPrimary(); err == nil {
				t.Error("a second KillPrimary succeeded")
			}
			if out, err := psqlTry(t, dsn, "select 1"); err == nil {
				t.Errorf("between the kill and the promotion the DSN connected: %s", out)
			}
			if err := p.Promote(); err != nil {
				t.Fatal(err)
			}
			if got := psql(t, dsn, "select inet_server_port()"); got != strconv.Itoa(standby) {
				t.Errorf("after the promotion the DSN reaches port %s, want the standby's %d", got, standby)
			}
			if out, err := psqlTry(t, dsn, "insert into t values (2)"); err != nil {
				t.Fatalf("a commit on the promoted standby: %v\n%s", err, out) // a copied synchronous_standby_names would hang it
			}
			want := "2"
			if !sync {
				want = psql(t, dsn, "select count(*) from t") // the first row may be lost
			}
			if got := psql(t, dsn, "select count(*) from t"); got != want {
				t.Errorf("after the failover the table holds %s rows, want %s (the row committed before the kill and one after)", got, want)
			}
		})
	}
}

// psqlTry runs sql against dsn, bounded by 30 s, and returns its
// trimmed output.
func psqlTry(t *testing.T, dsn, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, psqlPath(t), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestPauseReplication: with the primary's WAL sender stopped, an
// asynchronous primary acknowledges a commit that the promoted standby
// then lacks — the loss the failover test measures; a synchronous one
// does not acknowledge it at all (its commit waits, and fails with the
// primary).
func TestPauseReplication(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync", false: "async"}[sync], func(t *testing.T) {
			t.Parallel()
			p := pgtest.NewPair(t, sync)
			dsn, err := p.DSN("pause")
			if err != nil {
				t.Fatal(err)
			}
			psql(t, dsn, "create table t (n int); insert into t values (1)")
			resume, err := p.PauseReplication()
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := psqlTry(t, dsn+"&connect_timeout=5", "insert into t values (2)")
				done <- err
			}()
			acked := false
			if !sync {
				if err := <-done; err != nil {
					t.Fatalf("an asynchronous commit during the stall: %v", err)
				}
				acked = true
			} else {
				// The insert reached the primary and waits for the
				// standby: only then is a failure after the kill a commit
				// that was never acknowledged (not one never sent).
				deadline := time.Now().Add(30 * time.Second)
				for psql(t, dsn, "select count(*) from pg_stat_activity where wait_event = 'SyncRep'") == "0" {
					if time.Now().After(deadline) {
						t.Fatal("no backend waited for the standby within 30 s")
					}
					time.Sleep(20 * time.Millisecond) // polling for the wait, bounded
				}
			}
			if err := p.KillPrimary(); err != nil {
				t.Fatal(err)
			}
			resume()
			if sync {
				if err := <-done; err == nil {
					t.Fatal("a synchronous commit during the stall was acknowledged")
				}
			}
			if err := p.Promote(); err != nil {
				t.Fatal(err)
			}
			if got := psql(t, dsn, "select count(*) from t where n = 2"); got != "0" {
				t.Errorf("the promoted standby holds the row committed during the stall (%s rows; acknowledged: %v); want none", got, acked)
			}
		})
	}
}
