package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/mytest"
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

// cmdPkg is the package of the idem command.
const cmdPkg = "github.com/idemkit/idem/cmd/idem"

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
		pgtest.Main(mytest.Runner{M: m}) // does not return
	}
	os.Exit(buildAndRerun())
}

func buildAndRerun() int {
	dir, err := os.MkdirTemp("", "idem-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "idem")
	// By import path: go test runs this binary in the package's directory,
	// inside the module, so the go command finds go.mod by itself.
	args := []string{"build", "-race", "-o", bin, cmdPkg}
	if os.Getenv(noRaceEnv) != "" {
		args = []string{"build", "-o", bin, cmdPkg}
	}
	build := exec.Command("go", args...)
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
