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
// Each method is served by an operation.Core, the core the HTTP door's
// operations run on, in the one-transaction style: the handler's business
// writes, through Tx(ctx), commit together with the record of its
// response. A duplicate that arrives while the first call runs in the
// same server waits for it (at most operation.DefaultWaitCap, then
// ABORTED IN_PROGRESS) and is answered from its record, so 50 concurrent
// identical calls give one execution and 49 replays of the same bytes. A
// replay returns the stored response message (kept as a
// google.protobuf.Any, so any message type registered with the protobuf
// runtime can be replayed), its header and trailer metadata, and the
// header "idempotent-replayed: true". A handler error is returned as it
// is and nothing is recorded: the retry runs afresh (the two-phase style
// and effects outside the database are the HTTP door's for now). An
// outcome whose commit reply was lost is read back from the record
// before the call is refused, as on the HTTP door.
//
// Refusals carry a google.rpc.ErrorInfo detail whose Reason is the
// contract's code (domain "idem") — see Code and docs/grpc.md:
// INVALID_ARGUMENT for a missing or invalid key (KEY_MISSING,
// KEY_MULTIPLE, KEY_INVALID), FAILED_PRECONDITION for a key used with
// another request (PAYLOAD_CONFLICT) or retired (KEY_RETIRED), ABORTED
// with a RetryInfo for an operation in flight (IN_PROGRESS,
// OUTCOME_UNKNOWN), UNAVAILABLE with a RetryInfo for storage trouble
// (STORE_UNAVAILABLE, WRITER_FENCED, TENANT_MOVED), CANCELED when the
// client went away before the call was accepted (CLIENT_GONE), INTERNAL
// for the service's own faults (RESPONSE_TOO_LARGE, HANDLER_ERROR,
// RESPONSE_UNREADABLE), UNAUTHENTICATED when Identity fails.
//
// Everything in this package is safe for concurrent use.
package idemgrpc
