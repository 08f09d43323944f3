package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// control.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed control.sql
var controlFiles embed.FS

// controlQueries holds the named statements of control.sql. They are not
// prepared: an instance reads the control row about once a second, and
// the rest are operator commands.
var controlQueries = sqlfile.MustLoad(controlFiles, "control.sql")

var _ registry.Controller = (*Store)(nil)

// The writer fence. The ReserveInsert, ClaimInsert and CompleteOperation
// statements (queries.sql) carry the condition "epoch >=
// idem_control.writer_epoch": a claim whose Claim.WriterEpoch is older
// inserts nothing, and a completion whose Record.WriterEpoch is older
// updates nothing, so the business writes of its transaction roll back
// with it. Once such a statement matched no row,
// writerFenced reads the epoch to report registry.ErrWriterFenced rather
// than ErrFenced or ErrActiveLimit. Reads are never fenced: Reserve returns
// an existing scope's record to any writer, so replays keep working.
// Complete fences on rec.WriterEpoch as its caller passes it: a writer that
// takes a record over (recovery) completes it under its own epoch.

// Control returns the registry's control row. ctx governs the query.
func (s *Store) Control(ctx context.Context) (registry.Control, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Control{}, err
	}
	var (
		c        registry.Control
		draining int64
		updated  int64
	)
	err := s.db.QueryRowContext(ctx, controlQueries.Get("ControlGet")).Scan(&c.WriterEpoch, &draining, &updated)
	if err != nil {
		return registry.Control{}, s.fail("control", err)
	}
	c.Draining = draining != 0
	c.UpdatedAt = fromMicros(updated)
	return c, nil
}

// BumpEpoch raises the writer epoch by one and returns the new value; see
// registry.Controller. It runs in a write transaction, which SQLite
// serialises with every Reserve, Complete and claim: once it returns, no
// writer at an older epoch can accept or commit anything. The commit is
// durable. ctx governs the call.
func (s *Store) BumpEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	err := s.writeTx(ctx, "bump epoch", func(tx *sql.Tx, now any) error {
		return tx.QueryRowContext(ctx, controlQueries.Get("ControlBumpEpoch"), now).Scan(&epoch)
	})
	return epoch, err
}

// SetDraining sets the drain flag; see registry.Controller. ctx governs
// the call.
func (s *Store) SetDraining(ctx context.Context, on bool) error {
	flag := 0
	if on {
		flag = 1
	}
	return s.writeTx(ctx, "set draining", func(tx *sql.Tx, now any) error {
		res, err := tx.ExecContext(ctx, controlQueries.Get("ControlSetDraining"), now, flag)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("the control row is missing (migration 003): %d rows, %v", n, err)
		}
		return nil
	})
}

// writeTx runs fn in a write transaction (so it queues at the gate with
// the Store's other writers), handing it the "now" parameter of the
// queries, and commits it. Every error, fn's included, is returned through
// fail as op's.
func (s *Store) writeTx(ctx context.Context, op string, fn func(tx *sql.Tx, now any) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(op, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx, s.nowParam()); err != nil {
		return s.fail(op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// writerFenced tells why a fenced insert or update changed nothing: it
// returns registry.ErrWriterFenced if epoch is older than the registry's
// writer epoch, nil if it is not, or the error of reading the epoch. The
// ReserveInsert, ClaimInsert and CompleteOperation statements check the
// epoch themselves; this is called only after one of them matched no row,
// in the same transaction.
func writerFenced(ctx context.Context, tx *sql.Tx, epoch int64) error {
	var current int64
	if err := tx.QueryRowContext(ctx, controlQueries.Get("ControlEpoch")).Scan(&current); err != nil {
		return fmt.Errorf("reading the writer epoch: %w", translate(err))
	}
	if epoch < current {
		return fmt.Errorf("%w (writer epoch %d, registry epoch %d)", registry.ErrWriterFenced, epoch, current)
	}
	return nil
}
