package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemkit/idem/canon"
)

// Binding says which parts of a request an operation binds into its
// fingerprint and how its payload is canonicalised. The zero value binds
// the path, no query parameters, no headers, and reads the payload in
// canon.ModeJSON with the default limits. A Binding is a plain value, safe
// for concurrent use once built; do not change it while in use.
type Binding struct {
	// Canon is the payload canonicalisation (mode, schema, limits).
	Canon canon.Options
	// Query lists the query parameters that change the business effect;
	// all others are ignored. Names are case-sensitive.
	Query []string
	// Headers lists business headers (for example X-Api-Version) whose
	// values are bound. Names are case-insensitive.
	Headers []string
}

// Fingerprint is the hash of the business-relevant parts of a request:
// SHA-256 over the length-prefixed fields (method, canonical target, bound
// headers, media type, mode, schema revision, SHA-256 of the canonical
// payload) under the domain tag "http.idempotency.v1/fingerprint". The
// exact encoding is in docs/contract.md.
type Fingerprint [32]byte

// String returns the fingerprint in lower-case hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// FingerprintParts are the values a fingerprint was computed from, so a
// user can see why two requests differ. Payload is the canonical payload;
// it is never stored.
type FingerprintParts struct {
	Method         string   `json:"method"`
	Target         string   `json:"target"`
	Headers        []string `json:"headers"`
	MediaType      string   `json:"media_type"`
	Mode           string   `json:"mode"`
	SchemaRevision string   `json:"schema_revision"`
	PayloadSHA256  string   `json:"payload_sha256"`
	Payload        []byte   `json:"-"`
}

// Fingerprint canonicalises a request and returns its fingerprint and
// parts. u is the request URL whose path already holds the route's path
// parameters; h holds the request headers; body is the whole body (the
// caller reads it under b.Canon.MaxBytes). Payload refusals are *canon.Error (see
// CodeOf), among them UNSUPPORTED_MEDIA_TYPE for more than one
// Content-Type field line; a path with malformed percent-encoding (which net/http never
// delivers) is a plain error.
func (b Binding) Fingerprint(method string, u *url.URL, h http.Header, body []byte) (Fingerprint, FingerprintParts, error) {
	var ct string
	switch cts := h.Values("Content-Type"); len(cts) {
	case 0:
	case 1:
		ct = cts[0]
	default:
		// A component that reads the other line would see another
		// payload than the one fingerprinted.
		return Fingerprint{}, FingerprintParts{}, &canon.Error{Code: canon.CodeUnsupportedMediaType, Offset: -1,
			Reason: "more than one Content-Type field line"}
	}
	res, err := canon.Canonicalize(ct, body, b.Canon)
	if err != nil {
		return Fingerprint{}, FingerprintParts{}, err
	}
	target, err := CanonicalTarget(u, b.Query)
	if err != nil {
		return Fingerprint{}, FingerprintParts{}, err
	}
	p := FingerprintParts{
		Method:    method,
		Target:    target,
		Headers:   boundHeaders(h, b.Headers),
		MediaType: res.MediaType,
		Mode:      string(b.mode()),
		Payload:   res.Payload,
	}
	if p.Mode == string(canon.ModeSchema) {
		p.SchemaRevision = b.Canon.Schema.Revision
	}
	sum := sha256.Sum256(res.Payload)
	p.PayloadSHA256 = hex.EncodeToString(sum[:])
	return p.fingerprint(sum), p, nil
}

func (b Binding) mode() canon.Mode {
	if b.Canon.Mode == "" {
		return canon.ModeJSON
	}
	return b.Canon.Mode
}

func (p FingerprintParts) fingerprint(payloadSum [32]byte) Fingerprint {
	h := newFieldHash(ContractVersion + "/fingerprint")
	h.string(p.Method)
	h.string(p.Target)
	h.count(len(p.Headers))
	for _, hv := range p.Headers {
		h.string(hv)
	}
	h.string(p.MediaType)
	h.string(p.Mode)
	h.string(p.SchemaRevision)
	h.bytes(payloadSum[:])
	return Fingerprint(h.sum())
}

// boundHeaders returns "name: value" for each declared header, in the
// order of the lower-cased names; a header sent on several field lines is
// joined with ", ", and an absent header is written as "name" alone, so
// absent and empty differ.
func boundHeaders(h http.Header, names []string) []string {
	if len(names) == 0 {
		return nil
	}
	lower := make([]string, len(names))
	for i, n := range names {
		lower[i] = strings.ToLower(n)
	}
	slices.Sort(lower)
	lower = slices.Compact(lower)
	out := make([]string, 0, len(lower))
	for _, n := range lower {
		vs, ok := h[http.CanonicalHeaderKey(n)]
		line := n
		if ok {
			trimmed := make([]string, len(vs))
			for i, v := range vs {
				trimmed[i] = strings.Trim(v, " \t")
			}
			line += ": " + strings.Join(trimmed, ", ")
		}
		out = append(out, line)
	}
	return out
}

// CanonicalTarget returns the normalised path of u followed by the kept
// query parameters. Each path segment is percent-decoded and re-encoded
// with url.PathEscape, so two spellings of one decoded segment ("~" and
// "%7E", ";" and "%3B") are one target, as they are to net/http's router,
// while "%2F" inside a segment stays distinct from "/"; dot segments are
// removed and an empty path is written as "/". Only the query parameters named in keep
// survive, sorted by name, each name's values in the order sent, encoded
// with url.QueryEscape.
func CanonicalTarget(u *url.URL, keep []string) (string, error) {
	raw := u.EscapedPath()
	if !strings.HasPrefix(raw, "/") {
		raw = "/" + raw // so that ".." cannot remove a relative path's first segment
	}
	segs := strings.Split(raw, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		dec, err := url.PathUnescape(s)
		if err != nil {
			return "", fmt.Errorf("idem: malformed percent-encoding in the path: %w", err)
		}
		switch dec {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
			continue
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
			continue
		}
		out = append(out, url.PathEscape(dec))
	}
	path := strings.Join(out, "/")
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if len(keep) == 0 {
		return path, nil
	}
	q := u.Query()
	names := slices.Clone(keep)
	slices.Sort(names)
	names = slices.Compact(names)
	var b strings.Builder
	for _, n := range names {
		for _, v := range q[n] {
			if b.Len() == 0 {
				b.WriteByte('?')
			} else {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(n))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
		}
	}
	return path + b.String(), nil
}
