package shardmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Directory maps tenants to shard names; an explicit default covers
// tenants without an entry. Implementations are safe for concurrent use;
// ctx governs the call's reads and writes.
type Directory interface {
	// Lookup returns the tenant's entry, or, when it has none,
	// Entry{Tenant: tenant, Shard: the default} with Version 0.
	Lookup(ctx context.Context, tenant string) (Entry, error)
	// List returns every entry, ordered by tenant, without the default.
	List(ctx context.Context) ([]Entry, error)
	// Default returns the default shard's name.
	Default(ctx context.Context) (string, error)
	// Set writes e's Shard and Draining for e.Tenant with a
	// compare-and-set on Version: seen is the Version read (0: the
	// tenant has no entry). A lost race is ErrStale, an invalid entry
	// ErrInvalidEntry, a shard the directory does not know
	// ErrUnknownShard. It returns the entry written, its Version one
	// above seen, UpdatedBy actor.
	Set(ctx context.Context, e Entry, seen int64, actor string) (Entry, error)
}

// Entry is where one tenant's operations go.
type Entry struct {
	// Tenant is the tenant (idem.Identity.Tenant).
	Tenant string
	// Shard is the name of the shard that holds the tenant's data.
	Shard string
	// Draining refuses the tenant's new operations with 503 DRAINING
	// (Router.Admit); replays of its finished operations are served. A
	// tenant move sets it while it copies the tenant's records.
	Draining bool
	// Version counts the entry's changes: 0 for a tenant without an
	// entry (the default), then 1, 2, …
	Version int64
	// UpdatedAt and UpdatedBy say when and by whom the entry was last
	// set; zero for a tenant without an entry.
	UpdatedAt time.Time
	UpdatedBy string
}

// Errors of a Directory, for callers to branch on with errors.Is.
var (
	// ErrStale: the entry changed since the Version the change was based on.
	ErrStale = errors.New("shardmap: the directory entry changed since it was read")
	// ErrUnknownShard: a shard name that is not one of the service's shards.
	ErrUnknownShard = errors.New("shardmap: unknown shard")
	// ErrInvalidEntry: a tenant, shard name or actor the directory cannot hold.
	ErrInvalidEntry = errors.New("shardmap: invalid directory entry")
	// ErrNoDefault: the directory has no default shard.
	ErrNoDefault = errors.New("shardmap: the directory has no default shard")
)

// Limits of the names a directory holds, in bytes.
const (
	MaxTenant    = 4000
	MaxShardName = 64
	MaxActor     = 200
)

// Storable reports whether tenant can be an entry's tenant: valid UTF-8
// without NUL, at most MaxTenant bytes — what every directory can store.
// A tenant that is not storable has no entry; it goes to the default.
func Storable(tenant string) bool {
	return len(tenant) <= MaxTenant && utf8.ValidString(tenant) && !strings.ContainsRune(tenant, 0)
}

// ValidShardName reports whether name can name a shard: 1 to
// MaxShardName letters, digits, '-' or '_'.
func ValidShardName(name string) bool {
	if name == "" || len(name) > MaxShardName {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// CheckSet validates a change for Set against the shards a directory
// knows (nil: any valid name): ErrInvalidEntry or ErrUnknownShard.
func CheckSet(e Entry, seen int64, actor string, shards []string) error {
	switch {
	case !Storable(e.Tenant):
		return fmt.Errorf("%w: the tenant must be valid UTF-8 without NUL, at most %d bytes", ErrInvalidEntry, MaxTenant)
	case !ValidShardName(e.Shard):
		return fmt.Errorf("%w: shard name %q", ErrInvalidEntry, e.Shard)
	case seen < 0:
		return fmt.Errorf("%w: seen version %d", ErrInvalidEntry, seen)
	case actor == "" || len(actor) > MaxActor || !Storable(actor):
		return fmt.Errorf("%w: the actor must be 1 to %d bytes of UTF-8 without NUL", ErrInvalidEntry, MaxActor)
	}
	if shards != nil && !slices.Contains(shards, e.Shard) {
		return fmt.Errorf("%w: %q", ErrUnknownShard, e.Shard)
	}
	return nil
}
