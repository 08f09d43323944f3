package console

import (
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
	// Lookups are the recorded lookups of its effects, by whoever asked.
	Lookups []registry.Lookup
	// Pending is its settlement request waiting for (or given) a second
	// operator's approval, nil if none.
	Pending *registry.PendingSettlement
	// CanApprove: the approve form is shown (UNKNOWN, reconcilable, a
	// request not yet approved, and the viewer is not its requester).
	CanApprove bool
	// Attempt is the recovery worker's record of its failed attempts to
	// settle it (registry.RecoveryAttempt): the last error and the next
	// attempt; nil if none is recorded. Display only.
	Attempt *registry.RecoveryAttempt
	// Tenant is what the page says about the operation's tenant.
	Tenant tenantView
}

// tenantView is an operation's tenant as this operator may see it.
type tenantView struct {
	Hash string // hex of Record.TenantHash; "" for an unattributed record
	// Name is the tenant, when the operator may see it (ShowTenants) and
	// Config.Tenants names one with this hash; else "".
	Name string
	// Hidden: the operator may not see tenant names.
	Hidden bool
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
	// Failed: the answer proves nothing (timeout, 5xx, unreadable); the
	// page shows it as LOOKUP_FAILED.
	Failed bool `json:"failed,omitempty"`
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
	var perr *pageError
	if lv != nil && lv.Failed {
		perr = &pageError{Code: CodeLookupFailed, Message: "The downstream's answer proves nothing about key " + lv.Key + ": " + lv.Detail}
	}
	h.renderOperation(w, r, s, http.StatusOK, reconcileForm{}, lv, perr)
}

// renderOperation reads operation {id} and renders its page.
func (h *handler) renderOperation(w http.ResponseWriter, r *http.Request, s session, code int, form reconcileForm, lv *lookupView, perr *pageError) {
	ctx, id := r.Context(), r.PathValue("id")
	rec, err := h.cfg.Store.GetByID(ctx, id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		h.failID(w, r, s, http.StatusNotFound, CodeNotFound, "There is no operation ", id, ".")
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
	if err == nil {
		v.Lookups, err = h.cfg.Store.Lookups(ctx, id)
	}
	if err == nil && rec.State == idem.StateUnknown {
		var a registry.RecoveryAttempt
		if a, err = registry.LastRecoveryAttempt(ctx, h.cfg.Store, id); err == nil {
			v.Attempt = &a
		} else if errors.Is(err, registry.ErrNotFound) {
			err = nil
		}
	}
	if err == nil {
		var p registry.PendingSettlement
		if p, err = h.cfg.Store.PendingSettlement(ctx, id); err == nil {
			v.Pending = &p
		} else if errors.Is(err, registry.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	v.Tenant = h.tenantOf(rec, s.op)
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
		v.CanApprove = v.CanReconcile && v.Pending != nil && v.Pending.ApprovedBy == "" && v.Pending.RequestedBy != s.op.Name
	}
	if lv != nil && !slices.ContainsFunc(v.Effects, func(e registry.Effect) bool { return e.DownstreamKey == lv.Key }) {
		lv = nil // an answer about another operation's key is not this page's
	}
	v.Lookup = lv
	h.render(w, r, s, code, "operation", "Operation "+id, v, perr)
}

// operatorRefusals maps the codes of effect.OperatorError to the page's
// status and code; CodeNotFound is a page of its own.
var operatorRefusals = map[string]struct {
	status int
	code   string
}{
	effect.CodeOutcomeRequired:     {http.StatusUnprocessableEntity, CodeOutcomeRequired},
	effect.CodeEvidenceRequired:    {http.StatusUnprocessableEntity, CodeEvidenceRequired},
	effect.CodeEvidenceTooWeak:     {http.StatusUnprocessableEntity, CodeEvidenceTooWeak},
	effect.CodeHandleNotAllowed:    {http.StatusUnprocessableEntity, CodeInvalid},
	effect.CodeActorRequired:       {http.StatusUnprocessableEntity, CodeInvalid},
	effect.CodeNotUnknown:          {http.StatusConflict, CodeNotUnknown},
	effect.CodeNotSettleable:       {http.StatusConflict, CodeNotSettleable},
	effect.CodeContradictsEvidence: {http.StatusConflict, CodeContradictsEvidence},
	effect.CodeApprovalPending:     {http.StatusConflict, CodeApprovalPending},
	effect.CodeNothingToApprove:    {http.StatusConflict, CodeNothingToApprove},
	effect.CodeSelfApproval:        {http.StatusConflict, CodeSelfApproval},
	effect.CodeAlreadyApproved:     {http.StatusConflict, CodeAlreadyApproved},
}

// refused renders the operation page with the refusal err of an
// operator's decision (what the console's own pages show for
// effect.OperatorError codes), or a store failure.
func (h *handler) refused(w http.ResponseWriter, r *http.Request, s session, what string, form reconcileForm, err error) {
	id := r.PathValue("id")
	ec := effect.OperatorCode(err)
	if ec == effect.CodeNotFound {
		h.fail(w, r, s, http.StatusNotFound, CodeNotFound, err.Error())
		return
	}
	m, ok := operatorRefusals[ec]
	if !ok {
		m.status, m.code = http.StatusServiceUnavailable, CodeStoreUnavailable
		h.log.Error("console: "+what+" failed", "operator", s.op.Name, "operation_id", id, "err", err)
	}
	h.log.Info("console: "+what+" refused", "operator", s.op.Name, "operation_id", id, "code", m.code)
	h.renderOperation(w, r, s, m.status, form, nil, &pageError{Code: m.code, Message: err.Error()})
}

// reconcile settles an UNKNOWN operation on the operator's written
// evidence (POST /operations/{id}/reconcile) through the one path "idem
// ops reconcile" uses (effect.Set.SettleByOperator), the operator's name
// as actor. A decision that contradicts a recorded answer is refused; a
// "failed" without a recorded definite answer is stored as a request and
// waits for a second operator (approve).
func (h *handler) reconcile(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	form := reconcileForm{Outcome: r.PostFormValue("outcome"), Handle: r.PostFormValue("handle"), Evidence: r.PostFormValue("evidence")}
	req := effect.OperatorRequest{OperationID: id, Outcome: form.Outcome, Handle: form.Handle, Evidence: form.Evidence, Actor: s.op.Name}
	st, err := h.cfg.Effects.SettleByOperator(r.Context(), h.cfg.Store, req)
	if err != nil {
		h.refused(w, r, s, "reconcile", form, err)
		return
	}
	if st.Pending != nil {
		h.log.Info("console: reconcile waits for approval", "operator", s.op.Name, "operation_id", id, "outcome", st.Pending.Outcome)
		h.redirect(w, r, "/operations/"+url.PathEscape(id), "Requested: outcome "+st.Pending.Outcome+
			". No definite answer from the downstream is recorded, so a second operator must approve it; nothing else was changed.", nil)
		return
	}
	h.log.Info("console: reconcile", "operator", s.op.Name, "operation_id", id, "outcome", st.Record.State)
	h.redirect(w, r, "/operations/"+url.PathEscape(id), "Reconciled: "+string(idem.StateUnknown)+" → "+string(st.Record.State)+".", nil)
}

// approve settles an UNKNOWN operation as its pending request says, on
// this operator's approval (POST /operations/{id}/approve), through the
// one path "idem ops approve" uses (effect.Set.ApproveByOperator).
func (h *handler) approve(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	st, err := h.cfg.Effects.ApproveByOperator(r.Context(), h.cfg.Store, id, s.op.Name)
	if err != nil {
		h.refused(w, r, s, "approve", reconcileForm{}, err)
		return
	}
	h.log.Info("console: approve", "operator", s.op.Name, "operation_id", id, "outcome", st.Record.State)
	h.redirect(w, r, "/operations/"+url.PathEscape(id), "Approved and reconciled: "+string(idem.StateUnknown)+" → "+string(st.Record.State)+".", nil)
}

// lookup asks an effect's downstream what it did with the effect's key,
// changing nothing but the record of the lookup (POST
// /operations/{id}/effects/{name}/lookup), through the one path "idem ops
// lookup" uses (effect.Set.LookupByOperator): the question and the answer
// are recorded on the effect and in the audit log. Every answer ends in a
// 303 to the operation's page (POST-redirect-GET), which shows it: an
// answer that proves nothing there as LOOKUP_FAILED.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request, s session) {
	ctx, id, name := r.Context(), r.PathValue("id"), r.PathValue("name")
	res, err := h.cfg.Effects.LookupByOperator(ctx, h.cfg.Store, id, name, s.op.Name)
	switch ec := effect.OperatorCode(err); {
	case ec == effect.CodeNotFound:
		h.failID(w, r, s, http.StatusNotFound, CodeNotFound, "There is no operation ", id, ".")
		return
	case ec == effect.CodeEffectNotFound || ec == effect.CodeNotSettleable:
		h.failID(w, r, s, http.StatusNotFound, CodeNotFound, "This operation has no effect ", name, " this console can look up.")
		return
	case err != nil:
		h.storeFailed(w, r, s, err)
		return
	}
	a, l := res[0].Answer, res[0].Lookup
	lv := &lookupView{Effect: name, Key: l.DownstreamKey, Kind: a.Kind.String(), Handle: a.Handle, Detail: a.Detail, At: h.now().Unix()}
	h.log.Info("console: lookup", "operator", s.op.Name, "operation_id", id, "effect", name, "downstream_key", l.DownstreamKey, "answer", l.Answer)
	flash := "Looked up " + name + ": " + strings.ToLower(lv.Kind) + "."
	if _, ok := a.Evidence(); !ok && a.Kind != effect.NotFound {
		lv.Failed, flash = true, "Looked up "+name+": no answer that proves anything (recorded)."
	}
	b, _ := json.Marshal(lv)
	page := "/operations/" + url.PathEscape(id)
	h.redirect(w, r, page, flash, url.Values{"lookup": {h.seal(sealedFor("lookup", h.cfg.Prefix+page), string(b))}})
}

// tenantOf says what op may see of rec's tenant: its hash always, its
// name with ShowTenants when one of Config.Tenants hashes to it.
func (h *handler) tenantOf(rec registry.Record, op Operator) tenantView {
	if rec.TenantHash == ([32]byte{}) {
		return tenantView{}
	}
	v := tenantView{Hash: hex.EncodeToString(rec.TenantHash[:]), Hidden: !op.ShowTenants}
	if op.ShowTenants {
		for _, t := range h.cfg.Tenants {
			if registry.TenantHash(t) == rec.TenantHash {
				v.Name = t
				break
			}
		}
	}
	return v
}
