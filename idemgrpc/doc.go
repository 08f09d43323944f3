// Package idemgrpc is idem's door for gRPC: a unary server interceptor
// that makes the methods it is told about safe to retry, with the same
// registry, contract and proofs as the HTTP door (package idemhttp).
//
// A call's key is its "idempotency-key" metadata (one value, the rules
// of the Idempotency-Key header), its caller the identity the service's
// Identity function returns, and its fingerprint the SHA-256 of the
// method's full name and the request message's canonical form: the
// request written with protojson (proto field names), then the canonical
// JSON of package canon (members sorted, no insignificant whitespace,
// numbers as written). Binary protobuf is not used: its deterministic
// marshalling is stable within one build only, and a retry may reach a
// newer one. The fingerprint therefore follows the message's schema: a
// field renamed in the .proto changes it.
//
// The handler runs inside registry.Store.ExecuteOnce (the one-transaction
// style): its business writes, through Tx(ctx), commit together with the
// record of its response, and 50 concurrent identical calls give one
// execution and 49 replays of the same bytes. A replay returns the stored
// response message (kept as a google.protobuf.Any, so any message type
// registered with the protobuf runtime can be replayed), its header and
// trailer metadata, and the header "idempotent-replayed: true". A handler
// error is returned as it is and nothing is recorded: the retry runs
// afresh (the two-phase style and effects outside the database are the
// HTTP door's for now).
//
// Refusals carry a google.rpc.ErrorInfo detail whose Reason is the
// contract's code (domain "idem") — see Code and docs/grpc.md:
// INVALID_ARGUMENT for a missing or invalid key (KEY_MISSING,
// KEY_MULTIPLE, KEY_INVALID), FAILED_PRECONDITION for a key used with
// another request (PAYLOAD_CONFLICT) or retired (KEY_RETIRED), ABORTED
// with a RetryInfo for an operation in flight (IN_PROGRESS,
// OUTCOME_UNKNOWN), UNAVAILABLE with a RetryInfo for storage trouble
// (STORE_UNAVAILABLE, WRITER_FENCED, TENANT_MOVED), UNAUTHENTICATED
// when Identity fails.
//
// Everything in this package is safe for concurrent use.
package idemgrpc
