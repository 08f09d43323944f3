package keyring

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/registry"
)

// DefaultHolderWindow is how recently an instance must have announced its
// keys to count as live (Gate.Refresh): 30 s, six refreshes of idem serve.
const DefaultHolderWindow = 30 * time.Second

// Gate is the registry.Sealer a server uses: it opens with every key of
// its Ring, and seals new bodies with the ring's active key only once
// every live instance holds that key, as published in the registry's key
// roster (registry.KeyRoster); until then it seals with the newest key of
// the file (in file order) that they all hold. So a key added to the file
// and rolled out instance by instance is not used while one instance
// still runs with the old file, and that instance's replays of new
// records do not fail with 503 RESPONSE_UNREADABLE.
//
// A new Gate seals with the active key until the first Refresh; call
// Refresh before serving, then every few seconds. Safe for concurrent
// use.
type Gate struct {
	ring     *Ring
	instance string
	use      atomic.Pointer[string]
	lacking  atomic.Pointer[[]string]
}

var _ registry.Sealer = (*Gate)(nil)

// NewGate returns a Gate over r for the instance named instance (1 to 128
// bytes, unique among the registry's users).
func NewGate(r *Ring, instance string) *Gate {
	g := &Gate{ring: r, instance: instance}
	g.use.Store(&r.active)
	g.lacking.Store(new([]string))
	return g
}

// Ring returns the Gate's ring.
func (g *Gate) Ring() *Ring { return g.ring }

// Instance returns the name the Gate announces its keys under.
func (g *Gate) Instance() string { return g.instance }

// ActiveKeyID returns the ID of the key Seal uses now.
func (g *Gate) ActiveKeyID() string { return *g.use.Load() }

// Seal encrypts plaintext under the key ActiveKeyID names.
func (g *Gate) Seal(plaintext, aad []byte) (string, []byte, error) {
	return g.ring.sealWith(*g.use.Load(), plaintext, aad)
}

// Open decrypts with any key of the ring; see Ring.Open.
func (g *Gate) Open(keyID string, sealed, aad []byte) ([]byte, error) {
	return g.ring.Open(keyID, sealed, aad)
}

// Lacking returns the live instances that did not hold the ring's active
// key at the last Refresh (none: the active key is in use).
func (g *Gate) Lacking() []string { return slices.Clone(*g.lacking.Load()) }

// Refresh announces the ring's keys under the Gate's instance, reads the
// instances seen within window (DefaultHolderWindow if window <= 0) and
// chooses the sealing key: the active key if every one of them holds it,
// else the newest key of the file they all hold, else (no key in common:
// a deployment mistake) the active key. It returns the key now used. On
// error the choice is left as it was. ctx governs the two statements.
func (g *Gate) Refresh(ctx context.Context, roster registry.KeyRoster, window time.Duration) (string, error) {
	if window <= 0 {
		window = DefaultHolderWindow
	}
	if err := roster.AnnounceKeys(ctx, g.instance, g.ring.order); err != nil {
		return g.ActiveKeyID(), fmt.Errorf("keyring: %w", err)
	}
	holders, err := roster.KeyHolders(ctx, window)
	if err != nil {
		return g.ActiveKeyID(), fmt.Errorf("keyring: %w", err)
	}
	lacking := registry.Lacking(holders, g.ring.active)
	use := g.ring.active
	if len(lacking) > 0 {
		for _, id := range slices.Backward(g.ring.order) {
			if len(registry.Lacking(holders, id)) == 0 {
				use = id
				break
			}
		}
	}
	g.use.Store(&use)
	g.lacking.Store(&lacking)
	return use, nil
}
