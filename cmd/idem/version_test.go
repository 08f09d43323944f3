package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionPrintsRevision: a binary that go build made in this
// checkout prints the checkout's revision, the module and the Go
// version, in text and in JSON; under go test (no VCS stamp) the
// revision is said to be unknown, never invented.
func TestVersionPrintsRevision(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): no revision to compare", err)
	}
	rev := strings.TrimSpace(string(head))
	if dirs, err := exec.Command("git", "rev-parse", "--git-dir", "--git-common-dir").Output(); err == nil {
		if d := strings.Fields(string(dirs)); len(d) == 2 && d[0] != d[1] {
			// The go command records no VCS information in a linked
			// worktree (its .git is a file); a clone is what CI builds.
			t.Skip("a linked git worktree: go build records no revision here")
		}
	}
	bin := filepath.Join(t.TempDir(), "idem")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=") // a GOFLAGS of -buildvcs=false would drop the stamp
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("idem version: %v", err)
	}
	if !strings.Contains(string(out), "revision: "+rev) || !strings.Contains(string(out), "module:   github.com/idemkit/idem") ||
		!strings.Contains(string(out), "go:       "+runtime.Version()) {
		t.Errorf("idem version printed:\n%s\nwant revision %s, the module and %s", out, rev, runtime.Version())
	}
	out, err = exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("idem version --json: %v", err)
	}
	var v buildVersion
	if err := json.Unmarshal(out, &v); err != nil || v.Revision != rev || v.GoVersion != runtime.Version() || v.Time == "" {
		t.Errorf("idem version --json: %v %+v, want revision %s", err, v, rev)
	}
	code, text, _ := runCmd(t, "", "version")
	if code != exitOK || !strings.Contains(text, "revision: unknown") {
		t.Errorf("idem version under go test: %d %q, want the revision said to be unknown", code, text)
	}
}
