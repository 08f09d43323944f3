package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Effects in the one-transaction style: two durable commits per
// execution (registry/effects.go).

// ReserveEffect inserts c's record in EXECUTING and the attempt of the
// effect name in one durable write transaction; see registry.EffectStore.
// Inside it: the claim insert (queries.sql ClaimInsert, or its Limited
// variant with c.MaxActive — a plain INSERT, as ClaimAndExecute's), the
// fenced move to EXECUTING (effects.sql EffectBeginOperation) and the
// attempt's upsert; no other connection ever sees the record RESERVED.
// When the insert fails (the scope has a record, the writer fence or the
// active limit) the transaction is rolled back and the scope's record,
// read afresh, decides, as in ClaimAndExecute. The commit is durable
// under synchronous=FULL, as Open sets it. ctx governs the call.
func (s *Store) ReserveEffect(ctx context.Context, c registry.Claim, name string, request []byte) (registry.Result, registry.Effect, error) {
	if name == "" {
		return registry.Result{}, registry.Effect{}, errors.New("idemsqlite: reserve effect: empty effect name")
	}
	_, idAt := s.stamp()
	c.OperationID = cmp.Or(c.OperationID, idem.NewOperationID(idAt, c.Scope)) // the request is sealed for it
	reqKey, req, err := registry.SealBody(s.sealer, request, registry.EffectPartOf(c.OperationID, name, "request"))
	if err != nil {
		return registry.Result{}, registry.Effect{}, fmt.Errorf("idemsqlite: reserve effect: %w", err)
	}
	var (
		rec    registry.Record
		eff    registry.Effect
		insErr error
	)
	err = s.writeTx(ctx, "reserve effect", func(tx *sql.Tx, now any) error {
		var err error
		if rec, insErr = s.claimInsert(ctx, tx, c); insErr != nil {
			return insErr
		}
		var id string
		err = tx.QueryRowContext(ctx, effectQueries.Get("EffectBeginOperation"),
			now, c.Scope[:], rec.OperationID, rec.OwnerGen, c.WriterEpoch).Scan(&id)
		if err != nil {
			return err // the insert just passed the same fence: not fenced
		}
		eff, err = s.scanEffect(tx.QueryRowContext(ctx, effectQueries.Get("EffectUpsert"),
			now, rec.OperationID, name, registry.DownstreamKey(rec.OperationID, name), rec.OwnerGen, req, reqKey))
		if err != nil {
			return err
		}
		rec, err = s.scanRecord(s.txStmt(ctx, tx, "GetByScope").QueryRowContext(ctx, c.Scope[:]))
		return err
	})
	if insErr != nil {
		existing, err := s.Get(ctx, c.Scope)
		res, err := s.lostClaim(c, insErr, existing, err)
		return res, registry.Effect{}, err
	}
	if err != nil {
		return registry.Result{}, registry.Effect{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: rec}, eff, nil
}

// CompleteEffects records the answers and the outcome of rec in one
// durable write transaction; see registry.EffectStore. It is Complete
// whose business function stores each answer (effects.sql EffectRecord,
// fenced by rec.OwnerGen); an answer that matches no attempt, or a
// fenced record, rolls everything back with registry.ErrFenced. ctx
// governs the call.
func (s *Store) CompleteEffects(ctx context.Context, rec registry.Record, answers []registry.EffectAnswer, out registry.Outcome) (registry.Record, error) {
	type sealed struct {
		key  *string
		body []byte
	}
	bodies := make([]sealed, len(answers))
	for i, a := range answers {
		if err := a.Validate(); err != nil {
			return registry.Record{}, fmt.Errorf("idemsqlite: complete effects: %w", err)
		}
		key, body, err := registry.SealBody(s.sealer, a.Answer, registry.EffectPartOf(rec.OperationID, a.Name, "answer"))
		if err != nil {
			return registry.Record{}, fmt.Errorf("idemsqlite: complete effects: %w", err)
		}
		bodies[i] = sealed{key, body}
	}
	done, err := s.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, _ registry.Record) (registry.Outcome, error) {
		native := tx.Native().(*sql.Tx)
		for i, a := range answers {
			res, err := native.ExecContext(ctx, effectQueries.Get("EffectRecord"),
				s.nowParam(), rec.Scope[:], rec.OperationID, rec.OwnerGen, a.Name, a.Handle, a.Result, bodies[i].body, bodies[i].key)
			if err != nil {
				return registry.Outcome{}, s.fail("complete effects", err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return registry.Outcome{}, fmt.Errorf("idemsqlite: complete effects %s/%s: %w", rec.OperationID, a.Name, cmp.Or(err, registry.ErrFenced))
			}
		}
		return out, nil
	})
	return done, err
}
