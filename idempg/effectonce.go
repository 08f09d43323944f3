package idempg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Effects in the one-transaction style: two durable commits per
// execution (registry/effects.go).

// newOperationID returns c.OperationID, or a new operation ID stamped
// with now when the caller set none.
func newOperationID(c registry.Claim, now time.Time) string {
	return cmp.Or(c.OperationID, idem.NewOperationID(now, c.Scope))
}

// ReserveEffect inserts c's record in EXECUTING and the attempt of the
// effect name in one durable transaction; see registry.EffectStore.
//
// Round trips: one. BEGIN, EffectDurable, the insert (effects.sql,
// EffectReserve), the attempt's upsert and COMMIT go to the server in one
// pipelined batch, as the outcome's batch does (runLazy): the insert
// fails — a unique violation when the scope has a record (committed, or
// inserted by a concurrent transaction, whose end it waits for), IDM01
// when the writer fence or the active limit held — and so aborts the
// transaction, and the COMMIT behind it rolls back. Then the scope's
// record, read afresh, decides (lostInsert). The batch is waited for
// whatever ctx does, as a COMMIT must be (commit.go); a wait for a lock
// still ends with ctx's deadline (lock_timeout). ctx governs the
// connection and the statements' preparation.
//
// Durability: synchronous whatever the session's or server's
// synchronous_commit, as BeginEffect's: the downstream key must be on
// disk before the call.
func (s *Store) ReserveEffect(ctx context.Context, c registry.Claim, name string, request []byte) (registry.Result, registry.Effect, error) {
	if name == "" {
		return registry.Result{}, registry.Effect{}, errors.New("idempg: reserve effect: empty effect name")
	}
	now, goNow := s.clock()
	id := newOperationID(c, goNow)
	reqKey, req, err := registry.SealBody(s.sealer, request, registry.EffectPartOf(id, name, "request"))
	if err != nil {
		return registry.Result{}, registry.Effect{}, fmt.Errorf("idempg: reserve effect %s/%s: %w", id, name, err)
	}
	rec, eff, insertErr, err := s.reserveEffect(ctx, c, id, name, now, req, reqKey)
	switch {
	case err != nil:
		return registry.Result{}, registry.Effect{}, fmt.Errorf("idempg: reserve effect %s/%s: %w", id, name, err)
	case isFenced(insertErr):
		insertErr = cmp.Or(writerFenced(ctx, s.lane, c.WriterEpoch), registry.ErrActiveLimit)
		fallthrough
	case insertErr != nil:
		res, err := s.lostInsert(ctx, "reserve effect", c, insertErr)
		return res, registry.Effect{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: rec}, eff, nil
}

// reserveEffect runs ReserveEffect's transaction on a connection of its
// own. insertErr is why the record was not inserted (rolled back: the
// scope's record decides); err is any other failure, nothing committed
// unless it is the COMMIT's own.
func (s *Store) reserveEffect(ctx context.Context, c registry.Claim, id, name string, now *time.Time, req []byte, reqKey *string) (rec registry.Record, eff registry.Effect, insertErr, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rec, eff, nil, translate(err)
	}
	defer conn.Release() // a connection left inside a transaction is closed, not reused
	reserve, upsert := effectQueries.Get("EffectReserve"), effectQueries.Get("EffectUpsert")
	if s.prepares {
		// Prepared under ctx, as runLazy prepares its statement: parsing
		// an INSERT takes its table's lock, a wait that must end with ctx.
		for _, q := range []string{reserve, upsert} {
			if _, err := conn.Conn().Prepare(ctx, q, q); err != nil {
				return rec, eff, nil, fmt.Errorf("prepare: %w", translate(err))
			}
		}
	}
	batch := &pgx.Batch{}
	batch.Queue("begin")
	batch.Queue(effectQueries.Get("EffectDurable"))
	lockBound := false
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			return rec, eff, nil, translate(context.DeadlineExceeded)
		}
		batch.Queue("SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(max(left.Milliseconds(), 1), 10)+"ms")
		lockBound = true
	}
	batch.Queue(reserve, append(claimArgs(c, id, now), max(c.MaxActive, 0))...)
	batch.Queue(upsert, id, name, registry.DownstreamKey(id, name), int64(1), now, req, reqKey)
	batch.Queue("commit")
	results := conn.SendBatch(commitCtx(ctx), batch)
	_, err = results.Exec() // begin
	if err == nil {
		_, err = results.Exec() // EffectDurable
	}
	if err == nil && lockBound {
		_, err = results.Exec()
	}
	if err == nil {
		if rec, err = s.scanRecord(results.QueryRow()); err != nil {
			insertErr = err // the insert's own failure: the transaction is aborted
		}
	}
	if err == nil {
		eff, err = s.scanEffect(results.QueryRow())
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = results.Exec() // commit
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
		if staleStatement(err) {
			_ = conn.Conn().Deallocate(context.WithoutCancel(ctx), reserve)
			_ = conn.Conn().Deallocate(context.WithoutCancel(ctx), upsert)
		}
		if insertErr != nil {
			return rec, eff, insertErr, nil
		}
		return rec, eff, nil, translate(err)
	}
	if tag.String() != "COMMIT" {
		return rec, eff, nil, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	return rec, eff, nil, nil
}

// CompleteEffects records the answers and the outcome of rec in one
// durable transaction; see registry.EffectStore. One statement
// (effects.sql, FinishWithAnswers) does both, fenced as Complete's
// Finish: BEGIN, it and COMMIT go to the server in one pipelined batch,
// one round trip, and a fenced statement aborts the transaction so that
// the COMMIT behind it rolls back. ctx governs the call up to that
// batch, whose COMMIT is waited for whatever ctx does (commit.go).
func (s *Store) CompleteEffects(ctx context.Context, rec registry.Record, answers []registry.EffectAnswer, out registry.Outcome) (registry.Record, error) {
	n := len(answers)
	names, handles, results := make([]string, n), make([]string, n), make([]string, n)
	bodies, keys := make([][]byte, n), make([]*string, n)
	for i, a := range answers {
		if err := a.Validate(); err != nil {
			return registry.Record{}, fmt.Errorf("idempg: complete effects: %w", err)
		}
		key, body, err := registry.SealBody(s.sealer, a.Answer, registry.EffectPartOf(rec.OperationID, a.Name, "answer"))
		if err != nil {
			return registry.Record{}, fmt.Errorf("idempg: complete effects: %w", err)
		}
		names[i], handles[i], results[i], bodies[i], keys[i] = a.Name, a.Handle, a.Result, body, key
	}
	now, _ := s.clock()
	done, finishErr, err := s.runLazy(ctx, "complete effects", rec, nil,
		func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil },
		func(out registry.Outcome) (string, []any, error) {
			args, err := s.finishArgs(rec, out, now, true)
			return effectQueries.Get("FinishWithAnswers"), append(args, names, handles, results, bodies, keys), err
		})
	switch {
	case err != nil:
		return registry.Record{}, err
	case isFenced(finishErr):
		return registry.Record{}, fmt.Errorf("idempg: complete effects %s: %w", rec.OperationID,
			cmp.Or(writerFenced(ctx, s.lane, rec.WriterEpoch), registry.ErrFenced))
	case finishErr != nil:
		return registry.Record{}, fmt.Errorf("idempg: complete effects: %w", translate(finishErr))
	}
	return done, nil
}
