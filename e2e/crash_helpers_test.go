package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startChild runs "idem ARGS…" with extra environment variables in its own
// process group and waits for its "listening on" line. Unlike startServer
// it does not insist on a clean exit: when t ends it sends SIGTERM (if the
// process still runs), waits up to stopTimeout and kills the group. A
// child meant to crash is checked with wantKilled.
func startChild(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{
		cmd:    exec.Command(idemBin, args...),
		log:    &logLines{ready: make(chan string, 1)},
		exited: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second},
	}
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", idemBin, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		pid := s.cmd.Process.Pid
		select {
		case <-s.exited:
		default:
			syscall.Kill(pid, syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(stopTimeout):
				syscall.Kill(-pid, syscall.SIGKILL)
				<-s.exited
			}
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("idem %s (%s) output:\n%s", args[0], s.url, s.log.String())
		}
	})
	select {
	case addr := <-s.log.ready:
		s.url = "http://" + addr
	case <-s.exited:
		t.Fatalf("idem %s exited before listening: %v\n%s", args[0], s.err, s.log.String())
	case <-time.After(startTimeout):
		t.Fatalf("idem %s did not log \"listening on\" within %v", args[0], startTimeout)
	}
	return s
}

// wantKilled waits (bounded) for s to exit and checks that SIGKILL ended it.
func wantKilled(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("idem serve still runs %v after its failpoint should have killed it", stopTimeout)
	}
	var exit *exec.ExitError
	if !errors.As(s.err, &exit) {
		t.Fatalf("idem serve exited with %v; want death by SIGKILL", s.err)
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("idem serve exited with %v; want death by SIGKILL", s.err)
	}
}

// retryAfter is r's Retry-After in seconds, at least 1 and at most 5.
func retryAfter(r reply) time.Duration {
	var n int
	fmt.Sscanf(r.header.Get("Retry-After"), "%d", &n)
	return time.Duration(min(max(n, 1), 5)) * time.Second
}

// sleepCtx sleeps d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
