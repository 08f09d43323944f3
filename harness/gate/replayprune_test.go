package gate

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestGateReplayPrune runs the replay-prune phase on SQLite and on
// PostgreSQL, two "idem serve" instances each with the replay cache on
// and pruning every 200 ms: the replays of every key are served — many
// from the cache — until its record is retired, and after that only 409
// KEY_RETIRED with its operation ID, from both instances; no replay is
// served to a request sent after the retirement.
// threat:replay-cache-after-retirement
func TestGateReplayPrune(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "idem")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "gate.db")
			if kind == "postgres" {
				dsn = pgtest.DSN(t)
			}
			var progress strings.Builder
			r, err := RunReplayPrune(context.Background(), ReplayPruneConfig{
				DSN: dsn, Bin: bin, Instances: 2, Keys: 30, Clients: 6, Retention: 3 * time.Second, Seed: 7, Progress: &progress,
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, progress.String())
			}
			t.Logf("%+v\n%s", *r, progress.String())
			if !r.Pass || r.Replays == 0 || r.CacheHits == 0 || r.Retired < int64(r.Keys) {
				t.Fatalf("the phase failed: %+v", *r)
			}
		})
	}
}
