package idem

// State is the state of an operation record. Every legal change of state
// is listed in transitions below and nowhere else; the drivers' migrations
// install the same list as a database trigger, and the conformance suite
// (registry/registrytest) checks that the database refuses every other
// change.
//
//	            ┌──────────── release (row deleted) ────────────┐
//	(insert) → RESERVED ──→ EXECUTING ──→ SUCCEEDED | FAILED_FINAL | UNKNOWN
//	              │   └──→ SUCCEEDED | FAILED_FINAL | REJECTED        │
//	              └─ takeover (same state, owner generation + 1)      └→ SUCCEEDED | FAILED_FINAL (reconciliation)
//
// The one-transaction style (registry.Store.ExecuteOnce) inserts its
// record already SUCCEEDED or FAILED_FINAL, in the transaction of the
// business writes: RESERVED → EXECUTING → terminal happens inside that
// uncommitted transaction and nobody else ever sees the in-flight states.
// With effects outside the database, that style inserts its record
// directly EXECUTING, with its first effect attempt, in one commit before
// the downstream call (registry.EffectStore.ReserveEffect): nobody ever
// sees it RESERVED.
//
// RESERVED: accepted, nothing outside the database has happened yet.
// EXECUTING: an effect outside the database may have been started.
// SUCCEEDED, FAILED_FINAL: terminal, with a stored response to replay.
// UNKNOWN: an effect outside the database may or may not have happened;
// it is settled on evidence only (package effect), never blindly re-run.
// REJECTED: refused by business rules before any effect began; it caused
// no effect and its stored refusal is replayed.
type State string

const (
	StateReserved    State = "RESERVED"
	StateExecuting   State = "EXECUTING"
	StateSucceeded   State = "SUCCEEDED"
	StateFailedFinal State = "FAILED_FINAL"
	StateUnknown     State = "UNKNOWN"
	StateRejected    State = "REJECTED"
)

// transitions lists, for each state, the states it may move to. A takeover
// by recovery keeps the state and raises the owner generation; it is
// listed as a move to the same state.
var transitions = map[State][]State{
	StateReserved:    {StateReserved, StateExecuting, StateSucceeded, StateFailedFinal, StateRejected},
	StateExecuting:   {StateExecuting, StateSucceeded, StateFailedFinal, StateUnknown},
	StateUnknown:     {StateSucceeded, StateFailedFinal},
	StateSucceeded:   nil,
	StateFailedFinal: nil,
	StateRejected:    nil,
}

// States returns every state.
func States() []State {
	return []State{StateReserved, StateExecuting, StateSucceeded, StateFailedFinal, StateUnknown, StateRejected}
}

// CanTransition reports whether a record may move from one state to the
// other.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether s is final and carries a stored response.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailedFinal || s == StateRejected
}

// InFlight reports whether an operation in state s may still be running.
func (s State) InFlight() bool { return s == StateReserved || s == StateExecuting }

// Valid reports whether s is one of the States.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}
