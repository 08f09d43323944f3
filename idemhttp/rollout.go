package idemhttp

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/registry"
)

// Rollouts follows the registry's rollout rows (registry.Rollout) for
// one or more Middlewares — one Rollouts per service is enough: with
// Middleware.Rollouts set, each request is served in the mode its
// operation's row gives its caller (registry.Rollout.ModeFor), and what
// enforce answered or, in shadow, would have answered is counted here
// per operation, tenant, mode and verdict.
//
// Rows are cached per operation and read again at most once per Refresh,
// lazily, by the request that finds its row stale — no goroutine; while
// it reads, concurrent requests use the row in hand. A failed read with
// no row in hand fails the request closed (503 STORE_UNAVAILABLE); with
// one, the row in hand is used and the next request retries. So an
// operator's change reaches every instance within about Refresh.
//
// The verdict counts are kept in memory and added to the registry's
// totals (registry.RolloutStore.AddVerdicts) at each refresh and by
// Flush; a failed write keeps them for the next. A crash loses at most
// one refresh's counts: they are statistics, not records. At most
// 10000 distinct (operation, tenant, mode, verdict) keys are kept
// pending; the counts of further ones are dropped (see count).
//
// Set the exported fields before the first request and do not change
// them; the zero value of the rest is ready. Safe for concurrent use.
type Rollouts struct {
	// Store is the registry. Required.
	Store registry.RolloutStore
	// Refresh is the longest a read row is used; 0 or less means
	// DefaultAdmitRefresh.
	Refresh time.Duration
	// Logger receives failed reads and flushes; nil means slog.Default().
	Logger *slog.Logger

	ops     sync.Map   // operation → *rolloutEntry
	countMu sync.Mutex // guards pending
	pending map[verdictKey]int64
	dropped int64      // verdicts not counted since the last Flush: the bound
	flushMu sync.Mutex // one Flush at a time
	// maxPending bounds the distinct keys in pending; 0 means
	// maxPendingVerdicts. Tests only.
	maxPending int
}

// rolloutEntry is one operation's cached row.
type rolloutEntry struct {
	mu   sync.Mutex // held by the request that reads the row
	snap atomic.Pointer[rolloutSnap]
	// enforcedAt is the EnforcedAt MarkEnforced returned in this
	// process, once it returned one (never cleared in the registry).
	enforcedAt atomic.Pointer[time.Time]
}

// rolloutSnap is a row and when it was read.
type rolloutSnap struct {
	row registry.Rollout
	at  time.Time
}

type verdictKey struct{ operation, tenant, mode, verdict string }

func (r *Rollouts) log() *slog.Logger { return cmp.Or(r.Logger, slog.Default()) }

func (r *Rollouts) refresh() time.Duration { return cmp.Or(max(r.Refresh, 0), DefaultAdmitRefresh) }

func (r *Rollouts) entry(operation string) *rolloutEntry {
	if e, ok := r.ops.Load(operation); ok {
		return e.(*rolloutEntry)
	}
	e, _ := r.ops.LoadOrStore(operation, &rolloutEntry{})
	return e.(*rolloutEntry)
}

// Rollout returns the operation's cached row, reading it first if the
// cache is older than Refresh (or empty); see Rollouts. A read also
// flushes the pending verdict counts (a failure is logged, the counts
// kept). ctx governs the reads and the flush.
func (r *Rollouts) Rollout(ctx context.Context, operation string) (registry.Rollout, error) {
	e := r.entry(operation)
	snap := e.snap.Load()
	if r.fresh(snap) {
		return snap.row, nil
	}
	if snap != nil {
		if !e.mu.TryLock() {
			return snap.row, nil // another request is reading it
		}
	} else {
		e.mu.Lock() // nothing to fall back on: wait for the first read
	}
	defer e.mu.Unlock()
	if snap = e.snap.Load(); r.fresh(snap) {
		return snap.row, nil
	}
	row, err := r.Store.Rollout(ctx, operation)
	if err != nil {
		if snap != nil {
			r.log().Warn("reading the rollout failed; the row in hand is used", "operation", operation, "err", err)
			return snap.row, nil
		}
		return registry.Rollout{}, fmt.Errorf("idemhttp: reading the rollout of %s: %w", operation, err)
	}
	e.snap.Store(&rolloutSnap{row: row, at: time.Now()})
	if err := r.Flush(ctx); err != nil {
		r.log().Warn("writing the verdict counts failed; they are kept for the next refresh", "err", err)
	}
	return row, nil
}

// fresh reports whether snap may still be used.
func (r *Rollouts) fresh(snap *rolloutSnap) bool {
	return snap != nil && time.Since(snap.at) < r.refresh()
}

// latest reads the operation's row from the store, bypassing the cache
// (which it updates): what shadow decides on before it answers from a
// record, since only a committed EnforcedAt says a client may have been
// answered under enforce.
func (r *Rollouts) latest(ctx context.Context, operation string) (registry.Rollout, error) {
	row, err := r.Store.Rollout(ctx, operation)
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idemhttp: reading the rollout of %s: %w", operation, err)
	}
	r.entry(operation).snap.Store(&rolloutSnap{row: row, at: time.Now()})
	return row, nil
}

// markEnforced makes sure the registry records that operation has been
// enforced before this process first accepts a request of it under
// enforce: row is the row the request is served under. It calls
// MarkEnforced once per process, when row has no EnforcedAt, and
// returns the row to serve the request under: row itself, or the row
// MarkEnforced returned. That one may still have no EnforcedAt — an
// operator set the operation off without force after row was read, and
// MarkEnforced leaves such a row as it is — and then the request must
// not be accepted under enforce: the caller serves it in the mode the
// returned row gives. An error must refuse the request (fail closed).
func (r *Rollouts) markEnforced(ctx context.Context, operation string, row registry.Rollout) (registry.Rollout, error) {
	e := r.entry(operation)
	if !row.EnforcedAt.IsZero() {
		return row, nil
	}
	if at := e.enforcedAt.Load(); at != nil {
		// row was read before this process marked the operation (a
		// concurrent first request, or a refresh that raced the mark):
		// the registry holds EnforcedAt, which is never cleared.
		row.EnforcedAt = *at
		return row, nil
	}
	now, err := r.Store.MarkEnforced(ctx, operation)
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idemhttp: marking %s enforced: %w", operation, err)
	}
	e.snap.Store(&rolloutSnap{row: now, at: time.Now()})
	if !now.EnforcedAt.IsZero() {
		at := now.EnforcedAt // no need to ask again
		e.enforcedAt.Store(&at)
	}
	return now, nil
}

// maxPendingVerdicts is the default bound of the distinct (operation,
// tenant, mode, verdict) keys kept pending between two flushes.
const maxPendingVerdicts = 10000

// count adds one verdict to the pending counts, under a tenant the
// registry can store (storableTenant). A new key beyond the bound of
// distinct pending keys is dropped (and the drop logged by the next
// Flush): the counts are statistics, and the memory they take must not
// grow with the tenants a flood of callers presents, nor while the
// registry is unreachable.
func (r *Rollouts) count(operation, tenant, mode, verdict string) {
	k := verdictKey{operation, storableTenant(tenant), mode, verdict}
	r.countMu.Lock()
	defer r.countMu.Unlock()
	if r.pending == nil {
		r.pending = map[verdictKey]int64{}
	}
	if _, ok := r.pending[k]; !ok && len(r.pending) >= r.pendingBound() {
		r.dropped++
		return
	}
	r.pending[k]++
}

func (r *Rollouts) pendingBound() int { return cmp.Or(max(r.maxPending, 0), maxPendingVerdicts) }

// storableTenant returns tenant as the registry can store it in a
// verdict count (registry.VerdictCount.Validate): invalid UTF-8 and NUL
// bytes replaced by "?", cut to registry.MaxAuditDetail bytes on a rune
// boundary. A tenant already storable is returned as it is.
func storableTenant(tenant string) string {
	if len(tenant) <= registry.MaxAuditDetail && utf8.ValidString(tenant) && !strings.ContainsRune(tenant, 0) {
		return tenant
	}
	s := strings.ReplaceAll(strings.ToValidUTF8(tenant, "?"), "\x00", "?")
	n := min(len(s), registry.MaxAuditDetail)
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Flush adds the pending verdict counts to the registry's totals in one
// write. If it fails they are kept (within the bound of pending keys)
// and added by the next Flush (or refresh); a count the registry would
// refuse (registry.VerdictCount.Validate: an operation name too long) is
// dropped and logged rather than failing every later Flush. Serve calls
// it at shutdown. ctx governs the write.
func (r *Rollouts) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.countMu.Lock()
	pending, dropped := r.pending, r.dropped
	r.pending, r.dropped = nil, 0
	r.countMu.Unlock()
	if dropped > 0 {
		r.log().Warn("verdict counts dropped: too many distinct tenants pending", "dropped", dropped, "bound", r.pendingBound())
	}
	if len(pending) == 0 {
		return nil
	}
	counts := make([]registry.VerdictCount, 0, len(pending))
	for k, n := range pending {
		v := registry.VerdictCount{Operation: k.operation, Tenant: k.tenant, Mode: k.mode, Verdict: k.verdict, Count: n}
		if err := v.Validate(); err != nil {
			r.log().Warn("verdict count dropped: the registry cannot store it", "operation", k.operation, "err", err)
			delete(pending, k)
			continue
		}
		counts = append(counts, v)
	}
	if len(counts) == 0 {
		return nil
	}
	err := r.Store.AddVerdicts(ctx, counts)
	if err == nil {
		return nil
	}
	r.countMu.Lock()
	defer r.countMu.Unlock()
	if r.pending == nil {
		r.pending = map[verdictKey]int64{}
	}
	for k, n := range pending {
		if _, ok := r.pending[k]; !ok && len(r.pending) >= r.pendingBound() {
			r.dropped += n
			continue
		}
		r.pending[k] += n
	}
	return fmt.Errorf("idemhttp: writing the verdict counts: %w", err)
}
