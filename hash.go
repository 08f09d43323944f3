package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// fieldHash is SHA-256 over an unambiguous encoding of a sequence of fields:
// a domain tag, then each field as its length (4 bytes, big-endian)
// followed by its bytes. No two different field sequences encode alike, so
// ("ab","c") and ("a","bc") never collide, and the domain tag keeps scope
// hashes and fingerprints apart.
type fieldHash struct {
	h   hash.Hash
	len [4]byte
}

func newFieldHash(domain string) *fieldHash {
	f := &fieldHash{h: sha256.New()}
	f.string(domain)
	return f
}

func (f *fieldHash) bytes(b []byte) {
	binary.BigEndian.PutUint32(f.len[:], uint32(len(b)))
	f.h.Write(f.len[:])
	f.h.Write(b)
}

func (f *fieldHash) string(s string) {
	binary.BigEndian.PutUint32(f.len[:], uint32(len(s)))
	f.h.Write(f.len[:])
	f.h.Write([]byte(s))
}

// count writes a list length; the list's fields follow it.
func (f *fieldHash) count(n int) {
	binary.BigEndian.PutUint32(f.len[:], uint32(n))
	f.h.Write(f.len[:])
}

func (f *fieldHash) sum() (s [32]byte) {
	f.h.Sum(s[:0])
	return s
}

// HashStrings is SHA-256 over the encoding that scopes and fingerprints
// use: the domain tag, then each field, each as its length (4 bytes,
// big-endian) followed by its bytes. No two different (domain, fields)
// sequences encode alike. For identifiers derived from others, such as
// registry.DownstreamKey.
func HashStrings(domain string, fields ...string) [32]byte {
	f := newFieldHash(domain)
	for _, s := range fields {
		f.string(s)
	}
	return f.sum()
}
