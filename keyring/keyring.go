// Package keyring holds the key ring that encrypts the bodies a registry
// keeps at rest (registry.Sealer): AES-256-GCM from the standard library,
// keys named by ID, one of them active. The standard library's AEAD is the
// well-kept implementation for the job (constant-time, hardware AES where
// the CPU has it); what is written here is only the key file and the
// choice of key. A service that keeps its keys in a KMS implements
// registry.Sealer itself.
//
// New bodies are sealed with the active key; bodies sealed with any other
// key of the ring stay readable, so a rotation is: add a key, make it
// active, restart the writers, run `idem keys rotate` to re-seal the old
// bodies, and only then drop the old key from the file. A server seals
// through a Gate, which holds the active key back until every live
// instance has announced it in the registry (registry.KeyRoster). A body whose key
// is missing, or that was moved to another record, does not open
// (registry.ErrUnreadable) and is never served.
//
// The key file is JSON:
//
//	{"active": "2026-12", "keys": [{"id": "2026-11", "secret": "<base64 of 32 bytes>"},
//	                               {"id": "2026-12", "secret": "<base64 of 32 bytes>"}]}
//
// Keep it readable by the service's user only. AES-GCM with random 96-bit
// nonces is safe for about 2^32 seals per key: rotate long before that.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/idemkit/idem/internal/secretfile"
	"github.com/idemkit/idem/registry"
)

// KeySize is the length of a key's secret: 32 bytes, AES-256.
const KeySize = 32

// version is the first byte of every sealed body; it names this layout:
// version, 12-byte nonce, ciphertext with its 16-byte tag.
const version = 1

// Errors of Open.
var (
	// ErrUnknownKey: the sealed body names a key the ring does not hold.
	// It wraps registry.ErrUnknownKey, so a Store tells it from tampering.
	ErrUnknownKey = fmt.Errorf("keyring: %w", registry.ErrUnknownKey)
	// ErrOpen: the sealed body does not authenticate under its key and
	// associated data (tampered, truncated or moved to another record).
	ErrOpen = errors.New("keyring: sealed body does not authenticate")
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Ring is a set of AES-256-GCM keys with one active key. Make one with
// Parse, Load or New; the zero Ring is not usable. A Ring is immutable and
// safe for concurrent use. It implements registry.Sealer.
type Ring struct {
	active string
	order  []string // key IDs in file order
	aeads  map[string]cipher.AEAD
}

var _ registry.Sealer = (*Ring)(nil)

// File is the JSON form of a key file.
type File struct {
	Active string `json:"active"`
	Keys   []Key  `json:"keys"`
}

// Key is one key of a File: its ID and its secret, KeySize bytes in
// standard base64.
type Key struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// maxFile bounds the size of a key file.
const maxFile = 1 << 20

// Load reads and parses the key file at path. It refuses a file its
// group or others may read or change (internal/secretfile), as ssh
// refuses a private key.
func Load(path string) (*Ring, error) {
	data, err := secretfile.Read(path, "key ring", maxFile)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	return Parse(data)
}

// Parse parses a key file. Every key must have a unique ID of 1 to 64
// letters, digits, '.', '_' or '-' and a secret of exactly KeySize bytes;
// active must name one of them.
func Parse(data []byte) (*Ring, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("keyring: key file: %w", err)
	}
	return New(f)
}

// New builds a Ring from f, checked as Parse says.
func New(f File) (*Ring, error) {
	r := &Ring{active: f.Active, aeads: make(map[string]cipher.AEAD, len(f.Keys))}
	for _, k := range f.Keys {
		if !idPattern.MatchString(k.ID) {
			return nil, fmt.Errorf("keyring: key ID %q: want 1 to 64 of [A-Za-z0-9._-]", k.ID)
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("keyring: key ID %q appears twice", k.ID)
		}
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil || len(secret) != KeySize {
			return nil, fmt.Errorf("keyring: key %q: the secret must be %d bytes in standard base64", k.ID, KeySize)
		}
		block, err := aes.NewCipher(secret)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %q: %w", k.ID, err)
		}
		r.aeads[k.ID] = aead
		r.order = append(r.order, k.ID)
	}
	if _, ok := r.aeads[f.Active]; !ok {
		return nil, fmt.Errorf("keyring: the active key %q is not in the file", f.Active)
	}
	return r, nil
}

// NewKey returns a Key with the given ID and a fresh random secret.
func NewKey(id string) (Key, error) {
	if !idPattern.MatchString(id) {
		return Key{}, fmt.Errorf("keyring: key ID %q: want 1 to 64 of [A-Za-z0-9._-]", id)
	}
	secret := make([]byte, KeySize)
	rand.Read(secret) // never fails (crypto/rand)
	return Key{ID: id, Secret: base64.StdEncoding.EncodeToString(secret)}, nil
}

// ActiveKeyID returns the ID of the key Seal uses.
func (r *Ring) ActiveKeyID() string { return r.active }

// KeyIDs returns the IDs of the ring's keys in the file's order.
func (r *Ring) KeyIDs() []string { return append([]string(nil), r.order...) }

// Seal encrypts plaintext under the active key, binding aad, with a fresh
// random nonce.
func (r *Ring) Seal(plaintext, aad []byte) (string, []byte, error) {
	return r.sealWith(r.active, plaintext, aad)
}

// sealWith is Seal under the key keyID, which the ring holds.
func (r *Ring) sealWith(keyID string, plaintext, aad []byte) (string, []byte, error) {
	aead := r.aeads[keyID]
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plaintext)+aead.Overhead())
	out[0] = version
	rand.Read(out[1:])
	return keyID, aead.Seal(out, out[1:], plaintext, aad), nil
}

// Open decrypts sealed bytes made by Seal with key keyID and the same aad.
// It returns an error wrapping ErrUnknownKey or ErrOpen on failure.
func (r *Ring) Open(keyID string, sealed, aad []byte) ([]byte, error) {
	aead, ok := r.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, keyID)
	}
	n := aead.NonceSize()
	if len(sealed) < 1+n+aead.Overhead() || sealed[0] != version {
		return nil, ErrOpen
	}
	plain, err := aead.Open(nil, sealed[1:1+n], sealed[1+n:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	if plain == nil {
		plain = []byte{}
	}
	return plain, nil
}
