package idempg

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// The benchmarks compare a plain business transaction (BEGIN; INSERT
// payment; COMMIT) with the same insert made idempotent by idem, in both
// integration styles, and with a replay. Every variant commits durably
// once per operation on the pgtest cluster (fsync on). Each runs with 1
// and 16 workers sharing one pool of 16 connections and reports ops/s.

const (
	createPayments = `CREATE TABLE bench_payments (id TEXT PRIMARY KEY, amount TEXT)`
	insertPayment  = `INSERT INTO bench_payments (id, amount) VALUES ($1, $2)`
)

var benchWorkers = []int{1, 16}

// benchOutcome is a typical small payment response, without outbox
// messages (the plain variant has none either).
var benchOutcome = registry.Outcome{
	State: idem.StateSucceeded,
	Response: idem.Response{
		Status: 201, MediaType: "application/json", Location: "/payments/x",
		Body: []byte(`{"id":"pay_1","amount":"10.00","currency":"EUR","status":"succeeded"}`),
	},
}

// pay is the business function of the idem variants.
func pay(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
	if _, err := tx.Exec(ctx, insertPayment, rec.OperationID, "10.00"); err != nil {
		return registry.Outcome{}, err
	}
	return benchOutcome, nil
}

func benchStore(b *testing.B) *testStore {
	b.Helper()
	ts := openStore(b, "&pool_max_conns=16")
	if _, err := ts.Pool().Exec(b.Context(), createPayments); err != nil {
		b.Fatal(err)
	}
	return ts
}

// runWorkers runs b.N calls of op spread over workers goroutines and
// reports the throughput as ops/s, and the WAL the cluster wrote per call
// as wal-B/op: a measure of the database's write work that, unlike
// throughput, does not depend on the machine's load. op gets a number
// unique in the run.
func runWorkers(b *testing.B, ts *testStore, workers int, op func(ctx context.Context, n int64) error) {
	b.Helper()
	ctx := b.Context()
	walBefore := walLSN(b, ts)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) || failed.Load() != nil {
					return
				}
				// Each call is bounded as the middleware bounds it
				// (registry.WithTimeout, idem serve --store-timeout).
				callCtx, cancel := context.WithTimeout(ctx, registry.DefaultCallTimeout)
				err := op(callCtx, n)
				cancel()
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(walLSN(b, ts)-walBefore)/float64(b.N), "wal-B/op")
}

// walLSN returns the cluster's current WAL insert position in bytes.
func walLSN(b *testing.B, ts *testStore) int64 {
	b.Helper()
	var lsn int64
	err := ts.Pool().QueryRow(b.Context(), `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn)
	if err != nil {
		b.Fatal(err)
	}
	return lsn
}

// eachWorkers runs fn as the sub-benchmarks workers=1 and workers=16, each
// on a fresh store.
func eachWorkers(b *testing.B, fn func(b *testing.B, ts *testStore, workers int)) {
	for _, w := range benchWorkers {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { fn(b, benchStore(b), w) })
	}
}

func BenchmarkInsertPlain(b *testing.B) {
	eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
		prefix := fmt.Sprintf("plain-%d-", time.Now().UnixNano())
		runWorkers(b, ts, workers, func(ctx context.Context, n int64) error {
			tx, err := ts.Pool().Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, insertPayment, fmt.Sprint(prefix, n), "10.00"); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	})
}

func BenchmarkClaimAndExecute(b *testing.B) {
	eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
		runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
			res, err := claimAndExecute(ctx, ts.Store, false, newClaim("bench.pay"), pay)
			if err == nil && res.Verdict != registry.Execute {
				err = fmt.Errorf("verdict %v, want execute", res.Verdict)
			}
			return err
		})
	})
}

func BenchmarkTwoPhase(b *testing.B) {
	eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
		runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
			rec, created, err := ts.Reserve(ctx, newClaim("bench.pay"))
			if err != nil || !created {
				return fmt.Errorf("Reserve: created %v err %v", created, err)
			}
			_, err = ts.Complete(ctx, rec, pay)
			return err
		})
	})
}

func BenchmarkExecuteOnce(b *testing.B) {
	eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
		runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
			res, err := ts.ExecuteOnce(ctx, newClaim("bench.pay"), pay)
			if err == nil && res.Verdict != registry.Execute {
				err = fmt.Errorf("verdict %v, want execute", res.Verdict)
			}
			return err
		})
	})
}

func BenchmarkReplay(b *testing.B) {
	eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
		c := newClaim("bench.pay")
		rec, _, err := ts.Reserve(b.Context(), c)
		if err == nil {
			_, err = ts.Complete(b.Context(), rec, pay)
		}
		if err != nil {
			b.Fatal(err)
		}
		runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
			rec, created, err := ts.Reserve(ctx, c)
			if err == nil && (created || registry.Decide(rec, false, c.Fingerprint) != registry.Replay) {
				err = fmt.Errorf("Reserve of a terminal scope: created %v state %s", created, rec.State)
			}
			return err
		})
	})
}
