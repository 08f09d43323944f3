package idemsqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

func TestGateEnter(t *testing.T) {
	g := make(gate, 1)
	if !g.enter(t.Context()) {
		t.Fatal("a free gate was not entered")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if g.enter(ctx) {
		t.Fatal("a held gate was entered")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("enter with a done context waited %v", d)
	}
	g.leave()
	if !g.enter(t.Context()) {
		t.Fatal("the gate was not free after leave")
	}
	g.leave()
}

// While one write transaction is open, a second waits at the gate and
// goes on once the first ends; read-only transactions pass.
func TestGateQueuesWriteTransactions(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t)
	ctx := t.Context()
	first, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := s.DB().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only transaction while a writer is open: %v", err)
	}
	if err := ro.Rollback(); err != nil {
		t.Fatal(err)
	}

	began := make(chan error, 1)
	go func() {
		second, err := s.DB().BeginTx(ctx, nil)
		if err == nil {
			err = second.Commit()
		}
		began <- err
	}()
	select {
	case err := <-began:
		t.Fatalf("second write transaction began while the first was open (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-began:
		if err != nil {
			t.Fatalf("second write transaction: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second write transaction did not begin after the first ended")
	}

	// A rolled-back or failed transaction frees the gate as well.
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT no_such_column`); err == nil {
		t.Fatal("bad statement accepted")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Reserve(ctx, newClaim("after")); err != nil {
		t.Fatalf("Reserve after a rollback: %v", err)
	}
}
