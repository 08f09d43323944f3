package console

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// maxSessions bounds the live sessions of one console. A login past it
// first forgets the expired ones, then the one that would end soonest.
const maxSessions = 10000

// sessions are the live sessions of one console, by ID: a cookie logs in
// only while its ID is here. Logout removes it; SetOperators removes the
// sessions of operators no longer listed. The cookie is signed with a key
// only this console holds, so it is accepted nowhere else: this table is
// the one place a session can be ended, and ending it here ends it
// everywhere it works. It is safe for concurrent use.
type sessions struct {
	mu   sync.Mutex
	byID map[string]liveSession
}

type liveSession struct {
	name  string
	until time.Time
}

func (s *sessions) add(id, name string, until, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]liveSession{}
	}
	if len(s.byID) >= maxSessions {
		soonest := ""
		for k, v := range s.byID {
			if !now.Before(v.until) {
				delete(s.byID, k)
			} else if soonest == "" || v.until.Before(s.byID[soonest].until) {
				soonest = k
			}
		}
		if len(s.byID) >= maxSessions {
			delete(s.byID, soonest)
		}
	}
	s.byID[id] = liveSession{name, until}
}

func (s *sessions) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byID[id]
	return ok
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// keep ends every session whose operator keep refuses, and returns how
// many it ended.
func (s *sessions) keep(keep func(name string) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.byID {
		if !keep(v.name) {
			delete(s.byID, k)
			n++
		}
	}
	return n
}

// SetOperators replaces the operators of the console h (made by New)
// with ops, checked as New checks Config.Operators; on error nothing
// changes. Sessions of operators who are no longer listed end at once,
// and so does every session logged in with a token no longer in ops (a
// session is bound to its token, not just to the name). Safe for
// concurrent use with requests being served.
func SetOperators(h http.Handler, ops Operators) error {
	c, ok := h.(*handler)
	if !ok {
		return fmt.Errorf("console: SetOperators needs the handler New returned, not %T", h)
	}
	if err := ops.validate(); err != nil {
		return fmt.Errorf("console: operators: %w", err)
	}
	c.ops.Store(&ops)
	if n := c.sessions.keep(func(name string) bool { _, ok := ops.byName(name); return ok }); n > 0 {
		c.log.Info("console: sessions of removed operators ended", "sessions", n)
	}
	return nil
}
