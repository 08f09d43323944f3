package failpoint

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	got := parse(" after-reserve=kill, before-commit=error,bad,=x,after-commit=pause")
	want := map[string]string{"after-reserve": "kill", "before-commit": "error", "after-commit": "pause"}
	if len(got) != len(want) {
		t.Fatalf("parse: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if parse("") != nil {
		t.Error("an empty variable must configure nothing")
	}
}

// The actions run in a child process: this test binary re-executed with
// the variable set and -test.run selecting TestChild.
func TestActions(t *testing.T) {
	child := func(fp string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$")
		cmd.Env = append(os.Environ(), "IDEM_FAILPOINT_CHILD=1", Env+"="+fp)
		return cmd
	}
	t.Run("error", func(t *testing.T) {
		out, err := child("after-commit=error").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "child got: failpoint: injected error at after-commit") {
			t.Errorf("err %v, output %s", err, out)
		}
	})
	t.Run("kill", func(t *testing.T) {
		err := child("after-commit=kill").Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("want death by SIGKILL, got %v", err)
		}
	})
	t.Run("pause", func(t *testing.T) {
		cmd := child("after-commit=pause")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stderr).ReadString('\n')
		cmd.Process.Kill()
		cmd.Wait()
		if line != "failpoint after-commit paused\n" {
			t.Errorf("first stderr line %q", line)
		}
	})
}

func TestWait(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$")
	cmd.Env = append(os.Environ(), "IDEM_FAILPOINT_CHILD=1", Env+"=after-reserve=wait,after-commit=error")
	stderr, _ := cmd.StderrPipe()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stderr).ReadString('\n')
	if line != "failpoint after-reserve waiting\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first stderr line %q", line)
	}
	// The child blocks at after-reserve until SIGUSR1, then goes on to
	// after-commit and prints its error.
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(stdout.String(), "child got: failpoint: injected error at after-commit") {
		t.Errorf("after SIGUSR1: %v, output %s", err, stdout.String())
	}
}

func TestChild(t *testing.T) {
	if os.Getenv("IDEM_FAILPOINT_CHILD") == "" {
		t.Skip("runs only as the child of TestActions")
	}
	if err := Hit(AfterReserve); err != nil { // unconfigured, or "wait"
		t.Fatalf("after-reserve: %v", err)
	}
	err := Hit(AfterCommit)
	os.Stdout.WriteString("child got: " + err.Error() + "\n")
}
