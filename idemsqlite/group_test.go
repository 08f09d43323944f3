package idemsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/idemkit/idem/registry"
)

// Tests of the group commit of ExecuteOnce (group.go). Every test makes
// its batch deterministic: a first call ("hold") occupies the committer
// with a business function that waits, the calls under test queue behind
// it in a known order, and the committer takes them together once hold
// is released.

// held is a Store whose committer is occupied by the hold call.
type held struct {
	t       *testing.T
	s       *Store
	queued  chan int      // the queue's length after each enqueue
	release chan struct{} // closed: the hold call's fn returns
	hold    chan error    // the hold call's error
}

// holdCommitter opens a Store with the bench_payments table and the
// tables of ddl, and occupies its committer with a call whose fn waits
// for release.
func holdCommitter(t *testing.T, ddl ...string) *held {
	t.Helper()
	s, _ := openTest(t)
	for _, stmt := range append([]string{benchPayments}, ddl...) {
		if _, err := s.DB().Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	h := &held{t: t, s: s, queued: make(chan int, 256), release: make(chan struct{}), hold: make(chan error, 1)}
	s.group.onEnqueue = func(n int) { h.queued <- n }
	started := make(chan struct{})
	go func() {
		_, err := s.ExecuteOnce(context.Background(), newClaim("hold"),
			func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
				close(started)
				<-h.release
				return pay(ctx, tx, rec)
			})
		h.hold <- err
	}()
	<-h.queued
	<-started
	return h
}

// call is the outcome of one ExecuteOnce.
type call struct {
	res registry.Result
	err error
}

// enqueue starts ExecuteOnce(ctx, c, fn) and returns once it is queued,
// after the calls enqueued before it.
func (h *held) enqueue(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) chan call {
	h.t.Helper()
	out := make(chan call, 1)
	go func() {
		res, err := h.s.ExecuteOnce(ctx, c, fn)
		out <- call{res, err}
	}()
	<-h.queued
	return out
}

// run releases the hold call, checks it committed and returns the
// results of calls, in order.
func (h *held) run(calls ...chan call) []call {
	h.t.Helper()
	close(h.release)
	if err := <-h.hold; err != nil {
		h.t.Fatalf("hold call: %v", err)
	}
	got := make([]call, len(calls))
	for i, c := range calls {
		got[i] = <-c
	}
	return got
}

// rows counts the payments of an operation.
func (h *held) rows(operationID string) int {
	h.t.Helper()
	var n int
	if err := h.s.DB().QueryRow(`SELECT count(*) FROM bench_payments WHERE id = $1`, operationID).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// recorded reports whether the scope of c has a record.
func (h *held) recorded(c registry.Claim) bool {
	h.t.Helper()
	_, err := h.s.Get(h.t.Context(), c.Scope)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		h.t.Fatal(err)
	}
	return err == nil
}

// executed checks that a call executed and committed its payment.
func (h *held) executed(i int, c call) {
	h.t.Helper()
	if c.err != nil || c.res.Verdict != registry.Execute {
		h.t.Errorf("call %d: verdict %v err %v, want Execute", i, c.res.Verdict, c.err)
		return
	}
	if n := h.rows(c.res.Record.OperationID); n != 1 {
		h.t.Errorf("call %d: %d payments, want 1", i, n)
	}
	if !h.recorded(registry.Claim{Scope: c.res.Record.Scope}) {
		h.t.Errorf("call %d: no record", i)
	}
}

var errBusiness = errors.New("business failure")

// payThenFail inserts its payment and fails.
func payThenFail(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
	if _, err := pay(ctx, tx, rec); err != nil {
		return registry.Outcome{}, err
	}
	return registry.Outcome{}, errBusiness
}

// mustNotRun fails the test if the business function runs.
func mustNotRun(t *testing.T) registry.BusinessFunc {
	return func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		t.Error("business function ran")
		return registry.Outcome{}, errBusiness
	}
}

func TestGroupCommitBatches(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	const n = 20
	ready := make(chan struct{})
	counted := make(chan struct{})
	h.s.group.onEnqueue = func(q int) {
		if q == n {
			close(counted)
		}
	}
	close(ready)
	calls := make([]chan call, n)
	for i := range calls {
		calls[i] = make(chan call, 1)
		go func() {
			<-ready
			res, err := h.s.ExecuteOnce(t.Context(), newClaim("pay"), pay)
			calls[i] <- call{res, err}
		}()
	}
	<-counted
	for i, c := range h.run(calls...) {
		h.executed(i, c)
	}
	if got := h.s.group.commits.Load(); got != 2 {
		t.Errorf("%d transactions committed, want 2 (the hold call, then the %d queued calls together)", got, n)
	}
}

func TestGroupCommitMemberError(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()
	b := newClaim("pay")
	got := h.run(
		h.enqueue(ctx, newClaim("pay"), pay),
		h.enqueue(ctx, b, payThenFail),
		h.enqueue(ctx, newClaim("pay"), pay),
	)
	h.executed(0, got[0])
	h.executed(2, got[2])
	if !errors.Is(got[1].err, errBusiness) || got[1].err != errBusiness {
		t.Errorf("failing call: %v, want fn's error unchanged", got[1].err)
	}
	if h.recorded(b) {
		t.Error("the failing call's claim was committed")
	}
	var total int
	if err := h.s.DB().QueryRow(`SELECT count(*) FROM bench_payments`).Scan(&total); err != nil || total != 3 {
		t.Errorf("%d payments (err %v), want 3: hold, first, third", total, err)
	}
	if got := h.s.group.commits.Load(); got != 2 {
		t.Errorf("%d transactions committed, want 2", got)
	}
}

func TestGroupCommitDuplicates(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()
	c := newClaim("pay")
	calls := make([]chan call, 8)
	for i := range calls {
		calls[i] = h.enqueue(ctx, c, pay)
	}
	got := h.run(calls...)
	h.executed(0, got[0])
	for i, r := range got[1:] {
		if r.err != nil || r.res.Verdict != registry.Replay || r.res.Record.OperationID != got[0].res.Record.OperationID {
			t.Errorf("duplicate %d: verdict %v err %v operation %s, want Replay of %s",
				i+1, r.res.Verdict, r.err, r.res.Record.OperationID, got[0].res.Record.OperationID)
		}
	}
	if got := h.s.group.commits.Load(); got != 2 {
		t.Errorf("%d transactions committed, want 2", got)
	}
}

func TestGroupCommitContextEnded(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()

	// Ended while queued: the call leaves the queue at once.
	qctx, qcancel := context.WithCancel(ctx)
	queued := h.enqueue(qctx, newClaim("pay"), mustNotRun(t))
	qcancel()
	if r := <-queued; !errors.Is(r.err, context.Canceled) {
		t.Errorf("call cancelled in the queue: %v, want context.Canceled", r.err)
	}

	// Ended in the batch, before its turn: an earlier member cancels it.
	cctx, ccancel := context.WithCancel(ctx)
	c := newClaim("pay")
	got := h.run(
		h.enqueue(ctx, newClaim("pay"), func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			ccancel()
			return pay(ctx, tx, rec)
		}),
		h.enqueue(cctx, c, mustNotRun(t)),
		h.enqueue(ctx, newClaim("pay"), pay),
	)
	h.executed(0, got[0])
	h.executed(2, got[2])
	if !errors.Is(got[1].err, context.Canceled) {
		t.Errorf("call cancelled before its turn: %v, want context.Canceled", got[1].err)
	}
	if h.recorded(c) {
		t.Error("the cancelled call's claim was committed")
	}
}

func TestGroupCommitPanic(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()
	panicked := make(chan any, 1)
	p := newClaim("pay")
	first := h.enqueue(ctx, newClaim("pay"), pay)
	go func() {
		defer func() { panicked <- recover() }()
		h.s.ExecuteOnce(ctx, p, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			pay(ctx, tx, rec)
			panic("business panic")
		})
	}()
	<-h.queued
	third := h.enqueue(ctx, newClaim("pay"), pay)
	got := h.run(first, third)
	if r := <-panicked; r != "business panic" {
		t.Errorf("the panicking call's goroutine recovered %v", r)
	}
	h.executed(0, got[0])
	h.executed(2, got[1])
	if h.recorded(p) {
		t.Error("the panicking call's claim was committed")
	}
}

// TestGroupCommitBatchRolledBack kills the batch transaction: a trigger's
// RAISE(ROLLBACK) makes SQLite roll back the whole transaction, as an
// interrupted write, SQLITE_FULL or IOERR may.
func TestGroupCommitBatchRolledBack(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t, `CREATE TABLE doomed (id TEXT);
		CREATE TRIGGER doomed_insert BEFORE INSERT ON doomed BEGIN SELECT RAISE(ROLLBACK, 'batch killed'); END`)
	ctx := t.Context()
	a, k, c := newClaim("pay"), newClaim("pay"), newClaim("pay")
	got := h.run(
		h.enqueue(ctx, a, pay),
		h.enqueue(ctx, k, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO doomed (id) VALUES ($1)`, rec.OperationID); err != nil {
				return registry.Outcome{}, err
			}
			return benchOutcome, nil
		}),
		h.enqueue(ctx, c, mustNotRun(t)),
	)
	if !errors.Is(got[0].err, registry.ErrUnavailable) || !errors.Is(got[0].err, errBatchAborted) {
		t.Errorf("member before the failure: %v %v, want ErrUnavailable (batch aborted)", got[0].res.Verdict, got[0].err)
	}
	if got[1].err == nil || !strings.Contains(got[1].err.Error(), "batch killed") {
		t.Errorf("the failing member: %v, want its own statement's error", got[1].err)
	}
	if !errors.Is(got[2].err, registry.ErrUnavailable) {
		t.Errorf("member after the failure: %v, want ErrUnavailable", got[2].err)
	}
	for i, cl := range []registry.Claim{a, k, c} {
		if h.recorded(cl) {
			t.Errorf("member %d was recorded", i)
		}
	}
	if got := h.s.group.commits.Load(); got != 1 {
		t.Errorf("%d transactions committed, want 1 (the hold call)", got)
	}
	res, err := h.s.ExecuteOnce(ctx, newClaim("pay"), pay)
	h.executed(3, call{res, err})
}

// TestGroupCommitCommitFails makes the COMMIT itself fail: a deferred
// foreign key is checked only then.
func TestGroupCommitCommitFails(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t, `CREATE TABLE parent (id TEXT PRIMARY KEY);
		CREATE TABLE child (parent TEXT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`)
	ctx := t.Context()
	claims := []registry.Claim{newClaim("pay"), newClaim("pay"), newClaim("pay")}
	got := h.run(
		h.enqueue(ctx, claims[0], pay),
		h.enqueue(ctx, claims[1], func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO child (parent) VALUES ($1)`, "missing"); err != nil {
				return registry.Outcome{}, err
			}
			return benchOutcome, nil
		}),
		h.enqueue(ctx, claims[2], pay),
	)
	for i, r := range got {
		if sqliteCode(r.err) != 787 { // SQLITE_CONSTRAINT_FOREIGNKEY
			t.Errorf("member %d: verdict %v err %v; want the commit's foreign key error", i, r.res.Verdict, r.err)
		}
		if h.recorded(claims[i]) {
			t.Errorf("member %d was recorded", i)
		}
	}
	res, err := h.s.ExecuteOnce(ctx, newClaim("pay"), pay)
	h.executed(3, call{res, err})
}

func TestGroupCommitClose(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()
	calls := []chan call{
		h.enqueue(ctx, newClaim("pay"), mustNotRun(t)),
		h.enqueue(ctx, newClaim("pay"), mustNotRun(t)),
		h.enqueue(ctx, newClaim("pay"), mustNotRun(t)),
	}
	closed := make(chan struct{})
	go func() {
		h.s.Close()
		close(closed)
	}()
	// The queued calls fail while the hold call's fn still runs.
	for i, c := range calls {
		if r := <-c; !errors.Is(r.err, registry.ErrUnavailable) || !errors.Is(r.err, errClosed) {
			t.Errorf("queued call %d: %v, want ErrUnavailable (closed)", i, r.err)
		}
	}
	close(h.release)
	<-closed
	// Its transaction was rolled back under it: fn's own statement
	// fails, and fn's error is returned unchanged.
	if err := <-h.hold; err == nil {
		t.Error("the call running at Close returned no error")
	}
	if _, err := h.s.ExecuteOnce(ctx, newClaim("pay"), mustNotRun(t)); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("ExecuteOnce after Close: %v, want ErrUnavailable", err)
	}
}

// cancels holds the cancel functions idem_test_cancel(id) calls.
var cancels sync.Map // int64 → context.CancelFunc

func init() {
	// idem_test_cancel(id) cancels the context registered under id, from
	// inside the statement that calls it, and returns 0.
	sqlite.MustRegisterScalarFunction("idem_test_cancel", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if f, ok := cancels.Load(args[0]); ok {
			f.(context.CancelFunc)()
		}
		return int64(0), nil
	})
}

// TestGroupCommitInterrupted: a business function's write, through the
// *sql.Tx of Native, is interrupted when its context ends (modernc.org/
// sqlite calls sqlite3_interrupt), and SQLite rolls back the whole
// transaction: no member of the batch is acknowledged, and the members
// after it fail without running. (Through the registry.Tx, statements are
// not interrupted: see batchTx.)
func TestGroupCommitInterrupted(t *testing.T) {
	t.Parallel()
	h := holdCommitter(t)
	ctx := t.Context()
	kctx, kcancel := context.WithCancel(ctx)
	id := time.Now().UnixNano()
	cancels.Store(id, kcancel)
	defer cancels.Delete(id)
	a, k, c := newClaim("pay"), newClaim("pay"), newClaim("pay")
	got := h.run(
		h.enqueue(ctx, a, pay),
		h.enqueue(kctx, k, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			_, err := tx.Native().(*sql.Tx).ExecContext(ctx, `INSERT INTO bench_payments (id, amount)
				WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10000000)
				SELECT 'row' || x, idem_test_cancel($1) FROM n`, id)
			if err == nil {
				err = errors.New("the statement was not interrupted")
			}
			return registry.Outcome{}, err
		}),
		h.enqueue(ctx, c, mustNotRun(t)),
	)
	if !errors.Is(got[0].err, registry.ErrUnavailable) || !errors.Is(got[0].err, errBatchAborted) {
		t.Errorf("member before the interrupted one: %v %v, want ErrUnavailable (batch aborted)", got[0].res.Verdict, got[0].err)
	}
	if got[1].err == nil || strings.Contains(got[1].err.Error(), "not interrupted") {
		t.Errorf("interrupted member: %v", got[1].err)
	}
	if !errors.Is(got[2].err, registry.ErrUnavailable) {
		t.Errorf("member after the interrupted one: %v, want ErrUnavailable", got[2].err)
	}
	for i, cl := range []registry.Claim{a, k, c} {
		if h.recorded(cl) {
			t.Errorf("member %d was recorded", i)
		}
	}
	res, err := h.s.ExecuteOnce(ctx, newClaim("pay"), pay)
	h.executed(3, call{res, err})
}

// TestExecuteOnceUnbatched: MaxBatch 1 runs every call in a transaction
// of its own, without a committer.
func TestExecuteOnceUnbatched(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), Options{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.group != nil {
		t.Fatal("MaxBatch 1 started a committer")
	}
	if _, err := s.DB().Exec(benchPayments); err != nil {
		t.Fatal(err)
	}
	c := newClaim("pay")
	res, err := s.ExecuteOnce(t.Context(), c, pay)
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: %v %v", res.Verdict, err)
	}
	again, err := s.ExecuteOnce(t.Context(), c, mustNotRun(t))
	if err != nil || again.Verdict != registry.Replay || again.Record.OperationID != res.Record.OperationID {
		t.Errorf("duplicate: %v %v, want Replay", again.Verdict, err)
	}
	if got := maxBatch(0); got != DefaultMaxBatch {
		t.Errorf("maxBatch(0) = %d, want %d", got, DefaultMaxBatch)
	}
}

// TestGroupCommitLeavesWhileLocked: another process holds the write lock,
// so the committer's BEGIN waits (SQLite's busy timeout, 10 s); a member
// whose ctx ends meanwhile returns at once with its ctx's error — while
// the lock is still held — instead of waiting for a turn that cannot come
// before the lock is free. Afterwards the Store works.
func TestGroupCommitLeavesWhileLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, _ := openTestAt(t, path)
	if _, err := s.DB().Exec(benchPayments); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan call, 1)
	go func() {
		res, err := s.ExecuteOnce(ctx, newClaim("locked"), mustNotRun(t))
		done <- call{res, err}
	}()
	// Wait until the committer took the call into a batch (the queue is
	// empty again): its BEGIN now waits for the lock.
	for taken := false; !taken; {
		s.group.mu.Lock()
		taken = len(s.group.queue) == 0 && s.group.taken.Load() > 0
		s.group.mu.Unlock()
		if !taken {
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	got := <-done
	if !errors.Is(got.err, context.Canceled) {
		t.Errorf("ExecuteOnce whose ctx ended while its batch waited for the lock: %v, want context.Canceled", got.err)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if res, err := s.ExecuteOnce(t.Context(), newClaim("after"), pay); err != nil || res.Verdict != registry.Execute {
		t.Fatalf("after the lock was released: %v %v", res.Verdict, err)
	}
}
