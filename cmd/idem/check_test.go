package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// servePaymentsForCheck runs "idem serve" on SQLite with an --auth file
// of two tokens of one tenant: tok-a-Zr4kW9pQ2mX7vT1nB8yL (alice) and tok-b-Hd3sF6gJ0aK9wE2rU7iO (bob).
func servePaymentsForCheck(t *testing.T) *server {
	t.Helper()
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	err := os.WriteFile(auth, []byte(`{"tok-a-Zr4kW9pQ2mX7vT1nB8yL": {"tenant": "acme", "principal": "alice"},
		"tok-b-Hd3sF6gJ0aK9wE2rU7iO": {"tenant": "acme", "principal": "bob"}}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return startServe(t, "--db", "sqlite:"+filepath.Join(dir, "check.db"), "--auth", auth)
}

// checkArgs are the arguments of a full check of the served payments API.
func checkArgs(s *server, extra ...string) []string {
	return append([]string{"check", s.url + "/v1/payments",
		"--body", `{"amount":"1{{variant}}.00","currency":"EUR","payee":"acct_{{unique}}"}`,
		"--header", "Authorization: Bearer tok-a-Zr4kW9pQ2mX7vT1nB8yL",
		"--alt-header", "Authorization: Bearer tok-b-Hd3sF6gJ0aK9wE2rU7iO",
		"--count-url", "/v1/payments",
		"--concurrency", "10", "--load", "10", "--timeout", "2m"}, extra...)
}

var scenarioList = []string{"replay", "conflict", "concurrent", "in-flight", "scoping", "hygiene", "load", "key-entropy"}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	s := servePaymentsForCheck(t)
	htmlPath := filepath.Join(t.TempDir(), "check.html")
	code, stdout, stderr := runCmd(t, "", checkArgs(s, "--html", htmlPath)...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, name := range scenarioList {
		if !strings.Contains(stdout, "\n"+name+" ") || !strings.Contains(stderr, name+": pass") {
			t.Errorf("%s: no PASS row or progress line\nstdout:\n%s\nstderr:\n%s", name, stdout, stderr)
		}
	}
	// --html: the same verdicts as one self-contained page with the
	// charts of internal/chart.
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, name := range scenarioList {
		if !strings.Contains(html, `data-name="`+name+`"`) {
			t.Errorf("HTML report lacks scenario %s", name)
		}
	}
	if !strings.Contains(html, "PASSED") || strings.Count(html, "<svg") != 2 || !strings.Contains(html, `data-label="201`) {
		t.Errorf("HTML report lacks the verdict, its two charts or the 201 answers:\n%s", html)
	}
	for _, external := range []string{"<script", "<link", "src=", "href="} {
		if strings.Contains(html, external) {
			t.Errorf("HTML report is not self-contained: has %q", external)
		}
	}
	if strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "PASSED: 8 passed, 0 failed, 0 skipped in") ||
		!strings.Contains(stdout, "same status and body") {
		t.Errorf("table:\n%s", stdout)
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	s := servePaymentsForCheck(t)
	// Flags after the URL too; scoping skipped without --alt-header.
	args := checkArgs(s, "--json", "--id-field", "id")
	args = append(args[:6], args[8:]...) // drop --alt-header
	code, stdout, stderr := runCmd(t, "", args...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var rep struct {
		Target    string    `json:"target"`
		Passed    *bool     `json:"passed"`
		StartedAt time.Time `json:"started_at"`
		Duration  float64   `json:"duration_ms"`
		Counts    map[string]int
		Scenarios []struct {
			Name     string         `json:"name"`
			Property string         `json:"property"`
			Status   string         `json:"status"`
			Passed   *bool          `json:"passed"`
			Detail   string         `json:"detail"`
			Evidence []string       `json:"evidence"`
			Requests int            `json:"requests"`
			Duration *float64       `json:"duration_ms"`
			Statuses map[string]int `json:"statuses"`
			Load     *struct {
				Keys        int     `json:"keys"`
				Requests    int     `json:"requests"`
				Concurrency int     `json:"concurrency"`
				Throughput  float64 `json:"throughput_rps"`
				P50         float64 `json:"p50_ms"`
				P99         float64 `json:"p99_ms"`
				Max         float64 `json:"max_ms"`
				Duplicates  *int    `json:"duplicate_keys"`
				Unsettled   *int    `json:"unsettled_keys"`
			} `json:"load"`
		} `json:"scenarios"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || dec.More() {
		t.Fatalf("not one JSON report (%v):\n%s", err, stdout)
	}
	if rep.Passed == nil || !*rep.Passed || rep.Target != "POST "+s.url+"/v1/payments" || rep.Duration <= 0 || time.Since(rep.StartedAt) > time.Hour ||
		rep.Counts["passed"] != 7 || rep.Counts["skipped"] != 1 || rep.Counts["warnings"] != 0 || len(rep.Scenarios) != len(scenarioList) {
		t.Fatalf("report:\n%s", stdout)
	}
	for i, sc := range rep.Scenarios {
		want := "passed"
		if sc.Name == "scoping" {
			want = "skipped"
		}
		if sc.Name != scenarioList[i] || sc.Status != want || sc.Passed == nil || *sc.Passed != (want == "passed") ||
			sc.Property == "" || sc.Detail == "" || sc.Duration == nil {
			t.Errorf("scenario %d: %+v", i, sc)
		}
		if want == "passed" && (sc.Requests == 0 || len(sc.Statuses) == 0) {
			t.Errorf("%s: no requests or statuses: %+v", sc.Name, sc)
		}
	}
	if l := rep.Scenarios[6].Load; l == nil || l.Keys != 10 || l.Requests != 20 || l.Throughput <= 0 || l.P99 < l.P50 || l.Duplicates == nil || *l.Duplicates != 0 {
		t.Errorf("load figures: %+v", l)
	}
	if strings.Contains(stderr, "{") && strings.Contains(stderr, `"scenarios"`) {
		t.Errorf("report on stderr:\n%s", stderr)
	}
}

func TestCheckFails(t *testing.T) {
	t.Parallel()
	s := servePaymentsForCheck(t)
	// An alt credential the service does not know: scoping cannot be
	// judged, which is a failure, not a pass.
	args := checkArgs(s, "--only", "replay,scoping")
	for i, a := range args {
		if a == "Authorization: Bearer tok-b-Hd3sF6gJ0aK9wE2rU7iO" {
			args[i] = "Authorization: Bearer nobody"
		}
	}
	code, stdout, stderr := runCmd(t, "", args...)
	if code != exitRefused || !strings.Contains(stdout, "FAILED: 1 passed, 1 failed, 6 skipped (failed: scoping)") ||
		!strings.Contains(stdout, "second credential was refused with 401") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestCheckUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"check"},
		{"check", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b"},
		{"check", "127.0.0.1:1/no-scheme"},
		{"check", "--header", "no colon", "http://127.0.0.1:1/"},
		{"check", "--header", "Idempotency-Key: mine", "http://127.0.0.1:1/"},
		{"check", "--body", `{"a": {{unique}`, "http://127.0.0.1:1/"},
		{"check", "--concurrency", "1", "http://127.0.0.1:1/"},
		{"check", "--only", "replay,nope", "http://127.0.0.1:1/"},
		{"check", "--load", "-1", "http://127.0.0.1:1/"},
		{"check", "--nope", "http://127.0.0.1:1/"},
	} {
		code, stdout, stderr := runCmd(t, "", args...)
		if code != exitUsage || stdout != "" || stderr == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}
