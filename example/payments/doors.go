package payments

import (
	"context"
	"net/http"
	"path"
	"strings"

	"github.com/idemkit/idem"
)

// CodeMethodNotAllowed (405): the path exists, the method does not; the
// Allow header lists the methods it takes.
const CodeMethodNotAllowed idem.Code = "METHOD_NOT_ALLOWED"

// Handler returns the service's routes. Every answer is the service's own:
// a request no route matches gets application/problem+json too — 404
// NOT_FOUND for an unknown path, 405 METHOD_NOT_ALLOWED with the Allow
// header for a known path with another method — never the mux's
// text/plain.
//
// Nor is any request redirected: a path that is not in its clean form
// (an empty segment as in //v1/payments, a . or .. segment as in
// /v1/../v1/payments), which the mux would answer with a 307 to the
// clean path and a text/html body, is 404 NOT_FOUND, for every method.
// A payments API must not have a client's POST re-sent to another URL by
// a redirect it may follow blindly, nor name one resource by several
// paths; the client's own path is wrong, and it should fix it. (The
// mux's other redirect, /tree to /tree/, needs a pattern ending in a
// slash, which the service does not register; a redirect would be
// answered 404 all the same.)
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect && !cleanPath(r.URL.EscapedPath()) {
			writeProblem(w, http.StatusNotFound, CodeNotFound, "no such resource: the path is not in its clean form (no empty, . or .. segments)")
			return
		}
		h, pattern := s.mux.Handler(r)
		if pattern != "" {
			s.mux.ServeHTTP(w, r)
			return
		}
		// No route: ask the mux what it would answer (404, or 405 with
		// Allow) and say it in problem+json.
		probe := &headerProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeProblem(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "the resource does not take "+r.Method)
		default: // 404, or a redirect (see above)
			writeProblem(w, http.StatusNotFound, CodeNotFound, "no such resource")
		}
	})
}

// cleanPath reports whether p, a request's escaped path, is in the form
// the mux would not redirect: rooted, with no empty, . or .. segment
// (a trailing slash is kept by the mux and allowed here).
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// headerProbe records the status and headers a handler answers, and
// throws the body away.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }
func (p *headerProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}
func (p *headerProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// readyz handles GET /readyz, readiness (GET /healthz is liveness): 200
// {"status":"ready"} when the store answers within healthTimeout, the
// registry is not draining and this service's writer epoch is current;
// else 503 with the reason — STORE_UNAVAILABLE, DRAINING or WRITER_FENCED
// — so a load balancer stops sending new operations to it.
func (s *Service) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	ctl, err := s.store.Control(ctx)
	switch {
	case err != nil:
		s.storeFailed(w, r, "readiness check", err)
	case ctl.Draining:
		writeProblem(w, http.StatusServiceUnavailable, idem.CodeDraining, "the registry is draining: no new operations are accepted")
	case ctl.WriterEpoch > s.epoch:
		writeProblem(w, http.StatusServiceUnavailable, idem.CodeWriterFenced, "this server's writer epoch is no longer current")
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}
