package idempg

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Complete runs fn in a new transaction and, in that same transaction,
// moves rec's record to the outcome's terminal state with its response
// snapshot and digest and inserts its outbox messages, if the record is
// still RESERVED or EXECUTING at rec.OwnerGen; else it rolls back and
// returns registry.ErrFenced. An error from fn is returned unchanged
// after rolling back; so is an outcome that is not terminal or not a legal
// transition from rec.State. The commit is durable (synchronous) before
// Complete returns the updated record. ctx governs the whole transaction,
// fn included.
//
// Round trips: none of its own for BEGIN, which goes with fn's first
// statement (lazytx.go), and one for the outcome statement and COMMIT,
// sent together in one pipelined batch. The outcome statement fails when
// its compare-and-set matches nothing (queries.sql, Finish), so the
// COMMIT behind it cannot commit fn's writes without the outcome. fn must
// leave the transaction open (not commit or roll back the pgx.Tx that
// Tx.Native returns); Complete refuses to record an outcome otherwise.
//
// Writer fence: registry.ErrWriterFenced, all rolled back, when
// rec.WriterEpoch is older than the registry's; see control.go.
func (s *Store) Complete(ctx context.Context, rec registry.Record, fn registry.BusinessFunc) (registry.Record, error) {
	now, _ := s.clock()
	done, finishErr, err := s.runLazy(ctx, "complete", rec, nil, fn, func(out registry.Outcome) (string, []any, error) {
		args, err := s.finishArgs(rec, out, now, true)
		return queries.Get("Finish"), args, err
	})
	switch {
	case err != nil:
		return registry.Record{}, err
	case isFenced(finishErr):
		return registry.Record{}, fmt.Errorf("idempg: complete %s: %w", rec.OperationID,
			cmp.Or(writerFenced(ctx, s.lane, rec.WriterEpoch), registry.ErrFenced))
	case finishErr != nil:
		return registry.Record{}, fmt.Errorf("idempg: complete: %w", translate(finishErr))
	}
	return done, nil
}

// ClaimAndExecute is the in-transaction style: the caller owns tx and
// commits it. In tx it inserts the claim for c as RESERVED at owner
// generation 1 — a plain insert, so a concurrent claim for the same scope
// waits for this transaction to end — then calls fn, then records fn's
// outcome exactly as Complete does, and returns Result{registry.Execute,
// the record as it will be committed}. An error from fn (or from recording
// the outcome) is returned as is and the caller must roll tx back; the
// claim disappears with it.
//
// If the claim insert fails, for whatever reason, tx is rolled back and is
// unusable afterwards (for a pseudo-nested pgx.Tx, only its savepoint is
// rolled back). The record for c.Scope is then read with a fresh
// connection from the Store's pool: if it exists, the result is
// registry.Decide's verdict on it (Replay, Conflict, InProgress or
// Unknown) with a nil error; if not, the insert's own error is returned
// (wrapping registry.ErrUnavailable for timeouts and lost connections) —
// never a conflict. ctx governs every statement, fn and the re-read.
//
// c.MaxActive is honoured as by Reserve, in the claim insert itself: when
// c.Owner already holds c.MaxActive RESERVED, EXECUTING or UNKNOWN records of
// c.Operation (as tx sees them), the insert is not made and the claim is
// lost like a failed insert — tx rolled back, the record re-read — so an
// existing scope still gets its verdict and a new one gets an error
// wrapping registry.ErrActiveLimit; fn is not called. As with Reserve,
// a claim refused by the limit does not wait for a concurrent,
// uncommitted claim of the same scope, and gets ErrActiveLimit then.
//
// Writer fence: a claim whose c.WriterEpoch is older than the registry's
// is lost like a claim refused by the limit, with
// registry.ErrWriterFenced; see control.go.
func (s *Store) ClaimAndExecute(ctx context.Context, tx pgx.Tx, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	now, goNow := s.clock()
	query, args := "Claim", claimArgs(c, newOperationID(c, goNow), now)
	if c.MaxActive > 0 {
		query, args = "ClaimLimited", append(args, c.MaxActive)
	}
	rec, err := s.scanRecord(tx.QueryRow(ctx, queries.Get(query), args...))
	if errors.Is(err, pgx.ErrNoRows) { // the writer fence or the active limit held
		err = cmp.Or(writerFenced(ctx, tx, c.WriterEpoch), registry.ErrActiveLimit)
	}
	if err != nil {
		return s.lostClaim(ctx, tx, c, err)
	}
	out, err := fn(ctx, txAdapter{tx}, rec)
	if err != nil {
		return registry.Result{}, err
	}
	done, err := s.finish(ctx, tx, rec, out, now)
	if err != nil {
		return registry.Result{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil
}

// lostClaim handles a failed claim insert: tx is rolled back, then the
// scope's record decides (lostInsert).
func (s *Store) lostClaim(ctx context.Context, tx pgx.Tx, c registry.Claim, insertErr error) (registry.Result, error) {
	_ = tx.Rollback(ctx) // its error adds nothing: the transaction is over either way
	return s.lostInsert(ctx, "claim", c, insertErr)
}

// lostInsert is the verdict after an insert of c's scope failed and its
// transaction ended: the scope's record, read afresh, decides (Replay,
// Conflict, InProgress, Unknown or Retired, with a nil error); with no
// record the insert's own error is returned, translated — never a
// conflict.
func (s *Store) lostInsert(ctx context.Context, op string, c registry.Claim, insertErr error) (registry.Result, error) {
	insertErr = translate(insertErr)
	rec, err := s.Get(ctx, c.Scope)
	switch {
	case err == nil:
		return registry.Result{Verdict: registry.Decide(rec, false, c.Fingerprint), Record: rec}, nil
	case errors.Is(err, registry.ErrNotFound):
		return registry.Result{}, fmt.Errorf("idempg: %s: %w", op, insertErr)
	default:
		return registry.Result{}, fmt.Errorf("idempg: %s: %w; re-reading the record: %w", op, insertErr, err)
	}
}

// finish records out for rec in tx: one fenced compare-and-set statement
// that also inserts the outbox rows. It refuses an outcome that is not
// terminal or, when rec.State is in flight, not a legal transition from
// it; the database's trigger guards the stored state as well. A fenced
// update leaves tx usable.
func (s *Store) finish(ctx context.Context, tx rowQuerier, rec registry.Record, out registry.Outcome, now *time.Time) (registry.Record, error) {
	args, err := s.finishArgs(rec, out, now, false)
	if err != nil {
		return registry.Record{}, err
	}
	done, err := s.scanRecord(tx.QueryRow(ctx, queries.Get("Finish"), args...))
	switch {
	case errors.Is(err, sql.ErrNoRows): // pgx's and database/sql's
		return registry.Record{}, fmt.Errorf("idempg: complete %s: %w", rec.OperationID,
			cmp.Or(writerFenced(ctx, tx, rec.WriterEpoch), registry.ErrFenced))
	case err != nil:
		return registry.Record{}, fmt.Errorf("idempg: complete: %w", translate(err))
	}
	return done, nil
}

// finishArgs checks out against rec and returns the parameters of the
// Finish statement; raise says whether a fenced update fails the statement
// (and so the transaction) rather than return no row.
func (s *Store) finishArgs(rec registry.Record, out registry.Outcome, now *time.Time, raise bool) ([]any, error) {
	if !out.State.Terminal() {
		return nil, fmt.Errorf("idempg: outcome state %q is not terminal", out.State)
	}
	if rec.State.InFlight() && !idem.CanTransition(rec.State, out.State) {
		return nil, fmt.Errorf("idempg: illegal transition %s -> %s", rec.State, out.State)
	}
	if err := out.Response.Storable(); err != nil {
		return nil, fmt.Errorf("idempg: complete: %w", err)
	}
	ids, topics, payloads, payloadKeys, traces, err := s.outboxArgs(rec.OperationID, out.Outbox)
	if err != nil {
		return nil, err
	}
	resp := out.Response
	digest := resp.Digest()
	key, body, err := s.sealResponse(rec.Scope, rec.OperationID, digest[:], resp.Body)
	if err != nil {
		return nil, err
	}
	return []any{
		rec.Scope[:], rec.OwnerGen, string(out.State), resp.Status, resp.MediaType,
		resp.Location, resp.ETag, body, digest[:], now,
		rec.OperationID, ids, topics, payloads, rec.WriterEpoch, raise, key, payloadKeys, traces,
	}, nil
}

// sealResponse returns the body to store for a response of the record
// with that scope and operation ID whose digest is digest, and the ID of
// the key that sealed it (nil: plaintext, when the Store has no Sealer).
// A sealed body longer than the column's bound is refused
// (registry.CheckSealedResponse).
func (s *Store) sealResponse(scope idem.ScopeHash, operationID string, digest, body []byte) (*string, []byte, error) {
	key, sealed, err := registry.SealBody(s.sealer, nonNil(body), registry.ResponseOf(scope, operationID, digest))
	if err == nil && key != nil {
		err = registry.CheckSealedResponse(sealed)
	}
	if err != nil {
		return nil, nil, err
	}
	return key, sealed, nil
}

// outboxArgs returns the message IDs, topics, payloads (sealed with the
// Store's Sealer, if any, each bound to its message) and the IDs of the
// keys that sealed them (nil: plaintext) of an operation's outbox
// messages, as the array parameters of Finish, InsertOutcome and
// Reconcile.
func (s *Store) outboxArgs(operationID string, msgs []registry.Message) (ids, topics []string, payloads [][]byte, keys, traces []*string, err error) {
	ids = make([]string, len(msgs))
	topics = make([]string, len(msgs))
	payloads = make([][]byte, len(msgs))
	keys = make([]*string, len(msgs))
	traces = make([]*string, len(msgs))
	for i, m := range msgs {
		ids[i] = registry.MessageID(operationID, i)
		topics[i] = m.Topic
		if m.Trace != "" {
			traces[i] = &m.Trace
		}
		if keys[i], payloads[i], err = registry.SealPayload(s.sealer, ids[i], m.Topic, nonNil(m.Payload)); err != nil {
			return nil, nil, nil, nil, nil, err
		}
	}
	return ids, topics, payloads, keys, traces, nil
}

// nonNil returns b, or an empty slice for nil, so that bytea NOT NULL
// columns get an empty value rather than NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// InTx begins a transaction, runs fn with it and commits if fn returns
// nil; otherwise it rolls back and returns fn's error unchanged. The
// connection is taken, and BEGIN sent, before fn runs, through the
// Store's *sql.DB (sqltx.go), so that fn's Tx can also be had as a
// *sql.Tx (registry.SQLTx) in shadow and off modes. The commit is
// durable (synchronous_commit as configured, on by default). A
// connection that could not be had or a BEGIN that failed is returned,
// translated (connection loss and timeouts wrap registry.ErrUnavailable),
// and fn is not run; so is a COMMIT that failed, and a commit that
// PostgreSQL turned into a rollback, because a statement of fn failed and
// fn returned nil anyway, is an error too, as is a fn that ended the
// transaction itself. On a closed Store fn is not run: the error wraps
// registry.ErrUnavailable. ctx governs the transaction, fn included, up
// to its COMMIT, which is waited for whatever ctx does (commit.go).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx registry.Tx) error) error {
	if s.closed.Load() {
		return fmt.Errorf("idempg: in tx: the store is closed: %w", registry.ErrUnavailable)
	}
	tx := &lazyTx{ctx: ctx, pool: s.pool, sqlDB: s.sqlDB}
	defer tx.release(ctx)
	if tx.acquireSQL(ctx) != nil || tx.beginAlone(ctx) != nil {
		return fmt.Errorf("idempg: in tx: %w", tx.err)
	}
	fnErr := fn(ctx, tx)
	switch {
	case tx.err != nil:
		return tx.err // storage trouble, whatever fn made of it
	case fnErr != nil:
		return fnErr // the business code's own, unchanged
	case tx.conn.PgConn().TxStatus() == 'I':
		return errors.New("idempg: in tx: the business function ended the transaction")
	}
	tag, err := tx.conn.Exec(commitCtx(ctx), "commit")
	switch {
	case err != nil:
		return fmt.Errorf("idempg: in tx: commit: %w", translate(err))
	case tag.String() != "COMMIT":
		return fmt.Errorf("idempg: in tx: commit: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

// txAdapter is the registry.Tx handed to business functions: a thin view
// of the pgx.Tx, whose errors are returned untranslated (they belong to
// the business code). Native returns the pgx.Tx.
type txAdapter struct{ tx pgx.Tx }

func (a txAdapter) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := a.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (a txAdapter) QueryRow(ctx context.Context, sql string, args ...any) registry.Row {
	return a.tx.QueryRow(ctx, sql, args...)
}

// Query returns the pgx.Rows, which are a registry.Rows as they are.
func (a txAdapter) Query(ctx context.Context, sql string, args ...any) (registry.Rows, error) {
	rows, err := a.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (a txAdapter) Native() any { return a.tx }
