package gate

import (
	"context"
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/keyring"
)

// TestVerifySealed: on a registry with a key ring, where outbox payloads
// are sealed, a clean run verifies clean: the gate reads the payloads
// through the Store, which opens them.
func TestVerifySealed(t *testing.T) {
	t.Parallel()
	key, err := keyring.NewKey("gate")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := keyring.New(keyring.File{Active: "gate", Keys: []keyring.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig().withDefaults()
	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	b := newBundleWith(t, "sqlite", 2, plan.Tokens(), idemstore.Options{Sealer: ring})
	mark, err := OutboxMark(context.Background(), b.store)
	if err != nil {
		t.Fatal(err)
	}
	res := Load(context.Background(), cfg, plan, b.targets, nil)
	r := verify(t, b, cfg, plan, res, mark)
	if !r.Passed {
		t.Fatalf("clean sealed run failed: %+v\nproblems: %q", r.Gates, r.Problems)
	}
	checkCleanCounts(t, r, plan)
}
