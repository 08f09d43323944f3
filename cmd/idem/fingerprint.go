package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// runFingerprint implements "idem fingerprint": the body comes from stdin,
// the rest of the request from flags; it prints the fingerprint and every
// part it hashes as JSON, so two requests can be compared part by part.
func runFingerprint(_ context.Context, args []string, std stdio) int {
	fs := newFlags("fingerprint", "--target URL [--method M] [--content-type T] [--query-keep P,…] [--header-keep H,…] [--header 'Name: value']… [canon flags] < BODY", std)
	var cf canonFlags
	cf.register(fs.FlagSet)
	method := fs.String("method", "POST", "request `METHOD`")
	target := fs.String("target", "", "request `URL` or path, query included (required)")
	contentType := fs.String("content-type", "application/json", "Content-Type of the body")
	queryKeep := fs.String("query-keep", "", "comma-separated query parameters that are significant")
	headerKeep := fs.String("header-keep", "", "comma-separated business headers that are bound")
	var headers headerFlag
	fs.Var(&headers, "header", "request header `'Name: value'` (repeatable); only --header-keep names are bound")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q: the body comes from stdin", words))
	}
	if *target == "" {
		fmt.Fprintln(std.err, "idem fingerprint: --target is required")
		return exitUsage
	}
	u, err := url.Parse(*target)
	if err != nil {
		fmt.Fprintln(std.err, "idem fingerprint: --target:", err)
		return exitUsage
	}
	opts, err := cf.options()
	if err != nil {
		fmt.Fprintln(std.err, "idem fingerprint:", err)
		return exitUsage
	}
	b := idem.Binding{Canon: opts, Query: splitList(*queryKeep), Headers: splitList(*headerKeep)}
	h := http.Header(headers)
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", *contentType)
	body, err := readLimited(std.in, opts)
	if err != nil {
		return refuse(std.err, err)
	}
	fp, parts, err := b.Fingerprint(*method, u, h, body)
	if err != nil {
		return refuse(std.err, err)
	}
	out := struct {
		Fingerprint      string                `json:"fingerprint"`
		Contract         string                `json:"contract"`
		Parts            idem.FingerprintParts `json:"parts"`
		CanonicalPayload *string               `json:"canonical_payload,omitempty"`
	}{Fingerprint: fp.String(), Contract: idem.ContractVersion, Parts: parts}
	if utf8.Valid(parts.Payload) {
		s := string(parts.Payload)
		out.CanonicalPayload = &s
	}
	enc := json.NewEncoder(std.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(std.err, "idem fingerprint:", err)
		return exitRefused
	}
	return exitOK
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// headerFlag collects repeated --header 'Name: value' flags.
type headerFlag http.Header

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	if *h == nil {
		*h = headerFlag{}
	}
	http.Header(*h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}
