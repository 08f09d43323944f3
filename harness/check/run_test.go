package check

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSkips: scenarios that cannot apply are skipped, never passed, and
// a run in which nothing failed still passes.
func TestSkips(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newFakeAPI(sound))
	defer srv.Close()
	cfg := fakeConfig(srv)
	cfg.Body = `{"n":{{unique}}}` // no {{variant}}
	cfg.AltHeader = nil
	cfg.Only = []string{"replay", "conflict", "scoping"}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || rep.Counts != (Counts{Passed: 1, Skipped: 7}) {
		t.Fatalf("%+v", rep)
	}
	for name, why := range map[string]string{"conflict": "no {{variant}}", "scoping": "--alt-header", "load": "not selected"} {
		if r, _ := rep.Result(name); r.Status != Skipped || r.Passed || !strings.Contains(r.Detail, why) || r.Requests != 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	cfg.Only = []string{"conflict"}
	if rep, err = Run(t.Context(), cfg); err != nil || rep.Passed {
		t.Errorf("a run with nothing but skips passed: %+v, %v", rep, err)
	}
}

// TestUnreachable: a target that refuses connections fails every
// scenario that applies, each saying it cannot judge.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/things"
	ln.Close()
	rep, err := Run(t.Context(), Config{URL: url, Body: fakeTemplate, AltHeader: bearer("b"), LoadKeys: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed || rep.Counts.Failed != baseScenarios() {
		t.Fatalf("%+v", rep.Counts)
	}
	for _, r := range rep.Scenarios {
		if !strings.Contains(r.Detail, "cannot judge") && !strings.Contains(r.Detail, "no answer accepted") &&
			!strings.Contains(r.Detail, "never accepted") {
			t.Errorf("%s: %q", r.Name, r.Detail)
		}
	}
}

// TestInterrupted: a cancelled run skips what it did not start and
// returns the context's error with the report.
func TestInterrupted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newFakeAPI(sound))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := Run(ctx, fakeConfig(srv))
	if err != context.Canceled || rep == nil || rep.Passed || rep.Counts.Skipped != baseScenarios() {
		t.Fatalf("%+v, %v", rep, err)
	}
}

func TestBodyDiff(t *testing.T) {
	t.Parallel()
	got := bodyDiff([]byte(`{"id":"a","at":"10:00:01"}`), []byte(`{"id":"a","at":"10:00:02"}`))
	if !strings.Contains(got, "differ from byte 23") || !strings.Contains(got, `10:00:01`) || !strings.Contains(got, `10:00:02`) {
		t.Errorf("%s", got)
	}
}

// baseScenarios is the number of scenarios a run without a profile
// checks.
func baseScenarios() int {
	n := 0
	for _, s := range Scenarios() {
		if s.Profile == "" {
			n++
		}
	}
	return n
}
