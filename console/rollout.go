package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/chart"
	"github.com/idemkit/idem/registry"
)

// The Rollout page (GET /rollouts) lists every operation's rollout row —
// the rows the registry holds and the operations of Config.Operations
// that have none yet — each with a form that changes it as "idem rollout
// OPERATION MODE" does: one compare-and-set on the version the page
// showed (a hidden field), audited with the logged-in operator as actor
// in the same transaction (registry.RolloutStore.SetRollout). GET
// /rollouts/{operation} is the operation's report: its verdict totals,
// shadow predictions beside enforce answers, per tenant and as a chart.

// rolloutView is the Rollout page's data.
type rolloutView struct {
	Rows []rolloutRow
}

// rolloutRow is one operation's row with its form's values.
type rolloutRow struct {
	registry.Rollout
	// Path is the operation's name escaped for a URL path segment.
	Path string
	// Allowed and Denied are the lists, comma-separated, as the form
	// takes them.
	Allowed, Denied string
}

// reportView is the report page's data.
type reportView struct {
	Row     rolloutRow
	Tenants []verdictTotals
	All     verdictTotals
	Chart   template.HTML
	// Verdicts are the verdict names in the report's order.
	Verdicts []string
}

// verdictOrder is the order in which the report lists the verdicts.
var verdictOrder = []string{registry.VerdictExecute, registry.VerdictReplay, registry.VerdictConflict, registry.VerdictInFlight,
	registry.VerdictKeyRefused, registry.VerdictKeyRetired, registry.VerdictRefused}

// verdictTotals are one tenant's (or every tenant's) counts by verdict:
// predicted in shadow, answered in enforce.
type verdictTotals struct {
	Tenant            string
	Shadow, Enforce   map[string]int64
	ShadowN, EnforceN int64
}

func newRow(r registry.Rollout) rolloutRow {
	return rolloutRow{Rollout: r, Path: url.PathEscape(r.Operation), Allowed: strings.Join(r.Allow, ","), Denied: strings.Join(r.Deny, ",")}
}

// rollouts shows the Rollout page (GET /rollouts).
func (h *handler) rollouts(w http.ResponseWriter, r *http.Request, s session) {
	h.renderRollouts(w, r, s, http.StatusOK, nil)
}

func (h *handler) renderRollouts(w http.ResponseWriter, r *http.Request, s session, code int, perr *pageError) {
	rs, err := h.cfg.Store.Rollouts(r.Context())
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	var v rolloutView
	for _, op := range h.cfg.Operations {
		if !slices.ContainsFunc(rs, func(x registry.Rollout) bool { return x.Operation == op }) {
			rs = append(rs, registry.Rollout{Operation: op})
		}
	}
	slices.SortFunc(rs, func(a, b registry.Rollout) int { return strings.Compare(a.Operation, b.Operation) })
	for _, x := range rs {
		v.Rows = append(v.Rows, newRow(x))
	}
	h.render(w, r, s, code, "rollouts", "Rollout", v, perr)
}

// setRollout applies the change form of one operation (POST
// /rollouts/{operation}).
func (h *handler) setRollout(w http.ResponseWriter, r *http.Request, s session) {
	op := r.PathValue("operation")
	if h.cfg.Operations != nil && !slices.Contains(h.cfg.Operations, op) {
		// Rows are never deleted: a row for a name no service serves
		// (a forged or mistyped path) would stay for good.
		row, err := h.cfg.Store.Rollout(r.Context(), op)
		if err != nil {
			h.storeFailed(w, r, s, err)
			return
		}
		if row.Version == 0 {
			h.fail(w, r, s, http.StatusNotFound, CodeNotFound, "There is no such operation: the service serves "+strings.Join(h.cfg.Operations, ", ")+".")
			return
		}
	}
	seen, err := strconv.ParseInt(r.PostFormValue("version"), 10, 64)
	if err != nil || seen < 0 {
		h.renderRollouts(w, r, s, http.StatusUnprocessableEntity, &pageError{Code: CodeInvalid, Message: "The form carries no version: reload the page; nothing was changed."})
		return
	}
	c := registry.RolloutChange{Operation: op, Mode: r.PostFormValue("mode"), Seen: seen, Actor: s.op.Name,
		ByPrincipal: r.PostFormValue("by_principal") == "yes", Force: r.PostFormValue("force") == "yes",
		Allow: tenantList(r.PostFormValue("tenants")), Deny: tenantList(r.PostFormValue("deny")),
		Reason: strings.TrimSpace(strings.TrimSpace(r.PostFormValue("reason")) + " (console)")}
	if p := strings.TrimSpace(r.PostFormValue("percent")); p != "" {
		if c.Percent, err = strconv.Atoi(p); err != nil {
			h.renderRollouts(w, r, s, http.StatusUnprocessableEntity, &pageError{Code: CodeInvalid, Message: "Percent must be a whole number from 0 to 100; nothing was changed."})
			return
		}
	} else if c.Mode == registry.RolloutEnforce {
		c.Percent = 100
	}
	if c.Mode != registry.RolloutEnforce {
		c.Percent = 0 // the ramp applies to enforce only
	}
	if err := c.Validate(); err != nil {
		h.renderRollouts(w, r, s, http.StatusUnprocessableEntity, &pageError{Code: CodeInvalid, Message: strings.TrimPrefix(err.Error(), "registry: ") + "; nothing was changed."})
		return
	}
	after, err := h.cfg.Store.SetRollout(r.Context(), c)
	switch {
	case errors.Is(err, registry.ErrRolloutStale):
		h.log.Info("console: rollout refused: stale", "operator", s.op.Name, "operation", op, "seen", seen)
		h.renderRollouts(w, r, s, http.StatusConflict, &pageError{Code: CodeRolloutStale, Message: fmt.Sprintf(
			"The rollout of %s changed since the page showed version %d: nothing was changed. The page now shows the current row; decide again.", op, seen)})
		return
	case errors.Is(err, registry.ErrForceRequired):
		h.renderRollouts(w, r, s, http.StatusConflict, &pageError{Code: CodeForceRequired, Message: op +
			" has been enforced: turned off, instances would write without idempotency and a retry of an answered request could execute again. " +
			"Choose shadow to stop enforcing safely, or tick force if that is really meant; nothing was changed."})
		return
	case err != nil:
		h.storeFailed(w, r, s, err)
		return
	}
	h.log.Info("console: rollout set", "operator", s.op.Name, "operation", op, "mode", after.Mode, "percent", after.Percent, "version", after.Version)
	h.redirect(w, r, "/rollouts", fmt.Sprintf("%s is now %s (version %d); every instance follows within its refresh.", op, describe(after), after.Version), nil)
}

// rolloutReport shows an operation's verdict totals (GET
// /rollouts/{operation}).
func (h *handler) rolloutReport(w http.ResponseWriter, r *http.Request, s session) {
	op := r.PathValue("operation")
	row, err := h.cfg.Store.Rollout(r.Context(), op)
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	counts, err := h.cfg.Store.Verdicts(r.Context(), op)
	if err != nil {
		h.storeFailed(w, r, s, err)
		return
	}
	v := reportView{Row: newRow(row), Verdicts: verdictOrder}
	v.Tenants, v.All = tallyVerdicts(counts)
	for _, c := range counts {
		if !slices.Contains(v.Verdicts, c.Verdict) {
			v.Verdicts = append(slices.Clip(v.Verdicts), c.Verdict)
		}
	}
	var bars []chart.Bar
	for _, verdict := range v.Verdicts {
		bars = append(bars,
			chart.Bar{Label: verdict + " · shadow", Count: uint64(max(v.All.Shadow[verdict], 0))},
			chart.Bar{Label: verdict + " · enforce", Count: uint64(max(v.All.Enforce[verdict], 0)), Alert: true})
	}
	v.Chart = chart.Bars("Verdicts of "+op+": shadow predicted, enforce answered", chart.Axes{X: "verdict · mode", Y: "requests, count"}, bars)
	h.render(w, r, s, http.StatusOK, "rollout", "Rollout of "+op, v, nil)
}

// tallyVerdicts sums counts per tenant (in the store's order, by tenant)
// and over every tenant.
func tallyVerdicts(counts []registry.VerdictCount) (tenants []verdictTotals, all verdictTotals) {
	all = verdictTotals{Shadow: map[string]int64{}, Enforce: map[string]int64{}}
	idx := map[string]int{}
	for _, c := range counts {
		i, ok := idx[c.Tenant]
		if !ok {
			i = len(tenants)
			idx[c.Tenant] = i
			tenants = append(tenants, verdictTotals{Tenant: c.Tenant, Shadow: map[string]int64{}, Enforce: map[string]int64{}})
		}
		for _, t := range []*verdictTotals{&tenants[i], &all} {
			switch c.Mode {
			case registry.RolloutShadow:
				t.Shadow[c.Verdict] += c.Count
				t.ShadowN += c.Count
			case registry.RolloutEnforce:
				t.Enforce[c.Verdict] += c.Count
				t.EnforceN += c.Count
			}
		}
	}
	slices.SortFunc(tenants, func(a, b verdictTotals) int { return strings.Compare(a.Tenant, b.Tenant) })
	return tenants, all
}

// tenantList splits a comma-separated list, dropping blanks.
func tenantList(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// describe says a row's mode in a few words: "enforce 10%", "shadow",
// "off (forced)", "configured".
func describe(r registry.Rollout) string {
	s := r.Mode
	switch r.Mode {
	case "":
		s = "configured"
	case registry.RolloutEnforce:
		s = fmt.Sprintf("enforce %d%%", r.Percent)
	}
	if r.Forced {
		s += " (forced)"
	}
	return s
}
