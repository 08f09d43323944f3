// Package maintenance runs, with one call, everything that keeps an idem
// registry healthy while a service serves requests:
//
//   - the recovery worker (package recovery): operations whose owner
//     crashed after an effect outside the database began are taken over
//     and marked UNKNOWN, and UNKNOWN operations are settled on evidence
//     (a lookup by the downstream key, a re-send with the same key) with
//     backoff — the client never has to retry for that;
//   - scheduled pruning (registry.PruneAll): records past their retention
//     become tombstones, expired tombstones are deleted;
//   - the outbox relay (package outbox), when one is configured.
//
// A service starts one Runner next to its HTTP server:
//
//	r := &maintenance.Runner{Store: store, Effects: effects}
//	go r.Run(ctx) // until ctx ends
//
// Any number of Runners, in any number of processes, may run against one
// registry: takeovers, settlements, prunes and outbox claims are
// compare-and-sets or exclusive claims, so each piece of work is done
// once.
package maintenance

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// DefaultPruneInterval is Runner.PruneEvery when it is 0.
const DefaultPruneInterval = time.Minute

// Runner runs the maintenance loops of one registry. The zero values of
// its fields are the documented defaults; Store is required. Fields must
// not change once Run has been called.
type Runner struct {
	// Store is the registry. Required.
	Store registry.Store
	// Effects holds, by operation name, the effects of the operations
	// whose UNKNOWN outcomes the runner settles (usually the same
	// *effect.Operation values the middleware's operations declare). nil:
	// UNKNOWN operations wait for an operator.
	Effects effect.Set
	// RecoverEvery is the interval of the recovery worker; 0 means
	// recovery.DefaultInterval (5 s), negative turns it off.
	RecoverEvery time.Duration
	// Lease is the lease of a takeover; 0 means registry.DefaultLease.
	Lease time.Duration
	// PruneEvery is the interval of scheduled pruning; 0 means
	// DefaultPruneInterval (1 min), negative turns it off.
	PruneEvery time.Duration
	// PruneBatch is the number of records one prune transaction handles;
	// 0 means registry.DefaultPruneBatch.
	PruneBatch int
	// Relay, if set, delivers the outbox (its own fields say how); nil
	// leaves the outbox to another process.
	Relay *outbox.Relay
	// Metrics, if set, records the worker's settlements
	// (recovery.NewMetrics).
	Metrics *recovery.Metrics
	// Logger receives what each loop did and its errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// Name names the runner in the prune runs it records
	// (registry.PruneLog, the console's status page); "" means
	// "maintenance on HOST pid N".
	Name string
}

// Run runs every loop that is on until ctx ends, then waits for them to
// return and returns nil. Each loop starts right away, logs what it did
// and its errors, and carries on after errors: maintenance is best-effort
// plumbing whose correctness rests on the registry's compare-and-sets.
// Safe to call once per Runner.
func (r *Runner) Run(ctx context.Context) error {
	log := cmp.Or(r.Logger, slog.Default())
	var wg sync.WaitGroup
	if r.RecoverEvery >= 0 {
		w := &recovery.Worker{Store: r.Store, Effects: r.Effects, Lease: r.Lease, Metrics: r.Metrics, Logger: log}
		wg.Go(func() { w.Run(ctx, r.RecoverEvery) })
	} else {
		log.Info("the recovery worker is off")
	}
	if r.PruneEvery >= 0 {
		wg.Go(func() { r.prune(ctx, log) })
	} else {
		log.Info("scheduled pruning is off")
	}
	if r.Relay != nil {
		wg.Go(func() { r.Relay.Run(ctx) }) //nolint:errcheck // Run returns nil
	}
	wg.Wait()
	return nil
}

// prune runs registry.PruneAll right away and then every PruneEvery,
// records each pass (registry.PruneAllRecorded), and logs "pruned
// retired=N deleted=M" when it did something and the error when it failed.
func (r *Runner) prune(ctx context.Context, log *slog.Logger) {
	interval := cmp.Or(r.PruneEvery, DefaultPruneInterval)
	name := r.Name
	if name == "" {
		host, _ := os.Hostname()
		name = fmt.Sprintf("maintenance on %s pid %d", cmp.Or(host, "?"), os.Getpid())
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		res, err := registry.PruneAllRecorded(ctx, r.Store, cmp.Or(r.PruneBatch, registry.DefaultPruneBatch), name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Error("prune failed; retrying at the next interval", "err", err,
				"retired", res.Retired, "deleted", res.Deleted, "interval", interval)
		case res != (registry.PruneResult{}):
			log.Info("pruned", "retired", res.Retired, "deleted", res.Deleted)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
