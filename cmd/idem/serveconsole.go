package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

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
	c := &adminConsole{log: log, ln: ln, served: make(chan error, 1),
		srv: &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	setClientLimits(c.srv)
	go func() { c.served <- c.srv.Serve(ln) }()
	return c, nil
}

// announce logs "console listening on ADDR" with the bound address.
func (c *adminConsole) announce() {
	bound := c.ln.Addr().String()
	c.log.Info("console listening on "+bound, "addr", bound)
}

// stop shuts the console down, waiting up to shutdownTimeout for pages
// being served.
func (c *adminConsole) stop(ctx context.Context) {
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
