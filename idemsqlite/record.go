package idemsqlite

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
	// The scan targets live in one struct: Scan takes their addresses as
	// interfaces, which moves them to the heap, and one struct is one
	// allocation rather than one per column.
	var v struct {
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
	}
	err := row.Scan(&v.scope, &v.rec.OperationID, &v.rec.Operation, &v.owner, &v.fingerprint, &v.rec.Contract,
		&v.state, &v.rec.OwnerGen, &v.rec.WriterEpoch, &v.leaseUntil, &v.expiresAt, &v.created, &v.updated,
		&v.status, &v.mediaType, &v.location, &v.etag, &v.body, &v.digest, &v.bodyKey,
		&v.retired, &v.tombstoneUntil, &v.ttl, &v.tenant)
	if err != nil {
		return registry.Record{}, err
	}
	rec := v.rec
	scope, owner, fingerprint, state := v.scope, v.owner, v.fingerprint, v.state
	leaseUntil, expiresAt, created, updated := v.leaseUntil, v.expiresAt, v.created, v.updated
	status, mediaType, location, etag := v.status, v.mediaType, v.location, v.etag
	body, digest, bodyKey, tenant := v.body, v.digest, v.bodyKey, v.tenant
	retired, tombstoneUntil, ttl := v.retired, v.tombstoneUntil, v.ttl
	scanTombstone(&rec, retired, tombstoneUntil, ttl)
	if err := copyHash(rec.Scope[:], scope, "scope"); err != nil {
		return registry.Record{}, err
	}
	if err := copyHash(rec.Owner[:], owner, "owner"); err != nil {
		return registry.Record{}, err
	}
	if err := copyHash(rec.Fingerprint[:], fingerprint, "fingerprint"); err != nil {
		return registry.Record{}, err
	}
	if tenant != nil { // NULL: unattributed, left zero
		if err := copyHash(rec.TenantHash[:], tenant, "tenant_hash"); err != nil {
			return registry.Record{}, err
		}
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

// tenantArg is the tenant_hash argument of a claim's insert.
func tenantArg(c registry.Claim) []byte {
	h := registry.TenantHash(c.Tenant)
	return h[:]
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
