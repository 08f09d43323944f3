package idempg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestAcceptanceLane holds every connection of the main pool, as business
// transactions of other requests would, and checks that the acceptance
// point still answers through its lane — and, with the lane off, that it
// does not.
func TestAcceptanceLane(t *testing.T) {
	for _, tc := range []struct {
		name      string
		laneConns int
		wantWait  bool
	}{
		{"lane", 0, false},
		{"no lane", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(t.Context(), pgtest.DSN(t)+"&pool_max_conns=1", Options{LaneConns: tc.laneConns})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			held, err := st.Pool().Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()

			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			c := newClaim("lane.test")
			rec, created, err := st.Reserve(ctx, c)
			if tc.wantWait {
				if err == nil || !errors.Is(err, registry.ErrUnavailable) {
					t.Fatalf("Reserve without a lane, main pool held: %v, want it to wait until ctx ends (ErrUnavailable)", err)
				}
				return
			}
			if err != nil || !created {
				t.Fatalf("Reserve through the lane, main pool held: created %v, %v", created, err)
			}
			if got, err := st.Get(ctx, c.Scope); err != nil || got.OperationID != rec.OperationID {
				t.Fatalf("Get through the lane: %v %v", got.OperationID, err)
			}
			if _, err := st.GetByID(ctx, rec.OperationID); err != nil {
				t.Fatalf("GetByID through the lane: %v", err)
			}
			if err := st.Release(ctx, rec); err != nil {
				t.Fatalf("Release through the lane: %v", err)
			}
		})
	}
}
