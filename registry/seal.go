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
// pass the identity of the record the body belongs to (BodyOf), so a body copied to another record does not open. A Sealer
// must be safe for concurrent use.
type Sealer interface {
	// ActiveKeyID names the key Seal uses now.
	ActiveKeyID() string
	// Seal encrypts plaintext under the active key and returns that key's
	// ID with the sealed bytes.
	Seal(plaintext, aad []byte) (keyID string, sealed []byte, err error)
	// Open decrypts sealed bytes made by Seal under keyID with the same
	// aad. It fails if the key is unknown or the bytes or aad differ.
	Open(keyID string, sealed, aad []byte) ([]byte, error)
}

// ErrUnreadable: a stored body could not be opened — its key is not in the
// Store's key ring (or the Store has none), or the sealed bytes do not
// belong to the record they were read from. The body is never returned;
// callers fail closed, as for idem.ErrDigestMismatch.
var ErrUnreadable = errors.New("registry: a stored body cannot be opened")

// Resealer is implemented by Stores whose bodies can be re-encrypted under
// the Sealer's active key (both drivers): idem keys rotate uses it.
type Resealer interface {
	// Reseal re-encrypts, under the active key, the stored bodies not
	// sealed with it (plaintext ones included) among the next batch of at
	// most limit records after cursor ("" starts at the beginning), in one
	// transaction that locks them, and returns the cursor to pass next
	// ("" when the whole store was visited) and how many bodies it
	// changed. Each body is opened (and a response checked against its
	// digest) before it is sealed again. A body that cannot be opened
	// stops it with an error wrapping ErrUnreadable or
	// idem.ErrDigestMismatch that names the operation; nothing of that
	// batch is changed. Bodies already under the active key are left
	// alone, so a rotation that was interrupted resumes by starting again.
	// A Store without a Sealer refuses. ctx governs the call.
	Reseal(ctx context.Context, cursor string, limit int) (next string, changed int, err error)
	// KeyUsage counts stored bodies (responses, effect requests and
	// answers) by the ID of the key that sealed them; "" counts plaintext
	// ones. ctx governs the query.
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

// ErrNoSealer: Reseal was called on a Store that has no Sealer.
var ErrNoSealer = errors.New("registry: the store has no sealer")

// BodyOf names what a stored body belongs to — a record's response, or
// the request or answer of an effect attempt — and so the associated data
// its seal binds (a body moved to another record does not open). It is a
// plain value: the associated data is built only when a body is actually
// sealed or opened, so a Store without a Sealer pays nothing for it on the
// claim and replay path.
type BodyOf struct {
	scope             idem.ScopeHash
	operationID, name string
	part              string // "request" or "answer"; "" for a response
}

// ResponseOf is the response body of the record with that scope.
func ResponseOf(scope idem.ScopeHash) BodyOf { return BodyOf{scope: scope} }

// EffectPartOf is part ("request" or "answer") of the attempt of the
// effect name of an operation.
func EffectPartOf(operationID, name, part string) BodyOf {
	return BodyOf{operationID: operationID, name: name, part: part}
}

// aad is the associated data: for a response the domain tag and the
// scope; for an effect part SHA-256 over the domain tag, operation ID,
// effect name and part.
func (b BodyOf) aad() []byte {
	if b.part == "" {
		return append([]byte("idem/sealed/response\x00"), b.scope[:]...)
	}
	sum := idem.HashStrings("idem/sealed/effect", b.operationID, b.name, b.part)
	return sum[:]
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

// OpenBody returns the plaintext of a stored body: stored itself when
// keyID is nil (plaintext), else what s opens. A missing Sealer or a
// failure to open is an error wrapping ErrUnreadable.
func OpenBody(s Sealer, keyID *string, stored []byte, of BodyOf) ([]byte, error) {
	switch {
	case keyID == nil:
		return stored, nil
	case s == nil:
		return nil, fmt.Errorf("%w: sealed with key %q and no key ring is configured", ErrUnreadable, *keyID)
	}
	plain, err := s.Open(*keyID, stored, of.aad())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	return plain, nil
}

// ResealBody opens a stored body (as OpenBody) and seals its plaintext
// again under s's active key, for Resealer implementations. It returns the
// plaintext too, so a response can be checked against its digest before
// the new bytes are written.
func ResealBody(s Sealer, keyID *string, stored []byte, of BodyOf) (newKey string, sealed, plain []byte, err error) {
	if s == nil {
		return "", nil, nil, ErrNoSealer
	}
	if plain, err = OpenBody(s, keyID, stored, of); err != nil {
		return "", nil, nil, err
	}
	if newKey, sealed, err = s.Seal(plain, of.aad()); err != nil {
		return "", nil, nil, fmt.Errorf("registry: sealing a body: %w", err)
	}
	return newKey, sealed, plain, nil
}
