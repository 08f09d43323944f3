package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// Defaults of Config fields left at zero.
const (
	DefaultRequests        = 100_000
	DefaultRetries         = 10
	DefaultInstances       = 2
	DefaultConcurrency     = 10
	DefaultPrincipals      = 4
	DefaultLatencyBudget   = 200 * time.Millisecond
	DefaultReservationPart = 0.05 // of the latency budget
	DefaultRecoverySLO     = time.Minute
	DefaultWait            = 5 * time.Second
	DefaultKeyTimeout      = 2 * time.Minute
	DefaultLease           = 5 * time.Second
	DefaultRecoverInterval = time.Second
	// DefaultConflictRate is the share of keys that also get one request
	// with a different payload, sent after the key's retries were
	// answered; the contract must refuse it with 422 PAYLOAD_CONFLICT.
	DefaultConflictRate = 0.05
	// DefaultRefusalRate is the share of keys whose amount is above the
	// service's limit: a deterministic 422 AMOUNT_LIMIT, stored as
	// REJECTED and replayed, with no payment.
	DefaultRefusalRate = 0.01
	// DefaultUnknownSLO is how long a key of the transfers workload may go
	// without a definite answer after its first request.
	DefaultUnknownSLO = 30 * time.Second
	// DefaultProviderTimeout is the --provider-timeout the transfers
	// workload passes to every instance (when "idem serve" has the flag).
	DefaultProviderTimeout = time.Second
	// DefaultFaultInterval is how long each phase of the transfers
	// workload's fault schedule lasts (a hang phase lasts at least the
	// provider timeout and a half, so that held calls time out).
	DefaultFaultInterval = 500 * time.Millisecond
	// DefaultFaultKeys is how many requests with a new key each fault
	// phase of the transfers workload hits at most.
	DefaultFaultKeys = 2
	// DefaultPruneInterval is the --prune-interval of the instances of a
	// run with Config.Retention set.
	DefaultPruneInterval = 100 * time.Millisecond
)

// The workloads.
const (
	// WorkloadPayments drives POST /v1/payments: effects in the database.
	WorkloadPayments = "payments"
	// WorkloadTransfers drives POST /v1/transfers through an "idem
	// provider" the gate starts and injects faults into: effects outside
	// the database, unknown outcomes and their settlement.
	WorkloadTransfers = "transfers"
)

// MaxUnknownRatio is the gate on UNKNOWN operations past the recovery SLO:
// strictly below 0.01 % of the operations.
const MaxUnknownRatio = 0.0001

// Config configures a gate run. DSN is required; every other zero value
// means the default documented on the field.
type Config struct {
	// DSN is the database every instance serves from: postgres://…,
	// mysql://… or sqlite:PATH. The gate also opens it to verify.
	DSN string
	// Bin is the idem binary to start instances from. Required by Run.
	Bin string
	// Instances is the number of "idem serve" processes; 0 means
	// DefaultInstances.
	Instances int
	// Requests is the number of planned requests: Requests / Retries keys,
	// each sent Retries times at once. Re-sends after 409 IN_PROGRESS,
	// 503 or a dropped connection and the conflicting requests come on top
	// and are counted in Report.Requests. 0 means DefaultRequests.
	Requests int
	// Retries is R, the concurrent requests per key; 0 means
	// DefaultRetries.
	Retries int
	// Concurrency bounds the requests in flight at once (rounded down to a
	// multiple of Retries, at least Retries); 0 means DefaultConcurrency,
	// one key's retries at a time. More keys at once raise the throughput
	// until the machine is saturated; on a 2-core machine shared by the
	// gate, the instances and the database that happens at about 40, and
	// the reservation p99 then measures the CPU run queue (docs/gate.md).
	Concurrency int
	// Principals is the number of authenticated principals keys are spread
	// over (two tenants); 0 means DefaultPrincipals.
	Principals int
	// ConflictRate and RefusalRate: see DefaultConflictRate and
	// DefaultRefusalRate. Negative means 0.
	ConflictRate, RefusalRate float64
	// Workload is WorkloadPayments or WorkloadTransfers; "" means
	// WorkloadPayments.
	Workload string
	// UnknownSLO (transfers) is how long a key may stay without a definite
	// answer — UNKNOWN, or never answered — after its first request; the
	// gate keeps re-sending a key until it settles or this passes. 0 means
	// DefaultUnknownSLO.
	UnknownSLO time.Duration
	// ProviderTimeout (transfers) is passed to every instance as
	// --provider-timeout, if "idem serve" has that flag (otherwise its own
	// default applies and the report says so). 0 means
	// DefaultProviderTimeout.
	ProviderTimeout time.Duration
	// FaultInterval (transfers) is the length of each phase of the fault
	// schedule; 0 means DefaultFaultInterval.
	FaultInterval time.Duration
	// FaultKeys (transfers) bounds the requests with a new key one fault
	// phase hits (the provider's counted modes); 0 means
	// DefaultFaultKeys, negative no bound (the mode holds for the whole
	// phase).
	FaultKeys int
	// Retention (transfers), if set, is the late-settlement phase
	// (docs/gate.md): every instance runs with --retention Retention,
	// the four retention windows at 0 and --prune-interval
	// PruneInterval, and the fault schedule opens with a provider outage
	// (mode fail, every new key refused with a 503) of Outage, longer
	// than Retention, before the load starts; the outage ends with one
	// decline. Every key that was UNKNOWN for longer than Retention is
	// sent once more after it settled, once a prune pass that began
	// after its settlement finished, and must replay its settled answer
	// (Report.LateSettled). Records retire during such a run, so the
	// replay-digest check of a retired record is limited to its
	// operation ID. 0: no such phase, and the instances prune never.
	Retention time.Duration
	// Outage (with Retention) is the length of the opening outage; 0
	// means twice Retention. It must be longer than Retention and, with
	// Retention, shorter than UnknownSLO.
	Outage time.Duration
	// PruneInterval (with Retention) is the instances' --prune-interval;
	// 0 means DefaultPruneInterval.
	PruneInterval time.Duration
	// Rollout runs the rollout phase instead of the replay storm
	// (docs/gate.md, "The rollout phase"): the payments workload through
	// Instances (at least 2) instances whose rollout of payments.create
	// the gate ramps through RolloutStages in the registry — shadow,
	// enforce 10 %, 50 % (one instance killed with SIGKILL and restarted
	// midway), shadow again, 100 % — with "idem rollout" when Bin has
	// that command, else RolloutStore.SetRollout. The keys are spread
	// over max(Principals, DefaultRolloutTenants) tenants, one principal
	// each; Crash is implied; Resend, Retention and Midway do not apply.
	Rollout bool
	// Crash kills one instance with SIGKILL when half the planned requests
	// were sent and starts it again; the other instances keep serving.
	Crash bool
	// Midway, if set, is called once, in its own goroutine, when half the
	// planned requests were sent (after the Crash injection, if both are
	// set), while the load goes on; the load waits for it before it ends
	// (and before Resend). ctx is Run's. An error it returns becomes a
	// report problem and fails the run (instance_problems). The gate does
	// not restart instances for it: a hook that kills the database tests
	// that the instances recover by themselves. nil: no hook.
	Midway func(ctx context.Context, m Midpoint) error
	// Resend sends every key that got a terminal answer once more after
	// the load (and after Midway returned): its first retry's payload,
	// same key and principal, as a client that retries after a failover.
	// The answer joins the key's answers, so Verify's digest check, and
	// AcknowledgedLost and ReExecuted, judge it. false: no re-send.
	Resend bool
	// LatencyBudget is the endpoint's latency budget; the reservation p99
	// must stay within 5 % of it. 0 means DefaultLatencyBudget.
	LatencyBudget time.Duration
	// RecoverySLO is how long an operation may stay UNKNOWN; 0 means
	// DefaultRecoverySLO.
	RecoverySLO time.Duration
	// Wait is the Prefer: wait each request asks for; 0 means DefaultWait,
	// negative sends none (duplicates then get 409 IN_PROGRESS and are
	// re-sent after Retry-After).
	Wait time.Duration
	// KeyTimeout bounds how long one request keeps being re-sent before
	// its key counts as unanswered; 0 means DefaultKeyTimeout.
	KeyTimeout time.Duration
	// Lease and RecoverInterval are passed to every instance (--lease,
	// --recover-interval): short, so that operations of a killed instance
	// are recovered during the run. 0 means DefaultLease and
	// DefaultRecoverInterval.
	Lease, RecoverInterval time.Duration
	// TwoPhase starts every instance with --two-phase: POST /v1/payments
	// reserves its key (committed) and then executes. The default
	// (false) is idem serve's: one database transaction (the payment,
	// its outbox message and the operation record commit together,
	// nothing is reserved first), and a key's concurrent retries that
	// find no record wait for that transaction and replay the winner's
	// response once it committed (docs/gate.md); none gets 409
	// IN_PROGRESS. The transfers workload's transfers are two-phase
	// either way (their effect is outside the database).
	TwoPhase bool
	// EncryptionKeys, if set, is a key ring file (package keyring) passed
	// to every instance as --encryption-keys, so response bodies and
	// effect requests and answers are sealed at rest; the gate reads the
	// registry with it when it verifies. Empty: bodies in plaintext.
	EncryptionKeys string
	// Shards, if set, runs the instances over several registries
	// ("idem serve --shard NAME=DSN", docs/operations.md) instead of DSN:
	// shard name → database. ShardMap sends the plan's tenants
	// ("tenant-0", …) to shards, ShardDefault (required) the others; the
	// instances get the map as a --shard-map file. Each shard is verified
	// with its tenants' keys (Report.Shards), and must hold nothing of
	// the other shards' tenants. The payments workload only, without
	// Rollout or Retention.
	Shards       map[string]string
	ShardDefault string
	ShardMap     map[string]string
	// Moves, if set, moves these tenants between the shards midway
	// through the load with "idem shard move" (moves.go): the instances
	// then read the map from the directory table of ShardDefault, which
	// must be PostgreSQL, and the verification judges each key on its
	// tenant's shard after the moves. MoveCrash kills the first mover
	// with SIGKILL once, after its copy, and resumes it.
	Moves     []TenantMove
	MoveCrash bool
	// Tenants is the number of tenants the principals are spread over
	// (Plan.SpreadTenants); 0 means two. At most Principals.
	Tenants int
	// Seed makes key order and payload variants reproducible; 0 means one
	// derived from the clock (reported).
	Seed int64
	// Progress receives a line a second while the load runs and a line
	// per phase; nil means io.Discard.
	Progress io.Writer

	// pruneLog is where the load reads the instances' prune passes (the
	// database's registry.PruneLog); set by Run for a run with Retention.
	pruneLog registry.PruneLog
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Instances, DefaultInstances)
	def(&c.Requests, DefaultRequests)
	def(&c.Retries, DefaultRetries)
	def(&c.Concurrency, DefaultConcurrency)
	def(&c.Principals, DefaultPrincipals)
	defD(&c.LatencyBudget, DefaultLatencyBudget)
	defD(&c.RecoverySLO, DefaultRecoverySLO)
	defD(&c.Wait, DefaultWait)
	defD(&c.KeyTimeout, DefaultKeyTimeout)
	defD(&c.Lease, DefaultLease)
	defD(&c.RecoverInterval, DefaultRecoverInterval)
	defD(&c.UnknownSLO, DefaultUnknownSLO)
	defD(&c.ProviderTimeout, DefaultProviderTimeout)
	defD(&c.FaultInterval, DefaultFaultInterval)
	def(&c.FaultKeys, DefaultFaultKeys)
	if c.Retention > 0 {
		defD(&c.Outage, 2*c.Retention)
		defD(&c.PruneInterval, DefaultPruneInterval)
	}
	if c.Workload == "" {
		c.Workload = WorkloadPayments
	}
	c.ConflictRate = max(c.ConflictRate, 0)
	c.RefusalRate = max(c.RefusalRate, 0)
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// validate reports a configuration Run cannot use (after withDefaults).
func (c Config) validate() error {
	if err := c.validateMoves(); err != nil {
		return err
	}
	if err := c.validateShards(); err != nil {
		return err
	}
	switch {
	case c.Tenants < 0 || c.Tenants > c.Principals:
		return errors.New("gate: tenants must be between 0 and the principals")
	case idemstore.Kind(c.DSN) == "" && !c.sharded():
		return errors.New("gate: the database must be postgres://…, mysql://… or sqlite:PATH")
	case c.Instances < 1 || c.Retries < 1 || c.Requests < c.Retries || c.Concurrency < 1 || c.Principals < 1:
		return fmt.Errorf("gate: instances, retries, concurrency and principals must be positive and requests at least retries")
	case c.ConflictRate > 1 || c.RefusalRate > 1:
		return errors.New("gate: conflict and refusal rates are fractions between 0 and 1")
	case c.Workload != WorkloadPayments && c.Workload != WorkloadTransfers:
		return fmt.Errorf("gate: unknown workload %q (want %s or %s)", c.Workload, WorkloadPayments, WorkloadTransfers)
	case c.LatencyBudget < 0 || c.RecoverySLO < 0 || c.KeyTimeout < 0 || c.Lease < 0 || c.RecoverInterval < 0 ||
		c.UnknownSLO < 0 || c.ProviderTimeout < 0 || c.FaultInterval < 0 || c.Retention < 0 || c.Outage < 0 || c.PruneInterval < 0:
		return errors.New("gate: durations must not be negative")
	case c.Retention > 0 && !c.transfers():
		return errors.New("gate: a retention (the late-settlement phase) needs the transfers workload")
	case c.Retention > 0 && (c.Outage <= c.Retention || c.Outage+c.Retention >= c.UnknownSLO):
		return fmt.Errorf("gate: the outage (%v) must be longer than the retention (%v), and both together shorter than the unknown SLO (%v)", c.Outage, c.Retention, c.UnknownSLO)
	case c.Retention > 0 && c.Resend:
		return errors.New("gate: a retention retires records during the run; a re-send after the load would find them retired")
	case c.Rollout && (c.transfers() || c.Instances < 2 || c.Resend || c.Retention > 0 || c.Midway != nil):
		return errors.New("gate: the rollout phase needs the payments workload and at least 2 instances, without a re-send, a retention or a midway hook")
	case c.Rollout && c.keys() < len(RolloutStages):
		return fmt.Errorf("gate: the rollout phase needs at least %d keys (requests / retries)", len(RolloutStages))
	case c.Crash && c.Instances < 2:
		return errors.New("gate: crash injection needs at least 2 instances, so retries continue on the others")
	}
	return nil
}

// keys is the number of keys of the run.
func (c Config) keys() int { return c.Requests / c.Retries }

// transfers reports whether the run drives POST /v1/transfers.
func (c Config) transfers() bool { return c.Workload == WorkloadTransfers }

// keyWorkers is how many keys are in flight at once.
func (c Config) keyWorkers() int { return max(1, c.Concurrency/c.Retries) }

// Midpoint is what a Config.Midway hook is given.
type Midpoint struct {
	// URLs are the instances' base URLs ("http://127.0.0.1:PORT") when
	// the hook is called; "" for an instance that is down.
	URLs []string
	// Say writes one progress line ("gate: " and the formatted text).
	Say func(format string, args ...any)
}
