package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// runEpoch implements "idem epoch show|bump [--db DSN] [--json]" (SPEC E6,
// docs/operations.md). show (the default) prints the registry's control
// row; bump raises the writer epoch by one, which fences every server
// writing at an older epoch: from then on it can neither accept nor commit
// an operation (503 WRITER_FENCED), while replays keep working. A bump is
// written to the registry's audit log first, under $USER (else
// "operator"); when that cannot be written nothing is changed.
//
// Human output of bump:
//
//	writer epoch 3 -> 4
//	servers writing at epoch 3 or lower now refuse new operations (503 WRITER_FENCED); …
//
// With --json every action prints the control row as it is afterwards, on
// one line: {"writer_epoch":4,"draining":false,"updated_at":"…"}.
func runEpoch(ctx context.Context, args []string, std stdio) int {
	action, dsn, asJSON, code, ok := controlArgs("epoch", []string{"show", "bump"}, args, std)
	if !ok {
		return code
	}
	return withControl(ctx, "epoch", dsn, std, func(store registry.Store) error {
		switch action {
		case "bump":
			var epoch int64
			entry := registry.AuditEntry{Actor: defaultActor(), Action: registry.AuditEpochBump, Detail: "idem epoch bump"}
			if err := registry.Audited(ctx, store, entry, func() (err error) {
				epoch, err = store.BumpEpoch(ctx)
				return err
			}); err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(std.out, "writer epoch %d -> %d\n", epoch-1, epoch)
				fmt.Fprintf(std.out, "servers writing at epoch %d or lower now refuse new operations (503 WRITER_FENCED) "+
					"and cannot commit those in flight; servers started from now on write at epoch %d\n", epoch-1, epoch)
				return nil
			}
		}
		return printControl(ctx, store, asJSON, std.out)
	})
}

// controlArgs parses "idem NAME [ACTION] [--db DSN] [--json]", with the
// flags before or after the action (or both); the action defaults to
// actions[0]. When ok is false the command exits with code: help was
// printed on stdout, or a usage error reported on stderr.
func controlArgs(name string, actions, args []string, std stdio) (action, dsn string, asJSON bool, code int, ok bool) {
	fs := newFlags(name, "["+strings.Join(actions, "|")+"] [--db DSN] [--json]", std)
	db := fs.db(defaultDB, "registry database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	js := fs.Bool("json", false, "print the control row as JSON")
	words, code, ok := fs.parse(args) // flags may come before and after the action
	if !ok {
		return "", "", false, code, false
	}
	switch len(words) {
	case 0:
		action = actions[0]
	case 1:
		action = words[0]
	default:
		return "", "", false, fs.usage(fmt.Sprintf("one action expected, got %q", words)), false
	}
	if !slices.Contains(actions, action) {
		return "", "", false, fs.usage(fmt.Sprintf("unknown action %q", action)), false
	}
	return action, *db, *js, exitOK, true
}

// parseInterspersed parses args with fs, flags before, between and after
// the positional arguments (the flag package stops at the first one), and
// returns the positional arguments in order. A parse error has already
// been reported on fs's output.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return words, nil
		}
		words, args = append(words, fs.Arg(0)), fs.Args()[1:]
	}
}

// withControl opens the registry named by dsn (applying its migrations,
// as every command with --db does), runs fn and closes it. Errors are
// reported on std.err as "idem NAME: …" with exit code exitRefused.
func withControl(ctx context.Context, name, dsn string, std stdio, fn func(registry.Store) error) int {
	return withStore(ctx, name, dsn, "", std, fn)
}

// withStore is withControl with the key ring of --encryption-keys (""
// for none), for commands that read stored bodies.
func withStore(ctx context.Context, name, dsn, keysPath string, std stdio, fn func(registry.Store) error) int {
	opts, err := storeOptions(keysPath)
	if err != nil {
		fmt.Fprintf(std.err, "idem %s: %s\n", name, printable(err.Error()))
		return exitRefused
	}
	gate := gateOptions(&opts)
	store, err := idemstore.Open(ctx, dsn, opts)
	if err != nil {
		fmt.Fprintf(std.err, "idem %s: %s\n", name, printable(err.Error()))
		return exitRefused
	}
	defer store.Close()
	stopGate, err := gateStore(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), gate, store, defaultKeyRefresh)
	if err != nil {
		fmt.Fprintf(std.err, "idem %s: %v\n", name, err)
		return exitRefused
	}
	defer stopGate()
	if err := fn(store); err != nil {
		fmt.Fprintf(std.err, "idem %s: %s\n", name, printable(err.Error()))
		return exitRefused
	}
	return exitOK
}

// controlJSON is the --json form of the control row.
type controlJSON struct {
	WriterEpoch int64     `json:"writer_epoch"`
	Draining    bool      `json:"draining"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// printControl reads the control row and prints it: as one JSON line, or
//
//	writer epoch  3
//	draining      off
//	updated at    2031-03-04T05:06:07.123456Z
func printControl(ctx context.Context, store registry.Store, asJSON bool, w io.Writer) error {
	c, err := store.Control(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, controlJSON{WriterEpoch: c.WriterEpoch, Draining: c.Draining, UpdatedAt: c.UpdatedAt.UTC()})
	}
	_, err = fmt.Fprintf(w, "writer epoch  %d\ndraining      %s\nupdated at    %s\n",
		c.WriterEpoch, onOff(c.Draining), c.UpdatedAt.UTC().Format(time.RFC3339Nano))
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
