package idempg

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// watch.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed watch.sql
var watchFS embed.FS

// watchQueries holds the named statements of watch.sql.
var watchQueries = sqlfile.MustLoad(watchFS, "watch.sql")

var _ registry.Watcher = (*Store)(nil)

const (
	// waiterTTL is how long a waiter row lives when its watch is never
	// stopped (the process crashed): far above any sensible Prefer: wait
	// cap (idemhttp's default is 10 s). A watch that outlives it may miss
	// its wake-up; the caller's fallback poll still sees the outcome.
	waiterTTL = 5 * time.Minute
	// waiterStopTimeout bounds the delete of a waiter row when a watch
	// stops; a row left behind expires.
	waiterStopTimeout = 5 * time.Second
	// listenBackoffMin and listenBackoffMax bound the pause between two
	// attempts of the listener to connect and LISTEN.
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// Watch implements registry.Watcher with LISTEN/NOTIFY; see
// registry.Watcher for the contract. changed is closed when another
// statement of this database — Finish (Complete, ClaimAndExecute),
// Release, TakeOver or MarkUnknown, in any process — moves the record of
// scope and commits, when the Store's listener loses its connection (a
// notification may have been missed), or when the Store is closed.
//
// The Store keeps one dedicated connection for it (not from the pool),
// opened by the first Watch with the pool's connection settings, which
// runs LISTEN idem_changed and is reopened, with backoff, when it fails.
// Watch registers the watcher locally, waits until LISTEN is active (the
// first time at most until ctx ends) and then inserts a row into
// idem_waiters (migration 012) on the acceptance lane, in its own
// transaction; stop deletes it. The statements that move records notify
// only scopes with such a row, so without waiters they never take the
// notify lock at commit. A Finish that commits between the caller's
// earlier read and the row's insert does not notify: the caller's read
// after Watch returns sees it. A Finish statement that ran before the
// insert but commits after that read does not notify either (it did not
// see the row): the caller's fallback poll catches it.
//
// changed is nil, and the caller falls back to polling, when
// Options.NoListen is set, when LISTEN cannot be set up (the listener is
// reconnecting, or the database refuses it, as a pooler in transaction
// mode does), or when the row cannot be inserted. Watch never fails.
// Safe for concurrent use; ctx governs the setup only.
func (s *Store) Watch(ctx context.Context, scope idem.ScopeHash) (<-chan struct{}, func()) {
	l := s.listener
	if l == nil {
		return nil, func() {}
	}
	ch, id, ok := l.add(ctx, scope)
	if !ok {
		return nil, func() {}
	}
	waiter := l.name + "-" + strconv.FormatUint(id, 10)
	if _, err := s.lane.Exec(ctx, watchQueries.Get("InsertWaiter"), scope[:], waiter, micros(waiterTTL)); err != nil {
		l.remove(scope, id)
		return nil, func() {}
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			l.remove(scope, id)
			ctx, cancel := context.WithTimeout(context.Background(), waiterStopTimeout)
			defer cancel()
			_, _ = s.lane.Exec(ctx, watchQueries.Get("DeleteWaiter"), scope[:], waiter)
		})
	}
}

// listener is a Store's LISTEN connection and its local watchers. The
// goroutine run owns the connection; the rest is guarded by mu.
type listener struct {
	cfg  *pgx.ConnConfig // the pool's connection settings
	name string          // random, names this Store's waiter rows
	next atomic.Uint64   // the last watch ID handed out

	mu        sync.Mutex
	started   bool
	closed    bool
	listening bool          // LISTEN is active on the connection
	ready     chan struct{} // closed after the first attempt to LISTEN
	up        chan struct{} // closed while listening; replaced when that ends
	watchers  map[idem.ScopeHash]map[uint64]chan struct{}
	cancel    context.CancelFunc // stops run
	done      chan struct{}      // closed when run has returned
}

func newListener(cfg *pgx.ConnConfig) *listener {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &listener{
		cfg: cfg, name: hex.EncodeToString(b[:]),
		ready: make(chan struct{}), up: make(chan struct{}), done: make(chan struct{}),
		watchers: map[idem.ScopeHash]map[uint64]chan struct{}{},
	}
}

// add registers a watcher of scope, starting the listener on first use,
// once LISTEN is active; ok false when it is not (yet) or the Store is
// closed. ctx bounds the wait for the first LISTEN.
func (l *listener) add(ctx context.Context, scope idem.ScopeHash) (ch chan struct{}, id uint64, ok bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, 0, false
	}
	if !l.started {
		l.started = true
		runCtx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		go l.run(runCtx)
	}
	l.mu.Unlock()
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.listening {
		return nil, 0, false
	}
	id = l.next.Add(1)
	ch = make(chan struct{})
	if l.watchers[scope] == nil {
		l.watchers[scope] = map[uint64]chan struct{}{}
	}
	l.watchers[scope][id] = ch
	return ch, id, true
}

// remove unregisters watcher id of scope, if still registered.
func (l *listener) remove(scope idem.ScopeHash, id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ws := l.watchers[scope]; ws != nil {
		delete(ws, id)
		if len(ws) == 0 {
			delete(l.watchers, scope)
		}
	}
}

// wake closes the channels of the watchers of scope and unregisters them.
func (l *listener) wake(scope idem.ScopeHash) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.watchers[scope] {
		close(ch)
	}
	delete(l.watchers, scope)
}

// setListening records whether LISTEN is active; when it stops being so
// every watcher is woken, since a notification may be missed until the
// connection is back. The first call closes ready.
func (l *listener) setListening(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on && !l.listening {
		close(l.up)
	} else if !on && l.listening {
		l.up = make(chan struct{})
	}
	l.listening = on
	if !on {
		for scope, ws := range l.watchers {
			for _, ch := range ws {
				close(ch)
			}
			delete(l.watchers, scope)
		}
	}
	select {
	case <-l.ready:
	default:
		close(l.ready)
	}
}

// reconnected returns a channel closed once LISTEN is active (tests).
func (l *listener) reconnected() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

// run connects, LISTENs and dispatches notifications until ctx ends,
// reconnecting with backoff after an error.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := listenBackoffMin
	for {
		conn, err := l.listen(ctx)
		if err == nil {
			l.setListening(true)
			backoff = listenBackoffMin
			err = l.dispatch(ctx, conn)
			conn.Close(context.Background())
		}
		l.setListening(false)
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listen opens the dedicated connection and runs LISTEN on it.
func (l *listener) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return nil, translate(err)
	}
	if _, err := conn.Exec(ctx, watchQueries.Get("Listen")); err != nil {
		conn.Close(context.Background())
		return nil, translate(err)
	}
	return conn, nil
}

// dispatch wakes the watchers of each notified scope until the connection
// fails or ctx ends. A payload that is not a scope wakes nobody.
func (l *listener) dispatch(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return translate(err)
		}
		var scope idem.ScopeHash
		if b, err := hex.DecodeString(n.Payload); err == nil && len(b) == len(scope) {
			copy(scope[:], b)
			l.wake(scope)
		}
	}
}

// close stops the listener, waits for its goroutine to return and wakes
// every watcher.
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	started := l.started
	l.mu.Unlock()
	if started {
		l.cancel()
		<-l.done
	}
	l.setListening(false)
}
