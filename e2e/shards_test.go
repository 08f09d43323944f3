package e2e

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/harness/gate"
	"github.com/idemkit/idem/internal/pgtest"
)

// shardsReportEnv, when set, names a file TestGateShards writes its
// report to (JSON), for docs/gate.md.
const shardsReportEnv = "IDEM_SHARDS_REPORT"

// TestGateShards is the gate across three PostgreSQL clusters: the
// payments load of the gate through two "idem serve --shard …"
// instances (one killed with SIGKILL midway and restarted), six
// principals in three tenants spread by the shard map — tenant-1 to
// shard b, tenant-2 to c, tenant-0 to the default a. It must PASS with
// every shard's own verification (acknowledged lost 0, duplicate
// effects 0, replay digest consistency 1 per shard) and no record or
// payment of a tenant on another tenant's shard. threat:shard-misroute
func TestGateShards(t *testing.T) {
	t.Parallel()
	shards := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		dsn, err := pgtest.NewServer(t).DSN("shard_" + name)
		if err != nil {
			t.Fatal(err)
		}
		shards[name] = dsn
	}
	start := time.Now()
	rep, err := gate.Run(t.Context(), gate.Config{
		Shards: shards, ShardDefault: "a", ShardMap: map[string]string{"tenant-1": "b", "tenant-2": "c"},
		Tenants: 3, Principals: 6,
		Bin: idemBin, Instances: 2, Requests: 600, Crash: true, Resend: true,
		ConflictRate: gate.DefaultConflictRate, RefusalRate: gate.DefaultRefusalRate,
		Concurrency: 2 * gate.DefaultRetries,
		// Three clusters, two instances and the race detector on two
		// cores: the latency gate would judge the machine.
		LatencyBudget: time.Hour,
		Progress:      testWriter{t},
	})
	if err != nil {
		t.Fatalf("the gate could not run: %v", err)
	}
	for _, s := range rep.Shards {
		t.Logf("shard %s %v: keys %d, operations %d, answered %d, consistency %.3f, acknowledged lost %d, re-executed %d, duplicate payments %d, duplicate outbox %d, misplaced %d",
			s.Name, s.Tenants, s.Keys, s.Operations, s.AnsweredKeys, s.ReplayDigestConsistency, s.AcknowledgedLost, s.ReExecuted, s.DuplicatePayments, s.DuplicateOutbox, s.Misplaced)
	}
	t.Logf("gate: passed %v, %d requests in %.1fs (whole test %.1fs), duplicate effects %d, acknowledged lost %d, crashes %d",
		rep.Passed, rep.Requests, rep.LoadSeconds, time.Since(start).Seconds(), rep.DuplicateEffects, rep.AcknowledgedLost, rep.Crashes)
	if path := os.Getenv(shardsReportEnv); path != "" {
		if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
			os.WriteFile(path, b, 0o644)
		}
	}
	if len(rep.Shards) != 3 {
		t.Fatalf("%d shard reports, want 3", len(rep.Shards))
	}
	for _, s := range rep.Shards {
		if s.Keys == 0 || s.Operations == 0 {
			t.Errorf("shard %s got no keys (%d) or operations (%d): the map did not spread the tenants", s.Name, s.Keys, s.Operations)
		}
	}
	if !rep.Passed {
		for _, g := range rep.Gates {
			if !g.Passed {
				t.Errorf("gate %s = %v, want %s", g.Name, g.Value, g.Limit)
			}
		}
		t.Fatalf("the sharded gate FAILED: %q", rep.Problems)
	}
}

// TestGateShardMoves is the gate's tenant-move phase: the payments load
// through two "idem serve --shard …" instances over three PostgreSQL
// databases whose map is the directory table of the default shard, and
// midway through it "idem shard move" moves tenant-1 from b to c —
// killed with SIGKILL after its copy and resumed — and tenant-3 from the
// default a to b, while the instances go on serving the others. After the load every
// answered key is sent once more. It must PASS: every move done, every
// key judged on its tenant's shard after the moves (acknowledged lost 0,
// duplicate effects 0, replay digest consistency 1 per shard: the old
// keys replay from the new shard unchanged), and the old shards' fenced
// copies what the new shards hold. threat:tenant-move-interrupted
func TestGateShardMoves(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t)
	shards := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		dsn, err := srv.DSN("move_" + name)
		if err != nil {
			t.Fatal(err)
		}
		shards[name] = dsn
	}
	rep, err := gate.Run(t.Context(), gate.Config{
		Shards: shards, ShardDefault: "a", ShardMap: map[string]string{"tenant-1": "b", "tenant-2": "c"},
		Moves:     []gate.TenantMove{{Tenant: "tenant-1", To: "c"}, {Tenant: "tenant-3", To: "b"}},
		MoveCrash: true,
		Tenants:   4, Principals: 8,
		Bin: idemBin, Instances: 2, Requests: 8000, Resend: true,
		ConflictRate: gate.DefaultConflictRate, RefusalRate: gate.DefaultRefusalRate,
		Concurrency:   2 * gate.DefaultRetries,
		LatencyBudget: time.Hour, // a move drains a tenant for seconds: the latency gate would judge the move
		Progress:      testWriter{t},
	})
	if err != nil {
		t.Fatalf("the gate could not run: %v", err)
	}
	for _, m := range rep.Moves {
		t.Logf("move %s %s → %s: done %v in %.1fs, crashed %v, stale copies %d", m.Tenant, m.From, m.To, m.Done, m.Seconds, m.Crashed, m.StaleCopies)
	}
	for _, s := range rep.Shards {
		t.Logf("shard %s %v: keys %d, operations %d, consistency %.3f, acknowledged lost %d, re-executed %d, duplicate payments %d, misplaced %d",
			s.Name, s.Tenants, s.Keys, s.Operations, s.ReplayDigestConsistency, s.AcknowledgedLost, s.ReExecuted, s.DuplicatePayments, s.Misplaced)
	}
	if len(rep.Moves) != 2 || !rep.Moves[0].Crashed {
		t.Fatalf("moves %+v, want two, the first crashed once", rep.Moves)
	}
	want := map[string][]string{"a": {"tenant-0"}, "b": {"tenant-3"}, "c": {"tenant-1", "tenant-2"}}
	for _, s := range rep.Shards {
		if len(s.Tenants) != len(want[s.Name]) {
			t.Errorf("shard %s judged with tenants %v after the moves, want %v", s.Name, s.Tenants, want[s.Name])
		}
	}
	if !rep.Passed {
		for _, g := range rep.Gates {
			if !g.Passed {
				t.Errorf("gate %s = %v, want %s", g.Name, g.Value, g.Limit)
			}
		}
		t.Fatalf("the gate with tenant moves FAILED: %q", rep.Problems)
	}
}
