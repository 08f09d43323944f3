package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
)

// buildIdem builds this command (without -race: the instances are load,
// not the code under test here) into a temporary directory.
func buildIdem(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "idem")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// gateReport is the part of "idem gate --json" the tests read.
type gateReport struct {
	Passed           bool             `json:"passed"`
	DB               string           `json:"db"`
	Requests         int64            `json:"requests"`
	Keys             int              `json:"keys"`
	Crashes          int              `json:"crashes"`
	DuplicateEffects int              `json:"duplicate_effects"`
	FalseConflicts   int              `json:"false_conflicts"`
	Consistency      float64          `json:"replay_digest_consistency"`
	ReservationP99   float64          `json:"reservation_p99_ms"`
	Throughput       float64          `json:"throughput_rps"`
	OneTransaction   bool             `json:"one_transaction"`
	ServeFlags       []string         `json:"serve_flags"`
	Resends          map[string]int64 `json:"resends"`
	Problems         []string         `json:"problems"` // printed with a failed report
	Gates            []struct {
		Name   string `json:"name"`
		Passed bool   `json:"passed"`
	} `json:"gates"`
}

func runGateJSON(t *testing.T, args ...string) (int, gateReport, string) {
	t.Helper()
	code, stdout, stderr := runCmd(t, "", append([]string{"gate", "--json"}, args...)...)
	var r gateReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("exit %d, stdout %q: %v\nstderr:\n%s", code, stdout, err, stderr)
	}
	return code, r, stderr
}

// TestGateCommand runs small gates against real "idem serve" instances:
// on SQLite with the HTML report, on PostgreSQL and on MariaDB with one
// instance killed midway, on MariaDB in the one-transaction style, and once with an impossible latency budget, which must fail
// with exit status 1. The reservation budget is relaxed in the passing
// runs so that the outcome does not depend on this machine's load; the
// 100,000-request run with the default budget is in docs/gate.md.
func TestGateCommand(t *testing.T) {
	bin := buildIdem(t)
	common := []string{"--bin", bin, "--requests", "300", "--latency-budget", "1m", "--seed", "42"}

	t.Run("sqlite", func(t *testing.T) {
		html := filepath.Join(t.TempDir(), "report.html")
		dsn := "sqlite:" + filepath.Join(t.TempDir(), "gate.db")
		code, r, stderr := runGateJSON(t, append(common, "--db", dsn, "--html", html)...)
		if code != exitOK || !r.Passed || r.DB != "sqlite" || r.Keys != 30 || r.Requests < 300 {
			t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
		}
		if !strings.Contains(stderr, "planned requests sent") && !strings.Contains(stderr, "load done") {
			t.Errorf("no progress on stderr:\n%s", stderr)
		}
		page, err := os.ReadFile(html)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"PASSED", "<svg", "duplicate_effects", "payment rows"} {
			if !strings.Contains(string(page), want) {
				t.Errorf("HTML report lacks %q", want)
			}
		}
		for _, external := range []string{"<script", "<link", "src=", "http://", "https://"} {
			if strings.Contains(string(page), external) {
				t.Errorf("HTML report is not self-contained: has %q", external)
			}
		}

		// The same run with a budget nothing can meet fails the
		// reservation gate only, and exits 1.
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "gate2.db")
		code, r, stderr = runGateJSON(t, "--bin", bin, "--requests", "100", "--db", dsn, "--latency-budget", "1us")
		if code != exitRefused || r.Passed {
			t.Fatalf("impossible budget: exit %d, passed %v\nstderr:\n%s", code, r.Passed, stderr)
		}
		for _, g := range r.Gates {
			if g.Passed == (g.Name == "reservation_budget_ratio") {
				t.Errorf("gate %s passed: %v", g.Name, g.Passed)
			}
		}
	})

	// The one-transaction style, idem serve's default: the same small
	// gate on SQLite, with no Prefer: wait, so a two-phase instance would
	// answer concurrent retries 409 IN_PROGRESS and the gate would
	// re-send them; a one-transaction one has nothing in flight and
	// never does.
	t.Run("sqlite-one-transaction", func(t *testing.T) {
		dsn := "sqlite:" + filepath.Join(t.TempDir(), "gate.db")
		code, r, stderr := runGateJSON(t, "--bin", bin, "--requests", "100", "--latency-budget", "1m", "--seed", "42",
			"--db", dsn, "--wait", "-1s")
		if code != exitOK || !r.Passed || r.DB != "sqlite" || !r.OneTransaction || r.DuplicateEffects != 0 || r.Consistency != 1 {
			t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
		}
		if slices.Contains(r.ServeFlags, "--two-phase") || slices.Contains(r.ServeFlags, dsn) {
			t.Errorf("serve_flags %q; want no --two-phase, and the DSN left out", r.ServeFlags)
		}
		if n := r.Resends["IN_PROGRESS"]; n != 0 {
			t.Errorf("%d re-sends after 409 IN_PROGRESS from one-transaction instances; want none (resends %v)", n, r.Resends)
		}
	})

	// MySQL/MariaDB: two instances on one database, the two-phase style
	// with one instance killed midway, then the one-transaction style.
	t.Run("mysql-crash", func(t *testing.T) {
		dsn := mytest.URL(t)
		code, r, stderr := runGateJSON(t, append(common, "--db", dsn, "--two-phase", "--crash", "--lease", "2s", "--recover-interval", "200ms")...)
		if code != exitOK || !r.Passed || r.DB != "mysql" || r.Crashes != 1 || r.DuplicateEffects != 0 || r.Consistency != 1 || r.OneTransaction {
			t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
		}
	})
	t.Run("mysql-one-transaction", func(t *testing.T) {
		dsn := mytest.URL(t)
		code, r, stderr := runGateJSON(t, append(common, "--db", dsn)...)
		if code != exitOK || !r.Passed || r.DB != "mysql" || !r.OneTransaction || r.DuplicateEffects != 0 || r.Consistency != 1 {
			t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
		}
	})

	t.Run("postgres-crash", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		code, r, stderr := runGateJSON(t, append(common, "--db", dsn, "--two-phase", "--crash", "--lease", "2s", "--recover-interval", "200ms")...)
		if code != exitOK || !r.Passed || r.DB != "postgres" || r.Crashes != 1 || r.DuplicateEffects != 0 || r.Consistency != 1 ||
			r.OneTransaction || !slices.Contains(r.ServeFlags, "--two-phase") {
			t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
		}
		if !strings.Contains(stderr, "killing instance 0 with SIGKILL") || !strings.Contains(stderr, "instance 0 restarted") {
			t.Errorf("no crash in the progress:\n%s", stderr)
		}
	})
}

func TestGateUsage(t *testing.T) {
	if code, _, _ := runCmd(t, "", "gate"); code != exitUsage {
		t.Errorf("without --db: exit %d, want %d", code, exitUsage)
	}
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--crash", "--instances", "1", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "at least 2 instances") {
		t.Errorf("crash with one instance: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--workload", "refunds", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "unknown workload") {
		t.Errorf("unknown workload: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--retention", "2s", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "needs the transfers workload") {
		t.Errorf("retention with payments: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--workload", "transfers", "--retention", "2s", "--outage", "2s", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "must be longer than the retention") {
		t.Errorf("outage not longer than the retention: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCmd(t, "", "gate", "--db", "mariadb://x"); code != exitRefused {
		t.Errorf("unknown database: exit %d, want %d", code, exitRefused)
	}
}
