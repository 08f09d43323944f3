package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesLooseSecretFiles: "idem serve" does not start (exit 1,
// never listening) when its key ring, webhook secret, operators file or
// tokens file may be read by its group or others, and says which file
// and what mode; the same files at 0600 start it. A webhook secret of
// fewer than 24 bytes is refused too.
// threat:secret-file-readable threat:webhook-secret-short
func TestServeRefusesLooseSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	write := func(name, body string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if code, _, stderr := runCmd(t, "", "keys", "add", "--encryption-keys", filepath.Join(dir, "keys.json"), "--id", "k1"); code != 0 {
		t.Fatalf("keys add: %d %s", code, stderr)
	}
	ring, _ := os.ReadFile(filepath.Join(dir, "keys.json"))
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdefghijklmn"))
	files := map[string]struct{ flag, body, extra string }{
		"key ring":            {"--encryption-keys", string(ring), ""},
		"webhook secret file": {"--webhook-secret-file", secret, "--webhook"},
		"operators file":      {"--operators", `{"op-alice-Zr4kW9pQ2mX7vT1nB8yL5c": {"name": "alice"}}`, "--admin-addr"},
		"tokens file":         {"--auth", `{"tok-Zr4kW9pQ2mX7vT1nB8yL5cHd3s": {"tenant": "t", "principal": "p"}}`, ""},
	}
	for what, f := range files {
		args := func(path string) []string {
			a := []string{"--db", db, f.flag, path}
			switch f.extra {
			case "--webhook":
				a = append(a, "--webhook", "http://127.0.0.1:1/hook")
			case "--admin-addr":
				a = append(a, "--admin-addr", "127.0.0.1:0")
			}
			return a
		}
		loose := write(strings.ReplaceAll(what, " ", "-")+"-0644", f.body, 0o644)
		code, stderr := serveExit(t, args(loose)...)
		if code != exitRefused || !strings.Contains(stderr, loose) || !strings.Contains(stderr, "mode 0644") || !strings.Contains(stderr, what) {
			t.Errorf("%s at 0644: exit %d; want %d with the file, \"mode 0644\" and %q:\n%s", what, code, exitRefused, what, stderr)
		}
		tight := write(strings.ReplaceAll(what, " ", "-")+"-0600", f.body, 0o600)
		s := startServe(t, args(tight)...)
		s.stop(t)
	}
	short := write("short-secret", "whsec_"+base64.StdEncoding.EncodeToString([]byte("23-bytes-is-too-short!!")), 0o600)
	if code, stderr := serveExit(t, "--db", db, "--webhook", "http://127.0.0.1:1/hook", "--webhook-secret-file", short); code != exitRefused || !strings.Contains(stderr, "at least 24") {
		t.Errorf("a 23-byte webhook secret: exit %d; want %d saying at least 24:\n%s", code, exitRefused, stderr)
	}
}
