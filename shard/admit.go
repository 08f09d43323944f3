package shard

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
)

// Admit is a Middleware.Admit for the operations of every shard: asked
// before a new operation is accepted (never before a replay), it reads
// the caller's entry again (through the cache, Refresh) and refuses the
// operation with 503 DRAINING while the tenant is draining, or while
// the tenant's shard is no longer the one Handler chose for the request
// (its map changed meanwhile: the retry goes to the new shard). A
// request that did not pass through Handler is refused 503 DRAINING too:
// its shard is unknown. A failed read is an error (503
// STORE_UNAVAILABLE), never an admission. ctx is the request's context;
// it governs the directory read.
//
// Combine it with the shard's idemhttp.ControlAdmitter (Chain), which
// follows the drain and epoch of the shard's registry.
func (r *Router) Admit(ctx context.Context) error {
	route, ok := RouteOf(ctx)
	if !ok {
		return &idem.Error{Code: idem.CodeDraining, Reason: "the request reached no tenant's shard; retry later"}
	}
	now, err := r.Route(ctx, route.Entry.Tenant)
	switch {
	case err != nil:
		return fmt.Errorf("shard: admitting the tenant's operation: %w", err)
	case now.Entry.Draining:
		return &idem.Error{Code: idem.CodeDraining, Reason: "the tenant is being moved and accepts no new operations; retry later (replays still work)"}
	case now.Name != route.Name:
		return &idem.Error{Code: idem.CodeDraining, Reason: "the tenant moved to another shard; retry"}
	}
	return nil
}

// Chain returns an admission that asks each of admits in turn and
// returns the first refusal; nil entries are skipped.
func Chain(admits ...func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, a := range admits {
			if a == nil {
				continue
			}
			if err := a(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
