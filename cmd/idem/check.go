package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/harness/check"
)

// checkHeaders is a repeatable "Name: value" flag of "idem check",
// stricter than fingerprint's headerFlag: names must be valid field names.
type checkHeaders struct{ h http.Header }

func (f *checkHeaders) String() string { return "" }

func (f *checkHeaders) Set(line string) error {
	if f.h == nil {
		f.h = http.Header{}
	}
	return check.ParseHeader(f.h, line)
}

// runCheck implements "idem check URL": the black-box idempotency checker
// of package check, pointed at one write endpoint of any HTTP API (see
// docs/check.md). Progress goes to stderr while it runs; the report goes
// to stdout, as a table or, with --json, as one JSON object; --html FILE
// also writes a self-contained HTML report with charts. Exit codes:
// 0 every scenario that applied passed or warned (a warning, such as a
// low-entropy key accepted by key-entropy, does not fail the run), 1 one
// failed (or the run was interrupted), 2 bad usage. Flags may come before or after URL.
func runCheck(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("check", "[flags] URL", std)
	var header, alt, fault checkHeaders
	method := fs.String("method", check.DefaultMethod, "HTTP `METHOD` of the write endpoint")
	body := fs.String("body", "", "body `TEMPLATE`: JSON text; {{unique}} becomes a fresh number per key, {{variant}} "+check.VariantSame+" (or "+check.VariantChanged+" in the changed payload), {{lexical}} "+check.LexicalFirst+" (or "+check.LexicalRetry+" in strict-lexical-number's retry: mark a number whose scale the API declares significant)")
	fs.Var(&header, "header", "`'Name: value'` sent with every request, e.g. the first credential (repeatable)")
	fs.Var(&alt, "alt-header", "`'Name: value'` of a second credential, for the scoping scenario; replaces the same-named --header (repeatable)")
	keyHeader := fs.String("key-header", check.DefaultKeyHeader, "`NAME` of the idempotency key header")
	concurrency := fs.Int("concurrency", check.DefaultConcurrency, "`N` simultaneous identical requests (concurrent), requests in flight (load)")
	idField := fs.String("id-field", "", "JSON `MEMBER` of a 2xx body naming the created resource (dots walk into objects); default: the Location header")
	countURL := fs.String("count-url", "", "`URL` (GET, relative to URL allowed) answering the number of resources: a JSON number, an array, or an object holding one")
	countField := fs.String("count-field", "", "`MEMBER` of the --count-url object that holds the count (default: its only member)")
	load := fs.Int("load", 100, "`KEYS` of the load scenario, each sent twice; 0 skips it")
	timeout := fs.Duration("timeout", check.DefaultTimeout, "bound on each request")
	only := fs.String("only", "", "comma-separated `SCENARIOS` to run (default: all): "+scenarioNames())
	profile := fs.String("profile", "", "also score the API against a `PROFILE`: ietf (the IETF draft's answers, RFC 9457 problems) or strict (ietf, and what tells a strict API from a merely correct one); adds a scorecard")
	expiry := fs.Duration("expiry", 0, "how long the API documents that it keeps a key: strict-expiry retries a key that much later (0 skips it)")
	fs.Var(&fault, "fault-header", "`'Name: value'` that makes the API fail a request with a 5xx, if it offers one for tests: strict-5xx-replay sends its first request with it (repeatable; none skips it)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	html := fs.String("html", "", "also write a self-contained HTML report to `FILE`")

	urls, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(urls) != 1 {
		return fs.usage("want exactly one URL")
	}
	cfg := check.Config{
		URL:         urls[0],
		Method:      *method,
		Body:        *body,
		Header:      header.h,
		AltHeader:   alt.h,
		KeyHeader:   *keyHeader,
		Concurrency: *concurrency,
		IDField:     *idField,
		CountURL:    *countURL,
		CountField:  *countField,
		LoadKeys:    *load,
		Timeout:     *timeout,
		Profile:     *profile,
		Expiry:      *expiry,
		FaultHeader: fault.h,
		Progress:    std.err,
	}
	if *only != "" {
		cfg.Only = splitList(*only)
	}
	if *concurrency <= 0 || *timeout <= 0 {
		fmt.Fprintln(std.err, "idem check: --concurrency and --timeout must be positive")
		return exitUsage
	}
	rep, err := check.Run(ctx, cfg)
	if rep == nil {
		fmt.Fprintln(std.err, "idem "+err.Error())
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(std.err, "idem check: interrupted:", err)
	}
	if err = writeReport(std.out, rep, *asJSON); err != nil {
		fmt.Fprintln(std.err, "idem check: writing the report:", err)
		return exitRefused
	}
	if *html != "" {
		if err := writeHTMLFile(*html, rep.WriteHTML); err != nil {
			fmt.Fprintln(std.err, "idem check: writing the HTML report:", err)
			return exitRefused
		}
	}
	if !rep.Passed {
		return exitRefused
	}
	return exitOK
}

func scenarioNames() string {
	var names []string
	for _, s := range check.Scenarios() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}
