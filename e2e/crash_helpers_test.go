package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/harness/launch"
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
	s.child.Stop(stopTimeout) // any exit will do
	if t.Failed() {
		t.Logf("%s (%s) output:\n%s", s.child.Name(), s.url, s.child.Log())
	}
}

// wantKilled waits (bounded) for s to exit and checks that SIGKILL ended it.
func wantKilled(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.child.Exited():
	case <-time.After(stopTimeout):
		t.Fatalf("idem serve still runs %v after its failpoint should have killed it", stopTimeout)
	}
	if sig, ok := launch.ExitSignal(s.child.Wait()); !ok || sig != syscall.SIGKILL {
		t.Fatalf("idem serve exited with %v; want death by SIGKILL", s.child.Wait())
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
