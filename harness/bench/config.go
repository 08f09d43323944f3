package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// Defaults for Config fields left at zero.
const (
	DefaultDuration   = 3 * time.Second
	DefaultWarmup     = time.Second
	DefaultRounds     = 3
	DefaultReplayKeys = 1000
)

// DefaultClients are the client counts of a run when Config.Clients is
// empty.
var DefaultClients = []int{1, 16, 64}

// Config configures a run. Only DSN is required.
type Config struct {
	// DSN names the database: "postgres://…", "mysql://…" or
	// "sqlite:PATH". On PostgreSQL the run creates a new schema and works
	// only in it (the DSN's search_path is replaced); on MySQL/MariaDB a
	// new database (the DSN's own is only connected to, to create it).
	// Pool settings such as pool_max_conns apply to every variant alike.
	// On SQLite PATH must not exist yet: the run creates it.
	DSN string
	// Clients are the numbers of concurrent clients to measure at, each
	// positive; empty means DefaultClients.
	Clients []int
	// Duration is how long each cell is timed, per round; 0 means
	// DefaultDuration.
	Duration time.Duration
	// Warmup is how long each cell runs untimed just before it is timed;
	// 0 means DefaultWarmup, negative means none.
	Warmup time.Duration
	// Rounds is how many times every cell is timed; the report holds the
	// medians. 0 means DefaultRounds.
	Rounds int
	// ReplayKeys is how many operations are executed before timing starts
	// for the replay variant to repeat; 0 means DefaultReplayKeys.
	ReplayKeys int
	// Latencies are the provider latencies RunEffects measures at, each
	// ≥ 0; empty means DefaultLatencies. Run does not use them.
	Latencies []time.Duration
	// Rates are the open-loop rates RunTail measures the default style
	// at; empty means DefaultRates. Run does not use them.
	Rates []Rate
	// Outstanding bounds the requests in flight of an open-loop cell
	// (RunTail); 0 means DefaultOutstanding.
	Outstanding int
	// Pin, if not "", pins the bench process and PostgreSQL to separate
	// CPUs for the run with taskset: "auto" or "bench=LIST,db=LIST" (see
	// parsePin). PostgreSQL only, on this machine; Run and RunTail honour
	// it.
	Pin string
	// Keep leaves the run's schema or file in place instead of dropping it.
	Keep bool
	// Progress, if set, receives one line per timed cell as the run goes.
	Progress io.Writer
}

// withDefaults returns c with defaults applied, or an error if it is
// invalid.
func (c Config) withDefaults() (Config, error) {
	if idemstore.Kind(c.DSN) == "" {
		return c, errors.New("bench: the DSN must be postgres://…, mysql://… or sqlite:PATH")
	}
	if len(c.Clients) == 0 {
		c.Clients = DefaultClients
	}
	c.Clients = slices.Clone(c.Clients)
	c.Latencies = slices.Clone(c.Latencies)
	c.Rates = slices.Clone(c.Rates)
	for _, n := range c.Clients {
		if n <= 0 {
			return c, fmt.Errorf("bench: client count %d is not positive", n)
		}
	}
	if c.Duration < 0 || c.Rounds < 0 || c.ReplayKeys < 0 {
		return c, errors.New("bench: negative duration, rounds or replay keys")
	}
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	switch {
	case c.Warmup == 0:
		c.Warmup = DefaultWarmup
	case c.Warmup < 0:
		c.Warmup = 0
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.ReplayKeys = cmp.Or(c.ReplayKeys, DefaultReplayKeys)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c, nil
}
