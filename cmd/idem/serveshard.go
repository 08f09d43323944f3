package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/maintenance"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// serveShard is what "idem serve" runs on one registry: the store, the
// payments service over it and its maintenance runner. Without --shard
// there is one, named "".
type serveShard struct {
	name  string
	store registry.Store
	svc   *payments.Service
	reg   *prometheus.Registry // its metrics
}

// shardSetup is what every shard of one "idem serve" shares.
type shardSetup struct {
	log          *slog.Logger
	opts         idemstore.Options // the key ring's gate is made per shard
	keyRefresh   time.Duration
	storeTimeout time.Duration
	svc          payments.Config // without Store, Registry and Logger
	runner       maintenance.Runner
	webhook      webhookFlags
}

// openShard opens the store at dsn (applying its migrations), starts the
// key ring's gate on it, the payments service over it and its
// maintenance runner, metrics on reg. The returned stop ends them in
// reverse order and closes the store; it is never nil, and on error
// everything started is stopped already.
func (s shardSetup) openShard(ctx context.Context, name, dsn string, reg *prometheus.Registry) (_ *serveShard, stop func(), err error) {
	log := s.log
	if name != "" {
		log = log.With("shard", name)
	}
	var stops stopStack
	defer func() {
		if err != nil {
			stops.stop()
		}
	}()
	opts := s.opts
	gate := gateOptions(&opts)
	store, err := idemstore.Open(ctx, dsn, opts)
	if err != nil {
		return nil, stops.stop, fmt.Errorf("cannot open the database: %w", err)
	}
	stops.push(func() { store.Close() })
	stopGate, err := gateStore(ctx, log, gate, store, s.keyRefresh)
	if err != nil {
		return nil, stops.stop, err
	}
	stops.push(stopGate)
	warnDurability(ctx, log, store)

	cfg := s.svc
	cfg.Store, cfg.Registry, cfg.Logger = registry.WithTimeout(store, s.storeTimeout), reg, log
	cfg.Database = idemstore.Kind(dsn)
	svc, err := payments.New(ctx, cfg)
	if err != nil {
		return nil, stops.stop, fmt.Errorf("cannot start the service: %w", err)
	}
	// The verdict counts of the last refresh, written once serving ended.
	stops.push(func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := svc.Rollouts().Flush(fctx); err != nil {
			log.Error("idem serve: the last verdict counts could not be written", "err", err)
		} else {
			log.Info("verdict counts flushed")
		}
	})

	// The library's maintenance runner: recovery, settlement of UNKNOWN
	// operations, pruning and the relay — one per shard.
	runner := s.runner
	runner.Store, runner.Effects, runner.Metrics, runner.Logger = store, svc.Effects(), recovery.NewMetrics(reg), log
	// The control row and the prune passes, read at scrape time for the
	// alerts (deploy/prometheus/rules.yml).
	reg.MustRegister(idemhttp.NewControlCollector(store, svc.WriterEpoch()), maintenance.NewPruneCollector(store))
	if *s.webhook.url != "" {
		relay, err := s.webhook.relay(store, reg, log)
		if err != nil {
			return nil, stops.stop, fmt.Errorf("cannot start the outbox relay: %w", err)
		}
		runner.Relay = relay
		logRelay(log, relay, *s.webhook.url)
	}
	stops.push(runInBackground(ctx, runner.Run))
	return &serveShard{name: name, store: store, svc: svc, reg: reg}, stops.stop, nil
}

// stopStack holds stop functions, run in reverse order by stop.
type stopStack []func()

func (s *stopStack) push(f func()) { *s = append(*s, f) }

func (s *stopStack) stop() {
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i]()
	}
}

// shardGatherer gathers a shard's metrics with the label shard=NAME.
type shardGatherer struct {
	name string
	g    prometheus.Gatherer
}

// Gather implements prometheus.Gatherer.
func (s shardGatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := s.g.Gather()
	for _, f := range fams {
		for _, m := range f.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: ptr("shard"), Value: ptr(s.name)})
		}
	}
	return fams, err
}

func ptr[T any](v T) *T { return &v }

// probeAll answers a health route (GET /healthz, /readyz) for every
// shard: each shard's service answers it in turn, and the first answer
// that is not 200 is the answer (so a load balancer stops sending when
// any shard is not ready), else the last shard's 200.
func probeAll(shards []*serveShard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i, s := range shards {
			rec := &bufferedAnswer{header: http.Header{}}
			s.svc.Handler().ServeHTTP(rec, r)
			if rec.status != http.StatusOK || i == len(shards)-1 {
				for k, v := range rec.header {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.status)
				w.Write(rec.body)
				return
			}
		}
	})
}

// bufferedAnswer keeps a handler's answer.
type bufferedAnswer struct {
	header http.Header
	status int
	body   []byte
}

func (b *bufferedAnswer) Header() http.Header { return b.header }
func (b *bufferedAnswer) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}
func (b *bufferedAnswer) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	b.body = append(b.body, p...)
	return len(p), nil
}
