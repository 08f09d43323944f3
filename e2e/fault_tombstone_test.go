package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestFaultTombstone (V1: tombstone-expiry race; SPEC E5): records expire
// after --retention 1s and are retired by the server's prune loop
// (--prune-interval 100ms) and by "idem prune" processes (up to 5, long:
// 20, one after the other) run at the same time, while clients keep retrying every key. Every answer is the
// replay of the one execution or 409 KEY_RETIRED naming the operation —
// never a second execution — and once a client has been told KEY_RETIRED
// no later request of that key replays.
// Proves threat:restored-backup (docs/threat-model.md).
func TestFaultTombstone(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		s := f.serve("A", nil, true, "--retention", "1s", "--prune-interval", "100ms", // no late sources: the windows are 0
			"--client-retry-window", "0s", "--queue-backlog-window", "0s", "--reconciliation-window", "0s", "--restore-window", "0s")
		keys, bodies := make([]string, pick(4, 16)), make([]string, pick(4, 16))
		for i := range keys {
			keys[i], bodies[i] = f.key("tomb"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1"}`
			wantCreated(t, "first POST", f.mustPost(s, "/v1/payments", "demo", keys[i], bodies[i]))
		}
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		defer cancel()

		pruned := make(chan error, 1)
		go func() { // "idem prune" processes racing the server's own loop
			var err error
			for runs := 0; runs < pick(5, 20) && ctx.Err() == nil && err == nil; runs++ {
				out, perr := exec.CommandContext(ctx, idemBin, "prune", "--db", dsn, "--batch", "2").CombinedOutput()
				if perr != nil && ctx.Err() == nil {
					err = fmt.Errorf("idem prune: %v: %s", perr, out)
				}
			}
			pruned <- err
		}()

		var wg sync.WaitGroup
		for i, key := range keys {
			for range 2 {
				pace := time.Duration(5+f.rng.IntN(25)) * time.Millisecond // a timing choice of the seed
				wg.Go(func() {
					for ctx.Err() == nil {
						r, err := f.post(s, "/v1/payments", "demo", key, bodies[i])
						if err == nil && problemErr(r, http.StatusConflict, string(idem.CodeKeyRetired)) == "" {
							return
						}
						time.Sleep(pace)
					}
					t.Errorf("key %s: no KEY_RETIRED within %v", key, awaitTimeout)
				})
			}
		}
		wg.Wait()
		cancel()
		if err := <-pruned; err != nil {
			t.Error(err)
		}

		counts := f.check(allow{Retired: true})
		if counts["executed"] != len(keys) {
			t.Errorf("answers %v; want exactly %d executions", counts, len(keys))
		}
		retiredAt := map[string]float64{}
		for _, e := range f.hist.exchanges() {
			if e.Code == string(idem.CodeKeyRetired) {
				if at, ok := retiredAt[e.Scope]; !ok || e.End < at {
					retiredAt[e.Scope] = e.End
				}
			}
		}
		for _, e := range f.hist.exchanges() {
			if at, ok := retiredAt[e.Scope]; ok && e.terminal() && e.Start > at {
				t.Errorf("#%d replayed scope %s at %.3fs, after a client was told KEY_RETIRED at %.3fs", e.Seq, e.Scope, e.Start, at)
			}
		}
		for _, r := range f.last.Operations {
			if r["retired"] != "yes" {
				t.Errorf("record %s is not a tombstone at the end: %v", r["operation_id"], r)
			}
		}
	})
}
