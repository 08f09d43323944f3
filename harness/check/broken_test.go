package check

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// fakeTemplate is the body template the fake API tests send.
const fakeTemplate = `{"n":{{unique}},"ref":"ref_{{unique}}","amount":"1{{variant}}.00"}`

// fakeConfig is a full check of the fake API at srv.
func fakeConfig(srv *httptest.Server) Config {
	return Config{
		URL:       srv.URL + "/things",
		Body:      fakeTemplate,
		Header:    bearer("alice"),
		AltHeader: bearer("bob"),
		CountURL:  "/things",
		LoadKeys:  40,
	}
}

// TestBrokenServers runs the whole check against a fake API with each
// flaw: the check must fail exactly the scenarios the flaw breaks, say
// why, and pass every other one (none skipped).
// Proves threat:weak-keys-elsewhere (docs/threat-model.md).
func TestBrokenServers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flaw  flaw
		fails []string
		why   []string // in each failure's detail
		warns []string // scenarios that warn
		tweak func(*Config)
	}{
		{flaw: sound},
		{flaw: sound, tweak: func(c *Config) { c.IDField = "id"; c.CountURL = "" }},
		{flaw: noFingerprint, fails: []string{"conflict"}, why: []string{"changed payload replayed the first outcome"}},
		{flaw: fingerprintInScope, fails: []string{"conflict"}, why: []string{"changed payload accepted"}},
		{flaw: checkThenInsert, fails: []string{"concurrent", "in-flight", "load"},
			why: []string{"identical requests at once created", "sent while it was in flight created", "keys created more than one resource"}},
		{flaw: unstableReplay, fails: []string{"replay"}, why: []string{"changed the body"}},
		{flaw: unscoped, fails: []string{"scoping"}, why: []string{"got the first credential's outcome"}},
		{flaw: leakyReplay, fails: []string{"hygiene"}, why: []string{"repeats the first answer's Set-Cookie"}},
		{flaw: staleDate, fails: []string{"hygiene"}, why: []string{"is not later than the first answer's"}},
		{flaw: weakKeys, warns: []string{"key-entropy"}},
	} {
		name := string(c.flaw)
		if c.tweak != nil {
			name += "/id-field"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(newFakeAPI(c.flaw))
			defer srv.Close()
			cfg := fakeConfig(srv)
			if c.tweak != nil {
				c.tweak(&cfg)
			}
			var progress strings.Builder
			cfg.Progress = &progress
			rep, err := Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var table strings.Builder
			rep.WriteTable(&table)
			t.Logf("report:\n%s", table.String())
			if got := rep.Failed(); !slices.Equal(got, c.fails) {
				t.Fatalf("failed %q, want %q", got, c.fails)
			}
			if rep.Passed != (len(c.fails) == 0) {
				t.Errorf("Passed = %v", rep.Passed)
			}
			if got := rep.Warned(); !slices.Equal(got, c.warns) || rep.Counts.Warnings != len(c.warns) {
				t.Errorf("warned %q (count %d), want %q", got, rep.Counts.Warnings, c.warns)
			}
			for _, s := range rep.Scenarios {
				if s.Status == Skipped {
					t.Errorf("%s skipped: %s", s.Name, s.Detail)
				}
				if s.Requests == 0 {
					t.Errorf("%s sent no request", s.Name)
				}
			}
			for i, name := range c.fails {
				r, _ := rep.Result(name)
				if !strings.Contains(r.Detail, c.why[i]) || len(r.Evidence) == 0 {
					t.Errorf("%s: detail %q (want %q), evidence %q", name, r.Detail, c.why[i], r.Evidence)
				}
			}
			for _, s := range Scenarios() {
				if s.Profile == "" && !strings.Contains(progress.String(), s.Name+": ") {
					t.Errorf("no progress line for %s:\n%s", s.Name, progress.String())
				}
			}
		})
	}
}

// TestKeyEntropyWarning: an API that takes guessable keys gets a warning
// from key-entropy, with both keys as evidence, in the table and the
// counts, and the run still passes; one that refuses them passes it.
// Proves threat:weak-keys-elsewhere (docs/threat-model.md).
func TestKeyEntropyWarning(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flaw flaw
		want Status
		why  string
	}{
		{weakKeys, Warned, "low-entropy keys accepted"},
		{sound, Passed, "low-entropy keys refused (400 KEY_INVALID, 400 KEY_INVALID)"},
	} {
		srv := httptest.NewServer(newFakeAPI(c.flaw))
		defer srv.Close()
		cfg := fakeConfig(srv)
		cfg.Only = []string{"key-entropy"}
		rep, err := Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := rep.Result("key-entropy")
		var table strings.Builder
		rep.WriteTable(&table)
		if r.Status != c.want || !strings.Contains(r.Detail, c.why) || len(r.Evidence) != 2 || r.Requests != 2 || !rep.Passed {
			t.Errorf("%s: %+v, run passed %v\n%s", c.flaw, r, rep.Passed, table.String())
		}
		if c.want == Warned && (!strings.Contains(table.String(), "WARN") || !strings.Contains(table.String(), "1 warned (key-entropy)") ||
			rep.Counts != (Counts{Skipped: baseScenarios() - 1, Warnings: 1})) {
			t.Errorf("%s: table or counts do not show the warning: %+v\n%s", c.flaw, rep.Counts, table.String())
		}
	}
}
