package effect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/idemkit/idem/registry"
)

// Windowed is implemented by a Downstream whose lookups may miss an
// execution for a while after it happened (eventually consistent reads):
// NotFoundAfter is that documented visibility window. A "not found"
// answered earlier than the effect's begin time (registry.Effect.CreatedAt)
// plus the window is no evidence, whatever it says. A Downstream that does
// not implement Windowed has a window of zero: its "not found" is current
// at once (it is still evidence only when it voids the key).
type Windowed interface {
	NotFoundAfter() time.Duration
}

// window returns the visibility window of the downstream of effect name.
func (o *Operation) window(name string) time.Duration {
	if w, ok := o.Downstreams[name].(Windowed); ok {
		return max(w.NotFoundAfter(), 0)
	}
	return 0
}

// answerAt reports the effect result that a, answered at "at" about e's
// key, proves: Answer.Evidence, except that a "not found" before e's last
// send plus the downstream's visibility window proves nothing. The last
// send is the later of the attempt's creation and its last update: an
// owner that took the operation over re-sends the same key and updates
// the attempt, and the window counts from that send, not the first.
func (o *Operation) answerAt(a Answer, e registry.Effect, at time.Time) (result string, ok bool) {
	result, ok = a.Evidence()
	sent := e.CreatedAt
	if e.UpdatedAt.After(sent) {
		sent = e.UpdatedAt
	}
	if ok && a.Kind == NotFound && at.Before(sent.Add(o.window(e.Name))) {
		return "", false
	}
	return result, ok
}

// lookupAnswer is the registry.Lookup answer that records a.
func lookupAnswer(a Answer) string {
	switch a.Kind {
	case Executed:
		return registry.LookupExecuted
	case Declined:
		return registry.LookupDeclined
	case NotFound:
		if a.Void {
			return registry.LookupVoided
		}
		return registry.LookupNotFound
	}
	return registry.LookupNoAnswer
}

// recordedAnswer is the Answer a recorded lookup stands for (without its
// body, which is not recorded).
func recordedAnswer(l registry.Lookup) Answer {
	a := Answer{Handle: l.Handle, Detail: l.Detail}
	switch l.Answer {
	case registry.LookupExecuted:
		a.Kind = Executed
	case registry.LookupDeclined:
		a.Kind = Declined
	case registry.LookupNotFound, registry.LookupVoided:
		a.Kind, a.Void = NotFound, l.Answer == registry.LookupVoided
	}
	return a
}

// Lookup asks the downstream of e what it did with e's key, executing
// nothing, and records the question and the answer on the effect
// (registry.LookupLog.RecordLookup) with actor as who asked, whatever the
// answer: every lookup is recorded, by every door (the recovery worker, a
// client's retry, the console, "idem ops lookup"). An operator's decision
// is later checked against what was recorded. It returns the answer and
// the recorded lookup; an error means the downstream of e is not
// configured, or the lookup could not be recorded (then the answer must
// not be acted on). ctx bounds both calls.
func (o *Operation) Lookup(ctx context.Context, log registry.LookupLog, e registry.Effect, actor string) (Answer, registry.Lookup, error) {
	d := o.Downstreams[e.Name]
	if d == nil {
		return Answer{}, registry.Lookup{}, fmt.Errorf("effect: no downstream is configured for effect %s", e.Name)
	}
	a := lookup(ctx, d, e.Name, e.DownstreamKey) // trace.go
	l, err := log.RecordLookup(ctx, registry.Lookup{OperationID: e.OperationID, Effect: e.Name, DownstreamKey: e.DownstreamKey,
		Answer: lookupAnswer(a), Handle: a.Handle, Detail: a.Detail, Actor: actor}.Clipped())
	if err != nil {
		return a, registry.Lookup{}, fmt.Errorf("effect: record the lookup of %s/%s: %w", e.OperationID, e.Name, err)
	}
	return a, l, nil
}

// known is what the recorded evidence says about one effect: its stored
// result, and the definite answers of its recorded lookups.
type known struct {
	executed bool     // a stored result "succeeded" or a lookup answered executed
	declined bool     // a stored result "failed", or a lookup declined (or voided after the window)
	handles  []string // the handles of the executed answers
}

// evidenceOf sums up, per effect name, the definite answers recorded for
// effs: their stored results and their recorded lookups (the window rule
// applied to "not found").
func (o *Operation) evidenceOf(effs []registry.Effect, lookups []registry.Lookup) map[string]*known {
	ev := make(map[string]*known, len(effs))
	add := func(e registry.Effect, result, handle string) {
		k := ev[e.Name]
		switch result {
		case registry.EffectSucceeded:
			k.executed = true
			if handle != "" {
				k.handles = append(k.handles, handle)
			}
		case registry.EffectFailed:
			k.declined = true
		}
	}
	for _, e := range effs {
		ev[e.Name] = new(known)
		add(e, e.Result, e.Handle)
		for _, l := range lookups {
			if l.Effect != e.Name || l.DownstreamKey != e.DownstreamKey {
				continue
			}
			if result, ok := o.answerAt(recordedAnswer(l), e, l.At); ok {
				add(e, result, l.Handle)
			}
		}
	}
	return ev
}

// contradiction returns the OperatorError refusing decision d about rec
// when it contradicts a recorded definite answer, nil when it does not:
// "failed" after any executed answer; "succeeded" after a declined one,
// or with a handle other than a recorded executed handle.
func contradiction(rec registry.Record, effs []registry.Effect, ev map[string]*known, d Decision) error {
	for _, e := range effs {
		k := ev[e.Name]
		var why string
		switch {
		case d.Kind == Declined && k.executed:
			why = "the downstream answered that it executed key " + e.DownstreamKey
			if len(k.handles) > 0 {
				why += " (handle " + k.handles[0] + ")"
			}
		case d.Kind == Executed && k.declined:
			why = "the downstream answered that it declined key " + e.DownstreamKey
		case d.Kind == Executed && d.Handle != "" && len(k.handles) > 0 && !slices.Contains(k.handles, d.Handle):
			why = "the downstream executed key " + e.DownstreamKey + " as handle " + k.handles[0] + ", not " + d.Handle
		default:
			continue
		}
		return &OperatorError{CodeContradictsEvidence, fmt.Sprintf(
			"effect %s of operation %s: %s, which the decision %q contradicts; nothing was changed",
			e.Name, rec.OperationID, why, decisionWord(d))}
	}
	return nil
}

// decisionWord is the outcome an operator typed for d.
func decisionWord(d Decision) string {
	if d.Kind == Executed {
		return "succeeded"
	}
	return "failed"
}

// MinEvidence is the least number of characters (after trimming) of an
// operator's written evidence.
const MinEvidence = 10

// CheckEvidence reports whether an operator's written evidence names
// something the next reader can check, and an *OperatorError
// (CodeEvidenceRequired when it is blank, CodeEvidenceTooWeak otherwise)
// when it does not. The rule: at least MinEvidence characters after
// trimming, and at least one reference among its words — a URL
// (http:// or https://…), or a word of at least 3 characters made of
// letters, digits and - _ . / # : that holds a digit and a letter or "#"
// (a provider handle "tr_2", a ticket "OPS-123", "#4711", "INC0012345").
// "I believe it failed" and "ticket 7" are too weak.
func CheckEvidence(evidence string) error {
	ev := strings.TrimSpace(evidence)
	switch {
	case ev == "":
		return &OperatorError{CodeEvidenceRequired, "evidence is required: say why the outcome is right"}
	case len([]rune(ev)) < MinEvidence || !hasReference(ev):
		return &OperatorError{CodeEvidenceTooWeak, fmt.Sprintf(
			"the evidence must name something that can be checked: at least %d characters and a reference — "+
				"the provider's handle or ID (tr_2), a ticket (OPS-123, #4711) or a URL", MinEvidence)}
	}
	return nil
}

// hasReference reports whether s holds a reference word (CheckEvidence).
func hasReference(s string) bool {
	for _, w := range strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`,;()[]<>"'`, r)
	}) {
		w = strings.TrimRight(w, ".:!?")
		if strings.HasPrefix(w, "https://") || strings.HasPrefix(w, "http://") {
			if len(w) > len("https://") {
				return true
			}
			continue
		}
		var digit, mark, other bool
		for _, r := range w {
			switch {
			case r >= '0' && r <= '9':
				digit = true
			case unicode.IsLetter(r) || r == '#':
				mark = true
			case strings.ContainsRune("-_./:", r):
			default:
				other = true
			}
		}
		if digit && mark && !other && len(w) >= 3 {
			return true
		}
	}
	return false
}
