package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
)

// runRelay implements "idem relay": it delivers the outbox of the
// registry named by --db (migrations applied at start) to --webhook, as
// "idem serve --webhook" does (see webhookFlags), and nothing else, until
// ctx is cancelled (SIGINT or SIGTERM in main); then it finishes the batch
// in hand and exits 0. Any number of relays and servers may deliver one
// outbox at once: each message is claimed by one of them at a time.
//
// With --metrics-addr it serves GET /metrics there: the relay metrics
// (outbox.NewMetrics) and idem_store_up (idemhttp.NewStoreUpCollector);
// with the database down, still 200, idem_store_up 0 and without the
// outbox gauges. It answers only the Host names of that address and
// localhost, as the admin listener of "idem serve" does (421
// HOST_NOT_ALLOWED otherwise), and logs "listening on ADDR" once bound.
// Logs go to stderr as slog text.
func runRelay(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("relay", "--webhook URL --webhook-secret-file FILE [--db DSN] [--metrics-addr ADDR] [webhook flags]", std)
	dsn := fs.db(defaultDB, "database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	metricsAddr := fs.String("metrics-addr", "", "serve GET /metrics on `ADDR` (host:port); empty: no metrics endpoint")
	wf := addWebhookFlags(fs.FlagSet)
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	}
	if *wf.url == "" {
		fmt.Fprintln(std.err, "idem relay: --webhook is required")
		return exitUsage
	}
	if err := wf.check(); err != nil {
		fmt.Fprintf(std.err, "idem relay: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(std.err, nil))
	store, err := idemstore.Open(ctx, *dsn, idemstore.Options{})
	if err != nil {
		log.Error("idem relay: cannot open the database", "err", err)
		return exitRefused
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		idemhttp.NewStoreUpCollector(store))
	relay, err := wf.relay(store, reg, log)
	if err != nil {
		log.Error("idem relay: cannot start", "err", err)
		return exitRefused
	}
	logRelay(log, relay, *wf.url)
	stop := runInBackground(ctx, relay.Run)
	defer stop()
	if *metricsAddr == "" {
		<-ctx.Done()
		log.Info("shutting down")
		return exitOK
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *metricsAddr)
	if err != nil {
		log.Error("idem relay: cannot listen", "err", err)
		return exitRefused
	}
	mux := http.NewServeMux()
	// ContinueOnError, as "idem serve" does: when the database does not
	// answer, the outbox gauges are left out of the scrape and the rest —
	// idem_store_up 0 among it — is served, rather than the whole scrape
	// failing 500.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	guard := hostGuard{allowed: allowedHosts(*metricsAddr, ln.Addr(), nil)} // as the admin listener: against DNS rebinding
	return serveUntilDone(ctx, log, "idem relay", ln, &http.Server{Handler: guard.Handler(mux)}, "db", idemstore.Kind(*dsn))
}

// webhookFlags are the outbox delivery flags of "idem serve" and "idem
// relay":
//
//	--webhook URL                 POST every outbox message to URL (serve: empty, the default, turns delivery off)
//	--webhook-secret-file FILE    the signing secret: "whsec_<base64>" (Standard Webhooks) or raw bytes; required with --webhook
//	--webhook-timeout D           bound on one delivery (default 10s)
//	--webhook-max-attempts N      failed attempts that make a message a dead letter (default 10)
//	--webhook-max-age D           a message failing at this age becomes a dead letter (default 72h)
//	--webhook-backoff D           wait after the first failed attempt, doubled after each next one up to 1h (default 1s)
//
// The relay claims batches of webhookBatch messages for a lease of twice
// the timeout plus five seconds (a batch is delivered concurrently, so
// that covers its deliveries and the bookkeeping), and polls every second
// when the outbox is empty.
type webhookFlags struct {
	url, secretFile *string
	timeout, maxAge *time.Duration
	backoff         *time.Duration
	maxAttempts     *int
}

// webhookBatch is the relay's batch: the most concurrent deliveries.
const webhookBatch = 16

func addWebhookFlags(fs *flag.FlagSet) webhookFlags {
	return webhookFlags{
		url:         fs.String("webhook", "", "deliver the outbox: POST every message to `URL`, signed (Standard Webhooks); empty: no delivery"),
		secretFile:  fs.String("webhook-secret-file", "", "`FILE` holding the webhook signing secret: whsec_<base64> or raw bytes"),
		timeout:     fs.Duration("webhook-timeout", outbox.DefaultWebhookTimeout, "bound on one webhook delivery; a slower one is a failed attempt"),
		maxAttempts: fs.Int("webhook-max-attempts", outbox.DefaultMaxAttempts, "failed delivery attempts after which a message becomes a dead letter (idem ops dead-letters)"),
		maxAge:      fs.Duration("webhook-max-age", outbox.DefaultMaxAge, "age at which a message that fails to be delivered becomes a dead letter"),
		backoff:     fs.Duration("webhook-backoff", outbox.DefaultBackoffBase, "wait after a message's first failed attempt; doubled after each next one, up to 1h"),
	}
}

// check validates the flags' values.
func (w webhookFlags) check() error {
	switch {
	case *w.url == "":
	case !validWebhookURL(*w.url):
		return errors.New("--webhook: want an absolute http:// or https:// URL")
	case *w.secretFile == "":
		return errors.New("--webhook needs --webhook-secret-file: deliveries are signed")
	}
	switch {
	case *w.timeout <= 0 || *w.maxAge <= 0 || *w.backoff <= 0:
		return errors.New("--webhook-timeout, --webhook-max-age and --webhook-backoff must be positive")
	case *w.maxAttempts <= 0:
		return errors.New("--webhook-max-attempts must be positive")
	}
	return nil
}

// validWebhookURL reports whether s is an absolute http or https URL.
func validWebhookURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// redacted is a URL fit for logs: without the password of its user info.
func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// relay builds the relay the flags describe, its metrics registered on reg.
func (w webhookFlags) relay(store registry.Store, reg prometheus.Registerer, log *slog.Logger) (*outbox.Relay, error) {
	secret, err := outbox.LoadSecret(*w.secretFile)
	if err != nil {
		return nil, err
	}
	client := &http.Client{
		Timeout:       *w.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &outbox.Relay{
		Store:       store,
		Publisher:   &outbox.Webhook{URL: *w.url, Secret: secret, Client: client},
		Batch:       webhookBatch,
		Lease:       2**w.timeout + 5*time.Second,
		MaxAttempts: *w.maxAttempts,
		MaxAge:      *w.maxAge,
		BackoffBase: *w.backoff,
		Metrics:     outbox.NewMetrics(reg, store),
		Logger:      log,
	}, nil
}

// logRelay logs where r delivers, the webhook's password redacted.
func logRelay(log *slog.Logger, r *outbox.Relay, webhook string) {
	log.Info("delivering the outbox", "webhook", redacted(webhook), "max_attempts", r.MaxAttempts, "max_age", r.MaxAge, "backoff", r.BackoffBase)
}

// runInBackground runs fn(ctx) in a goroutine; the returned function
// cancels it and waits for it to return.
func runInBackground(ctx context.Context, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx) //nolint:errcheck // maintenance loops return nil
	}()
	return func() {
		cancel()
		<-done
	}
}
