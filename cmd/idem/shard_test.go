package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestShardMoveCrash: "idem shard move" of a tenant of a running
// sharded "idem serve", SIGKILLed after its copy, leaves the tenant
// refusing new keys; the same command resumes and finishes the move:
// the tenant's old keys replay and its new keys execute on the new
// shard, which holds its records and payments once each.
// threat:tenant-move-interrupted
func TestShardMoveCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildIdem(t)
	dsns := map[string]string{"a": pgtest.DSN(t), "b": pgtest.DSN(t)}
	shardArgs := []string{"--shard", "a=" + dsns["a"], "--shard", "b=" + dsns["b"], "--shard-default", "a"}
	auth, tokens := shardTokens(t)
	s := startServe(t, append([]string{"--auth", auth}, shardArgs...)...)
	const body = `{"amount":"1","currency":"EUR","payee":"p"}`
	for _, key := range []string{"old-1", "old-2"} {
		postAs(t, s, tokens["t1"], key)
	}
	postAs(t, s, tokens["t2"], "other")

	move := func(env ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"shard", "move", "t1", "--to", "b", "--settle", "1500ms"}, shardArgs...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := move(failpoint.Env + "=shard-copy=kill")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !strings.Contains(out, "copy ") {
		t.Fatalf("the move with a kill after its copy: %v\n%s", err, out)
	}
	// Killed after the copy: the drain is older than the settle, so the
	// server has read it; a new key of t1 is refused, t2 is served.
	if resp, b := s.post(t, tokens["t1"], "during", body); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("t1's new key while the move is stopped: %d %s, want 503", resp.StatusCode, b)
	}
	postAs(t, s, tokens["t2"], "other-2")

	out, err = move()
	if err != nil || !strings.Contains(out, "fence ") || !strings.Contains(out, "switch ") || !strings.Contains(out, "undrain ") {
		t.Fatalf("resuming the move: %v\n%s", err, out)
	}
	if code, list, _ := runCmd(t, "", append([]string{"shard", "list"}, shardArgs...)...); code != exitOK || !strings.Contains(list, "t1      b      false") {
		t.Errorf("shard list after the move (%d):\n%s", code, list)
	}
	for _, key := range []string{"old-1", "old-2"} {
		if resp, b := s.post(t, tokens["t1"], key, body); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("t1's %s after the move: %d %s, want its replay", key, resp.StatusCode, b)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, b := s.post(t, tokens["t1"], "after", body)
		if resp.StatusCode == http.StatusCreated {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("t1's new key after the move: %d %s", resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond) // polling for the server's directory refresh
	}
	s.stop(t)
	count := func(dsn, q string) int {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(dsns["b"], `SELECT count(*) FROM payments WHERE tenant = 't1'`); n != 3 {
		t.Errorf("b holds %d payments of t1, want 3 (two moved, one new)", n)
	}
	if n := count(dsns["b"], `SELECT count(*) FROM idem_operations`); n != 3 {
		t.Errorf("b holds %d records, want t1's 3", n)
	}
	if n := count(dsns["a"], `SELECT count(*) FROM payments WHERE tenant = 't2'`); n != 2 {
		t.Errorf("a holds %d payments of t2, want 2", n)
	}
}

// TestShardUsage: "idem shard" without an action, with an unknown one,
// or with missing flags is a usage error (exit 2) naming what is
// missing; "idem shard --help" lists the actions.
func TestShardUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shard"}, "an action is expected"},
		{[]string{"shard", "split"}, `unknown action "split"`},
		{[]string{"shard", "move", "t1"}, "--shard is required"},
		{[]string{"shard", "move", "t1", "--shard", "a=sqlite:x.db", "--shard-default", "a"}, "move needs --to"},
		{[]string{"shard", "list", "extra", "--shard", "a=sqlite:x.db", "--shard-default", "a"}, "unexpected arguments"},
		{[]string{"shard", "list", "--shard", "a=sqlite:x.db", "--shard-default", "a"}, "must be PostgreSQL"},
		{[]string{"shard", "move", "t1", "--to", "b", "--shard", "a=sqlite:x.db", "--shard-default", "a", "--settle", "100ms"}, "shorter than the servers' directory refresh"},
		{[]string{"shard", "list", "--shard", "a=mysql://root@127.0.0.1/x", "--shard-default", "a"}, "want postgres://… or sqlite:PATH"},
	} {
		if code, _, stderr := runCmd(t, "", c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: code %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
	if code, out, _ := runCmd(t, "", "shard", "--help"); code != exitOK || !strings.Contains(out, "  move ") || !strings.Contains(out, "  abort ") {
		t.Errorf("shard --help: %d\n%s", code, out)
	}
}
