package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// rolloutProbe is a caller of its own whose requests show which mode an
// instance serves it in: a POST without an Idempotency-Key is refused
// with 400 KEY_MISSING under enforce and executed plainly (201) in
// shadow. Its tenant's ramp bucket is Bucket; its verdicts are left out
// of the report's comparison.
type rolloutProbe struct {
	Principal
	Bucket int
}

type rolloutProbes []rolloutProbe

// newRolloutProbes returns three probes whose tenants the ramp enforces
// from 10 %, from 50 % and only at 100 % (buckets in [0, 1000),
// [1000, 5000) and [5000, 10000)), so every stage of RolloutStages
// changes what at least one of them gets.
func newRolloutProbes(run string) rolloutProbes {
	bounds := [][2]int{{0, 1000}, {1000, 5000}, {5000, 10000}}
	var out rolloutProbes
	for _, b := range bounds {
		for n := 0; ; n++ {
			tenant := fmt.Sprintf("probe-%s-%d", run, n)
			if bk := registry.RampBucket(payments.OperationCreate, tenant, ""); bk >= b[0] && bk < b[1] {
				out = append(out, rolloutProbe{Principal{Token: "probe-" + randomHex(16),
					Identity: idem.Identity{Tenant: tenant, Principal: tenant}}, bk})
				break
			}
		}
	}
	return out
}

func (ps rolloutProbes) principals() []Principal {
	out := make([]Principal, len(ps))
	for i, p := range ps {
		out[i] = p.Principal
	}
	return out
}

func (ps rolloutProbes) isProbe(tenant string) bool {
	for _, p := range ps {
		if p.Identity.Tenant == tenant {
			return true
		}
	}
	return false
}

// enforced reports whether stage enforces tenants of bucket b.
func (st RolloutStage) enforced(b int) bool {
	return st.Mode == registry.RolloutEnforce && b < st.Percent*100
}

// await sends every probe to every instance until each gets the answer of
// st's mode (re-sending after a transport error, while an instance is
// down or restarting, or while it still serves the previous stage), and
// returns how long that took; an error after rolloutEffectTimeout.
func (ps rolloutProbes) await(ctx context.Context, client *http.Client, f *fleet, run string, st RolloutStage) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(rolloutEffectTimeout)
	for i := range f.targets {
		for _, p := range ps {
			var last string
			for {
				want := st.enforced(p.Bucket)
				got, note, err := probeOnce(ctx, client, f.targets[i].URL(), p, run)
				if err == nil && got == want {
					break
				}
				if err != nil {
					last = err.Error()
				} else {
					last = note
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return time.Since(start), fmt.Errorf("gate: instance %d did not serve tenant %s (bucket %d) as %v within %v: last answer %s",
						i, p.Identity.Tenant, p.Bucket, st, rolloutEffectTimeout, last)
				}
				sleep(ctx, 20*time.Millisecond)
			}
		}
	}
	return time.Since(start), nil
}

// probeOnce sends one keyless POST and reports whether it was refused as
// enforce refuses it (400 KEY_MISSING); an error for a transport error,
// an instance down, or an answer of neither mode.
func probeOnce(ctx context.Context, client *http.Client, url string, p rolloutProbe, run string) (enforced bool, note string, err error) {
	if url == "" {
		return false, "", fmt.Errorf("instance down")
	}
	body := fmt.Sprintf(`{"amount":"1.00","currency":"EUR","payee":"acct_probe","memo":"gate %s probe"}`, run)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		return false, "", err
	}
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	note = fmt.Sprintf("%d %.200s", resp.StatusCode, b)
	var pr idemhttp.Problem
	json.Unmarshal(b, &pr)
	switch {
	case resp.StatusCode == http.StatusBadRequest && pr.Code == idem.CodeKeyMissing:
		return true, note, nil
	case resp.StatusCode == http.StatusCreated:
		return false, note, nil
	}
	return false, note, fmt.Errorf("neither mode's answer: %s", note)
}
