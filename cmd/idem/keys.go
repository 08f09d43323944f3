package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/secretfile"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// encryptionKeysUsage is the help of every --encryption-keys flag.
const encryptionKeysUsage = "key ring `FILE` (JSON, see idem keys): seal response bodies and effect requests and answers at rest " +
	"with AES-256-GCM; without it they are stored in plaintext (required for production, see docs/threat-model.md)"

// addKeysFlag registers --encryption-keys on fs.
func addKeysFlag(fs *flag.FlagSet) *string {
	return fs.String("encryption-keys", "", encryptionKeysUsage)
}

// storeOptions returns the store options for a --encryption-keys value:
// the key ring loaded from the file, or no sealer for "".
func storeOptions(keysPath string) (idemstore.Options, error) {
	if keysPath == "" {
		return idemstore.Options{}, nil
	}
	ring, err := keyring.Load(keysPath)
	if err != nil {
		return idemstore.Options{}, err
	}
	return idemstore.Options{Sealer: ring}, nil
}

// runKeys implements "idem keys add|rotate" (SPEC C4, docs/operations.md,
// "Encryption at rest"):
//
//	idem keys add --encryption-keys FILE --id ID
//
// adds a fresh random key named ID to the key file (creating it, mode
// 0600, if it does not exist) and makes it the active one; servers
// started with the file seal new bodies with it and still read the
// others.
//
//	idem keys rotate --db DSN --encryption-keys FILE [--batch N] [--json]
//
// refuses, naming them, while an instance seen alive within
// keyring.DefaultHolderWindow has not announced the file's active key in
// the registry (the body it re-seals would be unreadable there); then
// re-seals every stored body that is sealed under another key than the
// file's active one, N records per transaction, printing a progress line
// per batch and then the bodies per key ID; it can be stopped and run
// again (bodies already re-sealed are left alone). A body it cannot open
// — its key is not in the file, it fails authentication, or it is in
// plaintext (never sealed: it could be a forgery) — is left as it is and
// named on stderr; the rest goes on, and the exit status is 1 if any was
// skipped. Once no body uses an old key, that key can leave the file.
func runKeys(ctx context.Context, args []string, std stdio) int {
	f := newFlags("keys", "add|rotate --encryption-keys FILE [--id ID] [--db DSN] [--batch N] [--json]", std)
	path := addKeysFlag(f.FlagSet)
	id := f.String("id", "", "add: `ID` of the new key (1 to 64 of A-Z a-z 0-9 . _ -), e.g. the month: 2026-12")
	dsn := f.db(defaultDB, "rotate: registry database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	batch := f.Int("batch", 500, "rotate: records per batch (one transaction each)")
	asJSON := f.Bool("json", false, `rotate: print {"active":…,"resealed":N,"batches":B,"usage":{"<key ID>":N}} at the end instead of progress`)
	words, code, ok := f.parse(args)
	if !ok {
		return code
	}
	switch {
	case len(words) != 1:
		return f.usage(fmt.Sprintf("want one action, add or rotate, got %q", words))
	case *path == "":
		return f.usage("--encryption-keys FILE is required")
	case words[0] == "add" && *id != "":
		return keysAdd(*path, *id, std)
	case words[0] == "add":
		return f.usage("add needs --id ID")
	case words[0] == "rotate" && *batch > 0:
		return keysRotate(ctx, *dsn, *path, *batch, *asJSON, std)
	case words[0] == "rotate":
		return f.usage("--batch N must be positive")
	}
	return f.usage(fmt.Sprintf("unknown action %q: want add or rotate", words[0]))
}

// keysAdd adds a fresh key named id to the key file at path and makes it
// active.
func keysAdd(path, id string, std stdio) int {
	var file keyring.File
	data, err := secretfile.Read(path, "key ring", 1<<20)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fmt.Fprintln(std.err, "idem keys add:", printable(err.Error()))
		return exitRefused
	default:
		if _, err := keyring.Parse(data); err != nil {
			fmt.Fprintln(std.err, "idem keys add:", printable(err.Error()))
			return exitRefused
		}
		json.Unmarshal(data, &file) // Parse accepted it
	}
	key, err := keyring.NewKey(id)
	if err != nil {
		fmt.Fprintln(std.err, "idem keys add:", printable(err.Error()))
		return exitRefused
	}
	file.Keys, file.Active = append(file.Keys, key), key.ID
	if _, err := keyring.New(file); err != nil { // a duplicate ID
		fmt.Fprintln(std.err, "idem keys add:", printable(err.Error()))
		return exitRefused
	}
	out, _ := json.MarshalIndent(file, "", "  ")
	if err := writeFileAtomic(path, append(out, '\n')); err != nil {
		fmt.Fprintln(std.err, "idem keys add:", printable(err.Error()))
		return exitRefused
	}
	fmt.Fprintf(std.out, "added key %s to %s and made it active; restart the servers, then run idem keys rotate\n", key.ID, path)
	return exitOK
}

// writeFileAtomic replaces path with data, readable by its owner only.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keys-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// rotateJSON is the --json output of idem keys rotate.
type rotateJSON struct {
	Active   string           `json:"active"`
	Resealed int              `json:"resealed"`
	Batches  int              `json:"batches"`
	Skipped  []string         `json:"skipped"`
	Usage    map[string]int64 `json:"usage"`
}

// keysRotate re-seals the bodies of the registry at dsn under the active
// key of the key file at path, batch records per transaction.
func keysRotate(ctx context.Context, dsn, path string, batch int, asJSON bool, std stdio) int {
	opts, err := storeOptions(path)
	if err != nil {
		fmt.Fprintln(std.err, "idem keys rotate:", printable(err.Error()))
		return exitRefused
	}
	store, err := idemstore.Open(ctx, dsn, opts)
	if err != nil {
		fmt.Fprintln(std.err, "idem keys rotate:", printable(err.Error()))
		return exitRefused
	}
	defer store.Close()
	rs, ok := store.(registry.Resealer)
	if !ok {
		fmt.Fprintln(std.err, "idem keys rotate: this store cannot re-seal")
		return exitRefused
	}
	active := opts.Sealer.ActiveKeyID()
	if roster, ok := store.(registry.KeyRoster); ok {
		holders, err := roster.KeyHolders(ctx, keyring.DefaultHolderWindow)
		if err != nil {
			fmt.Fprintln(std.err, "idem keys rotate:", err)
			return exitRefused
		}
		if lacking := registry.Lacking(holders, active); len(lacking) > 0 {
			fmt.Fprintf(std.err, "idem keys rotate: refused: %d live instances do not hold key %s yet: %s; "+
				"restart them with this key file (a stopped instance drops out at once, a crashed one after %s), then run it again\n",
				len(lacking), active, oneLine(strings.Join(lacking, ", ")), keyring.DefaultHolderWindow)
			return exitRefused
		}
	}
	out := rotateJSON{Active: active, Skipped: []string{}}
	for cursor := ""; ; {
		b, err := rs.Reseal(ctx, cursor, batch)
		if err != nil {
			fmt.Fprintf(std.err, "idem keys rotate: %s (%d bodies re-sealed before the error; run it again once fixed)\n", printable(err.Error()), out.Resealed)
			return exitRefused
		}
		out.Resealed += b.Changed
		out.Batches++
		for _, s := range b.Skipped {
			out.Skipped = append(out.Skipped, s.Body)
			fmt.Fprintf(std.err, "idem keys rotate: skipped %s: %s\n", oneLine(s.Body), oneLine(s.Err.Error()))
		}
		if !asJSON {
			fmt.Fprintf(std.out, "batch %d: re-sealed %d bodies under %s (%d so far)\n", out.Batches, b.Changed, active, out.Resealed)
		}
		if cursor = b.Next; cursor == "" {
			break
		}
	}
	if out.Usage, err = rs.KeyUsage(ctx); err != nil {
		fmt.Fprintln(std.err, "idem keys rotate:", printable(err.Error()))
		return exitRefused
	}
	code := exitOK
	if len(out.Skipped) > 0 {
		// The rest is done, but an operator must look at these before
		// the old key leaves the file.
		fmt.Fprintf(std.err, "idem keys rotate: %d bodies could not be opened and were left as they are "+
			"(a key missing from the file, or a body written to the database by someone else): %s\n",
			len(out.Skipped), oneLine(strings.Join(out.Skipped, ", ")))
		code = exitRefused
	}
	if asJSON {
		if err := printJSON(std.out, out); err != nil {
			fmt.Fprintln(std.err, "idem keys rotate:", printable(err.Error()))
			return exitRefused
		}
		return code
	}
	for _, k := range slices.Sorted(maps.Keys(out.Usage)) {
		name := printable(k) // a key ID as stored with a body
		if name == "" {
			name = "(plaintext)"
		}
		fmt.Fprintf(std.out, "%s: %d bodies\n", name, out.Usage[k])
	}
	return code
}
