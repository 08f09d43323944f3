package idempg

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestEffectDurableRaisesOnlyWeakSettings checks the statement that makes
// BeginEffect's commit synchronous: it raises off and local to on for its
// own transaction only, and keeps stronger settings.
// Proves threat:effect-answer-async-loss: the intent before the call is
// never committed asynchronously.
func TestEffectDurableRaisesOnlyWeakSettings(t *testing.T) {
	t.Parallel()
	if pgtest.Pooled() {
		// The session's setting comes from the DSN, a startup parameter
		// PgBouncer refuses; the statement under test is the same.
		t.Skip("a session-level synchronous_commit cannot be set through a transaction pooler")
	}
	for _, c := range []struct{ session, inTx string }{
		{"off", "on"}, {"local", "on"}, {"on", "on"}, {"remote_apply", "remote_apply"},
	} {
		t.Run(c.session, func(t *testing.T) {
			t.Parallel()
			ts := openStore(t, "&pool_max_conns=1&synchronous_commit="+c.session)
			ctx := t.Context()
			var got string
			err := pgx.BeginFunc(ctx, ts.Pool(), func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, effectQueries.Get("EffectDurable")); err != nil {
					return err
				}
				return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
			})
			if err != nil || got != c.inTx {
				t.Errorf("inside the transaction: synchronous_commit = %q (err %v), want %q", got, err, c.inTx)
			}
			// BeginEffect on a real record; the setting must not leak into
			// the pooled session either way.
			rec, _, err := ts.Reserve(ctx, newClaim("durable"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ts.BeginEffect(ctx, rec, "transfer", nil); err != nil {
				t.Fatalf("BeginEffect: %v", err)
			}
			if err := ts.Pool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil || got != c.session {
				t.Errorf("pooled session after BeginEffect: synchronous_commit = %q (err %v), want %q", got, err, c.session)
			}
			// ReserveEffect sends the same statement in its one batch.
			if res, _, err := ts.ReserveEffect(ctx, newClaim("durable-once"), "transfer", nil); err != nil || res.Verdict != registry.Execute {
				t.Fatalf("ReserveEffect: %v %v", res.Verdict, err)
			}
			if err := ts.Pool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil || got != c.session {
				t.Errorf("pooled session after ReserveEffect: synchronous_commit = %q (err %v), want %q", got, err, c.session)
			}
		})
	}
}

// TestRecordEffectCommitsAsynchronously checks that RecordEffect's
// statement turns synchronous_commit off for its own transaction — its
// flush is shared with the synchronous outcome commit that follows it —
// and that the setting does not leak into the pooled session, where it
// would make that outcome commit asynchronous too. BeginEffect before it
// stays synchronous (TestEffectDurableRaisesOnlyWeakSettings).
// Proves threat:effect-answer-async-loss.
func TestRecordEffectCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	ts := openStore(t, "&pool_max_conns=1")
	ctx := t.Context()
	rec, _, err := ts.Reserve(ctx, newClaim("record-async"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.BeginEffect(ctx, rec, "transfer", nil); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if rec, err = ts.Get(ctx, rec.Scope); err != nil {
		t.Fatal(err)
	}
	var got string
	err = pgx.BeginFunc(ctx, ts.Pool(), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, effectQueries.Get("EffectRecord"), rec.Scope[:], rec.OperationID, rec.OwnerGen,
			"transfer", "tr_1", "", nil, nil, nil)
		if err != nil || tag.RowsAffected() != 1 {
			return fmt.Errorf("EffectRecord: %v rows (err %w), want 1", tag.RowsAffected(), err)
		}
		return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
	})
	if err != nil || got != "off" {
		t.Errorf("after the EffectRecord statement in its transaction: synchronous_commit = %q (err %v), want off", got, err)
	}
	if err := ts.RecordEffect(ctx, rec, "transfer", "tr_1", registry.EffectSucceeded, []byte(`{"id":"tr_1"}`)); err != nil {
		t.Fatalf("RecordEffect: %v", err)
	}
	if err := ts.Pool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil || got != "on" {
		t.Errorf("pooled session after RecordEffect: synchronous_commit = %q (err %v), want on", got, err)
	}
}
