package console

import (
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// Config configures the console. The zero value is not usable: Store and
// Operators are required.
type Config struct {
	// Store is the registry the console reads and changes. Required.
	Store registry.Store
	// Effects holds the operations whose effects can be looked up and
	// settled by an operator, by operation name. nil, or an operation not
	// in it: its pages show no lookup button and no reconcile form, and
	// say why.
	Effects effect.Set
	// Operators are the people who may log in (LoadOperators). Required,
	// non-empty, names unique, every token able to hold 128 random bits
	// (see LoadOperators); SetOperators replaces them later.
	Operators Operators
	// Logger receives one Info line per action (login, logout, lookup,
	// reconcile, drain, epoch bump, rollout change) with the operator's name; nil means
	// slog.Default().
	Logger *slog.Logger
	// Prefix is the path the console is mounted under ("/admin"): it
	// starts with "/" and does not end with one. "" (the default) mounts
	// it at the root.
	Prefix string
	// Gatherer, when set, is read on every status page for its
	// idem_reservation_seconds histogram (package idemhttp's metrics,
	// every label set merged), drawn as the "Acceptance latency" chart;
	// "idem serve" passes the registry its /metrics serves. nil (the
	// default): the chart is left out, with a sentence saying why.
	Gatherer prometheus.Gatherer
	// Operations are the names of the service's idempotent operations:
	// the Rollout page lists each, with its change form, even before the
	// registry holds a row for it ("idem serve" passes the reference
	// service's). nil: the page lists the rows the registry holds only.
	Operations []string
	// Shard, when set, names the shard Store is (a service whose tenants
	// are spread over several registries, package shard): every page says
	// "shard NAME" beside the navigation, so an operator knows which
	// tenants' operations the console shows. "" (the default): no shard.
	Shard string
	// Shards, when set, link the consoles of the service's other shards
	// (each its own console, with its own login: its Prefix): every page
	// lists them beside the shard's name. nil (the default): no links.
	Shards []ShardLink
	// NoRelay says that no relay delivers this registry's outbox ("idem
	// serve" without --webhook): the status page then shows "no relay
	// configured" instead of a pending count and a lag that only grow.
	// false (the default): a relay is assumed and its lag shown.
	NoRelay bool
	// Tenants are the tenant names the service knows ("idem serve" passes
	// those of its tokens): a record stores only its tenant's hash
	// (registry.TenantHash), so the operation page names the tenant, to
	// an operator with ShowTenants, only when one of these hashes to it,
	// and otherwise says that the name is not known here. nil: hashes
	// only.
	Tenants []string
}

// ShardLink is a link to the console of one shard (Config.Shards).
type ShardLink struct {
	// Name is the shard's name, Href the path of its console's status
	// page ("/shards/b/").
	Name, Href string
}

//go:embed templates/*.html templates/console.css
var files embed.FS

// pageNames are the pages, each templates/NAME.html rendered inside
// templates/layout.html.
var pageNames = []string{"login", "status", "operations", "operation", "rollouts", "rollout", "error"}

// handler is the console.
type handler struct {
	cfg      Config
	log      *slog.Logger
	key      [32]byte // signs sessions, CSRF tokens, flashes and lookup results
	pages    map[string]*template.Template
	css      []byte
	mux      *http.ServeMux
	throttle *throttle                 // refused logins, per source and in all
	sessions sessions                  // the live sessions
	ops      atomic.Pointer[Operators] // the operators: cfg.Operators until SetOperators
	now      func() time.Time          // the clock sessions are issued and checked by: time.Now; tests set it (export_test.go)
}

// New returns the console as an http.Handler for cfg. It refuses a
// Config without Store or with invalid Operators or Prefix. The handler
// is safe for concurrent use; each request's context governs the store
// and downstream calls made for it. Sessions are signed with a key drawn
// at random by New: they do not survive a restart, nor work across two
// handlers.
func New(cfg Config) (http.Handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("console: Config.Store is required")
	case cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")):
		return nil, fmt.Errorf("console: Config.Prefix %q: want \"\" or a path like /admin", cfg.Prefix)
	}
	if err := cfg.Operators.validate(); err != nil {
		return nil, fmt.Errorf("console: Config.Operators: %w", err)
	}
	h := &handler{cfg: cfg, log: cfg.Logger, pages: map[string]*template.Template{}, now: time.Now}
	if h.log == nil {
		h.log = slog.Default()
	}
	rand.Read(h.key[:])
	h.throttle = newThrottle()
	h.ops.Store(&cfg.Operators)
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	css, err := fs.ReadFile(files, "templates/console.css")
	if err != nil {
		return nil, err
	}
	h.css = css
	h.routes()
	return h, nil
}

// routes registers every page and action.
func (h *handler) routes() {
	p := h.cfg.Prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/login", h.loginPage)
	m.HandleFunc("POST "+p+"/login", h.login)
	m.HandleFunc("GET "+p+"/console.css", h.stylesheet)
	m.HandleFunc("POST "+p+"/logout", h.authed(h.logout))
	m.HandleFunc("GET "+p+"/{$}", h.authed(h.status))
	m.HandleFunc("POST "+p+"/drain/on", h.authed(h.drain(true)))
	m.HandleFunc("POST "+p+"/drain/off", h.authed(h.drain(false)))
	m.HandleFunc("POST "+p+"/epoch/bump", h.authed(h.bumpEpoch))
	m.HandleFunc("GET "+p+"/operations", h.authed(h.operations))
	m.HandleFunc("GET "+p+"/operations/{id}", h.authed(h.operation))
	m.HandleFunc("POST "+p+"/operations/{id}/reconcile", h.authed(h.reconcile))
	m.HandleFunc("POST "+p+"/operations/{id}/approve", h.authed(h.approve))
	m.HandleFunc("POST "+p+"/operations/{id}/effects/{name}/lookup", h.authed(h.lookup))
	m.HandleFunc("GET "+p+"/rollouts", h.authed(h.rollouts))
	m.HandleFunc("GET "+p+"/rollouts/{operation}", h.authed(h.rolloutReport))
	m.HandleFunc("POST "+p+"/rollouts/{operation}", h.authed(h.setRollout))
	m.HandleFunc(p+"/", h.authed(func(w http.ResponseWriter, r *http.Request, s session) {
		h.fail(w, r, s, http.StatusNotFound, CodeNotFound, "There is no such page.")
	}))
	h.mux = m
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// maxForm bounds a form's body: a larger one is refused with 413
// FORM_TOO_LARGE, naming the limit (formTooLarge).
const maxForm = 64 << 10

// formTooLarge reads r's form within maxForm and reports whether it was
// too large; then it has answered 413 FORM_TOO_LARGE with a message
// naming the limit (rendered with s, the zero session on the login
// page). Another read error is left to the handler (its fields are
// empty).
func (h *handler) formTooLarge(w http.ResponseWriter, r *http.Request, s session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	var tooLarge *http.MaxBytesError
	if err := r.ParseForm(); !errors.As(err, &tooLarge) {
		return false
	}
	h.log.Info("console: form refused: too large", "operator", s.op.Name, "path", r.URL.Path, "limit", maxForm)
	h.fail(w, r, s, http.StatusRequestEntityTooLarge, CodeFormTooLarge, fmt.Sprintf(
		"The form is larger than %d KiB (%d bytes), the limit of a console form: nothing was changed. Shorten the text (evidence is kept to %d bytes) and send it again.",
		maxForm>>10, maxForm, registry.MaxAuditDetail))
	return true
}

// authed wraps a page that needs a session: without one, 303 to the login
// page; a POST without the session's CSRF token is refused with 403
// CSRF_INVALID, and one larger than maxForm with 413 FORM_TOO_LARGE.
func (h *handler) authed(fn func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.session(r)
		if !ok {
			http.Redirect(w, r, h.cfg.Prefix+"/login", http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			if h.formTooLarge(w, r, s) {
				return
			}
			if !h.csrfOK(r, s) {
				h.log.Info("console: form refused: missing or wrong CSRF token", "operator", s.op.Name, "path", r.URL.Path)
				h.fail(w, r, s, http.StatusForbidden, CodeCSRFInvalid, "The form's CSRF token is missing or wrong: reload the page and try again.")
				return
			}
		}
		fn(w, r, s)
	}
}

func (h *handler) stylesheet(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(h.css)
}
