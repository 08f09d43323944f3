package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/example/payments"
)

// exchange is one request and its answer as recorded in a history.
type exchange struct {
	Seq    int     `json:"seq"`
	Server string  `json:"server"`
	Rev    string  `json:"rev"`
	Start  float64 `json:"start"` // seconds since the run began
	End    float64 `json:"end"`
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Token  string  `json:"token,omitempty"`
	Key    string  `json:"key,omitempty"` // as sent; "" for none
	// Scope labels the idempotency scope the request belongs to
	// (token, operation, API revision and the key's value); "" when the
	// request has no single key.
	Scope       string              `json:"scope,omitempty"`
	ReqHeader   map[string][]string `json:"req_header,omitempty"`
	ReqBody     string              `json:"req_body,omitempty"`
	Fingerprint string              `json:"fingerprint,omitempty"` // hex; "" if the body is refused
	Status      int                 `json:"status,omitempty"`
	Header      map[string]string   `json:"header,omitempty"` // the headers of interest
	Body        string              `json:"body,omitempty"`
	Digest      string              `json:"digest,omitempty"` // SHA-256 of the body, hex
	Code        string              `json:"code,omitempty"`   // a problem's code
	Err         string              `json:"err,omitempty"`    // transport error
}

// headersOfInterest are the response headers a history keeps.
var headersOfInterest = []string{"Content-Type", "Location", "ETag", "Idempotency-Contract", "Idempotency-Operation",
	"Idempotent-Replayed", "Retry-After", "Link", "Preference-Applied"}

func (e exchange) op() string       { return e.Header["Idempotency-Operation"] }
func (e exchange) replayed() bool   { return e.Header["Idempotent-Replayed"] == "true" }
func (e exchange) idempotent() bool { return e.Method == http.MethodPost && e.Scope != "" }

// terminal reports whether the answer carries an operation's terminal
// outcome (executed or replayed): a 2xx, or a stored deterministic
// refusal (AMOUNT_LIMIT, TRANSFER_DECLINED).
func (e exchange) terminal() bool {
	return e.Err == "" && e.op() != "" && (e.Status/100 == 2 || e.Code == string(payments.CodeAmountLimit) ||
		e.Code == string(payments.CodeTransferDeclined))
}

// recorder is a history: every exchange of a run, in the order the
// requests were sent. Safe for concurrent use.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	all   []exchange
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.all...)
}

// do sends one request through s and records it with its answer.
func (f *faultRun) do(s *server, method, path, token string, header http.Header, body string) (reply, error) {
	e := exchange{Server: s.name, Rev: s.rev, Method: method, Path: path, Token: token, ReqBody: body}
	if e.Rev == "" {
		e.Rev = "v1"
	}
	if keys := header.Values("Idempotency-Key"); len(keys) == 1 {
		e.Key = keys[0]
		e.Scope = token + "|" + path + "|" + e.Rev + "|" + strings.Trim(keys[0], `"`)
	}
	if len(header) > 0 {
		e.ReqHeader = header
	}
	if method == http.MethodPost && body != "" {
		e.Fingerprint = fingerprintOf(path, header, body)
	}
	f.hist.mu.Lock()
	e.Seq = len(f.hist.all)
	f.hist.all = append(f.hist.all, exchange{}) // the slot, filled below
	f.hist.mu.Unlock()
	e.Start = time.Since(f.hist.start).Seconds()

	r, err := s.send(method, path, token, header, body)

	e.End = time.Since(f.hist.start).Seconds()
	if err != nil {
		e.Err = err.Error()
	} else {
		e.Status, e.Body = r.status, string(r.body)
		sum := sha256.Sum256(r.body)
		e.Digest = hex.EncodeToString(sum[:])
		e.Header = map[string]string{}
		for _, h := range headersOfInterest {
			if v := r.header.Get(h); v != "" {
				e.Header[h] = v
			}
		}
		var p problem
		if strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(r.body, &p) == nil {
			e.Code = p.Code
		}
	}
	f.hist.mu.Lock()
	f.hist.all[e.Seq] = e
	f.hist.mu.Unlock()
	return r, err
}

// post sends POST path with an Idempotency-Key (and extra header lines
// as name, value pairs) and records it.
func (f *faultRun) post(s *server, path, token, key, body string, kv ...string) (reply, error) {
	return f.do(s, http.MethodPost, path, token, postHeader(key, kv...), body)
}

// mustPost is post for requests that must get an answer.
func (f *faultRun) mustPost(s *server, path, token, key, body string, kv ...string) reply {
	f.t.Helper()
	r, err := f.post(s, path, token, key, body, kv...)
	if err != nil {
		f.t.Fatalf("POST %s (key %s) to %s: %v", path, key, s.name, err)
	}
	return r
}

// postUntil sends the request again while it fails closed (503
// STORE_UNAVAILABLE, as a loaded machine may answer) until want accepts
// the answer, for up to awaitTimeout, and returns that answer.
func (f *faultRun) postUntil(s *server, path, token, key, body string, want func(reply) bool) reply {
	f.t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for {
		r := f.mustPost(s, path, token, key, body)
		if want(r) {
			return r
		}
		if problemErr(r, http.StatusServiceUnavailable, string(idem.CodeStoreUnavailable)) != "" || time.Now().After(deadline) {
			f.t.Fatalf("POST %s (key %s) to %s: %v %v", path, key, s.name, r, r.header)
		}
	}
}

// fingerprintOf computes the request's fingerprint as the reference
// service does (the payments.v1 schema binding of both idempotent
// routes), or "" when the body is refused.
func fingerprintOf(path string, header http.Header, body string) string {
	h := http.Header{"Content-Type": {"application/json"}}
	if ct := header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	binding := idem.Binding{Canon: canon.Options{Mode: canon.ModeSchema, Schema: payments.Schema()}}
	fp, _, err := binding.Fingerprint(http.MethodPost, &url.URL{Path: path}, h, []byte(body))
	if err != nil {
		return ""
	}
	return hex.EncodeToString(fp[:])
}
