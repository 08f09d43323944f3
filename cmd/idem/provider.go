package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idemkit/idem/provider"
)

// runProvider implements "idem provider": the stand-alone downstream
// transfer provider (see package provider), with its own in-memory
// idempotency, for "idem serve --provider URL" and for tests of unknown
// outcomes. Once the listener is bound it logs one line
//
//	time=… level=INFO msg="listening on 127.0.0.1:8090" addr=127.0.0.1:8090
//
// with the bound address (so --addr 127.0.0.1:0 works), and serves until
// ctx is cancelled (SIGINT or SIGTERM in main). Requests carry ctx as
// their base context, so requests held by the hang modes are cut off at
// once when ctx ends; the others get up to shutdownTimeout to finish. It
// then exits 0. Logs go to stderr as slog text; state dies with the
// process.
func runProvider(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("provider", flag.ContinueOnError)
	fs.SetOutput(std.err)
	addr := fs.String("addr", "127.0.0.1:8090", "listen `ADDR` (host:port; port 0 picks a free one)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(std.err, nil))

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Error("idem provider: cannot listen", "err", err)
		return exitRefused
	}
	srv := &http.Server{
		Handler:           provider.New().Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	bound := ln.Addr().String()
	log.Info("listening on "+bound, "addr", bound)

	select {
	case err := <-served: // Serve never returns nil
		log.Error("idem provider: serving failed", "err", err)
		return exitRefused
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	code := exitOK
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("idem provider: requests still running at the shutdown deadline were cut off", "err", err)
		srv.Close()
		code = exitRefused
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Error("idem provider: serving failed", "err", err)
		code = exitRefused
	}
	log.Info("stopped")
	return code
}
