package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
)

// Target is the address of one server instance, which changes when the
// instance is restarted. Safe for concurrent use.
type Target struct{ url atomic.Pointer[string] }

// NewTarget returns a target at url ("http://127.0.0.1:8080"); "" means
// the instance is down.
func NewTarget(url string) *Target {
	t := &Target{}
	t.Set(url)
	return t
}

// Set changes the target's URL; "" marks it down.
func (t *Target) Set(url string) { t.url.Store(&url) }

// URL returns the current URL, "" while the instance is down.
func (t *Target) URL() string { return *t.url.Load() }

// Answer is one answer a request got.
type Answer struct {
	Status int
	// Code is the problem's code member, "" for a non-problem answer.
	Code idem.Code
	// Digest is idem.Response.Digest of the answer as received (status,
	// media type, Location, ETag, body), comparable with the digest of the
	// snapshot the registry stored.
	Digest      [32]byte
	OperationID string
	Replayed    bool
	// At is when the answer was received.
	At time.Time
}

// terminal reports whether a is a final answer of the contract for a
// payments.v1 request: a payment, or the stored AMOUNT_LIMIT refusal.
func (a Answer) terminal() bool {
	return a.Status == http.StatusCreated || a.Code == payments.CodeAmountLimit
}

// definite reports whether a settles a key of the transfers workload: a
// 2xx — the transfer (201), or the stored answer of a reconciliation
// (200 {"operation_id":…,"state":"SUCCEEDED","reconciled":true}) — or a
// stored 422 refusal — AMOUNT_LIMIT, the provider's decline — other than
// PAYLOAD_CONFLICT. 409 OUTCOME_UNKNOWN, and any 5xx, are not.
func (a Answer) definite() bool {
	return a.succeeded() || a.Status == http.StatusUnprocessableEntity && a.Code != idem.CodePayloadConflict
}

// succeeded reports whether a says the operation's effect happened: a 2xx.
func (a Answer) succeeded() bool { return a.Status >= 200 && a.Status <= 299 }

// KeyResult is what one key's requests got.
type KeyResult struct {
	// Done: the key's requests were all sent and answered or given up on;
	// false for keys an interrupted load never reached.
	Done bool
	// Answers are the terminal answers of the key's identical requests.
	Answers []Answer
	// FalseConflicts counts 422 PAYLOAD_CONFLICT answers to a payload
	// canonically identical to the key's.
	FalseConflicts int
	// Unknown counts 409 OUTCOME_UNKNOWN answers.
	Unknown int
	// Unanswered counts requests that got no terminal answer before
	// Config.KeyTimeout.
	Unanswered int
	// Unexpected lists answers the contract does not allow here.
	Unexpected []string
	// ConflictSent: the key's conflicting request was sent; ConflictCode
	// is the code it got ("" if none: it was accepted or unanswered).
	ConflictSent bool
	ConflictCode idem.Code
	// Start is when the key's first request was sent. Settled (transfers)
	// says a definite answer came, SettledAfter how long after Start the
	// first one did.
	Start        time.Time
	Settled      bool
	SettledAfter time.Duration
	// FirstUnknown (transfers) is when the key's first 409
	// OUTCOME_UNKNOWN answer came, LastUnknownSent when the last request
	// answered so was sent; zero if none was. The record was UNKNOWN
	// when the server read it for that last request, so it settled
	// later.
	FirstUnknown, LastUnknownSent time.Time
	// Late (Config.Retention) is the key's late retry, nil if it was not
	// late-settled (latesettle.go).
	Late *LateRetry
}

// LoadResult is the outcome of Load.
type LoadResult struct {
	Keys []KeyResult
	// Requests counts every HTTP request sent, re-sends included.
	Requests int64
	// Resends counts re-sent requests by reason: a contract code
	// (IN_PROGRESS, STORE_UNAVAILABLE, …) or "connection" for a transport
	// error (an instance down).
	Resends map[string]int64
	// ResentKeys counts the keys Config.Resend sent once more after the
	// load.
	ResentKeys int
	// Elapsed is the wall time of the load, the re-send after it
	// (Config.Resend) included.
	Elapsed time.Duration
	// Latency is the client-side latency of every exchange, waits included.
	Latency Histogram
}

// Load sends the plan through targets: cfg.keyWorkers() keys at a time,
// the Retries requests of one key at once, spread over the targets. A
// request that gets 409 IN_PROGRESS, 503, 429 or a transport error is
// re-sent (transport errors to the next target) until it gets a terminal
// answer or cfg.KeyTimeout passes. In the transfers workload (POST
// /v1/transfers) a request is also re-sent after 409 OUTCOME_UNKNOWN and
// any 503, with the same key, until a definite answer (Answer.definite)
// or until cfg.UnknownSLO after the key's first request, whichever of
// that and cfg.KeyTimeout comes first. Keys marked Conflict then get one
// request with a different payload. If midway is set it is called once,
// in its own goroutine, when half the planned requests were sent, while
// the load goes on; Load waits for it before returning. With
// cfg.Resend, every key with a terminal answer is then sent once more
// (resendAll). ctx cancels the load.
func Load(ctx context.Context, cfg Config, plan Plan, targets []*Target, midway func()) LoadResult {
	cfg = cfg.withDefaults()
	l := newLoader(cfg, plan, targets)
	defer l.client.CloseIdleConnections()
	planned := int64(len(plan.Keys) * plan.Retries)
	start := time.Now()
	stopProgress := l.progress(ctx, start, planned)

	keys := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var side sync.WaitGroup
	for range cfg.keyWorkers() {
		wg.Go(func() {
			for i := range keys {
				l.runKey(ctx, i)
				if midway != nil && l.planned.Load() >= planned/2 {
					once.Do(func() { side.Go(midway) })
				}
			}
		})
	}
feed:
	for i := range plan.Keys {
		select {
		case keys <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(keys)
	wg.Wait()
	side.Wait()
	resent := 0
	if cfg.Resend {
		resent = l.resendAll(ctx)
	}
	elapsed := time.Since(start)
	stopProgress()

	l.mu.Lock()
	defer l.mu.Unlock()
	return LoadResult{Keys: l.results, Requests: l.sent.Load(), Resends: l.resends, ResentKeys: resent, Elapsed: elapsed, Latency: snapshot(l.latency)}
}

// newLoader returns a loader of plan through targets; cfg has its
// defaults.
func newLoader(cfg Config, plan Plan, targets []*Target) *loader {
	return &loader{
		cfg:     cfg,
		plan:    plan,
		targets: targets,
		latency: newClientHistogram(),
		client: &http.Client{
			Timeout:   max(cfg.Wait, 0) + 60*time.Second,
			Transport: &http.Transport{MaxIdleConns: 4 * cfg.Concurrency, MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: 30 * time.Second},
		},
		results: make([]KeyResult, len(plan.Keys)),
		resends: map[string]int64{},
	}
}

type loader struct {
	cfg     Config
	plan    Plan
	targets []*Target
	client  *http.Client
	latency prometheus.Histogram
	sent    atomic.Int64 // every request
	planned atomic.Int64 // first sends of planned requests
	// resending: the load is over and resendAll runs; its requests are
	// not counted as planned.
	resending atomic.Bool
	done      atomic.Int64 // keys finished
	results   []KeyResult  // one per key, written by the key's worker only

	mu      sync.Mutex
	resends map[string]int64
}

// runKey sends key i's retries at once, then its conflicting request.
func (l *loader) runKey(ctx context.Context, i int) {
	k := l.plan.Keys[i]
	res := &l.results[i]
	res.Start = time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for j := range l.plan.Retries {
		wg.Go(func() {
			a, ok, note := l.request(ctx, k, res, &mu, (k.Index+j)%len(l.targets), k.Body(j))
			mu.Lock()
			defer mu.Unlock()
			l.record(res, a, ok, note)
		})
	}
	wg.Wait()
	l.lateRetry(ctx, k, res)
	if k.Conflict && ctx.Err() == nil {
		res.ConflictSent = true
		a, ok, note := l.request(ctx, k, res, &mu, (k.Index+l.plan.Retries)%len(l.targets), k.ConflictBody())
		switch {
		case ok && a.Code != "":
			res.ConflictCode = a.Code
		case ok:
			res.Unexpected = append(res.Unexpected, "different payload accepted: "+note)
		}
	}
	res.Done = true
	l.done.Add(1)
}

// record adds one request's outcome to the key's result. The caller
// serialises the calls for one key.
func (l *loader) record(res *KeyResult, a Answer, ok bool, note string) {
	if ok && l.cfg.transfers() && a.definite() {
		if after := a.At.Sub(res.Start); !res.Settled || after < res.SettledAfter {
			res.Settled, res.SettledAfter = true, after
		}
	}
	switch {
	case !ok:
		res.Unanswered++
	case a.terminal() || l.cfg.transfers() && a.definite():
		res.Answers = append(res.Answers, a)
	case a.Code == idem.CodePayloadConflict:
		res.FalseConflicts++
	case a.Code == idem.CodeOutcomeUnknown:
		res.Unknown++
	default:
		res.Unexpected = append(res.Unexpected, note)
	}
}

// resendAll sends every finished key with a terminal answer once more —
// its first retry's payload, to target Index mod the targets, re-sent
// like any request until a terminal answer or the key timeout — with
// cfg.keyWorkers() × cfg.Retries keys at a time, and records the
// answers. It returns the number of keys sent.
func (l *loader) resendAll(ctx context.Context) int {
	l.resending.Store(true)
	idx := make(chan int)
	var wg sync.WaitGroup
	var n atomic.Int64
	for range l.cfg.keyWorkers() * l.plan.Retries {
		wg.Go(func() {
			for i := range idx {
				k, res := l.plan.Keys[i], &l.results[i]
				a, ok, note := l.request(ctx, k, &KeyResult{Start: time.Now()}, nil, k.Index%len(l.targets), k.Body(0))
				l.record(res, a, ok, note)
				n.Add(1)
			}
		})
	}
	for i := range l.results {
		if !l.results[i].Done || len(l.results[i].Answers) == 0 || ctx.Err() != nil {
			continue
		}
		idx <- i
	}
	close(idx)
	wg.Wait()
	return int(n.Load())
}

// request sends one request, starting at target t, and re-sends it until
// it gets an answer that is not "try again". ok is false when none came
// before the key timeout (or, for transfers, the key's unknown SLO after
// res.Start, its first request) or ctx ended. note describes the answer.
// A 409 OUTCOME_UNKNOWN is noted in res.FirstUnknown and
// res.LastUnknownSent under mu (if mu is nil, res is the caller's alone).
func (l *loader) request(ctx context.Context, k Key, res *KeyResult, mu *sync.Mutex, t int, body string) (a Answer, ok bool, note string) {
	deadline := time.Now().Add(l.cfg.KeyTimeout)
	if slo := res.Start.Add(l.cfg.UnknownSLO); l.cfg.transfers() && slo.Before(deadline) {
		deadline = slo
	}
	first := !l.resending.Load() // the re-send after the load is not planned
	for ctx.Err() == nil && time.Now().Before(deadline) {
		url := l.targets[t].URL()
		if url == "" { // instance down: the next one
			t = (t + 1) % len(l.targets)
			sleep(ctx, time.Millisecond)
			continue
		}
		if first {
			l.planned.Add(1)
			first = false
		}
		sent := time.Now()
		a, note, retryAfter, err := l.exchange(ctx, url, k, body)
		if err != nil {
			l.resend("connection")
			t = (t + 1) % len(l.targets)
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		switch a.Code {
		case idem.CodeInProgress, idem.CodeStoreUnavailable, idem.CodeDraining, idem.CodeWriterFenced, idem.CodeKeyLimit, idem.CodeTenantMoved:
			l.resend(string(a.Code))
			sleep(ctx, retryAfter)
			continue
		}
		if l.cfg.transfers() && a.Code == idem.CodeOutcomeUnknown {
			noteUnknown(res, mu, sent, a.At)
		}
		if l.cfg.transfers() && (a.Code == idem.CodeOutcomeUnknown || a.Status == http.StatusServiceUnavailable) {
			l.resend(cmp.Or(string(a.Code), strconv.Itoa(a.Status)))
			// Sooner than Retry-After (1 s): a re-send is what settles
			// the key (the server re-sends its provider call with the
			// same key), and the run's length is the keys' settling.
			sleep(ctx, min(retryAfter, unknownResend))
			continue
		}
		return a, true, note
	}
	return Answer{}, false, ""
}

// exchange makes one HTTP request and reads its answer.
func (l *loader) exchange(ctx context.Context, url string, k Key, body string) (Answer, string, time.Duration, error) {
	path := "/v1/payments"
	if l.cfg.transfers() {
		path = "/v1/transfers"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		return Answer{}, "", 0, err
	}
	pr := l.plan.Principals[k.Principal]
	req.Header.Set("Authorization", "Bearer "+pr.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.KeyHeader, k.Key)
	if l.cfg.Wait > 0 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(max(1, int(l.cfg.Wait/time.Second))))
	}
	start := time.Now()
	l.sent.Add(1)
	resp, err := l.client.Do(req)
	if err != nil {
		return Answer{}, "", 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		return Answer{}, "", 0, err
	}
	a := Answer{
		Status:      resp.StatusCode,
		OperationID: resp.Header.Get(idemhttp.HeaderOperation),
		Replayed:    resp.Header.Get(idemhttp.HeaderReplayed) == "true",
		At:          time.Now(),
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p idemhttp.Problem
		if json.Unmarshal(b, &p) == nil {
			a.Code = p.Code
		}
	}
	if snap, err := idem.NewResponse(resp.StatusCode, resp.Header, b, len(b)+1); err == nil {
		a.Digest = snap.Digest()
	}
	note := fmt.Sprintf("%d %s %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	return a, note, retryDelay(resp.Header.Get("Retry-After")), nil
}

// unknownResend is the longest the transfers workload waits before
// re-sending after 409 OUTCOME_UNKNOWN or a 503.
const unknownResend = 200 * time.Millisecond

// retryDelay is a Retry-After in seconds, between 50 ms (absent or 0) and
// 1 s: the gate re-sends sooner than a polite client would, to keep the
// run short, but never in a tight loop.
func retryDelay(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n <= 0 {
		return 50 * time.Millisecond
	}
	return min(time.Duration(n)*time.Second, time.Second)
}

func (l *loader) resend(reason string) {
	l.mu.Lock()
	l.resends[reason]++
	l.mu.Unlock()
}

// progress prints a line a second to cfg.Progress until stopped.
func (l *loader) progress(ctx context.Context, start time.Time, planned int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sent := l.sent.Load()
			fmt.Fprintf(l.cfg.Progress, "gate: %5.0fs  %d/%d planned requests sent, %d in all (%d/s), %d/%d keys done\n",
				time.Since(start).Seconds(), l.planned.Load(), planned, sent, sent-last, l.done.Load(), len(l.plan.Keys))
			last = sent
		}
	}()
	return func() { cancel(); <-done }
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
