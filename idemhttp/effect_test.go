package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// bank is a downstream system with the demo provider's contract, served
// over real HTTP (the Downstream is payments.ProviderClient) and steered
// by its mode:
//
//	ok          POST /transfers executes the key once and answers 201 with
//	            the transfer; a repeat of the key answers the same bytes
//	fail        POST answers 503 PROVIDER_FAILURE, executing nothing
//	fail-after  POST executes the key, then answers 503 (the answer is lost)
//	decline     POST answers 422 DECLINED, executing nothing, for good
//	hold        the first POST is held (held is closed) until release is
//	            closed, then proceeds as ok; later POSTs proceed as ok
//
// GET /transfers/{key} answers 200 with the transfer the key executed, or
// 404.
type bank struct {
	mu      sync.Mutex
	mode    string
	done    map[string][]byte // key → the transfer's JSON
	keys    []string          // Idempotency-Key of every POST, in order
	bodies  [][]byte          // body of every POST, in order
	traces  []string          // "METHOD traceparent" of every call, in order
	posts   atomic.Int32
	gets    atomic.Int32
	holding atomic.Bool
	held    chan struct{}
	release chan struct{}
}

const bankDeclined = `{"code":"DECLINED","detail":"refused for good"}`

func newBank(t *testing.T) (*bank, string) {
	b := &bank{mode: "ok", done: map[string][]byte{}, held: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv.URL
}

func (b *bank) setMode(m string) {
	b.mu.Lock()
	b.mode = m
	b.mu.Unlock()
}

func (b *bank) executed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.done)
}

func (b *bank) calls() (posts, gets int32) { return b.posts.Load(), b.gets.Load() }

func (b *bank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b.mu.Lock()
	b.traces = append(b.traces, r.Method+" "+r.Header.Get("Traceparent"))
	b.mu.Unlock()
	if r.Method == http.MethodGet {
		b.gets.Add(1)
		b.mu.Lock()
		tr, ok := b.done[strings.TrimPrefix(r.URL.Path, "/transfers/")]
		b.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"code":"NOT_FOUND"}`)
			return
		}
		w.Write(tr)
		return
	}
	b.posts.Add(1)
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.keys = append(b.keys, key)
	b.bodies = append(b.bodies, body)
	mode := b.mode
	b.mu.Unlock()
	if mode == "hold" && b.holding.CompareAndSwap(false, true) {
		close(b.held)
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
	}
	switch mode {
	case "fail":
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":"PROVIDER_FAILURE"}`)
		return
	case "decline":
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, bankDeclined)
		return
	}
	b.mu.Lock()
	tr, ok := b.done[key]
	if !ok {
		tr = []byte(fmt.Sprintf(`{"id":"h-%d","key":%q,"status":"executed"}`, len(b.done)+1, key))
		b.done[key] = tr
	}
	b.mu.Unlock()
	if mode == "fail-after" {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":"PROVIDER_FAILURE"}`)
		return
	}
	w.WriteHeader(http.StatusCreated)
	w.Write(tr)
}

// renderThing is the operation's Renderer: 201 with the thing and the
// downstream handle and a thing.sent message carrying the downstream's
// answer when the effect succeeded; 422 SEND_DECLINED and thing.declined
// when it was declined; a reconciled record (UNKNOWN) also gets
// thing.settled.
func renderThing(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
	if len(effs) != 1 || effs[0].Name != "send" {
		return registry.Outcome{}, fmt.Errorf("render %s: effects %+v", rec.OperationID, effs)
	}
	e := effs[0]
	var out registry.Outcome
	switch e.Result {
	case registry.EffectSucceeded:
		out = registry.Outcome{State: idem.StateSucceeded,
			Response: idem.Response{Status: http.StatusCreated, MediaType: "application/json", Location: "/things/" + rec.OperationID,
				Body: thingBody(rec.OperationID, e.Handle)},
			Outbox: []registry.Message{{Topic: "thing.sent", Payload: e.Answer}}}
	case registry.EffectFailed:
		out = registry.Outcome{State: idem.StateFailedFinal,
			Response: idem.Response{Status: http.StatusUnprocessableEntity, MediaType: "application/problem+json", Body: []byte(`{"code":"SEND_DECLINED"}`)},
			Outbox:   []registry.Message{{Topic: "thing.declined", Payload: e.Answer}}}
	default:
		return registry.Outcome{}, fmt.Errorf("render %s: not settled", rec.OperationID)
	}
	if rec.State == idem.StateUnknown {
		out.Outbox = append(out.Outbox, registry.Message{Topic: "thing.settled", Payload: []byte(rec.OperationID)})
	}
	return out, nil
}

// thingBody is the body renderThing renders for an executed effect.
func thingBody(opID, handle string) []byte {
	return []byte(`{"thing":"` + opID + `","handle":"` + handle + `"}`)
}

// thingRequest is what the handler sends downstream for operation opID.
func thingRequest(opID string) []byte {
	return []byte(`{"amount":"1.00","reference":"` + opID + `"}`)
}

// effBench is an effect-bearing operation on a real store, served over
// real HTTP, whose downstream is a bank. The store's clock is the real one
// shifted by offset. Its handler does what the request's X-Effect header
// says (every mode first checks that there is no business transaction):
//
//	send      Effect "send" with thingRequest; after an unknown outcome a
//	          second Effect call (which must call nothing); then 200
//	          "handler's own" (discarded once an effect began)
//	twice     two Effect "send" calls, which must return the same attempt
//	late500   Effect "send", then 500
//	plain     no effect, 201 "plain"
//	declared  no effect, 422 (a declared final status)
//	declared-outbox  no effect, an outbox message, 422
//	none500   no effect, 500
//	block     reports its operation ID on started, waits for release, 201
//	gated     reports its operation ID on started, waits for its gate
//	          (X-Gate), then as send without the second call
//
// What each Effect call returned goes to results.
type effBench struct {
	store   registry.Store
	srv     *httptest.Server
	bank    *bank
	offset  atomic.Int64 // of the store's clock, in nanoseconds
	runs    atomic.Int32 // handler executions
	results chan string
	started chan string
	release chan struct{}
	gates   map[string]chan struct{} // of the "gated" mode; set before serving
	mw      *idemhttp.Middleware     // as it serves
}

// shape, if given, is applied to the middleware before it serves.
func newEffBench(t *testing.T, dsn string, shape ...func(*idemhttp.Middleware)) *effBench {
	t.Helper()
	b := &effBench{results: make(chan string, 100), started: make(chan string, 10), release: make(chan struct{})}
	store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time {
		return time.Now().Add(time.Duration(b.offset.Load()))
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	b.store = store
	var url string
	b.bank, url = newBank(t)
	mw := &idemhttp.Middleware{
		Store:         store,
		MonitorPrefix: "/v1/operations/",
		Operation: idemhttp.Operation{Name: "things.send", APIRevision: "v1", FinalStatuses: []int{422},
			Effects: &effect.Operation{
				Downstreams: map[string]effect.Downstream{"send": &payments.ProviderClient{BaseURL: url}},
				Render:      renderThing,
			}},
		Identity: func(*http.Request) (idem.Identity, error) {
			return idem.Identity{Tenant: "t", Principal: "p"}, nil
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, f := range shape {
		f(mw)
	}
	b.mw = mw
	b.srv = httptest.NewServer(mw.Handler(http.HandlerFunc(b.serve)))
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
	})
	return b
}

// outcomeOf names what Effect returned.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, idemhttp.ErrOutcomeUnknown):
		return "unknown"
	case errors.Is(err, idemhttp.ErrEffectDeclined):
		return "declined"
	case errors.Is(err, idemhttp.ErrScopeTaken):
		return "scope taken"
	}
	return "error: " + err.Error()
}

func (b *effBench) serve(w http.ResponseWriter, r *http.Request) {
	b.runs.Add(1)
	ctx := r.Context()
	if idemhttp.Tx(ctx) != nil {
		http.Error(w, "a business transaction", http.StatusInternalServerError)
		return
	}
	op := idemhttp.OperationID(ctx)
	switch r.Header.Get("X-Effect") {
	case "send":
		eff, err := idemhttp.Effect(ctx, "send", thingRequest(op))
		res := outcomeOf(err)
		if err == nil && (eff.DownstreamKey != registry.DownstreamKey(op, "send") || eff.Result != registry.EffectSucceeded || eff.Handle == "") {
			res = fmt.Sprintf("bad attempt %+v", eff)
		}
		if errors.Is(err, idemhttp.ErrOutcomeUnknown) {
			// Every later call of the execution calls nothing.
			_, err := idemhttp.Effect(ctx, "send", thingRequest(op))
			res += " then " + outcomeOf(err)
		}
		b.results <- res
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "handler's own")
	case "twice":
		e1, err1 := idemhttp.Effect(ctx, "send", thingRequest(op))
		e2, err2 := idemhttp.Effect(ctx, "send", thingRequest(op))
		res := outcomeOf(err1) + " " + outcomeOf(err2)
		if e1.DownstreamKey != e2.DownstreamKey || e1.Handle != e2.Handle || e1.Result != e2.Result || !bytes.Equal(e1.Answer, e2.Answer) {
			res = fmt.Sprintf("different attempts %+v %+v", e1, e2)
		}
		b.results <- res
		w.WriteHeader(http.StatusAccepted)
	case "late500":
		_, err := idemhttp.Effect(ctx, "send", thingRequest(op))
		b.results <- outcomeOf(err)
		w.WriteHeader(http.StatusInternalServerError)
	case "plain":
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "plain")
	case "declared", "declared-outbox":
		if r.Header.Get("X-Effect") == "declared-outbox" {
			idemhttp.AddOutbox(ctx, registry.Message{Topic: "t", Payload: []byte("m")})
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, "declared")
	case "gated":
		// Reports its operation ID, waits for its gate (X-Gate, in
		// gates), then sends as "send" does and reports what Effect
		// returned.
		b.started <- op
		select {
		case <-b.gates[r.Header.Get("X-Gate")]:
		case <-ctx.Done():
		}
		_, err := idemhttp.Effect(ctx, "send", thingRequest(op))
		b.results <- outcomeOf(err)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "handler's own")
	case "block":
		b.started <- op
		select {
		case <-b.release:
		case <-ctx.Done():
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "first")
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// effResp is a response as the client got it.
type effResp struct {
	status int
	header http.Header
	body   []byte
}

func (r effResp) op() string       { return r.header.Get(idemhttp.HeaderOperation) }
func (r effResp) replayed() bool   { return r.header.Get(idemhttp.HeaderReplayed) == "true" }
func (r effResp) code() idem.Code  { return problemCode(r.body) }
func (r effResp) String() string   { return fmt.Sprintf("%d %v %s", r.status, r.header, r.body) }
func (b *effBench) result() string { return <-b.results }

func (b *effBench) post(t *testing.T, key, mode string) effResp {
	t.Helper()
	r, err := b.do(key, mode)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// async posts in a goroutine; the response (status -1 on a transport
// error) arrives on the channel.
func (b *effBench) async(key, mode string) <-chan effResp {
	ch := make(chan effResp, 1)
	go func() {
		r, err := b.do(key, mode)
		if err != nil {
			r = effResp{status: -1, header: http.Header{}, body: []byte(err.Error())}
		}
		ch <- r
	}()
	return ch
}

func (b *effBench) do(key, mode string) (effResp, error) {
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/things", bytes.NewReader([]byte(`{"a":1}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Effect", mode)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return effResp{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return effResp{resp.StatusCode, resp.Header, body}, err
}

// record returns the record of operation opID.
func (b *effBench) record(t *testing.T, opID string) registry.Record {
	t.Helper()
	rec, err := b.store.GetByID(t.Context(), opID)
	if err != nil {
		t.Fatalf("GetByID(%q): %v", opID, err)
	}
	return rec
}

// effect returns the one stored effect attempt of opID.
func (b *effBench) effect(t *testing.T, opID string) registry.Effect {
	t.Helper()
	effs, err := b.store.Effects(t.Context(), opID)
	if err != nil || len(effs) != 1 {
		t.Fatalf("Effects(%s) = %+v, %v; want one", opID, effs, err)
	}
	return effs[0]
}

// outbox returns the topics of opID's unpublished messages, checking
// their stable IDs.
func (b *effBench) outbox(t *testing.T, opID string) []string {
	t.Helper()
	msgs, err := b.store.ClaimOutbox(t.Context(), 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, m := range msgs {
		if m.OperationID == opID {
			if m.ID != registry.MessageID(opID, len(topics)) {
				t.Errorf("message %s of %s: ID %s", m.Topic, opID, m.ID)
			}
			topics = append(topics, m.Topic)
		}
	}
	return topics
}

// unknown checks that r is 409 OUTCOME_UNKNOWN for operation op, with
// the monitor Link and Retry-After.
func unknown(t *testing.T, what string, r effResp, op string) {
	t.Helper()
	if r.status != http.StatusConflict || r.code() != idem.CodeOutcomeUnknown || op == "" || r.op() != op ||
		r.header.Get("Link") != "</v1/operations/"+op+`>; rel="monitor"` || r.header.Get("Retry-After") != "1" {
		t.Errorf("%s: %v; want 409 OUTCOME_UNKNOWN for %s with Link and Retry-After", what, r, op)
	}
}

func problemCode(body []byte) idem.Code {
	var p struct{ Code idem.Code }
	json.Unmarshal(body, &p)
	return p.Code
}

// effStores runs fn on a fresh effBench per driver.
func effStores(t *testing.T, fn func(t *testing.T, b *effBench)) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		fn(t, newEffBench(t, dsn))
	})
}

// effStyles runs fn on a fresh effBench per driver and style: two-phase,
// and one-transaction (Operation.OneTransaction with Effects: the record
// and the attempt in one commit, the answer with the outcome).
func effStyles(t *testing.T, fn func(t *testing.T, b *effBench)) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		t.Run("TwoPhase", func(t *testing.T) { fn(t, newEffBench(t, dsn)) })
		t.Run("OneTransaction", func(t *testing.T) {
			fn(t, newEffBench(t, dsn, func(mw *idemhttp.Middleware) {
				mw.Operation.OneTransaction = true
				mw.Operation.APIRevision = "v1-onetx" // scopes of their own on the same database
			}))
		})
	})
}

func TestEffectOutsideExecution(t *testing.T) {
	_, err := idemhttp.Effect(context.Background(), "x", []byte(`{}`))
	if err == nil || errors.Is(err, idemhttp.ErrOutcomeUnknown) || errors.Is(err, idemhttp.ErrEffectDeclined) {
		t.Errorf("Effect outside an execution: %v, want a plain error", err)
	}
}

// TestEffectExecuted: an executed effect stores the rendered outcome (not
// the handler's response) with the Renderer's outbox, the attempt with
// its request and the downstream's answer, and replays it byte for byte
// without calling the downstream again.
func TestEffectExecuted(t *testing.T) {
	effStyles(t, func(t *testing.T, b *effBench) {
		first := b.post(t, "k-ok", "send")
		op := first.op()
		if res := b.result(); res != "ok" {
			t.Fatalf("Effect: %s", res)
		}
		eff := b.effect(t, op)
		key := registry.DownstreamKey(op, "send")
		if first.status != http.StatusCreated || !bytes.Equal(first.body, thingBody(op, eff.Handle)) || first.replayed() ||
			first.header.Get("Location") != "/things/"+op || first.header.Get("Content-Type") != "application/json" {
			t.Fatalf("first call: %v; want the rendered 201", first)
		}
		b.bank.mu.Lock()
		sentKeys, sentBodies, answer := b.bank.keys, b.bank.bodies, b.bank.done[key]
		b.bank.mu.Unlock()
		if len(sentKeys) != 1 || sentKeys[0] != key || !bytes.Equal(sentBodies[0], thingRequest(op)) {
			t.Errorf("downstream got keys %q bodies %q; want one call with key %s", sentKeys, sentBodies, key)
		}
		if eff.DownstreamKey != key || eff.Result != registry.EffectSucceeded || eff.Handle != "h-1" ||
			!bytes.Equal(eff.Request, thingRequest(op)) || !bytes.Equal(eff.Answer, answer) {
			t.Errorf("stored attempt %+v", eff)
		}
		rec := b.record(t, op)
		if rec.State != idem.StateSucceeded || rec.OwnerGen != 1 || rec.Response == nil || !bytes.Equal(rec.Response.Body, first.body) {
			t.Errorf("record: %s gen %d %+v", rec.State, rec.OwnerGen, rec.Response)
		}
		if topics := b.outbox(t, op); fmt.Sprint(topics) != "[thing.sent]" {
			t.Errorf("outbox %q, want [thing.sent]", topics)
		}
		if logs, err := b.store.Reconciliations(t.Context(), op); err != nil || len(logs) != 0 {
			t.Errorf("reconciliations of an uninterrupted run: %+v %v", logs, err)
		}
		again := b.post(t, "k-ok", "send")
		if again.status != first.status || !bytes.Equal(again.body, first.body) || !again.replayed() || again.op() != op ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Errorf("replay: %v; want the first response, replayed", again)
		}
		if p, g := b.bank.calls(); p != 1 || g != 0 || b.runs.Load() != 1 {
			t.Errorf("after the replay: %d POST %d GET, %d handler runs; want 1, 0, 1", p, g, b.runs.Load())
		}

		// Two calls with one name: one attempt, sent once.
		twice := b.post(t, "k-twice", "twice")
		if res := b.result(); res != "ok ok" || twice.status != http.StatusCreated || !bytes.Equal(twice.body, thingBody(twice.op(), "h-2")) {
			t.Errorf("two Effect calls: %s, %v", res, twice)
		}
		// An effect, then a 5xx from the handler: the rendered outcome.
		late := b.post(t, "k-late", "late500")
		if res := b.result(); res != "ok" || late.status != http.StatusCreated || !bytes.Equal(late.body, thingBody(late.op(), "h-3")) ||
			b.record(t, late.op()).State != idem.StateSucceeded {
			t.Errorf("an effect then a 500: %s, %v; want the rendered 201 stored", res, late)
		}
		if p, _ := b.bank.calls(); p != 3 || b.bank.executed() != 3 {
			t.Errorf("%d POST, %d executed; want 3 and 3", p, b.bank.executed())
		}
	})
}

// TestEffectDeclined: a final refusal is stored as the rendered
// FAILED_FINAL outcome and replayed.
func TestEffectDeclined(t *testing.T) {
	effStyles(t, func(t *testing.T, b *effBench) {
		b.bank.setMode("decline")
		first := b.post(t, "k-declined", "send")
		op := first.op()
		if res := b.result(); res != "declined" {
			t.Errorf("Effect: %s, want declined", res)
		}
		if first.status != http.StatusUnprocessableEntity || string(first.body) != `{"code":"SEND_DECLINED"}` || op == "" {
			t.Fatalf("declined: %v; want the rendered 422", first)
		}
		rec, eff := b.record(t, op), b.effect(t, op)
		if rec.State != idem.StateFailedFinal || rec.Response == nil || rec.Response.Status != 422 {
			t.Errorf("record %s %+v, want FAILED_FINAL 422", rec.State, rec.Response)
		}
		if eff.Result != registry.EffectFailed || string(eff.Answer) != bankDeclined || eff.Handle != "" {
			t.Errorf("stored attempt %+v", eff)
		}
		if topics := b.outbox(t, op); fmt.Sprint(topics) != "[thing.declined]" {
			t.Errorf("outbox %q", topics)
		}
		again := b.post(t, "k-declined", "send")
		if again.status != 422 || !bytes.Equal(again.body, first.body) || !again.replayed() || again.op() != op {
			t.Errorf("replay: %v", again)
		}
		if p, g := b.bank.calls(); p != 1 || g != 0 || b.bank.executed() != 0 {
			t.Errorf("%d POST %d GET, %d executed; want 1, 0, 0", p, g, b.bank.executed())
		}
	})
}

// TestEffectUnknownThenSettled: a 503 from the downstream proves nothing:
// 409 OUTCOME_UNKNOWN with the monitor Link and the operation ID, nothing
// stored, no further call. A retry while the downstream still fails gets
// the same 409; once it is healthy a retry settles the operation (lookup
// finds nothing, the stored request is re-sent with the same key) and
// gets the rendered outcome of the same operation, replayed from then on.
func TestEffectUnknownThenSettled(t *testing.T) {
	effStyles(t, func(t *testing.T, b *effBench) {
		b.bank.setMode("fail")
		first := b.post(t, "k-unknown", "send")
		op := first.op()
		unknown(t, "first call", first, op)
		if res := b.result(); res != "unknown then unknown" {
			t.Errorf("Effect calls: %s", res)
		}
		rec, eff := b.record(t, op), b.effect(t, op)
		if rec.State != idem.StateUnknown || rec.Response != nil || eff.Result != "" || eff.Answer != nil ||
			!bytes.Equal(eff.Request, thingRequest(op)) {
			t.Fatalf("after a 503: %s %+v, attempt %+v; want UNKNOWN, nothing stored", rec.State, rec.Response, eff)
		}
		if topics := b.outbox(t, op); len(topics) != 0 {
			t.Errorf("outbox of an unknown operation: %q", topics)
		}
		if p, g := b.bank.calls(); p != 1 || g != 0 {
			t.Errorf("%d POST %d GET, want one call", p, g)
		}

		// Still failing: looked up, re-sent, still unknown.
		retry := b.post(t, "k-unknown", "send")
		unknown(t, "retry while failing", retry, op)
		if p, g := b.bank.calls(); p != 2 || g != 1 || b.runs.Load() != 1 {
			t.Errorf("retry: %d POST %d GET, %d handler runs; want 2, 1, 1", p, g, b.runs.Load())
		}
		if rec := b.record(t, op); rec.State != idem.StateUnknown || rec.Response != nil {
			t.Errorf("after the failing retry: %s", rec.State)
		}

		// Healthy: settled by re-sending with the same key.
		b.bank.setMode("ok")
		settled := b.post(t, "k-unknown", "send")
		eff = b.effect(t, op)
		if settled.status != http.StatusCreated || settled.op() != op || !bytes.Equal(settled.body, thingBody(op, eff.Handle)) ||
			settled.header.Get("Location") != "/things/"+op {
			t.Fatalf("retry after recovery: %v; want the rendered 201 of %s", settled, op)
		}
		if rec := b.record(t, op); rec.State != idem.StateSucceeded || rec.OwnerGen != 1 {
			t.Errorf("settled record: %s gen %d", rec.State, rec.OwnerGen)
		}
		logs, err := b.store.Reconciliations(t.Context(), op)
		if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileReplay || logs[0].Actor != idemhttp.ActorClientRetry {
			t.Errorf("reconciliations %+v %v; want one replay by %q", logs, err, idemhttp.ActorClientRetry)
		}
		if topics := b.outbox(t, op); fmt.Sprint(topics) != "[thing.sent thing.settled]" {
			t.Errorf("outbox %q", topics)
		}
		b.bank.mu.Lock()
		keys := b.bank.keys
		b.bank.mu.Unlock()
		for i, k := range keys {
			if k != registry.DownstreamKey(op, "send") {
				t.Errorf("POST %d used key %s", i, k)
			}
		}
		again := b.post(t, "k-unknown", "send")
		if again.status != http.StatusCreated || !bytes.Equal(again.body, settled.body) || !again.replayed() || again.op() != op {
			t.Errorf("replay: %v", again)
		}
		if p, g := b.bank.calls(); p != 3 || g != 2 || b.bank.executed() != 1 || b.runs.Load() != 1 {
			t.Errorf("%d POST %d GET, %d executed, %d runs; want 3, 2, 1, 1", p, g, b.bank.executed(), b.runs.Load())
		}
	})
}

// TestEffectSettleByLookup: the downstream executed the key but its answer
// was lost (503 after executing): UNKNOWN; the retry's lookup finds the
// execution and settles it without sending again (method provider).
func TestEffectSettleByLookup(t *testing.T) {
	effStyles(t, func(t *testing.T, b *effBench) {
		b.bank.setMode("fail-after")
		first := b.post(t, "k-lost", "send")
		op := first.op()
		unknown(t, "first call", first, op)
		b.result()
		b.bank.setMode("ok")
		settled := b.post(t, "k-lost", "send")
		eff := b.effect(t, op)
		if settled.status != http.StatusCreated || settled.op() != op || !bytes.Equal(settled.body, thingBody(op, "h-1")) || eff.Handle != "h-1" {
			t.Fatalf("retry: %v, attempt %+v", settled, eff)
		}
		logs, err := b.store.Reconciliations(t.Context(), op)
		if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileProvider {
			t.Errorf("reconciliations %+v %v; want one by provider lookup", logs, err)
		}
		if p, g := b.bank.calls(); p != 1 || g != 1 || b.bank.executed() != 1 {
			t.Errorf("%d POST %d GET, %d executed; want 1, 1, 1", p, g, b.bank.executed())
		}
	})
}

// TestEffectWithoutEffects: an effect-bearing operation whose execution
// began no effect stores a 2xx as SUCCEEDED and a declared 4xx as
// REJECTED, and releases anything else so that a retry runs afresh.
func TestEffectWithoutEffects(t *testing.T) {
	effStyles(t, func(t *testing.T, b *effBench) {
		plain := b.post(t, "k-plain", "plain")
		if plain.status != http.StatusCreated || string(plain.body) != "plain" || b.record(t, plain.op()).State != idem.StateSucceeded {
			t.Errorf("plain: %v", plain)
		}
		declared := b.post(t, "k-declared", "declared")
		if declared.status != 422 || string(declared.body) != "declared" || b.record(t, declared.op()).State != idem.StateRejected {
			t.Errorf("declared 4xx: %v", declared)
		}
		if again := b.post(t, "k-declared", "declared"); again.status != 422 || string(again.body) != "declared" || !again.replayed() {
			t.Errorf("replay of the declared 4xx: %v", again)
		}
		// An outbox message commits with the refusal: FAILED_FINAL.
		if r := b.post(t, "k-declared-outbox", "declared-outbox"); r.status != 422 || b.record(t, r.op()).State != idem.StateFailedFinal {
			t.Errorf("declared 4xx with an outbox message: %v", r)
		}
		for i := range 2 {
			if r := b.post(t, "k-none", "none500"); r.status != http.StatusInternalServerError || r.replayed() {
				t.Errorf("none500 #%d: %v", i, r)
			}
		}
		if n := b.runs.Load(); n != 5 {
			t.Errorf("%d handler runs, want 5 (plain, declared, declared-outbox, none500 twice)", n)
		}
		if p, g := b.bank.calls(); p != 0 || g != 0 {
			t.Errorf("%d POST %d GET without an effect", p, g)
		}
	})
}

// TestEffectTakeOverReserved: a retry that finds the operation RESERVED
// under an owner whose lease expired (by the database's clock) takes it
// over and continues the same operation — same operation ID, owner
// generation 2; the old owner's late outcome is fenced. Before the lease
// expires the retry gets 409 IN_PROGRESS.
func TestEffectTakeOverReserved(t *testing.T) {
	effStores(t, func(t *testing.T, b *effBench) {
		b.offset.Store(int64(-time.Hour)) // leases end an hour early by the real clock
		firstDone := b.async("k-take", "block")
		op := <-b.started

		early := b.post(t, "k-take", "plain")
		if early.status != http.StatusConflict || early.code() != idem.CodeInProgress || early.op() != op {
			t.Errorf("retry while the lease is current: %v; want 409 IN_PROGRESS for %s", early, op)
		}
		if rec := b.record(t, op); rec.OwnerGen != 1 || rec.State != idem.StateReserved {
			t.Fatalf("after the early retry: %s gen %d", rec.State, rec.OwnerGen)
		}

		b.offset.Store(0) // the database's clock passes the lease
		retry := b.post(t, "k-take", "plain")
		if retry.status != http.StatusCreated || string(retry.body) != "plain" || retry.op() != op || retry.replayed() {
			t.Errorf("retry after the lease expired: %v; want 201 for the same operation %s", retry, op)
		}
		rec := b.record(t, op)
		if rec.State != idem.StateSucceeded || rec.OwnerGen != 2 || rec.Response == nil || string(rec.Response.Body) != "plain" {
			t.Errorf("record: %s gen %d %+v; want SUCCEEDED gen 2 with the retry's response", rec.State, rec.OwnerGen, rec.Response)
		}

		close(b.release)
		old := <-firstDone
		if old.op() != op || string(old.body) != "plain" || !old.replayed() {
			t.Errorf("the old owner's answer: %v; want the replay of the retry's outcome", old)
		}
		if rec := b.record(t, op); rec.OwnerGen != 2 || string(rec.Response.Body) != "plain" {
			t.Errorf("the old owner overwrote the outcome: gen %d %q", rec.OwnerGen, rec.Response.Body)
		}
		if n := b.runs.Load(); n != 2 {
			t.Errorf("%d handler runs, want 2", n)
		}
	})
}

// TestEffectTakeOverExecuting: a retry that finds the operation EXECUTING
// — an effect begun — under an owner whose lease expired never runs the
// handler again: it takes the operation over (generation 2), marks it
// UNKNOWN and settles it on evidence (the held first send had executed
// nothing, so the stored request is re-sent with the same key).
func TestEffectTakeOverExecuting(t *testing.T) {
	effStores(t, func(t *testing.T, b *effBench) {
		b.offset.Store(int64(-time.Hour))
		b.bank.setMode("hold")
		firstDone := b.async("k-hung", "send")
		<-b.bank.held // the first owner is inside its downstream call
		recs, err := b.store.ListOperations(t.Context(), registry.ListFilter{State: idem.StateExecuting})
		if err != nil || len(recs) != 1 || recs[0].OwnerGen != 1 {
			t.Fatalf("in flight: %+v %v; want one EXECUTING record", recs, err)
		}
		op := recs[0].OperationID
		keys := func() []string {
			b.bank.mu.Lock()
			defer b.bank.mu.Unlock()
			return append([]string(nil), b.bank.keys...)
		}

		b.offset.Store(0)
		retry := b.post(t, "k-hung", "send")
		eff := b.effect(t, op)
		if retry.status != http.StatusCreated || retry.op() != op || !bytes.Equal(retry.body, thingBody(op, eff.Handle)) {
			t.Fatalf("retry after the lease expired: %v; want the rendered 201 of %s", retry, op)
		}
		rec := b.record(t, op)
		if rec.State != idem.StateSucceeded || rec.OwnerGen != 2 {
			t.Errorf("record: %s gen %d; want SUCCEEDED gen 2", rec.State, rec.OwnerGen)
		}
		logs, err := b.store.Reconciliations(t.Context(), op)
		if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileReplay || logs[0].Actor != idemhttp.ActorClientRetry {
			t.Errorf("reconciliations %+v %v", logs, err)
		}
		if n := b.runs.Load(); n != 1 {
			t.Errorf("%d handler runs, want 1: a begun effect is never executed again", n)
		}

		close(b.bank.release) // the first owner's call returns now; its writes are fenced
		old := <-firstDone
		// Its answer is fenced: RecordEffect and MarkUnknown fail, so its
		// Effect reports an unknown outcome. The client gets 409
		// OUTCOME_UNKNOWN for the operation (a retry replays the outcome)
		// or the replay itself — never another outcome.
		if res := b.result(); res != "unknown then unknown" {
			t.Errorf("the old owner's Effect calls: %s", res)
		}
		if !(old.status == http.StatusConflict && old.code() == idem.CodeOutcomeUnknown && old.op() == op) &&
			!(old.status == http.StatusCreated && bytes.Equal(old.body, retry.body) && old.replayed()) {
			t.Errorf("the old owner's answer: %v", old)
		}
		if rec := b.record(t, op); rec.State != idem.StateSucceeded || rec.OwnerGen != 2 || !bytes.Equal(rec.Response.Body, retry.body) {
			t.Errorf("after the old owner finished: %s gen %d", rec.State, rec.OwnerGen)
		}
		if b.bank.executed() != 1 {
			t.Errorf("downstream executed %d, want 1", b.bank.executed())
		}
		for i, k := range keys() {
			if k != registry.DownstreamKey(op, "send") {
				t.Errorf("POST %d used key %s", i, k)
			}
		}
	})
}
