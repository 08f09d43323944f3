package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGateShardFlags: "idem gate --shard" refuses what it cannot run
// before starting anything.
func TestGateShardFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := "a=sqlite:"+filepath.Join(dir, "a.db"), "b=sqlite:"+filepath.Join(dir, "b.db")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"default":"a","tenants":{"tenant-1":"z"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"default":"b"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"gate", "--shard", a}, exitUsage},
		{[]string{"gate", "--shard", a, "--shard-default", "a", "--db", "sqlite:" + filepath.Join(dir, "x.db")}, exitUsage},
		{[]string{"gate", "--shard-default", "a"}, exitUsage},
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "a", "--shard-map", bad}, exitRefused},
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "a", "--shard-map", other}, exitRefused},
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "c"}, exitRefused}, // gate.Config's check
		{[]string{"gate", "--move", "tenant-1=b"}, exitUsage},
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "a", "--move", "tenant-1"}, exitUsage},
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "a", "--move", "tenant-1=b"}, exitRefused}, // the directory needs PostgreSQL
		{[]string{"gate", "--shard", a, "--shard", b, "--shard-default", "a", "--move-crash"}, exitRefused},
	} {
		if code, _, stderr := runCmd(t, "", c.args...); code != c.code {
			t.Errorf("%q: exit %d, want %d: %s", c.args, code, c.code, stderr)
		}
	}
}
