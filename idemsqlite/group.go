package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ownedtx"
	"github.com/idemkit/idem/registry"
)

// DefaultMaxBatch is the number of ExecuteOnce calls one transaction
// commits at most when Options.MaxBatch is zero.
const DefaultMaxBatch = 64

// errBatchAborted is the cause, wrapped in registry.ErrUnavailable, given
// to the members of a batch whose transaction SQLite rolled back as a
// whole (or that could not go on): none of them was executed, and a retry
// runs again.
var errBatchAborted = errors.New("idemsqlite: execute once: the batch transaction was rolled back")

// Statements of the savepoint each member of a batch runs in. They are
// transaction control, not queries: the only SQL kept in Go strings.
const (
	savepoint         = "SAVEPOINT idem_member"
	releaseSavepoint  = "RELEASE idem_member"
	rollbackSavepoint = "ROLLBACK TO idem_member"
)

// committer is the group commit of ExecuteOnce: calls queue as members,
// and one goroutine (run) commits the queued members in one transaction,
// each in its own savepoint, handing the transaction to each member's own
// goroutine in turn. It is safe for concurrent use.
type committer struct {
	s        *Store
	maxBatch int
	ctx      context.Context // of every batch transaction; cancelled by stop
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returns
	wake     chan struct{} // buffered (1): the queue is no longer empty

	mu     sync.Mutex
	queue  []*member
	closed bool

	commits atomic.Int64 // committed batch transactions (for tests)
	taken   atomic.Int64 // members taken into batches (for tests)
	// onEnqueue, when set (tests only), is called with the queue's length
	// after each member joined it, outside the lock.
	onEnqueue func(queued int)
}

// member is one queued ExecuteOnce call.
type member struct {
	ctx   context.Context
	claim registry.Claim
	fn    registry.BusinessFunc
	turn  chan turn   // buffered (1): the committer's hand-over
	done  chan report // buffered (1): the member's work has ended
	acked chan error  // buffered (1): the outcome of the batch's COMMIT
	// state is memberWaiting until the committer hands the member its
	// turn (memberRunning) or the member leaves because its ctx ended
	// first (memberLeft) — also while its batch's BEGIN still waits for
	// the write lock, which another process may hold for long.
	state atomic.Int32
}

// The states of a member.
const (
	memberWaiting int32 = iota
	memberRunning
	memberLeft
)

// turn is what the committer hands a member: the batch transaction, or
// the error to return without running.
type turn struct {
	tx    *sql.Tx
	alone bool // the only member of its batch: no savepoint needed
	err   error
}

// newCommitter starts the committer of s; maxBatch is at least 2.
func newCommitter(s *Store, maxBatch int) *committer {
	ctx, cancel := context.WithCancel(context.Background())
	g := &committer{s: s, maxBatch: maxBatch, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	go g.run()
	return g
}

// maxBatch returns the batch size of Options.MaxBatch: DefaultMaxBatch
// for zero or less.
func maxBatch(n int) int {
	if n <= 0 {
		return DefaultMaxBatch
	}
	return n
}

// stop fails the queued members with the closed error, ends the
// transaction of the batch in progress (its members fail) and waits for
// the committer's goroutine to return, which is once the business
// function running at that moment, if any, has returned. It is safe to
// call more than once.
func (g *committer) stop() {
	g.mu.Lock()
	g.closed = true
	queued := g.queue
	g.queue = nil
	g.mu.Unlock()
	for _, m := range queued {
		m.turn <- turn{err: g.s.checkOpen()}
	}
	g.cancel()
	<-g.done
}

// enqueue adds m to the queue; false when the committer is stopped.
func (g *committer) enqueue(m *member) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.queue = append(g.queue, m)
	n := len(g.queue)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	if g.onEnqueue != nil {
		g.onEnqueue(n)
	}
	return true
}

// remove takes m out of the queue; false when the committer already took
// it into a batch (or failed it).
func (g *committer) remove(m *member) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == m {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// take waits for the queue to be non-empty and takes up to maxBatch
// members from its head, without waiting for more; nil when stopped.
func (g *committer) take() []*member {
	for {
		g.mu.Lock()
		if n := min(len(g.queue), g.maxBatch); n > 0 {
			batch := append([]*member(nil), g.queue[:n]...)
			g.queue = append(g.queue[:0], g.queue[n:]...)
			g.taken.Add(int64(n))
			g.mu.Unlock()
			return batch
		}
		g.mu.Unlock()
		select {
		case <-g.wake:
		case <-g.ctx.Done():
			return nil
		}
	}
}

// run commits batches until stop.
func (g *committer) run() {
	defer close(g.done)
	for {
		batch := g.take()
		if batch == nil {
			return
		}
		g.commit(batch)
	}
}

// commit runs the members of one batch in turn in one transaction and
// commits it, then tells the members that wait for it the outcome.
func (g *committer) commit(batch []*member) {
	octx, o := ownedtx.Context(g.ctx)
	tx, err := g.s.db.BeginTx(octx, nil)
	if err != nil {
		err = g.s.fail("execute once", err)
		for _, m := range batch {
			m.turn <- turn{err: err}
		}
		return
	}
	var dead error // set once the batch can neither go on nor commit
	waiting := make([]*member, 0, len(batch))
	alone := len(batch) == 1
	for _, m := range batch {
		if dead == nil && g.ctx.Err() != nil {
			dead = g.s.checkOpen()
		}
		if dead != nil {
			m.turn <- turn{err: dead}
			continue
		}
		if !m.state.CompareAndSwap(memberWaiting, memberRunning) {
			continue // it left: its ctx ended while the batch began
		}
		m.turn <- turn{tx: tx, alone: alone}
		r := <-m.done
		if r.dead {
			dead = fmt.Errorf("%w: %w", registry.ErrUnavailable, errBatchAborted)
		}
		if r.waits {
			waiting = append(waiting, m)
		}
	}
	if dead == nil && len(waiting) == 0 { // nothing to acknowledge
		_ = tx.Rollback()
		return
	}
	if dead == nil {
		if err := ownedtx.Commit(tx, o); err != nil {
			dead = g.s.fail("execute once: commit", err)
		} else {
			g.commits.Add(1)
		}
	} else {
		_ = tx.Rollback() // may fail: SQLite may have rolled back already
	}
	for _, m := range waiting {
		m.acked <- dead
	}
}

// report is what a member tells the committer when its work has ended.
type report struct {
	waits bool // the member's result stands only if the batch commits
	dead  bool // the batch transaction is gone or unusable
}

// execute is ExecuteOnce through the committer: it queues a member for c
// and fn and returns its result once its batch has committed.
func (g *committer) execute(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	m := &member{ctx: ctx, claim: c, fn: fn,
		turn: make(chan turn, 1), done: make(chan report, 1), acked: make(chan error, 1)}
	if !g.enqueue(m) {
		return registry.Result{}, g.s.checkOpen()
	}
	var t turn
	select {
	case t = <-m.turn:
	case <-ctx.Done():
		if g.remove(m) || m.state.CompareAndSwap(memberWaiting, memberLeft) {
			return registry.Result{}, g.s.fail("execute once", ctx.Err())
		}
		t = <-m.turn // its turn has come: take it
	}
	if t.err != nil {
		return registry.Result{}, t.err
	}
	r, res, err := g.work(m, t)
	m.done <- r
	if !r.waits {
		return res, err
	}
	if err := <-m.acked; err != nil {
		return registry.Result{}, err
	}
	return res, nil
}

// work is a member's turn, run on the member's goroutine: in a savepoint
// of tx, the claim, fn and the record exactly as ClaimAndExecute does;
// the savepoint is rolled back on any error or a lost claim (whose
// verdict comes from the record as tx sees it) and released otherwise.
// If fn panics or exits its goroutine, the savepoint is rolled back and
// the committer told before the panic goes on. The only member of a batch
// needs no savepoint: the committer rolls the transaction back unless the
// member waits for the commit.
func (g *committer) work(m *member, t turn) (r report, res registry.Result, err error) {
	tx := t.tx
	if err := m.ctx.Err(); err != nil { // touches nothing
		return report{}, registry.Result{}, g.s.fail("execute once", err)
	}
	if t.alone {
		ended := false
		defer func() {
			if !ended {
				m.done <- report{}
			}
		}()
		res, err = g.claim(m, tx)
		ended = true
		return report{waits: err == nil}, res, err
	}
	if _, err := tx.ExecContext(g.ctx, savepoint); err != nil {
		return report{dead: true}, registry.Result{}, g.s.fail("execute once: savepoint", err)
	}
	ended := false
	defer func() {
		if !ended { // fn panicked or called runtime.Goexit
			m.done <- report{dead: !g.undo(tx)}
		}
	}()
	res, err = g.claim(m, tx)
	ended = true
	if err != nil || res.Verdict != registry.Execute {
		return report{waits: err == nil, dead: !g.undo(tx)}, res, err
	}
	if _, err := tx.ExecContext(g.ctx, releaseSavepoint); err != nil {
		return report{waits: true, dead: true}, res, nil
	}
	return report{waits: true}, res, nil
}

// undo rolls back to and releases the member's savepoint; false when that
// failed: SQLite rolled back the whole transaction (an interrupted write,
// SQLITE_FULL, IOERR, a RAISE(ROLLBACK) …), or it is otherwise unusable.
func (g *committer) undo(tx *sql.Tx) bool {
	if _, err := tx.ExecContext(g.ctx, rollbackSavepoint); err != nil {
		return false
	}
	_, err := tx.ExecContext(g.ctx, releaseSavepoint)
	return err == nil
}

// claim is ClaimAndExecute inside a savepoint of the batch transaction.
// The claim, the re-read of a lost claim and the record run with the
// committer's context after checking the member's: SQLite rolls back the
// whole transaction, the batch, when a write is interrupted. fn gets the
// member's context, and a registry.Tx whose statements are not
// interrupted by it either (see batchTx).
func (g *committer) claim(m *member, tx *sql.Tx) (registry.Result, error) {
	s, ctx, c := g.s, g.ctx, m.claim
	c.MaxActive = 0
	rec, insErr := s.claimInsert(ctx, tx, c)
	if insErr != nil {
		existing, err := s.scanRecord(s.txStmt(ctx, tx, "GetByScope").QueryRowContext(ctx, c.Scope[:]))
		if err != nil {
			err = s.fail("get", err)
		}
		return s.lostClaim(c, insErr, existing, err)
	}
	// The claim is never seen as RESERVED: for fn, and for the outcomes
	// it may return, the operation is executing.
	seen := rec
	seen.State = idem.StateExecuting
	out, err := m.fn(m.ctx, batchTx{sqlTx{tx}}, seen)
	if err != nil {
		return registry.Result{}, err
	}
	if !out.State.Terminal() {
		return registry.Result{}, fmt.Errorf("idemsqlite: execute once: outcome state %q is not terminal", out.State)
	}
	if err := m.ctx.Err(); err != nil {
		return registry.Result{}, s.fail("execute once", err)
	}
	done, err := s.record(ctx, tx, rec, out)
	if err != nil {
		return registry.Result{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil
}

// batchTx is the registry.Tx of a business function in a batch: its
// statements fail with ctx's error if ctx has ended, and otherwise run to
// completion without being interrupted when ctx ends, since SQLite rolls
// back the whole transaction — every member's work — when it interrupts
// a write. Native returns the *sql.Tx, whose statements have no such
// protection.
type batchTx struct{ sqlTx }

func (t batchTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return t.sqlTx.Exec(context.WithoutCancel(ctx), query, args...)
}

func (t batchTx) QueryRow(ctx context.Context, query string, args ...any) registry.Row {
	return t.sqlTx.QueryRow(ctxOrDone(ctx), query, args...)
}

func (t batchTx) Query(ctx context.Context, query string, args ...any) (registry.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.sqlTx.Query(context.WithoutCancel(ctx), query, args...)
}

// ctxOrDone returns ctx itself when it has ended (database/sql then fails
// the statement without running it), else ctx without its cancellation.
func ctxOrDone(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
