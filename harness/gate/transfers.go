package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/idemkit/idem/example/provider"
)

// The transfers workload (Config.Workload = WorkloadTransfers): an "idem
// provider" child process behind every instance's --provider, a fault
// schedule that switches its modes during the load, and the provider's
// list of executions for the verification.

// failpointWait bounds how long an instance started with
// IDEM_FAILPOINTS=after-downstream=kill may take to reach that failpoint
// (its first successful provider call) before the gate kills it itself.
const failpointWait = 30 * time.Second

// ProviderTransfer is one transfer the provider executed, as GET
// /transfers lists it.
type ProviderTransfer struct {
	ID        string `json:"id"`
	Key       string `json:"key"`
	Payee     string `json:"payee"`
	Reference string `json:"reference"`
}

// providerClient talks to the provider's control and read routes.
type providerClient struct {
	url    string
	client *http.Client
}

func newProviderClient(url string) providerClient {
	return providerClient{url: url, client: &http.Client{Timeout: 30 * time.Second}}
}

// setMode switches the provider's mode (POST /control) until changed, or
// with count > 0 for the next count requests with a new key.
func (p providerClient) setMode(ctx context.Context, mode provider.Mode, count int) error {
	body := fmt.Sprintf(`{"mode":%q}`, mode)
	if count > 0 {
		body = fmt.Sprintf(`{"mode":%q,"count":%d}`, mode, count)
	}
	if _, err := p.do(ctx, http.MethodPost, "/control", body); err != nil {
		return fmt.Errorf("gate: provider mode %s: %w", mode, err)
	}
	return nil
}

// left returns the count the provider's counted mode has left (GET
// /control): 0 once it is used up.
func (p providerClient) left(ctx context.Context) (int, error) {
	body, err := p.do(ctx, http.MethodGet, "/control", "")
	if err != nil {
		return 0, fmt.Errorf("gate: provider control: %w", err)
	}
	var c struct{ Count int }
	if err := json.Unmarshal(body, &c); err != nil {
		return 0, fmt.Errorf("gate: provider control: %w", err)
	}
	return c.Count, nil
}

// transfers returns every transfer the provider executed (GET /transfers).
func (p providerClient) transfers(ctx context.Context) ([]ProviderTransfer, error) {
	body, err := p.do(ctx, http.MethodGet, "/transfers", "")
	if err != nil {
		return nil, fmt.Errorf("gate: reading the provider's transfers: %w", err)
	}
	var list []ProviderTransfer
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("gate: reading the provider's transfers: %w", err)
	}
	return list, nil
}

func (p providerClient) do(ctx context.Context, method, path, body string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s %.200s", method, path, resp.Status, b)
	}
	return b, nil
}

// faultModes are the provider modes the fault schedule cycles through,
// each phase followed by a phase of "ok".
var faultModes = []provider.Mode{provider.ModeHang, provider.ModeFailAfter, provider.ModeDecline, provider.ModeFail, provider.ModeHangBefore}

// faultStats is what the fault schedule did: phases of each mode and, for
// counted phases, the requests with a new key each mode decided.
type faultStats struct {
	phases, requests map[string]int
	// outage is how long the opening outage lasted; 0 without one.
	outage time.Duration
}

// startFaults runs the fault schedule against p until the returned stop is
// called: "ok" for interval, then the next of faultModes — for interval,
// or for hang (at least the servers' provider timeout and a half, so that
// their held calls time out) in the hang modes — and so on. With count >
// 0 each fault phase sets its mode for the next count requests with a new
// key only (the provider then reverts to ok by itself), so a phase hits at
// most count keys however fast the load goes. stop sets "ok" again,
// waits for the schedule to end and returns what it did. Failed switches
// are reported to say and the schedule goes on.
//
// With outage > 0 the schedule opens with an outage: startFaults sets
// mode fail (no count: every request with a new key is refused with a 503
// until changed) before it returns, so the first keys of a load started
// next all go UNKNOWN; after outage it sets mode decline for one request
// with a new key (so one of those keys settles as declined, the others
// execute), waits until that decline was used (awaitCount) and goes on
// as above. A failed switch to fail is reported to
// say and leaves the outage out (faultStats.outage stays 0).
func startFaults(ctx context.Context, p providerClient, interval, hang time.Duration, count int, outage time.Duration, say func(string, ...any)) (stop func() faultStats) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan faultStats, 1)
	st := faultStats{phases: map[string]int{}, requests: map[string]int{}}
	if outage > 0 {
		if err := p.setMode(ctx, provider.ModeFail, 0); err != nil {
			say("outage: %v", err)
			outage = 0
		} else {
			say("provider outage (mode %s) for %v", provider.ModeFail, outage)
		}
	}
	go func() {
		if outage > 0 {
			began := time.Now()
			ok := wait(ctx, outage)
			st.outage = time.Since(began)
			if err := p.setMode(context.WithoutCancel(ctx), provider.ModeDecline, 1); err != nil {
				say("%v", err)
			} else {
				say("provider outage over after %v; the next new key is declined", st.outage.Round(time.Millisecond))
				ok = ok && awaitCount(ctx, p, say)
			}
			if !ok {
				done <- st
				return
			}
		}
		for i := 0; ; i++ {
			if !wait(ctx, interval) {
				break
			}
			mode := faultModes[i%len(faultModes)]
			if err := p.setMode(ctx, mode, count); err != nil {
				if ctx.Err() != nil {
					break
				}
				say("%v", err)
				continue
			}
			st.phases[string(mode)]++
			d := interval
			if mode == provider.ModeHang || mode == provider.ModeHangBefore {
				d = max(interval, hang)
			}
			ok := wait(ctx, d)
			if count > 0 {
				if left, err := p.left(context.WithoutCancel(ctx)); err == nil {
					st.requests[string(mode)] += count - left
				} else {
					say("%v", err)
				}
			}
			if err := p.setMode(context.WithoutCancel(ctx), provider.ModeOK, 0); err != nil {
				say("%v", err)
			}
			if !ok {
				break
			}
		}
		done <- st
	}()
	return func() faultStats {
		cancel()
		st := <-done
		if err := p.setMode(context.Background(), provider.ModeOK, 0); err != nil {
			say("%v", err)
		}
		return st
	}
}

// outageDecline bounds how long the schedule waits for the decline that
// ends an outage to be used before it goes on.
const outageDecline = 30 * time.Second

// awaitCount waits until the provider's counted mode is used up (its
// count left is 0), so that the next phase does not replace it unused, or
// outageDecline passed (said); it reports whether ctx is still live.
func awaitCount(ctx context.Context, p providerClient, say func(string, ...any)) bool {
	deadline := time.Now().Add(outageDecline)
	for ctx.Err() == nil {
		left, err := p.left(ctx)
		if err == nil && left == 0 {
			return true
		}
		if time.Now().After(deadline) {
			say("the decline after the outage was not used within %v (%v)", outageDecline, err)
			return true
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return false
}

// wait waits d and reports whether ctx is still live.
func wait(ctx context.Context, d time.Duration) bool {
	sleep(ctx, d)
	return ctx.Err() == nil
}

// serveHasFlag reports whether "BIN serve -h" lists the flag --name.
func serveHasFlag(ctx context.Context, bin, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "serve", "-h").CombinedOutput() // exits 2 after the usage
	return bytes.Contains(out, []byte("-"+name+" "))
}

// executionsByKey attributes the provider's transfers to the plan's keys
// by payee; transfers of other payees are ignored.
func executionsByKey(plan Plan, list []ProviderTransfer) [][]string {
	idx := make(map[string]int, len(plan.Keys))
	for i, k := range plan.Keys {
		idx[k.Payee] = i
	}
	out := make([][]string, len(plan.Keys))
	for _, t := range list {
		if i, ok := idx[t.Payee]; ok {
			out[i] = append(out[i], t.ID)
		}
	}
	return out
}
