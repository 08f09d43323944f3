// Package idemhttp is the net/http face of idem: a Middleware that makes
// one operation's handler idempotent under http.idempotency.v1.
//
// For each request it authenticates the caller (Middleware.Identity),
// parses the Idempotency-Key, reads the body under the limit, computes the
// scope and the fingerprint (Prepare), reserves the scope in the registry
// (the acceptance point) and decides (Decide, a pure function):
//
//   - a new operation runs the handler inside the fenced business
//     transaction (registry.Store.Complete); the handler reaches that
//     transaction with Tx(r.Context()) and queues outbox messages with
//     AddOutbox, so its writes, the outcome, the response snapshot and the
//     outbox rows commit together. Its response is buffered and sent only
//     after the commit. 2xx is stored as SUCCEEDED, the operation's
//     declared 4xx as REJECTED (FAILED_FINAL when the handler may have written or queued an outbox message); anything else rolls back and releases
//     the reservation so a retry runs afresh.
//     With Operation.OneTransaction nothing is reserved: the scope is
//     looked up, and a new operation's handler runs in one transaction
//     in which the record is inserted already terminal
//     (registry.Store.ExecuteOnce); a duplicate racing it waits for it
//     (in this process for the execution of its key; in another, on the
//     claim the driver takes before the handler's first statement) and
//     is answered from the record that won. With Effects as well, the
//     handler runs with nothing written and its first Effect stores the
//     record, EXECUTING, with the effect's downstream key in one commit
//     before the call; the answer commits with the outcome (two commits
//     per execution); a racing request's Effect returns ErrScopeTaken and
//     sends nothing.
//     A handler written on database/sql (GORM, sqlx, sqlc) gets the same
//     transaction as a *sql.Tx with SQLTx(r.Context()), on every engine
//     and in every style; it must not commit or roll it back (README,
//     "Writing through database/sql").
//   - a finished operation is replayed: stored status, media type,
//     Location, ETag and body, with Idempotent-Replayed: true.
//   - a different request with the same key gets 422 PAYLOAD_CONFLICT.
//   - an operation in flight gets 409 IN_PROGRESS with Retry-After and a
//     monitor link, or — with Prefer: wait=N — is waited for and
//     replayed, across server processes too: woken by the commit when the
//     Store is a registry.Watcher (idempg), else polling the registry.
//   - an operation whose outcome is unknown gets 409 OUTCOME_UNKNOWN.
//   - an operation whose record expired into a tombstone (Operation.Retention,
//     registry.Pruner) gets 409 KEY_RETIRED with its operation ID.
//
// idemhttp is a door to package operation, the transport-agnostic core:
// it keeps what is HTTP's — the Idempotency-Key header, the caller
// (Identity), the canonical payload and fingerprint (Prepare), the
// response recorder that buffers the handler's answer, and how the core's
// Result is written back (stored responses, headers, problem+json, the
// monitor) — and hands everything else to operation.Core.Run: the claim,
// admission, the execution in its style, settlement, replay and refusal.
// Operation is operation.Config, Decision operation.Decision; Effect,
// ErrOutcomeUnknown and ErrEffectDeclined are the core's.
//
// Errors are RFC 9457 problem+json with a code member; storage trouble
// answers 503 STORE_UNAVAILABLE (fail closed), and nothing else does: a
// client that went away before its request was accepted is 499
// CLIENT_GONE (counted as client_gone), and a handler whose own statement
// failed so that its transaction could not commit gets its own 4xx or 500
// HANDLER_ERROR. The requests net/http refuses itself, before any handler
// runs (header fields too large, a malformed request line or header
// field), it answers in text/plain, and it serves a request with both
// Content-Length and Transfer-Encoding; serve on ProblemListener to answer
// those in problem+json too and refuse the last (RFC 9112 §6.3).
//
// Rollout (docs/contract.md §11): an operation runs in Enforce (the
// default), Shadow or Off mode (Operation.Mode), and with
// Middleware.Rollouts the registry's rollout row decides per request —
// enforce for the callers a ramp selects (a stable bucket of tenant and,
// optionally, principal; allow and deny lists), shadow for the others —
// and every server follows a change within its refresh. Shadow executes
// new keys exactly as enforce (the record commits with the business
// writes, so a switch to enforce replays them), counts what enforce would
// have answered, and executes plainly what enforce would refuse or answer
// from a record only while the operation was never enforced. Once an
// operation was enforced (registry.Rollout.EnforcedAt, committed before
// the first enforced acceptance), a server that would serve it off serves
// it read-only: replays, and 503 READ_ONLY for new keys. Verdicts are
// counted per operation, tenant, mode and verdict
// (idem_rollout_verdicts_total; per tenant in the registry).
// Operation.AcceptsRecordsOf lets a new API revision replay an older
// revision's records.
package idemhttp
