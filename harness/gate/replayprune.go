package gate

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// The replay-prune phase (RunReplayPrune, docs/gate.md "Replays while
// pruning"): several "idem serve" instances with the replay cache on
// (--replay-cache) and a short retention, pruned by every instance, are
// sent nothing but replays of settled keys, from many clients, until
// every key has been retired — and no replay may be served for a record
// after it was retired: once any instance answered a key 409 KEY_RETIRED
// or the gate read the record retired in the registry (its retirement
// committed), every later request with it gets 409
// KEY_RETIRED with its operation ID, from every instance, however warm
// its cache.

// Defaults of ReplayPruneConfig.
const (
	DefaultReplayPruneKeys      = 40
	DefaultReplayPruneClients   = 8
	DefaultReplayPruneRetention = 3 * time.Second
	DefaultReplayPruneInterval  = 200 * time.Millisecond
	// DefaultReplayPruneMargin is the instances' --replay-cache-margin:
	// the gate, the instances and the database share one clock.
	DefaultReplayPruneMargin = 500 * time.Millisecond
)

// ReplayPruneConfig configures RunReplayPrune. DSN and Bin are required;
// zero values of the others mean their defaults.
type ReplayPruneConfig struct {
	// DSN is the registry every instance uses (sqlite:, postgres://,
	// mysql://); it is migrated first.
	DSN string
	// Bin is the idem binary the instances run.
	Bin string
	// Instances is how many "idem serve" run (default 2).
	Instances int
	// Keys is how many keys are executed, then replayed (default
	// DefaultReplayPruneKeys); Clients how many replay at once (default
	// DefaultReplayPruneClients).
	Keys, Clients int
	// Retention, PruneInterval and Margin are the instances' --retention,
	// --prune-interval and --replay-cache-margin.
	Retention, PruneInterval, Margin time.Duration
	// Seed seeds the plan; Progress receives progress lines (nil: none).
	Seed     int64
	Progress io.Writer
}

// ReplayPruneReport is what RunReplayPrune saw.
type ReplayPruneReport struct {
	Keys      int `json:"keys"`
	Instances int `json:"instances"`
	// Replays counts the replayed answers (201, Idempotent-Replayed),
	// Retired the 409 KEY_RETIRED answers, Requests every request.
	Requests int64 `json:"requests"`
	Replays  int64 `json:"replays"`
	Retired  int64 `json:"retired"`
	// CacheHits sums idem_replay_cache_hits_total over the instances.
	CacheHits int64 `json:"cache_hits"`
	// ReplayAfterRetiredAt is the longest time a served replay's request
	// was sent after its record's RetiredAt (0: none was). RetiredAt is
	// when the prune statement began; the retirement is seen once its
	// transaction commits, so a replay read from the registry meanwhile
	// is served — this is that window, not a failure. A replay to a
	// request sent after any KEY_RETIRED answer for its key is one.
	ReplayAfterRetiredAt time.Duration `json:"replay_after_retired_at_ns"`
	// Problems lists what failed the phase; Pass is true without any.
	Problems []string `json:"problems"`
	Pass     bool     `json:"pass"`
}

func (c ReplayPruneConfig) withDefaults() ReplayPruneConfig {
	c.Instances = cmp.Or(c.Instances, 2)
	c.Keys = cmp.Or(c.Keys, DefaultReplayPruneKeys)
	c.Clients = cmp.Or(c.Clients, DefaultReplayPruneClients)
	c.Retention = cmp.Or(c.Retention, DefaultReplayPruneRetention)
	c.PruneInterval = cmp.Or(c.PruneInterval, DefaultReplayPruneInterval)
	c.Margin = cmp.Or(c.Margin, DefaultReplayPruneMargin)
	return c
}

// replayAnswer is one replay request and its answer.
type replayAnswer struct {
	key  int
	sent time.Time
	a    Answer
	ok   bool
	note string
}

// RunReplayPrune runs the replay-prune phase and returns its report; an
// error means it could not run (the database or an instance did not come
// up), not that it failed. Instances are stopped before it returns. ctx
// governs the whole run.
func RunReplayPrune(ctx context.Context, cfg ReplayPruneConfig) (*ReplayPruneReport, error) {
	cfg = cfg.withDefaults()
	if cfg.DSN == "" || cfg.Bin == "" {
		return nil, errors.New("gate: the replay-prune phase needs a DSN and an idem binary")
	}
	if cfg.Margin >= cfg.Retention {
		return nil, errors.New("gate: the replay-cache margin must be shorter than the retention, or nothing is cached")
	}
	progress := cmp.Or[io.Writer](cfg.Progress, io.Discard)
	say := func(format string, args ...any) { fmt.Fprintf(progress, "gate: "+format+"\n", args...) }
	store, err := idemstore.Open(ctx, cfg.DSN, idemstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("gate: opening the database: %w", err)
	}
	defer store.Close()
	plan := NewPlan(cfg.Keys, 1, 4, 0, 0, cfg.Seed) // no refusals: every key a 201 to replay
	dir, err := os.MkdirTemp("", "idem-gate-")
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	defer os.RemoveAll(dir)
	auth, err := plan.AuthFile()
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	authPath := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authPath, auth, 0o600); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	args := []string{"--db", cfg.DSN, "--auth", authPath,
		"--retention", cfg.Retention.String(), "--prune-interval", cfg.PruneInterval.String(),
		"--client-retry-window", "0s", "--queue-backlog-window", "0s", "--reconciliation-window", "0s", "--restore-window", "0s",
		"--replay-cache", strconv.Itoa(4 * cfg.Keys), "--replay-cache-margin", cfg.Margin.String(),
		"--admin-addr", "127.0.0.1:0"}
	fleet := &fleet{bin: cfg.Bin, args: args}
	defer fleet.stopAll()
	for i := range cfg.Instances {
		if err := fleet.start(ctx, i, nil); err != nil {
			return nil, err
		}
		say("instance %d listening on %s", i, fleet.instances[i].url)
	}
	rep := &ReplayPruneReport{Keys: cfg.Keys, Instances: cfg.Instances}
	l := newLoader(Config{Concurrency: cfg.Clients}, plan, fleet.targets)

	// Execute every key once, then replay them until each is retired.
	firsts := make([]Answer, len(plan.Keys))
	for i, k := range plan.Keys {
		a, _, _, err := l.exchange(ctx, fleet.targets[i%len(fleet.targets)].URL(), k, k.Body(0))
		if err != nil || a.Status != http.StatusCreated || a.Replayed || a.OperationID == "" {
			return nil, fmt.Errorf("gate: key %d's first request: %+v %v", i, a, err)
		}
		firsts[i] = a
	}
	say("replay-prune: %d keys executed; replaying from %d clients over %d instances with --replay-cache, retention %v, pruned every %v",
		cfg.Keys, cfg.Clients, cfg.Instances, cfg.Retention, cfg.PruneInterval)
	watch := newRetirementWatch(store, firsts)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); watch.run(wctx) }()
	answers := replayUntilRetired(ctx, l, plan, fleet.targets, cfg.Clients, cfg.Retention+30*cfg.PruneInterval+20*time.Second)
	stopWatch()
	<-watched
	hits, problems := scrapeCacheHits(ctx, fleet)
	rep.CacheHits = hits
	problems = append(problems, fleet.stopAll()...)
	rep.Problems = append(rep.Problems, problems...)
	rep.Requests = int64(len(answers))

	retiredAt := make([]time.Time, len(plan.Keys))
	for i, f := range firsts {
		rec, err := store.GetByID(ctx, f.OperationID)
		switch {
		case err != nil:
			rep.problem("key %d: reading its record: %v", i, err)
		case !rec.Retired():
			rep.problem("key %d: its record was never retired", i)
		default:
			retiredAt[i] = rec.RetiredAt
		}
	}
	firstRetired := make([]time.Time, len(plan.Keys)) // when the key's first KEY_RETIRED came
	for _, r := range answers {
		if r.ok && r.a.Code == idem.CodeKeyRetired && (firstRetired[r.key].IsZero() || r.a.At.Before(firstRetired[r.key])) {
			firstRetired[r.key] = r.a.At
		}
	}
	for _, r := range answers {
		f := firsts[r.key]
		switch {
		case !r.ok:
			rep.problem("key %d: no answer: %s", r.key, r.note)
		case r.a.Status == http.StatusCreated && r.a.Replayed && r.a.OperationID == f.OperationID && r.a.Digest == f.Digest:
			rep.Replays++
			if at := retiredAt[r.key]; !at.IsZero() && r.sent.Sub(at) > rep.ReplayAfterRetiredAt {
				rep.ReplayAfterRetiredAt = r.sent.Sub(at)
			}
			if fr := firstRetired[r.key]; !fr.IsZero() && r.sent.After(fr) {
				rep.problem("key %d: replayed to a request sent %v after a KEY_RETIRED answer for it", r.key, r.sent.Sub(fr))
			}
			if seen := watch.seen[r.key]; !seen.IsZero() && r.sent.After(seen) {
				rep.problem("key %d: replayed to a request sent %v after the gate read its record retired in the registry", r.key, r.sent.Sub(seen))
			}
		case r.a.Status == http.StatusConflict && r.a.Code == idem.CodeKeyRetired && r.a.OperationID == f.OperationID:
			rep.Retired++
		default:
			rep.problem("key %d: unexpected answer: %s", r.key, r.note)
		}
	}
	if rep.CacheHits == 0 {
		rep.problem("no replay was answered from the replay cache (idem_replay_cache_hits_total 0): the phase proved nothing")
	}
	if rep.Retired < int64(cfg.Keys) {
		rep.problem("%d KEY_RETIRED answers for %d keys", rep.Retired, cfg.Keys)
	}
	rep.Pass = len(rep.Problems) == 0
	say("replay-prune: %d requests, %d replays (%d from the cache), %d KEY_RETIRED; replays sent up to %v after RetiredAt (before the prune committed); pass %v",
		rep.Requests, rep.Replays, rep.CacheHits, rep.Retired, rep.ReplayAfterRetiredAt, rep.Pass)
	return rep, nil
}

func (r *ReplayPruneReport) problem(format string, args ...any) {
	if len(r.Problems) < maxReplayPruneProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

const maxReplayPruneProblems = 50

// retirementWatch reads the records of the phase's keys from the
// registry, as the gate's own client, until each is retired: seen[k] is
// when a read that found key k's record retired returned — its
// retirement had committed by then, whatever the clocks.
type retirementWatch struct {
	store interface {
		GetByID(ctx context.Context, id string) (registry.Record, error)
	}
	ids  []string
	seen []time.Time // written by run only; read after it returned
}

func newRetirementWatch(store registry.Store, firsts []Answer) *retirementWatch {
	w := &retirementWatch{store: store, seen: make([]time.Time, len(firsts))}
	for _, f := range firsts {
		w.ids = append(w.ids, f.OperationID)
	}
	return w
}

// retirementPoll is how often the watch reads the records not yet seen
// retired.
const retirementPoll = 10 * time.Millisecond

// run reads until every record was seen retired or ctx ends.
func (w *retirementWatch) run(ctx context.Context) {
	for left := len(w.ids); left > 0 && ctx.Err() == nil; {
		for i, id := range w.ids {
			if !w.seen[i].IsZero() {
				continue
			}
			if rec, err := w.store.GetByID(ctx, id); err == nil && rec.Retired() {
				w.seen[i] = time.Now()
				left--
			}
		}
		sleep(ctx, retirementPoll)
	}
}

// replayUntilRetired sends replays of plan's keys from clients workers,
// each key in turn to every target, until every key got KEY_RETIRED from
// every target, or limit passed, or ctx ended; it returns every request's
// answer.
func replayUntilRetired(ctx context.Context, l *loader, plan Plan, targets []*Target, clients int, limit time.Duration) []replayAnswer {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var (
		mu      sync.Mutex
		answers []replayAnswer
		left    atomic.Int64 // (key, target) pairs not yet answered KEY_RETIRED
		seen    = make([]bool, len(plan.Keys)*len(targets))
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	left.Store(int64(len(seen)))
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Load() > 0 && ctx.Err() == nil {
				n := next.Add(1) - 1
				ki, ti := int(n)%len(plan.Keys), int(n/int64(len(plan.Keys)))%len(targets)
				k := plan.Keys[ki]
				sent := time.Now()
				a, note, _, err := l.exchange(ctx, targets[ti].URL(), k, k.Body(0))
				if ctx.Err() != nil {
					return
				}
				r := replayAnswer{key: ki, sent: sent, a: a, ok: err == nil, note: note}
				if err != nil {
					r.note = err.Error()
				}
				mu.Lock()
				answers = append(answers, r)
				if r.ok && a.Code == idem.CodeKeyRetired && !seen[ki*len(targets)+ti] {
					seen[ki*len(targets)+ti] = true
					left.Add(-1)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answers
}

// scrapeCacheHits sums idem_replay_cache_hits_total over the fleet's
// instances.
func scrapeCacheHits(ctx context.Context, f *fleet) (int64, []string) {
	var total int64
	var problems []string
	for _, in := range f.instances {
		n, err := scrapeCounter(ctx, cmp.Or(in.metricsURL, in.url), "idem_replay_cache_hits_total")
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", in.name, err))
		}
		total += n
	}
	return total, problems
}

// scrapeCounter sums the samples of the counter name at base/metrics.
func scrapeCounter(ctx context.Context, base, name string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		total += v
	}
	return int64(total), sc.Err()
}
