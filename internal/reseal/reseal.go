// Package reseal holds what both drivers' Store.Reseal share: the cursor
// through their two tables and the re-sealing of one body.
package reseal

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cursor is where a Reseal batch starts: in the responses, after Scope
// (nil: from the first), or in the effects, after (OperationID, Name).
type Cursor struct {
	Effects     bool
	Scope       []byte
	OperationID string
	Name        string
}

// Parse reads a cursor made by String; "" is the start.
func Parse(s string) (Cursor, error) {
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case "":
		return Cursor{Scope: []byte{}}, nil
	case "r":
		scope, err := hex.DecodeString(rest)
		if err == nil {
			return Cursor{Scope: scope}, nil
		}
	case "e":
		op, name, ok := strings.Cut(rest, ":")
		opID, err1 := hex.DecodeString(op)
		n, err2 := hex.DecodeString(name)
		if ok && err1 == nil && err2 == nil {
			return Cursor{Effects: true, OperationID: string(opID), Name: string(n)}, nil
		}
	}
	return Cursor{}, fmt.Errorf("reseal: malformed cursor %q", s)
}

// String is the cursor's opaque form.
func (c Cursor) String() string {
	if c.Effects {
		return "e:" + hex.EncodeToString([]byte(c.OperationID)) + ":" + hex.EncodeToString([]byte(c.Name))
	}
	return "r:" + hex.EncodeToString(c.Scope)
}

// Next returns the cursor after a batch that ended at c and held n of the
// limit rows asked for: the same table onwards while batches are full, the
// effects after the responses, "" after the effects.
func (c Cursor) Next(n, limit int) string {
	switch {
	case n >= limit:
		return c.String()
	case !c.Effects:
		return Cursor{Effects: true}.String()
	default:
		return ""
	}
}

// Unopenable reports whether err is a body that could not be opened — a
// key the ring lacks, tampering, plaintext, or a digest mismatch — which
// Reseal skips, as opposed to a database error, which stops it.
func Unopenable(err error) bool {
	return errors.Is(err, registry.ErrUnreadable) || errors.Is(err, idem.ErrDigestMismatch)
}

// Response re-seals a stored response body under the active key, after
// opening it and checking the response against its digest. resp holds
// the stored fields with the stored (sealed) body. A body it cannot open
// is an error for which Unopenable is true.
func Response(s registry.Sealer, operationID string, scope idem.ScopeHash, keyID *string,
	resp idem.Response, digest []byte) (newKey string, sealed []byte, err error) {
	newKey, sealed, plain, err := registry.ResealBody(s, keyID, resp.Body, registry.ResponseOf(scope, operationID, digest))
	if err != nil {
		return "", nil, err
	}
	resp.Body = plain
	if err := resp.Verify(digest); err != nil {
		return "", nil, err
	}
	return newKey, sealed, nil
}

// Part re-seals one part ("request" or "answer") of an effect attempt
// unless it is absent or already sealed with the active key, in which case
// it is returned as stored; changed says whether it was re-sealed. A part
// it cannot open is returned as stored, with skip naming it.
func Part(s registry.Sealer, operationID, name, part string, keyID *string, stored []byte) (
	newKey *string, out []byte, changed bool, skip *registry.SkippedBody, err error) {
	active := s.ActiveKeyID()
	if stored == nil || (keyID != nil && *keyID == active) {
		return keyID, stored, false, nil, nil
	}
	id, sealed, _, err := registry.ResealBody(s, keyID, stored, registry.EffectPartOf(operationID, name, part))
	switch {
	case Unopenable(err):
		return keyID, stored, false, &registry.SkippedBody{Body: "effect " + operationID + "/" + name + " " + part, Err: err}, nil
	case err != nil:
		return nil, nil, false, nil, fmt.Errorf("effect %s/%s %s: %w", operationID, name, part, err)
	}
	return &id, sealed, true, nil, nil
}
