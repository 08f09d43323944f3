package console

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// operationAudit is the number of audit entries an operation's page shows.
const operationAudit = 50

// detailView is the operation page's data.
type detailView struct {
	Rec             registry.Record
	Response        *responseView
	Effects         []registry.Effect
	Reconciliations []registry.ReconciliationEntry
	Outbox          []registry.OutboxMessage
	Audit           []registry.AuditEntry // the newest operationAudit entries about it
	// WhyNot, when set, says why the operation's effects cannot be
	// looked up or settled here (its kind is not in Config.Effects).
	WhyNot string
	// CanReconcile: the reconcile form is shown (UNKNOWN, and WhyNot
	// empty).
	CanReconcile bool
	Form         reconcileForm
	Lookup       *lookupView
}

// responseView is a stored response's metadata, and its body for an
// operator with ShowResponses.
type responseView struct {
	Status    int
	MediaType string
	Location  string
	ETag      string
	Size      int
	Digest    string
	Body      string
	ShowBody  bool
}

// reconcileForm is what the operator typed into the reconcile form.
type reconcileForm struct {
	Outcome  string
	Handle   string
	Evidence string
}

// lookupView is a downstream's answer to a lookup by key.
type lookupView struct {
	Effect string `json:"effect"`
	Key    string `json:"key"`
	Kind   string `json:"kind"`
	Handle string `json:"handle"`
	Detail string `json:"detail"`
	At     int64  `json:"at"` // when it was asked, Unix seconds
}

// lookupShown is how long after a lookup its answer is still shown: a
// link to an older one shows the page without it.
const lookupShown = 10 * time.Minute

// operation shows one operation (GET /operations/{id}).
func (h *handler) operation(w http.ResponseWriter, r *http.Request, s session) {
	var lv *lookupView
	if raw, ok := h.unseal(sealedFor("lookup", r.URL.EscapedPath()), r.URL.Query().Get("lookup")); ok {
		lv = new(lookupView)
		if json.Unmarshal([]byte(raw), lv) != nil || lv.Key == "" || h.now().Sub(time.Unix(lv.At, 0)) > lookupShown {
			lv = nil
		}
	}
	h.renderOperation(w, r, s, http.StatusOK, reconcileForm{}, lv, nil)
}

// renderOperation reads operation {id} and renders its page.
func (h *handler) renderOperation(w http.ResponseWriter, r *http.Request, s session, code int, form reconcileForm, lv *lookupView, perr *pageError) {
	ctx, id := r.Context(), r.PathValue("id")
	rec, err := h.cfg.Store.GetByID(ctx, id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		h.fail(w, r, s, http.StatusNotFound, CodeNotFound, "There is no operation "+id+".")
		return
	case errors.Is(err, registry.ErrUnreadable), errors.Is(err, idem.ErrDigestMismatch):
		h.log.Error("console: stored response cannot be read", "operator", s.op.Name, "operation_id", id, "err", err)
		h.fail(w, r, s, http.StatusServiceUnavailable, CodeStoreUnavailable,
			"The stored response of operation "+id+" cannot be read (its key is not in this server's key ring, or it does not match its digest), so its record cannot be shown.")
		return
	case err != nil:
		h.storeFailed(w, r, s, err)
		return
	}
	v := detailView{Rec: rec, Form: form}
	if v.Effects, err = h.cfg.Store.Effects(ctx, id); err == nil {
		v.Reconciliations, err = h.cfg.Store.Reconciliations(ctx, id)
	}
	if err == nil {
		v.Outbox, err = h.cfg.Store.OperationOutbox(ctx, id)
	}
	if err == nil {
		v.Audit, err = h.cfg.Store.AuditLog(ctx, registry.AuditFilter{OperationID: id, Limit: operationAudit})
	}
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	if resp := rec.Response; resp != nil {
		d := resp.Digest()
		v.Response = &responseView{Status: resp.Status, MediaType: resp.MediaType, Location: resp.Location, ETag: resp.ETag,
			Size: len(resp.Body), Digest: hex.EncodeToString(d[:]), ShowBody: s.op.ShowResponses}
		if s.op.ShowResponses {
			v.Response.Body = string(resp.Body)
		}
	}
	switch {
	case h.cfg.Effects[rec.Operation] == nil:
		v.WhyNot = "This console has no effects configured for operations of kind " + rec.Operation +
			", so it can neither ask their downstream nor render their result: settle it from its own service."
	default:
		v.CanReconcile = rec.State == idem.StateUnknown
	}
	if lv != nil && !slices.ContainsFunc(v.Effects, func(e registry.Effect) bool { return e.DownstreamKey == lv.Key }) {
		lv = nil // an answer about another operation's key is not this page's
	}
	v.Lookup = lv
	h.render(w, r, s, code, "operation", "Operation "+id, v, perr)
}

// reconcile settles an UNKNOWN operation on the operator's written
// evidence (POST /operations/{id}/reconcile) through the one path "idem
// ops reconcile" uses (effect.Set.SettleByOperator), the operator's name
// as actor.
func (h *handler) reconcile(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	form := reconcileForm{Outcome: r.PostFormValue("outcome"), Handle: r.PostFormValue("handle"), Evidence: r.PostFormValue("evidence")}
	req := effect.OperatorRequest{OperationID: id, Outcome: form.Outcome, Handle: form.Handle, Evidence: form.Evidence, Actor: s.op.Name}
	st, err := h.cfg.Effects.SettleByOperator(r.Context(), h.cfg.Store, req)
	if err != nil {
		status, code := http.StatusServiceUnavailable, CodeStoreUnavailable
		switch effect.OperatorCode(err) {
		case effect.CodeOutcomeRequired:
			status, code = http.StatusUnprocessableEntity, CodeOutcomeRequired
		case effect.CodeEvidenceRequired:
			status, code = http.StatusUnprocessableEntity, CodeEvidenceRequired
		case effect.CodeHandleNotAllowed:
			status, code = http.StatusUnprocessableEntity, CodeInvalid
		case effect.CodeNotUnknown:
			status, code = http.StatusConflict, CodeNotUnknown
		case effect.CodeNotSettleable:
			status, code = http.StatusConflict, CodeNotSettleable
		case effect.CodeContradictsEvidence:
			status, code = http.StatusConflict, CodeContradictsEvidence
		case effect.CodeNotFound:
			h.fail(w, r, s, http.StatusNotFound, CodeNotFound, err.Error())
			return
		default:
			h.log.Error("console: reconcile failed", "operator", s.op.Name, "operation_id", id, "err", err)
		}
		h.log.Info("console: reconcile refused", "operator", s.op.Name, "operation_id", id, "code", code)
		h.renderOperation(w, r, s, status, form, nil, &pageError{code, err.Error()})
		return
	}
	h.log.Info("console: reconcile", "operator", s.op.Name, "operation_id", id, "outcome", st.Record.State)
	h.redirect(w, r, "/operations/"+url.PathEscape(id), "Reconciled: "+string(idem.StateUnknown)+" → "+string(st.Record.State)+".", nil)
}

// lookup asks an effect's downstream what it did with the effect's key,
// changing nothing (POST /operations/{id}/effects/{name}/lookup). A
// definite answer is shown on the operation page it redirects to; an
// answer that proves nothing is 502 LOOKUP_FAILED.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request, s session) {
	ctx, id, name := r.Context(), r.PathValue("id"), r.PathValue("name")
	rec, err := h.cfg.Store.GetByID(ctx, id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		h.fail(w, r, s, http.StatusNotFound, CodeNotFound, "There is no operation "+id+".")
		return
	case err != nil:
		h.storeFailed(w, r, s, err)
		return
	}
	var d effect.Downstream
	if op := h.cfg.Effects[rec.Operation]; op != nil {
		d = op.Downstreams[name]
	}
	effs, err := h.cfg.Store.Effects(ctx, id)
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	var key string
	for _, e := range effs {
		if e.Name == name {
			key = e.DownstreamKey
		}
	}
	if d == nil || key == "" {
		h.fail(w, r, s, http.StatusNotFound, CodeNotFound, "Operation "+id+" has no effect "+name+" this console can look up.")
		return
	}
	if !h.audited(w, r, s, registry.AuditLookup, id, "ask "+name+" for key "+key, nil) {
		return
	}
	a := d.Lookup(ctx, key)
	lv := &lookupView{Effect: name, Key: key, Kind: a.Kind.String(), Handle: a.Handle, Detail: a.Detail, At: h.now().Unix()}
	answer := registry.AuditEntry{Actor: s.op.Name, Action: registry.AuditLookup, OperationID: id,
		Detail: "answer of " + name + " for key " + key + ": " + lv.Kind + ", handle " + cmp.Or(a.Handle, "none") + "; " + a.Detail}
	if _, err := h.cfg.Store.AppendAudit(ctx, answer.Clipped()); err != nil {
		h.log.Error("console: the audit entry of a lookup's answer could not be written", "operator", s.op.Name, "operation_id", id, "err", err)
	}
	h.log.Info("console: lookup", "operator", s.op.Name, "operation_id", id, "effect", name, "downstream_key", key, "answer", lv.Kind)
	if _, ok := a.Evidence(); !ok && a.Kind != effect.NotFound {
		h.renderOperation(w, r, s, http.StatusBadGateway, reconcileForm{}, lv,
			&pageError{CodeLookupFailed, "The downstream's answer proves nothing about key " + key + ": " + a.Detail})
		return
	}
	b, _ := json.Marshal(lv)
	page := "/operations/" + url.PathEscape(id)
	h.redirect(w, r, page, "Looked up "+name+": "+strings.ToLower(lv.Kind)+".",
		url.Values{"lookup": {h.seal(sealedFor("lookup", h.cfg.Prefix+page), string(b))}})
}
