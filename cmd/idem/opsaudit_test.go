package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestOpsAudit: drain, epoch bump and a refused requeue write their audit
// entries under $USER before they act (a failed change gets a "failed"
// entry); "idem ops audit" prints them newest first, as a table and as
// JSON, by operation, page by page.
func TestOpsAudit(t *testing.T) {
	t.Setenv("USER", "carol")
	registries(t, func(t *testing.T, dsn string) {
		if code, out, stderr := runCmd(t, "", "ops", "audit", "--db", dsn); code != exitOK || out != "no audit entries\n" {
			t.Fatalf("ops audit of a new registry: code %d, out %q, stderr %q", code, out, stderr)
		}
		for _, args := range [][]string{{"drain", "on"}, {"epoch", "bump"}, {"drain", "off"}} {
			if code, _, stderr := runCmd(t, "", append(args, "--db", dsn)...); code != exitOK {
				t.Fatalf("%v: code %d, stderr %q", args, code, stderr)
			}
		}
		if code, _, _ := runCmd(t, "", "ops", "requeue", "op_01HZZZZZZZZZZZZZZZZZZZZZZZ/0", "--db", dsn); code != exitRefused {
			t.Fatalf("requeue of an unknown message: code %d, want %d", code, exitRefused)
		}

		code, out, stderr := runCmd(t, "", "ops", "audit", "--json", "--db", dsn)
		var got struct{ Audit []auditJSON }
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("ops audit --json: code %d, out %q, stderr %q", code, out, stderr)
		}
		var actions []string
		for _, e := range got.Audit {
			actions = append(actions, e.Action+" "+e.Actor+" "+e.OperationID)
		}
		want := []string{"failed carol op_01HZZZZZZZZZZZZZZZZZZZZZZZ", "outbox.requeue carol op_01HZZZZZZZZZZZZZZZZZZZZZZZ",
			"drain.off carol ", "epoch.bump carol ", "drain.on carol "}
		if strings.Join(actions, ",") != strings.Join(want, ",") {
			t.Fatalf("audit log %q, want %q", actions, want)
		}
		if d := got.Audit[0].Detail; !strings.Contains(d, "outbox.requeue") || !strings.Contains(d, "not found") {
			t.Errorf("failed entry's detail %q: want the action and why", d)
		}

		code, out, _ = runCmd(t, "", "ops", "audit", "--operation", "op_01HZZZZZZZZZZZZZZZZZZZZZZZ", "--db", dsn)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "SEQ") ||
			!strings.Contains(lines[1], "failed") || !strings.Contains(lines[2], "outbox.requeue") {
			t.Errorf("ops audit --operation: code %d, out %q", code, out)
		}
		code, out, stderr = runCmd(t, "", "ops", "audit", "--limit", "2", "--db", dsn)
		if code != exitOK || strings.Count(out, "\n") != 3 || !strings.Contains(stderr, "--before ") {
			t.Errorf("ops audit --limit 2: code %d, out %q, stderr %q", code, out, stderr)
		}
		before := got.Audit[1].Seq
		code, out, _ = runCmd(t, "", "ops", "audit", "--before", strconv.FormatInt(before, 10), "--json", "--db", dsn)
		var page struct{ Audit []auditJSON }
		if code != exitOK || json.Unmarshal([]byte(out), &page) != nil || len(page.Audit) != 3 || page.Audit[0].Action != "drain.off" {
			t.Errorf("ops audit --before %d: code %d, out %q", before, code, out)
		}
	})
}
