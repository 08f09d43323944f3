package operation

import (
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Decision is what a run does with a request once the registry has
// answered.
type Decision struct {
	Verdict registry.Verdict
	// Code is the refusal's contract code, "" for Execute and Replay.
	Code idem.Code
	// Wait: the operation is in flight and the client asked to wait for it.
	Wait bool
}

// Decide is the pure decision: given the record for the request's scope
// and whether this request created it, what to answer.
func Decide(rec registry.Record, created bool, req Request) Decision {
	v := registry.Decide(rec, created, req.Fingerprint)
	switch v {
	case registry.Conflict:
		return Decision{Verdict: v, Code: idem.CodePayloadConflict}
	case registry.Unknown:
		return Decision{Verdict: v, Code: idem.CodeOutcomeUnknown}
	case registry.Retired:
		return Decision{Verdict: v, Code: idem.CodeKeyRetired}
	case registry.InProgress:
		return Decision{Verdict: v, Code: idem.CodeInProgress, Wait: req.Wait > 0}
	}
	return Decision{Verdict: v}
}

// decisionVerdict is the rollout verdict of a decision on rec.
func decisionVerdict(d Decision, rec registry.Record) string {
	switch {
	case executes(d, rec):
		return registry.VerdictExecute
	case d.Verdict == registry.Replay:
		return registry.VerdictReplay
	case d.Verdict == registry.Conflict:
		return registry.VerdictConflict
	case d.Verdict == registry.Retired:
		return registry.VerdictKeyRetired
	}
	return registry.VerdictInFlight
}

// executes reports whether enforce executes the request on decision d
// for rec: a new operation, or one whose owner's lease expired (taken
// over). Every other decision answers from the record.
func executes(d Decision, rec registry.Record) bool {
	return d.Verdict == registry.Execute || (d.Verdict == registry.InProgress && leaseExpired(rec))
}

// leaseExpired reports whether rec's lease has run out by this process's
// clock. TakeOver decides on the database's clock; this only saves a
// write while the lease is plainly current.
func leaseExpired(rec registry.Record) bool {
	return !rec.LeaseUntil.IsZero() && time.Now().After(rec.LeaseUntil)
}
