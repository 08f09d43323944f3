package gate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
)

// transferConfig is smallConfig for the transfers workload.
func transferConfig() Config {
	c := smallConfig()
	c.Workload = WorkloadTransfers
	return c.withDefaults()
}

// runTransfers drives transferConfig's load through a fresh bundle whose
// services call an in-process provider in mode ok, and returns what
// VerifyTransfers and NewReport need.
func runTransfers(t *testing.T, kind string) (*bundle, Config, Plan, LoadResult, []ProviderTransfer) {
	t.Helper()
	cfg := transferConfig()
	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	plan.PayeePerKey()
	prov := httptest.NewServer(provider.New().Handler())
	t.Cleanup(prov.Close)
	b := newBundle(t, kind, 2, plan.Tokens(), func(c *payments.Config) { c.Provider = prov.URL })
	b.op = payments.OperationTransfer
	res := Load(context.Background(), cfg, plan, b.targets, nil)
	list, err := newProviderClient(prov.URL).transfers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b, cfg, plan, res, list
}

func verifyTransfers(t *testing.T, b *bundle, cfg Config, plan Plan, res LoadResult, list []ProviderTransfer) *Report {
	t.Helper()
	v, err := VerifyTransfers(context.Background(), b.store, plan, res, list, cfg.UnknownSLO)
	if err != nil {
		t.Fatal(err)
	}
	return NewReport(cfg, plan, res, v, b.scrape(t))
}

// cloneResult copies res deeply enough to change a key's result.
func cloneResult(res LoadResult) LoadResult {
	res.Keys = slices.Clone(res.Keys)
	return res
}

func TestVerifyTransfers(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b, cfg, plan, res, list := runTransfers(t, kind)
			r := verifyTransfers(t, b, cfg, plan, res, list)
			if !r.Passed || r.Workload != WorkloadTransfers || !slices.ContainsFunc(r.Gates, func(g Gate) bool { return g.Name == "stored_5xx" }) {
				t.Fatalf("clean run: passed %v, workload %q, gates %+v\nproblems: %q", r.Passed, r.Workload, r.Gates, r.Problems)
			}
			refused := 0
			for _, k := range plan.Keys {
				if k.Refused {
					refused++
				}
			}
			v := r.Verification
			if r.Refused != refused || r.Succeeded != len(plan.Keys)-refused || r.Declined != 0 ||
				v.ProviderExecutions != r.Succeeded || len(list) != r.Succeeded || v.Operations != len(plan.Keys) ||
				r.Stored5xx != 0 || r.UnknownPastSLORatio != 0 || r.UnknownSLOSeconds != cfg.UnknownSLO.Seconds() || r.Reservations == 0 {
				t.Errorf("counts of a clean run (%d keys, %d refused): %+v", len(plan.Keys), refused, r)
			}

			var text, page strings.Builder
			r.WriteText(&text)
			if err := r.WriteHTML(&page); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"POST /v1/transfers", "stored_5xx", "executions for the run"} {
				if !strings.Contains(text.String(), want) || !strings.Contains(page.String(), want) {
					t.Errorf("text or HTML report lacks %q:\n%s", want, text.String())
				}
			}
			if strings.Contains(page.String(), "payment rows") {
				t.Error("the HTML report of a transfers run counts payment rows")
			}

			succeeded := firstKey(t, b, plan, res, func(k Key) bool { return !k.Refused })
			refusedKey := firstKey(t, b, plan, res, func(k Key) bool { return k.Refused })

			// The provider executed a key's transfer twice.
			twice := append(slices.Clone(list), ProviderTransfer{ID: "tr_again", Payee: plan.Keys[succeeded].Payee})
			r = verifyTransfers(t, b, cfg, plan, res, twice)
			wantFailed(t, r, "duplicate_effects")
			if r.DuplicateEffects != 1 {
				t.Errorf("duplicate_effects %d, want 1", r.DuplicateEffects)
			}

			// A 201 without its execution; a refusal with one.
			missing := slices.DeleteFunc(slices.Clone(list), func(p ProviderTransfer) bool { return p.Payee == plan.Keys[succeeded].Payee })
			r = verifyTransfers(t, b, cfg, plan, res, missing)
			wantFailed(t, r, "contract_violations")
			refusedExec := append(slices.Clone(list), ProviderTransfer{ID: "tr_refused", Payee: plan.Keys[refusedKey].Payee})
			r = verifyTransfers(t, b, cfg, plan, res, refusedExec)
			wantFailed(t, r, "contract_violations")
			if r.Verification.DeclinedExecuted != 1 {
				t.Errorf("declined_executed %d, want 1", r.Verification.DeclinedExecuted)
			}

			// A key that never settled, and one that settled past the SLO.
			for _, late := range []func(*KeyResult){
				func(kr *KeyResult) { kr.Settled = false },
				func(kr *KeyResult) { kr.SettledAfter = cfg.UnknownSLO + time.Millisecond },
			} {
				changed := cloneResult(res)
				late(&changed.Keys[succeeded])
				r = verifyTransfers(t, b, cfg, plan, changed, list)
				wantFailed(t, r, "unknown_past_slo_ratio")
				if want := 1 / float64(len(plan.Keys)); r.UnknownPastSLORatio != want {
					t.Errorf("unknown_past_slo_ratio %v, want %v", r.UnknownPastSLORatio, want)
				}
			}

			// A stored 5xx (behind the registry's back, so the snapshot
			// also fails its digest).
			tamperRecord(t, b, "store_502", res.Keys[succeeded].Answers[0].OperationID)
			r = verifyTransfers(t, b, cfg, plan, res, list)
			wantFailed(t, r, "stored_5xx", "replay_digest_consistency")
			if r.Stored5xx != 1 {
				t.Errorf("stored_5xx %d, want 1", r.Stored5xx)
			}
		})
	}
}

// TestFaultSchedule runs the fault schedule against a provider until every
// fault mode had a phase, and checks that it ends in mode ok.
func TestFaultSchedule(t *testing.T) {
	t.Parallel()
	srv := provider.New()
	var mu sync.Mutex
	seen := map[string]int{}
	all := make(chan struct{})
	closed := false
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/control" {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h.ServeHTTP(w, r) // the mode is set once this returns
		var c struct{ Mode string }
		json.Unmarshal(body, &c)
		mu.Lock()
		defer mu.Unlock()
		seen[c.Mode]++
		// The schedule is sequential: once the first mode comes round
		// again, every mode's phase was set and counted.
		if seen[string(faultModes[0])] == 2 && !closed {
			closed = true
			close(all)
		}
	}))
	defer ts.Close()
	var said []string
	stop := startFaults(context.Background(), newProviderClient(ts.URL), time.Millisecond, time.Millisecond, 3, 0,
		func(f string, args ...any) { said = append(said, f) })
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Error("not every mode was set within a minute")
	}
	st := stop()
	for _, m := range faultModes {
		if st.phases[string(m)] == 0 || st.requests[string(m)] != 0 {
			t.Errorf("%s: %d phases, %d requests decided; want some and none (no transfers were sent)", m, st.phases[string(m)], st.requests[string(m)])
		}
	}
	if srv.Mode() != provider.ModeOK || len(said) != 0 {
		t.Errorf("after stop: mode %s, said %q", srv.Mode(), said)
	}
}

// TestTransfersRun is a small transfers gate against real "idem serve"
// and "idem provider" processes, one instance killed midway and one
// killed by the after-downstream failpoint.
func TestTransfersRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "idem")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress strings.Builder
	cfg := Config{
		DSN: "sqlite:" + filepath.Join(t.TempDir(), "gate.db"), Bin: bin, Workload: WorkloadTransfers,
		Instances: 2, Requests: 200, Crash: true, Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond,
		LatencyBudget: time.Minute, FaultInterval: 200 * time.Millisecond, FaultKeys: 3, Seed: 42, Progress: &progress,
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var text strings.Builder
	r.WriteText(&text)
	if !r.Passed || r.Workload != WorkloadTransfers || r.Crashes != 2 || r.DuplicateEffects != 0 || r.Stored5xx != 0 ||
		len(r.Faults) == 0 || r.Verification.ProviderExecutions != r.Succeeded {
		t.Fatalf("%s\nprogress:\n%s", text.String(), progress.String())
	}
}
