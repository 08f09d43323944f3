package idem

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the Crockford base32 alphabet: no I, L, O, U, so IDs read
// aloud or retyped stay unambiguous, and its order matches byte order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewOperationID returns a new server-generated operation ID: "op_"
// followed by 26 Crockford base32 characters encoding a 48-bit millisecond
// timestamp and 80 random bits (the ULID layout), so IDs sort by creation
// time. It never derives from the client's key. Written here rather than
// imported: it is twenty lines and the layout is part of the contract.
func NewOperationID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	rand.Read(b[6:]) // crypto/rand.Read never fails
	// 128 bits as 26 characters of 5 bits, the first holding 3 bits.
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	out := make([]byte, 3+26)
	copy(out, "op_")
	for i := 25; i >= 0; i-- {
		out[3+i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}
