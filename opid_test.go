package idem_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestOperationIDUnguessable: operation IDs made in the same millisecond
// share only their timestamp prefix; the 80 random bits after it differ
// (no counter, nothing derived from the client's key), so an ID cannot be
// guessed from another one.
// Proves threat:guessed-operation-ids (docs/threat-model.md).
func TestOperationIDUnguessable(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_900_000_000_000)
	shape := regexp.MustCompile(`^op_[0-9A-HJKMNP-TV-Z]{26}$`)
	const n = 20000
	seen := make(map[string]bool, n)
	var prefix string
	diff := [16]int{} // how often each random character differs from the first ID's
	var first string
	for i := range n {
		id := idem.NewOperationID(now)
		if !shape.MatchString(id) {
			t.Fatalf("ID %q has the wrong shape", id)
		}
		if seen[id] {
			t.Fatalf("ID %q made twice in %d", id, i)
		}
		seen[id] = true
		if i == 0 {
			prefix, first = id[:13], id
			continue
		}
		if id[:13] != prefix {
			t.Fatalf("IDs of one millisecond have different time prefixes: %q, %q", prefix, id[:13])
		}
		for j := range 16 {
			if id[13+j] != first[13+j] {
				diff[j]++
			}
		}
	}
	// Each of the last 16 characters carries 5 random bits: it equals the
	// first ID's with probability 1/32, so it differs in about 31/32 of
	// the IDs; a counter or a constant would differ far less often.
	for j, d := range diff {
		if d < n*9/10 {
			t.Errorf("random character %d differs from the first ID's in %d of %d IDs, want about %d", j, d, n-1, n*31/32)
		}
	}
}
