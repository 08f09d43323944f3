package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

// Sealer encrypts the bodies a Store keeps for the whole retention window —
// response snapshots, and the requests and answers of effect attempts — so
// that a database reader or a backup sees no plaintext (SPEC C4). Package
// keyring's Ring is the implementation idem ships (AES-256-GCM with a key
// ring); a Store without a Sealer keeps bodies in plaintext.
//
// aad is bound to the sealed bytes (authenticated, not stored): drivers
// pass the identity of the record the body belongs to (BodyOf), so a body
// copied to another record does not open. With a Sealer a Store serves
// only bodies it opens: plaintext is refused (ErrTampered). A Sealer
// must be safe for concurrent use.
type Sealer interface {
	// ActiveKeyID names the key Seal uses now.
	ActiveKeyID() string
	// Seal encrypts plaintext under the active key and returns that key's
	// ID with the sealed bytes.
	Seal(plaintext, aad []byte) (keyID string, sealed []byte, err error)
	// Open decrypts sealed bytes made by Seal under keyID with the same
	// aad. It fails with an error wrapping ErrUnknownKey if it does not
	// hold keyID, and with another error if the bytes or aad differ.
	Open(keyID string, sealed, aad []byte) ([]byte, error)
}

// ErrUnreadable: a stored body could not be opened — its key is not in the
// Store's key ring (or the Store has none), the sealed bytes do not
// belong to the record they were read from, or the Store has a key ring
// and the body is in plaintext. The body is never returned; callers fail
// closed, as for idem.ErrDigestMismatch.
var ErrUnreadable = errors.New("registry: a stored body cannot be opened")

// ErrTampered wraps ErrUnreadable (errors.Is matches both) when the body
// is not one the key ring sealed for this record: plaintext where a key
// ring is configured, or sealed bytes that do not authenticate (edited,
// or moved from another record, or their record's digest or identity
// changed). Only a database writer or a restored backup from elsewhere
// produces it; callers log and count it as tampering. A body under a key
// the ring lacks is ErrUnreadable alone: a configuration fault.
var ErrTampered = fmt.Errorf("%w: it fails authentication (tampering)", ErrUnreadable)

// Resealer is implemented by Stores whose bodies can be re-encrypted under
// the Sealer's active key (both drivers): idem keys rotate uses it.
type Resealer interface {
	// Reseal re-encrypts, under the active key, the stored bodies sealed
	// with another key among the next batch of at most limit records after
	// cursor ("" starts at the beginning), in one transaction that locks
	// them. Each body is opened (and a response checked against its
	// digest) before it is sealed again; the plaintext never changes. A
	// body that cannot be opened — under a key the ring lacks, tampered,
	// or in plaintext (a re-seal never seals plaintext: it could be a
	// forgery, and the database refuses the change) — is left as it is
	// and listed in the batch's Skipped; the rest of the batch goes on.
	// Bodies already under the active key are left alone, so a rotation
	// that was interrupted resumes by starting again. A Store without a
	// Sealer refuses (ErrNoSealer). ctx governs the call.
	Reseal(ctx context.Context, cursor string, limit int) (ResealBatch, error)
	// KeyUsage counts stored bodies (responses, effect requests and
	// answers; not outbox payloads) by the ID of the key that sealed them; ""
	// counts plaintext ones. ctx governs the query.
	KeyUsage(ctx context.Context) (map[string]int64, error)
}

// MaxSealOverhead bounds how many bytes a Sealer may add to a response
// body: a sealed body longer than idem.MaxStoredBody + MaxSealOverhead is
// refused by the drivers (and their databases), as an unsealed body over
// idem.MaxStoredBody is. package keyring adds 29 bytes (version, nonce,
// tag).
const MaxSealOverhead = 1024

// CheckSealedResponse returns nil when sealed, a response body as a
// Sealer returned it, fits the stored column's bound
// (idem.MaxStoredBody + MaxSealOverhead), else an error wrapping
// idem.ErrResponseRefused.
func CheckSealedResponse(sealed []byte) error {
	if len(sealed) > idem.MaxStoredBody+MaxSealOverhead {
		return fmt.Errorf("registry: sealed response body of %d bytes exceeds %d (the sealer adds more than MaxSealOverhead): %w",
			len(sealed), idem.MaxStoredBody+MaxSealOverhead, idem.ErrResponseRefused)
	}
	return nil
}

// ResealBatch is what one Reseal call did.
type ResealBatch struct {
	// Next is the cursor to pass next; "" when the whole store was visited.
	Next string
	// Changed counts the bodies re-sealed.
	Changed int
	// Skipped lists the bodies that could not be opened and were left as
	// they are.
	Skipped []SkippedBody
}

// SkippedBody is a body Reseal could not open.
type SkippedBody struct {
	// Body names it: "operation ID" for a response, "effect ID/NAME
	// request|answer" for an effect part, "message ID" for an outbox
	// payload.
	Body string
	// Err says why: it wraps ErrUnreadable (ErrTampered included) or
	// idem.ErrDigestMismatch.
	Err error
}

// ErrNoSealer: Reseal was called on a Store that has no Sealer.
var ErrNoSealer = errors.New("registry: the store has no sealer")

// BodyOf names what a stored body belongs to — a record's response, or
// the request or answer of an effect attempt — and so the associated data
// its seal binds: a body moved to another record, or left in place while
// its record's digest changes, does not open. It is a plain value: the
// associated data is built only when a body is actually sealed or opened,
// so a Store without a Sealer pays nothing for it on the claim and replay
// path.
type BodyOf struct {
	scope             idem.ScopeHash
	operationID, name string
	part              string // "request" or "answer"; "" for a response
	digest            []byte
}

// ResponseOf is the response body of the record with that scope and
// operation ID whose stored digest (idem.Response.Digest, over status,
// media type, Location, ETag and body) is digest. The seal binds all
// three: the scope and operation ID so a body does not open on another
// record (the operation ID is new for every record, so not even on a
// later record of the same scope), the digest so that the response's
// plaintext columns cannot change either — the digest, checked after
// opening, covers them, and the digest itself is authenticated by the
// seal. The owner generation is not bound: it changes while the record is
// in flight and never after it settles, and the operation ID already
// names the record.
func ResponseOf(scope idem.ScopeHash, operationID string, digest []byte) BodyOf {
	return BodyOf{scope: scope, operationID: operationID, digest: digest}
}

// EffectPartOf is part ("request" or "answer") of the attempt of the
// effect name of an operation.
func EffectPartOf(operationID, name, part string) BodyOf {
	return BodyOf{operationID: operationID, name: name, part: part}
}

// MessageOf is the payload of the outbox message with that ID (see
// MessageID) and topic.
func MessageOf(messageID, topic string) BodyOf {
	return BodyOf{operationID: messageID, name: topic, part: "message"}
}

// aad is the associated data, SHA-256 over a domain tag and the fields
// that name the body: for a response the scope, operation ID and digest;
// for an effect part the operation ID, effect name and part; for an
// outbox message its ID and topic.
func (b BodyOf) aad() []byte {
	var sum [32]byte
	switch b.part {
	case "":
		sum = idem.HashStrings("idem/sealed/response/v2", string(b.scope[:]), b.operationID, string(b.digest))
	case "message":
		sum = idem.HashStrings("idem/sealed/message", b.operationID, b.name)
	default:
		sum = idem.HashStrings("idem/sealed/effect", b.operationID, b.name, b.part)
	}
	return sum[:]
}

// legacyAAD is the associated data response bodies were sealed with
// before the seal bound the operation ID and the digest: the domain tag
// and the scope alone. Only a re-seal opens with it (ResealBody), after
// which the response is checked against its digest, so such a body is
// refused on replay until idem keys rotate moves it, under a new key, to
// the current binding. nil for other bodies.
func (b BodyOf) legacyAAD() []byte {
	if b.part != "" {
		return nil
	}
	return append([]byte("idem/sealed/response\x00"), b.scope[:]...)
}

// SealBody seals body for storage. With a nil Sealer it returns body and a
// nil key ID (plaintext); otherwise the active key's ID and the sealed
// bytes. A nil body stays nil.
func SealBody(s Sealer, body []byte, of BodyOf) (keyID *string, stored []byte, err error) {
	if s == nil || body == nil {
		return nil, body, nil
	}
	id, sealed, err := s.Seal(body, of.aad())
	if err != nil {
		return nil, nil, fmt.Errorf("registry: sealing a body: %w", err)
	}
	return &id, sealed, nil
}

// SealPayload seals the payload of the outbox message with that ID and
// topic for storage, as SealBody.
func SealPayload(s Sealer, messageID, topic string, payload []byte) (keyID *string, stored []byte, err error) {
	return SealBody(s, payload, MessageOf(messageID, topic))
}

// OpenPayload opens a stored outbox payload in place: m.Payload becomes
// the plaintext, or nil with m.Unreadable set if it does not open (see
// OpenBody).
func OpenPayload(s Sealer, keyID *string, m *OutboxMessage) {
	plain, err := OpenBody(s, keyID, m.Payload, MessageOf(m.ID, m.Topic))
	if err != nil {
		m.Payload, m.Unreadable = nil, fmt.Errorf("outbox message %s: %w", m.ID, err)
		return
	}
	if plain == nil {
		plain = []byte{}
	}
	m.Payload = plain
}

// OpenBody returns the plaintext of a stored body. Without a Sealer a
// plaintext body (keyID nil) is returned as stored and a sealed one is
// ErrUnreadable. With a Sealer every body must be sealed for its record
// (an effect's part not written yet, NULL, is returned as nil):
// a plaintext body, or one that does not authenticate, is ErrTampered (a
// database writer could plant either); one under a key the Sealer lacks
// is ErrUnreadable.
func OpenBody(s Sealer, keyID *string, stored []byte, of BodyOf) ([]byte, error) {
	switch {
	case keyID == nil && s == nil:
		return stored, nil
	case keyID == nil && stored == nil && of.part != "":
		return nil, nil // an effect part not written yet
	case keyID == nil:
		return nil, fmt.Errorf("%w: the body is in plaintext and a key ring is configured", ErrTampered)
	case s == nil:
		return nil, fmt.Errorf("%w: sealed with key %q and no key ring is configured", ErrUnreadable, *keyID)
	}
	plain, err := s.Open(*keyID, stored, of.aad())
	switch {
	case errors.Is(err, ErrUnknownKey):
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	case err != nil:
		return nil, fmt.Errorf("%w: key %q: %v", ErrTampered, *keyID, err)
	}
	return plain, nil
}

// ErrUnknownKey is what a Sealer's Open wraps when it does not hold the
// key a body names (keyring.ErrUnknownKey is it); any other failure to
// open counts as tampering (ErrTampered).
var ErrUnknownKey = errors.New("no key with that ID")

// ResealBody opens a stored body (as OpenBody; a response sealed with the
// scope-only binding of earlier versions too, see legacyAAD) and seals
// its plaintext again under s's active key, for Resealer implementations. It returns the
// plaintext too, so a response can be checked against its digest before
// the new bytes are written.
func ResealBody(s Sealer, keyID *string, stored []byte, of BodyOf) (newKey string, sealed, plain []byte, err error) {
	if s == nil {
		return "", nil, nil, ErrNoSealer
	}
	plain, err = OpenBody(s, keyID, stored, of)
	if legacy := of.legacyAAD(); err != nil && legacy != nil && keyID != nil && errors.Is(err, ErrTampered) {
		if p, lerr := s.Open(*keyID, stored, legacy); lerr == nil {
			plain, err = p, nil
		}
	}
	if err != nil {
		return "", nil, nil, err
	}
	if newKey, sealed, err = s.Seal(plain, of.aad()); err != nil {
		return "", nil, nil, fmt.Errorf("registry: sealing a body: %w", err)
	}
	return newKey, sealed, plain, nil
}
