package idemsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Benchmarks of one payment write: plain (BEGIN; INSERT; COMMIT), the
// in-transaction style, the two-phase style (Reserve + Complete), a
// replay (Reserve of a completed scope) and the one-transaction style
// (BenchmarkExecuteOnce, at 1, 16 and 64 workers). Each runs at 1 and 16
// workers on a fresh database file and reports ops/s.

const benchPayments = `CREATE TABLE bench_payments (id TEXT PRIMARY KEY, amount TEXT)`

const insertPayment = `INSERT INTO bench_payments (id, amount) VALUES ($1, $2)`

// benchOutcome is what every benchmark's business function returns.
var benchOutcome = registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{
	Status: 201, MediaType: "application/json", Location: "/payments/x", Body: []byte(`{"id":"x","amount":"10.00"}`),
}}

// pay is the business function: insert one payment named after the
// operation.
func pay(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
	if _, err := tx.Exec(ctx, insertPayment, rec.OperationID, "10.00"); err != nil {
		return registry.Outcome{}, err
	}
	return benchOutcome, nil
}

// runWorkers runs b.N calls of op spread over workers goroutines and
// reports ops/s. op gets the call's index, unique within the run.
func runWorkers(b *testing.B, workers int, op func(i int64) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				if err := op(i); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchStore opens a fresh Store with the business table.
func benchStore(b *testing.B) *Store {
	b.Helper()
	s, _ := openTest(b)
	if _, err := s.DB().Exec(benchPayments); err != nil {
		b.Fatal(err)
	}
	return s
}

func forWorkers(b *testing.B, bench func(b *testing.B, workers int)) {
	for _, w := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { bench(b, w) })
	}
}

func BenchmarkInsertPlain(b *testing.B) {
	forWorkers(b, func(b *testing.B, workers int) {
		s := benchStore(b)
		ctx := b.Context()
		runWorkers(b, workers, func(i int64) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insertPayment, fmt.Sprintf("pay_%d", i), "10.00"); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
}

func BenchmarkClaimAndExecute(b *testing.B) {
	forWorkers(b, func(b *testing.B, workers int) {
		s := benchStore(b)
		ctx := b.Context()
		runWorkers(b, workers, func(int64) error {
			res, err := inTx(ctx, s, newClaim("bench.pay"), pay)
			if err == nil && res.Verdict != registry.Execute {
				err = fmt.Errorf("verdict %v", res.Verdict)
			}
			return err
		})
	})
}

func BenchmarkTwoPhase(b *testing.B) {
	forWorkers(b, func(b *testing.B, workers int) {
		s := benchStore(b)
		ctx := b.Context()
		runWorkers(b, workers, func(int64) error {
			rec, created, err := s.Reserve(ctx, newClaim("bench.pay"))
			if err != nil || !created {
				return fmt.Errorf("Reserve: created %v err %v", created, err)
			}
			_, err = s.Complete(ctx, rec, pay)
			return err
		})
	})
}

func BenchmarkReplay(b *testing.B) {
	forWorkers(b, func(b *testing.B, workers int) {
		s := benchStore(b)
		ctx := b.Context()
		c := newClaim("bench.pay")
		rec, _, err := s.Reserve(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Complete(ctx, rec, pay); err != nil {
			b.Fatal(err)
		}
		runWorkers(b, workers, func(int64) error {
			got, created, err := s.Reserve(ctx, c)
			if err == nil && (created || registry.Decide(got, false, c.Fingerprint) != registry.Replay) {
				err = fmt.Errorf("created %v state %s", created, got.State)
			}
			return err
		})
	})
}

// BenchmarkExecuteOnce is the one-transaction style, pay at 1, 16 and 64
// workers, with group commit (MaxBatch zero: DefaultMaxBatch) and without
// (MaxBatch 1: a transaction per call), under synchronous FULL (Open's
// setting) and NORMAL (WAL: a commit is atomic but may be lost on a power
// failure until the next checkpoint). Run it next to BenchmarkInsertPlain
// for the ratios.
func BenchmarkExecuteOnce(b *testing.B) {
	for _, mode := range []string{"FULL", "NORMAL"} {
		for _, batch := range []int{1, 0} {
			for _, w := range []int{1, 16, 64} {
				name := fmt.Sprintf("sync=%s/maxbatch=%d/workers=%d", mode, maxBatch(batch), w)
				b.Run(name, func(b *testing.B) {
					s := benchStoreSync(b, mode, batch)
					ctx := b.Context()
					runWorkers(b, w, func(int64) error {
						res, err := s.ExecuteOnce(ctx, newClaim("bench.pay"), pay)
						if err == nil && res.Verdict != registry.Execute {
							err = fmt.Errorf("verdict %v", res.Verdict)
						}
						return err
					})
				})
			}
		}
	}
}

// benchStoreSync is benchStore with that synchronous setting (FULL or
// NORMAL) and Options.MaxBatch: it opens the database as Open does, then
// replaces Open's synchronous(FULL).
func benchStoreSync(b *testing.B, sync string, batch int) *Store {
	b.Helper()
	name, err := driverDSN("sqlite:" + filepath.Join(b.TempDir(), "idem.db"))
	if err != nil {
		b.Fatal(err)
	}
	full := url.QueryEscape("synchronous(FULL)")
	if !strings.Contains(name, full) {
		b.Fatalf("DSN %s does not set %s", name, full)
	}
	name = strings.Replace(name, full, url.QueryEscape("synchronous("+sync+")"), 1)
	connector, err := sqlite.NewConnector(name)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(&gatedConnector{Connector: connector, gate: make(gate, 1)})
	db.SetMaxIdleConns(idleConns)
	b.Cleanup(func() { db.Close() })
	s, err := OpenDB(b.Context(), db, Options{MaxBatch: batch})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	var level int
	if err := db.QueryRow(`PRAGMA synchronous`).Scan(&level); err != nil || level != map[string]int{"NORMAL": 1, "FULL": 2}[sync] {
		b.Fatalf("synchronous = %d (err %v), want %s", level, err, sync)
	}
	if _, err := db.Exec(benchPayments); err != nil {
		b.Fatal(err)
	}
	return s
}
