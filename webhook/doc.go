// Package webhook receives webhooks signed the Standard Webhooks way
// (webhook-id, webhook-timestamp, webhook-signature) and answers each
// delivery once, through the registry: the incoming door of idem, beside
// package outbox, which sends them.
//
// A Verifier checks a delivery's signature under one or more secrets (a
// rotation keeps the old one beside the new) and its timestamp within a
// tolerance (DefaultTolerance, five minutes). A Receiver puts the
// verified delivery through an idemhttp.Middleware with its webhook-id
// as the idempotency key, in the scope of the sender: the first delivery
// of an id runs the handler, whose business writes commit with the
// record of its answer, and every re-send gets that answer without a
// second effect. An unsigned, stale or forged delivery is refused 401
// (CodeUnsigned, CodeTimestampInvalid, CodeSignatureInvalid) and
// nothing is recorded.
//
// Senders deliver at least once and not in order: a retry may arrive
// after a later event (docs/webhooks.md). A handler whose events must be
// applied in order compares the sender's own sequence or timestamp with
// what its business rows hold, in the same transaction, and ignores or
// parks what is older; AdvanceSequence is that check for a sender that
// numbers its events.
//
// Everything in this package is safe for concurrent use.
package webhook
