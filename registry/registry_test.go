package registry_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

func TestDecide(t *testing.T) {
	fp := idem.Fingerprint{1}
	other := idem.Fingerprint{2}
	// For each state: the verdict of a duplicate with the same fingerprint
	// that did not create the record.
	tests := []struct {
		state idem.State
		dup   registry.Verdict
	}{
		{idem.StateReserved, registry.InProgress},
		{idem.StateExecuting, registry.InProgress},
		{idem.StateSucceeded, registry.Replay},
		{idem.StateFailedFinal, registry.Replay},
		{idem.StateRejected, registry.Replay},
		{idem.StateUnknown, registry.Unknown},
	}
	if len(tests) != len(idem.States()) {
		t.Fatalf("table covers %d states, idem has %d", len(tests), len(idem.States()))
	}
	for _, tc := range tests {
		rec := registry.Record{State: tc.state, Fingerprint: fp}
		for _, c := range []struct {
			name    string
			created bool
			fp      idem.Fingerprint
			want    registry.Verdict
		}{
			{"same/created", true, fp, registry.Execute},
			{"same/existing", false, fp, tc.dup},
			{"different/created", true, other, registry.Conflict},
			{"different/existing", false, other, registry.Conflict},
		} {
			if got := registry.Decide(rec, c.created, c.fp); got != c.want {
				t.Errorf("Decide(%s, %s) = %v, want %v", tc.state, c.name, got, c.want)
			}
		}
	}
}

func TestCanTransition(t *testing.T) {
	legal := map[[2]idem.State]bool{
		{idem.StateReserved, idem.StateReserved}:     true,
		{idem.StateReserved, idem.StateExecuting}:    true,
		{idem.StateReserved, idem.StateSucceeded}:    true,
		{idem.StateReserved, idem.StateFailedFinal}:  true,
		{idem.StateReserved, idem.StateRejected}:     true,
		{idem.StateExecuting, idem.StateExecuting}:   true,
		{idem.StateExecuting, idem.StateSucceeded}:   true,
		{idem.StateExecuting, idem.StateFailedFinal}: true,
		{idem.StateExecuting, idem.StateUnknown}:     true,
		{idem.StateUnknown, idem.StateSucceeded}:     true,
		{idem.StateUnknown, idem.StateFailedFinal}:   true,
	}
	for _, from := range idem.States() {
		for _, to := range idem.States() {
			if got, want := idem.CanTransition(from, to), legal[[2]idem.State{from, to}]; got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
		if idem.CanTransition(from, "BOGUS") || idem.CanTransition("BOGUS", from) {
			t.Errorf("CanTransition accepts an invalid state with %s", from)
		}
	}
	for _, s := range idem.States() {
		terminal := s == idem.StateSucceeded || s == idem.StateFailedFinal || s == idem.StateRejected
		inFlight := s == idem.StateReserved || s == idem.StateExecuting
		if s.Terminal() != terminal || s.InFlight() != inFlight || !s.Valid() {
			t.Errorf("%s: Terminal %v InFlight %v Valid %v", s, s.Terminal(), s.InFlight(), s.Valid())
		}
		for _, to := range idem.States() {
			if terminal && idem.CanTransition(s, to) {
				t.Errorf("terminal %s may move to %s", s, to)
			}
		}
	}
	if idem.State("BOGUS").Valid() || idem.State("").Valid() {
		t.Errorf("invalid states reported valid")
	}
}

func TestClaimDefaults(t *testing.T) {
	var c registry.Claim
	if c.LeaseOrDefault() != registry.DefaultLease || c.RetentionOrDefault() != registry.DefaultRetention {
		t.Errorf("zero claim: lease %v retention %v", c.LeaseOrDefault(), c.RetentionOrDefault())
	}
	c.Lease, c.Retention = -time.Second, -time.Hour
	if c.LeaseOrDefault() != registry.DefaultLease || c.RetentionOrDefault() != registry.DefaultRetention {
		t.Errorf("negative claim: lease %v retention %v", c.LeaseOrDefault(), c.RetentionOrDefault())
	}
	c.Lease, c.Retention = time.Second, time.Hour
	if c.LeaseOrDefault() != time.Second || c.RetentionOrDefault() != time.Hour {
		t.Errorf("set claim: lease %v retention %v", c.LeaseOrDefault(), c.RetentionOrDefault())
	}
	for lease, want := range map[time.Duration]time.Duration{0: registry.DefaultLease, -1: registry.DefaultLease, 1: 1} {
		if got := registry.LeaseOrDefault(lease); got != want {
			t.Errorf("LeaseOrDefault(%v) = %v, want %v", lease, got, want)
		}
	}
	if got := registry.MessageID("op_X", 3); got != "op_X/3" {
		t.Errorf("MessageID = %q", got)
	}
	for v, want := range map[registry.Verdict]string{registry.Execute: "execute", registry.Replay: "replay",
		registry.Conflict: "conflict", registry.InProgress: "in_progress", registry.Unknown: "unknown", 0: "invalid"} {
		if v.String() != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", int(v), v.String(), want)
		}
	}
}

func TestNewResponseKeepsOnlySnapshotFields(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", `Application/JSON; Charset="utf-8"`)
	h.Set("Location", "/payments/1")
	h.Set("ETag", `"v2"`)
	h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
	h.Set("Set-Cookie", "session=secret")
	h.Set("Traceparent", "00-abc-def-01")
	h.Set("Connection", "keep-alive")
	body := []byte(`{"id":1}`)
	r, err := idem.NewResponse(201, h, body, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := idem.Response{Status: 201, MediaType: "application/json; charset=utf-8", Location: "/payments/1", ETag: `"v2"`, Body: body}
	if r.Status != want.Status || r.MediaType != want.MediaType || r.Location != want.Location ||
		r.ETag != want.ETag || !bytes.Equal(r.Body, want.Body) {
		t.Errorf("NewResponse = %+v, want %+v", r, want)
	}
	body[0] = 'X'
	if r.Body[0] != '{' {
		t.Errorf("NewResponse did not copy the body")
	}
	d := r.Digest()
	if err := r.Verify(d[:]); err != nil {
		t.Errorf("Verify of its own digest: %v", err)
	}
	r.Body = append(r.Body, ' ')
	if err := r.Verify(d[:]); !errors.Is(err, idem.ErrDigestMismatch) {
		t.Errorf("Verify after a body change: %v, want ErrDigestMismatch", err)
	}
	if err := r.Verify(d[:31]); !errors.Is(err, idem.ErrDigestMismatch) {
		t.Errorf("Verify of a short digest: %v, want ErrDigestMismatch", err)
	}
}

// Proves threat:unstorable-answer (docs/threat-model.md).
func TestNewResponseCap(t *testing.T) {
	for _, tc := range []struct {
		size, max int
		ok        bool
	}{
		{idem.DefaultMaxResponseBody, 0, true},
		{idem.DefaultMaxResponseBody + 1, 0, false},
		{idem.DefaultMaxResponseBody + 1, -1, false},
		{10, 10, true},
		{11, 10, false},
		{0, 0, true},
	} {
		_, err := idem.NewResponse(200, http.Header{}, []byte(strings.Repeat("a", tc.size)), tc.max)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, idem.ErrResponseTooLarge) {
			t.Errorf("body %d, cap %d: err %v, want ok=%v", tc.size, tc.max, err, tc.ok)
		}
	}
}
