package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/harness/gate"
	"github.com/jackc/pgx/v5"
)

// refusalProbe asks every instance's /readyz every probeEvery until
// stopped and keeps the first and last answer that was not 200.
type refusalProbe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	first, last time.Time
	n           int
}

func startRefusalProbe(ctx context.Context, urls []string) *refusalProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &refusalProbe{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			for _, u := range urls {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/readyz", nil)
				if err != nil {
					return
				}
				resp, err := client.Do(req)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					now := time.Now()
					p.mu.Lock()
					if p.first.IsZero() {
						p.first = now
					}
					p.last, p.n = now, p.n+1
					p.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(probeEvery): // polling interval
			}
		}
	}()
	return p
}

// stop ends the probe and waits for it; safe to call twice.
func (p *refusalProbe) stop() { p.cancel(); <-p.done }

func (p *refusalProbe) window() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last.Sub(p.first)
}

func (p *refusalProbe) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// writableProbe opens a read-write session on one node every probeEvery
// until stopped and keeps the intervals (ms after since) in which it
// could: a killed primary's keeper restarting it as a primary.
type writableProbe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	ivs  [][2]float64
	open bool
}

func startWritableProbe(ctx context.Context, dsn string, since time.Time) *writableProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &writableProbe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			c, err := pgx.Connect(ctx, dsn)
			at := ms(time.Since(since))
			if err == nil {
				c.Close(context.Background())
			}
			p.mu.Lock()
			switch {
			case err == nil && p.open:
				p.ivs[len(p.ivs)-1][1] = at
			case err == nil:
				p.ivs, p.open = append(p.ivs, [2]float64{at, at}), true
			default:
				p.open = false
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(probeEvery): // polling interval
			}
		}
	}()
	return p
}

// stop ends the probe and waits for it; safe to call twice.
func (p *writableProbe) stop() { p.cancel(); <-p.done }

func (p *writableProbe) intervals() [][2]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][2]float64(nil), p.ivs...)
}

// reExecutedAnswers returns, for each key whose terminal answers name
// two or more operations, the instants of its answers (ms after since)
// by operation ID.
func reExecutedAnswers(res gate.LoadResult, since time.Time) map[string][]float64 {
	out := map[string][]float64{}
	for i, k := range res.Keys {
		ops := map[string][]float64{}
		for _, a := range k.Answers {
			if a.OperationID != "" {
				ops[a.OperationID] = append(ops[a.OperationID], ms(a.At.Sub(since)))
			}
		}
		if len(ops) < 2 {
			continue
		}
		for op, at := range ops {
			out[fmt.Sprintf("key %d %s", i, op)] = at
		}
	}
	return out
}
