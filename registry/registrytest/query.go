package registrytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemkit/idem/registry"
)

// Cases of Tx.Query, the multi-row read: each runs in every transaction a
// driver hands out (InTx, Complete, ExecuteOnce, ClaimAndExecute), with
// the query as the transaction's first statement and after another one —
// a driver may begin its transaction together with the first statement.

const (
	// selectNotes reads the notes of an operation but one, in order; two
	// placeholders, as Exec takes them.
	selectNotes = `SELECT note FROM conformance_effects WHERE operation_id = $1 AND note <> $2 ORDER BY note`
	// queryRowsKey is the operation whose notes the cases read: queryNotes
	// and queryExcluded.
	queryRowsKey  = "query-rows"
	queryExcluded = "d"
	// selectMissing reads a table that does not exist.
	selectMissing = `SELECT note FROM conformance_no_such_table WHERE operation_id = $1`
)

// queryNotes are the notes selectNotes returns for queryRowsKey.
var queryNotes = []string{"a", "b", "c"}

// txStyle is one kind of transaction a driver hands to business code: run
// calls fn in a new one and commits it if fn returns nil; it returns fn's
// error or the store's.
type txStyle struct {
	name string
	run  func(e *env, fn func(ctx context.Context, tx registry.Tx) error) error
}

var txStyles = []txStyle{
	{"InTx", func(e *env, fn func(context.Context, registry.Tx) error) error {
		return e.h.Store.InTx(e.ctx, fn)
	}},
	{"Complete", func(e *env, fn func(context.Context, registry.Tx) error) error {
		_, err := e.h.Store.Complete(e.ctx, e.reserve(e.claim("conformance.query")), business(fn))
		return err
	}},
	{"ExecuteOnce", func(e *env, fn func(context.Context, registry.Tx) error) error {
		res, err := e.h.Store.ExecuteOnce(e.ctx, e.claim("conformance.query"), business(fn))
		return executed(res, err)
	}},
	{"ClaimAndExecute", func(e *env, fn func(context.Context, registry.Tx) error) error {
		res, err := e.h.ClaimAndExecute(e.ctx, e.claim("conformance.query"), business(fn))
		return executed(res, err)
	}},
}

// business is fn as a business function that succeeds when fn does.
func business(fn func(context.Context, registry.Tx) error) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, _ registry.Record) (registry.Outcome, error) {
		if err := fn(ctx, tx); err != nil {
			return registry.Outcome{}, err
		}
		return outcome("query", 0), nil
	}
}

// executed is err, or an error if the verdict is not Execute.
func executed(res registry.Result, err error) error {
	if err == nil && res.Verdict != registry.Execute {
		err = fmt.Errorf("verdict %v, want execute", res.Verdict)
	}
	return err
}

// setupQuery is setup with the rows the cases read: queryNotes out of
// order, and queryExcluded, which selectNotes leaves out.
func setupQuery(t *testing.T, nh NewHarness) *env {
	t.Helper()
	e := setup(t, nh)
	for _, note := range []string{"c", queryExcluded, "a", "b"} {
		e.exec(insertEffect, queryRowsKey, note)
	}
	return e
}

// readNotes reads every row of selectNotes for key through tx.Query.
func readNotes(ctx context.Context, tx registry.Tx, key string) ([]string, error) {
	rows, err := tx.Query(ctx, selectNotes, key, queryExcluded)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var notes []string
	for rows.Next() {
		var note string
		if err := rows.Scan(&note); err != nil {
			return notes, err
		}
		notes = append(notes, note)
	}
	return notes, rows.Err()
}

// step is one check or statement of a case's transaction.
type step func(ctx context.Context, tx registry.Tx) error

// steps runs ss in order and returns the first error.
func steps(ss ...step) func(context.Context, registry.Tx) error {
	return func(ctx context.Context, tx registry.Tx) error {
		for _, s := range ss {
			if err := s(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	}
}

// notes checks that the notes selectNotes reads for key are want.
func notes(key string, want []string) step {
	return func(ctx context.Context, tx registry.Tx) error {
		got, err := readNotes(ctx, tx, key)
		switch {
		case err != nil:
			return fmt.Errorf("reading the rows of %s: %w", key, err)
		case !slices.Equal(got, want):
			return fmt.Errorf("rows of %s: %q, want %q", key, got, want)
		}
		return nil
	}
}

// insert inserts one business row for key, as a statement between reads.
func insert(key string) step {
	return func(ctx context.Context, tx registry.Tx) error {
		n, err := tx.Exec(ctx, insertEffect, key, "between")
		if err == nil && n != 1 {
			err = fmt.Errorf("insert affected %d rows, want 1", n)
		}
		return err
	}
}

// testQueryRows: Query returns every row in the query's order, and none
// when nothing matches, with a nil Err either way; the transaction goes on
// after reading them.
func testQueryRows(t *testing.T, nh NewHarness) {
	e := setupQuery(t, nh)
	for _, s := range txStyles {
		after := "query-rows-after-" + s.name
		err := s.run(e, steps(
			notes(queryRowsKey, queryNotes),
			notes("query-none", nil),
			insert(after),
			notes(queryRowsKey, queryNotes),
			notes(after, []string{"between"}),
		))
		if err != nil {
			t.Errorf("%s, several rows first: %v", s.name, err)
		}
		if n := e.effects(after); n != 1 {
			t.Errorf("%s: %d rows committed after the reads, want 1", s.name, n)
		}
		err = s.run(e, steps(notes("query-none", nil), notes(queryRowsKey, queryNotes)))
		if err != nil {
			t.Errorf("%s, no rows first: %v", s.name, err)
		}
	}
}

// scanFails reads selectNotes into an integer, which the note "a" is not,
// and checks that the failed Scan ended the iteration: Next is false and
// Err reports an error.
func scanFails(ctx context.Context, tx registry.Tx) error {
	rows, err := tx.Query(ctx, selectNotes, queryRowsKey, queryExcluded)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return fmt.Errorf("no first row (err %v)", rows.Err())
	}
	var n int64
	if err := rows.Scan(&n); err == nil {
		return fmt.Errorf("scanning %q into an integer: no error, got %d", queryNotes[0], n)
	}
	if rows.Next() {
		return fmt.Errorf("Next is true after a failed Scan")
	}
	if rows.Err() == nil {
		return fmt.Errorf("Err is nil after a failed Scan")
	}
	return nil
}

// testQueryScanError: a Scan into a destination the column does not fit
// fails and ends the iteration; the transaction goes on and commits.
func testQueryScanError(t *testing.T, nh NewHarness) {
	e := setupQuery(t, nh)
	for _, s := range txStyles {
		after := "query-scan-after-" + s.name
		err := s.run(e, steps(scanFails, insert(after), scanFails, notes(queryRowsKey, queryNotes)))
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		if n := e.effects(after); n != 1 {
			t.Errorf("%s: %d rows committed after the failed scans, want 1", s.name, n)
		}
	}
}

// closeEarly reads the first row of selectNotes and closes the rows, twice.
func closeEarly(ctx context.Context, tx registry.Tx) error {
	rows, err := tx.Query(ctx, selectNotes, queryRowsKey, queryExcluded)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer rows.Close() // a second Close
	if !rows.Next() {
		return fmt.Errorf("no first row (err %v)", rows.Err())
	}
	var note string
	if err := rows.Scan(&note); err != nil || note != queryNotes[0] {
		return fmt.Errorf("first row: %q, %v; want %q", note, err, queryNotes[0])
	}
	rows.Close()
	if rows.Next() {
		return fmt.Errorf("Next is true after Close")
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("Err after an early Close: %w", err)
	}
	return nil
}

// testQueryCloseEarly: closing rows before their end discards the rest
// without error, and the transaction goes on and commits.
func testQueryCloseEarly(t *testing.T, nh NewHarness) {
	e := setupQuery(t, nh)
	for _, s := range txStyles {
		after := "query-close-after-" + s.name
		err := s.run(e, steps(closeEarly, insert(after), closeEarly, notes(after, []string{"between"})))
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		if n := e.effects(after); n != 1 {
			t.Errorf("%s: %d rows committed after the early closes, want 1", s.name, n)
		}
	}
}

// queryMissing reads a table that does not exist and returns the error,
// from Query or from Err, or an error saying there was none.
func queryMissing(ctx context.Context, tx registry.Tx) error {
	rows, err := tx.Query(ctx, selectMissing, queryRowsKey)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return errNoQueryError
}

var errNoQueryError = errors.New("a query of a missing table: no error")

// testQueryError: the error of a query that the database refuses comes
// from Query or Err, and the business code's returning it rolls the
// transaction back — as the first statement or after a write — and is
// what the store returns, not a registry error.
func testQueryError(t *testing.T, nh NewHarness) {
	e := setupQuery(t, nh)
	for _, s := range txStyles {
		for _, first := range []bool{true, false} {
			what := fmt.Sprintf("%s, query first %v", s.name, first)
			key := fmt.Sprintf("query-error-%s-%v", s.name, first)
			var queryErr error
			err := s.run(e, func(ctx context.Context, tx registry.Tx) error {
				if !first {
					if err := insert(key)(ctx, tx); err != nil {
						return fmt.Errorf("insert before the query: %w", err)
					}
				}
				queryErr = queryMissing(ctx, tx)
				return queryErr
			})
			switch {
			case errors.Is(queryErr, errNoQueryError) || queryErr == nil:
				t.Errorf("%s: %v", what, queryErr)
			case !errors.Is(err, queryErr):
				t.Errorf("%s: the store returned %v, want the query's error %v", what, err, queryErr)
			case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrFenced),
				errors.Is(err, registry.ErrUnavailable), errors.Is(err, registry.ErrActiveLimit):
				t.Errorf("%s: the query's error is a registry error: %v", what, err)
			}
			if n := e.effects(key); n != 0 {
				t.Errorf("%s: %d rows committed, want 0 (rolled back)", what, n)
			}
		}
	}
}
