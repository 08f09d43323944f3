package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/shard/shardmap"
)

// shardTokens writes an --auth file with one token per tenant t1, t2,
// t3 and returns its path and the tokens by tenant.
func shardTokens(t *testing.T) (string, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var b strings.Builder
	b.WriteString("{")
	for i, tenant := range []string{"t1", "t2", "t3"} {
		tok := fmt.Sprintf("tok-%s-Zr4kW9pQ2mX7vT1nB8yL5c", tenant)
		tokens[tenant] = tok
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:{\"tenant\":%q,\"principal\":\"p\"}", tok, tenant)
	}
	b.WriteString("}")
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// postAs creates a payment as tenant (a fresh key per call of label) and
// checks it is 201, then that its retry replays.
func postAs(t *testing.T, s *server, token, label string) {
	t.Helper()
	const body = `{"amount":"1","currency":"EUR","payee":"p"}`
	if resp, b := s.post(t, token, label, body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("%s: %d %s", label, resp.StatusCode, b)
	}
	if resp, b := s.post(t, token, label, body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("%s retry: %d %v %s", label, resp.StatusCode, resp.Header, b)
	}
}

// TestServeShardsDirectory: "idem serve" over three PostgreSQL shards
// whose map is the directory table of the default shard writes each
// tenant's payments — business rows and records — in its shard's
// database and nowhere else; an unmapped tenant goes to the default. A
// tenant drained in the directory gets 503 DRAINING for new keys and
// its replays (payments.Config.Admit is the router's).
// threat:shard-move-double-execution
func TestServeShardsDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsns := map[string]string{"a": pgtest.DSN(t), "b": pgtest.DSN(t), "c": pgtest.DSN(t)}
	dirStore, err := idempg.Open(ctx, dsns["a"], idempg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dirStore.Close()
	dir := dirStore.ShardDirectory(nil)
	for tenant, name := range map[string]string{"t1": "b", "t2": "c"} {
		if _, err := dir.Set(ctx, shardmap.Entry{Tenant: tenant, Shard: name}, 0, "test"); err != nil {
			t.Fatal(err)
		}
	}
	auth, tokens := shardTokens(t)
	s := startServe(t, "--auth", auth, "--shard", "a="+dsns["a"], "--shard", "b="+dsns["b"], "--shard", "c="+dsns["c"], "--shard-default", "a")
	for tenant, tok := range tokens {
		postAs(t, s, tok, "key-"+tenant)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/readyz", nil)
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK {
		t.Errorf("readyz: %d %s", resp.StatusCode, b)
	}

	// Draining t1 in the directory: within the router's refresh its new
	// keys get 503 DRAINING (nothing executed), its replay is still
	// served, and t2 is not affected.
	e, err := dir.Lookup(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	e.Draining = true
	if _, err := dir.Set(ctx, e, e.Version, "test"); err != nil {
		t.Fatal(err)
	}
	const body = `{"amount":"1","currency":"EUR","payee":"p"}`
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		resp, b := s.post(t, tokens["t1"], fmt.Sprintf("drain-%d", n), body)
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), `"DRAINING"`) {
			break
		}
		if resp.StatusCode != http.StatusCreated || time.Now().After(deadline) {
			t.Fatalf("t1 while draining: %d %s; want 503 DRAINING within the refresh", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond) // polling for the router's refresh
	}
	if resp, b := s.post(t, tokens["t1"], "key-t1", body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("t1's replay while draining: %d %s", resp.StatusCode, b)
	}
	postAs(t, s, tokens["t2"], "key-t2-again")
	s.stop(t)
	want := map[string]string{"a": "t3", "b": "t1", "c": "t2"}
	wantRecs := map[string]int{"a": 1, "b": -1, "c": 2} // b: t1's and the keys of the drain loop that got in first
	for name, dsn := range dsns {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var tenants string
		var records int
		err = conn.QueryRow(ctx, `SELECT coalesce(string_agg(DISTINCT tenant, ','), ''), (SELECT count(*) FROM idem_operations) FROM payments`).Scan(&tenants, &records)
		conn.Close(ctx)
		if err != nil || tenants != want[name] || (wantRecs[name] > 0 && records != wantRecs[name]) {
			t.Errorf("shard %s holds payments of %q and %d records (%v); want %q's and %d", name, tenants, records, err, want[name], wantRecs[name])
		}
	}
}

// TestServeShardMap: "idem serve" over SQLite shards routed by a
// --shard-map file; and the shard flags' usage errors.
func TestServeShardMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := func(n string) string { return "sqlite:" + filepath.Join(dir, n+".db") }
	mapFile := filepath.Join(dir, "map.json")
	if err := os.WriteFile(mapFile, []byte(`{"default":"a","tenants":{"t1":"b"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, tokens := shardTokens(t)
	s := startServe(t, "--auth", auth, "--shard", "a="+db("a"), "--shard", "b="+db("b"), "--shard-default", "a", "--shard-map", mapFile)
	postAs(t, s, tokens["t1"], "key-1")
	postAs(t, s, tokens["t2"], "key-2")
	s.stop(t)
	for name, want := range map[string]string{"a": "t2", "b": "t1"} {
		sdb, err := sql.Open("sqlite", filepath.Join(dir, name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		var tenants string
		err = sdb.QueryRow(`SELECT coalesce(group_concat(DISTINCT tenant), '') FROM payments`).Scan(&tenants)
		sdb.Close()
		if err != nil || tenants != want {
			t.Errorf("shard %s holds payments of %q (%v), want %q's", name, tenants, err, want)
		}
	}

	badMap := filepath.Join(dir, "bad.json")
	os.WriteFile(badMap, []byte(`{"default":"a","tenants":{"t1":"z"}}`), 0o600)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--shard", "a=" + db("a")}, exitUsage},                                                    // no default
		{[]string{"--shard", "a=" + db("a"), "--shard-default", "b"}, exitUsage},                            // default not a shard
		{[]string{"--shard", "a=" + db("a"), "--shard-default", "a", "--db", db("x")}, exitUsage},           // --db too
		{[]string{"--shard", "a=" + db("a"), "--shard-default", "a"}, exitUsage},                            // SQLite directory
		{[]string{"--shard", "a=" + db("a"), "--shard", "a=" + db("b"), "--shard-default", "a"}, exitUsage}, // twice
		{[]string{"--shard-default", "a"}, exitUsage},                                                       // no --shard
		{[]string{"--shard", "a=" + db("a"), "--shard-default", "a", "--shard-map", badMap}, exitRefused},
	} {
		if code, logs := serveExit(t, c.args...); code != c.code {
			t.Errorf("%q: exit %d, want %d:\n%s", c.args, code, c.code, logs)
		}
	}
}
