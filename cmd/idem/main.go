// Command idem is the command-line face of idem: canonical forms and
// fingerprints of requests today; the reference service, migrations,
// operations tools and the verification harness as they land.
//
// Usage:
//
//	idem <command> [flags]
//
// Run "idem help" for the list of commands. Exit codes: 0 success, 1 the
// input was refused or the operation failed, 2 bad usage.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}

// stdio is where a command reads and writes, so tests can run commands in
// process.
type stdio struct {
	in  io.Reader
	out io.Writer
	err io.Writer
}

// command is one subcommand; each lives in its own file.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, std stdio) int
}

// defaultDB is the embedded default database of every command with --db.
const defaultDB = "sqlite:idem.db"

// Exit codes.
const (
	exitOK      = 0
	exitRefused = 1
	exitUsage   = 2
)

func commands() []command {
	return []command{
		{"bench", "measure plain vs idempotent create throughput side by side (and the database's insert rate)", runBench},
		{"canon", "print the canonical form of a payload read from stdin", runCanon},
		{"check", "check that an HTTP API's write endpoint is safe to retry (black box)", runCheck},
		{"drain", "show or set the registry's drain flag (new operations answer 503 DRAINING)", runDrain},
		{"epoch", "show or bump the registry's writer epoch (older writers are fenced)", runEpoch},
		{"fingerprint", "print a request's fingerprint and the parts it hashes", runFingerprint},
		{"gate", "launch gate: replay storm against several instances, then verify the database (SPEC V2)", runGate},
		{"migrate", "apply the registry's migrations to a database", runMigrate},
		{"ops", "list, show and reconcile operations (unknown outcomes); list and requeue outbox dead letters", runOps},
		{"provider", "run the stand-alone downstream transfer provider", runProvider},
		{"prune", "retire expired records into tombstones and delete expired tombstones", runPrune},
		{"recover", "settle operations whose effect outside the database has no known outcome, on evidence only", runRecover},
		{"relay", "deliver the outbox to a webhook (signed, retried with backoff, dead letters) until stopped", runRelay},
		{"serve", "run the reference payments service", runServe},
	}
}

func run(ctx context.Context, args []string, std stdio) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(std.err)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], std)
		}
	}
	fmt.Fprintf(std.err, "idem: unknown command %q\n", args[0])
	usage(std.err)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: idem <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
}
