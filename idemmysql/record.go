package idemmysql

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanRecord reads one record in the column order of queries.sql, opens
// a sealed response body with the Store's Sealer (an error wrapping
// registry.ErrUnreadable if it cannot) and verifies the response against
// the stored digest. It returns the scan
// error untranslated (sql.ErrNoRows included), and an error wrapping
// idem.ErrDigestMismatch when the stored response does not match.
func (s *Store) scanRecord(row scanner) (registry.Record, error) {
	var (
		rec                            registry.Record
		scope, owner, fingerprint      []byte
		state                          string
		leaseUntil, expiresAt, created int64
		updated                        int64
		status                         sql.NullInt64
		mediaType, location, etag      sql.NullString
		body, digest                   []byte
		bodyKey                        sql.NullString
		retired, tombstoneUntil, ttl   sql.NullInt64
		tenant                         []byte
	)
	err := row.Scan(&scope, &rec.OperationID, &rec.Operation, &owner, &fingerprint, &rec.Contract,
		&state, &rec.OwnerGen, &rec.WriterEpoch, &leaseUntil, &expiresAt, &created, &updated,
		&status, &mediaType, &location, &etag, &body, &digest, &bodyKey,
		&retired, &tombstoneUntil, &ttl, &tenant)
	if err != nil {
		return registry.Record{}, err
	}
	scanTombstone(&rec, retired, tombstoneUntil, ttl)
	if tenant != nil { // NULL (unattributed) leaves it zero
		if err := copyHash(rec.TenantHash[:], tenant, "tenant_hash"); err != nil {
			return registry.Record{}, err
		}
	}
	if err := copyHash(rec.Scope[:], scope, "scope"); err != nil {
		return registry.Record{}, err
	}
	if err := copyHash(rec.Owner[:], owner, "owner"); err != nil {
		return registry.Record{}, err
	}
	if err := copyHash(rec.Fingerprint[:], fingerprint, "fingerprint"); err != nil {
		return registry.Record{}, err
	}
	rec.State = idem.State(state)
	rec.LeaseUntil = fromMicros(leaseUntil)
	rec.ExpiresAt = fromMicros(expiresAt)
	rec.CreatedAt = fromMicros(created)
	rec.UpdatedAt = fromMicros(updated)
	if status.Valid {
		body, err := registry.OpenBody(s.sealer, nullable(bodyKey), body, registry.ResponseOf(rec.Scope, rec.OperationID, digest))
		if err != nil {
			return registry.Record{}, fmt.Errorf("operation %s: %w", rec.OperationID, err)
		}
		resp := idem.Response{
			Status:    int(status.Int64),
			MediaType: mediaType.String,
			Location:  location.String,
			ETag:      etag.String,
			Body:      body,
		}
		if resp.Body == nil { // the driver returns an empty BLOB as nil
			resp.Body = []byte{}
		}
		if err := resp.Verify(digest); err != nil {
			return registry.Record{}, fmt.Errorf("operation %s: %w", rec.OperationID, err)
		}
		rec.Response = &resp
	}
	return rec, nil
}

// copyHash copies a 32-byte column into dst.
func copyHash(dst, src []byte, column string) error {
	if len(src) != len(dst) {
		return fmt.Errorf("column %s holds %d bytes, want %d", column, len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// fromMicros converts a stored time to a UTC time.Time.
func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}

// nullable returns a NULL-able text column as a pointer: nil for NULL.
func nullable(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// tombstoneTTL is the tombstone_ttl argument of a claim: NULL (keep the
// tombstone forever) or a positive number of microseconds.
func tombstoneTTL(c registry.Claim) any {
	ttl := c.TombstoneTTLOrForever()
	if ttl == 0 {
		return nil
	}
	return max(ttl.Microseconds(), 1)
}

// tenantHash is the tenant_hash argument of a claim: registry.TenantHash
// of c.Tenant (migration 006).
func tenantHash(c registry.Claim) []byte {
	h := registry.TenantHash(c.Tenant)
	return h[:]
}

// scanTombstone fills the retention fields of rec from the columns
// retired_at, tombstone_until and tombstone_ttl.
func scanTombstone(rec *registry.Record, retired, tombstoneUntil, ttl sql.NullInt64) {
	if retired.Valid {
		rec.RetiredAt = fromMicros(retired.Int64)
	}
	if tombstoneUntil.Valid {
		rec.TombstoneUntil = fromMicros(tombstoneUntil.Int64)
	}
	if ttl.Valid {
		rec.TombstoneTTL = time.Duration(ttl.Int64) * time.Microsecond
	}
}
