package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/internal/machine"
)

// Defaults of the tail run (RunTail).
const (
	// DefaultOutstanding bounds the requests in flight of an open-loop
	// cell when Config.Outstanding is 0.
	DefaultOutstanding = 256
	// TailTargetP99Ms is the acceptance p99 the default style is held to.
	TailTargetP99Ms = 10.0
)

// DefaultTailClients are the client counts of a tail run when
// Config.Clients is empty.
var DefaultTailClients = []int{64}

// DefaultRates are the open-loop rates of a tail run when Config.Rates is
// empty: 50, 70 and 90 % of the closed-loop maximum.
var DefaultRates = []Rate{{OfMax: 0.5}, {OfMax: 0.7}, {OfMax: 0.9}}

// Rate is an open-loop rate: PerSecond requests per second, or, when
// OfMax > 0, that fraction of the default style's closed-loop throughput
// at the run's largest client count.
type Rate struct {
	PerSecond float64
	OfMax     float64
}

// ParseRate parses "700" (per second) or "70%" (of the closed-loop
// maximum); either must be positive.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || f <= 0 {
			return Rate{}, fmt.Errorf("bad rate %q", s)
		}
		return Rate{OfMax: f / 100}, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || f <= 0 {
		return Rate{}, fmt.Errorf("bad rate %q", s)
	}
	return Rate{PerSecond: f}, nil
}

func (r Rate) String() string {
	if r.OfMax > 0 {
		return strconv.FormatFloat(r.OfMax*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + "/s"
}

// The styles of a tail run.
const (
	stylePlain    = "plain"
	styleDefault  = "default"
	styleTwoPhase = "two-phase"
)

// tailCell is one cell of a tail run while it is measured.
type tailCell struct {
	TailCell
	lat, accept samples
	parts       acceptParts
	sojourn     time.Duration // Σ latency over the timed rounds
	elapsed     time.Duration // Σ timed elapsed
	use         cpuUse        // Σ over the timed rounds
	poolAcq     int64         // Σ acquisitions of the main pool
	poolWait    time.Duration // Σ their waits
}

// pooled is a store whose main pool can be read (idempg.Store).
type pooled interface{ Pool() *pgxpool.Pool }

// poolStat returns the acquisitions of store's main pool so far and their
// summed wait; zeros for a store without one.
func poolStat(store any) (int64, time.Duration) {
	p, ok := store.(pooled)
	if !ok {
		return 0, 0
	}
	st := p.Pool().Stat()
	return st.AcquireCount(), st.AcquireDuration()
}

// RunTail performs a tail run: POST /v1/payments in the default
// (one-transaction) style and, for comparison, plain and the two-phase
// style, closed-loop at each
// of cfg.Clients (default DefaultTailClients), then the default style
// open-loop at each of cfg.Rates (default DefaultRates) with at most
// cfg.Outstanding requests in flight. Every cell reports the latency of
// whole requests (open loop: from the scheduled send time), the default
// style's acceptance time (the one-transaction acceptance of Run), and its
// Little's-law account (Queueing): CPU demand per request of the bench
// process and, where PostgreSQL runs on this machine, of PostgreSQL's
// processes. With cfg.Pin the bench process and PostgreSQL are pinned to
// separate CPUs for the run (pin). Closed-loop cells are interleaved over
// cfg.Rounds rounds, then open-loop cells likewise (their rates can
// depend on the closed-loop figures). ctx governs the run.
func RunTail(ctx context.Context, cfg Config) (_ *TailReport, err error) {
	if len(cfg.Clients) == 0 {
		cfg.Clients = DefaultTailClients
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rates := cfg.Rates
	if len(rates) == 0 {
		rates = DefaultRates
	}
	for _, r := range rates {
		if r.PerSecond <= 0 && r.OfMax <= 0 {
			return nil, errors.New("bench: an open-loop rate must be positive")
		}
	}
	outstanding := cfg.Outstanding
	if outstanding == 0 {
		outstanding = DefaultOutstanding
	}
	if outstanding < 0 {
		return nil, errors.New("bench: outstanding requests must be positive")
	}
	db, store, err := cfg.workIn(ctx)
	if err != nil {
		return nil, err
	}
	defer db.release(ctx, store, &err)
	rep := &TailReport{DB: db.kind, Go: runtime.Version(), CPUs: runtime.NumCPU(), Rounds: cfg.Rounds,
		DurationSeconds: cfg.Duration.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(),
		Outstanding: outstanding, TargetP99Ms: TailTargetP99Ms}
	var unpin func()
	if rep.Pinning, unpin, err = cfg.pinFor(ctx, db); err != nil {
		return nil, err
	}
	defer unpin()
	meter, err := openCPUMeter(ctx, db.conn, cfg.Progress)
	if err != nil {
		return nil, err
	}
	rep.DBCPUMeasured = meter.postmaster != 0

	timed := &timedStore{Store: store}
	svc, err := payments.New(ctx, payments.Config{Store: timed, Database: db.kind, Auth: benchTokens(),
		Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), OneTransaction: true})
	if err != nil {
		return nil, err
	}
	plainMux := http.NewServeMux()
	plainMux.Handle("POST /v1/payments", svc.PlainCreate())
	plainURL, stopPlain, err := serve(plainMux)
	if err != nil {
		return nil, err
	}
	defer stopPlain()
	defURL, stopDef, err := serve(timed.timeAcceptance(svc.Handler()))
	if err != nil {
		return nil, err
	}
	defer stopDef()
	// The two-phase style, on the same store, untimed: its reservation is
	// not the default style's acceptance.
	twoPhase, err := payments.New(ctx, payments.Config{Store: store, Database: db.kind, Auth: benchTokens(),
		Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		return nil, err
	}
	twoURL, stopTwo, err := serve(twoPhase.Handler())
	if err != nil {
		return nil, err
	}
	defer stopTwo()
	conns := max(slices.Max(cfg.Clients), outstanding, 16)
	transport := &http.Transport{MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: conns,
		IdleConnTimeout: time.Minute, DisableCompression: true}
	defer transport.CloseIdleConnections()
	var rnd [4]byte
	rand.Read(rnd[:])
	t := &target{plainURL: plainURL + "/v1/payments", oneTxURL: defURL + "/v1/payments", idemURL: twoURL + "/v1/payments",
		client: &http.Client{Transport: transport}, store: store, svc: svc, runID: hex.EncodeToString(rnd[:])}
	styleOp := map[string]op{stylePlain: t.op(variantPlain), styleDefault: t.op(variantFirstOneTx),
		styleTwoPhase: t.op(variantFirst)}

	startLoad, haveLoad := machine.LoadAverage()
	var seq atomic.Int64
	var closed []*tailCell
	for _, n := range cfg.Clients {
		for _, s := range []string{stylePlain, styleDefault, styleTwoPhase} {
			closed = append(closed, &tailCell{TailCell: TailCell{Style: s, Loop: "closed", Clients: n}})
		}
	}
	// measureCell times one round of c, its warm-up first.
	measureCell := func(c *tailCell, round int, rate float64) error {
		do := styleOp[c.Style]
		name := fmt.Sprintf("%s, %s loop", c.Style, c.Loop)
		if c.Loop == "closed" {
			name += fmt.Sprintf(", %d clients", c.Clients)
		} else {
			name += fmt.Sprintf(" at %.0f/s", rate)
		}
		if cfg.Warmup > 0 {
			var err error
			if c.Loop == "closed" {
				_, err = drive(ctx, c.Clients, cfg.Warmup, &seq, do)
			} else {
				_, err = driveOpen(ctx, rate, cfg.Warmup, outstanding, &seq, do, nil)
			}
			if err != nil {
				return fmt.Errorf("bench: %s, warm-up: %w", name, err)
			}
		}
		before, err := meter.read()
		if err != nil {
			return err
		}
		acq0, wait0 := poolStat(store)
		stop := func() {}
		if c.Style == styleDefault {
			stopAll, stopParts := timed.record(&c.accept), timed.recordParts(&c.parts)
			stop = func() { stopAll(); stopParts() }
		}
		var w openWindow
		if c.Loop == "closed" {
			var sojourn time.Duration
			w.window, err = drive(ctx, c.Clients, cfg.Duration, &seq, timedOp(do, &c.lat, &sojourn))
			w.scheduled, w.sojourn = w.requests, sojourn
		} else {
			w, err = driveOpen(ctx, rate, cfg.Duration, outstanding, &seq, do, &c.lat)
		}
		stop()
		if err != nil {
			return fmt.Errorf("bench: %s, round %d: %w", name, round+1, err)
		}
		use, err := meter.since(before)
		if err != nil {
			return err
		}
		c.use = c.use.add(use)
		acq1, wait1 := poolStat(store)
		c.poolAcq += acq1 - acq0
		c.poolWait += wait1 - wait0
		c.sojourn += w.sojourn
		c.elapsed += w.elapsed
		c.Requests += int(w.requests)
		c.Scheduled += w.scheduled
		c.Late += w.late
		c.RoundsRPS = append(c.RoundsRPS, w.rps())
		fmt.Fprintf(cfg.Progress, "round %d/%d  %-36s  %8.0f/s  (%d in %.2fs, %d late)\n",
			round+1, cfg.Rounds, name, w.rps(), w.requests, w.elapsed.Seconds(), w.late)
		return nil
	}
	for round := range cfg.Rounds {
		k := round % len(closed)
		for _, c := range append(slices.Clone(closed[k:]), closed[:k]...) {
			if err := measureCell(c, round, 0); err != nil {
				return nil, err
			}
		}
	}
	// The closed-loop maximum the fractional rates are of: the default
	// style at the largest client count.
	var maxRPS float64
	for _, c := range closed {
		if c.Style == styleDefault && c.Clients == slices.Max(cfg.Clients) {
			maxRPS = median(c.RoundsRPS)
		}
	}
	var open []*tailCell
	for _, r := range rates {
		c := &tailCell{TailCell: TailCell{Style: styleDefault, Loop: "open", RatePerS: r.PerSecond, RateOfMax: r.OfMax}}
		if r.OfMax > 0 {
			c.RatePerS = r.OfMax * maxRPS
		}
		open = append(open, c)
	}
	for round := range cfg.Rounds {
		k := round % len(open)
		for _, c := range append(slices.Clone(open[k:]), open[:k]...) {
			if err := measureCell(c, round, c.RatePerS); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range append(closed, open...) {
		c.summarise(rep, cfg)
		rep.Cells = append(rep.Cells, c.TailCell)
	}
	if endLoad, ok := machine.LoadAverage(); ok && haveLoad {
		rep.Load = &Load{Start: startLoad, End: endLoad}
	}
	return rep, nil
}

// summarise fills c's medians, quantiles and Queueing.
func (c *tailCell) summarise(rep *TailReport, cfg Config) {
	c.RPS = median(c.RoundsRPS)
	c.P50Ms, _ = c.lat.quantile(0.50)
	c.P99Ms, _ = c.lat.quantile(0.99)
	c.P999Ms, _ = c.lat.quantile(0.999)
	c.AcceptP50Ms, _ = c.accept.quantile(0.50)
	c.AcceptP99Ms, c.Acceptances = c.accept.quantile(0.99)
	c.LookupP50Ms, _ = c.parts.lookup.quantile(0.50)
	c.LookupP99Ms, _ = c.parts.lookup.quantile(0.99)
	c.CommitP50Ms, _ = c.parts.rest.quantile(0.50)
	c.CommitP99Ms, _ = c.parts.rest.quantile(0.99)
	clients := 0
	if c.Loop == "closed" {
		clients = c.Clients
	}
	c.Queueing = littlesLaw(int64(c.Requests), c.elapsed, c.sojourn, c.use, rep.CPUs, rep.Pinning, clients)
	if c.poolAcq > 0 {
		c.Queueing.PoolWaitMs = float64(c.poolWait) / float64(time.Millisecond) / float64(c.poolAcq)
		c.Queueing.PoolWaiting = c.poolWait.Seconds() / c.elapsed.Seconds()
	}
}
