package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// TestCheckEvidence pins the rule for an operator's written evidence: it
// must name something checkable — a handle, a ticket or a URL — not just
// be non-empty.
//
// threat:weak-evidence
func TestCheckEvidence(t *testing.T) {
	t.Parallel()
	for ev, want := range map[string]string{
		"":                                 effect.CodeEvidenceRequired,
		"  \n ":                            effect.CodeEvidenceRequired,
		"x":                                effect.CodeEvidenceTooWeak,
		"I believe it failed":              effect.CodeEvidenceTooWeak,
		"ticket 7 says so":                 effect.CodeEvidenceTooWeak, // no letter in the reference
		"tr_2 failed":                      "",
		"tr_2":                             effect.CodeEvidenceTooWeak, // too short
		"provider shows tr_2 executed":     "",
		"see OPS-123 for the call":         "",
		"ticket #4711, provider support":   "",
		"https://support.example/t/99 ok":  "",
		"see https:// for the ticket":      effect.CodeEvidenceTooWeak,
		"(INC0012345) provider said no":    "",
		"refund tr_2€ looks fine to me":    effect.CodeEvidenceTooWeak, // the only digit word holds a symbol
		"the provider declined at 10:02 h": effect.CodeEvidenceTooWeak, // a time names nothing
	} {
		if got := effect.OperatorCode(effect.CheckEvidence(ev)); got != want {
			t.Errorf("CheckEvidence(%q) = %q, want %q", ev, got, want)
		}
	}
}

// voiding is a downstream whose lookups answer "not found, voided" and
// whose sends prove nothing, with a documented visibility window.
type voiding struct{ window time.Duration }

func (voiding) Send(context.Context, string, []byte) effect.Answer {
	return effect.Answer{Detail: "POST /transfers answered 503"}
}
func (voiding) Lookup(context.Context, string) effect.Answer {
	return effect.Answer{Kind: effect.NotFound, Void: true, Detail: "GET /transfers/by-key answered 404, key voided"}
}
func (v voiding) NotFoundAfter() time.Duration { return v.window }

// TestNotFoundWindow: a "not found" (even a voiding one) asked before the
// effect began plus the downstream's visibility window proves nothing —
// Settle leaves the operation UNKNOWN and records the lookup — and the
// same answer after the window settles it FAILED_FINAL.
//
// threat:early-not-found
func TestNotFoundWindow(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		op := &effect.Operation{Downstreams: map[string]effect.Downstream{payments.EffectTransfer: voiding{window: time.Minute}},
			Render: payments.RenderTransfer}
		rec, _ := e.unknown(false)
		e.setNow(base.Add(30 * time.Second))
		st, err := op.Settle(e.ctx, e.store, rec, "recovery")
		if err != nil || st.Settled || st.Reason == "" {
			t.Fatalf("Settle within the window: %+v, %v; want unsettled with a reason", st, err)
		}
		e.unchanged(rec.OperationID)
		e.setNow(base.Add(2 * time.Minute))
		st, err = op.Settle(e.ctx, e.store, rec, "recovery")
		if err != nil || st.Record.State != idem.StateFailedFinal || st.Method != registry.ReconcileProvider {
			t.Fatalf("Settle after the window: %+v, %v; want FAILED_FINAL by provider", st, err)
		}
		ls, err := e.store.Lookups(e.ctx, rec.OperationID)
		if err != nil || len(ls) != 2 || ls[0].Answer != registry.LookupVoided || ls[0].Actor != "recovery" ||
			!ls[0].At.Equal(base.Add(30*time.Second)) || !ls[1].At.Equal(base.Add(2*time.Minute)) {
			t.Errorf("recorded lookups %+v, %v; want both of the worker's", ls, err)
		}
	})
}
