package shardmap

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/strictjson"
)

// MaxMapBytes bounds a shard map file (ParseMap, LoadMap).
const MaxMapBytes = 16 << 20

// StaticDirectory is a Directory held in memory: a shard map read from
// JSON (ParseMap, LoadMap) or built by NewStaticDirectory. Set changes it
// in memory only, with the same compare-and-set as a stored directory,
// for tests and a single process; the file is never written. Make one
// with NewStaticDirectory or ParseMap; safe for concurrent use.
type StaticDirectory struct {
	def    string
	shards []string // the names the map may use

	mu      sync.RWMutex
	entries map[string]Entry
}

// mapFile is the JSON form of a shard map:
//
//	{"default": "a", "tenants": {"t1": "b", "t2": "c"}}
type mapFile struct {
	Default string            `json:"default"`
	Tenants map[string]string `json:"tenants"`
}

// NewStaticDirectory returns a directory whose default is def and whose
// tenants go to the shards tenants names (Version 1, UpdatedBy "map").
// Every name, def included, must be one of shards: an absent default or
// an unknown shard is ErrNoDefault or ErrUnknownShard.
func NewStaticDirectory(def string, tenants map[string]string, shards []string) (*StaticDirectory, error) {
	if def == "" {
		return nil, ErrNoDefault
	}
	if !slices.Contains(shards, def) {
		return nil, fmt.Errorf("%w: default %q (shards: %q)", ErrUnknownShard, def, shards)
	}
	d := &StaticDirectory{def: def, shards: slices.Clone(shards), entries: make(map[string]Entry, len(tenants))}
	for tenant, name := range tenants {
		e := Entry{Tenant: tenant, Shard: name, Version: 1, UpdatedBy: "map"}
		if err := CheckSet(e, 0, e.UpdatedBy, shards); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		d.entries[tenant] = e
	}
	return d, nil
}

// ParseMap reads a shard map (see mapFile) strictly — a member given
// twice, an unknown member or more than MaxMapBytes is an error — and
// returns its directory over shards (NewStaticDirectory's checks).
func ParseMap(b []byte, shards []string) (*StaticDirectory, error) {
	var m mapFile
	if err := strictjson.Decode(b, MaxMapBytes, &m); err != nil {
		return nil, fmt.Errorf("shardmap: the shard map: %w", err)
	}
	d, err := NewStaticDirectory(m.Default, m.Tenants, shards)
	if err != nil {
		return nil, fmt.Errorf("shardmap: the shard map: %w", err)
	}
	return d, nil
}

// LoadMap reads the shard map file at path; see ParseMap.
func LoadMap(path string, shards []string) (*StaticDirectory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("shardmap: %w", err)
	}
	return ParseMap(b, shards)
}

// Lookup implements Directory; it never fails.
func (d *StaticDirectory) Lookup(_ context.Context, tenant string) (Entry, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if e, ok := d.entries[tenant]; ok {
		return e, nil
	}
	return Entry{Tenant: tenant, Shard: d.def}, nil
}

// List implements Directory.
func (d *StaticDirectory) List(context.Context) ([]Entry, error) {
	d.mu.RLock()
	list := make([]Entry, 0, len(d.entries))
	for _, e := range d.entries {
		list = append(list, e)
	}
	d.mu.RUnlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Tenant < list[j].Tenant })
	return list, nil
}

// Default implements Directory.
func (d *StaticDirectory) Default(context.Context) (string, error) { return d.def, nil }

// Set implements Directory, in memory.
func (d *StaticDirectory) Set(_ context.Context, e Entry, seen int64, actor string) (Entry, error) {
	if err := CheckSet(e, seen, actor, d.shards); err != nil {
		return Entry{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.entries[e.Tenant].Version; cur != seen {
		return Entry{}, fmt.Errorf("%w: tenant at version %d, the change was based on %d", ErrStale, cur, seen)
	}
	out := Entry{Tenant: e.Tenant, Shard: e.Shard, Draining: e.Draining, Version: seen + 1, UpdatedAt: time.Now(), UpdatedBy: actor}
	d.entries[e.Tenant] = out
	return out, nil
}
