package idem_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryLayout: no library package depends on the reference
// application (example/), the harness (harness/) or the command (cmd/),
// checked with the tool a reader would use: go list -deps.
func TestLibraryLayout(t *testing.T) {
	library := []string{".", "./canon", "./shard", "./registry", "./registry/registrytest", "./effect", "./idemhttp",
		"./idempg", "./idemsqlite", "./idemmysql", "./idemstore", "./outbox", "./recovery", "./maintenance", "./keyring", "./console"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, library...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < len(library) {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, bad := range []string{"/example/", "/harness/", "/cmd/"} {
			if strings.Contains(d, "github.com/idemkit/idem"+bad) {
				t.Errorf("a library package depends on %s", d)
			}
		}
	}
}
