package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/idemkit/idem/example/provider"
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
	fs := newFlags("provider", "[--addr ADDR]", std)
	addr := fs.String("addr", "127.0.0.1:8090", "listen `ADDR` (host:port; port 0 picks a free one)")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	}
	log := slog.New(slog.NewTextHandler(std.err, nil))

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Error("idem provider: cannot listen", "err", err)
		return exitRefused
	}
	return serveUntilDone(ctx, log, "idem provider", ln, &http.Server{
		Handler: provider.New().Handler(),
		// Requests held by the hang modes end with the command's context.
		BaseContext: func(net.Listener) context.Context { return ctx },
	})
}
