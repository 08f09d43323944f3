package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startChild runs "idem ARGS…" with extra environment variables in its own
// process group and waits for its "listening on" line. Unlike startServer
// it does not insist on a clean exit: when t ends it sends SIGTERM (if the
// process still runs), waits up to stopTimeout and kills the group (see
// release). A child meant to crash is checked with wantKilled.
func startChild(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	return spawn(t, env, &http.Client{Timeout: 30 * time.Second}, (*server).release, args...)
}

// release stops s if it still runs — SIGTERM, then after stopTimeout
// SIGKILL to its process group — whatever way it exits; on failure it
// logs the output.
func (s *server) release(t *testing.T) {
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
		t.Logf("idem %s (%s) output:\n%s", s.cmd.Args[1], s.url, s.log.String())
	}
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
