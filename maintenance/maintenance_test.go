package maintenance_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/maintenance"
	"github.com/idemkit/idem/registry"
)

// logWatch is a log destination a test can wait on: every write wakes the
// waiters, so nothing sleeps.
type logWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// await waits until the log satisfies cond, at most 10 s.
func (l *logWatch) await(t *testing.T, what string, cond func(string) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		s, ch := l.buf.String(), l.changed
		l.mu.Unlock()
		if cond(s) {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: not logged within 10 s:\n%s", what, s)
		}
	}
}

func (l *logWatch) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestRunnerPrunes: the runner prunes at once and then every PruneEvery,
// logs what it did, keeps going after errors, and Run returns once ctx
// ends.
func TestRunnerPrunes(t *testing.T) {
	store, err := idemsqlite.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "m.db"), idemsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := registry.Claim{Operation: "things.create", Retention: time.Millisecond}
	rand.Read(c.Scope[:])
	rec, _, err := store.Reserve(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Complete(t.Context(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte("{}")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	logs := newLogWatch()
	r := &maintenance.Runner{Store: store, RecoverEvery: -1, PruneEvery: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	logs.await(t, "the first prune", func(s string) bool { return strings.Contains(s, "msg=pruned retired=1 deleted=0") })
	if got, err := store.Get(t.Context(), rec.Scope); err != nil || !got.Retired() {
		t.Errorf("after the scheduled prune: retired %v err %v", got.Retired(), err)
	}
	// The pass was recorded before it was logged, under the runner's
	// default name.
	runs, err := store.PruneRuns(t.Context(), registry.MaxPruneRuns)
	if err != nil || !slices.ContainsFunc(runs, func(r registry.PruneRun) bool {
		return r.Result == registry.PruneResult{Retired: 1} && strings.HasPrefix(r.Actor, "maintenance on ") && r.Error == ""
	}) {
		t.Errorf("prune runs %+v (%v); want the pass that retired the record, by \"maintenance on …\"", runs, err)
	}
	store.Close() // every later prune fails: logged, and the loop goes on
	logs.await(t, "two failed prunes", func(s string) bool { return strings.Count(s, "prune failed") >= 2 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := strings.Count(logs.String(), "msg=pruned"); n != 1 {
		t.Errorf("%d prune lines, want 1 (nothing else was due):\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "the recovery worker is off") {
		t.Errorf("RecoverEvery < 0 did not turn the worker off:\n%s", logs)
	}
}
