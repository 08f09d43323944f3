// Command idem is the command-line face of idem: canonical forms and
// fingerprints of requests today; the reference service, migrations,
// operations tools and the verification harness as they land.
//
// Usage:
//
//	idem <command> [flags]
//
// Run "idem help" for the list of commands, and "idem help CMD" (or
// "idem CMD --help", or -h) for one command's synopsis and flags.
//
// Help that was asked for — "idem help", "idem help CMD", -h, --help —
// goes to stdout and exits 0, so it can be paged or searched. A usage
// error goes to stderr as the error and one line pointing to the help
// (for a command, with its synopsis), and exits 2; "idem" alone is a
// usage error. "idem version" prints the build's module version, VCS
// revision and Go version. Exit codes: 0 success (or
// help), 1 the input was refused or the operation failed, 2 bad usage;
// "idem rollout" adds 3 (stale: the row changed since it was read) and 4
// (force required).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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

// command is one subcommand; each lives in its own file. A command with
// actions ("ops list", "epoch bump") lists them, each with its summary.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, std stdio) int
	actions []action
}

// action is one action of a command, with its one-line summary.
type action struct{ name, summary string }

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
		{name: "bench", summary: "measure plain vs idempotent create throughput side by side", run: runBench},
		{name: "canon", summary: "print the canonical form of a payload read from stdin", run: runCanon},
		{name: "check", summary: "check that an HTTP API's write endpoint is safe to retry (black box)", run: runCheck},
		{name: "drain", summary: "show or set the registry's drain flag", run: runDrain, actions: []action{
			{"show", "print the registry's control row (the default)"},
			{"on", "new operations answer 503 DRAINING; replays go on"},
			{"off", "accept new operations again"},
		}},
		{name: "epoch", summary: "show or bump the registry's writer epoch", run: runEpoch, actions: []action{
			{"show", "print the registry's control row (the default)"},
			{"bump", "raise the writer epoch by one: older writers are fenced"},
		}},
		{name: "fingerprint", summary: "print a request's fingerprint and the parts it hashes", run: runFingerprint},
		{name: "gate", summary: "launch gate: replay storm on several instances, then verify the database", run: runGate},
		{name: "help", summary: "list the commands, or show one command's help: idem help CMD"},
		{name: "keys", summary: "manage the key ring that seals stored bodies at rest", run: runKeys, actions: []action{
			{"add", "add a fresh key to the key file and make it active"},
			{"rotate", "re-seal sealed bodies under the active key once every instance holds it"},
		}},
		{name: "migrate", summary: "apply the registry's migrations to a database", run: runMigrate},
		{name: "ops", summary: "the operator's view of operations, outbox dead letters and the audit log", run: runOps, actions: []action{
			{"list", "list operations, oldest first, by state and age"},
			{"show", "print one operation with its effects, lookups and reconciliations"},
			{"lookup", "ask the downstream about an operation's keys; the answer is recorded"},
			{"reconcile", "settle an UNKNOWN operation on evidence no recorded answer contradicts"},
			{"approve", "approve another operator's pending settlement (the second of two people)"},
			{"dead-letters", "list the outbox messages the relay gave up on"},
			{"requeue", "make a dead letter pending again"},
			{"audit", "print the audit log: who changed what by hand, newest first"},
		}},
		{name: "provider", summary: "run the stand-alone downstream transfer provider", run: runProvider},
		{name: "prune", summary: "retire expired records into tombstones, delete expired tombstones", run: runPrune},
		{name: "recover", summary: "settle operations with unknown outcomes, on evidence only", run: runRecover},
		{name: "relay", summary: "deliver the outbox to a signed webhook until stopped", run: runRelay},
		{name: "rollout", summary: "show or change each operation's rollout: off, shadow, or enforce for a share", run: runRollout, actions: []action{
			{"status", "print every operation's rollout row"},
			{"report", "verdict totals per tenant: what shadow predicted, what enforce answered"},
			{"OPERATION", "set its mode: off, shadow or enforce [--percent N]; compare-and-set, audited"},
		}},
		{name: "serve", summary: "run the reference payments service", run: runServe},
		{name: "shard", summary: "the shard directory of a sharded service, and tenant moves between its shards", run: runShard, actions: []action{
			{"list", "print the directory: the default shard and every tenant's entry"},
			{"move", "move a tenant to another shard: drain, fence, copy, switch, undrain; resumable"},
			{"abort", "undo a move that has not switched: lift the fence, undrain"},
		}},
		{name: "version", summary: "print the module version, VCS revision and Go version of this build", run: runVersion},
	}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func run(ctx context.Context, args []string, std stdio) int {
	switch {
	case len(args) == 0:
		fmt.Fprintf(std.err, "idem: no command\n%s\n", seeHelp)
		return exitUsage
	case isHelp(args[0]) || args[0] == "help" && (len(args) == 1 || args[1] == "help"):
		usage(std.out)
		return exitOK
	case args[0] == "help":
		// "idem help CMD [ACTION]" is "idem CMD [ACTION] --help".
		if c, ok := lookup(args[1]); ok && c.run != nil {
			return c.run(ctx, append(args[2:len(args):len(args)], "--help"), std)
		}
		fmt.Fprintf(std.err, "idem help: unknown command %q\n%s\n", args[1], seeHelp)
		return exitUsage
	}
	if c, ok := lookup(args[0]); ok && c.run != nil {
		return c.run(ctx, args[1:], std)
	}
	fmt.Fprintf(std.err, "idem: unknown command %q\n%s\n", args[0], seeHelp)
	return exitUsage
}

// seeHelp ends a usage error that names no command.
const seeHelp = "run 'idem help' for the list of commands"

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: idem <command> [flags]\n       idem help <command>   (its synopsis and flags; or idem <command> --help)\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
		for _, a := range c.actions {
			fmt.Fprintf(w, "    %-14s %s\n", a.name, a.summary)
		}
	}
}

// flags is the flag set of a command (name "prune") or of one action of
// it (name "ops list"), with its synopsis, the arguments after "idem
// NAME". parse prints its help — the synopsis, the summary and the
// flags — on stdout when it is asked for, and the error and one line
// pointing to that help on stderr after a bad flag.
type flags struct {
	*flag.FlagSet
	synopsis string
	std      stdio
	// after runs once the flags are parsed, in order (dbflag.go): a
	// usageError is a usage error (exit 2), any other error a refusal
	// (exit 1), both reported on stderr.
	after []func() error
	// notes, when set, are printed after the flags in the help: exit
	// codes and rules the flags alone do not say.
	notes string
}

func newFlags(name, synopsis string, std stdio) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports flag's errors itself, with the command's name
	fs.Usage = func() {}     // parse prints the help, where it belongs
	return &flags{FlagSet: fs, synopsis: synopsis, std: std}
}

// parse parses args, flags before, between and after the positional
// arguments (the flag package alone stops at the first one), and returns
// the positional arguments in order. When it returns ok false the
// command must exit with code: exitOK when help was asked for (printed
// on stdout), exitUsage after a bad flag (reported on stderr).
func (f *flags) parse(args []string) (words []string, code int, ok bool) {
	words, err := parseInterspersed(f.FlagSet, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.help(f.std.out)
		return nil, exitOK, false
	case err != nil:
		return nil, f.usage(err.Error()), false
	}
	for _, fn := range f.after {
		var u usageError
		switch err := fn(); {
		case errors.As(err, &u):
			return nil, f.usage(err.Error()), false
		case err != nil:
			fmt.Fprintf(f.std.err, "idem %s: %v\n", f.Name(), err)
			return nil, exitRefused, false
		}
	}
	return words, exitOK, true
}

// usage reports a usage error — a bad flag, or one found after parsing:
// msg, then one line with the synopsis pointing to the help, on stderr.
// It returns exitUsage.
func (f *flags) usage(msg string) int {
	fmt.Fprintf(f.std.err, "idem %s: %s\nusage: idem %s %s   (idem %s --help for the flags)\n", f.Name(), msg, f.Name(), f.synopsis, f.Name())
	return exitUsage
}

// help prints the synopsis, the summary and the flags to w.
func (f *flags) help(w io.Writer) {
	fmt.Fprintf(w, "usage: idem %s %s\n", f.Name(), f.synopsis)
	if s := summary(f.Name()); s != "" {
		fmt.Fprintf(w, "\n%s\n", s)
	}
	if c, ok := lookup(f.Name()); ok && len(c.actions) > 0 {
		fmt.Fprint(w, "\nactions:\n")
		for _, a := range c.actions {
			fmt.Fprintf(w, "  %-14s %s\n", a.name, a.summary)
		}
	}
	fmt.Fprint(w, "\nflags:\n")
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	if f.notes != "" {
		fmt.Fprintf(w, "\n%s", f.notes)
	}
}

// summary returns the summary of a command ("prune") or of an action
// ("ops list"), as "idem help" lists it.
func summary(name string) string {
	cmd, act, _ := strings.Cut(name, " ")
	c, _ := lookup(cmd)
	if act == "" {
		return c.summary
	}
	for _, a := range c.actions {
		if a.name == act {
			return a.summary
		}
	}
	return ""
}
