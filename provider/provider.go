// Package provider is the stand-alone downstream transfer provider behind
// "idem provider" (SPEC R, E1–E2): the kind of external system idem's
// transfers call and cannot enlist in their transaction. It honours its own
// Idempotency-Key, can be asked whether a key was executed, and can be told
// to fail or to hang so that callers can test unknown outcomes.
//
// Routes (Server.Handler):
//
//	POST /transfers        execute a transfer once per Idempotency-Key
//	GET  /transfers/{key}  the transfer that key executed; 404 NOT_FOUND if none
//	GET  /stats            {"executed": N}, the number of distinct transfers
//	POST /control          {"mode": "ok"|"fail"|"hang"|"hang-before"} → {"mode": …}
//	GET  /control          {"mode": …, "hung": N}; with ?wait_hung=N it first
//	                       waits until at least N requests are held (WaitHung)
//
// POST /transfers needs exactly one non-empty Idempotency-Key field line
// (1–255 visible ASCII characters, taken as is) and a JSON object body of at
// most MaxBody bytes. Bodies are compared by their canonical JSON (package
// canon, ModeJSON: members sorted, no insignificant whitespace, numbers as
// written), so member order and spacing do not matter but 10 and 10.0
// differ. The first request with a key executes the transfer and answers
// 201 Created with
//
//	{"id":"tr_1","key":"…","amount":…,"currency":…,"payee":…,"reference":…,
//	 "status":"executed","created_at":"…"}
//
// (amount, currency, payee and reference are copied, canonical, from the
// body and omitted when absent). A repeat with the same key and the same
// canonical body answers 201 again with the very same bytes and
// "Idempotent-Replayed: true" — 201 rather than 200 so that a caller
// handles a first answer and a replay alike. The same key with another body
// answers 422 PAYLOAD_CONFLICT and executes nothing.
//
// Errors are application/problem+json with a code member: KEY_MISSING,
// KEY_MULTIPLE, KEY_INVALID, INVALID_JSON, MODE_INVALID, INVALID_QUERY (400),
// BODY_TOO_LARGE (413), PAYLOAD_CONFLICT (422), NOT_FOUND (404) and
// PROVIDER_FAILURE (503).
//
// Modes (ModeOK at start) shape POST /transfers only, and only requests
// that passed the checks above (a malformed request is refused in every
// mode):
//
//   - ModeFail answers 503 PROVIDER_FAILURE and executes nothing.
//   - ModeHang does the work of ModeOK — the transfer is executed and
//     recorded — and then withholds the answer until the mode changes or
//     the request's context ends: the classic "timeout after the effect
//     happened". Replays and conflicts are withheld alike.
//   - ModeHangBefore blocks before executing anything, until the mode
//     changes (then the request proceeds under the new mode) or the
//     request's context ends.
//
// A held request whose context ends (the client went away, or the server's
// base context was cancelled at shutdown) is aborted with
// http.ErrAbortHandler: the connection is cut and no status is written.
// Holding uses a broadcast on every state change, never a timer.
//
// State lives in memory and dies with the process. All methods of Server
// are safe for concurrent use.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// MaxBody is the largest POST /transfers or POST /control body accepted.
const MaxBody = 1 << 20

// Mode says how POST /transfers behaves; see the package documentation.
type Mode string

// The modes.
const (
	ModeOK         Mode = "ok"
	ModeFail       Mode = "fail"
	ModeHang       Mode = "hang"
	ModeHangBefore Mode = "hang-before"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOK, ModeFail, ModeHang, ModeHangBefore:
		return m, nil
	}
	return "", fmt.Errorf("provider: unknown mode %q (want ok, fail, hang or hang-before)", s)
}

// Server is an in-memory provider. The zero value is not usable; call New.
type Server struct {
	now func() time.Time

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change
	mode    Mode
	modeGen uint64 // incremented whenever mode takes a new value
	hung    int    // POST /transfers handlers being held
	seq     int    // last transfer number
	byKey   map[string]*transfer
}

// transfer is one executed transfer.
type transfer struct {
	request  []byte // canonical JSON of the request body
	response []byte // the transfer's JSON, answered on every replay
}

// New returns an empty provider in ModeOK.
func New() *Server {
	return &Server{
		now:     time.Now,
		changed: make(chan struct{}),
		mode:    ModeOK,
		byKey:   make(map[string]*transfer),
	}
}

// Mode returns the current mode.
func (s *Server) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// SetMode switches to m, as POST /control does. A change releases every
// request held by the previous mode; setting the current mode again
// changes nothing.
func (s *Server) SetMode(m Mode) error {
	if _, err := ParseMode(string(m)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m != s.mode {
		s.mode = m
		s.modeGen++
		s.broadcastLocked()
	}
	return nil
}

// Executed returns the number of distinct transfers executed so far.
func (s *Server) Executed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// Transfer returns the JSON of the transfer that key executed, the bytes
// POST /transfers answered, and whether there is one.
func (s *Server) Transfer(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), t.response...), true
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

// outcome is what POST /transfers answers once it got past the mode.
type outcome struct {
	body     []byte // the transfer's JSON; nil on a conflict
	conflict bool   // the key was used with another body
	replayed bool   // the key had executed before
}

// admitLocked waits out ModeHangBefore and reports whether the request may
// proceed (false in ModeFail). It is called and returns with s.mu held.
func (s *Server) admitLocked(ctx context.Context) (bool, error) {
	for s.mode == ModeHangBefore {
		if err := s.holdLocked(ctx); err != nil {
			return false, err
		}
	}
	return s.mode != ModeFail, nil
}

// executeLocked executes the transfer of key with the canonical request
// body req, or finds the one it executed before. fields are the members of
// req copied into a new transfer. It is called with s.mu held, so check and
// insert are one step: a key executes once however many requests race.
func (s *Server) executeLocked(key string, req []byte, fields map[string]json.RawMessage) outcome {
	if t, ok := s.byKey[key]; ok {
		if string(t.request) != string(req) {
			return outcome{conflict: true}
		}
		return outcome{body: t.response, replayed: true}
	}
	s.seq++
	body := appendTransfer(nil, "tr_"+strconv.Itoa(s.seq), key, fields, s.now().UTC())
	s.byKey[key] = &transfer{request: req, response: body}
	return outcome{body: body}
}
