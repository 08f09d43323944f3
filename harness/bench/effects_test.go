package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// tinyEffects is an effect run short enough for tests.
func tinyEffects(dsn string) Config {
	return Config{DSN: dsn, Clients: []int{2, 3}, Latencies: []time.Duration{0, 2 * time.Millisecond},
		Duration: 120 * time.Millisecond, Warmup: 20 * time.Millisecond, Rounds: 2}
}

// TestRunEffectsPostgres: an effect run on PostgreSQL reports every
// latency and client count with the three variants, and its counts agree:
// the providers executed exactly one transfer per request answered 201
// (none paid twice), the floor table holds one settled row per floor
// request, the floor writes exactly 2 transactions per transfer and plain
// none, transfers in the one-transaction style the floor's 2 (allowing
// the rollout's periodic verdict flushes), in the two-phase style at
// least 3, every request took at least the provider's latency, and the
// CPU per transfer of PostgreSQL (which writes for the floor and for
// transfers) and of this process was measured. It is not parallel: the
// commit counts are the cluster's, so no other test may write meanwhile.
func TestRunEffectsPostgres(t *testing.T) {
	rep := runEffectsAndCheck(t, tinyEffects(pgtest.DSN(t)), "postgres")
	if !rep.DBCPUMeasured {
		t.Fatal("PostgreSQL's CPU not measured: the test cluster runs on this machine")
	}
	for _, r := range rep.Results {
		if r.Floor.DBCPUMicros <= 0 || r.Transfers.DBCPUMicros <= 0 || r.TransfersTwoPhase.DBCPUMicros <= 0 {
			t.Errorf("latency %vms, %d clients: PostgreSQL CPU µs per transfer floor %v, transfers %v, two-phase %v; want > 0",
				r.LatencyMs, r.Clients, r.Floor.DBCPUMicros, r.Transfers.DBCPUMicros, r.TransfersTwoPhase.DBCPUMicros)
		}
		if r.Plain.CommitsPerOp == nil || r.Floor.CommitsPerOp == nil || r.Transfers.CommitsPerOp == nil ||
			r.Floor.WALBytesPerOp == nil || r.Transfers.WALBytesPerOp == nil {
			t.Fatalf("latency %vms, %d clients: commit or WAL figures missing", r.LatencyMs, r.Clients)
		}
		if r.TransfersTwoPhase.CommitsPerOp == nil {
			t.Fatalf("latency %vms, %d clients: two-phase commit figures missing", r.LatencyMs, r.Clients)
		}
		if *r.Plain.CommitsPerOp != 0 || *r.Floor.CommitsPerOp != 2 || *r.Transfers.CommitsPerOp < 2 || *r.Transfers.CommitsPerOp > 2.2 ||
			*r.TransfersTwoPhase.CommitsPerOp < 3 {
			t.Errorf("latency %vms, %d clients: commits per transfer plain %v, floor %v, transfers %v, two-phase %v; want 0, 2, 2, ≥ 3",
				r.LatencyMs, r.Clients, *r.Plain.CommitsPerOp, *r.Floor.CommitsPerOp, *r.Transfers.CommitsPerOp, *r.TransfersTwoPhase.CommitsPerOp)
		}
		if *r.Floor.WALBytesPerOp <= 0 || *r.Transfers.WALBytesPerOp <= 0 {
			t.Errorf("latency %vms, %d clients: WAL per transfer floor %v, transfers %v", r.LatencyMs, r.Clients,
				*r.Floor.WALBytesPerOp, *r.Transfers.WALBytesPerOp)
		}
	}
}

// TestRunEffectsSQLite: the same on SQLite, where commits, WAL bytes and
// a database's CPU are not measured, and the file is removed afterwards.
func TestRunEffectsSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "effects.db")
	rep := runEffectsAndCheck(t, tinyEffects("sqlite:"+path), "sqlite")
	for _, r := range rep.Results {
		if r.Floor.CommitsPerOp != nil || r.Transfers.WALBytesPerOp != nil || r.Transfers.DBCPUMicros != 0 {
			t.Errorf("latency %vms, %d clients: commit, WAL or database CPU figures on SQLite", r.LatencyMs, r.Clients)
		}
	}
	if m := rep.Misses(); m != nil {
		t.Errorf("misses on SQLite: %v", m)
	}
	if matches, _ := filepath.Glob(path + "*"); len(matches) != 0 {
		t.Errorf("left behind: %v", matches)
	}
}

// runEffectsAndCheck runs cfg and checks the report's shape and counts
// through its JSON form and its table.
func runEffectsAndCheck(t *testing.T, cfg Config, kind string) *EffectsReport {
	t.Helper()
	rep, err := RunEffects(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got EffectsReport
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.DB != kind || got.Rounds != cfg.Rounds || got.Target != EffectTarget || got.TargetClients != EffectTargetClients {
		t.Errorf("report header %+v", got)
	}
	if len(got.Results) != len(cfg.Latencies)*len(cfg.Clients) {
		t.Fatalf("%d results, want %d", len(got.Results), len(cfg.Latencies)*len(cfg.Clients))
	}
	var timed int64
	for i, r := range got.Results {
		lat, clients := cfg.Latencies[i/len(cfg.Clients)], cfg.Clients[i%len(cfg.Clients)]
		if r.LatencyMs != float64(lat)/float64(time.Millisecond) || r.Clients != clients {
			t.Errorf("result %d is latency %vms, %d clients; want %v, %d", i, r.LatencyMs, r.Clients, lat, clients)
		}
		for name, f := range map[string]EffectFigures{"plain": r.Plain, "floor": r.Floor, "transfers": r.Transfers, "transfers 2p": r.TransfersTwoPhase} {
			if f.RPS <= 0 || len(f.RoundsRPS) != cfg.Rounds || f.RPS != median(f.RoundsRPS) || f.Timed <= 0 ||
				f.P50Ms > f.P99Ms || f.P50Ms < r.LatencyMs || f.ProcessCPUMicros <= 0 || f.MachineBusy <= 0 || f.MachineBusy > 1 {
				t.Errorf("latency %vms, %d clients, %s: %+v", r.LatencyMs, r.Clients, name, f)
			}
			timed += int64(f.Timed)
		}
		if r.TransfersFloorRatio != r.Transfers.RPS/r.Floor.RPS || r.TransfersPlainRatio != r.Transfers.RPS/r.Plain.RPS ||
			r.FloorPlainRatio != r.Floor.RPS/r.Plain.RPS || r.TwoPhaseFloorRatio != r.TransfersTwoPhase.RPS/r.Floor.RPS {
			t.Errorf("latency %vms, %d clients: ratios %+v", r.LatencyMs, r.Clients, r)
		}
	}
	var answered int64
	for _, v := range effectVariants {
		if got.Requests[v] <= 0 {
			t.Errorf("no %s requests counted: %v", v, got.Requests)
		}
		answered += got.Requests[v]
	}
	if got.Executed != answered || got.FloorRows != got.Requests[variantEffectFloor] || timed > answered {
		t.Errorf("provider executed %d, floor rows %d, timed %d; requests answered %v (sum %d)",
			got.Executed, got.FloorRows, timed, got.Requests, answered)
	}
	var table bytes.Buffer
	if err := got.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"idem bench --effects: " + kind, "transfers ÷ floor", "  floor  ", "  transfers  ", "  transfers 2p  ", "transfers 2p ÷ floor", "CPU proc"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	return &got
}
