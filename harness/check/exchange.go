package check

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"
)

// maxAnswer bounds how much of an answer's body the checker reads.
const maxAnswer = 1 << 20

// exchange is one request the checker sent and what came back.
type exchange struct {
	Status   int
	Header   http.Header
	Body     []byte
	Err      error     // the request failed: no answer
	Sent     time.Time // when the request was handed to the client
	Answered time.Time // when the answer was read or the request failed
}

func (e exchange) latency() time.Duration { return e.Answered.Sub(e.Sent) }

// accepted reports a 2xx answer.
func (e exchange) accepted() bool { return e.Err == nil && e.Status >= 200 && e.Status < 300 }

// refused reports a 4xx answer.
func (e exchange) refused() bool { return e.Err == nil && e.Status >= 400 && e.Status < 500 }

// retryLater reports an answer that asks the client to come back: the
// request was not (yet) executed for it.
func (e exchange) retryLater() bool {
	if e.Err != nil {
		return false
	}
	switch e.Status {
	case http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// statusText is the answer's status with the problem code, if any
// ("409 IN_PROGRESS"), or "error".
func (e exchange) statusText() string {
	if e.Err != nil {
		return "error"
	}
	if c := problemCode(e.Body); c != "" {
		return strconv.Itoa(e.Status) + " " + c
	}
	return strconv.Itoa(e.Status)
}

// String describes the answer for evidence: status and the start of the
// body, or the error.
func (e exchange) String() string {
	if e.Err != nil {
		return "error: " + e.Err.Error()
	}
	return fmt.Sprintf("%d %s", e.Status, excerpt(e.Body))
}

// excerpt is the start of b, quoted, for messages.
func excerpt(b []byte) string {
	const max = 160
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// problemCode is the "code" member of a JSON object body, or "".
func problemCode(b []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(b, &p) != nil || len(p.Code) > 64 {
		return ""
	}
	return p.Code
}

// send sends one request with the idempotency key key (none when key is
// ""), the body and the headers cred. wrote, if not nil, is called once the request is written
// (possibly more than once if the client retries it on a fresh
// connection). ctx governs the request.
func (r *runner) send(ctx context.Context, key string, body []byte, cred http.Header, wrote func()) exchange {
	if wrote != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { wrote() },
		})
	}
	e := exchange{Sent: time.Now()}
	defer r.requests.Add(1)
	req, err := http.NewRequestWithContext(ctx, r.cfg.Method, r.cfg.URL, bytes.NewReader(body))
	if err != nil {
		e.Err, e.Answered = err, time.Now()
		return e
	}
	req.Header = cred.Clone() // never nil: see Config.withDefaults
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(r.cfg.KeyHeader, key)
	}
	resp, err := r.cfg.Client.Do(req)
	if err == nil {
		e.Status, e.Header = resp.StatusCode, resp.Header
		e.Body, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
	}
	e.Err, e.Answered = err, time.Now()
	return e
}

// Bounds of settle.
const (
	settleAttempts = 12
	settleFirstGap = 25 * time.Millisecond
	settleMaxGap   = time.Second
)

// settle sends the request again until the answer no longer asks to
// retry later (see exchange.retryLater), waiting between attempts as
// Retry-After says or with a doubling gap, each wait capped at
// settleMaxGap, at most settleAttempts times. It is what a patient client
// does to learn the outcome of a key. ctx governs the requests and waits.
func (r *runner) settle(ctx context.Context, key string, body []byte, cred http.Header) exchange {
	gap := settleFirstGap
	for i := 1; ; i++ {
		e := r.send(ctx, key, body, cred, nil)
		if !e.retryLater() || i == settleAttempts {
			return e
		}
		wait := gap
		if s, err := strconv.Atoi(e.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = time.Duration(s) * time.Second
		}
		t := time.NewTimer(min(wait, settleMaxGap))
		select {
		case <-ctx.Done():
			t.Stop()
			return e
		case <-t.C:
		}
		gap *= 2
	}
}

// resource names the resource a 2xx answer stands for: the IDField member
// of its body, else its Location, else the digest of its body.
func (r *runner) resource(e exchange) string {
	if f := r.cfg.IDField; f != "" {
		if v, ok := member(e.Body, f); ok {
			return f + "=" + v
		}
	} else if loc := e.Header.Get("Location"); loc != "" {
		return "Location " + loc
	}
	sum := sha256.Sum256(e.Body)
	return "body sha256:" + hex.EncodeToString(sum[:8])
}

// member returns the text of the string or number at the dotted path in
// the JSON object b.
func member(b []byte, path string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for name := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[name]; !ok {
			return "", false
		}
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}
