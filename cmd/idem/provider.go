package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/outbox"
)

// providerNotes are the help's notes: the modes and how to set them, the
// state file and the events. TestProviderHelpNamesEveryMode checks that
// every mode package provider defines is named here.
const providerNotes = `POST /transfers executes a transfer once per Idempotency-Key; GET /transfers/{key}
says what became of a key (200 executed or declined, 404 NOT_FOUND); GET /transfers
lists the executed ones; GET /stats counts them. A key that executed or was declined
is answered the same way for ever, in every mode.

modes (POST /control {"mode": MODE[, "count": N]}; GET /control shows it) shape
only requests with a new key:
  "ok"           execute and answer 201 (the mode at start)
  "fail"         answer 503 PROVIDER_FAILURE; nothing is executed
  "fail-after"   execute, then answer 503 PROVIDER_FAILURE: a 5xx proves nothing
  "decline"      record the key as declined for good: 422 DECLINED
  "hang"         execute, then hold the answer until the mode changes or the
                 client goes away (a timeout after the effect happened)
  "hang-before"  hold before executing anything until the mode changes; then
                 the new mode decides
  "count": N     the mode decides only the next N requests with a new key, then
                 "ok" is back by itself; without it a mode stays until changed
GET /control?wait_hung=N waits until N requests are held.

--state FILE keeps what became of every key in FILE, appended and synced before
each answer: a provider restarted on the same file answers a key it executed with
the same bytes and never executes it again. Without --state the state is in
memory only, a warning is logged, and a restart forgets every key.

--latency D delays every POST /transfers answer by D before it is decided, as the
round trip to a remote provider would ("idem bench --effects" uses 1ms and 20ms).

--events-url URL sends a Standard Webhooks event (transfer.succeeded or
transfer.declined, signed with --events-secret-file) for each key that executed
or was declined; a delivery that fails is sent again with backoff until the
receiver answers 2xx (at least once, in no promised order; the webhook-id is the
same at every attempt). With --state, events not acknowledged are sent again
after a restart. "idem serve --provider-events-secret-file" receives them
(docs/webhooks.md).
`

// runProvider implements "idem provider": the stand-alone downstream
// transfer provider (see package provider), with its own idempotency, for
// "idem serve --provider URL" and for tests of unknown outcomes. With
// --state FILE its state is kept in FILE (provider.Options.State) and
// survives a restart or a crash; without it the state is in memory and a
// warning says so. With --events-url and --events-secret-file it sends
// signed transfer events (provider.Events). Once the listener is bound
// it logs one line
//
//	time=… level=INFO msg="listening on 127.0.0.1:8090" addr=127.0.0.1:8090
//
// with the bound address (so --addr 127.0.0.1:0 works), and serves until
// ctx is cancelled (SIGINT or SIGTERM in main). Requests carry ctx as
// their base context, so requests held by the hang modes are cut off at
// once when ctx ends; the others get up to shutdownTimeout to finish. It
// then exits 0. Logs go to stderr as slog text. An unreadable state file,
// or one that is not a provider's, exits 1 before listening.
func runProvider(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("provider", "[--addr ADDR] [--state FILE] [--latency D] [--events-url URL --events-secret-file FILE]", std)
	fs.notes = providerNotes
	addr := fs.String("addr", "127.0.0.1:8090", "listen `ADDR` (host:port; port 0 picks a free one)")
	state := fs.String("state", "", "state `FILE`: what became of every key, kept across restarts (default: in memory only)")
	eventsURL := fs.String("events-url", "", "`URL` to send signed transfer events to (default: none)")
	latency := fs.Duration("latency", 0, "delay every POST /transfers answer by `D`, as a remote provider's round trip (a PSP's is typically 20ms; default: none)")
	eventsSecret := fs.String("events-secret-file", "", "`FILE` holding the events' signing secret: whsec_<base64> or raw bytes; required with --events-url")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	}
	if *latency < 0 {
		return fs.usage("--latency must not be negative")
	}
	if (*eventsURL == "") != (*eventsSecret == "") {
		return fs.usage("--events-url and --events-secret-file go together: events are signed")
	}
	log := slog.New(slog.NewTextHandler(std.err, nil))
	opts := provider.Options{State: *state, Latency: *latency, Events: provider.Events{URL: *eventsURL, Logger: log}}
	if *eventsSecret != "" {
		secret, err := outbox.LoadSecret(*eventsSecret)
		if err != nil {
			log.Error("idem provider: cannot read the events' secret", "err", err)
			return exitRefused
		}
		opts.Events.Secret = secret
	}
	if *state == "" {
		log.Warn("no --state file: the provider keeps its state in memory only, and a restart forgets every key (a re-send after it executes again)")
	}
	srv, err := provider.Open(opts)
	if err != nil {
		log.Error("idem provider: cannot start", "err", err)
		return exitRefused
	}
	defer srv.Close()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Error("idem provider: cannot listen", "err", err)
		return exitRefused
	}
	return serveUntilDone(ctx, log, "idem provider", ln, &http.Server{
		Handler: srv.Handler(),
		// Requests held by the hang modes end with the command's context.
		BaseContext: func(net.Listener) context.Context { return ctx },
	})
}
