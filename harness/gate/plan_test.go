package gate

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/example/payments"
)

// TestBodiesAreOnePayment: every retry variant of a key has the
// fingerprint the service computes for its first form, so a conflict on
// any of them is a false one; the conflicting body has another.
func TestBodiesAreOnePayment(t *testing.T) {
	b := idem.Binding{Canon: canon.Options{Mode: canon.ModeSchema, Schema: payments.Schema()}}
	target := &url.URL{Path: "/v1/payments"}
	h := http.Header{"Content-Type": {"application/json"}}
	fp := func(body string) idem.Fingerprint {
		t.Helper()
		f, _, err := b.Fingerprint(http.MethodPost, target, h, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return f
	}
	plan := NewPlan(50, 4, 3, 0.5, 0.2, 1)
	seen := map[string]bool{}
	for _, k := range plan.Keys {
		first := fp(k.Body(0))
		for v := 1; v < 4; v++ {
			if k.Body(v) == k.Body(0) && k.Amount[len(k.Amount)-1] != '0' && v != 2 {
				t.Errorf("variant %d of key %d is byte-identical to variant 0", v, k.Index)
			}
			if fp(k.Body(v)) != first {
				t.Errorf("key %d: variant %d %s has another fingerprint than %s", k.Index, v, k.Body(v), k.Body(0))
			}
		}
		if fp(k.ConflictBody()) == first {
			t.Errorf("key %d: the conflicting body has the same fingerprint", k.Index)
		}
		if seen[k.Key] {
			t.Errorf("key %q twice", k.Key)
		}
		seen[k.Key] = true
	}
}
