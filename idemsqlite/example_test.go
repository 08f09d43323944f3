package idemsqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/registry"
)

// ExampleOpen opens the embedded store on a file (migrations applied) and
// walks the acceptance point by hand: the first Reserve creates the
// record, a second with the same scope finds it in flight, and once the
// outcome is recorded the same scope replays it.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	store, err := idemsqlite.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	id := idem.Identity{Tenant: "acme", Principal: "ann"}
	key, _ := idem.ParseKey([]string{"7f7b1eb9-fed4-48ae-b7c2-667664a69f0c"}, idem.StrictKeyPolicy)
	c := registry.Claim{Scope: idem.ScopeOf(id, "orders.create", "v1", key), Operation: "orders.create", Owner: registry.OwnerOf(id)}

	rec, created, _ := store.Reserve(ctx, c)
	fmt.Println(registry.Decide(rec, created, c.Fingerprint), rec.State)
	dup, created, _ := store.Reserve(ctx, c)
	fmt.Println(registry.Decide(dup, created, c.Fingerprint), dup.State)
	store.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, _ registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte(`{"order":1}`)}}, nil
	})
	again, created, _ := store.Reserve(ctx, c)
	fmt.Println(registry.Decide(again, created, c.Fingerprint), again.State, again.Response.Status, string(again.Response.Body))
	// Output:
	// execute RESERVED
	// in_progress RESERVED
	// replay SUCCEEDED 201 {"order":1}
}

// ExampleOpenMemory opens a store for a test: in memory, NOT durable, one
// connection. Each call is a new, empty database.
func ExampleOpenMemory() {
	ctx := context.Background()
	a, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, _ := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	defer b.Close()
	c := registry.Claim{Scope: idem.ScopeHash{1}, Operation: "t"}
	_, createdA, _ := a.Reserve(ctx, c)
	_, createdB, _ := b.Reserve(ctx, c)
	_, again, _ := a.Reserve(ctx, c)
	fmt.Println(createdA, createdB, again)
	// Output: true true false
}
