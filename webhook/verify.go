package webhook

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/outbox"
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock, either way, when Verifier.Tolerance is 0: five
// minutes, as Standard Webhooks recommends.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify, for callers to branch on with errors.Is. Each
// Receiver answers them 401 with a code of its own (CodeUnsigned,
// CodeTimestampInvalid, CodeSignatureInvalid).
var (
	// ErrUnsigned: webhook-id, webhook-timestamp or webhook-signature is
	// missing, repeated, or not of the form Standard Webhooks gives.
	ErrUnsigned = errors.New("webhook: the request is not signed: webhook-id, webhook-timestamp and webhook-signature are required, once each")
	// ErrTimestamp: webhook-timestamp is further from the receiver's clock
	// than the tolerance: an old delivery replayed, or a clock far off.
	ErrTimestamp = errors.New("webhook: the webhook-timestamp is outside the tolerance")
	// ErrSignature: no v1 signature of the header matches the id,
	// timestamp and body under any of the secrets.
	ErrSignature = errors.New("webhook: no signature matches")
)

// Verifier checks the Standard Webhooks signature of an incoming
// delivery: webhook-signature holds one or more space-separated
// "v1,<base64 of HMAC-SHA256(secret, id.timestamp.body)>" (other
// versions are ignored), and one of them must match under one of Secrets;
// webhook-timestamp must be within Tolerance of Now. Set the fields before
// the first Verify and do not change them; safe for concurrent use.
type Verifier struct {
	// Secrets are the signing keys the sender may use (outbox.ParseSecret
	// reads "whsec_…"); more than one during a rotation: the new key and
	// the old until the sender has switched. Required.
	Secrets [][]byte
	// Tolerance bounds |Now − webhook-timestamp|; 0 or less means
	// DefaultTolerance.
	Tolerance time.Duration
	// Now is the receiver's clock; nil means time.Now.
	Now func() time.Time
}

// Verify checks the delivery whose headers are h and whose body is body,
// byte for byte as received, and returns its webhook-id. The error is
// ErrUnsigned, ErrTimestamp or ErrSignature, wrapped with details.
func (v *Verifier) Verify(h http.Header, body []byte) (id string, err error) {
	ids, tss, sigs := h.Values("webhook-id"), h.Values("webhook-timestamp"), h.Values("webhook-signature")
	if len(ids) != 1 || len(tss) != 1 || len(sigs) != 1 || ids[0] == "" {
		return "", ErrUnsigned
	}
	id = ids[0]
	ts, err := strconv.ParseInt(strings.TrimSpace(tss[0]), 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrUnsigned, clip(tss[0]))
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tolerance := v.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if skew := now().Sub(time.Unix(ts, 0)); skew > tolerance || skew < -tolerance {
		return "", fmt.Errorf("%w: it is %v from the receiver's clock, the tolerance %v", ErrTimestamp, skew.Round(time.Second), tolerance)
	}
	for _, secret := range v.Secrets {
		want := outbox.Sign(secret, id, ts, body)
		for _, got := range strings.Fields(sigs[0]) {
			if strings.HasPrefix(got, "v1,") && hmac.Equal([]byte(got), []byte(want)) {
				return id, nil
			}
		}
	}
	return "", ErrSignature
}

// clip bounds a header value quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
