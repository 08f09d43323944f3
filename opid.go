package idem

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the Crockford base32 alphabet: no I, L, O, U, so IDs read
// aloud or retyped stay unambiguous, and its order matches byte order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// hexDigits are the upper-case hex digits: a subset of the Crockford
// alphabet, in the same order.
const hexDigits = "0123456789ABCDEF"

// The operation-ID layout v1 (docs/contract.md, "Operation IDs"):
//
//	op_ 1 TTTTTTTTTT SSSSSSSSSS RRRRRRRRRRRRRRRR
//
// "op_", the layout version "1", a 48-bit millisecond timestamp in 10
// Crockford characters, the first ScopePrefixLen bytes of the scope hash
// in 10 upper-case hex characters, and 80 random bits in 16 Crockford
// characters: OperationIDLen characters in all. The scope part lets a
// store find the record through its primary key (a range over scopes that
// share the prefix, then the full ID compared), so idem_operations needs
// no index on the operation ID; it is hex so that every database decodes
// it with a built-in function. The random part keeps the ID unguessable.
const (
	// OperationIDLen is the length of an operation ID of the current layout.
	OperationIDLen = 40
	// LegacyOperationIDLen is the length of an operation ID of the layout
	// before v1: "op_" and 26 Crockford characters (the ULID layout).
	LegacyOperationIDLen = 29
	// ScopePrefixLen is how many leading bytes of the scope hash an
	// operation ID carries: 40 bits, so a range over them holds about one
	// record even among a billion (2^30 / 2^40).
	ScopePrefixLen = 5

	opIDVersion   = '1'
	opIDScopeAt   = 3 + 1 + 10 // where the hex scope part starts
	opIDRandomAt  = opIDScopeAt + 2*ScopePrefixLen
	opIDRandomLen = 16
)

// NewOperationID returns a new server-generated operation ID for the
// operation of scope, in the layout above. IDs sort by creation time (to
// the millisecond), and every one sorts after every ID of the layout
// before (whose first character after "op_" is "0" until the year 10889).
// It never derives from the client's key beyond the 40-bit scope prefix,
// which is a hash. An ID that names no record (a plain execution's)
// passes the zero ScopeHash.
//
// Uniqueness: two records never share an ID without the unique index,
// by construction: a record's scope is its primary key, the ID carries a
// prefix of that scope, and two IDs of one millisecond and one 40-bit
// prefix still differ in 80 random bits (crypto/rand) but with
// probability 2^-80 per pair.
func NewOperationID(now time.Time, scope ScopeHash) string {
	out := make([]byte, OperationIDLen)
	copy(out, "op_")
	out[3] = opIDVersion
	ms := uint64(now.UnixMilli()) & (1<<48 - 1)
	for i := 9; i >= 0; i-- {
		out[4+i] = crockford[ms&31]
		ms >>= 5
	}
	for i, b := range scope[:ScopePrefixLen] {
		out[opIDScopeAt+2*i] = hexDigits[b>>4]
		out[opIDScopeAt+2*i+1] = hexDigits[b&15]
	}
	var r [10]byte
	rand.Read(r[:]) // crypto/rand.Read never fails
	hi, lo := uint64(binary.BigEndian.Uint16(r[:2])), binary.BigEndian.Uint64(r[2:])
	for i := opIDRandomLen - 1; i >= 0; i-- {
		out[opIDRandomAt+i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// OperationIDScopeRange returns the least and the greatest scope hash an
// operation ID of the current layout can belong to (its scope prefix
// followed by all zero, then all 0xFF bytes): the primary-key range a
// store reads to find it. ok is false for anything else — an ID of the
// legacy layout (LegacyOperationID) or a malformed string — which names
// no record of the current layout.
func OperationIDScopeRange(id string) (lo, hi ScopeHash, ok bool) {
	if len(id) != OperationIDLen || id[:3] != "op_" || id[3] != opIDVersion {
		return lo, hi, false
	}
	for i := 4; i < OperationIDLen; i++ {
		if !inCrockford(id[i]) {
			return lo, hi, false
		}
	}
	for i := range ScopePrefixLen {
		a, b := hexValue(id[opIDScopeAt+2*i]), hexValue(id[opIDScopeAt+2*i+1])
		if a < 0 || b < 0 {
			return lo, hi, false
		}
		lo[i] = byte(a<<4 | b)
	}
	hi = lo
	for i := ScopePrefixLen; i < len(hi); i++ {
		hi[i] = 0xFF
	}
	return lo, hi, true
}

// LegacyOperationID reports whether id has the layout before v1: "op_"
// and 26 Crockford characters (a ULID). Such IDs carry no scope; stores
// find them through a table of legacy IDs until their records retire.
func LegacyOperationID(id string) bool {
	if len(id) != LegacyOperationIDLen || id[:3] != "op_" {
		return false
	}
	for i := 3; i < len(id); i++ {
		if !inCrockford(id[i]) {
			return false
		}
	}
	return true
}

func inCrockford(c byte) bool {
	switch {
	case c >= '0' && c <= '9':
		return true
	case c < 'A' || c > 'Z':
		return false
	}
	return c != 'I' && c != 'L' && c != 'O' && c != 'U'
}

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
