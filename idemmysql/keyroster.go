package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed keyroster.sql
var keyRosterFiles embed.FS

// keyRosterQueries holds the named statements of keyroster.sql; not
// prepared: an instance runs them every few seconds.
var keyRosterQueries = sqlfile.MustLoad(keyRosterFiles, "keyroster.sql")

var _ registry.KeyRoster = (*Store)(nil)

// AnnounceKeys records the keys instance holds; see registry.KeyRoster.
// One upsert in a write transaction, durable on return. ctx governs the
// call.
func (s *Store) AnnounceKeys(ctx context.Context, instance string, keyIDs []string) error {
	if err := registry.CheckKeyHolder(instance, keyIDs); err != nil {
		return fmt.Errorf("idemmysql: announce keys: %w", err)
	}
	ids := strings.Join(slices.Sorted(slices.Values(keyIDs)), " ")
	return s.writeTx(ctx, "announce keys", func(tx *sql.Tx, now any) error {
		_, err := exec(ctx, tx, keyRosterQueries.Get("AnnounceKeys"), instance, ids, now)
		return err
	})
}

// KeyHolders returns the instances seen within window; see
// registry.KeyRoster. ctx governs the query.
func (s *Store) KeyHolders(ctx context.Context, window time.Duration) ([]registry.KeyHolder, error) {
	if err := s.checkOpen(); err != nil {
		return nil, s.fail("key holders", err)
	}
	now, _ := s.stamp()
	rows, err := queryRows(ctx, s.db, keyRosterQueries.Get("KeyHolders"), window.Microseconds(), now)
	if err != nil {
		return nil, s.fail("key holders", err)
	}
	defer rows.Close()
	var holders []registry.KeyHolder
	for rows.Next() {
		var h registry.KeyHolder
		var ids string
		var seen int64
		if err := rows.Scan(&h.Instance, &ids, &seen); err != nil {
			return nil, s.fail("key holders", err)
		}
		h.KeyIDs, h.SeenAt = strings.Fields(ids), fromMicros(seen)
		holders = append(holders, h)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("key holders", err)
	}
	return holders, nil
}

// ForgetInstance deletes instance's entry; see registry.KeyRoster. ctx
// governs the call.
func (s *Store) ForgetInstance(ctx context.Context, instance string) error {
	return s.writeTx(ctx, "forget instance", func(tx *sql.Tx, _ any) error {
		_, err := exec(ctx, tx, keyRosterQueries.Get("ForgetInstance"), instance)
		return err
	})
}
