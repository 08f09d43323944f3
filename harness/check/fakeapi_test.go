package check

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// flaw is what a fakeAPI gets wrong; each breaks one property on purpose.
type flaw string

const (
	// sound: no flaw; every scenario must pass.
	sound flaw = "sound"
	// noFingerprint caches answers by key alone: a changed payload with a
	// used key gets the first answer.
	noFingerprint flaw = "no-fingerprint"
	// fingerprintInScope makes the payload part of the key's scope: a
	// changed payload is a new request and creates a second resource.
	fingerprintInScope flaw = "fingerprint-in-scope"
	// checkThenInsert looks the key up, works, then stores the outcome,
	// with nothing reserved in between: concurrent duplicates all work.
	checkThenInsert flaw = "check-then-insert"
	// unstableReplay regenerates created_at in every replayed body.
	unstableReplay flaw = "unstable-replay"
	// unscoped keys one namespace for all credentials.
	unscoped flaw = "unscoped"
	// leakyReplay replays the first answer's Set-Cookie and Date headers.
	leakyReplay flaw = "leaky-replay"
	// staleDate replays the first answer's Date header only.
	staleDate flaw = "stale-date"
	// weakKeys takes any key, however guessable; every other fake refuses
	// keys idem.StrictKeyPolicy refuses with 400 KEY_INVALID.
	weakKeys flaw = "weak-keys"
)

// companionWindow is how long a fresh execution of a fakeAPI waits for a
// second request with the same key before it works. It makes every
// overlap deterministic: duplicates sent together always meet a first
// execution still in flight (so check-then-insert always loses its race
// and a sound API always answers them 409). Requests sent alone pay it
// once per key. Two seconds leave a wide margin on a busy machine.
const companionWindow = 2 * time.Second

// fakeAPI is a small idempotent API held in memory, with one deliberate
// flaw: POST /things (Idempotency-Key required) creates a thing and
// answers 201 with Location /things/{id}, a session cookie, and
// {"id", "payload", "created_at"}; GET /things lists the caller's things
// as {"things": [ids]}. Bearer tokens "alice" and "bob" are two
// principals. Safe for concurrent use.
type fakeAPI struct {
	flaw    flaw
	mu      sync.Mutex
	ops     map[string]*fakeOp    // by scope
	pending map[string]*companion // checkThenInsert: executions not yet stored
	things  map[string][]string   // ids by principal
	seq     int
}

func newFakeAPI(f flaw) *fakeAPI {
	return &fakeAPI{flaw: f, ops: map[string]*fakeOp{}, pending: map[string]*companion{}, things: map[string][]string{}}
}

// companion is closed when a second request for an execution's key came.
type companion struct {
	ch   chan struct{}
	once sync.Once
}

func newCompanion() *companion { return &companion{ch: make(chan struct{})} }
func (c *companion) arrived()  { c.once.Do(func() { close(c.ch) }) }
func (c *companion) await() {
	t := time.NewTimer(companionWindow)
	defer t.Stop()
	select {
	case <-c.ch:
	case <-t.C:
	}
}

// fakeOp is a key's operation; its outcome is set once done.
type fakeOp struct {
	fingerprint [32]byte
	companion   *companion
	done        bool
	outcome     fakeOutcome
}

type fakeOutcome struct {
	id, location, cookie, date string
	payload                    json.RawMessage
	body                       []byte
}

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	principal := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if principal != "alice" && principal != "bob" {
		fakeProblem(w, http.StatusUnauthorized, "UNAUTHENTICATED")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/things":
		a.mu.Lock()
		ids := append([]string{}, a.things[principal]...)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string][]string{"things": ids})
		return
	case r.Method != http.MethodPost || r.URL.Path != "/things":
		fakeProblem(w, http.StatusNotFound, "NOT_FOUND")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	if key == "" || err != nil || !json.Valid(body) {
		fakeProblem(w, http.StatusBadRequest, "BAD_REQUEST")
		return
	}
	if _, err := idem.ParseKey([]string{key}, idem.StrictKeyPolicy); err != nil && a.flaw != weakKeys {
		fakeProblem(w, http.StatusBadRequest, "KEY_INVALID")
		return
	}
	fp := sha256.Sum256(body)
	scope := principal + "\x00" + key
	switch a.flaw {
	case unscoped:
		scope = key
	case fingerprintInScope:
		scope += "\x00" + string(fp[:])
	case checkThenInsert:
		a.racy(w, scope, principal, fp, body)
		return
	}

	a.mu.Lock()
	if op, ok := a.ops[scope]; ok {
		op.companion.arrived()
		done, out := op.done, op.outcome
		a.mu.Unlock()
		switch {
		case !done:
			fakeProblem(w, http.StatusConflict, "IN_PROGRESS")
		case op.fingerprint != fp && a.flaw != noFingerprint:
			fakeProblem(w, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		default:
			a.replay(w, out)
		}
		return
	}
	op := &fakeOp{fingerprint: fp, companion: newCompanion()}
	a.ops[scope] = op
	a.mu.Unlock()

	op.companion.await()
	a.mu.Lock()
	op.outcome, op.done = a.execute(principal, body), true
	out := op.outcome
	a.mu.Unlock()
	a.created(w, out)
}

// racy is the check-then-insert flow: look up, then work, then store.
func (a *fakeAPI) racy(w http.ResponseWriter, scope, principal string, fp [32]byte, body []byte) {
	a.mu.Lock()
	if op, ok := a.ops[scope]; ok {
		out := op.outcome
		a.mu.Unlock()
		if op.fingerprint != fp {
			fakeProblem(w, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		} else {
			a.replay(w, out)
		}
		return
	}
	c, ok := a.pending[scope] // not a reservation: nobody waits for it
	if ok {
		c.arrived()
	} else {
		c = newCompanion()
		a.pending[scope] = c
	}
	a.mu.Unlock()

	c.await() // the work; any duplicate arriving now misses the lookup too
	a.mu.Lock()
	out := a.execute(principal, body)
	a.ops[scope] = &fakeOp{fingerprint: fp, done: true, outcome: out, companion: newCompanion()}
	delete(a.pending, scope)
	a.mu.Unlock()
	a.created(w, out)
}

// execute creates a thing; a.mu is held.
func (a *fakeAPI) execute(principal string, body []byte) fakeOutcome {
	a.seq++
	id := fmt.Sprintf("thing_%d", a.seq)
	a.things[principal] = append(a.things[principal], id)
	out := fakeOutcome{id: id, location: "/things/" + id, payload: body,
		cookie: fmt.Sprintf("session=s%d", a.seq), date: time.Now().UTC().Format(http.TimeFormat)}
	out.body = thingBody(out, time.Now())
	return out
}

func thingBody(out fakeOutcome, created time.Time) []byte {
	b, _ := json.Marshal(map[string]any{"id": out.id, "payload": out.payload, "created_at": created.UTC().Format(time.RFC3339Nano)})
	return b
}

// created answers the execution that created out.
func (a *fakeAPI) created(w http.ResponseWriter, out fakeOutcome) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", out.location)
	h.Set("Set-Cookie", out.cookie)
	h.Set("Date", out.date)
	w.WriteHeader(http.StatusCreated)
	w.Write(out.body)
}

// replay answers a retry of the operation that created out.
func (a *fakeAPI) replay(w http.ResponseWriter, out fakeOutcome) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", out.location)
	body := out.body
	switch a.flaw {
	case unstableReplay:
		body = thingBody(out, time.Now())
	case leakyReplay:
		h.Set("Set-Cookie", out.cookie)
		h.Set("Date", out.date)
	case staleDate:
		h.Set("Date", out.date)
	}
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

func fakeProblem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"code": code})
}
