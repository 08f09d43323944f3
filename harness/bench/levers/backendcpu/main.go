// Command backendcpu measures the CPU time one PostgreSQL backend spends
// per transaction for each variant of levers.sh (docs/benchmarks.md,
// "The levers, by backend CPU"): it runs the variants' transactions on one
// connection each, in rotating order, and reads the backend's utime+stime
// from /proc before and after — CPU time, not wall time, so the figures
// move less with the machine's other load than throughput does (on a
// shared machine they still move: the lowest of several rounds is the
// best estimate of a variant's own cost). It must run on the database
// server's machine. Usage:
//
//	backendcpu -db 'postgres://…' [-tx 5000] [-rounds 3]
//
// on a database "idem migrate" prepared and levers/setup.sql ran on.
// Written here because pgbench reports throughput, not the backend's CPU.
package main

import (
	"context"
	"crypto/rand"
	"embed"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlfile"
)

//go:embed statements.sql
var statementsFS embed.FS

// variant is one transaction shape: its statements after BEGIN.
type variant struct {
	name  string
	table string // the record's table; "" for none
	claim bool
	floor bool
}

var variants = []variant{
	{name: "plain"},
	{name: "floor", floor: true},
	{name: "record (now)", table: "idem_operations"},
	{name: "record (eleven CHECKs)", table: "rec_elevenchecks"},
	{name: "claim+record", table: "idem_operations", claim: true},
	{name: "eleven CHECKs, no opid index", table: "rec_noopid"},
	{name: "eleven CHECKs, hash opid index", table: "rec_hashopid"},
	{name: "eleven CHECKs, no retire index", table: "rec_noretire"},
	{name: "no CHECK", table: "rec_nocheck"},
	{name: "pk only", table: "rec_pkonly"},
}

func main() {
	dsn := flag.String("db", "", "database DSN")
	txs := flag.Int("tx", 5000, "transactions per variant and round")
	rounds := flag.Int("rounds", 3, "rounds, in rotating order")
	flag.Parse()
	qs := sqlfile.MustLoad(statementsFS, "statements.sql")
	ctx := context.Background()
	perTx := map[string][]float64{}
	for r := range *rounds {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			us, err := run(ctx, *dsn, qs, v, *txs)
			if err != nil {
				log.Fatalf("%s: %v", v.name, err)
			}
			perTx[v.name] = append(perTx[v.name], us)
			fmt.Fprintf(os.Stderr, "round %d %-30s %6.1f µs CPU/tx\n", r+1, v.name, us)
		}
	}
	fmt.Println("| variant | backend CPU µs/tx, lowest | median | rounds |")
	fmt.Println("|---|---|---|---|")
	for _, v := range variants {
		all := slices.Clone(perTx[v.name])
		slices.Sort(all)
		var s []string
		for _, x := range perTx[v.name] {
			s = append(s, strconv.FormatFloat(x, 'f', 0, 64))
		}
		fmt.Printf("| %s | %.0f | %.0f | %s |\n", v.name, all[0], all[len(all)/2], strings.Join(s, ", "))
	}
}

// run runs n transactions of v on a new connection and returns its
// backend's CPU microseconds per transaction.
func run(ctx context.Context, dsn string, qs sqlfile.Queries, v variant, n int) (float64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, err
	}
	record := strings.Replace(qs.Get("record"), "INSERT INTO TABLE ", "INSERT INTO "+v.table+" ", 1)
	tx := func() error {
		b := &pgx.Batch{}
		b.Queue("begin")
		if v.claim {
			b.Queue(qs.Get("claim"), random(32), int32(time.Now().UnixNano()))
		}
		b.Queue(qs.Get("pay"), string(hexRandom()))
		b.Queue(qs.Get("ob"), string(hexRandom()))
		if v.floor {
			b.Queue(qs.Get("floor"), random(32))
		}
		if v.table != "" {
			scope := idem.ScopeHash(random(32))
			b.Queue(record, scope[:], idem.NewOperationID(time.Now(), scope), random(32), random(32))
		}
		b.Queue("commit")
		return conn.SendBatch(ctx, b).Close()
	}
	for range 50 { // warm the plan and relation caches
		if err := tx(); err != nil {
			return 0, err
		}
	}
	before, err := cpu(pid)
	if err != nil {
		return 0, err
	}
	for range n {
		if err := tx(); err != nil {
			return 0, err
		}
	}
	after, err := cpu(pid)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// cpu returns the process's user+system CPU time in microseconds, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 100 Hz).
func cpu(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return (utime + stime) * 10000, nil // 100 ticks per second
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func hexRandom() []byte { return fmt.Appendf(nil, "%x", random(16)) }
