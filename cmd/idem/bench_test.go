package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/pgtest"
)

// tinyBench are flags for a run short enough for tests.
var tinyBench = []string{"--clients", "1,3", "--duration", "150ms", "--warmup", "20ms", "--rounds", "1", "--replay-keys", "12"}

func TestBenchSQLite(t *testing.T) {
	t.Parallel()
	testBenchJSON(t, "sqlite:"+filepath.Join(t.TempDir(), "b.db"), "sqlite")
	// The table, without progress.
	code, out, stderr := runCmd(t, "", append([]string{"bench", "--db", "sqlite:" + filepath.Join(t.TempDir(), "t.db"), "--quiet"}, tinyBench...)...)
	if code != exitOK || stderr != "" {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"idem bench: sqlite", "clients", "floor", "two-phase", "one-tx", "÷ plain", "÷ floor",
		"reserve p99", "accept p99", "WAL bytes per operation: measured on PostgreSQL only, not on sqlite.\n",
		"The targets are set for PostgreSQL; they do not apply to sqlite.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(l) > 100 {
			t.Errorf("table line wider than 100 columns: %q", l)
		}
	}
	if strings.Contains(out, " ok") || strings.Contains(out, "MISS") || strings.Contains(out, "Targets:") {
		t.Errorf("a SQLite table marks figures against the PostgreSQL targets:\n%s", out)
	}
}

func TestBenchPostgres(t *testing.T) {
	t.Parallel()
	testBenchJSON(t, pgtest.DSN(t), "postgres")
}

// testBenchJSON runs "idem bench --json --check" and checks the report
// and that the exit code follows the pass flags.
func testBenchJSON(t *testing.T, dsn, kind string) {
	code, out, stderr := runCmd(t, "", append([]string{"bench", "--db", dsn, "--json", "--check"}, tinyBench...)...)
	var rep struct {
		DB      string `json:"db"`
		Results []struct {
			Clients          int
			PlainRPS         float64 `json:"plain_rps"`
			IdemFirstRPS     float64 `json:"idem_first_rps"`
			IdemReplayRPS    float64 `json:"idem_replay_rps"`
			DBInsertRPS      float64 `json:"db_insert_rps"`
			FirstRatio       float64 `json:"first_ratio"`
			ReplayRatio      float64 `json:"replay_ratio"`
			ReservationP99Ms float64 `json:"reservation_p99_ms"`
			// The one-transaction style's figures.
			IdemFirstOneTxRPS    float64 `json:"idem_first_one_tx_rps"`
			FirstOneTxRatio      float64 `json:"first_one_tx_ratio"`
			OneTxAcceptanceP99Ms float64 `json:"one_tx_acceptance_p99_ms"`
			// The floor and the ratios to it, both styles.
			FloorRPS             float64 `json:"floor_rps"`
			FirstFloorRatio      float64 `json:"first_floor_ratio"`
			FirstOneTxFloorRatio float64 `json:"first_one_tx_floor_ratio"`
			// WAL bytes per operation by variant: PostgreSQL only.
			WALBytesPerOp map[string]float64 `json:"wal_bytes_per_op"`
			Pass          map[string]bool
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("code %d, output not JSON (%v):\n%s\nstderr:\n%s", code, err, out, stderr)
	}
	if rep.DB != kind || len(rep.Results) != 2 || rep.Results[0].Clients != 1 || rep.Results[1].Clients != 3 {
		t.Fatalf("report %s", out)
	}
	met := true
	for _, r := range rep.Results {
		for _, v := range []float64{r.PlainRPS, r.IdemFirstRPS, r.IdemReplayRPS, r.DBInsertRPS, r.ReservationP99Ms,
			r.IdemFirstOneTxRPS, r.OneTxAcceptanceP99Ms, r.FloorRPS, r.FirstFloorRatio, r.FirstOneTxFloorRatio} {
			if !(v > 0) {
				t.Errorf("non-positive figure in %+v", r)
			}
		}
		if math.Abs(r.FirstFloorRatio-r.IdemFirstRPS/r.FloorRPS) > 1e-9 || math.Abs(r.FirstOneTxFloorRatio-r.IdemFirstOneTxRPS/r.FloorRPS) > 1e-9 {
			t.Errorf("floor ratios are not idem ÷ floor: %+v", r)
		}
		// Every variant that writes wrote WAL; a replay only reads (0,
		// unless the other test's run on the cluster wrote meanwhile).
		if kind == "postgres" {
			for _, v := range []string{"plain", "floor", "idem_first", "idem_first_one_tx", "idem_replay", "db_insert"} {
				b, ok := r.WALBytesPerOp[v]
				if !ok || !(b > 0 || v == "idem_replay" && b == 0) {
					t.Errorf("WAL bytes per op of %s: %v (present %v) in %v", v, b, ok, r.WALBytesPerOp)
				}
			}
		} else if r.WALBytesPerOp != nil || strings.Contains(out, "wal_bytes_per_op") {
			t.Errorf("%s report with WAL figures: %s", kind, out)
		}
		if math.Abs(r.FirstRatio-r.IdemFirstRPS/r.PlainRPS) > 1e-9 || math.Abs(r.ReplayRatio-r.IdemReplayRPS/r.PlainRPS) > 1e-9 ||
			math.Abs(r.FirstOneTxRatio-r.IdemFirstOneTxRPS/r.PlainRPS) > 1e-9 {
			t.Errorf("ratios are not idem ÷ plain: %+v", r)
		}
		if len(r.Pass) != 5 {
			t.Errorf("pass %v", r.Pass)
		}
		p := r.Pass
		met = met && p["replay"] && (p["first"] && p["reservation"] || p["first_one_tx"] && p["acceptance_one_tx"])
	}
	// --check: exit 1 exactly when a target was missed, and say which.
	if want := map[bool]int{true: exitOK, false: exitRefused}[met]; code != want {
		t.Errorf("exit code %d with targets met = %v; stderr:\n%s", code, met, stderr)
	}
	if !met && !strings.Contains(stderr, "targets missed:") {
		t.Errorf("stderr does not list the misses:\n%s", stderr)
	}
	if !strings.Contains(stderr, "round 1/1  clients 3") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
}

func TestBenchUsage(t *testing.T) {
	t.Parallel()
	existing := filepath.Join(t.TempDir(), "x.db")
	if code, _, _ := runCmd(t, "", "migrate", "--db", "sqlite:"+existing); code != exitOK {
		t.Fatal("migrate failed")
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"bench"}, exitUsage},
		{[]string{"bench", "--db", "sqlite:y.db", "--clients", "1,x"}, exitUsage},
		{[]string{"bench", "--db", "sqlite:y.db", "--clients", "0"}, exitUsage},
		{[]string{"bench", "--db", "sqlite:y.db", "--duration", "0s"}, exitUsage},
		{[]string{"bench", "--db", "sqlite:y.db", "extra"}, exitUsage},
		{[]string{"bench", "--effects", "--db", "sqlite:y.db", "--latencies", "-1ms"}, exitUsage},
		{[]string{"bench", "--effects", "--db", "sqlite:y.db", "--latencies", "1ms,x"}, exitUsage},
		{[]string{"bench", "--db", "sqlite:" + existing}, exitRefused},
		{[]string{"bench", "--db", "mysql://u:secret@h/db"}, exitRefused},
	} {
		code, _, stderr := runCmd(t, "", c.args...)
		if code != c.want || strings.Contains(stderr, "secret") {
			t.Errorf("%v: code %d, want %d; stderr %q", c.args, code, c.want, stderr)
		}
	}
}

// TestBenchEffectsSQLite: "idem bench --effects" prints the effect table
// (the three variants at each latency and client count, transfers ÷
// floor), and its JSON holds one result per latency and client count.
func TestBenchEffectsSQLite(t *testing.T) {
	t.Parallel()
	args := []string{"bench", "--effects", "--quiet", "--latencies", "0s,1ms", "--clients", "2",
		"--duration", "100ms", "--warmup", "20ms", "--rounds", "1"}
	code, out, stderr := runCmd(t, "", append(args, "--db", "sqlite:"+filepath.Join(t.TempDir(), "e.db"))...)
	if code != exitOK || stderr != "" {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"idem bench --effects: sqlite", "transfers ÷ floor", "  plain  ", "  floor  ", "  transfers  ", "  1ms  "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = runCmd(t, "", append(args, "--json", "--db", "sqlite:"+filepath.Join(t.TempDir(), "j.db"))...)
	var rep struct {
		DB      string
		Results []struct {
			LatencyMs float64 `json:"latency_ms"`
			Clients   int
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.DB != "sqlite" || len(rep.Results) != 2 ||
		rep.Results[0].LatencyMs != 0 || rep.Results[1].LatencyMs != 1 || rep.Results[1].Clients != 2 {
		t.Errorf("--json: code %d, stderr %q, report %+v:\n%s", code, stderr, rep, out)
	}
}

// TestBenchTail: "idem bench --tail --json" reports the closed-loop cells
// of both styles and the open-loop cells at the rates asked, each with its
// Little's-law account; --effects refuses --pin and --tail, and a bad
// rate is a usage error.
func TestBenchTail(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCmd(t, "", "bench", "--db", pgtest.DSN(t), "--tail", "--json", "--quiet", "--clients", "2",
		"--rates", "50%,40", "--outstanding", "8", "--duration", "150ms", "--warmup", "20ms", "--rounds", "1")
	var rep struct {
		Outstanding int `json:"outstanding"`
		Cells       []struct {
			Style, Loop string
			Clients     int
			RatePerS    float64 `json:"rate_per_s"`
			Acceptances int
			Queueing    struct {
				Lambda float64 `json:"lambda_per_s"`
				DBCPU  float64 `json:"db_cpu_ms"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || stderr != "" {
		t.Fatalf("code %d, stderr %q, output (%v):\n%s", code, stderr, err, out)
	}
	if rep.Outstanding != 8 || len(rep.Cells) != 5 || rep.Cells[0].Style != "plain" || rep.Cells[1].Clients != 2 ||
		rep.Cells[2].Style != "two-phase" || rep.Cells[4].Loop != "open" || rep.Cells[4].RatePerS != 40 || rep.Cells[4].Acceptances == 0 ||
		rep.Cells[1].Queueing.Lambda <= 0 || rep.Cells[1].Queueing.DBCPU <= 0 {
		t.Fatalf("report:\n%s", out)
	}
	for _, args := range [][]string{{"--effects", "--pin", "auto"}, {"--effects", "--tail"}, {"--tail", "--rates", "0%"}, {"--tail", "--outstanding", "0"}} {
		code, _, stderr := runCmd(t, "", append([]string{"bench", "--db", "sqlite:/nonexistent/x.db"}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "idem bench:") {
			t.Errorf("%q: code %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
}
