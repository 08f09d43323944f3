package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// finished stores n SUCCEEDED operations kept for retention, whose
// tombstones live ttl (0: forever), straight in the registry.
func finished(t *testing.T, store registry.Store, n int, retention, ttl time.Duration) []registry.Record {
	t.Helper()
	var recs []registry.Record
	for range n {
		c := registry.Claim{Operation: "prune.test", Retention: retention, TombstoneTTL: ttl}
		rand.Read(c.Scope[:])
		rand.Read(c.Fingerprint[:])
		rec, created, err := store.Reserve(t.Context(), c)
		if err != nil || !created {
			t.Fatalf("Reserve: %v %v", created, err)
		}
		done, err := store.Complete(t.Context(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("ok")}}, nil
		})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		recs = append(recs, done)
	}
	return recs
}

// pruneJSON runs "idem prune args… --json" and decodes its one line.
func pruneJSON(t *testing.T, args ...string) registry.PruneResult {
	t.Helper()
	code, out, stderr := runCmd(t, "", append([]string{"prune", "--json"}, args...)...)
	var members map[string]int
	if code != exitOK || json.Unmarshal([]byte(out), &members) != nil || len(members) != 2 || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("prune %q: code %d, out %q, stderr %q; want one line {\"retired\":N,\"deleted\":M}", args, code, out, stderr)
	}
	return registry.PruneResult{Retired: members["retired"], Deleted: members["deleted"]}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		kept := finished(t, store, 5, time.Millisecond, 0)
		freed := finished(t, store, 2, time.Millisecond, 300*time.Millisecond)
		live := finished(t, store, 1, time.Hour, 0)
		time.Sleep(20 * time.Millisecond)

		if got := pruneJSON(t, "--db", dsn, "--once", "--batch", "3"); got != (registry.PruneResult{Retired: 3}) {
			t.Errorf("prune --once --batch 3: %+v, want 3 retired", got)
		}
		// Batches of 2 until nothing is left: the other 4 expired records.
		if got := pruneJSON(t, "--batch", "2", "--db", dsn); got != (registry.PruneResult{Retired: 4}) {
			t.Errorf("prune --batch 2: %+v, want 4 retired", got)
		}
		for _, rec := range append(append([]registry.Record(nil), kept...), freed...) {
			if got, err := store.Get(t.Context(), rec.Scope); err != nil || !got.Retired() || got.Response != nil {
				t.Errorf("after prune: %s retired %v err %v, want a tombstone", rec.OperationID, got.Retired(), err)
			}
		}
		// ops show tells a tombstone kept forever from one with a TTL.
		forever := opsJSON[showJSON](t, "ops", "show", kept[0].OperationID, "--db", dsn).Operation
		if tomb := forever.Tombstone; tomb == nil || tomb.RetiredAt.IsZero() || tomb.Until != nil || tomb.TTLSeconds != 0 || forever.Response != nil {
			t.Errorf("ops show of a tombstone kept forever: %+v, tombstone %+v", forever, tomb)
		}
		withTTL := opsJSON[showJSON](t, "ops", "show", freed[0].OperationID, "--db", dsn).Operation
		if tomb := withTTL.Tombstone; tomb == nil || tomb.Until == nil || tomb.Until.Sub(tomb.RetiredAt) != 300*time.Millisecond || tomb.TTLSeconds != 0.3 {
			t.Errorf("ops show of a tombstone with a TTL: tombstone %+v", tomb)
		}
		if code, out, _ := runCmd(t, "", "ops", "show", "--db", dsn, kept[0].OperationID); code != exitOK || !strings.Contains(out, "tombstone") || !strings.Contains(out, "kept forever") {
			t.Errorf("ops show (human) of a tombstone: code %d\n%s", code, out)
		}
		if live := opsJSON[showJSON](t, "ops", "show", live[0].OperationID, "--db", dsn).Operation; live.Tombstone != nil {
			t.Errorf("ops show of a live record has a tombstone: %+v", live.Tombstone)
		}
		time.Sleep(350 * time.Millisecond)
		code, out, stderr := runCmd(t, "", "prune", "--db", dsn)
		if code != exitOK || out != "retired 0 expired records, deleted 2 tombstones\n" {
			t.Errorf("prune: code %d, out %q, stderr %q; want the two tombstones with a TTL deleted", code, out, stderr)
		}
		for _, rec := range freed {
			if _, err := store.Get(t.Context(), rec.Scope); err == nil {
				t.Errorf("tombstone %s with a TTL still there", rec.OperationID)
			}
		}
		if got, err := store.Get(t.Context(), live[0].Scope); err != nil || got.Retired() {
			t.Errorf("unexpired record: retired %v err %v", got.Retired(), err)
		}
		if got := pruneJSON(t, "--db", dsn); got != (registry.PruneResult{}) {
			t.Errorf("prune with nothing due: %+v", got)
		}
		// Every pass is recorded among the prune runs, newest first.
		runs, err := store.PruneRuns(t.Context(), 10)
		var got []string
		for _, r := range runs {
			got = append(got, fmt.Sprintf("%s %d/%d", r.Actor, r.Result.Retired, r.Result.Deleted))
		}
		if want := []string{"idem prune 0/0", "idem prune 0/2", "idem prune 4/0", "idem prune --once 3/0"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("prune runs %q (%v); want %q", got, err, want)
		}
	})
}

func TestPruneUsage(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "u.db")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"prune", "--db", db, "--batch", "0"}, exitUsage},
		{[]string{"prune", "--db", db, "now"}, exitUsage},
		{[]string{"prune", "--nope"}, exitUsage},
		{[]string{"prune", "--db", "mysql://u:secret@h/db"}, exitRefused},
	} {
		code, out, stderr := runCmd(t, "", c.args...)
		if code != c.code || out != "" || strings.Contains(stderr, "secret") {
			t.Errorf("%q: code %d (want %d), out %q, stderr %q", c.args, code, c.code, out, stderr)
		}
	}
}

// TestServePrunes: "idem serve --retention --prune-interval" retires
// finished payments, and a retry then gets 409 KEY_RETIRED with the
// operation ID.
func TestServePrunes(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve-prune.db")
	if code, _, stderr := runCmd(t, "", "serve", "--db", db, "--prune-interval", "-1s"); code != exitUsage {
		t.Errorf("serve --prune-interval -1s: code %d, stderr %q", code, stderr)
	}
	s := startServe(t, append([]string{"--db", db, "--retention", "50ms", "--prune-interval", "20ms"}, noWindows...)...)
	const body = `{"amount":"1.00","currency":"EUR","payee":"acct_prune"}`
	first, _ := s.post(t, "demo", "prune-key", body)
	opID := first.Header.Get("Idempotency-Operation")
	if first.StatusCode != http.StatusCreated || opID == "" {
		t.Fatalf("first: %d %v", first.StatusCode, first.Header)
	}
	resp, b := pollUntil(t, "retry refused as retired", 10*time.Second,
		func(int) (*http.Response, []byte) { return s.post(t, "demo", "prune-key", body) },
		func(r *http.Response, b []byte) bool { return r.StatusCode == http.StatusConflict })
	if problemCode(t, b) != "KEY_RETIRED" || resp.Header.Get("Idempotency-Operation") != opID || !strings.Contains(string(b), opID) {
		t.Errorf("retry after retention: %d %v %s, want 409 KEY_RETIRED naming %s", resp.StatusCode, resp.Header, b, opID)
	}
	// The loop logs the prune after its transaction committed, so after
	// the retry may have seen KEY_RETIRED: wait for the line.
	s.logs.waitFor(t, contains("msg=pruned retired=1"), 10*time.Second, "the prune of idem serve")
	s.stop(t)
}
