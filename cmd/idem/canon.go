package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/idemkit/idem/canon"
)

// runCanon implements "idem canon": stdin (UTF-8) → canonical bytes on
// stdout, then a newline (not part of the canonical form: what is hashed
// is the bytes before it), so the output ends its line in a terminal. A
// refused payload exits 1 with one line "CODE: reason" on stderr.
func runCanon(_ context.Context, args []string, std stdio) int {
	fs := newFlags("canon", "[--mode json|jcs|raw|schema] [--schema FILE] [--max-bytes N] [--max-depth N] < BODY", std)
	var cf canonFlags
	cf.register(fs.FlagSet)
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q: the payload comes from stdin", words))
	}
	opts, err := cf.options()
	if err != nil {
		fmt.Fprintln(std.err, "idem canon:", err)
		return exitUsage
	}
	body, err := readLimited(std.in, opts)
	if err != nil {
		return refuse(std.err, err)
	}
	out, err := opts.Append(nil, body)
	if err != nil {
		return refuse(std.err, err)
	}
	if _, err := std.out.Write(append(out, '\n')); err != nil {
		fmt.Fprintln(std.err, "idem canon:", err)
		return exitRefused
	}
	return exitOK
}

// canonFlags are the flags that choose a canonicalisation, shared by
// "idem canon" and "idem fingerprint".
type canonFlags struct {
	mode     string
	schema   string
	maxBytes int
	maxDepth int
}

func (c *canonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "mode", "json", "canonicalisation mode: json, jcs, raw or schema")
	fs.StringVar(&c.schema, "schema", "", "schema `FILE` (JSON) for --mode schema")
	fs.IntVar(&c.maxBytes, "max-bytes", canon.DefaultMaxBytes, "largest body accepted, in bytes")
	fs.IntVar(&c.maxDepth, "max-depth", canon.DefaultMaxDepth, "deepest nesting accepted")
}

func (c *canonFlags) options() (canon.Options, error) {
	m, err := canon.ParseMode(c.mode)
	if err != nil {
		return canon.Options{}, err
	}
	o := canon.Options{Mode: m, MaxBytes: c.maxBytes, MaxDepth: c.maxDepth}
	if (m == canon.ModeSchema) != (c.schema != "") {
		return o, errors.New("--schema FILE goes with, and only with, --mode schema")
	}
	if c.schema != "" {
		f, err := os.Open(c.schema)
		if err != nil {
			return o, err
		}
		defer f.Close()
		if o.Schema, err = canon.ParseSchema(f); err != nil {
			return o, err
		}
	}
	return o, nil
}

// readLimited reads all of r, refusing more than the options' limit
// without reading much past it.
func readLimited(r io.Reader, o canon.Options) ([]byte, error) {
	limit := o.MaxBytes
	if limit <= 0 {
		limit = canon.DefaultMaxBytes
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(body) > limit {
		return nil, &canon.Error{Code: canon.CodeBodyTooLarge, Offset: -1, Reason: fmt.Sprintf("body larger than %d bytes", limit)}
	}
	return body, nil
}

// refuse prints err as one line and returns exitRefused.
func refuse(w io.Writer, err error) int {
	fmt.Fprintln(w, err)
	return exitRefused
}
