// Package effect holds what idem knows about effects outside the
// database (SPEC E1–E2): the answers a downstream system gives, the one
// rule that says which of them are evidence, and the settlement of an
// operation whose effects are unsettled — used alike by the middleware
// (a client's retry), the recovery worker and the operator's command.
//
// The rule: an outcome is recorded only on evidence about the effect's own
// downstream key. Evidence is
//
//   - a definite answer to the call or to a re-send of the same stored
//     request with the same key: the downstream executed it (Executed), or
//     refused it with an answer its contract defines as final for that key
//     (Declined);
//   - a lookup by key that answers one of those two, or that answers "not
//     found" where the downstream promises that the key can no longer
//     execute (NotFound with Void);
//   - an operator's written evidence (registry.ReconcileOperator) that
//     names a reference (CheckEvidence) and contradicts no answer recorded
//     for the effect — "failed" without a recorded decline only once a
//     second operator approved it (Operation.SettleByOperator).
//
// Anything else — a 5xx, a 429, a timeout, a reset, an unreadable answer,
// a "not found" that does not void the key — is Indefinite: it proves
// nothing, the effect stays unsettled and the operation UNKNOWN, however
// often it is asked. A lookup that finds nothing is followed by a re-send
// with the same key, and the re-send's answer decides. A "not found"
// answered earlier than the effect's start plus the downstream's
// visibility window (Windowed) proves nothing, even when it voids the key.
// Every lookup, by whoever asks, is recorded on its effect (Lookup), and
// an operator's decision is checked against what was recorded.
package effect

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/registry"
)

// Kind classifies one answer of a downstream system.
type Kind int

const (
	// Indefinite: the answer proves nothing about the key (5xx, 429,
	// timeout, reset, unreadable, unexpected). The zero Kind.
	Indefinite Kind = iota
	// Executed: the downstream executed the key; Answer.Handle and
	// Answer.Body say what it did.
	Executed
	// Declined: the downstream refused the key with an answer its contract
	// defines as final for that key: it did not and never will execute it.
	Declined
	// NotFound: a lookup found no execution of the key. Evidence only with
	// Answer.Void.
	NotFound
)

func (k Kind) String() string {
	switch k {
	case Executed:
		return "executed"
	case Declined:
		return "declined"
	case NotFound:
		return "not found"
	}
	return "indefinite"
}

// Answer is one answer of a downstream system, classified.
type Answer struct {
	Kind Kind
	// Handle is the downstream's name for the executed effect (Executed).
	Handle string
	// Body is the answer as the downstream returned it, stored with the
	// attempt when the answer is evidence; the operation renders its
	// response from it.
	Body []byte
	// Void, with NotFound, says that the downstream promises the key can
	// no longer execute (the lookup voided it): then "not found" is
	// evidence that nothing happened.
	Void bool
	// Detail says in a sentence what was asked and answered ("POST
	// /transfers answered 503 PROVIDER_FAILURE"); it goes into logs and,
	// for evidence, into the reconciliation log.
	Detail string
}

// Evidence reports the effect result (registry.EffectSucceeded or
// registry.EffectFailed) that a proves, and false when it proves nothing.
// It is the only place where the rule is decided.
func (a Answer) Evidence() (result string, ok bool) {
	switch {
	case a.Kind == Executed:
		return registry.EffectSucceeded, true
	case a.Kind == Declined, a.Kind == NotFound && a.Void:
		return registry.EffectFailed, true
	}
	return "", false
}

// Downstream is a system outside the database that an effect calls. Its
// methods classify what the system answered; they never return an error:
// trouble is an Indefinite answer with a Detail. Implementations must be
// safe for concurrent use; ctx bounds each call.
type Downstream interface {
	// Send sends request with the idempotency key key. The same key and
	// request may be sent any number of times (by the first call, a retry,
	// a recovery worker): the downstream must execute it at most once and
	// answer a repeat with the first execution's result.
	Send(ctx context.Context, key string, request []byte) Answer
	// Lookup asks what the downstream did with key, executing nothing.
	Lookup(ctx context.Context, key string) Answer
}

// Renderer renders an operation's outcome — terminal state, response and
// outbox messages — from its effects once every one is settled (Result
// set). It is the one rendering of the operation's result: the middleware
// stores what it renders after an uninterrupted run, and a reconciliation
// stores what it renders from the same effects, so a replay answers the
// same business result however the operation was settled. rec is the
// operation's record (EXECUTING after an uninterrupted run, UNKNOWN when
// reconciled); effs are its attempts as stored. The state must be
// SUCCEEDED or FAILED_FINAL and the status 2xx or 4xx (idem.StorableStatus).
type Renderer func(rec registry.Record, effs []registry.Effect) (registry.Outcome, error)

// Operation describes the effects of one idempotent operation: the
// downstream system of each effect, by effect name, and the rendering of
// the operation's result. It is shared, read-only, by the middleware
// (idemhttp.Operation.Effects) and the recovery worker; it must not be
// changed once in use.
type Operation struct {
	// Downstreams maps effect names (the names handlers pass to
	// idemhttp.Effect) to their systems. Required.
	Downstreams map[string]Downstream
	// Render renders the operation's result from its settled effects.
	// Required.
	Render Renderer
}

// Validate reports whether o can be used.
func (o *Operation) Validate() error {
	if o == nil || len(o.Downstreams) == 0 || o.Render == nil {
		return errors.New("effect: an Operation needs Downstreams and Render")
	}
	for name, d := range o.Downstreams {
		if name == "" || d == nil {
			return fmt.Errorf("effect: downstream %q: empty name or nil system", name)
		}
	}
	return nil
}

// Set maps operation names (registry.Record.Operation) to their effects,
// for the recovery worker and the operator's command, which settle
// operations of every kind.
type Set map[string]*Operation
