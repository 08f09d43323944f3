package bench

import "time"

// Queueing is one cell's account by Little's law (L = λW) and by the
// service demand each request put on the CPUs. Demands and waits are per
// answered request; "bench" is the bench process (servers and load
// generator together), "db" PostgreSQL's processes (zero where PostgreSQL
// is not on this machine).
type Queueing struct {
	// L is the time-average number of requests in the system (Σ latency ÷
	// elapsed), Lambda the answered requests per second and WMs the mean
	// latency in milliseconds: L = Lambda × WMs / 1000.
	L      float64 `json:"l"`
	Lambda float64 `json:"lambda_per_s"`
	WMs    float64 `json:"w_ms"`
	// BenchCPUMs and DBCPUMs are the CPU milliseconds per request (the
	// service demand); BenchWaitMs and DBWaitMs the milliseconds per
	// request that their threads spent runnable, waiting in a run queue
	// for a CPU.
	BenchCPUMs  float64 `json:"bench_cpu_ms"`
	DBCPUMs     float64 `json:"db_cpu_ms"`
	BenchWaitMs float64 `json:"bench_wait_ms"`
	DBWaitMs    float64 `json:"db_wait_ms"`
	// Utilisation is Lambda × demand ÷ CPUs of the busier CPU set: both
	// demands over every CPU unpinned, each over its own CPUs pinned.
	Utilisation float64 `json:"utilisation"`
	// MachineBusy is the share of all the machine's CPU time that was
	// busy meanwhile, everyone's work included (/proc/stat): what the
	// run's own Utilisation leaves to, or takes from, other work.
	MachineBusy float64 `json:"machine_busy"`
	// PoolWaitMs is the mean wait of an acquisition of the store's main
	// PostgreSQL pool, and PoolWaiting the mean number of requests waiting
	// for a connection (acquisitions per second × PoolWaitMs: Little's
	// law on the pool's queue); zero where not measured.
	PoolWaitMs  float64 `json:"pool_wait_ms"`
	PoolWaiting float64 `json:"pool_waiting"`
	// BoundMs is, for a closed loop of N clients, the least mean latency
	// the CPUs allow: N × demand ÷ CPUs of that same set (a closed loop
	// with no think time cannot complete more than CPUs ÷ demand requests
	// per second, and W = N ÷ λ). Zero for open loops, whose N is not fixed.
	BoundMs float64 `json:"bound_ms"`
}

// littlesLaw works out a cell's Queueing from n answered requests in
// elapsed, their summed latency sojourn, the CPU use meanwhile, the CPUs
// (ncpu, or the pinned sets of p if it is not nil) and, for a closed
// loop, its clients (0 for an open loop).
func littlesLaw(n int64, elapsed, sojourn time.Duration, use cpuUse, ncpu int, p *Pinning, clients int) Queueing {
	if n <= 0 || elapsed <= 0 {
		return Queueing{}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	q := Queueing{
		L:          sojourn.Seconds() / elapsed.Seconds(),
		Lambda:     float64(n) / elapsed.Seconds(),
		WMs:        ms(sojourn),
		BenchCPUMs: ms(use.self.cpu), DBCPUMs: ms(use.db.cpu),
		BenchWaitMs: ms(use.self.wait), DBWaitMs: ms(use.db.wait),
	}
	// perCPU is the demand per request on the busiest CPU set, in ms.
	perCPU := (q.BenchCPUMs + q.DBCPUMs) / float64(ncpu)
	if p != nil {
		perCPU = max(q.BenchCPUMs/float64(len(p.Bench)), q.DBCPUMs/float64(len(p.DB)))
	}
	q.Utilisation = q.Lambda * perCPU / 1000
	q.MachineBusy = use.machineBusy()
	q.BoundMs = float64(clients) * perCPU
	return q
}
