package registry

import (
	"context"
	"errors"
	"slices"
	"time"
)

// KeyHolder is one instance's entry in the key roster: the IDs of the
// keys it can open and when it last said so.
type KeyHolder struct {
	// Instance names the process, unique among the registry's users (idem
	// serve uses host, process ID and a random suffix).
	Instance string
	// KeyIDs are the IDs of the keys its ring holds, sorted.
	KeyIDs []string
	// SeenAt is when it last announced them (database time, or the
	// Store's injected clock).
	SeenAt time.Time
}

// Holds reports whether h holds the key keyID.
func (h KeyHolder) Holds(keyID string) bool {
	_, ok := slices.BinarySearch(h.KeyIDs, keyID)
	return ok
}

// KeyRoster publishes which keys each live instance holds, the way the
// control row publishes the writer epoch: a key becomes the one new
// bodies are sealed with only once every instance seen within the window
// holds it (keyring.Gate), and idem keys rotate refuses while one does
// not, so no live instance is handed a body it cannot open. Both drivers
// implement it; methods are safe for concurrent use, across processes
// too; ctx governs each call.
type KeyRoster interface {
	// AnnounceKeys records that instance holds keyIDs, as of now, in one
	// upsert that replaces its previous entry. An instance refreshes it
	// while it runs. instance must be 1 to 128 bytes and keyIDs key IDs
	// of a key ring (ErrBadKeyHolder otherwise).
	AnnounceKeys(ctx context.Context, instance string, keyIDs []string) error
	// KeyHolders returns the instances whose last announcement is at most
	// window old, by instance name; older entries are not returned (an
	// instance that crashed ages out).
	KeyHolders(ctx context.Context, window time.Duration) ([]KeyHolder, error)
	// ForgetInstance deletes instance's entry, when it stops; forgetting
	// one that has none is not an error.
	ForgetInstance(ctx context.Context, instance string) error
}

// ErrBadKeyHolder: AnnounceKeys was given an empty or over-long instance
// name, or an empty key ID or one with a space.
var ErrBadKeyHolder = errors.New("registry: bad key holder: want an instance of 1 to 128 bytes and non-empty key IDs without spaces")

// CheckKeyHolder returns ErrBadKeyHolder unless instance and keyIDs can
// be announced, for drivers.
func CheckKeyHolder(instance string, keyIDs []string) error {
	if len(instance) == 0 || len(instance) > 128 {
		return ErrBadKeyHolder
	}
	n := 0
	for _, id := range keyIDs {
		if id == "" || slices.Contains([]byte(id), ' ') {
			return ErrBadKeyHolder
		}
		n += len(id) + 1
	}
	if n > 8192 {
		return ErrBadKeyHolder
	}
	return nil
}

// Lacking returns, sorted, the instances among holders that do not hold
// keyID.
func Lacking(holders []KeyHolder, keyID string) []string {
	var out []string
	for _, h := range holders {
		if !h.Holds(keyID) {
			out = append(out, h.Instance)
		}
	}
	slices.Sort(out)
	return out
}
