package idemmysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idem/registry"
)

var _ registry.Controller = (*Store)(nil)

// Control returns the control row. ctx governs the call.
func (s *Store) Control(ctx context.Context) (registry.Control, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Control{}, err
	}
	var (
		c                 registry.Control
		draining, updated int64
	)
	if err := queryRow(ctx, s.db, queries.Get("ControlGet")).Scan(&c.WriterEpoch, &draining, &updated); err != nil {
		return registry.Control{}, s.fail("control", err)
	}
	c.Draining = draining != 0
	c.UpdatedAt = fromMicros(updated)
	return c, nil
}

// BumpEpoch raises the writer epoch by one and returns the new epoch. The
// update holds the control row's lock until it commits, so concurrent
// bumps each return a distinct epoch, and claims in flight (which read
// the row with a shared lock) finish first. ctx governs the call.
func (s *Store) BumpEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	err := s.writeTx(ctx, "bump epoch", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, queries.Get("ControlBumpEpoch"), now)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("the control row is missing (migration 001): %d rows", n)
		}
		return queryRow(ctx, tx, queries.Get("ControlEpoch")).Scan(&epoch)
	})
	return epoch, err
}

// SetDraining sets or clears the drain flag. ctx governs the call.
func (s *Store) SetDraining(ctx context.Context, on bool) error {
	flag := 0
	if on {
		flag = 1
	}
	return s.writeTx(ctx, "set draining", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, queries.Get("ControlSetDraining"), now, flag)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("the control row is missing (migration 001): %d rows", n)
		}
		return nil
	})
}

// writeTx runs fn in a transaction of its own and commits it; a deadlock
// (fn's statements are the driver's own and write nothing outside the
// database) runs it again, up to deadlockAttempts times. Errors are
// translated and prefixed with op.
func (s *Store) writeTx(ctx context.Context, op string, fn func(tx *sql.Tx, now any) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.writeTxOnce(ctx, fn)
		if err == nil {
			return nil
		}
		if !isDeadlock(err) || attempt == deadlockAttempts {
			return s.fail(op, err)
		}
		deadlockPause(ctx, attempt)
	}
}

// deadlockPause waits a little before a deadlock victim runs again —
// attempt milliseconds, or until ctx ends — so that the transaction that
// won gets ahead instead of meeting the victim at the same locks again.
func deadlockPause(ctx context.Context, attempt int) {
	t := time.NewTimer(time.Duration(attempt) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (s *Store) writeTxOnce(ctx context.Context, fn func(tx *sql.Tx, now any) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx, s.nowParam()); err != nil {
		return err
	}
	return tx.Commit()
}

// writerFenced returns registry.ErrWriterFenced when epoch is older than
// the registry's writer epoch, read on q; nil otherwise.
func writerFenced(ctx context.Context, q querier, epoch int64) error {
	var current int64
	if err := queryRow(ctx, q, queries.Get("ControlEpoch")).Scan(&current); err != nil {
		return fmt.Errorf("reading the writer epoch: %w", translate(err))
	}
	if epoch < current {
		return fmt.Errorf("%w (writer epoch %d, registry epoch %d)", registry.ErrWriterFenced, epoch, current)
	}
	return nil
}
