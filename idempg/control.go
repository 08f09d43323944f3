package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// control.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed control.sql
var controlFS embed.FS

// controlQueries holds the named statements of control.sql.
var controlQueries = sqlfile.MustLoad(controlFS, "control.sql")

var _ registry.Controller = (*Store)(nil)

// The writer fence. The Reserve, Claim and Finish statements (queries.sql)
// carry the condition "epoch >= idem_control.writer_epoch": a claim whose
// Claim.WriterEpoch is older inserts nothing, and a completion whose
// Record.WriterEpoch is older updates nothing, so the business writes of
// its transaction roll back with it. Once such a statement matched no row,
// writerFenced reads the epoch to report registry.ErrWriterFenced rather
// than ErrFenced or ErrActiveLimit. Reads are never fenced: Reserve returns
// an existing scope's record to any writer, so replays keep working.
// Complete fences on rec.WriterEpoch as its caller passes it: a writer that
// takes a record over (recovery) completes it under its own epoch.

// Control returns the registry's control row. ctx governs the query.
func (s *Store) Control(ctx context.Context) (registry.Control, error) {
	var c registry.Control
	err := s.pool.QueryRow(ctx, controlQueries.Get("ControlGet")).Scan(&c.WriterEpoch, &c.Draining, &c.UpdatedAt)
	if err != nil {
		return registry.Control{}, fmt.Errorf("idempg: control: %w", translate(err))
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return c, nil
}

// BumpEpoch raises the writer epoch by one and returns the new value; see
// registry.Controller. The update commits durably before it returns.
//
// A completion (Complete, ClaimAndExecute) reads the epoch in its fenced
// statement, in its own transaction's READ COMMITTED snapshot: one whose
// statement ran before the bump committed may still commit just after
// BumpEpoch returns; none that runs later can. That race cannot produce a
// second effect — the owner generation still fences every record — it only
// means "fenced" takes effect at statement, not commit, granularity.
func (s *Store) BumpEpoch(ctx context.Context) (int64, error) {
	now, _ := s.clock()
	var epoch int64
	if err := s.pool.QueryRow(ctx, controlQueries.Get("ControlBumpEpoch"), now).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("idempg: bump epoch: %w", translate(err))
	}
	return epoch, nil
}

// SetDraining sets the drain flag; see registry.Controller.
func (s *Store) SetDraining(ctx context.Context, on bool) error {
	now, _ := s.clock()
	tag, err := s.pool.Exec(ctx, controlQueries.Get("ControlSetDraining"), now, on)
	if err != nil {
		return fmt.Errorf("idempg: set draining: %w", translate(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("idempg: set draining: the control row is missing (migration 003)")
	}
	return nil
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// writerFenced tells why a fenced insert or update changed nothing: it
// returns registry.ErrWriterFenced if epoch is older than the registry's
// writer epoch, nil if it is not, or the error of reading the epoch. The
// Reserve, Claim and Finish statements check the epoch themselves; this is
// only called after one of them matched no row.
func writerFenced(ctx context.Context, q rowQuerier, epoch int64) error {
	var current int64
	if err := q.QueryRow(ctx, controlQueries.Get("ControlEpoch")).Scan(&current); err != nil {
		return fmt.Errorf("reading the writer epoch: %w", translate(err))
	}
	if epoch < current {
		return fmt.Errorf("%w (writer epoch %d, registry epoch %d)", registry.ErrWriterFenced, epoch, current)
	}
	return nil
}
