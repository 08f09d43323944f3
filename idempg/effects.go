package idempg

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// effects.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed effects.sql
var effectsFS embed.FS

// effectQueries holds the named statements of effects.sql.
var effectQueries = sqlfile.MustLoad(effectsFS, "effects.sql")

var _ registry.EffectStore = (*Store)(nil)

// BeginEffect stores the attempt of the effect name before its downstream
// call; see registry.EffectStore. One transaction: the fenced move of the
// record to EXECUTING (which holds the record's row lock until commit, so
// concurrent BeginEffect calls for one operation queue), then the upsert
// of the attempt. ctx governs the whole call.
//
// Durability: the commit is synchronous whatever the session's or server's
// synchronous_commit (off or local is raised to on for this transaction
// only, effects.sql EffectDurable). The downstream call must never happen
// for an attempt a crash could still lose: Reserve commits asynchronously,
// and it is this commit that first flushes the reservation — the operation
// ID the downstream key derives from — to disk (WAL is flushed in order).
// If it were lost, a crash after the downstream call would let the client's
// retry reserve anew under a new operation ID, and so a new downstream key:
// a second effect. Once BeginEffect returned, the operation, its EXECUTING
// state and its key survive any crash.
//
// Round trips: BEGIN, EffectDurable, the move and the upsert go to the
// server in one pipelined batch, and COMMIT, once their answers showed
// that the move was made, in a second — two round trips where one
// statement at a time took five. The COMMIT runs under commitCtx.
func (s *Store) BeginEffect(ctx context.Context, rec registry.Record, name string, request []byte) (registry.Effect, error) {
	if name == "" {
		return registry.Effect{}, errors.New("idempg: begin effect: empty effect name")
	}
	now, _ := s.clock()
	reqKey, req, err := registry.SealBody(s.sealer, request, registry.EffectPartOf(rec.OperationID, name, "request"))
	if err != nil {
		return registry.Effect{}, fmt.Errorf("idempg: begin effect %s/%s: %w", rec.OperationID, name, err)
	}
	eff, err := s.beginEffect(ctx, rec, name, now, req, reqKey)
	if err != nil {
		return registry.Effect{}, fmt.Errorf("idempg: begin effect %s/%s: %w", rec.OperationID, name, err)
	}
	return eff, nil
}

// beginEffect runs BeginEffect's transaction (see there) on a connection
// of its own and returns the attempt as stored. A fenced move is rolled
// back and reported as registry.ErrWriterFenced or registry.ErrFenced
// (whatever the upsert behind it answered); any other error is
// translated. ctx governs everything up to the COMMIT.
func (s *Store) beginEffect(ctx context.Context, rec registry.Record, name string, now *time.Time, req []byte, reqKey *string) (registry.Effect, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return registry.Effect{}, translate(err)
	}
	defer conn.Release() // a connection left inside a transaction is closed, not reused
	batch := &pgx.Batch{}
	batch.Queue("begin")
	batch.Queue(effectQueries.Get("EffectDurable"))
	batch.Queue(effectQueries.Get("EffectBeginOperation"), rec.Scope[:], rec.OperationID, rec.OwnerGen, now, rec.WriterEpoch)
	batch.Queue(effectQueries.Get("EffectUpsert"),
		rec.OperationID, name, registry.DownstreamKey(rec.OperationID, name), rec.OwnerGen, now, req, reqKey)
	results := conn.SendBatch(ctx, batch)
	var eff registry.Effect
	var id string
	_, err = results.Exec() // begin
	if err == nil {
		_, err = results.Exec() // EffectDurable
	}
	if err == nil {
		err = results.QueryRow().Scan(&id)
	}
	fenced := errors.Is(err, pgx.ErrNoRows)
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
		if fenced {
			return registry.Effect{}, cmp.Or(writerFenced(ctx, s.pool, rec.WriterEpoch), registry.ErrFenced)
		}
		return registry.Effect{}, translate(err)
	}
	tag, err := conn.Exec(commitCtx(ctx), "commit")
	switch {
	case err != nil:
		return registry.Effect{}, fmt.Errorf("commit: %w", translate(err))
	case tag.String() != "COMMIT":
		return registry.Effect{}, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	return eff, nil
}

// RecordEffect stores the handle and result of an attempt; see
// registry.EffectStore. One statement, which share-locks the record while
// it checks the fence. ctx governs the statement.
//
// Durability: like the reservation (Reserve), the statement commits with
// synchronous_commit off for its own transaction only, so it does not wait
// for its WAL to reach disk: the outcome's commit that follows it
// (Complete, or Reconcile for a settlement) is synchronous and flushes the
// WAL up to and including it first, since WAL is flushed in order, so the
// two share one flush. Nothing is answered on the recorded result alone:
// a client, an operator or a replay is told an outcome only once that
// synchronous commit returned. If a crash loses the recorded result, the
// attempt is unsettled again with its downstream key durable (BeginEffect
// always commits synchronously, before the call), and it is settled on
// evidence as after a crash between the call and this statement: a lookup
// or a re-send with the same key.
func (s *Store) RecordEffect(ctx context.Context, rec registry.Record, name, handle, result string, answer []byte) error {
	if result != "" && result != registry.EffectSucceeded && result != registry.EffectFailed {
		return fmt.Errorf("idempg: record effect: result %q: want %q, %q or empty",
			result, registry.EffectSucceeded, registry.EffectFailed)
	}
	now, _ := s.clock()
	answerKey, answer, err := registry.SealBody(s.sealer, answer, registry.EffectPartOf(rec.OperationID, name, "answer"))
	if err != nil {
		return fmt.Errorf("idempg: record effect: %w", err)
	}
	tag, err := s.pool.Exec(ctx, effectQueries.Get("EffectRecord"),
		rec.Scope[:], rec.OperationID, rec.OwnerGen, name, handle, result, now, answer, answerKey)
	if err != nil {
		return fmt.Errorf("idempg: record effect: %w", translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idempg: record effect %s/%s: %w", rec.OperationID, name, registry.ErrFenced)
	}
	return nil
}

// Effects lists the operation's attempts, oldest first. ctx governs the
// query.
func (s *Store) Effects(ctx context.Context, operationID string) ([]registry.Effect, error) {
	rows, err := s.pool.Query(ctx, effectQueries.Get("Effects"), operationID)
	if err != nil {
		return nil, fmt.Errorf("idempg: effects: %w", translate(err))
	}
	effs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (registry.Effect, error) { return s.scanEffect(r) })
	if err != nil {
		return nil, fmt.Errorf("idempg: effects: %w", translate(err))
	}
	return effs, nil
}

// MarkUnknown moves rec's record EXECUTING → UNKNOWN at rec.OwnerGen; see
// registry.EffectStore. ctx governs the transaction.
func (s *Store) MarkUnknown(ctx context.Context, rec registry.Record) (registry.Record, error) {
	now, _ := s.clock()
	var out registry.Record
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, effectQueries.Get("MarkUnknown"), rec.Scope[:], rec.OperationID, rec.OwnerGen, now).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return registry.ErrFenced
		}
		if err != nil {
			return err
		}
		out, err = s.scanRecord(tx.QueryRow(ctx, queries.Get("GetByID"), id))
		return err
	})
	if err != nil {
		return registry.Record{}, fmt.Errorf("idempg: mark unknown %s: %w", rec.OperationID, translate(err))
	}
	return out, nil
}

// Reconcile resolves an UNKNOWN record; see registry.EffectStore. One
// statement moves the record and appends the log row; the record is read
// back in the same transaction. The commit is durable. ctx governs the
// transaction.
func (s *Store) Reconcile(ctx context.Context, operationID string, r registry.Reconciliation) (registry.Record, error) {
	if err := r.Validate(); err != nil {
		return registry.Record{}, fmt.Errorf("idempg: reconcile: %w", err)
	}
	now, _ := s.clock()
	resp := r.Response
	digest := resp.Digest()
	ids, topics, payloads, payloadKeys, traces, err := s.outboxArgs(operationID, r.Outbox)
	if err != nil {
		return registry.Record{}, fmt.Errorf("idempg: reconcile: %w", err)
	}
	var out registry.Record
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The scope names the record's body (registry.ResponseOf); read it in the
		// transaction that writes the body.
		var scope []byte
		if err := tx.QueryRow(ctx, effectQueries.Get("OperationScope"), operationID).Scan(&scope); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return registry.ErrNotFound
			}
			return err
		}
		key, body, err := s.sealResponse(idem.ScopeHash(scope), operationID, digest[:], resp.Body)
		if err != nil {
			return err
		}
		var logID int64
		err = tx.QueryRow(ctx, effectQueries.Get("Reconcile"), operationID, string(r.Outcome),
			resp.Status, resp.MediaType, resp.Location, resp.ETag, body, digest[:],
			r.Method, r.Actor, r.Evidence, now, ids, topics, payloads, key, payloadKeys, traces).Scan(&logID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Not UNKNOWN, or no such record: tell the two apart.
			var exists bool
			if err := tx.QueryRow(ctx, effectQueries.Get("OperationExists"), operationID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return registry.ErrNotFound
			}
			return registry.ErrFenced
		}
		if err != nil {
			return err
		}
		out, err = s.scanRecord(tx.QueryRow(ctx, queries.Get("GetByID"), operationID))
		return err
	})
	if err != nil {
		return registry.Record{}, fmt.Errorf("idempg: reconcile %s: %w", operationID, translate(err))
	}
	return out, nil
}

// Reconciliations lists the operation's reconciliation log, oldest first.
// ctx governs the query.
func (s *Store) Reconciliations(ctx context.Context, operationID string) ([]registry.ReconciliationEntry, error) {
	rows, err := s.pool.Query(ctx, effectQueries.Get("Reconciliations"), operationID)
	if err != nil {
		return nil, fmt.Errorf("idempg: reconciliations: %w", translate(err))
	}
	log, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.ReconciliationEntry, error) {
		var (
			e       registry.ReconciliationEntry
			outcome string
		)
		err := row.Scan(&e.ID, &e.OperationID, &outcome, &e.Method, &e.Actor, &e.Evidence, &e.CreatedAt)
		e.Outcome, e.CreatedAt = idem.State(outcome), e.CreatedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: reconciliations: %w", translate(err))
	}
	return log, nil
}

// ListOperations lists the records f selects, oldest first; see
// registry.EffectStore. It selects the operation IDs and then reads each
// record with GetByID, all in one batch inside one read-only REPEATABLE
// READ transaction, so the records are those the selection saw. ctx
// governs the call.
func (s *Store) ListOperations(ctx context.Context, f registry.ListFilter) ([]registry.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("idempg: %w", err)
	}
	now, _ := s.clock()
	query := "ListOperationIDs"
	var state *string
	if f.State != "" {
		st := string(f.State)
		state = &st
		if f.State == idem.StateUnknown {
			query = "ListUnknownOperationIDs"
		}
	}
	var afterAt *time.Time
	var afterID *string
	if f.After.OperationID != "" {
		afterAt, afterID = &f.After.CreatedAt, &f.After.OperationID
	}
	recs, err := s.recordsByIDs(ctx, effectQueries.Get(query), state, micros(f.OlderThan), now, f.LimitOrDefault(), afterAt, afterID)
	if err != nil {
		return nil, fmt.Errorf("idempg: list operations: %w", translate(err))
	}
	return recs, nil
}

// CountOperations counts the records f selects; see
// registry.EffectStore. ctx governs the query.
func (s *Store) CountOperations(ctx context.Context, f registry.ListFilter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: %w", err)
	}
	now, _ := s.clock()
	query := "CountOperations"
	var state *string
	if f.State != "" {
		st := string(f.State)
		state = &st
		if f.State == idem.StateUnknown {
			query = "CountUnknownOperations"
		}
	}
	var n int64
	if err := s.pool.QueryRow(ctx, effectQueries.Get(query), state, micros(f.OlderThan), now).Scan(&n); err != nil {
		return 0, fmt.Errorf("idempg: count operations: %w", translate(err))
	}
	return n, nil
}

// scanEffect reads one effect row in the column order of effects.sql and
// opens its sealed request and answer (registry.ErrUnreadable, wrapped, if
// it cannot).
func (s *Store) scanEffect(row pgx.Row) (registry.Effect, error) {
	var (
		e              registry.Effect
		handle, result *string
		reqKey, ansKey *string
	)
	if err := row.Scan(&e.OperationID, &e.Name, &e.DownstreamKey, &e.OwnerGen, &handle, &result,
		&e.CreatedAt, &e.UpdatedAt, &e.Request, &e.Answer, &reqKey, &ansKey); err != nil {
		return registry.Effect{}, err
	}
	var err error
	if e.Request, err = registry.OpenBody(s.sealer, reqKey, e.Request, registry.EffectPartOf(e.OperationID, e.Name, "request")); err != nil {
		return registry.Effect{}, fmt.Errorf("effect %s/%s request: %w", e.OperationID, e.Name, err)
	}
	if e.Answer, err = registry.OpenBody(s.sealer, ansKey, e.Answer, registry.EffectPartOf(e.OperationID, e.Name, "answer")); err != nil {
		return registry.Effect{}, fmt.Errorf("effect %s/%s answer: %w", e.OperationID, e.Name, err)
	}
	e.Handle, e.Result = deref(handle), deref(result)
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return e, nil
}
