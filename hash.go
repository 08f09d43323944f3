package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// fieldHash is SHA-256 over an unambiguous encoding of a sequence of fields:
// a domain tag, then each field as its length (4 bytes, big-endian)
// followed by its bytes. No two different field sequences encode alike, so
// ("ab","c") and ("a","bc") never collide, and the domain tag keeps scope
// hashes and fingerprints apart.
//
// The encoding is gathered in buf, on the caller's stack, and hashed at
// once with sha256.Sum256, so that hashing a scope, an identity, a
// fingerprint or a small response allocates nothing; only fields that
// outgrow buf start a streaming hash, h. Nothing a method is given is kept
// or leaked (large inputs are copied), except by largeBytes.
type fieldHash struct {
	h   hash.Hash // nil while the fields fit in buf
	n   int
	buf [512]byte
}

func newFieldHash(domain string) fieldHash {
	var f fieldHash
	f.string(domain)
	return f
}

// stream starts the streaming hash with what buf holds.
func (f *fieldHash) stream() {
	f.h = sha256.New()
	f.h.Write(bytes.Clone(f.buf[:f.n]))
}

func (f *fieldHash) put(p []byte) {
	if f.h == nil {
		if f.n+len(p) <= len(f.buf) {
			f.n += copy(f.buf[f.n:], p)
			return
		}
		f.stream()
	}
	f.h.Write(bytes.Clone(p))
}

func (f *fieldHash) prefix(n int) {
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(n))
	f.put(l[:])
}

func (f *fieldHash) bytes(b []byte) {
	f.prefix(len(b))
	f.put(b)
}

// largeBytes is bytes for a field that may be large (a response body):
// past buf it is hashed where it lies rather than copied, so b leaks to
// the hash.
func (f *fieldHash) largeBytes(b []byte) {
	f.prefix(len(b))
	if f.h == nil {
		if f.n+len(b) <= len(f.buf) {
			f.n += copy(f.buf[f.n:], b)
			return
		}
		f.stream()
	}
	f.h.Write(b)
}

func (f *fieldHash) string(s string) {
	f.prefix(len(s))
	if f.h == nil {
		if f.n+len(s) <= len(f.buf) {
			f.n += copy(f.buf[f.n:], s)
			return
		}
		f.stream()
	}
	f.h.Write([]byte(s))
}

// count writes a list length; the list's fields follow it.
func (f *fieldHash) count(n int) { f.prefix(n) }

func (f *fieldHash) sum() (s [32]byte) {
	if f.h == nil {
		return sha256.Sum256(f.buf[:f.n])
	}
	copy(s[:], f.h.Sum(nil))
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
