package registry

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestDownstreamKeyGolden pins the derivation: a key sent downstream must
// be the same in every release, or an operation in flight across an
// upgrade would be sent again under a new key. The values were computed
// independently (Python hashlib) from the documented encoding.
func TestDownstreamKeyGolden(t *testing.T) {
	for _, c := range []struct{ op, name, want string }{
		{"op_01HZY8Q4N7E3T5V6W8X9Y0Z1A2", "transfer", "idem-b655adb92db00abb288c166aa81ccf16b684d2f4"},
		{"", "", "idem-4042e2cb9a09f2449ed6269aecd5bde65ffe432b"},
	} {
		if got := DownstreamKey(c.op, c.name); got != c.want {
			t.Errorf("DownstreamKey(%q, %q) = %q, want %q", c.op, c.name, got, c.want)
		}
	}
}

func TestDownstreamKeyShapeAndSeparation(t *testing.T) {
	seen := map[string][2]string{}
	for _, in := range [][2]string{
		{"op_A", "transfer"}, {"op_B", "transfer"}, {"op_A", "transfer2"},
		{"op_At", "ransfer"}, {"op_Atransfer", ""}, {"", "op_Atransfer"},
	} {
		k := DownstreamKey(in[0], in[1])
		if k != DownstreamKey(in[0], in[1]) {
			t.Errorf("DownstreamKey%q is not stable", in)
		}
		if len(k) != 45 || !strings.HasPrefix(k, "idem-") || strings.Trim(k[5:], "0123456789abcdef") != "" {
			t.Errorf("DownstreamKey%q = %q: want idem- and 40 lower-case hex digits", in, k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("DownstreamKey%q = DownstreamKey%q = %q", in, prev, k)
		}
		seen[k] = in
	}
}

// Proves threat:settled-on-a-guess (docs/threat-model.md).
func TestReconciliationValidate(t *testing.T) {
	ok := Reconciliation{Outcome: idem.StateSucceeded, Method: ReconcileOperator, Actor: "a", Evidence: "e",
		Response: idem.Response{Status: 200}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid reconciliation: %v", err)
	}
	for _, m := range []string{ReconcileProvider, ReconcileReplay} {
		r := ok
		r.Method = m
		if err := r.Validate(); err != nil {
			t.Errorf("method %q: %v", m, err)
		}
	}
	r := ok
	r.Outcome = idem.StateFailedFinal
	if err := r.Validate(); err != nil {
		t.Errorf("outcome FAILED_FINAL: %v", err)
	}
	for name, bad := range map[string]func(*Reconciliation){
		"outcome REJECTED": func(r *Reconciliation) { r.Outcome = idem.StateRejected },
		"outcome UNKNOWN":  func(r *Reconciliation) { r.Outcome = idem.StateUnknown },
		"method":           func(r *Reconciliation) { r.Method = "Operator" },
		"actor":            func(r *Reconciliation) { r.Actor = "" },
		"evidence":         func(r *Reconciliation) { r.Evidence = "" },
		"status":           func(r *Reconciliation) { r.Response.Status = 1000 },
	} {
		r := ok
		bad(&r)
		if r.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestListFilter(t *testing.T) {
	if got := (ListFilter{}).LimitOrDefault(); got != DefaultListLimit {
		t.Errorf("zero Limit: %d, want %d", got, DefaultListLimit)
	}
	if got := (ListFilter{Limit: -1}).LimitOrDefault(); got != DefaultListLimit {
		t.Errorf("negative Limit: %d, want %d", got, DefaultListLimit)
	}
	if got := (ListFilter{Limit: 7}).LimitOrDefault(); got != 7 {
		t.Errorf("Limit 7: %d", got)
	}
	for _, f := range []ListFilter{{}, {State: idem.StateUnknown, OlderThan: time.Hour}} {
		if err := f.Validate(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	for _, f := range []ListFilter{{State: "unknown"}, {OlderThan: -1}} {
		if f.Validate() == nil {
			t.Errorf("%+v: accepted", f)
		}
	}
}
