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
// Using it in a service takes three packages: a store (idemsqlite.Open
// for an embedded file, idempg.Open for PostgreSQL shared by many
// processes), the middleware (idemhttp.New wraps a handler; its Monitor
// serves the operation status that a 409's Link points at) and the
// maintenance runner (maintenance.Runner heals operations whose owner
// crashed and settles UNKNOWN outcomes on evidence). README.md has a
// complete program.
//
// The library: this package (contract, keys, scopes, fingerprints,
// states), canon (strict JSON and canonical forms), registry (the record,
// the Store interface, the conformance suite in registrytest), idempg and
// idemsqlite (the drivers), idemstore (a store from a DSN), idemhttp (the
// middleware), effect (effects outside the database and the evidence
// rule), outbox (the relay), recovery, maintenance, keyring (the key
// ring that seals stored bodies at rest: the drivers' Options.Sealer) and
// shard (tenants spread over several registries, each beside its
// tenants' business tables: a directory, a router, per-tenant drain).
// The reference
// application lives under example/ and the command in cmd/idem; the
// harness that proves all of it under harness/ — none of them is ever
// imported by the library.
//
// The states of a record and every legal change between them are in
// state.go (State, CanTransition); docs/contract.md says what a client
// sees in each.
//
// Everything in this package is safe for concurrent use.
package idem
