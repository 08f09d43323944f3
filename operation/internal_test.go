package operation

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestStateFor(t *testing.T) {
	op := Config{FinalStatuses: []int{422, 404}}
	cases := map[int]idem.State{200: idem.StateSucceeded, 201: idem.StateSucceeded, 299: idem.StateSucceeded,
		422: idem.StateFailedFinal, 404: idem.StateFailedFinal, 400: "", 409: "", 500: "", 503: "", 302: "", 100: ""}
	for status, want := range cases {
		if got := op.stateFor(status); got != want {
			t.Errorf("status %d: %q, want %q", status, got, want)
		}
	}
}

// Proves threat:key-flooding (docs/threat-model.md).
func TestKeyLimitRetryAfter(t *testing.T) {
	for lease, want := range map[time.Duration]string{
		0: "30", time.Second: "1", 1500 * time.Millisecond: "2", time.Millisecond: "1", 2 * time.Minute: "120",
	} {
		m := &Core{Config: &Config{Name: "op", Lease: lease}}
		if got := m.keyLimitRetryAfter(); got != want {
			t.Errorf("lease %v: Retry-After %s, want %s", lease, got, want)
		}
	}
}
