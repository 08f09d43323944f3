package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// providerTimeout bounds one question to the downstream provider.
const providerTimeout = 10 * time.Second

// newWorker builds the recovery worker of "idem recover" and "idem serve".
// Without a provider URL no provider can be asked, so every EXECUTING
// record found with an expired lease is marked UNKNOWN for an operator.
func newWorker(store registry.Store, providerURL string, lease time.Duration, batch int, log *slog.Logger) *recovery.Worker {
	w := &recovery.Worker{Store: store, Lease: lease, Batch: batch, Logger: log}
	if providerURL != "" {
		w.Provider = recovery.HTTPProvider{BaseURL: providerURL, Client: &http.Client{Timeout: providerTimeout}}
	}
	return w
}

// runRecover implements "idem recover [--db DSN] [--provider URL] [--once]
// [--json] [--batch N] [--interval D] [--lease D]" (SPEC E3, O2): it finds
// the operations whose lease expired and recovers them (package recovery):
// reservations are released for the client's retry, committed outcomes
// are left alone, and operations with an effect outside the database are
// reconciled from the provider's answer (GET URL/transfers/{key}) or marked
// UNKNOWN for a replay with the same key or an operator — never executed
// again. It is safe to run next to servers and other recover processes:
// a takeover is a compare-and-set, so each record is handled once.
//
// With --once it runs one round (batches of N until none is left) and
// prints "released A, recovered B, unknown C, reconciled D", or with --json
// one line {"released":A,"recovered":B,"unknown":C,"reconciled":D}; on an
// error the counts go to stderr with it and the exit code is 1. Without
// --once it runs a round every --interval until SIGINT or SIGTERM, printing
// a line for each round that did something and logging errors (it carries
// on), and exits 0.
func runRecover(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	fs.SetOutput(std.err)
	dsn := fs.String("db", defaultDB, "registry database `DSN`: sqlite:PATH or postgres://…")
	providerURL := fs.String("provider", "", "downstream provider `URL` to ask about effects; without it they become UNKNOWN")
	once := fs.Bool("once", false, "run one round and exit")
	asJSON := fs.Bool("json", false, `print {"released":A,"recovered":B,"unknown":C,"reconciled":D}`)
	batch := fs.Int("batch", registry.DefaultRecoverBatch, "expired records listed per batch")
	interval := fs.Duration("interval", recovery.DefaultInterval, "time between rounds without --once")
	lease := fs.Duration("lease", registry.DefaultLease, "lease of a takeover")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 || *batch <= 0 || *interval <= 0 || *lease <= 0 {
		fmt.Fprintln(std.err, "usage: idem recover [--db DSN] [--provider URL] [--once] [--json] [--batch N] [--interval D] [--lease D]; N, D positive")
		return exitUsage
	}
	store, err := drivers.Open(ctx, *dsn, drivers.Options{})
	if err != nil {
		fmt.Fprintln(std.err, "idem recover:", err)
		return exitRefused
	}
	defer store.Close()
	w := newWorker(store, *providerURL, *lease, *batch, slog.New(slog.NewTextHandler(std.err, nil)))
	if *once {
		rep, err := w.RunOnce(ctx)
		if err != nil {
			fmt.Fprintf(std.err, "idem recover: %v (%s before the error)\n", err, reportText(rep))
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
			fmt.Fprintf(std.err, "idem recover: %v (%s); retrying in %v\n", err, reportText(rep), *interval)
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
	return fmt.Sprintf("released %d, recovered %d, unknown %d, reconciled %d", r.Released, r.Recovered, r.Unknown, r.Reconciled)
}

func printReport(std stdio, r recovery.Report, asJSON bool) int {
	if !asJSON {
		fmt.Fprintln(std.out, reportText(r))
		return exitOK
	}
	b, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(std.err, "idem recover:", err)
		return exitRefused
	}
	fmt.Fprintf(std.out, "%s\n", b)
	return exitOK
}

// startRecovery runs the recovery worker of "idem serve": right away and
// then every interval (recovery.Worker.Run, which logs what each round did
// and carries on after errors). The returned function stops the loop and
// waits for it, so the store can be closed afterwards.
func startRecovery(ctx context.Context, store registry.Store, providerURL string, interval, lease time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w := newWorker(store, providerURL, lease, registry.DefaultRecoverBatch, log)
	go func() {
		defer close(done)
		w.Run(ctx, interval)
	}()
	return func() {
		cancel()
		<-done
	}
}
