package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestMain starts PostgreSQL and MariaDB on demand and stops them after
// the tests.
func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }

// tinyConfig is a run short enough for tests: two client counts, two
// rounds, cells of 150 ms.
func tinyConfig(dsn string) Config {
	return Config{DSN: dsn, Clients: []int{1, 4}, Duration: 150 * time.Millisecond,
		Warmup: 20 * time.Millisecond, Rounds: 2, ReplayKeys: 24}
}

func TestRunSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bench.db")
	cfg := tinyConfig("sqlite:" + path)
	cfg.Keep = true
	rep := runAndCheck(t, cfg, "sqlite")
	checkRows(t, "sqlite:"+path, cfg.ReplayKeys, rep)

	// Without Keep, the file is gone afterwards.
	path2 := filepath.Join(t.TempDir(), "bench2.db")
	cfg2 := tinyConfig("sqlite:" + path2)
	cfg2.Clients, cfg2.Rounds = []int{2}, 1
	runAndCheck(t, cfg2, "sqlite")
	for _, p := range []string{path2, path2 + "-wal", path2 + "-shm"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
}

// TestRunMySQL: a run on MariaDB works in a database of its own, which
// --keep leaves in place holding the rows every variant wrote (the floor
// table of create_floor_mysql included), and the report names mysql.
func TestRunMySQL(t *testing.T) {
	t.Parallel()
	native := mytest.DSN(t)
	dsn := mytest.AsURL(t, native)
	cfg := tinyConfig(dsn)
	cfg.Clients, cfg.Keep = []int{3}, true
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep := runAndCheck(t, cfg, "mysql")
	_, rest, ok := strings.Cut(progress.String(), "working in database ")
	name, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(name, "idem_bench_") {
		t.Fatalf("progress does not name the database:\n%s", progress.String())
	}
	t.Cleanup(func() {
		if _, err := mytest.Admin(t, native).Exec("DROP DATABASE `" + name + "`"); err != nil {
			t.Error(err)
		}
	})
	checkRows(t, dsn[:strings.LastIndex(dsn, "/")+1]+name, cfg.ReplayKeys, rep)
}

func TestRunPostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := tinyConfig(dsn + "&pool_max_conns=8") // pool settings reach the pool only
	runAndCheck(t, cfg, "postgres")

	// The run worked in its own schema and dropped it: nothing is left,
	// in it or in public.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schemas, tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'idem_bench_%'`).Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if schemas != 0 || tables != 0 {
		t.Errorf("%d bench schemas and %d public tables left", schemas, tables)
	}
}

func TestRunPostgresKeep(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := tinyConfig(dsn)
	cfg.Clients, cfg.Rounds, cfg.Keep = []int{3}, 1, true
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep := runAndCheck(t, cfg, "postgres")
	// The progress names the kept schema; open the store in it.
	_, rest, ok := strings.Cut(progress.String(), "working in schema ")
	schema, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(schema, "idem_bench_") {
		t.Fatalf("progress does not name the schema:\n%s", progress.String())
	}
	if n := strings.Count(progress.String(), "\nround "); n != len(variants) {
		t.Errorf("%d progress lines for cells, want %d:\n%s", n, len(variants), progress.String())
	}
	if n := strings.Count(progress.String(), " WAL B/op\n"); n != len(variants) {
		t.Errorf("%d progress lines with WAL bytes, want %d:\n%s", n, len(variants), progress.String())
	}
	checkRows(t, dsn+"&search_path="+schema, cfg.ReplayKeys, rep)
}

// runAndCheck runs cfg and checks the report's shape and consistency,
// through its JSON form.
func runAndCheck(t *testing.T, cfg Config, kind string) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		DB      string             `json:"db"`
		Rounds  int                `json:"rounds"`
		Targets map[string]float64 `json:"targets"`
		Results []map[string]json.RawMessage
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.DB != kind || got.Rounds != cfg.Rounds || got.Targets["first_ratio"] != 0.8 ||
		got.Targets["replay_ratio"] != 1 || got.Targets["reservation_p99_ms"] != 10 {
		t.Errorf("report header: %s", b)
	}
	if len(got.Results) != len(cfg.Clients) {
		t.Fatalf("%d results for %d client counts: %s", len(got.Results), len(cfg.Clients), b)
	}
	for i, raw := range got.Results {
		num := func(name string) float64 {
			var v float64
			if err := json.Unmarshal(raw[name], &v); err != nil {
				t.Fatalf("result %d: %s: %v (%s)", i, name, err, b)
			}
			return v
		}
		if c := num("clients"); c != float64(cfg.Clients[i]) {
			t.Errorf("result %d: clients %v, want %d", i, c, cfg.Clients[i])
		}
		for _, f := range []string{"plain_rps", "floor_rps", "idem_first_rps", "idem_first_one_tx_rps", "idem_replay_rps", "idem_replay_cached_rps", "db_insert_rps",
			"first_ratio", "replay_cached_ratio", "first_one_tx_ratio", "replay_ratio", "floor_ratio", "first_floor_ratio", "first_one_tx_floor_ratio",
			"reservation_p99_ms", "reservation_p50_ms", "replay_reservation_p99_ms",
			"reservations", "one_tx_acceptance_p99_ms", "one_tx_acceptance_p50_ms", "one_tx_acceptances"} {
			if v := num(f); !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("result %d: %s = %v, want a positive number", i, f, v)
			}
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
		if !near(num("first_ratio"), num("idem_first_rps")/num("plain_rps")) ||
			!near(num("first_one_tx_ratio"), num("idem_first_one_tx_rps")/num("plain_rps")) ||
			!near(num("replay_ratio"), num("idem_replay_rps")/num("plain_rps")) ||
			!near(num("replay_cached_ratio"), num("idem_replay_cached_rps")/num("idem_replay_rps")) ||
			!near(num("floor_ratio"), num("floor_rps")/num("plain_rps")) {
			t.Errorf("result %d: ratios are not ÷ plain: %s", i, b)
		}
		if !near(num("first_floor_ratio"), num("idem_first_rps")/num("floor_rps")) ||
			!near(num("first_one_tx_floor_ratio"), num("idem_first_one_tx_rps")/num("floor_rps")) {
			t.Errorf("result %d: ratios are not idem ÷ floor: %s", i, b)
		}
		if num("reservation_p50_ms") > num("reservation_p99_ms") || num("one_tx_acceptance_p50_ms") > num("one_tx_acceptance_p99_ms") {
			t.Errorf("result %d: reservation p50 above p99: %s", i, b)
		}
		var rounds map[string][]float64
		if err := json.Unmarshal(raw["rounds_rps"], &rounds); err != nil {
			t.Fatal(err)
		}
		for v, med := range map[string]string{"plain": "plain_rps", "floor": "floor_rps", "idem_first": "idem_first_rps",
			"idem_first_one_tx": "idem_first_one_tx_rps", "idem_replay": "idem_replay_rps", "idem_replay_cached": "idem_replay_cached_rps", "db_insert": "db_insert_rps"} {
			if len(rounds[v]) != cfg.Rounds || !near(median(rounds[v]), num(med)) {
				t.Errorf("result %d: %s rounds %v, median %v", i, v, rounds[v], num(med))
			}
		}
		checkWAL(t, kind, cfg.Rounds, raw)
		var pass map[string]bool
		if err := json.Unmarshal(raw["pass"], &pass); err != nil {
			t.Fatal(err)
		}
		if pass["first"] != (num("first_ratio") >= 0.8) || pass["replay"] != (num("replay_ratio") >= 1) ||
			pass["reservation"] != (num("reservation_p99_ms") <= 10) ||
			pass["first_one_tx"] != (num("first_one_tx_ratio") >= 0.8) ||
			pass["acceptance_one_tx"] != (num("one_tx_acceptance_p99_ms") <= 10) || len(pass) != 5 {
			t.Errorf("result %d: pass %v inconsistent with %s", i, pass, b)
		}
	}
	if _, err := os.Stat("/proc/loadavg"); err == nil && (rep.Load == nil || rep.Load.Start <= 0 && rep.Load.End <= 0) {
		t.Errorf("no load average in %s", b)
	}
	checkTable(t, rep)
	return rep
}

// checkTable writes rep's table and checks it: lines of at most 100
// columns; one row per client count in each of the two tables; on
// PostgreSQL a mark on every figure with a target, the targets, what
// "met" means and every miss; elsewhere no marks and no targets.
func checkTable(t *testing.T, rep *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	for _, l := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	if !strings.HasSuffix(table, "\n") || !strings.HasPrefix(table, "idem bench: "+rep.DB+", ") {
		t.Errorf("table does not start with the run or end with a newline:\n%s", table)
	}
	// Throughput, ratios, the replay cache, times, and the WAL table on
	// PostgreSQL.
	tables := 4
	const noWAL = "\nWAL bytes per operation: measured on PostgreSQL only, not on "
	if rep.DB == "postgres" {
		tables = 5
		if !strings.Contains(table, "\nWAL bytes per operation: PostgreSQL's WAL insert position") {
			t.Errorf("postgres table without the WAL table:\n%s", table)
		}
	} else if !strings.Contains(table, noWAL+rep.DB+".\n") {
		t.Errorf("%s table does not say WAL is not measured:\n%s", rep.DB, table)
	}
	rows := 0
	for _, r := range rep.Results {
		rows += len(regexp.MustCompile(fmt.Sprintf(`(?m)^ +%d  +\d`, r.Clients)).FindAllString(table, -1))
	}
	if rows != tables*len(rep.Results) {
		t.Errorf("%d rows for %d client counts in %d tables:\n%s", rows, len(rep.Results), tables, table)
	}
	if !strings.Contains(table, "floor ÷ plain") || !strings.Contains(table, "÷ floor") {
		t.Errorf("no ratios to floor:\n%s", table)
	}
	marks := strings.Count(table, " ok") + strings.Count(table, " MISS")
	const met = "They are met\nwhen, at every client count, the replay meets its target and one style meets both of its own.\n"
	if rep.DB != "postgres" {
		if marks != 0 || strings.Contains(table, "Targets:") || !strings.Contains(table, "they do not apply to "+rep.DB+".") {
			t.Errorf("%s table with marks or targets:\n%s", rep.DB, table)
		}
		return table
	}
	if marks != 5*len(rep.Results) || !strings.Contains(table, "Targets: a first execution at least 0.80 × plain") ||
		!strings.Contains(table, met) {
		t.Errorf("postgres table: %d marks for %d results, or no targets and what met means:\n%s", marks, len(rep.Results), table)
	}
	for _, m := range rep.Misses() {
		if !strings.Contains(table, "\n  "+m+"\n") {
			t.Errorf("miss %q not listed:\n%s", m, table)
		}
	}
	return table
}

// TestWriteTable: the table fits 100 columns with figures far beyond
// today's, marks figures and states the targets on PostgreSQL only, and
// says whether they were met.
func TestWriteTable(t *testing.T) {
	t.Parallel()
	// cell makes a Result from one round's throughputs and the times.
	cell := func(clients int, plain, first, oneTx, replay, insert, p50, p99, acc50, acc99, replayP99 float64) Result {
		r := Result{Clients: clients, ReservationP50Ms: p50, ReservationP99Ms: p99, OneTxAcceptanceP50Ms: acc50,
			OneTxAcceptanceP99Ms: acc99, ReplayReservationP99Ms: replayP99, RoundsRPS: PerRound{Plain: []float64{plain},
				Floor: []float64{plain * 0.9}, IdemFirst: []float64{first}, IdemFirstOneTx: []float64{oneTx},
				IdemReplay: []float64{replay}, IdemReplayCached: []float64{2 * replay}, DBInsert: []float64{insert}},
			// WAL figures as wide as the throughputs; dropped for SQLite below.
			RoundsWALBytesPerOp: &PerRound{Plain: []float64{plain}, Floor: []float64{plain}, IdemFirst: []float64{first},
				IdemFirstOneTx: []float64{oneTx}, IdemReplay: []float64{replay}, IdemReplayCached: []float64{2 * replay}, DBInsert: []float64{insert}}}
		r.summarise(DefaultTargets)
		return r
	}
	noWAL := func(rs ...Result) []Result {
		for i := range rs {
			rs[i].RoundsWALBytesPerOp = nil
			rs[i].summarise(DefaultTargets)
		}
		return rs
	}
	wide := cell(1024, 1234567, 123456, 123456, 12345678, 1234567, 12345.67, 123456.78, 12345.67, 123456.78, 123456.78)
	good := cell(1, 100, 90, 95, 300, 120, 1, 3, 1, 2, 1)
	oneTx := cell(16, 100, 90, 95, 300, 120, 1, 40, 1, 2, 1) // the two-phase reserve p99 misses
	for _, c := range []struct {
		db      string
		results []Result
		verdict string
	}{
		{"postgres", []Result{good, wide}, "The targets were not met; missed:"},
		{"postgres", []Result{good}, "Every target was met, in both styles."},
		{"postgres", []Result{good, oneTx}, "The targets were met (in one style at every client count); missed:"},
		{"sqlite", noWAL(good, wide), ""},
	} {
		rep := &Report{DB: c.db, Go: "go1.26.8", CPUs: 128, Load: &Load{Start: 123.45, End: 678.9}, Rounds: 100,
			DurationSeconds: 1234.5, WarmupSeconds: 123.25, ReplayKeys: 1000000, Targets: DefaultTargets, Results: c.results}
		table := checkTable(t, rep)
		if !strings.Contains(table, c.verdict) {
			t.Errorf("%s %d results: no %q:\n%s", c.db, len(c.results), c.verdict, table)
		}
		t.Logf("\n%s", table)
	}
}

// checkRows opens a kept run's database and checks what the run wrote:
// every payment has exactly one outbox message, every operation
// succeeded and created one payment, and every floor request answered
// 201 left one floor row (and nothing else did).
func checkRows(t *testing.T, dsn string, replayKeys int, rep *Report) {
	t.Helper()
	ctx := context.Background()
	store, err := idemstore.Open(ctx, dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var pays, msgs, orphans, ops, succeeded, withPayment, floorRows, floorNot32 int
	err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		for q, dst := range map[string]*int{
			queries.Get("count_floor"):                                        &floorRows,
			`SELECT count(*) FROM idem_bench_floor WHERE length(scope) <> 32`: &floorNot32,
			`SELECT count(*) FROM payments`:                                   &pays,
			`SELECT count(*) FROM idem_outbox`:                                &msgs,
			`SELECT count(*) FROM payments p WHERE (SELECT count(*) FROM idem_outbox o WHERE o.operation_id = p.operation_id AND o.topic = 'payment.created') <> 1`: &orphans,
			`SELECT count(*) FROM idem_operations`:                                                      &ops,
			`SELECT count(*) FROM idem_operations WHERE state = '` + string(idem.StateSucceeded) + `'`:  &succeeded,
			`SELECT count(*) FROM idem_operations o JOIN payments p ON p.operation_id = o.operation_id`: &withPayment,
		} {
			if err := tx.QueryRow(ctx, q).Scan(dst); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pays == 0 || msgs != pays || orphans != 0 {
		t.Errorf("%d payments, %d outbox messages, %d payments without exactly one message", pays, msgs, orphans)
	}
	if ops < replayKeys || succeeded != ops || withPayment != ops || ops >= pays {
		t.Errorf("%d operations (%d succeeded, %d with a payment) for %d payments and %d replay keys",
			ops, succeeded, withPayment, pays, replayKeys)
	}
	// Floor payments have no operation: plain's, floor's and db insert's
	// payments together are pays - ops.
	if floorRows == 0 || int64(floorRows) != rep.floorCreated || floorNot32 != 0 || floorRows > pays-ops {
		t.Errorf("%d floor rows (%d not 32 bytes) for %d floor requests answered 201, %d payments without an operation",
			floorRows, floorNot32, rep.floorCreated, pays-ops)
	}
}

// checkWAL checks one result's WAL figures in the JSON: on PostgreSQL a
// figure per variant, each the median of one per round, positive for
// every variant that writes (a replay only reads: it may be 0, unless
// another test's run on the same cluster wrote meanwhile); on SQLite no
// figures at all, not zeros.
func checkWAL(t *testing.T, kind string, rounds int, raw map[string]json.RawMessage) {
	t.Helper()
	perOp, perRound := raw["wal_bytes_per_op"], raw["rounds_wal_bytes_per_op"]
	if kind != "postgres" {
		if perOp != nil || perRound != nil {
			t.Errorf("%s result with WAL figures: %s, %s", kind, perOp, perRound)
		}
		return
	}
	var med map[string]float64
	var all map[string][]float64
	if err := json.Unmarshal(perOp, &med); err != nil {
		t.Fatalf("wal_bytes_per_op %s: %v", perOp, err)
	}
	if err := json.Unmarshal(perRound, &all); err != nil {
		t.Fatalf("rounds_wal_bytes_per_op %s: %v", perRound, err)
	}
	if len(med) != len(variants) || len(all) != len(variants) {
		t.Errorf("WAL figures for %d and %d variants, want %d: %s, %s", len(med), len(all), len(variants), perOp, perRound)
	}
	for _, v := range variants {
		b, ok := med[v]
		if !ok || !(b > 0 || (v == variantReplay || v == variantReplayCached) && b == 0) || math.IsInf(b, 0) || len(all[v]) != rounds || median(all[v]) != b {
			t.Errorf("%s: %v WAL bytes per op (rounds %v), want a positive median of %d rounds", v, b, all[v], rounds)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	existing := filepath.Join(t.TempDir(), "x.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{
		"existing file": {DSN: "sqlite:" + existing},
		"unknown DSN":   {DSN: "mariadb://x"},
		"zero clients":  {DSN: "sqlite:" + existing + "2", Clients: []int{1, 0}},
		"negative":      {DSN: "sqlite:" + existing + "3", Duration: -time.Second},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDrive(t *testing.T) {
	t.Parallel()
	var seq atomic.Int64
	var calls atomic.Int64
	w, err := drive(context.Background(), 3, 30*time.Millisecond, &seq, func(ctx context.Context, n int64) error {
		calls.Add(1)
		return nil
	})
	if err != nil || w.requests != calls.Load() || w.requests < 3 || seq.Load() != w.requests ||
		w.elapsed < 30*time.Millisecond || w.rps() <= 0 {
		t.Fatalf("window %+v, calls %d, seq %d, err %v", w, calls.Load(), seq.Load(), err)
	}
	boom := errors.New("boom")
	_, err = drive(context.Background(), 4, time.Hour, &seq, func(ctx context.Context, n int64) error {
		if n%5 == 0 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestMedianAndP99(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	var s samples
	if ms, n := s.quantile(0.99); ms != 0 || n != 0 {
		t.Errorf("empty p99 %v, %d", ms, n)
	}
	for i := 1; i <= 200; i++ {
		s.add(time.Duration(201-i) * time.Millisecond)
	}
	for q, want := range map[float64]float64{0.99: 198, 0.5: 100, 1: 200, 0.001: 1} {
		if ms, n := s.quantile(q); ms != want || n != 200 {
			t.Errorf("quantile %v of 1..200 ms = %v (n %d), want %v", q, ms, n, want)
		}
	}
}

// TestParsedBody checks that the db_insert variant writes the payment the
// HTTP variants' body describes.
func TestParsedBody(t *testing.T) {
	t.Parallel()
	got := parsedBody
	got.Memo = nil
	if err := json.Unmarshal([]byte(requestBody), &got); err != nil {
		t.Fatal(err)
	}
	if got.Amount != parsedBody.Amount || got.Currency != parsedBody.Currency || got.Payee != parsedBody.Payee ||
		got.Memo == nil || *got.Memo != *parsedBody.Memo {
		t.Errorf("requestBody reads as %+v, parsedBody is %+v", got, parsedBody)
	}
}

// TestMetOneStyle: the targets are met when replay is, and one style's
// first execution and acceptance are, at every client count.
func TestMetOneStyle(t *testing.T) {
	t.Parallel()
	twoPhase := Pass{First: true, Reservation: true, Replay: true}
	oneTx := Pass{FirstOneTx: true, AcceptanceOneTx: true, Replay: true}
	mixed := Pass{First: true, AcceptanceOneTx: true, Replay: true} // neither style whole
	noReplay := Pass{First: true, Reservation: true, FirstOneTx: true, AcceptanceOneTx: true}
	for _, c := range []struct {
		name  string
		cells []Pass
		want  bool
	}{
		{"two-phase everywhere", []Pass{twoPhase, twoPhase}, true},
		{"one-transaction everywhere", []Pass{oneTx, oneTx}, true},
		{"a style per client count", []Pass{twoPhase, oneTx}, true},
		{"halves of two styles", []Pass{twoPhase, mixed}, false},
		{"replay missed", []Pass{noReplay}, false},
	} {
		rep := &Report{}
		for _, p := range c.cells {
			rep.Results = append(rep.Results, Result{Pass: p})
		}
		if got := rep.Met(); got != c.want {
			t.Errorf("%s: Met() = %v, want %v", c.name, got, c.want)
		}
	}
}

// BenchmarkSamplesAdd is what recording costs a timed request of the
// idempotent variants (timedStore, timeAcceptance): one mutex-guarded
// append, here from 64 goroutines at once, far denser than the requests
// of a run arrive.
func BenchmarkSamplesAdd(b *testing.B) {
	var s samples
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.add(time.Millisecond)
		}
	})
	if _, n := s.quantile(1); n != b.N {
		b.Fatalf("%d samples, want %d", n, b.N)
	}
}
