package idempg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Effects in the one-transaction style: two durable commits per
// execution (registry/effects.go).

// newOperationID returns c.OperationID, or a new operation ID stamped
// with now when the caller set none.
func newOperationID(c registry.Claim, now time.Time) string {
	return cmp.Or(c.OperationID, idem.NewOperationID(now))
}

// ReserveEffect inserts c's record in EXECUTING and the attempt of the
// effect name in one durable transaction; see registry.EffectStore.
//
// Round trips: BEGIN, EffectDurable, the insert (effects.sql,
// EffectReserve) and the attempt's upsert go to the server in one
// pipelined batch, and COMMIT, once their answers showed that the record
// was inserted, in a second — what BeginEffect alone costs, with the
// reservation's own commit gone. The insert is a plain INSERT: when the
// scope has a record (committed, or inserted by a concurrent transaction,
// whose end it waits for) it fails with a unique violation, the batch is
// aborted and rolled back, and the scope's record, read afresh, decides
// (lostInsert). No row back from the insert (the writer fence, or the
// active limit) is rolled back too, and decided the same way with that
// error. ctx governs everything up to the COMMIT, which runs under
// commitCtx.
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
	batch := &pgx.Batch{}
	batch.Queue("begin")
	batch.Queue(effectQueries.Get("EffectDurable"))
	batch.Queue(effectQueries.Get("EffectReserve"), append(claimArgs(c, id, now), max(c.MaxActive, 0))...)
	batch.Queue(effectQueries.Get("EffectUpsert"), id, name, registry.DownstreamKey(id, name), int64(1), now, req, reqKey)
	results := conn.SendBatch(ctx, batch)
	_, err = results.Exec() // begin
	if err == nil {
		_, err = results.Exec() // EffectDurable
	}
	var inserted error // the insert's own failure
	if err == nil {
		rec, err = s.scanRecord(results.QueryRow())
		if errors.Is(err, pgx.ErrNoRows) {
			// The writer fence or the active limit held; the upsert
			// behind it must not commit.
			inserted = cmp.Or(writerFenced(ctx, s.lane, c.WriterEpoch), registry.ErrActiveLimit)
		} else if err != nil {
			inserted = err
		}
	}
	if err == nil {
		eff, err = s.scanEffect(results.QueryRow())
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
		if inserted != nil {
			return rec, eff, inserted, nil
		}
		return rec, eff, nil, translate(err)
	}
	tag, err := conn.Exec(commitCtx(ctx), "commit")
	switch {
	case err != nil:
		return rec, eff, nil, fmt.Errorf("commit: %w", translate(err))
	case tag.String() != "COMMIT":
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
