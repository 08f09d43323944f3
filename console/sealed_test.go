package console_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// TestSealedResponse: a response body sealed by the store's key ring is
// shown decrypted to an operator with show_responses; a store whose ring
// lacks the key cannot open it, and the page says so (503
// STORE_UNAVAILABLE) instead of showing anything.
func TestSealedResponse(t *testing.T) {
	t.Parallel()
	ring := func(id string) *keyring.Ring {
		k, err := keyring.NewKey(id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := keyring.New(keyring.File{Active: id, Keys: []keyring.Key{k}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "sealed.db")
	open := func(r *keyring.Ring) registry.Store {
		s, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Sealer: r})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	store := open(ring("k1"))
	ctx := t.Context()
	c := registry.Claim{Operation: opKind}
	c.Scope[0], c.Fingerprint[0] = 3, 3
	rec, _, err := store.Reserve(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{"sealed":"plain-7710"}`)}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	path := "/admin/operations/" + rec.OperationID

	e := newEnv(t, store, effect.Answer{})
	cl, _ := e.login(aliceToken)
	if code, _, body := e.do(cl, path, nil); code != http.StatusOK || !strings.Contains(body, "plain-7710") {
		t.Errorf("sealed body with the key: %d, shown %v", code, strings.Contains(body, "plain-7710"))
	}

	other := newEnv(t, open(ring("k2")), effect.Answer{})
	cl, _ = other.login(aliceToken)
	code, _, body := other.do(cl, path, nil)
	if code != http.StatusServiceUnavailable || errorCode(body) != "STORE_UNAVAILABLE" || !strings.Contains(body, "cannot be read") ||
		strings.Contains(body, "plain-7710") {
		t.Errorf("sealed body without the key: %d %q %s", code, errorCode(body), body)
	}
}
