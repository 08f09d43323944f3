// Package strictjson decodes small configuration files (the API tokens
// of the reference service, the console's operators) strictly: JSON that
// idem's canonical parser accepts — so a member given twice, which
// encoding/json would silently resolve to the last, is refused — with no
// unknown members. It exists because encoding/json alone does neither
// check on duplicates, and two callers need the same reading.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/idemkit/idem/canon"
)

// Decode decodes b, at most maxBytes long, into v, refusing what the
// package comment says.
func Decode(b []byte, maxBytes int, v any) error {
	if len(b) > maxBytes {
		return fmt.Errorf("file larger than %d bytes", maxBytes)
	}
	if _, err := (canon.Options{Mode: canon.ModeJSON, MaxBytes: maxBytes}).Append(nil, b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
