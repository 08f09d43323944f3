package bench

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed *.sql
var sqlFS embed.FS

var queries = sqlfile.MustLoad(sqlFS, "*.sql")

// createFloorTable creates the floor variant's table (floor.sql) in the
// run's fresh database, with the statement of kind ("postgres", "mysql"
// or "sqlite"). ctx governs the statement.
func createFloorTable(ctx context.Context, store registry.Store, kind string) error {
	return store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, queries.Get("create_floor_"+kind))
		return err
	})
}

// errNoKey is the floor step's error for a request without a key.
var errNoKey = errors.New("bench: floor request without " + idem.KeyHeader)

// floorStep is what the floor variant adds to the plain handler's
// transaction (payments.Service.PlainCreateWith): one row of
// idem_bench_floor holding the request's scope, a SHA-256 computed as
// idem computes one (length-prefixed fields) over the caller's tenant and
// principal and the raw Idempotency-Key header — hashing, but none of
// idem's key parsing, body fingerprinting or record. A request without a
// key, or whose scope is already there, fails the transaction (503).
func floorStep(ctx context.Context, tx registry.Tx, id idem.Identity, r *http.Request) error {
	key := r.Header.Get(idem.KeyHeader)
	if key == "" {
		return errNoKey
	}
	scope := floorScope(id, key)
	_, err := tx.Exec(ctx, queries.Get("insert_floor"), scope[:])
	return err
}

// floorScope is SHA-256 over the length-prefixed tenant, principal and
// key: unique per request when keys are.
func floorScope(id idem.Identity, key string) [32]byte {
	h := sha256.New()
	for _, f := range []string{id.Tenant, id.Principal, key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}
