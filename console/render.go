package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

// Error codes a page shows in #error's data-code, each with its HTTP
// status. They are stable: tests and scripts branch on them.
const (
	CodeCSRFInvalid          = "CSRF_INVALID"          // 403: a form without the session's CSRF token
	CodeEvidenceRequired     = "EVIDENCE_REQUIRED"     // 422: reconcile without written evidence
	CodeOutcomeRequired      = "OUTCOME_REQUIRED"      // 422: reconcile without succeeded or failed
	CodeNotUnknown           = "NOT_UNKNOWN"           // 409: reconcile of an operation that is not UNKNOWN
	CodeNotFound             = "NOT_FOUND"             // 404: no such operation, effect or page
	CodeConfirmationRequired = "CONFIRMATION_REQUIRED" // 422: drain or epoch bump without confirm=yes
	CodeUnauthenticated      = "UNAUTHENTICATED"       // 401: login with a token that is not an operator's
	CodeLoginThrottled       = "LOGIN_THROTTLED"       // 429: too many refused logins from the source or in all; Retry-After says when
	CodeLookupFailed         = "LOOKUP_FAILED"         // 502: the downstream's answer to a lookup proves nothing
	CodeStoreUnavailable     = "STORE_UNAVAILABLE"     // 503: the registry failed or cannot open what it stores
	CodeNotSettleable        = "NOT_SETTLEABLE"        // 409: reconcile of an operation kind not in Config.Effects
	CodeContradictsEvidence  = "CONTRADICTS_EVIDENCE"  // 409: reconcile against a result the downstream already gave
	CodeInvalid              = "INVALID"               // 422: another invalid form field
	CodeEvidenceTooWeak      = "EVIDENCE_TOO_WEAK"     // 422: evidence that names nothing checkable (effect.CheckEvidence)
	CodeApprovalPending      = "APPROVAL_PENDING"      // 409: another settlement request waits for approval
	CodeNothingToApprove     = "NOTHING_TO_APPROVE"    // 409: approve with no settlement request
	CodeSelfApproval         = "SELF_APPROVAL"         // 409: the requester approving their own request
	CodeAlreadyApproved      = "ALREADY_APPROVED"      // 409: the request was approved by someone else already
	CodeRolloutStale         = "ROLLOUT_STALE"         // 409: a rollout form based on a version that is no longer the row's
	CodeForceRequired        = "FORCE_REQUIRED"        // 409: turning off an operation that has been enforced, without force
	CodeFormTooLarge         = "FORM_TOO_LARGE"        // 413: a form body over 64 KiB; the message names the limit
)

// page is what every template gets.
type page struct {
	Prefix   string
	Shard    string      // Config.Shard
	Shards   []ShardLink // Config.Shards
	Operator string      // "" on the login page
	CSRF     string
	Flash    string
	Error    *pageError
	Title    string
	Data     any
}

// pageError is the #error element's content.
type pageError struct {
	Code    string
	Message string
	// ID, when set, is shown after Message, cut and isolated (see id),
	// and After after it: an ID the client chose must not run off the
	// page or reverse the text that follows it.
	ID, After string
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"age":  age,
	"when": when,
	"id":   isolate,
	// took renders the time from start to end, to the millisecond.
	"took": func(start, end time.Time) string { return end.Sub(start).Round(time.Millisecond).String() },
}

// Bounds of an ID as shown (isolate): longer ones are cut to their first
// idHead and last idTail runes around an ellipsis, the whole in the
// element's title.
const (
	idShown = 96
	idHead  = 64
	idTail  = 24
)

// isolate renders an ID (operation ID, downstream key, handle, message
// ID) in a <bdi class="id"> — its own bidirectional context, so a
// right-to-left override in it does not reverse what follows — cut to
// idShown runes (the full ID in the title attribute); the stylesheet
// lets it break anywhere.
func isolate(v string) template.HTML {
	full := template.HTMLEscapeString(v)
	r := []rune(v)
	if len(r) <= idShown {
		return template.HTML(`<bdi class="id">` + full + `</bdi>`)
	}
	cut := string(r[:idHead]) + "…" + string(r[len(r)-idTail:])
	return template.HTML(`<bdi class="id cut" title="` + full + `">` + template.HTMLEscapeString(cut) + `</bdi>`)
}

// when renders t and whether it is past or future, relative to now: a
// <time> element "2026-12-03T07:00:00Z (in 4m)" or "(12m ago)"; "—"
// for the zero time.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	d := time.Until(t)
	rel, side := "in "+short(d), "future"
	if d < 0 {
		rel, side = short(-d)+" ago", "past"
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" data-when="%s">%s <span class="rel">(%s)</span></time>`,
		t.UTC().Format(time.RFC3339), side, t.UTC().Format(time.RFC3339), rel))
}

// short renders d in its largest unit or two: "4m", "1h12m", "3d2h",
// "12s".
func short(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		if m := int(d%time.Hour) / int(time.Minute); m > 0 {
			return fmt.Sprintf("%dh%dm", int(d/time.Hour), m)
		}
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	if h := int(d%(24*time.Hour)) / int(time.Hour); h > 0 {
		return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), h)
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// age renders how long ago t was, to the second; "—" for the zero time.
func age(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return time.Since(t).Round(time.Second).String()
}

// render writes the page name with status.
func (h *handler) render(w http.ResponseWriter, r *http.Request, s session, status int, name, title string, data any, perr *pageError) {
	p := page{Prefix: h.cfg.Prefix, Shard: h.cfg.Shard, Shards: h.cfg.Shards, Title: title, Data: data, Error: perr}
	if s.op.Name != "" {
		p.Operator, p.CSRF = s.op.Name, h.csrf(s)
	}
	if f := r.URL.Query().Get("flash"); f != "" && r.Method == http.MethodGet {
		p.Flash, _ = h.unseal(sealedFor("flash", r.URL.EscapedPath()), f)
	}
	var b bytes.Buffer
	if err := h.pages[name].Execute(&b, p); err != nil {
		h.log.Error("console: render "+name, "err", err)
		http.Error(w, "console: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail renders the error page with code and message.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, s session, status int, code, msg string) {
	h.render(w, r, s, status, "error", "Error", nil, &pageError{Code: code, Message: msg})
}

// failID renders the error page with code and the message before, the
// ID id (cut and isolated) and after.
func (h *handler) failID(w http.ResponseWriter, r *http.Request, s session, status int, code, before, id, after string) {
	h.render(w, r, s, status, "error", "Error", nil, &pageError{Code: code, Message: before, ID: id, After: after})
}

// storeFailed renders 503 STORE_UNAVAILABLE for err and logs it.
func (h *handler) storeFailed(w http.ResponseWriter, r *http.Request, s session, err error) {
	h.log.Error("console: registry call failed", "operator", s.op.Name, "path", r.URL.Path, "err", err)
	h.fail(w, r, s, http.StatusServiceUnavailable, CodeStoreUnavailable, fmt.Sprintf("The registry failed: %v", err))
}

// redirect answers 303 to path (below the prefix, escaped) with a
// signed flash message and the extra query parameters q.
func (h *handler) redirect(w http.ResponseWriter, r *http.Request, path, flash string, q url.Values) {
	if q == nil {
		q = url.Values{}
	}
	target := h.cfg.Prefix + path
	if flash != "" {
		q.Set("flash", h.seal(sealedFor("flash", target), flash))
	}
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// sealedFor is the purpose a value carried in a page's query string is
// sealed for: its kind and the page's escaped path, so that a signed
// flash or lookup answer copied into another page's URL is not shown
// there.
func sealedFor(kind, path string) string { return kind + " " + path }
