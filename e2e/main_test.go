package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// Environment variables of the test binary.
const (
	// binEnv names an idem binary to run instead of building one. TestMain
	// also uses it to hand the binary it built to the test process.
	binEnv = "IDEM_E2E_BIN"
	// noRaceEnv, when set, builds the binary without -race.
	noRaceEnv = "IDEM_E2E_NORACE"
)

// idemBin is the path of the idem binary under test.
var idemBin string

// TestMain builds ./cmd/idem once and runs the tests against it.
//
// pgtest.Main runs the tests and then exits the process, so nothing could
// remove the built binary after it. TestMain therefore builds the binary
// into a temporary directory, runs this same test binary again as a child
// with IDEM_E2E_BIN pointing at it (the child calls pgtest.Main), removes
// the directory and exits with the child's exit code. Flags, standard
// streams and the working directory pass through unchanged.
func TestMain(m *testing.M) {
	if bin := os.Getenv(binEnv); bin != "" {
		idemBin = bin
		pgtest.Main(m) // does not return
	}
	os.Exit(buildAndRerun())
}

func buildAndRerun() int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "idem-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "idem")
	args := []string{"build", "-race", "-o", bin, "./cmd/idem"}
	if os.Getenv(noRaceEnv) != "" {
		args = []string{"build", "-o", bin, "./cmd/idem"}
	}
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %v: %v\n%s", args, err, out)
		return 1
	}
	child := exec.Command(os.Args[0], os.Args[1:]...)
	child.Env = append(os.Environ(), binEnv+"="+bin)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = child.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "e2e: running the tests:", err)
		return 1
	}
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
