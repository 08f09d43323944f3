package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Options configures a Server made by Open.
type Options struct {
	// State is the state file (journal.go): "" keeps the state in memory
	// only, as New does, and a restart forgets every key.
	State string
	// Events, when its URL is set, sends a signed event for each key
	// that executes or is declined (events.go).
	Events Events
	// Latency delays the answer to every POST /transfers by this long
	// before the request is decided, as the round trip to a remote
	// provider would (a PSP's is typically 20 ms); a request whose
	// context ends meanwhile is aborted with nothing decided. 0, the
	// default, answers at once; a negative value is refused.
	Latency time.Duration
}

// Open returns a provider in ModeOK with the keys of opts.State, if any,
// already answered as before, and starts sending opts.Events. An error
// means the state file cannot be read or written, or is not a provider's
// (nothing is started then). Close stops it.
func Open(opts Options) (*Server, error) {
	if opts.Events.URL != "" && len(opts.Events.Secret) == 0 {
		return nil, errors.New("provider: events need a signing secret")
	}
	if opts.Latency < 0 {
		return nil, errors.New("provider: negative latency")
	}
	s := New()
	s.latency = opts.Latency
	s.events = opts.Events.URL != ""
	if opts.State != "" {
		j, entries, err := openJournal(opts.State)
		if err != nil {
			return nil, err
		}
		s.journal = j
		if err := s.load(entries); err != nil {
			j.close()
			return nil, err
		}
	}
	if s.events {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop, s.stopped = cancel, make(chan struct{})
		go func() {
			defer close(s.stopped)
			s.sendEvents(ctx, opts.Events)
		}()
	}
	return s, nil
}

// load puts the entries of a state file back in memory, in order.
func (s *Server) load(entries []journalEntry) error {
	delivered := map[string]bool{}
	for _, e := range entries {
		if e.Delivered != "" {
			delivered[e.Delivered] = true
			continue
		}
		if _, ok := s.byKey[e.Key]; ok {
			continue // a key's first line counts
		}
		if !json.Valid([]byte(e.Response)) {
			return fmt.Errorf("provider: state file: the answer recorded for a key is not JSON")
		}
		t := &transfer{request: []byte(e.Request), declined: e.Declined, response: []byte(e.Response)}
		s.byKey[e.Key] = t
		if t.declined {
			s.declined++
		} else {
			s.executed = append(s.executed, t)
		}
		if s.events && e.Event != "" {
			s.pending[e.Event] = &pendingEvent{id: e.Event, body: []byte(e.EventBody)}
		}
	}
	for id := range delivered {
		delete(s.pending, id)
	}
	return nil
}

// Close stops the event sender (an attempt in flight is cut off; its
// event is sent again after a restart on the same state file) and closes
// the state file; with one, a request for a new key after it is answered 503
// PROVIDER_FAILURE, nothing executed. Close is for the end of serving.
func (s *Server) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.stopped
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil || s.closed {
		return nil
	}
	s.closed = true
	return s.journal.close()
}

// recordLocked makes t what became of key: written to the state file,
// when there is one, before anything else sees it, then kept in memory,
// its event queued. An error means the state file refused the line: the
// key stays new here (the line may still be on disk, so a restart may
// find it executed: a 5xx proves nothing).
func (s *Server) recordLocked(key string, t *transfer, fields map[string]json.RawMessage) error {
	id := eventID(key)
	body := eventBody(key, t, fields, s.now())
	if s.closed {
		return errors.New("provider: closed: its state file no longer records keys")
	}
	if s.journal != nil {
		if err := s.journal.append(journalEntry{
			Key: key, Request: string(t.request), Declined: t.declined, Response: string(t.response),
			Event: id, EventBody: string(body),
		}); err != nil {
			return err
		}
	}
	s.byKey[key] = t
	if s.events {
		s.pending[id] = &pendingEvent{id: id, body: body}
	}
	return nil
}
