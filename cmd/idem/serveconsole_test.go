package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consoleLine matches the console's line of "idem serve --admin-addr".
var consoleLine = regexp.MustCompile(`msg="console listening on ([^\s"]+)" addr=([^\s"]+)`)

// TestServeConsole: "idem serve --admin-addr 127.0.0.1:0 --operators F"
// logs one console line after the service's "listening on" line (which
// stays the first, for harness/launch), the console's login page answers
// 200, an operator logs in and an API token does not, and both listeners
// stop with the server.
func TestServeConsole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ops := filepath.Join(dir, "operators.json")
	if err := os.WriteFile(ops, []byte(`{"op-alice-Zr4kW9pQ2mX7vT1nB8yL5c": {"name": "alice"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "serve.db"), "--admin-addr", "127.0.0.1:0", "--operators", ops)
	s.logs.waitFor(t, contains("console listening on"), 30*time.Second, "the console line")
	logs := s.logs.String()
	m := consoleLine.FindAllStringSubmatch(logs, -1)
	if len(m) != 1 || m[0][1] != m[0][2] {
		t.Fatalf("console lines %q; want exactly one with its address:\n%s", m, logs)
	}
	consoleURL := "http://" + m[0][1]
	if first := listeningLine.FindStringSubmatch(logs); first == nil || "http://"+first[1] != s.url || s.url == consoleURL ||
		strings.Index(logs, "console listening on") < strings.Index(logs, "msg=\"listening on") {
		t.Fatalf("the service's line is not the first \"listening on\" (service %s, console %s):\n%s", s.url, consoleURL, logs)
	}

	// The service still answers on its own address.
	if resp, b := s.post(t, "demo", "key-1", `{"amount":"1","currency":"EUR","payee":"p"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("service: %d %s", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodGet, consoleURL+"/login", nil)
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `<form id="login"`) {
		t.Fatalf("console login page: %d %s", resp.StatusCode, b)
	}
	noRedirect := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for tok, want := range map[string]int{"op-alice-Zr4kW9pQ2mX7vT1nB8yL5c": http.StatusSeeOther, "demo": http.StatusUnauthorized} {
		resp, err := noRedirect.PostForm(consoleURL+"/login", url.Values{"token": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("console login with %q: %d; want %d", tok, resp.StatusCode, want)
		}
	}
	s.stop(t)
	if _, err := noRedirect.Get(consoleURL + "/login"); err == nil {
		t.Errorf("the console still answers after the server stopped")
	}
	if logs := s.logs.String(); !strings.Contains(logs, `msg="console: login" operator=alice`) {
		t.Errorf("the operator's login is not logged:\n%s", logs)
	}
}

// TestServeConsoleRefuses: --operators needs --admin-addr, a TLS flag its
// pair, --admin-host an --admin-addr (exit 2); an invalid operators file
// exits 1, never listening.
func TestServeConsoleRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	bad := filepath.Join(dir, "ops.json")
	if err := os.WriteFile(bad, []byte(`{"t": {"name": ""}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--db", db, "--admin-addr", "127.0.0.1:0", "--admin-tls-cert", "c.pem"}, exitUsage},
		{[]string{"--db", db, "--admin-host", "admin.example"}, exitUsage},
		{[]string{"--db", db, "--operators", bad}, exitUsage},
		{[]string{"--db", db, "--admin-addr", "127.0.0.1:0", "--operators", bad}, exitRefused},
		{[]string{"--db", db, "--admin-addr", "127.0.0.1:0", "--operators", filepath.Join(dir, "missing.json")}, exitRefused},
	} {
		if code, stderr := serveExit(t, c.args...); code != c.code {
			t.Errorf("%q: code %d, want %d:\n%s", c.args, code, c.code, stderr)
		}
	}
}

// TestServeConsoleShards: with --shard, the admin listener serves the
// console of every shard at /shards/NAME/ — each listing its own
// tenants' operations only, naming its shard and linking the others —
// and the --console-shard one (the default shard) at the root; a login
// on one shard's console is not a login on another's.
func TestServeConsoleShards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ops := filepath.Join(dir, "operators.json")
	if err := os.WriteFile(ops, []byte(`{"op-alice-Zr4kW9pQ2mX7vT1nB8yL5c": {"name": "alice"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	mapFile := filepath.Join(dir, "map.json")
	if err := os.WriteFile(mapFile, []byte(`{"default":"a","tenants":{"t1":"b"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, tokens := shardTokens(t)
	s := startServe(t, "--auth", auth, "--shard", "a=sqlite:"+filepath.Join(dir, "a.db"), "--shard", "b=sqlite:"+filepath.Join(dir, "b.db"),
		"--shard-default", "a", "--shard-map", mapFile, "--admin-addr", "127.0.0.1:0", "--operators", ops)
	s.logs.waitFor(t, contains("console listening on"), 30*time.Second, "the console line")
	consoleURL := "http://" + consoleLine.FindStringSubmatch(s.logs.String())[1]
	const body = `{"amount":"1","currency":"EUR","payee":"p"}`
	opOf := map[string]string{}
	for _, tenant := range []string{"t1", "t3"} {
		resp, b := s.post(t, tokens[tenant], "key-"+tenant, body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", tenant, resp.StatusCode, b)
		}
		opOf[tenant] = resp.Header.Get("Idempotency-Operation")
	}
	if opOf["t1"] == "" {
		t.Fatalf("no operation ID header")
	}
	login := func(prefix string) *http.Client {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
		resp, err := c.PostForm(consoleURL+prefix+"/login", url.Values{"token": {"op-alice-Zr4kW9pQ2mX7vT1nB8yL5c"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return c
	}
	page := func(c *http.Client, path string) string {
		resp, err := c.Get(consoleURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, c := range []struct{ prefix, shard, mine, theirs string }{{"/shards/b", "b", "t1", "t3"}, {"/shards/a", "a", "t3", "t1"}, {"", "a", "t3", "t1"}} {
		list := page(login(c.prefix), c.prefix+"/operations")
		if !strings.Contains(list, `<strong id="shard">`+c.shard+`</strong>`) || !strings.Contains(list, opOf[c.mine]) || strings.Contains(list, opOf[c.theirs]) ||
			!strings.Contains(list, `href="/shards/a/" data-shard="a"`) || !strings.Contains(list, `href="/shards/b/" data-shard="b"`) {
			t.Errorf("console %q operations: want shard %s listing %s's operation only, with links to both shards:\n%s", c.prefix, c.shard, c.mine, list)
		}
	}
	onB := login("/shards/b")
	if got := page(onB, "/shards/a/operations"); !strings.Contains(got, `<form id="login"`) {
		t.Errorf("shard a's console with shard b's login: want the login page:\n%s", got)
	}
	s.stop(t)
}
