package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// transferEffects returns the effects the worker settles for a provider
// at providerURL (none without one).
func transferEffects(providerURL string, timeout time.Duration) effect.Set {
	if providerURL == "" {
		return nil
	}
	return effect.Set{payments.OperationTransfer: payments.TransferEffects(providerURL, timeout)}
}

// runRecover implements "idem recover [--db DSN] [--provider URL]
// [--provider-timeout D] [--once] [--json] [--batch N] [--interval D]
// [--lease D]" (SPEC E2, E3, O2): the recovery worker of package recovery.
// Operations whose lease expired after an effect outside the database
// began are taken over and marked UNKNOWN (committed outcomes are left
// alone, reservations are left for the client's retry, which continues
// the same operation); UNKNOWN transfers are settled on evidence from the
// provider at --provider — a lookup by the downstream key, then a re-send
// of the stored request with the same key — and their own rendering
// stored; anything short of evidence leaves them UNKNOWN. Nothing is ever
// executed again. It is safe to run next to servers and other recover
// processes: a takeover and a reconciliation are compare-and-sets, so each
// record is handled once.
//
// With --once it runs one round (batches of N until none is left) and
// prints "recovered A, unknown B, reconciled C, unsettled D", or with --json
// one line {"recovered":A,"unknown":B,"reconciled":C,"unsettled":D}; on an
// error the counts go to stderr with it and the exit code is 1. Without
// --once it runs a round every --interval until SIGINT or SIGTERM, printing
// a line for each round that did something and logging errors (it carries
// on), and exits 0.
func runRecover(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("recover", "[--db DSN] [--provider URL] [--provider-timeout D] [--once] [--json] [--batch N] [--interval D] [--lease D]", std)
	dsn := fs.db(defaultDB, "registry database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	providerURL := fs.String("provider", "", "downstream provider `URL` to settle transfers with; without it UNKNOWN operations wait for an operator")
	providerTimeout := fs.Duration("provider-timeout", payments.DefaultProviderTimeout, "bound on one provider call")
	once := fs.Bool("once", false, "run one round and exit")
	asJSON := fs.Bool("json", false, `print {"recovered":A,"unknown":B,"reconciled":C,"unsettled":D}`)
	batch := fs.Int("batch", registry.DefaultRecoverBatch, "expired records listed per batch")
	interval := fs.Duration("interval", recovery.DefaultInterval, "time between rounds without --once")
	lease := fs.Duration("lease", registry.DefaultLease, "lease of a takeover")
	keys := addKeysFlag(fs.FlagSet)
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 || *batch <= 0 || *interval <= 0 || *lease <= 0 {
		return fs.usage("no arguments but flags; --batch, --interval and --lease positive")
	}
	opts, err := storeOptions(*keys)
	if err != nil {
		fmt.Fprintln(std.err, "idem recover:", printable(err.Error()))
		return exitRefused
	}
	gate := gateOptions(&opts)
	store, err := idemstore.Open(ctx, *dsn, opts)
	if err != nil {
		fmt.Fprintln(std.err, "idem recover:", printable(err.Error()))
		return exitRefused
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(std.err, nil))
	stopGate, err := gateStore(ctx, log, gate, store, defaultKeyRefresh)
	if err != nil {
		fmt.Fprintln(std.err, "idem recover:", err)
		return exitRefused
	}
	defer stopGate()
	w := &recovery.Worker{Store: store, Effects: transferEffects(*providerURL, *providerTimeout), Lease: *lease, Batch: *batch,
		Logger: log}
	if *once {
		rep, err := w.RunOnce(ctx)
		if err != nil {
			fmt.Fprintf(std.err, "idem recover: %s (%s before the error)\n", printable(err.Error()), reportText(rep))
			return exitRefused
		}
		return printReport(std, rep, *asJSON)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		rep, err := w.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return exitOK
		case err != nil:
			fmt.Fprintf(std.err, "idem recover: %s (%s); retrying in %v\n", printable(err.Error()), reportText(rep), *interval)
		case rep != (recovery.Report{}):
			if code := printReport(std, rep, *asJSON); code != exitOK {
				return code
			}
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
	}
}

func reportText(r recovery.Report) string {
	return fmt.Sprintf("recovered %d, unknown %d, reconciled %d, unsettled %d", r.Recovered, r.Unknown, r.Reconciled, r.Unsettled)
}

func printReport(std stdio, r recovery.Report, asJSON bool) int {
	if !asJSON {
		fmt.Fprintln(std.out, reportText(r))
		return exitOK
	}
	if err := printJSON(std.out, r); err != nil {
		fmt.Fprintln(std.err, "idem recover:", printable(err.Error()))
		return exitRefused
	}
	return exitOK
}
