package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/provider"
	"github.com/idemkit/idem/registry"
)

// abandoned stores, an hour in the past, a reservation and — with
// effect — the begun transfer effect of an operation whose owner crashed;
// sent says whether the transfer reached prov under its downstream key.
func abandoned(t *testing.T, dsn string, prov string, effect, sent bool) registry.Record {
	t.Helper()
	store, err := drivers.Open(t.Context(), dsn, drivers.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := registry.Claim{Operation: "recover.test"}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rec, created, err := store.Reserve(t.Context(), c)
	if err != nil || !created {
		t.Fatalf("Reserve: %v %v", created, err)
	}
	if !effect {
		return rec
	}
	eff, err := store.BeginEffect(t.Context(), rec, "transfer")
	if err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if sent {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, prov+"/transfers", strings.NewReader(`{"amount":"2.00"}`))
		req.Header.Set("Idempotency-Key", eff.DownstreamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /transfers: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	return rec
}

func stateOf(t *testing.T, dsn string, s idem.ScopeHash) (idem.State, error) {
	t.Helper()
	store, err := drivers.Open(t.Context(), dsn, drivers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Get(t.Context(), s)
	return rec.State, err
}

func TestRecoverOnce(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		prov := provider.New()
		srv := httptest.NewServer(prov.Handler())
		t.Cleanup(srv.Close)
		reserved := abandoned(t, dsn, srv.URL, false, false)
		done := abandoned(t, dsn, srv.URL, true, true)
		lost := abandoned(t, dsn, srv.URL, true, false)
		executed := prov.Executed()

		code, out, stderr := runCmd(t, "", "recover", "--db", dsn, "--provider", srv.URL, "--once", "--json", "--batch", "2")
		var got map[string]int
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || len(got) != 4 || !strings.HasSuffix(out, "}\n") {
			t.Fatalf("recover: code %d, out %q, stderr %q", code, out, stderr)
		}
		if want := map[string]int{"released": 1, "recovered": 0, "unknown": 1, "reconciled": 1}; !equalCounts(got, want) {
			t.Errorf("recover --json = %v, want %v", got, want)
		}
		if _, err := stateOf(t, dsn, reserved.Scope); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("released reservation: %v, want ErrNotFound", err)
		}
		if st, err := stateOf(t, dsn, done.Scope); err != nil || st != idem.StateSucceeded {
			t.Errorf("executed transfer: %s %v, want SUCCEEDED", st, err)
		}
		if st, err := stateOf(t, dsn, lost.Scope); err != nil || st != idem.StateUnknown {
			t.Errorf("lost transfer: %s %v, want UNKNOWN", st, err)
		}
		if prov.Executed() != executed {
			t.Errorf("provider executed %d transfers, want %d", prov.Executed(), executed)
		}

		code, out, stderr = runCmd(t, "", "recover", "--db", dsn, "--provider", srv.URL, "--once")
		if code != exitOK || out != "released 0, recovered 0, unknown 0, reconciled 0\n" {
			t.Errorf("second recover: code %d, out %q, stderr %q", code, out, stderr)
		}
	})
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRecoverLoop(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		// No provider: an effect cannot be checked, so it becomes UNKNOWN.
		rec := abandoned(t, dsn, "", true, false)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var out, errb syncBuffer
		exited := make(chan int, 1)
		go func() {
			exited <- run(ctx, []string{"recover", "--db", dsn, "--interval", "20ms"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
		}()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "unknown 1") {
			if time.Now().After(deadline) {
				t.Fatalf("no round reported; out %q, stderr %q", out.String(), errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		select {
		case code := <-exited:
			if code != exitOK {
				t.Errorf("recover exited %d, want 0; stderr %q", code, errb.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("recover did not stop on cancel")
		}
		if st, err := stateOf(t, dsn, rec.Scope); err != nil || st != idem.StateUnknown {
			t.Errorf("state %s %v, want UNKNOWN", st, err)
		}
	})
}

func TestRecoverUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"recover", "--batch", "0"},
		{"recover", "--interval", "0s"},
		{"recover", "--lease", "-1s"},
		{"recover", "extra"},
		{"recover", "--nope"},
	} {
		if code, _, _ := runCmd(t, "", args...); code != exitUsage {
			t.Errorf("%q: code %d, want %d", args, code, exitUsage)
		}
	}
}
