package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// adminConsole is the operator console of "idem serve --admin-addr ADDR
// --operators FILE" (package console; docs/console.md): a second
// listener, started before the service's and stopped after it.
type adminConsole struct {
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	served chan error
	h      http.Handler // the console, for SetOperators
	path   string       // the operators file
	hup    chan os.Signal
}

// startConsole binds addr and serves the console on it for store and
// effects, with the operators of the file at path; its status page draws
// the acceptance latency from metrics (the registry /metrics serves). It
// logs nothing yet:
// announce logs the "console listening on ADDR" line.
func startConsole(ctx context.Context, log *slog.Logger, addr, path string, store registry.Store, effects effect.Set, metrics prometheus.Gatherer) (*adminConsole, error) {
	ops, err := console.LoadOperators(path)
	if err != nil {
		return nil, err
	}
	h, err := console.New(console.Config{Store: store, Effects: effects, Operators: ops, Logger: log, Gatherer: metrics})
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &adminConsole{log: log, ln: ln, served: make(chan error, 1), h: h, path: path, hup: make(chan os.Signal, 1),
		srv: &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	setClientLimits(c.srv)
	go func() { c.served <- c.srv.Serve(ln) }()
	signal.Notify(c.hup, syscall.SIGHUP)
	go c.reloads()
	return c, nil
}

// reloads reads the operators file again on every SIGHUP until stop: the
// sessions of operators or tokens no longer in it end at once
// (console.SetOperators). A file that cannot be read or is invalid
// changes nothing; the error is logged.
func (c *adminConsole) reloads() {
	for range c.hup {
		ops, err := console.LoadOperators(c.path)
		if err == nil {
			err = console.SetOperators(c.h, ops)
		}
		if err != nil {
			c.log.Error("idem serve: the operators file was not reloaded; the console keeps its operators", "err", err)
			continue
		}
		c.log.Info("console: operators reloaded", "operators", len(ops), "file", c.path)
	}
}

// announce logs "console listening on ADDR" with the bound address.
func (c *adminConsole) announce() {
	bound := c.ln.Addr().String()
	c.log.Info("console listening on "+bound, "addr", bound)
}

// stop shuts the console down, waiting up to shutdownTimeout for pages
// being served.
func (c *adminConsole) stop(ctx context.Context) {
	signal.Stop(c.hup)
	close(c.hup)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := c.srv.Shutdown(sctx); err != nil {
		c.log.Error("idem serve: console requests still running at the shutdown deadline were cut off", "err", err)
		c.srv.Close()
	}
	if err := <-c.served; !errors.Is(err, http.ErrServerClosed) {
		c.log.Error("idem serve: the console failed", "err", err)
	}
}
