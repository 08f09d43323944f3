package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// shutdownTimeout bounds how long a serving command waits for requests in
// flight when it stops; requests still running after it are cut off
// (their operations are left to recovery, as after a crash).
const shutdownTimeout = 30 * time.Second

// The limits every serving command puts on its clients, unless srv sets
// its own (docs/operations.md, "HTTP server limits"):
const (
	// maxHeaderBytes bounds a request's header fields; more answers 431
	// HEADERS_TOO_LARGE.
	maxHeaderBytes = 64 << 10
	// readHeaderTimeout cuts off a client that has not sent its header
	// fields within it (slow clients).
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds reading a whole request, body included. net/http
	// cancels a request's context when it expires, so it is well above
	// everything that happens before the acceptance point (the body, a
	// Prefer: wait); an execution past that point is not cut by it.
	readTimeout = time.Minute
	// idleTimeout closes a keep-alive connection idle this long.
	idleTimeout = time.Minute
)

// serveUntilDone serves srv on ln until ctx is done, then shuts it down,
// waiting up to shutdownTimeout for requests in flight. It applies the
// client limits above to the zero fields of srv, and wraps ln in
// idemhttp.ProblemListener, so that the requests net/http refuses itself
// are answered in problem+json too. Once serving, it logs the line
// "listening on ADDR" (the bound address, so port 0 works) with attrs.
// It returns the command's exit code: exitOK after a clean shutdown,
// exitRefused if serving failed or requests had to be cut off. name
// prefixes error logs ("idem serve").
func serveUntilDone(ctx context.Context, log *slog.Logger, name string, ln net.Listener, srv *http.Server, attrs ...any) int {
	return serveUntilDoneThen(ctx, log, name, ln, srv, nil, attrs...)
}

// serveUntilDoneThen is serveUntilDone that calls ready, when not nil,
// right after the "listening on ADDR" line: "idem serve" announces its
// console there, so the service's line is the first "listening on" of
// the process (harness/launch reads the first).
func serveUntilDoneThen(ctx context.Context, log *slog.Logger, name string, ln net.Listener, srv *http.Server, ready func(), attrs ...any) int {
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	setClientLimits(srv)
	ln = idemhttp.ProblemListener(ln)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	bound := ln.Addr().String()
	log.Info("listening on "+bound, append([]any{"addr", bound}, attrs...)...)
	if ready != nil {
		ready()
	}

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

// setClientLimits sets the zero client limits of srv to the defaults above.
func setClientLimits(srv *http.Server) {
	srv.MaxHeaderBytes = cmp.Or(srv.MaxHeaderBytes, maxHeaderBytes)
	srv.ReadHeaderTimeout = cmp.Or(srv.ReadHeaderTimeout, readHeaderTimeout)
	srv.ReadTimeout = cmp.Or(srv.ReadTimeout, readTimeout)
	srv.IdleTimeout = cmp.Or(srv.IdleTimeout, idleTimeout)
}
