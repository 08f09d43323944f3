package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownTimeout bounds how long a serving command waits for requests in
// flight when it stops; requests still running after it are cut off
// (their operations are left to recovery, as after a crash).
const shutdownTimeout = 30 * time.Second

// serveUntilDone serves srv on ln until ctx is done, then shuts it down,
// waiting up to shutdownTimeout for requests in flight. Once serving, it
// logs the line "listening on ADDR" (the bound address, so port 0 works)
// with attrs. It returns the command's exit code: exitOK after a clean
// shutdown, exitRefused if serving failed or requests had to be cut off.
// name prefixes error logs ("idem serve").
func serveUntilDone(ctx context.Context, log *slog.Logger, name string, ln net.Listener, srv *http.Server, attrs ...any) int {
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = 10 * time.Second
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	bound := ln.Addr().String()
	log.Info("listening on "+bound, append([]any{"addr", bound}, attrs...)...)

	select {
	case err := <-served: // Serve never returns nil
		log.Error(name+": serving failed", "err", err)
		return exitRefused
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	code := exitOK
	if err := srv.Shutdown(sctx); err != nil {
		log.Error(name+": requests still running at the shutdown deadline were cut off", "err", err)
		srv.Close()
		code = exitRefused
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Error(name+": serving failed", "err", err)
		code = exitRefused
	}
	log.Info("stopped")
	return code
}
