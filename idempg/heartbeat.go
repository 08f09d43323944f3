package idempg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/registry"
)

// ExtendLease moves the lease of rec's record to now + lease if the record
// is still in flight at rec.OwnerGen; see registry.LeaseScanner. The
// commit is asynchronous like Reserve's: a lost heartbeat only lets
// recovery take over sooner, which the owner generation fences.
func (s *Store) ExtendLease(ctx context.Context, rec registry.Record, lease time.Duration) (time.Time, error) {
	lease = registry.LeaseOrDefault(lease)
	now, _ := s.clock()
	var until time.Time
	err := s.pool.QueryRow(ctx, recoveryQueries.Get("ExtendLease"),
		rec.Scope[:], rec.OperationID, rec.OwnerGen, lease.Microseconds(), now).Scan(&until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, fmt.Errorf("idempg: extend lease %s: %w", rec.OperationID, registry.ErrFenced)
	case err != nil:
		return time.Time{}, fmt.Errorf("idempg: extend lease: %w", translate(err))
	}
	return until.UTC(), nil
}
