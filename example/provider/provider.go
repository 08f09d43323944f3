// Package provider is the stand-alone downstream transfer provider behind
// "idem provider" (SPEC R, E1–E2): the kind of external system idem's
// transfers call and cannot enlist in their transaction. It behaves like a
// real payment provider: it honours its own Idempotency-Key (a key that
// executed or was declined is answered the same way for ever, in every
// mode), can be asked what became of a key, and can be told to fail, to
// decline or to hang so that callers can test unknown outcomes.
//
// Routes (Server.Handler):
//
//	POST /transfers        execute a transfer once per Idempotency-Key
//	GET  /transfers/{key}  what became of that key: 200 executed or
//	                       declined; 404 NOT_FOUND if neither (yet)
//	GET  /transfers        every executed transfer, in execution order
//	GET  /stats            {"executed": N, "declined": M}
//	POST /control          {"mode": "ok"|"fail"|"fail-after"|"hang"|
//	                       "hang-before"|"decline", "count": N} →
//	                       {"mode": …[, "count": N]} ("count" optional:
//	                       see below)
//	GET  /control          {"mode": …, "hung": N[, "count": left]}; with
//	                       ?wait_hung=N it first waits until at least N
//	                       requests are held (WaitHung)
//
// POST /transfers needs exactly one non-empty Idempotency-Key field line
// (1–255 visible ASCII characters, taken as is) and a JSON object body of at
// most MaxBody bytes. Bodies are compared by their canonical JSON (package
// canon, ModeJSON: members sorted, no insignificant whitespace, numbers as
// written), so member order and spacing do not matter but 10 and 10.0
// differ. A request with a new key, in ModeOK, executes the transfer and
// answers 201 Created with
//
//	{"id":"tr_1","key":"…","amount":…,"currency":…,"payee":…,"reference":…,
//	 "status":"executed","created_at":"…"}
//
// (amount, currency, payee and reference are copied, canonical, from the
// body and omitted when absent). Every later request with that key and the
// same canonical body answers 201 again with the very same bytes and
// "Idempotent-Replayed: true", at once and whatever the mode — 201 rather
// than 200 so that a caller handles a first answer and a replay alike. A
// key that was declined (ModeDecline) is likewise answered with the very
// same 422 DECLINED, with "Idempotent-Replayed: true", for ever: a decline
// is final for its key, which never executes afterwards. The same key with
// another body answers 422 PAYLOAD_CONFLICT and changes nothing.
//
// Errors are application/problem+json with a code member: KEY_MISSING,
// KEY_MULTIPLE, KEY_INVALID, INVALID_JSON, MODE_INVALID, INVALID_QUERY (400),
// BODY_TOO_LARGE (413), PAYLOAD_CONFLICT and DECLINED (422), NOT_FOUND
// (404) and PROVIDER_FAILURE (503).
//
// Modes (ModeOK at start) shape POST /transfers only, and only requests
// with a new key — one that neither executed nor was declined — that
// passed the checks above (a malformed request is refused in every mode,
// a known key is answered as above in every mode):
//
//   - ModeFail answers 503 PROVIDER_FAILURE; nothing is executed or
//     recorded, so the key is still new.
//   - ModeFailAfter executes and records the transfer, then answers 503
//     PROVIDER_FAILURE: the provider "failed transiently after
//     executing". A 5xx is therefore no proof that nothing happened.
//   - ModeDecline records the key as declined and answers 422 DECLINED.
//   - ModeHang does the work of ModeOK — the transfer is executed and
//     recorded — and then withholds the answer until the mode changes or
//     the request's context ends: the classic "timeout after the effect
//     happened". Requests for the key meanwhile get the replay at once.
//   - ModeHangBefore blocks before executing anything, until the mode
//     changes (then the request starts over: its key may have executed
//     meanwhile, else the new mode decides) or the request's context ends.
//
// GET /transfers/{key} answers in every mode: 200 with the transfer's JSON
// (as above, "status":"executed") when the key executed; 200 with
//
//	{"key":"…","status":"declined","code":"DECLINED"}
//
// when it was declined; 404 NOT_FOUND otherwise. A 404 says only that the
// key has not executed so far: it is no promise that it cannot execute
// later (a request held by ModeHangBefore, or one still on its way, may
// execute it after the lookup). GET /transfers answers a JSON array of
// every executed transfer's JSON, in execution order, so that a harness
// can count executions per payee or reference.
//
// POST /control with "count": N (N ≥ 1) sets the mode for the next N
// requests with a new key only (each request the mode decides counts, so
// a key that ModeFail or ModeHangBefore left new counts again if it comes
// back); then the mode is ModeOK again by itself, and GET /control shows
// the count left while there is one. Reverting so releases no held
// request: they stay held until the next POST /control, whatever it sets,
// or until their context ends — so a counted "hang" holds exactly its N
// requests until the caller times out. Without "count", a mode stays until
// changed, and a change releases every held request (setting the mode in
// force again, both times without a count, changes nothing).
//
// A held request whose context ends (the client went away, or the server's
// base context was cancelled at shutdown) is aborted with
// http.ErrAbortHandler: the connection is cut and no status is written.
// Holding uses a broadcast on every state change, never a timer.
//
// A Server from New keeps its state in memory, and it dies with the
// process: a restarted provider would execute a known key again. One from
// Open with Options.State writes what became of each key to that file,
// synced to disk, before answering, and reads it back when it starts, so
// a key is answered the same way across restarts (journal.go). With
// Options.Events it also sends a signed Standard Webhooks event for each
// key that executed or was declined (events.go).
//
// All methods of Server are safe for concurrent use.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// MaxBody is the largest POST /transfers or POST /control body accepted.
const MaxBody = 1 << 20

// Mode says how POST /transfers behaves; see the package documentation.
type Mode string

// The modes; Modes lists them.
const (
	ModeOK         Mode = "ok"
	ModeFail       Mode = "fail"
	ModeFailAfter  Mode = "fail-after"
	ModeDecline    Mode = "decline"
	ModeHang       Mode = "hang"
	ModeHangBefore Mode = "hang-before"
)

// modeNames lists the modes for error messages.
const modeNames = `"ok", "fail", "fail-after", "decline", "hang" or "hang-before"`

// Modes returns every mode, ModeOK first: what ParseMode accepts and
// POST /control sets.
func Modes() []Mode {
	return []Mode{ModeOK, ModeFail, ModeFailAfter, ModeDecline, ModeHang, ModeHangBefore}
}

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	if slices.Contains(Modes(), Mode(s)) {
		return Mode(s), nil
	}
	return "", fmt.Errorf("provider: unknown mode %q (want %s)", s, modeNames)
}

// Server is an in-memory provider. The zero value is not usable; call New.
type Server struct {
	now func() time.Time
	// latency delays every POST /transfers (Options.Latency); set before
	// serving, read-only afterwards.
	latency time.Duration

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	mode     Mode
	modeGen  uint64 // incremented whenever held requests are to be released
	left     int    // requests the counted mode still decides; 0: not counting
	counted  bool   // mode was set with a count (and may have reverted to ok since)
	hung     int    // POST /transfers handlers being held
	byKey    map[string]*transfer
	executed []*transfer // in execution order
	declined int

	// journal, when set, is the state file every key's outcome is
	// written to before it is answered (Options.State).
	journal *journal
	closed  bool // Close closed the journal: no key is recorded any more
	// events says whether events are sent (Options.Events.URL);
	// pending are the ones not acknowledged yet, by webhook-id.
	events  bool
	pending map[string]*pendingEvent
	stop    context.CancelFunc // ends the event sender; nil without one
	stopped chan struct{}      // closed when the event sender returned
}

// transfer is what became of one key: an executed transfer or a decline.
type transfer struct {
	request  []byte // canonical JSON of the request body
	declined bool
	// response is answered on every repeat: the transfer's JSON, or the
	// DECLINED problem.
	response []byte
}

// New returns an empty provider in ModeOK.
func New() *Server {
	return &Server{
		now:     time.Now,
		changed: make(chan struct{}),
		mode:    ModeOK,
		byKey:   make(map[string]*transfer),
		pending: make(map[string]*pendingEvent),
	}
}

// Mode returns the current mode.
func (s *Server) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// SetMode switches to m until changed, as POST /control does without a
// count. A change releases every held request; setting the current mode
// again changes nothing (unless it was set with a count).
func (s *Server) SetMode(m Mode) error { return s.SetModeCount(m, 0) }

// SetModeCount switches to m for the next n requests with a new key, then
// back to ModeOK (without releasing what m holds), as POST /control with
// "count" does; n = 0 is SetMode. It releases every held request, except
// when m without a count is already in force without a count.
func (s *Server) SetModeCount(m Mode, n int) error {
	if _, err := ParseMode(string(m)); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("provider: negative count %d", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m != s.mode || n > 0 || s.counted {
		s.modeGen++
		s.broadcastLocked()
	}
	s.mode, s.left, s.counted = m, n, n > 0
	return nil
}

// decideLocked returns the mode that decides a request with a new key and
// counts the request against a counted mode. It is called with s.mu held.
func (s *Server) decideLocked() Mode {
	m := s.mode
	if s.left > 0 {
		s.left--
		if s.left == 0 {
			s.mode = ModeOK // no modeGen change: what m holds stays held
		}
		s.broadcastLocked()
	}
	return m
}

// Executed returns the number of distinct transfers executed so far.
func (s *Server) Executed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.executed)
}

// Declined returns the number of keys declined so far.
func (s *Server) Declined() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.declined
}

// Transfer returns the JSON of the transfer that key executed, the bytes
// POST /transfers answered, and whether there is one (false for a declined
// key).
func (s *Server) Transfer(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byKey[key]
	if !ok || t.declined {
		return nil, false
	}
	return append([]byte(nil), t.response...), true
}

// IsDeclined reports whether key was declined.
func (s *Server) IsDeclined(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byKey[key]
	return ok && t.declined
}

// Transfers returns the JSON array of every executed transfer, in
// execution order, as GET /transfers answers it.
func (s *Server) Transfers() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []byte{'['}
	for i, t := range s.executed {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, t.response...)
	}
	return append(out, ']')
}

// Hung returns the number of POST /transfers requests being held by
// ModeHang or ModeHangBefore.
func (s *Server) Hung() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hung
}

// WaitHung blocks until at least n POST /transfers requests are held by
// ModeHang or ModeHangBefore, or ctx ends (then it returns ctx.Err()). A
// request held by ModeHang has executed its transfer by then, so tests can
// wait for "the effect happened" without sleeping.
func (s *Server) WaitHung(ctx context.Context, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitLocked(ctx, func() bool { return s.hung >= n })
}

// WaitNoneHeld blocks until no POST /transfers request is held (every
// held one was released or its client went away), or ctx ends (then it
// returns ctx.Err()).
func (s *Server) WaitNoneHeld(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitLocked(ctx, func() bool { return s.hung == 0 })
}

// WaitExecuted blocks until the provider has executed at least n
// transfers, or ctx ends (then it returns ctx.Err()). A caller that gave
// up on a request (a timeout) cannot tell whether the provider executed
// it yet — it may run the request after the caller left — so tests wait
// for the execution with it instead of counting at once.
func (s *Server) WaitExecuted(ctx context.Context, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitLocked(ctx, func() bool { return len(s.executed) >= n })
}

// broadcastLocked wakes every waiter so it rechecks its condition.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitLocked blocks until cond, evaluated with s.mu held, is true or ctx
// ends. It is called and returns with s.mu held.
func (s *Server) waitLocked(ctx context.Context, cond func() bool) error {
	for !cond() {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		}
	}
	return nil
}

// holdLocked counts the caller as hung and blocks until the mode changes or
// ctx ends. It is called and returns with s.mu held.
func (s *Server) holdLocked(ctx context.Context) error {
	gen := s.modeGen
	s.hung++
	s.broadcastLocked()
	err := s.waitLocked(ctx, func() bool { return s.modeGen != gen })
	s.hung--
	s.broadcastLocked()
	return err
}

// outcome is what POST /transfers answers.
type outcome struct {
	t        *transfer // the key's transfer or decline; nil on a conflict or ModeFail
	conflict bool      // the key was used with another body
	failed   bool      // answer 503 PROVIDER_FAILURE (ModeFail, ModeFailAfter)
	unsaved  bool      // the state file refused the key's line: 503, nothing answered as done
	replayed bool      // the key had executed or been declined before
}

// postLocked decides a POST /transfers with a valid key and canonical
// body req; fields are the members of req copied into a new transfer. It
// is called and returns with s.mu held, so check and insert are one step:
// a key executes (or is declined) once however many requests race. The
// error is ctx's, when the request was held and its context ended.
func (s *Server) postLocked(ctx context.Context, key string, req []byte, fields map[string]json.RawMessage) (outcome, error) {
	for {
		if t, ok := s.byKey[key]; ok {
			if string(t.request) != string(req) {
				return outcome{conflict: true}, nil
			}
			return outcome{t: t, replayed: true}, nil
		}
		mode := s.decideLocked()
		switch mode {
		case ModeHangBefore:
			if err := s.holdLocked(ctx); err != nil {
				return outcome{}, err
			}
			continue // the key may have executed meanwhile; else the new mode decides
		case ModeFail:
			return outcome{failed: true}, nil
		case ModeDecline:
			t := &transfer{request: req, declined: true, response: declinedProblem}
			if err := s.recordLocked(key, t, fields); err != nil {
				return outcome{failed: true, unsaved: true}, nil
			}
			s.declined++
			s.broadcastLocked()
			return outcome{t: t}, nil
		}
		body := appendTransfer(nil, "tr_"+strconv.Itoa(len(s.executed)+1), key, fields, s.now().UTC())
		t := &transfer{request: req, response: body}
		if err := s.recordLocked(key, t, fields); err != nil {
			return outcome{failed: true, unsaved: true}, nil
		}
		s.executed = append(s.executed, t)
		s.broadcastLocked()
		switch mode {
		case ModeFailAfter:
			return outcome{t: t, failed: true}, nil
		case ModeHang:
			if err := s.holdLocked(ctx); err != nil {
				return outcome{}, err
			}
		}
		return outcome{t: t}, nil
	}
}
