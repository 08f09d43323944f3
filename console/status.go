package console

import (
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// countCap bounds the UNKNOWN records the status page reads for its
// "UNKNOWN by age" chart (the counts are exact).
const countCap = 1000

// Rows of the status page's tables.
const (
	statusPruneRuns = 10
	statusAudit     = 20
)

// statusView is the status page's data.
type statusView struct {
	Control       registry.Control
	UnknownCount  int64
	UnknownOldest string
	InFlight      int64
	Pending       int64
	RelayLag      string
	NoRelay       bool // Config.NoRelay: no relay delivers the outbox
	DeadLetters   int64
	UnknownAges   template.HTML // the "UNKNOWN by age" chart
	UnknownCap    int           // countCap when the chart counts only the oldest countCap, else 0
	Latency       template.HTML // the "Acceptance latency" chart; "" when LatencyNote says why not
	LatencyNote   string
	PruneRuns     []registry.PruneRun   // the newest statusPruneRuns
	Audit         []registry.AuditEntry // the newest statusAudit
}

// status shows the registry's health (GET /).
func (h *handler) status(w http.ResponseWriter, r *http.Request, s session) {
	h.renderStatus(w, r, s, http.StatusOK, nil)
}

func (h *handler) renderStatus(w http.ResponseWriter, r *http.Request, s session, code int, perr *pageError) {
	ctx := r.Context()
	st := h.cfg.Store
	var v statusView
	var err error
	if v.Control, err = st.Control(ctx); err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	unknown, err := st.ListOperations(ctx, registry.ListFilter{State: idem.StateUnknown, Limit: countCap})
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	if v.UnknownCount, err = st.CountOperations(ctx, registry.ListFilter{State: idem.StateUnknown}); err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	v.UnknownOldest = "—"
	if len(unknown) > 0 {
		v.UnknownOldest = age(unknown[0].CreatedAt)
	}
	v.UnknownAges = unknownAges(unknown, time.Now())
	if v.UnknownCount > int64(len(unknown)) {
		v.UnknownCap = countCap
	}
	v.Latency, v.LatencyNote = acceptanceLatency(h.cfg.Gatherer)
	for _, state := range []idem.State{idem.StateReserved, idem.StateExecuting} {
		n, err := st.CountOperations(ctx, registry.ListFilter{State: state})
		if err != nil {
			h.storeFailed(w, r, s, err)
			return
		}
		v.InFlight += n
	}
	if v.PruneRuns, err = st.PruneRuns(ctx, statusPruneRuns); err == nil {
		v.Audit, err = st.AuditLog(ctx, registry.AuditFilter{Limit: statusAudit})
	}
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	stats, err := st.OutboxStats(ctx)
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	v.Pending, v.DeadLetters, v.RelayLag, v.NoRelay = stats.Pending, stats.Dead, age(stats.OldestPending), h.cfg.NoRelay
	h.render(w, r, s, code, "status", "Status", v, perr)
}

// confirmed reports whether the form carries confirm=yes; when it does
// not it renders the status page with 422 CONFIRMATION_REQUIRED.
func (h *handler) confirmed(w http.ResponseWriter, r *http.Request, s session, what string) bool {
	if r.PostFormValue("confirm") == "yes" {
		return true
	}
	h.renderStatus(w, r, s, http.StatusUnprocessableEntity, &pageError{Code: CodeConfirmationRequired, Message: "Tick the confirmation box to " + what + "; nothing was changed."})
	return false
}

// drain sets the drain flag (POST /drain/on, /drain/off), as "idem drain
// on|off" does.
func (h *handler) drain(on bool) func(http.ResponseWriter, *http.Request, session) {
	word := map[bool]string{true: "on", false: "off"}[on]
	return func(w http.ResponseWriter, r *http.Request, s session) {
		if !h.confirmed(w, r, s, "turn drain "+word) {
			return
		}
		action := map[bool]string{true: registry.AuditDrainOn, false: registry.AuditDrainOff}[on]
		if !h.audited(w, r, s, action, "", "turn drain "+word+" (console)", func() error {
			return h.cfg.Store.SetDraining(r.Context(), on)
		}) {
			return
		}
		h.log.Info("console: drain "+word, "operator", s.op.Name)
		h.redirect(w, r, "/", "Drain is "+word+".", nil)
	}
}

// bumpEpoch raises the writer epoch (POST /epoch/bump), as "idem epoch
// bump" does.
func (h *handler) bumpEpoch(w http.ResponseWriter, r *http.Request, s session) {
	if !h.confirmed(w, r, s, "bump the writer epoch") {
		return
	}
	var e int64
	if !h.audited(w, r, s, registry.AuditEpochBump, "", "bump the writer epoch (console; the page showed epoch "+r.PostFormValue("epoch")+")", func() (err error) {
		e, err = h.cfg.Store.BumpEpoch(r.Context())
		return err
	}) {
		return
	}
	h.log.Info("console: epoch bump", "operator", s.op.Name, "writer_epoch", e)
	h.redirect(w, r, "/", fmt.Sprintf("Writer epoch is now %d: writers at older epochs are fenced.", e), nil)
}
