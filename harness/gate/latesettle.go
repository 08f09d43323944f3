package gate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// The late-settlement phase (Config.Retention, docs/gate.md): records are
// kept for the retention after they settle, however late that is. The
// transfers of the keys in flight when the opening provider outage began
// stay UNKNOWN for longer than the retention; once the outage is over and
// they settled, each is sent once more after a prune pass that began
// after its settlement, and must replay its settled answer. A record
// whose expiry counted from its acceptance would be retired by that pass
// and answer 409 KEY_RETIRED.

// Outcomes of a late retry (LateRetry.Outcome).
const (
	// LateReplayed: the settled answer replayed — same status, operation
	// and digest as the key's first definite answer, marked
	// Idempotent-Replayed.
	LateReplayed = "replayed"
	// LateRetired: 409 KEY_RETIRED, the record retired before the
	// retention after its settlement was over.
	LateRetired = "retired"
	// LateExecuted: a 2xx that is no replay of the settled answer (a
	// fresh execution, or another operation's).
	LateExecuted = "executed"
	// LateOther: any other answer, or none.
	LateOther = "other"
	// LateUnjudged: the retry could not be sent in time to judge it —
	// within the retention after the settlement, after a prune pass that
	// began after it — on a machine too slow for the configured
	// retention; it fails the gate as well.
	LateUnjudged = "unjudged"
)

// LateRetry is a late-settled key's retry after its settlement.
type LateRetry struct {
	// Outcome is one of LateReplayed, LateRetired, LateExecuted,
	// LateOther and LateUnjudged.
	Outcome string
	// Answer is what the retry got (zero if unjudged or unanswered);
	// Note describes it.
	Answer Answer
	Note   string
	// Sent is when it was sent, Deadline the latest instant a retry must
	// still replay: the retention after the last request that found the
	// operation UNKNOWN (which was before the settlement).
	Sent, Deadline time.Time
}

// noteUnknown records a 409 OUTCOME_UNKNOWN answered at at to a request
// sent at sent, under mu (nil: res is the caller's alone).
func noteUnknown(res *KeyResult, mu *sync.Mutex, sent, at time.Time) {
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	if res.FirstUnknown.IsZero() || at.Before(res.FirstUnknown) {
		res.FirstUnknown = at
	}
	if sent.After(res.LastUnknownSent) {
		res.LastUnknownSent = sent
	}
}

// lateSettled reports whether res's key is late-settled under retention:
// it settled, and the last request that found its operation UNKNOWN was
// sent more than the retention after the first 409 OUTCOME_UNKNOWN came —
// so the operation settled more than the retention after its acceptance
// (which came before that first answer).
func lateSettled(res *KeyResult, retention time.Duration) bool {
	return retention > 0 && res.Settled && len(res.Answers) > 0 && !res.FirstUnknown.IsZero() &&
		res.LastUnknownSent.Sub(res.FirstUnknown) > retention
}

// pruneWait is how often lateRetry polls the prune log.
const pruneWait = 20 * time.Millisecond

// lateRetry sends a late-settled key (lateSettled) once more, its first
// retry's payload, as soon as a prune pass that began after the key's
// first definite answer (so after its settlement) has finished, and
// records the outcome in res.Late. A retry that cannot be sent before
// the deadline (LateRetry.Deadline) is LateUnjudged. Called by the key's
// worker after the key's retries returned; ctx ends it early.
func (l *loader) lateRetry(ctx context.Context, k Key, res *KeyResult) {
	if !l.cfg.transfers() || l.cfg.pruneLog == nil || !lateSettled(res, l.cfg.Retention) || ctx.Err() != nil {
		return
	}
	settled := res.Start.Add(res.SettledAfter) // the first definite answer came then
	late := &LateRetry{Outcome: LateUnjudged, Deadline: res.LastUnknownSent.Add(l.cfg.Retention)}
	res.Late = late
	for !l.prunedSince(ctx, settled) {
		if ctx.Err() != nil || !time.Now().Add(pruneWait).Before(late.Deadline) {
			late.Note = fmt.Sprintf("no prune pass began after the settlement and finished within the retention %v", l.cfg.Retention)
			return
		}
		sleep(ctx, pruneWait)
	}
	late.Sent = time.Now()
	if !late.Sent.Before(late.Deadline) {
		late.Note = fmt.Sprintf("sent %v after the deadline", late.Sent.Sub(late.Deadline).Round(time.Millisecond))
		return
	}
	a, ok, note := l.request(ctx, k, &KeyResult{Start: late.Sent}, nil, k.Index%len(l.targets), k.Body(0))
	late.Answer, late.Note = a, note
	first := res.Answers[0]
	switch {
	case !ok:
		late.Outcome, late.Note = LateOther, "no answer"
	case a.Code == idem.CodeKeyRetired && !a.At.Before(late.Deadline):
		// Read after the deadline: the retention after the settlement
		// may have been over by then.
		late.Outcome = LateUnjudged
	case a.Code == idem.CodeKeyRetired:
		late.Outcome = LateRetired
	case a.Replayed && a.Status == first.Status && a.OperationID == first.OperationID && a.Digest == first.Digest:
		late.Outcome = LateReplayed
	case a.succeeded():
		late.Outcome = LateExecuted
	default:
		late.Outcome = LateOther
	}
}

// prunedSince reports whether the prune log holds a pass that started
// after t (and so finished: passes are recorded when they end). A read
// error counts as no.
func (l *loader) prunedSince(ctx context.Context, t time.Time) bool {
	runs, err := l.cfg.pruneLog.PruneRuns(ctx, 10)
	if err != nil {
		return false
	}
	for _, r := range runs {
		if r.StartedAt.After(t) {
			return true
		}
	}
	return false
}

// LateCounts sums the late retries of a run.
type LateCounts struct {
	// Settled counts the late-settled keys; the others how their late
	// retries went (LateRetry.Outcome).
	Settled  int `json:"settled"`
	Replayed int `json:"replayed"`
	Retired  int `json:"retired"`
	Executed int `json:"executed"`
	Other    int `json:"other"`
	Unjudged int `json:"unjudged"`
}

// countLate sums the late retries of res and returns a problem line for
// each that did not replay.
func countLate(res LoadResult) (LateCounts, []string) {
	var c LateCounts
	var problems []string
	for i, kr := range res.Keys {
		if kr.Late == nil {
			continue
		}
		c.Settled++
		switch kr.Late.Outcome {
		case LateReplayed:
			c.Replayed++
			continue
		case LateRetired:
			c.Retired++
		case LateExecuted:
			c.Executed++
		case LateUnjudged:
			c.Unjudged++
		default:
			c.Other++
		}
		problems = append(problems, fmt.Sprintf("key %d: late-settled (UNKNOWN for %v), its retry after the settlement: %s %s",
			i, kr.LastUnknownSent.Sub(kr.FirstUnknown).Round(time.Millisecond), kr.Late.Outcome, kr.Late.Note))
	}
	return c, problems
}
