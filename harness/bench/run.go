package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/machine"
)

// Run performs one benchmark run (see the package documentation) and
// returns its report. Any request that is not answered as expected (201,
// replayed or not as the variant wants) stops the run with an error:
// figures are only reported for runs where every request succeeded. The
// run's schema or file is dropped at the end unless cfg.Keep. ctx governs
// the whole run; cancelling it stops the run with ctx's error.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	db, store, err := cfg.workIn(ctx)
	if err != nil {
		return nil, err
	}
	defer db.release(ctx, store, &err)
	pinning, unpin, err := cfg.pinFor(ctx, db)
	if err != nil {
		return nil, err
	}
	defer unpin()
	timed := &timedStore{Store: store}
	svc, err := payments.New(ctx, payments.Config{
		Store:    timed,
		Database: db.kind,
		Auth:     benchTokens(),
		Logger:   slog.New(slog.DiscardHandler),
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		return nil, err
	}
	// The same service with POST /v1/payments in the one-transaction
	// style (idemhttp.Operation.OneTransaction), on the same store.
	oneTx, err := payments.New(ctx, payments.Config{
		Store:          timed,
		Database:       db.kind,
		Auth:           benchTokens(),
		Logger:         slog.New(slog.DiscardHandler),
		Registry:       prometheus.NewRegistry(),
		OneTransaction: true,
	})
	if err != nil {
		return nil, err
	}
	// The two-phase service again with the replay cache on, large enough
	// for every replayed key (operation.ReplayCache): its replays are the
	// same scopes' as the service's.
	cachedSvc, err := payments.New(ctx, payments.Config{
		Store:       timed,
		Database:    db.kind,
		Auth:        benchTokens(),
		Logger:      slog.New(slog.DiscardHandler),
		Registry:    prometheus.NewRegistry(),
		ReplayCache: idemhttp.ReplayCache{Entries: cfg.ReplayKeys},
	})
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
	// The floor: the plain handler, served the same way, with the
	// smallest idempotency row in its transaction (floor.go).
	if err := createFloorTable(ctx, store, db.kind); err != nil {
		return nil, fmt.Errorf("bench: creating the floor table: %w", err)
	}
	floorMux := http.NewServeMux()
	floorMux.Handle("POST /v1/payments", svc.PlainCreateWith(floorStep))
	floorURL, stopFloor, err := serve(floorMux)
	if err != nil {
		return nil, err
	}
	defer stopFloor()
	idemURL, stopIdem, err := serve(svc.Handler())
	if err != nil {
		return nil, err
	}
	defer stopIdem()
	oneTxURL, stopOneTx, err := serve(timed.timeAcceptance(oneTx.Handler()))
	if err != nil {
		return nil, err
	}
	defer stopOneTx()
	cachedURL, stopCached, err := serve(cachedSvc.Handler())
	if err != nil {
		return nil, err
	}
	defer stopCached()
	maxClients := slices.Max(cfg.Clients)
	transport := &http.Transport{
		MaxIdleConns:        2 * max(maxClients, 16),
		MaxIdleConnsPerHost: max(maxClients, 16),
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	var rnd [4]byte
	rand.Read(rnd[:])
	t := &target{
		plainURL: plainURL + "/v1/payments", idemURL: idemURL + "/v1/payments",
		floorURL: floorURL + "/v1/payments", oneTxURL: oneTxURL + "/v1/payments",
		cachedURL: cachedURL + "/v1/payments",
		client:    &http.Client{Transport: transport}, store: store, svc: svc,
		runID: hex.EncodeToString(rnd[:]), replayKeys: cfg.ReplayKeys,
	}
	var wal *walMeter // nil on SQLite: no WAL figures
	if db.conn != nil {
		if wal, err = openWAL(ctx, db.conn); err != nil {
			return nil, fmt.Errorf("bench: connecting the WAL meter: %w", err)
		}
		defer wal.close(context.WithoutCancel(ctx))
	}
	startLoad, haveLoad := machine.LoadAverage()
	if err := t.prepareReplays(ctx); err != nil {
		return nil, err
	}
	rep, err := measure(ctx, cfg, db.kind, t, timed, wal)
	if endLoad, ok := machine.LoadAverage(); err == nil && ok && haveLoad {
		rep.Load = &Load{Start: startLoad, End: endLoad}
	}
	if err == nil {
		rep.floorCreated = t.floorCreated.Load()
		rep.Pinning = pinning
	}
	return rep, err
}

// measure times every cell cfg.Rounds times, interleaved, and summarises.
// wal, if not nil, measures the WAL each timed cell inserted.
func measure(ctx context.Context, cfg Config, kind string, t *target, timed *timedStore, wal *walMeter) (*Report, error) {
	rep := &Report{
		DB: kind, Go: runtime.Version(), CPUs: runtime.NumCPU(),
		Rounds: cfg.Rounds, DurationSeconds: cfg.Duration.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(),
		ReplayKeys: cfg.ReplayKeys, Targets: DefaultTargets,
		Results: make([]Result, len(cfg.Clients)),
	}
	firstRes := make([]samples, len(cfg.Clients))
	oneTxRes := make([]samples, len(cfg.Clients))
	replayRes := make([]samples, len(cfg.Clients))
	var seq atomic.Int64
	for round := range cfg.Rounds {
		for ci, clients := range cfg.Clients {
			r := &rep.Results[ci]
			r.Clients = clients
			// Rotate the order of the variants so that none always runs
			// first, or right after the write-heaviest one.
			k := (round + ci) % len(variants)
			for _, v := range append(slices.Clone(variants[k:]), variants[:k]...) {
				do := t.op(v)
				if cfg.Warmup > 0 {
					if _, err := drive(ctx, clients, cfg.Warmup, &seq, do); err != nil {
						return nil, fmt.Errorf("bench: %s, %d clients, warm-up: %w", v, clients, err)
					}
				}
				stop := func() {}
				switch v {
				case variantFirst:
					stop = timed.record(&firstRes[ci])
				case variantFirstOneTx:
					stop = timed.record(&oneTxRes[ci])
				case variantReplay:
					stop = timed.record(&replayRes[ci])
				}
				lsn, err := wal.position(ctx)
				if err != nil {
					return nil, fmt.Errorf("bench: reading the WAL position: %w", err)
				}
				w, err := drive(ctx, clients, cfg.Duration, &seq, do)
				stop()
				if err != nil {
					return nil, fmt.Errorf("bench: %s, %d clients, round %d: %w", v, clients, round+1, err)
				}
				walBytes, measured, err := wal.since(ctx, lsn)
				if err != nil {
					return nil, fmt.Errorf("bench: reading the WAL position: %w", err)
				}
				rps := w.rps()
				r.RoundsRPS.add(v, rps)
				line := fmt.Sprintf("round %d/%d  clients %-3d  %-17s  %8.0f/s  (%d in %.2fs)",
					round+1, cfg.Rounds, clients, v, rps, w.requests, w.elapsed.Seconds())
				if measured {
					if r.RoundsWALBytesPerOp == nil {
						r.RoundsWALBytesPerOp = &PerRound{}
					}
					perOp := float64(walBytes) / float64(w.requests)
					r.RoundsWALBytesPerOp.add(v, perOp)
					line += fmt.Sprintf("  %.0f WAL B/op", perOp)
				}
				fmt.Fprintln(cfg.Progress, line)
			}
		}
	}
	for ci := range rep.Results {
		r := &rep.Results[ci]
		r.ReservationP50Ms, _ = firstRes[ci].quantile(0.50)
		r.ReservationP99Ms, r.Reservations = firstRes[ci].quantile(0.99)
		r.ReplayReservationP99Ms, _ = replayRes[ci].quantile(0.99)
		r.OneTxAcceptanceP50Ms, _ = oneTxRes[ci].quantile(0.50)
		r.OneTxAcceptanceP99Ms, r.OneTxAcceptances = oneTxRes[ci].quantile(0.99)
		r.summarise(rep.Targets)
	}
	return rep, nil
}

// serve serves h on a new loopback port and returns its base URL and a
// function that shuts the server down.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // returns http.ErrServerClosed after Shutdown
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
