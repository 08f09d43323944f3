package idempg

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed keyroster.sql
var keyRosterFS embed.FS

// keyRosterQueries holds the named statements of keyroster.sql.
var keyRosterQueries = sqlfile.MustLoad(keyRosterFS, "keyroster.sql")

var _ registry.KeyRoster = (*Store)(nil)

// AnnounceKeys records the keys instance holds; see registry.KeyRoster.
// One upsert, durable on return. ctx governs the statement.
func (s *Store) AnnounceKeys(ctx context.Context, instance string, keyIDs []string) error {
	if err := registry.CheckKeyHolder(instance, keyIDs); err != nil {
		return fmt.Errorf("idempg: announce keys: %w", err)
	}
	ids := slices.Sorted(slices.Values(keyIDs))
	now, _ := s.clock()
	if _, err := s.pool.Exec(ctx, keyRosterQueries.Get("AnnounceKeys"), instance, strings.Join(ids, " "), now); err != nil {
		return fmt.Errorf("idempg: announce keys: %w", translate(err))
	}
	return nil
}

// KeyHolders returns the instances seen within window; see
// registry.KeyRoster. ctx governs the query.
func (s *Store) KeyHolders(ctx context.Context, window time.Duration) ([]registry.KeyHolder, error) {
	now, _ := s.clock()
	rows, err := s.pool.Query(ctx, keyRosterQueries.Get("KeyHolders"), micros(window), now)
	if err != nil {
		return nil, fmt.Errorf("idempg: key holders: %w", translate(err))
	}
	holders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (registry.KeyHolder, error) {
		var h registry.KeyHolder
		var ids string
		err := r.Scan(&h.Instance, &ids, &h.SeenAt)
		h.KeyIDs, h.SeenAt = strings.Fields(ids), h.SeenAt.UTC()
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: key holders: %w", translate(err))
	}
	return holders, nil
}

// ForgetInstance deletes instance's entry; see registry.KeyRoster. ctx
// governs the statement.
func (s *Store) ForgetInstance(ctx context.Context, instance string) error {
	if _, err := s.pool.Exec(ctx, keyRosterQueries.Get("ForgetInstance"), instance); err != nil {
		return fmt.Errorf("idempg: forget instance: %w", translate(err))
	}
	return nil
}
