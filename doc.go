// Package idem makes HTTP write endpoints safe to retry under the contract
// http.idempotency.v1 (docs/contract.md).
//
// A client that lost a response resends the same request with the same
// Idempotency-Key. The server must then return the first outcome, never
// cause a second business effect, and refuse a different request that
// reuses the key. idem decides "same" and "different" with two hashes:
//
//   - the scope (ScopeOf): tenant, principal, operation, API revision and
//     key. Tenant and principal come from the caller's authenticated
//     Identity, never from the request, so no hit crosses callers.
//   - the fingerprint (Binding.Fingerprint): method, canonical target
//     (normalised path, declared significant query parameters), declared
//     business headers, media type, canonicalisation mode, schema revision
//     and the canonical payload from package canon.
//
// Same scope and same fingerprint is a replay; same scope and a different
// fingerprint is PAYLOAD_CONFLICT. Only the two hashes are ever stored:
// Key keeps the raw key unexported and never prints it.
//
// Errors that callers branch on carry a stable Code (CodeOf); Code.Status
// gives the HTTP status the contract assigns to it.
//
// Layout: canon holds the strict JSON reader and the canonical forms;
// internal/pgtest starts throwaway PostgreSQL clusters for tests; cmd/idem
// is the command-line tool ("idem canon", "idem fingerprint").
//
// Everything in this package is safe for concurrent use.
package idem
