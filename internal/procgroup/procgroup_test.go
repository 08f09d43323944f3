package procgroup

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// straggler starts sh as a group leader that leaves "sleep 300" running
// in its group, and returns the group and the sleep's process ID, read
// from the leader's output.
func straggler(t *testing.T, cmd *exec.Cmd) (*Group, int) {
	t.Helper()
	g := New(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return g, pid
}

// waitGone waits until process pid has died: no process has its ID, or
// it is a zombie (a killed orphan waits for init to reap it, which may
// take a while).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("%s (process %d) still runs", what, pid)
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
}

func TestWaitKillsWhatTheLeaderLeft(t *testing.T) {
	g, pid := straggler(t, exec.Command("sh", "-c", "sleep 300 & echo $!"))
	if err := g.Wait(); err != nil {
		t.Fatalf("Wait = %v; the leader exited 0", err)
	}
	waitGone(t, pid, "the leader's straggler")
	if err := g.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after Wait = %v; want os.ErrProcessDone and nothing sent", err)
	}
}

func TestSignalReachesTheGroup(t *testing.T) {
	g, pid := straggler(t, exec.Command("sh", "-c", "sleep 300 & echo $!; wait"))
	if err := g.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := g.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Wait = %v; want the leader killed by SIGKILL", err)
	}
	waitGone(t, pid, "the group's other member")
}

func TestContextCancelKillsTheGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g, pid := straggler(t, exec.CommandContext(ctx, "sh", "-c", "sleep 300 & echo $!; wait"))
	cancel()
	if err := g.Wait(); err == nil {
		t.Fatal("Wait = nil after the context was cancelled")
	}
	waitGone(t, pid, "the cancelled group's other member")
}

func TestKillAbandoned(t *testing.T) {
	if KillAbandoned(os.Getpid()) {
		t.Error("KillAbandoned signalled the group of a running process's ID")
	}
	// A leader reaped by hand, as a test binary that died would leave it:
	// its straggler keeps the group's number.
	cmd := exec.Command("sh", "-c", "sleep 300 & echo $!")
	_, pid := straggler(t, cmd)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !KillAbandoned(cmd.Process.Pid) {
		t.Fatal("KillAbandoned sent nothing to an abandoned group")
	}
	waitGone(t, pid, "the abandoned group's member")
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}
