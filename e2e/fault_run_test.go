package e2e

import (
	"flag"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/keygen"
)

// Flags and environment of the fault suite (docs/faults.md).
var (
	faultSeedFlag = flag.Uint64("fault.seed", 0, "base seed of the fault suite's randomness (0: $IDEM_FAULT_SEED, else the clock); every test logs it")
	faultLongFlag = flag.Bool("fault.long", false, "run the long form of the fault suite (more keys, rounds and seeds; also IDEM_FAULT_LONG=1)")
)

const (
	faultSeedEnv      = "IDEM_FAULT_SEED"
	faultLongEnv      = "IDEM_FAULT_LONG"
	faultArtifactsEnv = "IDEM_FAULT_ARTIFACTS" // where failing runs save their artifacts; default os.TempDir()
	faultKeepEnv      = "IDEM_FAULT_KEEP"      // "1": save artifacts of passing runs too
)

var baseSeed = sync.OnceValue(func() uint64 {
	if *faultSeedFlag != 0 {
		return *faultSeedFlag
	}
	if s := os.Getenv(faultSeedEnv); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n != 0 {
			return n
		}
	}
	return uint64(time.Now().UnixNano())
})

// long reports whether the long form runs.
func long() bool { return *faultLongFlag || os.Getenv(faultLongEnv) == "1" }

// pick returns short, or long in the long form.
func pick[T any](short, long_ T) T {
	if long() {
		return long_
	}
	return short
}

// faultRun is one fault scenario on one database: its seed and random
// source, the servers it started, and the recorded history of every
// exchange. When the test fails (or IDEM_FAULT_KEEP=1) its cleanup saves
// the artifacts — history as JSON lines, the database's rows, the
// servers' logs — to a directory it logs.
type faultRun struct {
	t   *testing.T
	dsn string // the database, as the test reads it
	// serverDSN, when set, is what the servers get instead of dsn (pool
	// settings, a proxy's address).
	serverDSN string
	seed      uint64
	rng       *rand.Rand // used by the test goroutine only
	hist      *recorder

	mu      sync.Mutex
	servers []*server
	prov    *server
	last    *snapshot // the last snapshot checked, saved with the artifacts
}

// newFault starts a scenario on dsn. Its seed derives from the base seed
// (-fault.seed, IDEM_FAULT_SEED or the clock) and the test's name, so a
// rerun with the logged base seed repeats every choice.
func newFault(t *testing.T, dsn string) *faultRun {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	seed := baseSeed() ^ h.Sum64()
	f := &faultRun{t: t, dsn: dsn, seed: seed, rng: rand.New(rand.NewPCG(seed, seed>>1|1)), hist: newRecorder()}
	t.Logf("fault seed %d (base seed %d; rerun with -fault.seed=%d)", seed, baseSeed(), baseSeed())
	t.Cleanup(f.saveArtifacts)
	return f
}

// key returns a fresh random Idempotency-Key with a readable prefix, one
// the service's strict key policy accepts: 22 random characters after
// the prefix, drawn from the run's seeded randomness (so a rerun with the
// seed sends the same keys), drawn again in the rare case the policy's
// heuristics refuse them.
func (f *faultRun) key(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for {
		b := make([]byte, 22)
		for i := range b {
			b[i] = alphabet[f.rng.IntN(len(alphabet))]
		}
		if k := prefix + "-" + string(b); keygen.Strict(k) {
			return k
		}
	}
}

// amount returns a random amount at scale 2 below the limit.
func (f *faultRun) amount() string {
	return strconv.Itoa(1+f.rng.IntN(9999)) + "." + strconv.Itoa(10+f.rng.IntN(90))
}

// serve starts "idem serve" on the run's database with extra flags and
// environment, named name in the history (rev is its --api-revision,
// "" for the default v1). clean says whether it must exit cleanly at the
// end (startServer) or may crash (startChild).
func (f *faultRun) serve(name string, env []string, clean bool, flags ...string) *server {
	f.t.Helper()
	rev := "v1"
	for i, a := range flags {
		if a == "--api-revision" && i+1 < len(flags) {
			rev = flags[i+1]
		}
	}
	dsn := f.dsn
	if f.serverDSN != "" {
		dsn = f.serverDSN
	}
	var s *server
	if clean {
		s = startServerEnv(f.t, env, dsn, flags...)
	} else {
		s = startChild(f.t, env, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn}, flags...)...)
	}
	s.name, s.rev = name, rev
	f.mu.Lock()
	f.servers = append(f.servers, s)
	f.mu.Unlock()
	return s
}

// provider starts "idem provider" and remembers it for the checks.
func (f *faultRun) provider() *server {
	f.t.Helper()
	p := startChild(f.t, nil, "provider", "--addr", "127.0.0.1:0")
	p.name = "provider"
	f.mu.Lock()
	f.prov = p
	f.servers = append(f.servers, p)
	f.mu.Unlock()
	return p
}
