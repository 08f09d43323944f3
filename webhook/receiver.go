package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// The codes of a Receiver's refusals besides the contract's
// (docs/webhooks.md); each is answered 401 with problem+json, and the
// sender should not retry the same bytes.
const (
	// CodeUnsigned: the Standard Webhooks headers are missing or malformed.
	CodeUnsigned idem.Code = "WEBHOOK_UNSIGNED"
	// CodeTimestampInvalid: webhook-timestamp is outside the tolerance.
	CodeTimestampInvalid idem.Code = "WEBHOOK_TIMESTAMP_INVALID"
	// CodeSignatureInvalid: no signature matches any of the secrets.
	CodeSignatureInvalid idem.Code = "WEBHOOK_SIGNATURE_INVALID"
)

// DefaultMaxBody bounds a delivery's body when Config.MaxBody is 0: 1 MiB.
const DefaultMaxBody = 1 << 20

// Config is a Receiver's.
type Config struct {
	// Store is the registry the deliveries are recorded in, beside the
	// receiver's business tables. Required.
	Store registry.Store
	// Operation names what the deliveries do (Name, APIRevision; the
	// rest as for idemhttp). A zero KeyPolicy accepts any webhook-id of
	// printable ASCII up to idem.MaxKeyLength (the sender chooses them,
	// and the signature covers them); a zero Binding fingerprints the
	// body's exact bytes (canon.ModeRaw): a re-sent delivery carries the
	// same bytes, so another body under the same webhook-id is refused
	// 422 PAYLOAD_CONFLICT.
	Operation idemhttp.Operation
	// Verifier checks the signatures. Required.
	Verifier *Verifier
	// Sender is the caller every delivery is recorded for: one sender's
	// webhook-ids never meet another's (their scopes differ). Required:
	// at least a Principal. Mount one Receiver per sender: two senders'
	// secrets in one Verifier would share this scope, and their ids
	// could collide.
	Sender idem.Identity
	// Options are the middleware's (idemhttp.Options).
	Options idemhttp.Options
	// MaxBody bounds a body; 0 means DefaultMaxBody. A longer one is
	// refused 413 BODY_TOO_LARGE before anything is recorded.
	MaxBody int
}

// Receiver answers each signed delivery of one sender once: the first
// delivery of a webhook-id runs the handler, whose writes (through
// idemhttp.Tx or idemhttp.SQLTx) commit in the same transaction as the
// record of its answer; every later delivery of that id — a sender's
// retry, a re-send after an outage — gets the stored answer, and the
// handler does not run again. A delivery that is unsigned, stale or
// forged is refused 401 before anything is recorded. Safe for concurrent
// use.
type Receiver struct {
	verifier *Verifier
	mw       *idemhttp.Middleware
	maxBody  int
}

// New returns the Receiver of cfg; ctx governs the Store's checks that
// idemhttp.New makes.
func New(ctx context.Context, cfg Config) (*Receiver, error) {
	switch {
	case cfg.Store == nil || cfg.Verifier == nil:
		return nil, errors.New("webhook: New needs a Store and a Verifier")
	case len(cfg.Verifier.Secrets) == 0:
		return nil, errors.New("webhook: the Verifier has no secret")
	case cfg.Sender.Principal == "":
		return nil, errors.New("webhook: the Sender needs a Principal")
	}
	op := cfg.Operation
	if op.KeyPolicy == (idem.KeyPolicy{}) {
		op.KeyPolicy = idem.KeyPolicy{MinLength: 1}
	}
	if op.Binding.Canon.Mode == "" {
		op.Binding.Canon.Mode = canon.ModeRaw
	}
	sender := cfg.Sender
	mw, err := idemhttp.New(ctx, cfg.Store, op, func(*http.Request) (idem.Identity, error) { return sender, nil }, cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	maxBody := cfg.MaxBody
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &Receiver{verifier: cfg.Verifier, mw: mw, maxBody: maxBody}, nil
}

// Handler returns next wrapped: the body is read (at most MaxBody bytes)
// and its signature verified, then the delivery goes through the
// registry with its webhook-id as the idempotency key (any
// Idempotency-Key the sender sent is replaced: the signature does not
// cover it). next writes the answer the sender gets, now and on every
// re-send: a 2xx acknowledges the event.
func (rc *Receiver) Handler(next http.Handler) http.Handler {
	inner := rc.mw.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, int64(rc.maxBody)+1))
		if err != nil {
			idemhttp.WriteProblem(w, idem.CodeMalformedRequest, "the body could not be read; send it again")
			return
		}
		if len(body) > rc.maxBody {
			idemhttp.WriteProblem(w, idem.CodeBodyTooLarge, fmt.Sprintf("the body is larger than %d bytes", rc.maxBody))
			return
		}
		id, err := rc.verifier.Verify(r.Header, body)
		if err != nil {
			code := CodeSignatureInvalid
			switch {
			case errors.Is(err, ErrUnsigned):
				code = CodeUnsigned
			case errors.Is(err, ErrTimestamp):
				code = CodeTimestampInvalid
			}
			idemhttp.Problem{Status: http.StatusUnauthorized, Code: code, Detail: err.Error()}.Write(w)
			return
		}
		r.Header.Set(idem.KeyHeader, idem.QuoteKey(id))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		inner.ServeHTTP(w, r)
	})
}
