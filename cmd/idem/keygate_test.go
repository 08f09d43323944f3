package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestKeyNotUsedUntilHeld: two servers share a registry; one still runs
// with the old key file (k1), the other with a new active key (k2). The
// new server keeps sealing with k1 while the old one is alive, so the
// old server replays everything the new one stored; idem keys rotate
// refuses, naming the instance that lacks k2, and changes nothing. Once
// the old server stops, the new one seals with k2 and the rotation runs.
//
// threat:key-used-before-held
func TestKeyNotUsedUntilHeld(t *testing.T) {
	pgtest.EachDriver(t, "serve.db", testKeyNotUsedUntilHeld)
}

func testKeyNotUsedUntilHeld(t *testing.T, _, dsn string) {
	dir := t.TempDir()
	oldKeys, newKeys := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", oldKeys, "--id", "k1"); code != exitOK {
		t.Fatalf("keys add k1: %d %s %s", code, out, errs)
	}
	data, err := os.ReadFile(oldKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newKeys, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", newKeys, "--id", "k2"); code != exitOK {
		t.Fatalf("keys add k2: %d %s %s", code, out, errs)
	}
	keyOf := func(op string) string {
		t.Helper()
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		var k string
		if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			return tx.QueryRow(ctx, `SELECT coalesce(resp_key, '') FROM idem_operations WHERE operation_id = $1`, op).Scan(&k)
		}); err != nil {
			t.Fatal(err)
		}
		return k
	}
	create := func(s *server, memo string) (key, body, op string) {
		t.Helper()
		key, body = opaqueKey(), `{"amount":"3","currency":"EUR","payee":"acct_9","memo":"`+memo+`"}`
		resp, b := s.post(t, "demo", key, body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
		return key, body, resp.Header.Get("Idempotency-Operation")
	}

	old := startServe(t, "--db", dsn, "--encryption-keys", oldKeys, "--key-refresh", "50ms")
	// Each server announces its keys and reads the others' before it
	// listens: the new one knows the old one lacks k2 from its start.
	next := startServe(t, "--db", dsn, "--encryption-keys", newKeys, "--key-refresh", "50ms")
	key, body, op := create(next, "stored-by-the-new-server")
	if k := keyOf(op); k != "k1" {
		t.Errorf("the new server sealed with %q while the old one lacks k2, want k1", k)
	}
	if resp, b := old.post(t, "demo", key, body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the old server's replay of the new server's record: %d %s, want a 201 replay", resp.StatusCode, b)
	}

	code, out, errs := runCmd(t, "", "keys", "rotate", "--db", dsn, "--encryption-keys", newKeys)
	if code != exitRefused || !strings.Contains(errs, "do not hold key k2") || !strings.Contains(errs, instanceOf(t, old)) {
		t.Errorf("keys rotate while the old server lacks k2: %d %q %q, want a refusal naming it", code, out, errs)
	}
	if k := keyOf(op); k != "k1" {
		t.Errorf("the refused rotation changed the record's key to %q", k)
	}
	if resp, b := old.post(t, "demo", key, body); resp.StatusCode != http.StatusCreated {
		t.Errorf("the old server's replay after the refused rotation: %d %s", resp.StatusCode, b)
	}

	old.stop(t)
	next.logs.waitFor(t, func(l string) bool { return strings.Contains(l, "sealing new bodies with the active key") }, 10*time.Second,
		"the new server never took k2 into use")
	_, _, op2 := create(next, "after-the-old-server-left")
	if k := keyOf(op2); k != "k2" {
		t.Errorf("after the old server left, the new server sealed with %q, want k2", k)
	}
	if code, out, errs := runCmd(t, "", "keys", "rotate", "--db", dsn, "--encryption-keys", newKeys); code != exitOK {
		t.Errorf("keys rotate once every server holds k2: %d %q %q", code, out, errs)
	}
	if k := keyOf(op); k != "k2" {
		t.Errorf("after the rotation the first record is under %q, want k2", k)
	}
	if resp, b := next.post(t, "demo", key, body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after the rotation: %d %s", resp.StatusCode, b)
	}
	next.stop(t)
}

// instanceOf returns the instance name a server announced its keys under,
// from its log.
func instanceOf(t *testing.T, s *server) string {
	t.Helper()
	logs := s.logs.String()
	_, rest, ok := strings.Cut(logs, "instance=")
	if !ok {
		t.Fatalf("no instance= in the server's log:\n%s", logs)
	}
	name, _, _ := strings.Cut(rest, "\n")
	return strings.Fields(name)[0]
}
