package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/maintenance"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// runServe implements "idem serve": the reference payments service (see
// package payments) on the registry named by --db, whose migrations are
// applied at start. Once the listener is bound it logs one line
//
//	time=… level=INFO msg="listening on 127.0.0.1:8080" addr=127.0.0.1:8080
//
// with the bound address (so --addr 127.0.0.1:0 works), and serves until
// ctx is cancelled (SIGINT or SIGTERM in main), then stops accepting
// connections, waits up to shutdownTimeout for requests in flight, closes
// the store and exits 0. Logs go to stderr as slog text.
//
// Every --prune-interval (default 1m; 0: off) it retires expired records
// into tombstones and deletes expired tombstones, in batches of
// registry.DefaultPruneBatch, logging what it did ("pruned retired=N
// deleted=M") and carrying on after errors; see maintenance.Runner and "idem
// prune".
//
// Records keep their response for --retention (default 24h), which must
// cover the longest of four windows in which a request may come again
// (see retentionFlags): --client-retry-window (default 24h),
// --queue-backlog-window (1h), --reconciliation-window (24h) and
// --restore-window (24h). A shorter --retention is refused at start with
// exit status 2.
//
// Every --recover-interval (default 5s) its recovery worker takes over the
// operations whose lease expired after an effect outside the database
// began, and settles UNKNOWN transfers on evidence from --provider (a
// lookup by the downstream key, then a re-send with the same key), with
// backoff, without any client retry; see maintenance.Runner and "idem recover".
// --provider-timeout (default 5s) bounds each provider call. With
// --provider-events-secret-file FILE (repeatable: a rotation) it receives
// the provider's signed transfer events at POST /webhooks/provider
// (payments.PathProviderEvents): an event for an UNKNOWN transfer makes
// the same lookup the worker makes, now, and only the lookup's answer
// settles it (docs/webhooks.md).
//
// --api-revision (default v1) names the API major revision bound into
// the scope of every operation without a --revision (SPEC C2): a server
// started with another revision never replays, conflicts with or waits
// for the operations of the first, on the same database — a retry that
// crosses the deploy executes again. --revision OP=REV:ACCEPTS (for
// example payments.create=v2:v1) gives one operation revision REV and
// declares that it accepts the records of the older revision ACCEPTS as
// its own: the scope is computed with ACCEPTS, so such a retry replays
// (or gets 422 if its payload differs). Declare it only when REV answers
// every request ACCEPTS accepted as ACCEPTS did. The revisions change
// nothing else; the routes stay the same.
//
// Each operation (payments.create, payments.refund, and transfers.create
// with --provider) follows its rollout row in the registry ("idem
// rollout": off, shadow, or enforce for a share of the callers) within
// about a second, without a restart; --mode OP=off|shadow|enforce
// (repeatable, default enforce) is its configured mode, used while the
// row sets none. An operation that has been enforced and is off here is
// served read-only (replays, 503 READ_ONLY for new keys) until "idem
// rollout OP off --force". transfers.create cannot be off. --mode and
// --revision of an operation the service does not serve are usage errors
// (exit 2). The verdict counts (idem rollout report) are written at each
// refresh and once more at shutdown.
//
// Every registry call made for a request is bounded by --store-timeout
// (default 1m; 0: unbounded): a database that does not answer in time —
// an exhausted pool, a lock held elsewhere — fails the request with 503
// STORE_UNAVAILABLE instead of holding it (registry.WithTimeout). Once a
// COMMIT is sent, though, it is waited for (on PostgreSQL: a cancelled
// wait for a synchronous standby would make an unreplicated outcome
// visible; idempg/commit.go).
//
// With --webhook URL (and --webhook-secret-file) it also delivers the
// outbox: every message is POSTed to URL, signed, retried with backoff and
// made a dead letter after --webhook-max-attempts failures or at
// --webhook-max-age; see webhookFlags, "idem relay" and
// docs/operations.md. Without --webhook nothing is delivered.
//
// With --admin-addr ADDR it serves, on a second listener that stops with
// the service, GET /metrics (Prometheus text; never on the API's port)
// and, with --operators FILE, the operator console (package console,
// docs/console.md) for the same store and the service's effects. Once the
// service's "listening on" line is logged it logs
//
//	time=… level=INFO msg="console listening on 127.0.0.1:8081" addr=127.0.0.1:8081 scheme=http
//
// ("admin listening on" without --operators). The admin listener answers
// only requests whose Host is the --admin-addr host, the bound IP,
// localhost, 127.0.0.1, ::1 or an --admin-host NAME; any other gets 421
// HOST_NOT_ALLOWED (against DNS rebinding). With --admin-tls-cert and
// --admin-tls-key it serves TLS; on a non-loopback address without them it
// logs a loud warning. --operators without --admin-addr, or one TLS flag
// without the other, is a usage error (exit 2); an unreadable operators
// file, certificate or key exits 1. On SIGHUP it reads
// the operators file again: the sessions of operators and tokens no
// longer in it end at once; an invalid file is logged and changes nothing.
//
// The server accepts and commits operations at the writer epoch given by
// --writer-epoch, by default the registry's epoch when it starts (logged
// as writer_epoch on the "listening on" line): "idem epoch bump" fences
// it at once and "idem drain on" stops its new operations within about a
// second (docs/operations.md).
//
// With --replay-cache N each operation answers replays of settled
// operations it has replayed before from an in-process cache of up to N
// records (--replay-cache-bytes bounds its memory), never within
// --replay-cache-margin (default 1m) of a record's expiry, after which
// pruning may retire it (docs/contract.md §8, "Replays from memory"). It
// is off by default: every replay then reads the registry.
//
// With --shard NAME=DSN (repeatable, instead of --db) it serves tenants
// spread over several registries, each beside its tenants' business
// tables (package shard; docs/operations.md, "Tenant-sharded
// registries"): the migrations are applied on every shard, each shard
// gets its own payments service and maintenance runner, and every
// request is authenticated once and served on its tenant's shard. The
// map from tenants to shards is the --shard-map FILE
// ({"default":"a","tenants":{"t1":"b"}}) or the idem_shard_directory
// table of the PostgreSQL shard --shard-directory (default: the
// --shard-default shard), read again within about a second of a change;
// a tenant the map does not name goes to --shard-default, which is
// required. A draining tenant's new keys get 503 DRAINING. /healthz and
// /readyz answer for every shard; the metrics carry a shard label; the
// console (--operators) shows one shard, --console-shard NAME (default:
// the default shard).
func runServe(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("serve", "[--addr ADDR] [--db DSN | --shard NAME=DSN … --shard-default NAME [--shard-map FILE]] [--auth FILE] [--provider URL] [--webhook URL …] [--admin-addr ADDR [--operators FILE] [--admin-tls-cert F --admin-tls-key F]] [flags]", std)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `ADDR` (host:port; port 0 picks a free one)")
	dsn := fs.db(defaultDB, "database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	auth := fs.String("auth", "", "bearer tokens `FILE`: {\"<token>\": {\"tenant\": \"…\", \"principal\": \"…\"}}; without it the token \"demo\" is accepted")
	provider := fs.String("provider", "", "downstream provider `URL` for POST /v1/transfers (see idem provider)")
	providerTimeout := fs.Duration("provider-timeout", payments.DefaultProviderTimeout, "bound on one provider call; a call that takes longer leaves its transfer UNKNOWN until settled on evidence")
	lease := fs.Duration("lease", 30*time.Second, "how long an execution owns its operation before recovery may take over")
	recoverEvery := fs.Duration("recover-interval", 5*time.Second, "how often the recovery worker looks for expired leases (see idem recover)")
	retention := fs.Duration("retention", 24*time.Hour, "how long operation records are kept with their response after they settle; then they become tombstones (409 KEY_RETIRED), as do reservations abandoned that long after their lease expired; at least the longest of --client-retry-window, --queue-backlog-window, --reconciliation-window and --restore-window")
	windows := addRetentionFlags(fs.FlagSet)
	pruneEvery := fs.Duration("prune-interval", time.Minute, "how often to retire expired records and delete expired tombstones; 0 turns it off (run \"idem prune\" instead)")
	apiRevision := fs.String("api-revision", payments.APIRevision, "API major `REVISION` bound into the scope of every operation without a --revision; "+
		"a new revision never replays, conflicts with or waits for an older one's records (a retry crossing the deploy executes again) unless it declares "+
		"compatibility with --revision OP=REV:ACCEPTS; the routes stay the same")
	keyRefresh := fs.Duration("key-refresh", defaultKeyRefresh, "with --encryption-keys: how often this instance announces the keys it holds in the registry and re-checks that every live instance holds the active key before sealing with it")
	storeTimeout := fs.Duration("store-timeout", registry.DefaultCallTimeout, "bound on each registry call made for a request; a call that takes longer fails the request with 503 STORE_UNAVAILABLE (0: unbounded)")
	twoPhase := fs.Bool("two-phase", false, "run POST /v1/payments and POST /v1/transfers in the two-phase style: reserve the key (committed), then run the payment and record its outcome; a duplicate sent meanwhile gets 409 IN_PROGRESS or waits (Prefer: wait). Default: one database transaction — payment, outbox message and operation record commit together, and a duplicate sent meanwhile waits for it and replays; a transfer commits its record with the provider call's downstream key before the call and the answer with the outcome after it")
	replayCache := fs.Int("replay-cache", 0, "answer replays of settled operations from an in-process cache of up to `N` records per operation (0: off, every replay reads the registry); a cached answer is never served within --replay-cache-margin of its record's retirement (docs/contract.md §8)")
	replayCacheBytes := fs.Int64("replay-cache-bytes", operation.DefaultReplayCacheBytes, "with --replay-cache: the memory bound of each operation's cache in `BYTES` (response bodies and headers, plus 512 bytes a record)")
	replayCacheMargin := fs.Duration("replay-cache-margin", operation.DefaultReplayCacheMargin, "with --replay-cache: how long before a record's expiry the cache stops serving it; must exceed the clock skew between this server and the database, and be shorter than --retention")
	webhook := addWebhookFlags(fs.FlagSet)
	eventSecrets := addEventSecretFlag(fs.FlagSet)
	keys := addKeysFlag(fs.FlagSet)
	admin := addAdminFlags(fs.FlagSet)
	modes, revisions := addRolloutFlags(fs.FlagSet)
	shards := addShardFlags(fs.FlagSet)
	epoch := fs.Int64("writer-epoch", -1, "writer `EPOCH` to accept and commit operations at; -1: the registry's epoch at start, so a later \"idem epoch bump\" fences this server")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	}
	if *replayCache < 0 || *replayCacheBytes <= 0 || *replayCacheMargin <= 0 {
		fmt.Fprintln(std.err, "idem serve: --replay-cache must not be negative, --replay-cache-bytes and --replay-cache-margin must be positive")
		return exitUsage
	}
	if *lease <= 0 || *recoverEvery <= 0 || *retention <= 0 || *pruneEvery < 0 || *storeTimeout < 0 {
		fmt.Fprintln(std.err, "idem serve: --lease, --recover-interval and --retention must be positive, --prune-interval and --store-timeout not negative")
		return exitUsage
	}
	if *replayCache > 0 && *replayCacheMargin >= *retention {
		// A cached answer is served only until its record's expiry minus
		// the margin: this cache would hold answers and serve none.
		fmt.Fprintf(std.err, "idem serve: --replay-cache-margin %v must be shorter than --retention %v, or the replay cache never serves an answer\n", *replayCacheMargin, *retention)
		return exitUsage
	}
	if err := windows.check(*retention); err != nil {
		fmt.Fprintf(std.err, "idem serve: %v\n", err)
		return exitUsage
	}
	if *apiRevision == "" {
		fmt.Fprintln(std.err, "idem serve: --api-revision must not be empty")
		return exitUsage
	}
	if err := webhook.check(); err != nil {
		fmt.Fprintf(std.err, "idem serve: %v\n", err)
		return exitUsage
	}
	if err := admin.check(); err != nil {
		return fs.usage(err.Error())
	}
	if *keyRefresh <= 0 {
		return fs.usage("--key-refresh must be positive")
	}
	if err := checkOperations(payments.Config{Provider: *provider}, modes, revisions); err != nil {
		return fs.usage(err.Error())
	}
	dbGiven := false
	fs.Visit(func(fl *flag.Flag) { dbGiven = dbGiven || fl.Name == "db" || fl.Name == "db-file" })
	if err := shards.check(dbGiven); err != nil {
		return fs.usage(err.Error())
	}
	if err := eventSecrets.check(*provider, shards.sharded()); err != nil {
		return fs.usage(err.Error())
	}
	if *epoch < -1 {
		fmt.Fprintln(std.err, "idem serve: --writer-epoch must be -1 (the registry's at start) or an epoch >= 0")
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(std.err, nil))

	tokens := payments.DemoTokens()
	if *auth != "" {
		var err error
		if tokens, err = payments.LoadTokens(*auth); err != nil {
			log.Error("idem serve: cannot read the tokens", "err", err)
			return exitRefused
		}
	} else {
		log.Warn(`no --auth file: accepting the demo token "demo" (tenant demo, principal demo)`)
	}

	opts, err := storeOptions(*keys)
	if err != nil {
		log.Error("idem serve: cannot read the key ring", "err", err)
		return exitRefused
	}
	if opts.Sealer == nil {
		log.Warn("no --encryption-keys file: response bodies are stored in plaintext (required for production: docs/operations.md, \"Encryption at rest\")")
	}
	secrets, err := eventSecrets.load()
	if err != nil {
		log.Error("idem serve: cannot read the provider's events secret", "err", err)
		return exitRefused
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	setup := shardSetup{log: log, opts: opts, keyRefresh: *keyRefresh, storeTimeout: *storeTimeout, webhook: webhook,
		svc: payments.Config{
			Auth:                 tokens,
			Lease:                *lease,
			Retention:            *retention,
			Provider:             *provider,
			ProviderTimeout:      *providerTimeout,
			ProviderEventSecrets: secrets,
			WriterEpoch:          *epoch,
			APIRevision:          *apiRevision,
			Modes:                modes,
			Revisions:            revisions,

			OneTransaction: !*twoPhase,
			ReplayCache:    operation.ReplayCache{Entries: *replayCache, Bytes: *replayCacheBytes, Margin: *replayCacheMargin},
		},
		runner: maintenance.Runner{RecoverEvery: *recoverEvery, Lease: *lease, PruneEvery: *pruneEvery},
	}
	if *pruneEvery == 0 {
		setup.runner.PruneEvery = -1 // --prune-interval 0: off
		log.Info("scheduled pruning is off (--prune-interval 0); run idem prune")
	}
	var (
		handler  http.Handler
		gatherer prometheus.Gatherer = reg
		first    *serveShard         // the only one, or the console's shard
		// shardServers are the shards by name; none without --shard.
		shardServers map[string]*serveShard
		attrs        []any
	)
	if shards.sharded() {
		srv, stop, err := setup.openShards(ctx, shards, reg)
		if err != nil {
			log.Error("idem serve: cannot start", "err", err)
			return exitRefused
		}
		defer stop()
		handler, gatherer, first, shardServers = srv.handler, srv.gatherer, srv.byName[shards.consoleName()], srv.byName
		attrs = []any{"shards", strings.Join(shards.list.names, ","), "default_shard", *shards.def}
	} else {
		one, stop, err := setup.openShard(ctx, "", *dsn, reg)
		if err != nil {
			log.Error("idem serve: cannot start", "err", err)
			return exitRefused
		}
		defer stop()
		handler, first = one.svc.Handler(), one
		attrs = []any{"db", idemstore.Kind(*dsn), "writer_epoch", one.svc.WriterEpoch()}
	}

	var ready func()
	if *admin.addr != "" {
		noRelay := *webhook.url == ""
		consoles := []consoleShard{{name: first.name, store: registry.WithTimeout(first.store, *storeTimeout), effects: first.svc.Effects(), noRelay: noRelay}}
		for _, name := range shards.list.names { // none without --shard
			one := shardServers[name]
			consoles = append(consoles, consoleShard{name: name, store: registry.WithTimeout(one.store, *storeTimeout), effects: one.svc.Effects(), noRelay: noRelay})
		}
		a, err := startAdmin(ctx, log, *admin, consoles, payments.Operations(payments.Config{Provider: *provider}), gatherer, consoleExtras{tenants: tenantsOf(tokens)})
		if err != nil {
			log.Error("idem serve: cannot start the admin listener", "err", err)
			return exitRefused
		}
		defer a.stop(ctx)
		ready = a.announce
	} else {
		log.Info("no --admin-addr: metrics are not served (they are never served on the API's port)")
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Error("idem serve: cannot listen", "err", err)
		return exitRefused
	}
	return serveUntilDoneThen(ctx, log, "idem serve", ln, &http.Server{Handler: handler}, ready, attrs...)
}
