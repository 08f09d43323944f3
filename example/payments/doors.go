package payments

import (
	"context"
	"net/http"

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
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := s.mux.Handler(r)
		if pattern != "" {
			s.mux.ServeHTTP(w, r)
			return
		}
		// No route: ask the mux what it would answer (404, 405 with
		// Allow, or a redirect to a clean path) and say it in
		// problem+json; a redirect goes out as the mux wrote it.
		probe := &headerProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusNotFound:
			writeProblem(w, http.StatusNotFound, CodeNotFound, "no such resource")
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeProblem(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "the resource does not take "+r.Method)
		default:
			s.mux.ServeHTTP(w, r)
		}
	})
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
