package registry

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
)

// tenantDomain separates TenantHash from every other SHA-256 of idem.
const tenantDomain = "idem.tenant.v1\x00"

// TenantHash is what a record stores of its tenant (Claim.Tenant): the
// SHA-256 of "idem.tenant.v1", a NUL byte and the tenant's bytes. The
// plain tenant is never stored, so any bytes a caller presents — NUL,
// invalid UTF-8, megabytes — become 32 bytes the database accepts; the
// empty tenant has a hash too (it is not "unattributed", which only
// records made before attribution are).
func TenantHash(tenant string) [32]byte {
	h := sha256.New()
	h.Write([]byte(tenantDomain))
	h.Write([]byte(tenant))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// ErrTenantMoved: the registry refuses writes to the records of this
// tenant because it was fenced (TenantMover.FenceTenant): the tenant is
// moving, or moved, to another registry. Nothing was written; reads still
// work. idemhttp answers it 503 TENANT_MOVED with Retry-After: once the
// shard map names the tenant's new registry, a retry lands there.
var ErrTenantMoved = errors.New("registry: tenant moved to another registry")

// TenantCounts counts a tenant's rows in one registry. Which fields are
// set depends on the call that returns it (TenantMover).
type TenantCounts struct {
	// Records are the tenant's records, tombstones included.
	Records int64
	// InFlight are its RESERVED or EXECUTING records whose lease has not
	// expired (TenantInFlight) — an execution may still record an outcome.
	InFlight int64
	// Unknown are its UNKNOWN records, awaiting reconciliation.
	Unknown int64
	// Tombstones are its retired records.
	Tombstones int64
	// Effects are the effect attempts of its records.
	Effects int64
	// Outbox are the outbox messages of its records, whatever their
	// delivery state.
	Outbox int64
	// Unattributed are the registry's records with no tenant (made
	// before attribution): whose they are is not known, so a move
	// cannot take them; TenantInFlight counts them in the whole registry.
	Unattributed int64
}

// TenantMover is what a tenant move between two registries needs: the
// fence and counts of TenantFencer, and the copy of TenantCopier. Every
// driver implements it; methods are safe for concurrent use and ctx
// governs the call.
//
// A move runs: drain the tenant (new keys refused, replays served), wait
// until TenantInFlight reports no InFlight, FenceTenant on the old
// registry, ExportTenant there and ImportTenant on the new one, switch
// the shard map, undrain (docs/shards-move.md).
type TenantMover interface {
	TenantFencer
	TenantCopier
}

// TenantFencer fences a tenant's records and counts them.
type TenantFencer interface {
	// TenantInFlight counts the tenant's records RESERVED or EXECUTING
	// whose lease has not expired (InFlight), its UNKNOWN ones (Unknown),
	// all of its records (Records), and the unattributed records of the
	// whole registry (Unattributed).
	TenantInFlight(ctx context.Context, tenant string) (TenantCounts, error)
	// FenceTenant makes the registry refuse every write that could change
	// an outcome of the tenant from now on, in the database itself: a new
	// Reserve/ExecuteOnce of a scope of that tenant, Complete, TakeOver,
	// MarkUnknown, Reconcile, ExtendLease and effect writes of its
	// records all get ErrTenantMoved, and nothing of theirs commits. Reads
	// (Get, GetByID, replays) still work, and retention (retiring,
	// deleting tombstones, re-sealing) goes on. It returns only once no
	// write of the tenant that ran before the fence can still commit (an
	// open in-transaction claim, which no count of records in flight
	// sees): from then on nothing of the tenant changes, so an export
	// misses nothing. movedTo names the destination, for operators.
	// Idempotent (a second call updates movedTo): call it again when ctx
	// ended its wait.
	FenceTenant(ctx context.Context, tenant, movedTo string) error
	// UnfenceTenant removes the fence (a move rolled back before the map
	// switched). Idempotent.
	UnfenceTenant(ctx context.Context, tenant string) error
}

// TenantCopier copies a fenced tenant's rows from one registry to another.
type TenantCopier interface {
	// ExportTenant writes every row the registry holds for the tenant —
	// records (responses as stored: sealed bodies stay sealed, digests
	// kept; tombstones), effects, lookups, reconciliations, pending
	// settlements, audit entries about its operations and outbox
	// messages (pending, published, dead) — to w
	// in a versioned, self-checking stream (tenantstream.go). The tenant
	// must be fenced, else it returns an error and writes nothing.
	ExportTenant(ctx context.Context, tenant string, w io.Writer) (TenantCounts, error)
	// ImportTenant inserts what ExportTenant wrote, in one transaction: a
	// record whose scope already exists with the same content is skipped
	// (a re-run is harmless), one with different content is an error and
	// nothing is imported, nor is anything when the stream fails its
	// checks. Works across drivers.
	ImportTenant(ctx context.Context, r io.Reader) (TenantCounts, error)
}
