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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/internal/machine"
	"github.com/idemkit/idem/registry"
)

// The effect benchmark (RunEffects, "idem bench --effects") drives POST
// /v1/transfers three ways against the demo provider (package provider,
// served in this process on a loopback port) answering after a fixed
// latency:
//
//   - effect_plain: effectHandler without a store — the provider call
//     with a fresh key per request and no idempotency;
//   - effect_floor: effectHandler with the run's store — one durable row
//     holding the scope and the downstream key before the call, the
//     answer written into it and committed after (effects.sql): the least
//     any correct design must pay;
//   - transfers: the reference service's POST /v1/transfers behind the
//     real idemhttp middleware (payments.Service with Config.Provider),
//     in the one-transaction style (payments.Config.OneTransaction, the
//     default of idem serve): two commits per transfer;
//   - transfers_2p: the same route in the two-phase style (idem serve
//     --two-phase): reservation, BeginEffect, RecordEffect and outcome,
//     measured side by side with the one-transaction style.
//
// Each latency has its own provider and its own four servers. Cells — a
// variant at a latency and a client count — are interleaved in rounds,
// their order rotated, and the report gives medians, as Run does.

// The effect variants, in their base order within a round.
const (
	variantEffectPlain = "effect_plain"
	variantEffectFloor = "effect_floor"
	variantTransfers   = "transfers"
	variantTransfers2P = "transfers_2p"
)

var effectVariants = []string{variantEffectPlain, variantEffectFloor, variantTransfers, variantTransfers2P}

// DefaultLatencies are the provider latencies of RunEffects when
// Config.Latencies is empty: a nearby service, and a typical payment
// service provider.
var DefaultLatencies = []time.Duration{time.Millisecond, 20 * time.Millisecond}

// DefaultEffectClients are the client counts of RunEffects when
// Config.Clients is empty.
var DefaultEffectClients = []int{16, 64}

// EffectTarget is the least transfers ÷ floor expected at EffectTargetClients
// clients on PostgreSQL.
const (
	EffectTarget        = 0.90
	EffectTargetClients = 16
)

// effectSet is one latency's provider and servers.
type effectSet struct {
	latency                                          time.Duration
	prov                                             *provider.Server
	plainURL, floorURL, transfersURL, transfers2PURL string
}

// RunEffects performs one effect benchmark run (see above) with cfg
// (Config.Latencies, Clients, Duration, Warmup, Rounds, Keep, Progress;
// ReplayKeys is not used) and returns its report. Any request not
// answered 201 stops the run with an error. ctx governs the whole run.
func RunEffects(ctx context.Context, cfg Config) (_ *EffectsReport, err error) {
	if len(cfg.Clients) == 0 {
		cfg.Clients = DefaultEffectClients
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(cfg.Latencies) == 0 {
		cfg.Latencies = DefaultLatencies
	}
	for _, l := range cfg.Latencies {
		if l < 0 {
			return nil, errors.New("bench: negative provider latency")
		}
	}
	db, store, err := cfg.workIn(ctx)
	if err != nil {
		return nil, err
	}
	defer db.release(ctx, store, &err)
	if err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, queries.Get("create_effect_floor_"+db.kind))
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: creating the effect floor table: %w", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	runID := hex.EncodeToString(rnd[:])
	sets := make([]*effectSet, len(cfg.Latencies))
	for i, l := range cfg.Latencies {
		set := &effectSet{latency: l}
		if set.prov, err = provider.Open(provider.Options{Latency: l}); err != nil {
			return nil, err
		}
		defer set.prov.Close()
		provURL, stop, err := serve(set.prov.Handler())
		if err != nil {
			return nil, err
		}
		defer stop()
		svc, err := payments.New(ctx, payments.Config{
			Store: store, Database: db.kind, Auth: benchTokens(), Provider: provURL, OneTransaction: true,
			Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		})
		if err != nil {
			return nil, err
		}
		svc2P, err := payments.New(ctx, payments.Config{
			Store: store, Database: db.kind, Auth: benchTokens(), Provider: provURL,
			Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		})
		if err != nil {
			return nil, err
		}
		for _, s := range []struct {
			url *string
			h   http.Handler
		}{
			{&set.plainURL, newEffectHandler(provURL, nil, runID+"-"+strconv.Itoa(i))},
			{&set.floorURL, newEffectHandler(provURL, store, runID)},
			{&set.transfersURL, svc.Handler()},
			{&set.transfers2PURL, svc2P.Handler()},
		} {
			base, stop, err := serve(s.h)
			if err != nil {
				return nil, err
			}
			defer stop()
			*s.url = base + "/v1/transfers"
		}
		sets[i] = set
	}
	maxClients := slices.Max(cfg.Clients)
	transport := &http.Transport{
		MaxIdleConns:        2 * max(maxClients, 16),
		MaxIdleConnsPerHost: max(maxClients, 16),
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	var wal *walMeter
	if db.conn != nil {
		if wal, err = openWAL(ctx, db.conn); err != nil {
			return nil, fmt.Errorf("bench: connecting the WAL meter: %w", err)
		}
		defer wal.close(context.WithoutCancel(ctx))
	}
	meter, err := openCPUMeter(ctx, db.conn, cfg.Progress)
	if err != nil {
		return nil, err
	}
	startLoad, haveLoad := machine.LoadAverage()
	rep, err := measureEffects(ctx, cfg, db.kind, sets, client, runID, wal, meter)
	if err != nil {
		return nil, err
	}
	if endLoad, ok := machine.LoadAverage(); ok && haveLoad {
		rep.Load = &Load{Start: startLoad, End: endLoad}
	}
	for _, set := range sets {
		rep.Executed += int64(set.prov.Executed())
	}
	if err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, queries.Get("count_effect_floor")).Scan(&rep.FloorRows)
	}); err != nil {
		return nil, fmt.Errorf("bench: counting the floor rows: %w", err)
	}
	return rep, nil
}

// measureEffects times every cell cfg.Rounds times, interleaved, and
// summarises. wal, if not nil, measures WAL bytes and write transactions;
// meter the CPU of this process and of PostgreSQL (where it runs here).
func measureEffects(ctx context.Context, cfg Config, kind string, sets []*effectSet, client *http.Client, runID string, wal *walMeter, meter *cpuMeter) (*EffectsReport, error) {
	rep := &EffectsReport{
		DB: kind, Go: runtime.Version(), CPUs: runtime.NumCPU(), DBCPUMeasured: meter.postmaster != 0,
		Rounds: cfg.Rounds, DurationSeconds: cfg.Duration.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(),
		Target: EffectTarget, TargetClients: EffectTargetClients,
		Requests: map[string]int64{},
	}
	type cell struct {
		set     *effectSet
		clients int
		res     *EffectResult
		lat     map[string]*samples
		rounds  map[string]*effectRounds
	}
	var cells []*cell
	for _, set := range sets {
		for _, n := range cfg.Clients {
			c := &cell{set: set, clients: n, res: &EffectResult{LatencyMs: float64(set.latency) / float64(time.Millisecond), Clients: n},
				lat: map[string]*samples{}, rounds: map[string]*effectRounds{}}
			for _, v := range effectVariants {
				c.lat[v], c.rounds[v] = &samples{}, &effectRounds{}
			}
			cells = append(cells, c)
		}
	}
	var seq atomic.Int64
	answered := make([]atomic.Int64, len(effectVariants)) // per variant, warm-ups included
	for round := range cfg.Rounds {
		for ci, c := range cells {
			k := (round + ci) % len(effectVariants)
			for _, vi := range append(seqInts(k, len(effectVariants)), seqInts(0, k)...) {
				v := effectVariants[vi]
				url := map[string]string{variantEffectPlain: c.set.plainURL, variantEffectFloor: c.set.floorURL,
					variantTransfers: c.set.transfersURL, variantTransfers2P: c.set.transfers2PURL}[v]
				var into atomic.Pointer[samples]
				do := func(ctx context.Context, n int64) error {
					key := ""
					if v != variantEffectPlain {
						key = keygen.Derive(runID + "-e-" + strconv.FormatInt(n, 10))
					}
					took, err := postTransfer(ctx, client, url, int(n%principals), key)
					if err != nil {
						return err
					}
					answered[vi].Add(1)
					if s := into.Load(); s != nil {
						s.add(took)
					}
					return nil
				}
				if cfg.Warmup > 0 {
					if _, err := drive(ctx, c.clients, cfg.Warmup, &seq, do); err != nil {
						return nil, fmt.Errorf("bench: %s, %v, %d clients, warm-up: %w", v, c.set.latency, c.clients, err)
					}
				}
				before, err := wal.snapshot(ctx)
				if err != nil {
					return nil, fmt.Errorf("bench: reading the WAL position: %w", err)
				}
				cpuBefore, err := meter.read()
				if err != nil {
					return nil, err
				}
				into.Store(c.lat[v])
				w, err := drive(ctx, c.clients, cfg.Duration, &seq, do)
				into.Store(nil)
				if err != nil {
					return nil, fmt.Errorf("bench: %s, %v, %d clients, round %d: %w", v, c.set.latency, c.clients, round+1, err)
				}
				use, err := meter.since(cpuBefore)
				if err != nil {
					return nil, err
				}
				walBytes, xids, measured, err := wal.sinceSnapshot(ctx, before)
				if err != nil {
					return nil, fmt.Errorf("bench: reading the WAL position: %w", err)
				}
				r := c.rounds[v]
				r.rps = append(r.rps, w.rps())
				perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(w.requests, 1)) }
				r.selfCPU = append(r.selfCPU, perOp(use.self.cpu))
				r.dbCPU = append(r.dbCPU, perOp(use.db.cpu))
				r.busy = append(r.busy, use.machineBusy())
				line := fmt.Sprintf("round %d/%d  latency %-5v  clients %-3d  %-12s  %7.0f/s  (%d in %.2fs)  CPU µs/op %.0f + %.0f (PostgreSQL)  busy %.0f%%",
					round+1, cfg.Rounds, c.set.latency, c.clients, v, w.rps(), w.requests, w.elapsed.Seconds(),
					r.selfCPU[len(r.selfCPU)-1], r.dbCPU[len(r.dbCPU)-1], 100*r.busy[len(r.busy)-1])
				if measured {
					r.wal = append(r.wal, float64(walBytes)/float64(w.requests))
					r.commits = append(r.commits, float64(xids)/float64(w.requests))
					line += fmt.Sprintf("  %.0f WAL B/op  %.2f commits/op", r.wal[len(r.wal)-1], r.commits[len(r.commits)-1])
				}
				fmt.Fprintln(cfg.Progress, line)
			}
		}
	}
	for vi, v := range effectVariants {
		rep.Requests[v] = answered[vi].Load()
	}
	for _, c := range cells {
		figs := map[string]*EffectFigures{variantEffectPlain: &c.res.Plain, variantEffectFloor: &c.res.Floor,
			variantTransfers: &c.res.Transfers, variantTransfers2P: &c.res.TransfersTwoPhase}
		for _, v := range effectVariants {
			c.rounds[v].summarise(figs[v], c.lat[v])
		}
		c.res.summarise()
		rep.Results = append(rep.Results, *c.res)
	}
	return rep, nil
}

// seqInts returns from, from+1, …, to-1.
func seqInts(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// effectRounds holds one variant's per-round figures in one cell: CPU
// per request of this process and of PostgreSQL in µs, and the machine's
// busy share.
type effectRounds struct{ rps, wal, commits, selfCPU, dbCPU, busy []float64 }

// summarise fills f from the rounds and the latency samples.
func (r *effectRounds) summarise(f *EffectFigures, lat *samples) {
	f.RoundsRPS = r.rps
	f.RPS = median(r.rps)
	f.P50Ms, _ = lat.quantile(0.50)
	f.P99Ms, f.Timed = lat.quantile(0.99)
	f.ProcessCPUMicros, f.DBCPUMicros, f.MachineBusy = median(r.selfCPU), median(r.dbCPU), median(r.busy)
	if len(r.wal) > 0 {
		w, c := median(r.wal), median(r.commits)
		f.WALBytesPerOp, f.CommitsPerOp = &w, &c
	}
}
