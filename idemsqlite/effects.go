package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// effects.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed effects.sql
var effectFiles embed.FS

// effectQueries holds the named statements of effects.sql. They are not
// prepared once per Store (statements.go): database/sql prepares them per
// call, which costs a little next to a downstream call.
var effectQueries = sqlfile.MustLoad(effectFiles, "effects.sql")

var _ registry.EffectStore = (*Store)(nil)

// BeginEffect stores the attempt of the effect name before its downstream
// call; see registry.EffectStore. One write transaction (BEGIN IMMEDIATE
// when the Store came from Open, so concurrent calls queue): the fenced
// move of the record to EXECUTING, then the upsert of the attempt. The
// commit is durable when the database runs with synchronous=FULL, as Open
// sets it: the attempt, and the operation ID its downstream key derives
// from, are on disk before BeginEffect returns, so the downstream call
// that follows can never be repeated under another key after a crash.
// (With OpenDB the durability is the caller's database's.) ctx governs
// the call.
func (s *Store) BeginEffect(ctx context.Context, rec registry.Record, name string, request []byte) (registry.Effect, error) {
	if name == "" {
		return registry.Effect{}, errors.New("idemsqlite: begin effect: empty effect name")
	}
	reqKey, req, err := registry.SealBody(s.sealer, request, registry.EffectPartOf(rec.OperationID, name, "request"))
	if err != nil {
		return registry.Effect{}, fmt.Errorf("idemsqlite: begin effect %s/%s: %w", rec.OperationID, name, err)
	}
	var eff registry.Effect
	err = s.writeTx(ctx, "begin effect", func(tx *sql.Tx, now any) error {
		var id string
		err := tx.QueryRowContext(ctx, effectQueries.Get("EffectBeginOperation"),
			now, rec.Scope[:], rec.OperationID, rec.OwnerGen, rec.WriterEpoch).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s/%s: %w", rec.OperationID, name, cmp.Or(writerFenced(ctx, tx, rec.WriterEpoch), registry.ErrFenced))
		}
		if err != nil {
			return err
		}
		eff, err = s.scanEffect(tx.QueryRowContext(ctx, effectQueries.Get("EffectUpsert"),
			now, rec.OperationID, name, registry.DownstreamKey(rec.OperationID, name), rec.OwnerGen, req, reqKey))
		return err
	})
	return eff, err
}

// RecordEffect stores the handle and result of an attempt; see
// registry.EffectStore. ctx governs the call.
func (s *Store) RecordEffect(ctx context.Context, rec registry.Record, name, handle, result string, answer []byte) error {
	if result != "" && result != registry.EffectSucceeded && result != registry.EffectFailed {
		return fmt.Errorf("idemsqlite: record effect: result %q: want %q, %q or empty",
			result, registry.EffectSucceeded, registry.EffectFailed)
	}
	answerKey, answer, err := registry.SealBody(s.sealer, answer, registry.EffectPartOf(rec.OperationID, name, "answer"))
	if err != nil {
		return fmt.Errorf("idemsqlite: record effect: %w", err)
	}
	return s.writeTx(ctx, "record effect", func(tx *sql.Tx, now any) error {
		res, err := tx.ExecContext(ctx, effectQueries.Get("EffectRecord"),
			now, rec.Scope[:], rec.OperationID, rec.OwnerGen, name, handle, result, answer, answerKey)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s/%s: %w", rec.OperationID, name, registry.ErrFenced)
		}
		return nil
	})
}

// Effects lists the operation's attempts, oldest first. ctx governs the
// query.
func (s *Store) Effects(ctx context.Context, operationID string) ([]registry.Effect, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, effectQueries.Get("Effects"), operationID)
	if err != nil {
		return nil, s.fail("effects", err)
	}
	defer rows.Close()
	var effs []registry.Effect
	for rows.Next() {
		e, err := s.scanEffect(rows)
		if err != nil {
			return nil, s.fail("effects", err)
		}
		effs = append(effs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("effects", err)
	}
	return effs, nil
}

// MarkUnknown moves rec's record EXECUTING → UNKNOWN at rec.OwnerGen; see
// registry.EffectStore. ctx governs the call.
func (s *Store) MarkUnknown(ctx context.Context, rec registry.Record) (registry.Record, error) {
	var out registry.Record
	err := s.writeTx(ctx, "mark unknown", func(tx *sql.Tx, now any) error {
		var id string
		err := tx.QueryRowContext(ctx, effectQueries.Get("MarkUnknown"), now, rec.Scope[:], rec.OperationID, rec.OwnerGen).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s: %w", rec.OperationID, registry.ErrFenced)
		}
		if err != nil {
			return err
		}
		out, err = s.scanRecord(s.txStmt(ctx, tx, "GetByID").QueryRowContext(ctx, id))
		return err
	})
	return out, err
}

// Reconcile resolves an UNKNOWN record; see registry.EffectStore. The
// compare-and-set and the log row are written in one write transaction,
// committed durably (synchronous=FULL with Open). ctx governs the call.
func (s *Store) Reconcile(ctx context.Context, operationID string, r registry.Reconciliation) (registry.Record, error) {
	if err := r.Validate(); err != nil {
		return registry.Record{}, fmt.Errorf("idemsqlite: reconcile: %w", err)
	}
	resp := r.Response
	digest := resp.Digest()
	var out registry.Record
	err := s.writeTx(ctx, "reconcile", func(tx *sql.Tx, now any) error {
		var (
			id    string
			at    int64
			scope []byte
		)
		// The scope names the record's body (registry.ResponseOf); read it in the
		// transaction that writes the body.
		err := tx.QueryRowContext(ctx, effectQueries.Get("OperationScope"), operationID).Scan(&scope)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s: %w", operationID, registry.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var sc idem.ScopeHash
		if err := copyHash(sc[:], scope, "scope"); err != nil {
			return err
		}
		key, body, err := s.sealResponse(sc, operationID, digest[:], resp.Body)
		if err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, effectQueries.Get("ReconcileOperation"), now, operationID, string(r.Outcome),
			resp.Status, resp.MediaType, resp.Location, resp.ETag, body, digest[:], key, scope).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			var n int64
			if err := tx.QueryRowContext(ctx, effectQueries.Get("OperationExists"), operationID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%s: %w", operationID, registry.ErrNotFound)
			}
			return fmt.Errorf("%s: %w", operationID, registry.ErrFenced)
		}
		if err != nil {
			return err
		}
		out, err = s.scanRecord(s.txStmt(ctx, tx, "GetByID").QueryRowContext(ctx, id))
		if err != nil {
			return err
		}
		// The log row gets the record's updated_at, so both say the same
		// instant even on database time.
		at = out.UpdatedAt.UnixMicro()
		for i, m := range r.Outbox {
			if err := s.insertOutbox(ctx, s.txStmt(ctx, tx, "InsertOutbox"), at, operationID, i, m); err != nil {
				return err
			}
		}
		var logID int64
		return tx.QueryRowContext(ctx, effectQueries.Get("ReconcileLog"), at, operationID, string(r.Outcome),
			r.Method, r.Actor, r.Evidence).Scan(&logID)
	})
	if err != nil {
		return registry.Record{}, err
	}
	return out, nil
}

// Reconciliations lists the operation's reconciliation log, oldest first.
// ctx governs the query.
func (s *Store) Reconciliations(ctx context.Context, operationID string) ([]registry.ReconciliationEntry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, effectQueries.Get("Reconciliations"), operationID)
	if err != nil {
		return nil, s.fail("reconciliations", err)
	}
	defer rows.Close()
	var log []registry.ReconciliationEntry
	for rows.Next() {
		var (
			e       registry.ReconciliationEntry
			outcome string
			at      int64
		)
		if err := rows.Scan(&e.ID, &e.OperationID, &outcome, &e.Method, &e.Actor, &e.Evidence, &at); err != nil {
			return nil, s.fail("reconciliations", err)
		}
		e.Outcome, e.CreatedAt = idem.State(outcome), fromMicros(at)
		log = append(log, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reconciliations", err)
	}
	return log, nil
}

// ListOperations lists the records f selects, oldest first; see
// registry.EffectStore. It selects the operation IDs and reads each record
// with GetByID inside one read-only (deferred) transaction, a consistent
// snapshot in WAL mode that takes no write lock. ctx governs the call.
func (s *Store) ListOperations(ctx context.Context, f registry.ListFilter) ([]registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("idemsqlite: %w", err)
	}
	query, state := "ListOperationIDs", any(nil)
	if f.State != "" {
		state = string(f.State)
		if f.State == idem.StateUnknown {
			query = "ListUnknownOperationIDs"
		}
	}
	afterAt, afterID := any(nil), any(nil)
	if f.After.OperationID != "" {
		afterAt, afterID = f.After.CreatedAt.UnixMicro(), f.After.OperationID
	}
	recs, err := s.recordsByIDs(ctx, effectQueries.Get(query), s.nowParam(), state, f.OlderThan.Microseconds(), f.LimitOrDefault(), afterAt, afterID)
	if err != nil {
		return nil, s.fail("list operations", err)
	}
	return recs, nil
}

// CountOperations counts the records f selects; see
// registry.EffectStore. ctx governs the query.
func (s *Store) CountOperations(ctx context.Context, f registry.ListFilter) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("idemsqlite: %w", err)
	}
	query, state := "CountOperations", any(nil)
	if f.State != "" {
		state = string(f.State)
		if f.State == idem.StateUnknown {
			query = "CountUnknownOperations"
		}
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, effectQueries.Get(query), s.nowParam(), state, f.OlderThan.Microseconds()).Scan(&n); err != nil {
		return 0, s.fail("count operations", err)
	}
	return n, nil
}

// scanEffect reads one effect row in the column order of effects.sql and
// opens its sealed request and answer (registry.ErrUnreadable, wrapped, if
// it cannot).
func (s *Store) scanEffect(row scanner) (registry.Effect, error) {
	var (
		e                registry.Effect
		handle, result   sql.NullString
		created, updated int64
		reqKey, ansKey   sql.NullString
	)
	if err := row.Scan(&e.OperationID, &e.Name, &e.DownstreamKey, &e.OwnerGen, &handle, &result,
		&created, &updated, &e.Request, &e.Answer, &reqKey, &ansKey); err != nil {
		return registry.Effect{}, err
	}
	var err error
	if e.Request, err = registry.OpenBody(s.sealer, nullable(reqKey), e.Request, registry.EffectPartOf(e.OperationID, e.Name, "request")); err != nil {
		return registry.Effect{}, fmt.Errorf("effect %s/%s request: %w", e.OperationID, e.Name, err)
	}
	if e.Answer, err = registry.OpenBody(s.sealer, nullable(ansKey), e.Answer, registry.EffectPartOf(e.OperationID, e.Name, "answer")); err != nil {
		return registry.Effect{}, fmt.Errorf("effect %s/%s answer: %w", e.OperationID, e.Name, err)
	}
	e.Handle, e.Result = handle.String, result.String
	e.CreatedAt, e.UpdatedAt = fromMicros(created), fromMicros(updated)
	return e, nil
}
