package idemhttp

import (
	"context"

	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Effects outside the database (SPEC E1–E2): the policy and its code are
// the core's (package operation, effects.go); an effect-bearing
// operation's handler calls Effect with its request's context.

// ErrOutcomeUnknown is wrapped in Effect's error when the downstream's
// answer was no evidence (operation.ErrOutcomeUnknown): the effect may or
// may not have happened. The operation is then UNKNOWN and every later
// Effect call of the execution returns it without calling anything.
var ErrOutcomeUnknown = operation.ErrOutcomeUnknown

// ErrEffectDeclined is wrapped in Effect's error when the downstream
// refused the key with an answer its contract defines as final
// (operation.ErrEffectDeclined): the effect did not and never will
// happen.
var ErrEffectDeclined = operation.ErrEffectDeclined

// ErrScopeTaken is wrapped in Effect's error, in the one-transaction
// style (Operation.OneTransaction with Effects), when another request
// with the same key was accepted first (operation.ErrScopeTaken): nothing
// was written or sent, and the handler's answer is discarded — the
// request is answered from the record that won.
var ErrScopeTaken = operation.ErrScopeTaken

// ActorClientRetry is the reconciliation actor of a settlement made while
// answering a client's retry.
const ActorClientRetry = operation.ActorClientRetry

// Effect makes one downstream call of an effect-bearing operation from
// its handler: operation.Effect, which says what it stores, sends and
// returns. ctx is the request's context (r.Context()); it bounds the
// calls.
func Effect(ctx context.Context, name string, request []byte) (registry.Effect, error) {
	return operation.Effect(ctx, name, request)
}
