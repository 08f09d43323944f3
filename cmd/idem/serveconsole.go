package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// adminServer is the admin listener of "idem serve --admin-addr ADDR":
// GET /metrics (the service's Prometheus registry) and, with --operators
// FILE, the operator console (package console; docs/console.md) — a
// second listener, never the API's, started before the service's and
// stopped after it, answering only the Host names of adminFlags.
type adminServer struct {
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	served chan error
	tls    bool
	hs     []http.Handler // the consoles, for SetOperators; none without --operators
	path   string         // the operators file
	hup    chan os.Signal
}

// consoleShard is what one console shows: a registry and its effects;
// name is its shard ("" without shards).
type consoleShard struct {
	name    string
	store   registry.Store
	effects effect.Set
	// noRelay: no relay delivers its outbox (no --webhook); the console
	// says so instead of showing a lag that only grows.
	noRelay bool
}

// consoleExtras is what every console of "idem serve" is told besides
// its shard: the tenant names of the tokens (console.Config.Tenants).
type consoleExtras struct {
	tenants []string
}

// startAdmin binds f's address and serves /metrics from metrics on it and,
// when f names an operators file, the console of consoles[0] at the
// root and, with shards, the console of every one of consoles at
// /shards/NAME/ (each its own login; every page links the others), with
// those operators (the status pages draw the acceptance latency from
// metrics). It logs nothing yet but the warning of an open address
// without TLS: announce logs the "listening on" line.
func startAdmin(ctx context.Context, log *slog.Logger, f adminFlags, consoles []consoleShard, operations []string, metrics prometheus.Gatherer, extra consoleExtras) (*adminServer, error) {
	tlsConf, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	// ContinueOnError: a collector whose database read fails is left out
	// of the scrape, and the rest — idem_store_up 0 among it — is served.
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	a := &adminServer{log: log, served: make(chan error, 1), tls: tlsConf != nil, path: *f.operators}
	if a.path != "" {
		ops, err := console.LoadOperators(a.path)
		if err != nil {
			return nil, err
		}
		var links []console.ShardLink
		for _, c := range consoles[1:] {
			links = append(links, console.ShardLink{Name: c.name, Href: "/shards/" + c.name + "/"})
		}
		for i, c := range consoles {
			prefix := ""
			if i > 0 {
				prefix = "/shards/" + c.name
			}
			h, err := console.New(console.Config{Store: c.store, Shard: c.name, Shards: links, Prefix: prefix, Effects: c.effects,
				Operators: ops, Logger: log, Gatherer: metrics, Operations: operations, NoRelay: c.noRelay, Tenants: extra.tenants})
			if err != nil {
				return nil, err
			}
			a.hs = append(a.hs, h)
			if prefix == "" {
				mux.Handle("/", h)
			} else {
				mux.Handle(prefix+"/", h)
			}
		}
	} else {
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			idemhttp.Problem{Status: http.StatusNotFound, Code: "NOT_FOUND", Detail: "This admin listener serves GET /metrics; the console needs --operators."}.Write(w)
		})
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *f.addr)
	if err != nil {
		return nil, err
	}
	a.ln = ln
	if !a.tls && !isLoopback(*f.addr) {
		log.Warn("ADMIN LISTENER WITHOUT TLS ON A NON-LOOPBACK ADDRESS: operator tokens, session cookies and metrics cross the network in clear text; give --admin-tls-cert and --admin-tls-key, or listen on 127.0.0.1",
			"addr", ln.Addr().String())
	}
	guard := hostGuard{allowed: f.allowedHosts(ln.Addr())}
	a.srv = &http.Server{Handler: guard.Handler(mux), TLSConfig: tlsConf, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	setClientLimits(a.srv)
	go func() {
		if a.tls {
			a.served <- a.srv.ServeTLS(ln, "", "")
		} else {
			a.served <- a.srv.Serve(idemhttp.ProblemListener(ln))
		}
	}()
	if len(a.hs) > 0 {
		a.hup = make(chan os.Signal, 1)
		signal.Notify(a.hup, syscall.SIGHUP)
		go a.reloads()
	}
	return a, nil
}

// reloads reads the operators file again on every SIGHUP until stop: the
// sessions of operators or tokens no longer in it end at once
// (console.SetOperators). A file that cannot be read or is invalid
// changes nothing; the error is logged.
func (a *adminServer) reloads() {
	for range a.hup {
		ops, err := console.LoadOperators(a.path)
		for _, h := range a.hs {
			if err == nil {
				err = console.SetOperators(h, ops)
			}
		}
		if err != nil {
			a.log.Error("idem serve: the operators file was not reloaded; the console keeps its operators", "err", err)
			continue
		}
		a.log.Info("console: operators reloaded", "operators", len(ops), "file", a.path)
	}
}

// announce logs "console listening on ADDR" (with the console) or "admin
// listening on ADDR" (metrics only) with the bound address and scheme.
func (a *adminServer) announce() {
	bound := a.ln.Addr().String()
	what := "admin"
	if len(a.hs) > 0 {
		what = "console"
	}
	scheme := "http"
	if a.tls {
		scheme = "https"
	}
	a.log.Info(what+" listening on "+bound, "addr", bound, "scheme", scheme)
}

// stop shuts the admin listener down, waiting up to shutdownTimeout for
// pages being served.
func (a *adminServer) stop(ctx context.Context) {
	if a.hup != nil {
		signal.Stop(a.hup)
		close(a.hup)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := a.srv.Shutdown(sctx); err != nil {
		a.log.Error("idem serve: admin requests still running at the shutdown deadline were cut off", "err", err)
		a.srv.Close()
	}
	if err := <-a.served; !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("idem serve: the admin listener failed", "err", err)
	}
}

// tenantsOf returns the tenants of tokens, each once, sorted.
func tenantsOf(tokens payments.Tokens) []string {
	var ts []string
	for _, id := range tokens {
		ts = append(ts, id.Tenant)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}
