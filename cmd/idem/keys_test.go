package main

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/keyring"
)

// opaqueKey returns a fresh high-entropy Idempotency-Key.
func opaqueKey() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestKeysRotate is encryption at rest end to end on the reference
// service (SPEC C4): with --encryption-keys no stored response body holds
// its plaintext; after "idem keys add" and "idem keys rotate" no body uses
// the old key, and a server that has only the new key replays every old
// response byte-identical; a sealed response copied onto another record,
// or read without its key, fails closed with 503 RESPONSE_UNREADABLE.
// Proves threat:reading-bodies-at-rest (docs/threat-model.md).
// Proves threat:moved-sealed-body (docs/threat-model.md).
// Proves threat:missing-key (docs/threat-model.md).
// Proves threat:compromised-key (docs/threat-model.md).
func TestKeysRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, dbPath := filepath.Join(dir, "keys.json"), filepath.Join(dir, "serve.db")
	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", keys, "--id", "k1"); code != exitOK {
		t.Fatalf("keys add k1: %d %s %s", code, out, errs)
	}
	if fi, err := os.Stat(keys); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", fi, err)
	}

	s := startServe(t, "--db", "sqlite:"+dbPath, "--encryption-keys", keys)
	type sent struct{ key, body, op string }
	var reqs []sent
	var firsts [][]byte
	for _, marker := range []string{"marker-alpha-7f3a", "marker-beta-91c2"} {
		r := sent{key: opaqueKey(), body: `{"amount":"3","currency":"EUR","payee":"acct_9","memo":"` + marker + `"}`}
		resp, b := s.post(t, "demo", r.key, r.body)
		if resp.StatusCode != http.StatusCreated || !strings.Contains(string(b), marker) {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
		r.op = resp.Header.Get("Idempotency-Operation")
		reqs, firsts = append(reqs, r), append(firsts, b)
	}
	s.stop(t)

	// The servers of this test have closed the file each time this handle
	// is used, but SQLite may still be finishing a checkpoint: wait for
	// the lock rather than fail.
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT resp_body, coalesce(resp_key, '') FROM idem_operations WHERE resp_body IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var body []byte
		var key string
		if err := rows.Scan(&body, &key); err != nil {
			t.Fatal(err)
		}
		n++
		if key != "k1" || bytes.Contains(body, []byte("marker-")) || bytes.Contains(body, []byte("acct_9")) {
			t.Errorf("stored body under key %q holds plaintext: %q", key, body)
		}
	}
	rows.Close()
	if n != 2 {
		t.Fatalf("%d stored bodies, want 2", n)
	}

	// A new active key, and the rotation.
	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", keys, "--id", "k2"); code != exitOK {
		t.Fatalf("keys add k2: %d %s %s", code, out, errs)
	}
	code, out, errs := runCmd(t, "", "keys", "rotate", "--db", "sqlite:"+dbPath, "--encryption-keys", keys, "--batch", "1", "--json")
	var rot rotateJSON
	if code != exitOK || json.Unmarshal([]byte(out), &rot) != nil {
		t.Fatalf("keys rotate: %d %q %s", code, out, errs)
	}
	if rot.Active != "k2" || rot.Resealed != 2 || len(rot.Usage) != 1 || rot.Usage["k2"] != 2 {
		t.Errorf("keys rotate: %+v, want 2 re-sealed and every body under k2", rot)
	}
	// The old key leaves the file: every old response still replays.
	data, err := os.ReadFile(keys)
	if err != nil {
		t.Fatal(err)
	}
	var file keyring.File
	if err := json.Unmarshal(data, &file); err != nil || len(file.Keys) != 2 {
		t.Fatalf("key file %s: %v", data, err)
	}
	file.Keys = file.Keys[1:]
	only := filepath.Join(dir, "k2-only.json")
	data, _ = json.Marshal(file)
	if err := os.WriteFile(only, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, "--db", "sqlite:"+dbPath, "--encryption-keys", only)
	for i, r := range reqs {
		resp, b := s.post(t, "demo", r.key, r.body)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, firsts[i]) {
			t.Errorf("replay %d after the rotation: %d %v %s, want %s", i, resp.StatusCode, resp.Header, b, firsts[i])
		}
	}
	s.stop(t)

	// Without the key ring the sealed responses are never served.
	s = startServe(t, "--db", "sqlite:"+dbPath)
	resp, b := s.post(t, "demo", reqs[0].key, reqs[0].body)
	wantUnreadable(t, "without the key ring", resp, b)
	s.stop(t)

	// A database writer copies the first response, whole, onto the second
	// record (dropping the guard that forbids it): it does not open there.
	if _, err := db.Exec(`DROP TRIGGER idem_operations_terminal; DROP TRIGGER idem_operations_settled_body`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE idem_operations SET
		resp_status = (SELECT o.resp_status FROM idem_operations o WHERE o.operation_id = $1),
		resp_media_type = (SELECT o.resp_media_type FROM idem_operations o WHERE o.operation_id = $1),
		resp_location = (SELECT o.resp_location FROM idem_operations o WHERE o.operation_id = $1),
		resp_etag = (SELECT o.resp_etag FROM idem_operations o WHERE o.operation_id = $1),
		resp_body = (SELECT o.resp_body FROM idem_operations o WHERE o.operation_id = $1),
		resp_digest = (SELECT o.resp_digest FROM idem_operations o WHERE o.operation_id = $1),
		resp_key = (SELECT o.resp_key FROM idem_operations o WHERE o.operation_id = $1)
		WHERE operation_id = $2`, reqs[0].op, reqs[1].op); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, "--db", "sqlite:"+dbPath, "--encryption-keys", only)
	resp, b = s.post(t, "demo", reqs[1].key, reqs[1].body)
	wantUnreadable(t, "the moved body", resp, b)
	if resp, b := s.post(t, "demo", reqs[0].key, reqs[0].body); resp.StatusCode != http.StatusCreated || !bytes.Equal(b, firsts[0]) {
		t.Errorf("the original after the copy: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
}

// wantUnreadable checks a 503 RESPONSE_UNREADABLE problem that shows no
// stored body.
func wantUnreadable(t *testing.T, what string, resp *http.Response, b []byte) {
	t.Helper()
	var p struct{ Code string }
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") == "" || json.Unmarshal(b, &p) != nil || p.Code != "RESPONSE_UNREADABLE" ||
		bytes.Contains(b, []byte("marker-")) {
		t.Errorf("%s: %d %v %s, want 503 RESPONSE_UNREADABLE with Retry-After", what, resp.StatusCode, resp.Header, b)
	}
}

// TestKeysRotateSkips: a rotation over a registry with one tampered body
// re-seals the others, names the tampered one in --json's skipped and on
// stderr, and exits 1; the tampered record still fails closed and the
// others replay under the new key.
//
// threat:rotation-stops-or-seals-forgery
func TestKeysRotateSkips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, dbPath := filepath.Join(dir, "keys.json"), filepath.Join(dir, "serve.db")
	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", keys, "--id", "k1"); code != exitOK {
		t.Fatalf("keys add k1: %d %s %s", code, out, errs)
	}
	s := startServe(t, "--db", "sqlite:"+dbPath, "--encryption-keys", keys)
	type sent struct{ key, body, op string }
	var reqs []sent
	for _, marker := range []string{"marker-tampered", "marker-good-1", "marker-good-2"} {
		r := sent{key: opaqueKey(), body: `{"amount":"3","currency":"EUR","payee":"acct_9","memo":"` + marker + `"}`}
		resp, b := s.post(t, "demo", r.key, r.body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
		r.op = resp.Header.Get("Idempotency-Operation")
		reqs = append(reqs, r)
	}
	s.stop(t)

	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP TRIGGER idem_operations_terminal; DROP TRIGGER idem_operations_settled_body`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE idem_operations SET resp_body = x'01deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef' WHERE operation_id = $1`, reqs[0].op); err != nil {
		t.Fatal(err)
	}

	if code, out, errs := runCmd(t, "", "keys", "add", "--encryption-keys", keys, "--id", "k2"); code != exitOK {
		t.Fatalf("keys add k2: %d %s %s", code, out, errs)
	}
	code, out, errs := runCmd(t, "", "keys", "rotate", "--db", "sqlite:"+dbPath, "--encryption-keys", keys, "--batch", "1", "--json")
	var rot rotateJSON
	if json.Unmarshal([]byte(out), &rot) != nil {
		t.Fatalf("keys rotate: %d %q %s", code, out, errs)
	}
	if code != exitRefused || rot.Resealed != 2 || len(rot.Skipped) != 1 || rot.Skipped[0] != "operation "+reqs[0].op ||
		!strings.Contains(errs, reqs[0].op) || !strings.Contains(errs, "1 bodies could not be opened") {
		t.Errorf("keys rotate: exit %d %+v stderr %s, want exit 1, 2 re-sealed and %s skipped", code, rot, errs, reqs[0].op)
	}
	if rot.Usage["k2"] != 2 || rot.Usage["k1"] != 1 {
		t.Errorf("usage after the rotation: %v, want k2: 2 and the tampered body still under k1", rot.Usage)
	}
	s = startServe(t, "--db", "sqlite:"+dbPath, "--encryption-keys", keys)
	resp, b := s.post(t, "demo", reqs[0].key, reqs[0].body)
	wantUnreadable(t, "the tampered body", resp, b)
	for _, r := range reqs[1:] {
		if resp, b := s.post(t, "demo", r.key, r.body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay after the rotation: %d %s", resp.StatusCode, b)
		}
	}
	s.stop(t)
}
