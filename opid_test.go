package idem_test

import (
	"bytes"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestOperationIDUnguessable: operation IDs made in the same millisecond
// for the same scope share only their timestamp and scope prefix; the 80
// random bits after them differ (no counter, nothing derived from the
// client's key beyond the hashed scope prefix), so an ID cannot be
// guessed from another one, not even from another ID of the same scope.
// Proves threat:guessed-operation-ids (docs/threat-model.md).
func TestOperationIDUnguessable(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_900_000_000_000)
	scope := idem.ScopeOf(idem.Identity{Tenant: "t", Principal: "p"}, "payments.create", "1", mustParseKey(t, "k-0123456789abcdef"))
	shape := regexp.MustCompile(`^op_1[0-9A-HJKMNP-TV-Z]{10}[0-9A-F]{10}[0-9A-HJKMNP-TV-Z]{16}$`)
	const n = 20000
	seen := make(map[string]bool, n)
	var prefix string
	diff := [16]int{} // how often each random character differs from the first ID's
	var first string
	for i := range n {
		id := idem.NewOperationID(now, scope)
		if !shape.MatchString(id) || len(id) != idem.OperationIDLen {
			t.Fatalf("ID %q has the wrong shape", id)
		}
		if seen[id] {
			t.Fatalf("ID %q made twice in %d", id, i)
		}
		seen[id] = true
		if i == 0 {
			prefix, first = id[:24], id
			continue
		}
		if id[:24] != prefix {
			t.Fatalf("IDs of one millisecond and scope have different prefixes: %q, %q", prefix, id[:24])
		}
		for j := range 16 {
			if id[24+j] != first[24+j] {
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

// TestOperationIDLeadsToScope: the scope range an ID names holds its own
// scope and no scope of another prefix (the ID carries 40 bits of the
// scope hash, nothing of the key); IDs sort by time, and after every ID
// of the legacy layout; legacy and malformed IDs name no range.
// Proves threat:scope-prefix-in-id (docs/threat-model.md).
func TestOperationIDLeadsToScope(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_900_000_000_000)
	var scope idem.ScopeHash
	for i := range scope {
		scope[i] = byte(0xF0 - i)
	}
	id := idem.NewOperationID(now, scope)
	lo, hi, ok := idem.OperationIDScopeRange(id)
	if !ok || bytes.Compare(lo[:], scope[:]) > 0 || bytes.Compare(scope[:], hi[:]) > 0 {
		t.Fatalf("ID %q names the range %x…%x (ok %v), which misses its scope %x", id, lo[:], hi[:], ok, scope[:])
	}
	other := scope
	other[idem.ScopePrefixLen-1]++
	if bytes.Compare(other[:], hi[:]) <= 0 {
		t.Errorf("the range of %q holds %x, a scope of another prefix", id, other[:])
	}
	var zero idem.ScopeHash
	if lo, hi, _ := idem.OperationIDScopeRange(idem.NewOperationID(now, zero)); lo != zero || hi[idem.ScopePrefixLen-1] != 0 || hi[idem.ScopePrefixLen] != 0xFF {
		t.Errorf("the zero scope's range is %x…%x", lo[:], hi[:])
	}

	legacy := "op_01KBX3Q0ZJ5Y4Z3W2V1T0S9R8Q"
	ids := []string{idem.NewOperationID(now.Add(time.Millisecond), scope), legacy,
		idem.NewOperationID(now, idem.ScopeHash{0xFF}), idem.NewOperationID(now.Add(-time.Hour), scope)}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if want := []string{ids[1], ids[3], ids[2], ids[0]}; !slices.Equal(sorted, want) {
		t.Errorf("IDs sort as %q, want %q (legacy first, then by time)", sorted, want)
	}
	if !idem.LegacyOperationID(legacy) {
		t.Errorf("%q is not a legacy ID", legacy)
	}
	for _, bad := range []string{legacy, "", "op_", id[:39], id + "0", "op_2" + id[4:], "pay" + id[3:],
		id[:14] + "a" + id[15:], id[:14] + "G" + id[15:], id[:30] + "U" + id[31:], id[:5] + "\x00" + id[6:]} {
		if _, _, ok := idem.OperationIDScopeRange(bad); ok {
			t.Errorf("OperationIDScopeRange(%q) = ok, want not an ID of the current layout", bad)
		}
	}
	for _, bad := range []string{id, "op_01KBX3Q0ZJ5Y4Z3W2V1T0S9R8", "op_01KBX3Q0ZJ5Y4Z3W2V1T0S9R8U", "xx_01KBX3Q0ZJ5Y4Z3W2V1T0S9R8Q"} {
		if idem.LegacyOperationID(bad) {
			t.Errorf("LegacyOperationID(%q) = true", bad)
		}
	}
}
