package shard

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Handler serves each authenticated request with the handler of its
// tenant's shard: it calls Identity once, asks Router for the caller's
// shard and hands the request to Shards[name], with the caller and the
// route in its context (RequestIdentity, RouteOf), so that the shard's
// handlers neither authenticate again nor guess the shard. Monitor links
// (GET /v1/operations/{id}) route the same way: an operation lives on
// its owner's shard.
//
// A request whose Identity fails goes to Public (health checks, the
// 401 of an unknown token); nil Public answers 401 UNAUTHENTICATED with
// a WWW-Authenticate challenge of Challenge. A request whose shard cannot
// be found gets 503 STORE_UNAVAILABLE (fail closed; ErrRouteUnavailable).
//
// Set the fields before serving and do not change them. Safe for
// concurrent use.
type Handler struct {
	// Router finds the caller's shard. Required.
	Router *Router
	// Identity authenticates a request. Required.
	Identity func(*http.Request) (idem.Identity, error)
	// Shards are the handlers by shard name, each serving with that
	// shard's store and identity function RequestIdentity. Required: one
	// per shard of Router.
	Shards map[string]http.Handler
	// Public serves requests without an identity; see Handler.
	Public http.Handler
	// Challenge is the auth scheme of the 401's WWW-Authenticate;
	// "" means "Bearer".
	Challenge string
}

type ctxKey int

const (
	keyIdentity ctxKey = iota
	keyRoute
)

// ErrNoIdentity: RequestIdentity was called on a request that Handler did
// not authenticate.
var ErrNoIdentity = errors.New("shard: the request was not authenticated by shard.Handler")

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, err := h.Identity(r)
	if err != nil {
		if h.Public != nil {
			h.Public.ServeHTTP(w, r)
			return
		}
		challenge := h.Challenge
		if challenge == "" {
			challenge = "Bearer"
		}
		w.Header().Set("WWW-Authenticate", challenge)
		idemhttp.WriteProblem(w, idem.CodeUnauthenticated, "authentication required")
		return
	}
	route, err := h.Router.Route(r.Context(), id.Tenant)
	next, ok := h.Shards[route.Name]
	if err != nil || !ok {
		idemhttp.WriteProblem(w, idem.CodeStoreUnavailable, "the tenant's shard cannot be found; retry later")
		return
	}
	ctx := context.WithValue(context.WithValue(r.Context(), keyIdentity, id), keyRoute, route)
	next.ServeHTTP(w, r.WithContext(ctx))
}

// RequestIdentity returns the caller Handler authenticated, or
// ErrNoIdentity: the Identity function of the shards' handlers.
func RequestIdentity(r *http.Request) (idem.Identity, error) {
	id, ok := r.Context().Value(keyIdentity).(idem.Identity)
	if !ok {
		return idem.Identity{}, ErrNoIdentity
	}
	return id, nil
}

// RouteOf returns the route Handler chose for the request whose context
// ctx is (or derives from), and whether there is one.
func RouteOf(ctx context.Context) (Route, bool) {
	route, ok := ctx.Value(keyRoute).(Route)
	return route, ok
}
