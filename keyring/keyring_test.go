package keyring_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/keyring"
)

func newRing(t *testing.T, active string, ids ...string) (*keyring.Ring, keyring.File) {
	t.Helper()
	f := keyring.File{Active: active}
	for _, id := range ids {
		k, err := keyring.NewKey(id)
		if err != nil {
			t.Fatal(err)
		}
		f.Keys = append(f.Keys, k)
	}
	data, _ := json.Marshal(f)
	r, err := keyring.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return r, f
}

// TestSealOpen: a sealed body opens with its key and associated data
// only; every other key, associated data, or a changed byte fails with
// ErrOpen or ErrUnknownKey, and two seals of one plaintext differ.
// Proves threat:reading-bodies-at-rest (docs/threat-model.md).
func TestSealOpen(t *testing.T) {
	t.Parallel()
	r, f := newRing(t, "b", "a", "b")
	plain, aad := []byte(`{"amount":"12.50"}`), []byte("scope-1")
	id, sealed, err := r.Seal(plain, aad)
	if err != nil || id != "b" || r.ActiveKeyID() != "b" {
		t.Fatalf("Seal: %q %v", id, err)
	}
	if bytes.Contains(sealed, plain) {
		t.Errorf("sealed bytes hold the plaintext")
	}
	if got, err := r.Open(id, sealed, aad); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("Open: %q %v", got, err)
	}
	if _, again, _ := r.Seal(plain, aad); bytes.Equal(again, sealed) {
		t.Errorf("two seals of one plaintext are equal (nonce reuse)")
	}
	if _, err := r.Open(id, sealed, []byte("scope-2")); !errors.Is(err, keyring.ErrOpen) {
		t.Errorf("Open with other associated data: %v, want ErrOpen", err)
	}
	if _, err := r.Open("a", sealed, aad); !errors.Is(err, keyring.ErrOpen) {
		t.Errorf("Open with another key of the ring: %v, want ErrOpen", err)
	}
	if _, err := r.Open("z", sealed, aad); !errors.Is(err, keyring.ErrUnknownKey) {
		t.Errorf("Open with an unknown key: %v, want ErrUnknownKey", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := r.Open(id, bad, aad); !errors.Is(err, keyring.ErrOpen) {
			t.Fatalf("Open with byte %d flipped: %v, want ErrOpen", i, err)
		}
	}
	if _, err := r.Open(id, sealed[:10], aad); !errors.Is(err, keyring.ErrOpen) {
		t.Errorf("Open of a truncated body: %v, want ErrOpen", err)
	}
	// The same secrets under another active key still open old bodies.
	f.Active = "a"
	older, err := keyring.New(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := older.Open(id, sealed, aad); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("Open by a ring with another active key: %q %v", got, err)
	}
	if _, empty, _ := r.Seal(nil, aad); empty == nil {
		t.Errorf("sealing an empty body gave nil")
	} else if got, err := r.Open("b", empty, aad); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty body round trip: %q %v", got, err)
	}
}

// TestParseRefuses: malformed key files are refused with a reason.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	good, _ := keyring.NewKey("k1")
	for name, tc := range map[string]struct{ file, want string }{
		"not JSON":       {`{`, "key file"},
		"no active":      {`{"active":"k2","keys":[{"id":"k1","secret":"` + good.Secret + `"}]}`, "active key"},
		"short secret":   {`{"active":"k1","keys":[{"id":"k1","secret":"AAAA"}]}`, "32 bytes"},
		"not base64":     {`{"active":"k1","keys":[{"id":"k1","secret":"!!"}]}`, "32 bytes"},
		"bad ID":         {`{"active":"a b","keys":[{"id":"a b","secret":"` + good.Secret + `"}]}`, "key ID"},
		"duplicate ID":   {`{"active":"k1","keys":[{"id":"k1","secret":"` + good.Secret + `"},{"id":"k1","secret":"` + good.Secret + `"}]}`, "twice"},
		"no keys at all": {`{"active":"","keys":[]}`, "active key"},
	} {
		if _, err := keyring.Parse([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", name, err, tc.want)
		}
	}
	if _, err := keyring.NewKey(strings.Repeat("x", 65)); err == nil {
		t.Errorf("NewKey accepted a 65-character ID")
	}
}
