package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// fakeControl is a registry.Controller whose row a test sets, counting
// reads.
type fakeControl struct {
	mu    sync.Mutex
	ctl   registry.Control
	err   error
	reads atomic.Int64
}

func (f *fakeControl) Control(context.Context) (registry.Control, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctl, f.err
}

func (f *fakeControl) set(ctl registry.Control, err error) {
	f.mu.Lock()
	f.ctl, f.err = ctl, err
	f.mu.Unlock()
}

func (f *fakeControl) BumpEpoch(context.Context) (int64, error) { panic("not used") }
func (f *fakeControl) SetDraining(context.Context, bool) error  { panic("not used") }

func TestControlAdmitterCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ctl  registry.Control
		want idem.Code
	}{
		{registry.Control{WriterEpoch: 3}, ""},
		{registry.Control{WriterEpoch: 2}, ""}, // a writer ahead of the registry is not fenced
		{registry.Control{WriterEpoch: 3, Draining: true}, idem.CodeDraining},
		{registry.Control{WriterEpoch: 4}, idem.CodeWriterFenced},
		{registry.Control{WriterEpoch: 4, Draining: true}, idem.CodeWriterFenced},
	} {
		fc := &fakeControl{ctl: c.ctl}
		a := &idemhttp.ControlAdmitter{Controller: fc, WriterEpoch: 3}
		err := a.Admit(t.Context())
		if got := idem.CodeOf(err); got != c.want || (c.want == "") != (err == nil) {
			t.Errorf("%+v: Admit = %v (code %q), want code %q", c.ctl, err, got, c.want)
		}
		var ie *idem.Error
		if err != nil && (!errors.As(err, &ie) || ie.Reason == "") {
			t.Errorf("%+v: %v is not an *idem.Error with a reason", c.ctl, err)
		}
	}
}

func TestControlAdmitterRefresh(t *testing.T) {
	t.Parallel()
	fc := &fakeControl{}
	cached := &idemhttp.ControlAdmitter{Controller: fc, Refresh: time.Hour}
	for range 5 {
		if err := cached.Admit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	fc.set(registry.Control{Draining: true}, nil)
	if err := cached.Admit(t.Context()); err != nil || fc.reads.Load() != 1 {
		t.Errorf("within Refresh: Admit %v after %d reads, want the cached row and 1 read", err, fc.reads.Load())
	}

	fresh := &idemhttp.ControlAdmitter{Controller: fc, Refresh: time.Nanosecond}
	if err := fresh.Admit(t.Context()); idem.CodeOf(err) != idem.CodeDraining {
		t.Errorf("past Refresh: %v, want DRAINING", err)
	}
	fc.set(registry.Control{}, nil)
	if err := fresh.Admit(t.Context()); err != nil {
		t.Errorf("past Refresh after drain off: %v", err)
	}

	// A failed read refuses that request, keeps no error and is retried.
	boom := errors.New("registry down")
	fc.set(registry.Control{}, boom)
	if err := fresh.Admit(t.Context()); !errors.Is(err, boom) || idem.CodeOf(err) != "" {
		t.Errorf("failed read: %v, want the read's error", err)
	}
	fc.set(registry.Control{Draining: true}, nil)
	if err := fresh.Admit(t.Context()); idem.CodeOf(err) != idem.CodeDraining {
		t.Errorf("after a failed read: %v, want DRAINING", err)
	}
	first := &idemhttp.ControlAdmitter{Controller: &fakeControl{err: boom}}
	if err := first.Admit(t.Context()); !errors.Is(err, boom) {
		t.Errorf("failed first read: %v", err)
	}
}

func TestControlAdmitterConcurrent(t *testing.T) {
	t.Parallel()
	fc := &fakeControl{}
	a := &idemhttp.ControlAdmitter{Controller: fc, WriterEpoch: 1, Refresh: time.Microsecond}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			for j := range 200 {
				if i == 0 && j == 100 {
					fc.set(registry.Control{WriterEpoch: 1, Draining: true}, nil)
				}
				if err := a.Admit(context.Background()); err != nil && idem.CodeOf(err) != idem.CodeDraining {
					t.Errorf("Admit: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := fc.reads.Load(); n < 1 || n > 32*200 {
		t.Errorf("%d reads of the control row", n)
	}
}

// TestDrainAndFenceMiddleware: with a ControlAdmitter on a real registry,
// draining refuses new operations but not replays nor the completion of
// one in flight; a bump fences the writer — new operations are refused
// and one in flight cannot commit, its key freed — while replays go on.
//
// On SQLite a handler runs inside its write transaction, which holds the
// database's single write lock: a drain or a bump cannot happen while it
// runs (it waits for the commit), so the in-flight steps run on
// PostgreSQL only; the conformance suite covers a bump between Reserve and
// Complete on every driver.
// Proves threat:rolled-back-writer (docs/threat-model.md).
func TestDrainAndFenceMiddleware(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		concurrentWriters := strings.HasSuffix(t.Name(), "/postgres")
		ctx := t.Context()
		ctl, err := store.Control(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f := &fixture{t: t, store: store, app: &app{release: make(chan struct{}), started: make(chan struct{}, 10)}}
		admit := &idemhttp.ControlAdmitter{Controller: store, WriterEpoch: ctl.WriterEpoch, Refresh: time.Nanosecond}
		mw := &idemhttp.Middleware{
			Store:       store,
			Operation:   idemhttp.Operation{Name: "things.create", APIRevision: "v1"},
			Identity:    func(*http.Request) (idem.Identity, error) { return idem.Identity{Tenant: "t", Principal: "alice"}, nil },
			Admit:       admit.Admit,
			WriterEpoch: ctl.WriterEpoch,
		}
		f.srv = httptest.NewServer(mw.Handler(f.app))
		t.Cleanup(f.srv.Close)
		blocked := func(key string) <-chan result {
			ch := make(chan result, 1)
			go func() { ch <- f.postCtx(context.Background(), key, `{}`, "X-Test", "block") }()
			<-f.app.started
			return ch
		}

		first := f.post("k1", `{"n":1}`)
		if first.status != 201 {
			t.Fatalf("first: %+v", first)
		}
		var inflight <-chan result
		if concurrentWriters {
			inflight = blocked("k2")
		}
		if err := store.SetDraining(ctx, true); err != nil {
			t.Fatal(err)
		}
		calls := f.app.calls.Load()
		if r := f.post("k3", `{"n":3}`); r.status != 503 || code(r) != "DRAINING" || f.app.calls.Load() != calls {
			t.Errorf("new operation while draining: %d %s (handler ran %d times)", r.status, r.body, f.app.calls.Load()-calls)
		}
		if r := f.post("k1", `{"n":1}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || r.body != first.body {
			t.Errorf("replay while draining: %+v", r)
		}
		if concurrentWriters {
			f.app.release <- struct{}{}
			if r := <-inflight; r.status != 201 {
				t.Errorf("operation in flight when the drain began: %d %s, want 201", r.status, r.body)
			}
		}
		if err := store.SetDraining(ctx, false); err != nil {
			t.Fatal(err)
		}
		if r := f.post("k3", `{"n":3}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the refused key after drain off: %+v, want it executed", r)
		}

		effects := 2 // k1, k3
		if concurrentWriters {
			effects++ // k2
			inflight = blocked("k4")
		}
		if _, err := store.BumpEpoch(ctx); err != nil {
			t.Fatal(err)
		}
		if concurrentWriters {
			f.app.release <- struct{}{}
			if r := <-inflight; r.status != 503 {
				t.Errorf("commit by a writer fenced while in flight: %d %s, want 503", r.status, r.body)
			}
			if r := f.post("k4", `{}`); r.status != 503 || code(r) != "WRITER_FENCED" {
				t.Errorf("retry of the fenced key on the fenced writer: %d %s, want WRITER_FENCED (key released)", r.status, r.body)
			}
		}
		if n := f.effects(); n != effects {
			t.Errorf("%d business rows, want %d (nothing of the fenced writer)", n, effects)
		}
		if r := f.post("k5", `{}`); r.status != 503 || code(r) != "WRITER_FENCED" {
			t.Errorf("new operation on the fenced writer: %d %s", r.status, r.body)
		}
		if r := f.post("k1", `{"n":1}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay on the fenced writer: %+v", r)
		}
	})
}
