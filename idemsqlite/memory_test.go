package idemsqlite

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestOpenMemory: an in-memory store migrates, records and replays like a
// file; two of them are separate databases; concurrent callers queue for
// its one connection instead of failing; it is gone once closed.
func TestOpenMemory(t *testing.T) {
	ctx := context.Background()
	a, err := OpenMemory(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenMemory(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := registry.Claim{Operation: "things.create", Scope: idem.ScopeHash{1}, Fingerprint: idem.Fingerprint{2}}
	rec, created, err := a.Reserve(ctx, c)
	if err != nil || !created {
		t.Fatalf("Reserve: %v %v", created, err)
	}
	done, err := a.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, _ registry.Record) (registry.Outcome, error) {
		if _, err := tx.Exec(ctx, `CREATE TABLE things (id TEXT)`); err != nil {
			return registry.Outcome{}, err
		}
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte(`{"id":1}`)}}, nil
	})
	if err != nil || done.State != idem.StateSucceeded {
		t.Fatalf("Complete: %+v %v", done, err)
	}
	again, created, err := a.Reserve(ctx, c)
	if err != nil || created || registry.Decide(again, created, c.Fingerprint) != registry.Replay || string(again.Response.Body) != `{"id":1}` {
		t.Errorf("replay: %+v %v %v", again, created, err)
	}
	if _, err := b.Get(ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("a second memory store sees the first's record: %v", err)
	}
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			c := registry.Claim{Operation: "things.create", Scope: idem.ScopeHash{byte(i + 10)}, Fingerprint: idem.Fingerprint{2}}
			rec, _, err := a.Reserve(ctx, c)
			if err == nil {
				_, err = a.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
					return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201}}, nil
				})
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent caller: %v", err)
		}
	}
	a.Close()
	if _, err := a.Get(ctx, c.Scope); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Get after Close: %v, want ErrUnavailable", err)
	}
}
