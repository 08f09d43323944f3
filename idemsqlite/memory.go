package idemsqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"

	"modernc.org/sqlite"
)

// OpenMemory opens a new, empty in-memory database, applies the
// migrations and returns a Store that owns it — for tests and examples
// only. It is NOT durable: everything is gone when the Store is closed or
// the process ends, so it proves nothing about crashes. The database is a
// named shared-cache memory database served by ONE connection, so the
// Store's calls run one at a time and concurrent callers queue: a
// handler that holds the business transaction holds the database, and a
// business function must use only its Tx — a call on the Store while its
// transaction is open would wait for itself. (That is also why the
// conformance suite, which reads from outside an open transaction, runs
// on files only.) Each call makes a new database. ctx governs opening and
// migrating only.
func OpenMemory(ctx context.Context, opts Options) (*Store, error) {
	var b [8]byte
	rand.Read(b[:])
	name := "file:idem-memory-" + hex.EncodeToString(b[:]) +
		"?mode=memory&cache=shared&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"
	connector, err := sqlite.NewConnector(name)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: open memory: %w", err)
	}
	db := sql.OpenDB(&gatedConnector{Connector: connector, gate: make(gate, 1)})
	// One connection, never closed while the Store lives: the memory
	// database exists only while a connection to it is open.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	s, err := OpenDB(ctx, db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}
