package idem

import (
	"errors"
	"mime"
	"net/http"
	"strconv"
)

// DefaultMaxResponseBody caps a stored response body (64 KiB).
const DefaultMaxResponseBody = 64 << 10

// ErrResponseTooLarge is returned by NewResponse when the body exceeds the
// cap; the outcome must then not be recorded as a replayable response.
var ErrResponseTooLarge = errors.New("idem: response body exceeds the snapshot cap")

// ErrDigestMismatch means a stored response no longer matches the digest
// recorded with it; it must not be replayed.
var ErrDigestMismatch = errors.New("idem: stored response does not match its digest")

// Response is the snapshot of a response that replays return: status,
// media type, Location, business version (ETag) and body — and nothing
// else, so Date, Set-Cookie, trace and hop-by-hop headers can never be
// replayed. The zero value is not a valid snapshot.
type Response struct {
	Status    int
	MediaType string
	Location  string
	ETag      string
	Body      []byte
}

// NewResponse takes the snapshot of a response from its status, headers
// and body. maxBody <= 0 means DefaultMaxResponseBody. The body is copied.
func NewResponse(status int, h http.Header, body []byte, maxBody int) (Response, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxResponseBody
	}
	if len(body) > maxBody {
		return Response{}, ErrResponseTooLarge
	}
	mt := h.Get("Content-Type")
	if t, params, err := mime.ParseMediaType(mt); err == nil {
		mt = mime.FormatMediaType(t, params)
	}
	return Response{
		Status:    status,
		MediaType: mt,
		Location:  h.Get("Location"),
		ETag:      h.Get("ETag"),
		Body:      append([]byte(nil), body...),
	}, nil
}

// Digest is SHA-256 over the length-prefixed fields (status in decimal,
// media type, Location, ETag, body) under the domain tag
// "http.idempotency.v1/response". It is stored with the snapshot and
// checked before every replay.
func (r Response) Digest() [32]byte {
	h := newFieldHash(ContractVersion + "/response")
	var status [20]byte // the decimal status, without allocating
	h.bytes(strconv.AppendInt(status[:0], int64(r.Status), 10))
	h.string(r.MediaType)
	h.string(r.Location)
	h.string(r.ETag)
	h.largeBytes(r.Body)
	return h.sum()
}

// Verify returns ErrDigestMismatch unless r hashes to digest.
func (r Response) Verify(digest []byte) error {
	d := r.Digest()
	if len(digest) != len(d) || string(digest) != string(d[:]) {
		return ErrDigestMismatch
	}
	return nil
}
