package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// TestOpsShards: given the shards of a sharded service, ops list names
// each operation's shard, ops show and ops reconcile find an operation
// on whichever shard holds it, and ops audit names each entry's shard.
func TestOpsShards(t *testing.T) {
	t.Setenv("USER", "carol")
	dir := t.TempDir()
	dsn := map[string]string{"a": "sqlite:" + filepath.Join(dir, "a.db"), "b": "sqlite:" + filepath.Join(dir, "b.db")}
	_, onA := openOpsStore(t, dsn["a"]).operation(idem.StateSucceeded)
	_, onB := openOpsStore(t, dsn["b"]).operation(idem.StateUnknown)
	shards := []string{"--shard", "a=" + dsn["a"], "--shard", "b=" + dsn["b"]}

	list := opsJSON[listOut](t, append([]string{"ops", "list"}, shards...)...)
	where := map[string]string{}
	for _, o := range list.Operations {
		where[o.OperationID] = o.Shard
	}
	if len(where) != 2 || where[onA.OperationID] != "a" || where[onB.OperationID] != "b" {
		t.Errorf("ops list --shard: %+v, want %s on a and %s on b", list.Operations, onA.OperationID, onB.OperationID)
	}
	code, out, _ := runCmd(t, "", append([]string{"ops", "list"}, shards...)...)
	if code != exitOK || !strings.HasPrefix(out, "SHARD") || !strings.Contains(strings.Join(strings.Fields(out), " "), "b "+onB.OperationID) {
		t.Errorf("ops list --shard (table): code %d\n%s", code, out)
	}

	shown := opsJSON[struct{ Shard string }](t, append([]string{"ops", "show", onB.OperationID}, shards...)...)
	if shown.Shard != "b" {
		t.Errorf("ops show of b's operation names shard %q", shown.Shard)
	}
	if code, _, stderr := runCmd(t, "", append([]string{"ops", "show", "op_01HZZZZZZZZZZZZZZZZZZZZZZZ"}, shards...)...); code != exitRefused || !strings.Contains(stderr, "not found on any shard") {
		t.Errorf("ops show of no shard's operation: code %d, stderr %q", code, stderr)
	}
	code, out, stderr := runCmd(t, "", append([]string{"ops", "reconcile", onB.OperationID, "--outcome", "succeeded", "--handle", "tr_7",
		"--evidence", "provider dashboard shows tr_7 executed"}, shards...)...)
	if code != exitOK || !strings.HasPrefix(out, "shard b: operation "+onB.OperationID+" reconciled") {
		t.Fatalf("ops reconcile on shard b: code %d, out %q, stderr %q", code, out, stderr)
	}

	audit := opsJSON[struct{ Audit []auditJSON }](t, append([]string{"ops", "audit"}, shards...)...)
	if len(audit.Audit) == 0 || audit.Audit[0].Shard != "b" || audit.Audit[0].OperationID != onB.OperationID {
		t.Errorf("ops audit --shard: %+v, want the reconciliation on shard b first", audit.Audit)
	}
	if code, _, _ := runCmd(t, "", append([]string{"ops", "list", "--db", dsn["a"]}, shards...)...); code != exitUsage {
		t.Errorf("ops list --db with --shard: code %d, want %d", code, exitUsage)
	}
}
