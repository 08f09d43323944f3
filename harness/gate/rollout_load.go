package gate

import (
	"context"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// RolloutAnswer is one answer a request of the rollout phase got.
type RolloutAnswer struct {
	Answer
	// Sent is when the attempt that got the answer was sent.
	Sent time.Time
	// Conflict: the answer to the key's different payload.
	Conflict bool
	// Stage is the index in RolloutStages the request was sent in.
	Stage int
}

// RolloutKey is what one key's requests got in the rollout phase.
type RolloutKey struct {
	// Stage is the stage the key's first requests were sent in.
	Stage int
	// Sends is when every attempt of the key was sent, re-sends included:
	// each may have executed.
	Sends []time.Time
	// Answers are the answers that end a request: 201, a stored 422, and
	// (Conflict) the different payload's answer.
	Answers []RolloutAnswer
	// Unanswered counts requests without such an answer before
	// Config.KeyTimeout; Unexpected lists answers the contract does not
	// allow for the request.
	Unanswered int
	Unexpected []string
}

// RolloutStageResult is what one stage of the ramp did.
type RolloutStageResult struct {
	RolloutStage
	// NewKeys are the keys first sent in the stage; Retried the earlier
	// stages' keys sent once more in it.
	NewKeys int `json:"new_keys"`
	Retried int `json:"retried_keys"`
	// TenantsEnforced counts the plan's tenants the stage enforces.
	TenantsEnforced int `json:"tenants_enforced"`
	// EffectSeconds is how long after the change was committed every
	// instance served it (its probes' answers).
	EffectSeconds float64 `json:"effect_seconds"`
	// Crash: an instance was killed with SIGKILL and restarted midway
	// through the stage.
	Crash bool `json:"crash,omitempty"`
}

// RolloutResult is the outcome of the rollout phase's load.
type RolloutResult struct {
	Keys     []RolloutKey
	Requests int64
	Resends  map[string]int64
	Elapsed  time.Duration
	Latency  Histogram
	Stages   []RolloutStageResult
	// Enforced is when the first change that enforces someone was
	// committed (the rollout command returned): from then on the
	// operation counts as enforced for every attempt sent. Zero if no
	// stage enforced.
	Enforced time.Time
	// Problems are failures of the phase itself: a stage that did not
	// take effect, a change or a crash that failed.
	Problems []string
}

// rolloutJob is one unit of a stage's load: a new key's concurrent
// retries (and its different payload), or one more request of an earlier
// key.
type rolloutJob struct {
	key   int
	retry bool
	stage int
}

// rolloutLoad runs the stages of RolloutStages through the fleet: for
// each, it sets the row (sw), waits until both instances serve the new
// stage (the probes), and sends the stage's jobs — its new keys, each
// with Retries requests at once to alternating instances, and one more
// request of every earlier key — with cfg.keyWorkers() jobs in flight;
// the change of the next stage is made while the last jobs are still in
// flight. Midway through stage rolloutCrashStage instance 0 is killed with
// SIGKILL and restarted.
func rolloutLoad(ctx context.Context, cfg Config, plan Plan, f *fleet, sw *switcher, probes rolloutProbes, say func(string, ...any)) RolloutResult {
	l := newLoader(cfg, plan, f.targets)
	defer l.client.CloseIdleConnections()
	probeClient := &http.Client{Timeout: 30 * time.Second}
	defer probeClient.CloseIdleConnections()
	keys := make([]RolloutKey, len(plan.Keys))
	locks := make([]sync.Mutex, len(plan.Keys))
	res := RolloutResult{}
	rng := mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x7011))
	start := time.Now()
	stopProgress := l.progress(ctx, start, int64(len(plan.Keys)*plan.Retries))

	jobs := make(chan rolloutJob)
	var wg sync.WaitGroup
	for range cfg.keyWorkers() {
		wg.Go(func() {
			for j := range jobs {
				l.rolloutJob(ctx, j, &keys[j.key], &locks[j.key])
			}
		})
	}
	var side sync.WaitGroup
	per := (len(plan.Keys) + len(RolloutStages) - 1) / len(RolloutStages)
	next := 0
	for s, st := range RolloutStages {
		sr := RolloutStageResult{RolloutStage: st}
		for _, p := range plan.Principals {
			if st.Mode == registry.RolloutEnforce && (registry.Rollout{Operation: payments.OperationCreate, Percent: st.Percent}).Enforces(p.Identity) {
				sr.TenantsEnforced++
			}
		}
		if s > 0 {
			side.Wait() // a restart in progress ends before the next change
			committed, err := sw.set(ctx, st)
			if err != nil {
				res.Problems = append(res.Problems, err.Error())
				say("%v", err)
				break
			}
			if st.Mode == registry.RolloutEnforce && res.Enforced.IsZero() {
				res.Enforced = committed
			}
			say("stage %d: %v (%d of %d tenants enforced)", s, st, sr.TenantsEnforced, len(plan.Principals))
		} else {
			say("stage 0: %v", st)
		}
		took, err := probes.await(ctx, probeClient, f, plan.Run, st)
		sr.EffectSeconds = took.Seconds()
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
			say("%v", err)
			break
		}
		say("stage %d in effect on every instance after %v", s, took.Round(time.Millisecond))
		var list []rolloutJob
		for i := range next {
			list = append(list, rolloutJob{key: i, retry: true, stage: s})
		}
		sr.Retried = next
		for i := next; i < min(next+per, len(plan.Keys)); i++ {
			keys[i].Stage = s
			list = append(list, rolloutJob{key: i, stage: s})
			sr.NewKeys++
		}
		next += sr.NewKeys
		rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		for n, j := range list {
			if s == rolloutCrashStage && n == len(list)/2 {
				sr.Crash = true
				side.Go(func() {
					say("killing instance 0 with SIGKILL")
					if err := f.crash(ctx, 0, nil); err != nil {
						say("%v", err)
						return
					}
					say("instance 0 restarted on %s", f.instances[0].url)
				})
			}
			select {
			case jobs <- j:
			case <-ctx.Done():
			}
		}
		res.Stages = append(res.Stages, sr)
		if ctx.Err() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	side.Wait()
	res.Elapsed = time.Since(start)
	stopProgress()
	res.Keys = keys
	res.Requests = l.sent.Load()
	l.mu.Lock()
	res.Resends = l.resends
	l.mu.Unlock()
	res.Latency = snapshot(l.latency)
	return res
}

// rolloutJob runs one job: a new key's Retries requests at once, then
// its different payload; or one request of an earlier key, the
// payload written as retry variant "stage".
func (l *loader) rolloutJob(ctx context.Context, j rolloutJob, rk *RolloutKey, mu *sync.Mutex) {
	k := l.plan.Keys[j.key]
	if j.retry {
		a, ok, note := l.rolloutSend(ctx, k, rk, mu, k.Index%len(l.targets), k.Body(k.Index+1))
		l.rolloutRecord(rk, mu, a, ok, note, j.stage, false)
		return
	}
	var wg sync.WaitGroup
	for r := range l.plan.Retries {
		wg.Go(func() {
			a, ok, note := l.rolloutSend(ctx, k, rk, mu, (k.Index+r)%len(l.targets), k.Body(r))
			l.rolloutRecord(rk, mu, a, ok, note, j.stage, false)
		})
	}
	wg.Wait()
	if k.Conflict && ctx.Err() == nil {
		a, ok, note := l.rolloutSend(ctx, k, rk, mu, (k.Index+l.plan.Retries)%len(l.targets), k.ConflictBody())
		l.rolloutRecord(rk, mu, a, ok, note, j.stage, true)
	}
}

// rolloutRecord adds one request's outcome to the key's result.
func (l *loader) rolloutRecord(rk *RolloutKey, mu *sync.Mutex, a RolloutAnswer, ok bool, note string, stage int, conflict bool) {
	mu.Lock()
	defer mu.Unlock()
	a.Conflict, a.Stage = conflict, stage
	switch {
	case !ok:
		rk.Unanswered++
	case conflict && (a.terminal() || a.Code == idem.CodePayloadConflict):
		// Judged by VerifyRollout: before the operation was enforced a
		// different payload may execute as without idempotency.
		rk.Answers = append(rk.Answers, a)
	case !conflict && a.terminal():
		rk.Answers = append(rk.Answers, a)
	default:
		rk.Unexpected = append(rk.Unexpected, note)
	}
}

// rolloutSend sends one request, starting at target t, and re-sends it
// after 409 IN_PROGRESS, 503, 429 or a transport error (to the next
// target) until another answer comes or Config.KeyTimeout passes; every
// attempt's time goes into rk.Sends.
func (l *loader) rolloutSend(ctx context.Context, k Key, rk *RolloutKey, mu *sync.Mutex, t int, body string) (RolloutAnswer, bool, string) {
	deadline := time.Now().Add(l.cfg.KeyTimeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		url := l.targets[t].URL()
		if url == "" {
			t = (t + 1) % len(l.targets)
			sleep(ctx, time.Millisecond)
			continue
		}
		sent := time.Now()
		mu.Lock()
		rk.Sends = append(rk.Sends, sent)
		mu.Unlock()
		a, note, retryAfter, err := l.exchange(ctx, url, k, body)
		if err != nil {
			l.resend("connection")
			t = (t + 1) % len(l.targets)
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		switch a.Code {
		case idem.CodeInProgress, idem.CodeStoreUnavailable, idem.CodeDraining, idem.CodeWriterFenced, idem.CodeKeyLimit:
			l.resend(string(a.Code))
			sleep(ctx, retryAfter)
			continue
		}
		return RolloutAnswer{Answer: a, Sent: sent}, true, note
	}
	return RolloutAnswer{}, false, ""
}
