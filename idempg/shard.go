package idempg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/shard/shardmap"
)

//go:embed shard.sql
var shardFS embed.FS

// shardQueries are the named queries of the shard directory (shard.sql).
var shardQueries = sqlfile.MustLoad(shardFS, "shard.sql")

// ShardDirectory is the shardmap.Directory kept in the Store's database
// (migration 019): the map of the service's tenants to its shards, in
// the one database designated for it. Make it with Store.ShardDirectory;
// it is safe for concurrent use by any number of processes. Each
// method's ctx governs its statement.
type ShardDirectory struct {
	s      *Store
	shards []string
}

var _ shardmap.Directory = (*ShardDirectory)(nil)

// ShardDirectory returns the directory kept in this Store's database
// over the named shards: Set refuses any other name
// (shardmap.ErrUnknownShard); nil shards accept any valid name.
func (s *Store) ShardDirectory(shards []string) *ShardDirectory {
	return &ShardDirectory{s: s, shards: slices.Clone(shards)}
}

// InitDefault makes name the default shard if the directory has none,
// and returns the default in place (name, or the one set before).
func (d *ShardDirectory) InitDefault(ctx context.Context, name, actor string) (string, error) {
	if err := shardmap.CheckSet(shardmap.Entry{Tenant: "-", Shard: name}, 0, actor, d.shards); err != nil {
		return "", fmt.Errorf("idempg: shard default: %w", err)
	}
	now, _ := d.s.clock()
	var got string
	if err := d.s.pool.QueryRow(ctx, shardQueries.Get("ShardInitDefault"), now, name, actor).Scan(&got); err != nil {
		return "", fmt.Errorf("idempg: shard default: %w", translate(err))
	}
	return got, nil
}

// Default implements shardmap.Directory: shardmap.ErrNoDefault before
// InitDefault.
func (d *ShardDirectory) Default(ctx context.Context) (string, error) {
	var name string
	err := d.s.pool.QueryRow(ctx, shardQueries.Get("ShardDefault")).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", shardmap.ErrNoDefault
	}
	if err != nil {
		return "", fmt.Errorf("idempg: shard default: %w", translate(err))
	}
	return name, nil
}

// Lookup implements shardmap.Directory in one statement; shardmap.ErrNoDefault
// before InitDefault. A tenant the table cannot hold (shardmap.Storable)
// has no entry: it is not sent to the database and gets the default.
func (d *ShardDirectory) Lookup(ctx context.Context, tenant string) (shardmap.Entry, error) {
	e := shardmap.Entry{Tenant: tenant}
	if !shardmap.Storable(tenant) {
		def, err := d.Default(ctx)
		e.Shard = def
		return e, err
	}
	var at *time.Time
	err := d.s.pool.QueryRow(ctx, shardQueries.Get("ShardLookup"), tenant).Scan(&e.Shard, &e.Draining, &e.Version, &at, &e.UpdatedBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return shardmap.Entry{}, shardmap.ErrNoDefault
	case err != nil:
		return shardmap.Entry{}, fmt.Errorf("idempg: shard lookup: %w", translate(err))
	}
	if at != nil {
		e.UpdatedAt = at.UTC()
	}
	return e, nil
}

// List implements shardmap.Directory.
func (d *ShardDirectory) List(ctx context.Context) ([]shardmap.Entry, error) {
	rows, err := d.s.pool.Query(ctx, shardQueries.Get("ShardList"))
	if err != nil {
		return nil, fmt.Errorf("idempg: shard list: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (shardmap.Entry, error) {
		var e shardmap.Entry
		err := row.Scan(&e.Tenant, &e.Shard, &e.Draining, &e.Version, &e.UpdatedAt, &e.UpdatedBy)
		e.UpdatedAt = e.UpdatedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: shard list: %w", translate(err))
	}
	return list, nil
}

// Set implements shardmap.Directory: one compare-and-set statement, an
// insert for seen 0 and an update of the row at version seen otherwise.
func (d *ShardDirectory) Set(ctx context.Context, e shardmap.Entry, seen int64, actor string) (shardmap.Entry, error) {
	if err := shardmap.CheckSet(e, seen, actor, d.shards); err != nil {
		return shardmap.Entry{}, fmt.Errorf("idempg: shard set: %w", err)
	}
	now, _ := d.s.clock()
	args := []any{now, e.Tenant, e.Shard, e.Draining, actor}
	query := "ShardInsert"
	if seen > 0 {
		query = "ShardUpdate"
		args = append(args, seen)
	}
	out := shardmap.Entry{Tenant: e.Tenant, Shard: e.Shard, Draining: e.Draining, UpdatedBy: actor}
	err := d.s.pool.QueryRow(ctx, shardQueries.Get(query), args...).Scan(&out.Version, &out.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return shardmap.Entry{}, fmt.Errorf("idempg: shard set: %w: tenant's entry is not at version %d", shardmap.ErrStale, seen)
	case err != nil:
		return shardmap.Entry{}, fmt.Errorf("idempg: shard set: %w", translate(err))
	}
	out.UpdatedAt = out.UpdatedAt.UTC()
	return out, nil
}
