package idemmysql

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

//go:embed effects.sql
var effectFiles embed.FS

// effectQueries are the named queries of effects.sql.
var effectQueries = sqlfile.MustLoad(effectFiles, "effects.sql")

var _ registry.EffectStore = (*Store)(nil)

// BeginEffect records, durably, that rec's owner is about to perform the
// effect name downstream: in one transaction, the fenced compare-and-set
// that makes the operation EXECUTING (registry.ErrFenced, or
// registry.ErrWriterFenced, when rec is stale) and the attempt row,
// created once per (operation, name) with its stable downstream key and
// the request (sealed with the Store's Sealer, if any). It returns the
// attempt as stored. ctx governs the call.
func (s *Store) BeginEffect(ctx context.Context, rec registry.Record, name string, request []byte) (registry.Effect, error) {
	if name == "" {
		return registry.Effect{}, errors.New("idemmysql: begin effect: empty effect name")
	}
	reqKey, req, err := registry.SealBody(s.sealer, request, registry.EffectPartOf(rec.OperationID, name, "request"))
	if err != nil {
		return registry.Effect{}, fmt.Errorf("idemmysql: begin effect %s/%s: %w", rec.OperationID, name, err)
	}
	var eff registry.Effect
	err = s.writeTx(ctx, "begin effect", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, effectQueries.Get("EffectBeginOperation"), now, rec.Scope[:], rec.OperationID, rec.OwnerGen, rec.WriterEpoch)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s/%s: %w", rec.OperationID, name, cmp.Or(writerFenced(ctx, tx, rec.WriterEpoch), registry.ErrFenced))
		}
		if _, err := exec(ctx, tx, effectQueries.Get("EffectUpsert"),
			now, rec.OperationID, name, registry.DownstreamKey(rec.OperationID, name), rec.OwnerGen, req, reqKey); err != nil {
			return err
		}
		eff, err = s.scanEffect(queryRow(ctx, tx, effectQueries.Get("EffectGet"), rec.OperationID, name))
		return err
	})
	return eff, err
}

// RecordEffect stores what the downstream said about an effect begun by
// rec's owner (handle, result "succeeded"/"failed" or empty, the answer),
// fenced by rec's generation and an EXECUTING or UNKNOWN state in the
// same statement; registry.ErrFenced otherwise. ctx governs the call.
func (s *Store) RecordEffect(ctx context.Context, rec registry.Record, name, handle, result string, answer []byte) error {
	if result != "" && result != registry.EffectSucceeded && result != registry.EffectFailed {
		return fmt.Errorf("idemmysql: record effect: result %q: want %q, %q or empty",
			result, registry.EffectSucceeded, registry.EffectFailed)
	}
	answerKey, answer, err := registry.SealBody(s.sealer, answer, registry.EffectPartOf(rec.OperationID, name, "answer"))
	if err != nil {
		return fmt.Errorf("idemmysql: record effect: %w", err)
	}
	return s.writeTx(ctx, "record effect", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, effectQueries.Get("EffectRecord"),
			now, rec.Scope[:], rec.OperationID, rec.OwnerGen, name, handle, result, answer, answerKey)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s/%s: %w", rec.OperationID, name, registry.ErrFenced)
		}
		return nil
	})
}

// Effects returns the effect attempts of an operation, oldest first.
// ctx governs the query.
func (s *Store) Effects(ctx context.Context, operationID string) ([]registry.Effect, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := queryRows(ctx, s.db, effectQueries.Get("Effects"), operationID)
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

// MarkUnknown moves an EXECUTING record still at rec.OwnerGen to UNKNOWN
// (one compare-and-set) and returns it; registry.ErrFenced otherwise.
// ctx governs the call.
func (s *Store) MarkUnknown(ctx context.Context, rec registry.Record) (registry.Record, error) {
	var out registry.Record
	err := s.writeTx(ctx, "mark unknown", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, effectQueries.Get("MarkUnknown"), now, rec.Scope[:], rec.OperationID, rec.OwnerGen)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", rec.OperationID, registry.ErrFenced)
		}
		out, err = s.scanRecord(queryRow(ctx, tx, queries.Get("GetByID"), rec.OperationID))
		return err
	})
	return out, err
}

// Reconcile settles an UNKNOWN operation on evidence: in one transaction,
// the compare-and-set from UNKNOWN to r.Outcome with its response, the
// outbox rows and the reconciliation log entry. registry.ErrNotFound when
// there is no such operation, registry.ErrFenced when it is not UNKNOWN.
// ctx governs the call.
func (s *Store) Reconcile(ctx context.Context, operationID string, r registry.Reconciliation) (registry.Record, error) {
	if err := r.Validate(); err != nil {
		return registry.Record{}, fmt.Errorf("idemmysql: reconcile: %w", err)
	}
	resp := r.Response
	digest := resp.Digest()
	var out registry.Record
	err := s.writeTx(ctx, "reconcile", func(tx *sql.Tx, now any) error {
		var scope []byte
		err := queryRow(ctx, tx, effectQueries.Get("OperationScope"), operationID).Scan(&scope)
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
		n, err := exec(ctx, tx, effectQueries.Get("ReconcileOperation"), now, operationID, string(r.Outcome),
			resp.Status, resp.MediaType, resp.Location, resp.ETag, body, digest[:], key, scope)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", operationID, registry.ErrFenced)
		}
		out, err = s.scanRecord(queryRow(ctx, tx, queries.Get("GetByID"), operationID))
		if err != nil {
			return err
		}
		at := out.UpdatedAt.UnixMicro()
		for i, m := range r.Outbox {
			if err := s.insertOutbox(ctx, tx, at, operationID, i, m); err != nil {
				return err
			}
		}
		_, err = exec(ctx, tx, effectQueries.Get("ReconcileLog"), at, operationID, string(r.Outcome), r.Method, r.Actor, r.Evidence)
		return err
	})
	if err != nil {
		return registry.Record{}, err
	}
	return out, nil
}

// Reconciliations returns the reconciliation log of an operation, oldest
// first. ctx governs the query.
func (s *Store) Reconciliations(ctx context.Context, operationID string) ([]registry.ReconciliationEntry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := queryRows(ctx, s.db, effectQueries.Get("Reconciliations"), operationID)
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

// ListOperations returns the records f selects, oldest first, from f's
// keyset cursor; see registry.EffectStore. ctx governs the query.
func (s *Store) ListOperations(ctx context.Context, f registry.ListFilter) ([]registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("idemmysql: %w", err)
	}
	state, afterAt, afterID := any(nil), any(nil), any(nil)
	if f.State != "" {
		state = string(f.State)
	}
	if f.After.OperationID != "" {
		afterAt, afterID = f.After.CreatedAt.UnixMicro(), f.After.OperationID
	}
	rows, err := queryRows(ctx, s.db, effectQueries.Get("ListOperations"),
		s.nowParam(), state, f.OlderThan.Microseconds(), f.LimitOrDefault(), afterAt, afterID)
	if err != nil {
		return nil, s.fail("list operations", err)
	}
	recs, err := s.scanRecords(rows)
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
		return 0, fmt.Errorf("idemmysql: %w", err)
	}
	state := any(nil)
	if f.State != "" {
		state = string(f.State)
	}
	var n int64
	if err := queryRow(ctx, s.db, effectQueries.Get("CountOperations"), s.nowParam(), state, f.OlderThan.Microseconds()).Scan(&n); err != nil {
		return 0, s.fail("count operations", err)
	}
	return n, nil
}

// scanRecords reads every record of rows and closes them.
func (s *Store) scanRecords(rows *sql.Rows) ([]registry.Record, error) {
	defer rows.Close()
	var recs []registry.Record
	for rows.Next() {
		r, err := s.scanRecord(rows)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return recs, rows.Close()
}

// scanEffect reads one effect row in the column order of effects.sql and
// opens its sealed request and answer.
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
