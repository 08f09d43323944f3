package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/registry"
)

// loginPage shows the login form (GET /login).
func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, session{}, http.StatusOK, "login", "Log in", nil, nil)
}

// login checks an operator token (POST /login): a valid one gets a
// session cookie and a 303 to the status page — once its audit entry is
// written (else 503); anything else — an API token included — 401
// UNAUTHENTICATED, with a login.failed audit entry. A source that made
// too many refused logins (throttle.go) gets 429 LOGIN_THROTTLED with
// Retry-After, its token not looked at.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.formTooLarge(w, r, session{}) {
		return
	}
	source := sourceOf(r.RemoteAddr)
	if wait, key, n := h.throttle.wait(source, h.now()); wait > 0 {
		if key != "" {
			h.auditRefused(r, registry.AuditLoginThrottled, fmt.Sprintf("%d logins refused unseen from %s", n, key))
		}
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.log.Info("console: login throttled", "remote", r.RemoteAddr, "retry_after", secs)
		h.render(w, r, session{}, http.StatusTooManyRequests, "login", "Log in", nil,
			&pageError{Code: CodeLoginThrottled, Message: fmt.Sprintf("Too many refused logins: try again in %d s.", secs)})
		return
	}
	tok := r.PostFormValue("token")
	op, ok := h.operatorOf(tok)
	if !ok {
		h.throttle.failed(source, h.now())
		h.auditRefused(r, registry.AuditLoginFailed, "from "+r.RemoteAddr)
		h.log.Info("console: login refused", "remote", r.RemoteAddr)
		h.render(w, r, session{}, http.StatusUnauthorized, "login", "Log in", nil,
			&pageError{Code: CodeUnauthenticated, Message: "That is not an operator token. API tokens cannot log in here."})
		return
	}
	if err := registry.Audited(r.Context(), h.cfg.Store, registry.AuditEntry{Actor: op.Name, Action: registry.AuditLogin, Detail: "from " + r.RemoteAddr}, nil); err != nil {
		h.storeFailed(w, r, session{}, err) // not logged in: the page shows no operator
		return
	}
	h.setCookie(w, r, h.newSessionCookie(tok, op, h.now().Add(sessionTTL)), int(sessionTTL/time.Second))
	h.log.Info("console: login", "operator", op.Name, "remote", r.RemoteAddr)
	h.redirect(w, r, "/", "Logged in as "+op.Name+".", nil)
}

// logout ends the session (POST /logout): it is removed from the live
// sessions, so its cookie no longer logs anyone in, and the cookie
// expires.
func (h *handler) logout(w http.ResponseWriter, r *http.Request, s session) {
	// Logging out takes no power, so it goes on when its entry cannot be
	// written (the error is logged).
	e := registry.AuditEntry{Actor: s.op.Name, Action: registry.AuditLogout}
	if _, err := h.cfg.Store.AppendAudit(r.Context(), e); err != nil {
		h.log.Error("console: the audit entry of a logout could not be written", "operator", s.op.Name, "err", err)
	}
	h.sessions.end(s.id)
	h.setCookie(w, r, "", -1)
	h.log.Info("console: logout", "operator", s.op.Name)
	h.redirect(w, r, "/login", "Logged out.", nil)
}

// auditRefused appends the audit entry of a refused login. The refusal
// stands whether or not it can be written (an error is logged).
func (h *handler) auditRefused(r *http.Request, action, detail string) {
	e := registry.AuditEntry{Actor: registry.AuditActorUnknown, Action: action, Detail: detail}
	if _, err := h.cfg.Store.AppendAudit(r.Context(), e); err != nil {
		h.log.Error("console: the audit entry of a refused login could not be written", "action", action, "err", err)
	}
}
