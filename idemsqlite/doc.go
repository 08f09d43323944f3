// Package idemsqlite is the SQLite driver of the idem registry: the
// embedded default, everything on one database file with no setup.
//
// The driver works on a *sql.DB. Open opens one with modernc.org/sqlite
// (pure Go, driver name "sqlite") and the settings this driver relies on:
// journal_mode=WAL, busy_timeout=10000 ms, synchronous=FULL,
// foreign_keys=on and _txlock=immediate, so every write transaction starts
// with BEGIN IMMEDIATE and takes SQLite's single write lock at once.
// Without WAL, the busy timeout and BEGIN IMMEDIATE together, racing
// inserts fail with SQLITE_BUSY instead of meeting the existing record.
// Open also queues this process's write transactions in Go rather than
// leaving them to poll SQLite's lock. OpenDB wraps a *sql.DB the caller
// opened itself; it should be opened with the same settings (see Open).
//
// Only open.go imports the SQLite library; the rest of the package speaks
// database/sql, and errors.go recognises SQLite's result codes through the
// Code method of the library's error type.
//
// Records live in idem_operations and outbox rows in idem_outbox
// (migrations/001_registry.sql). Times are stored as INTEGER microseconds
// since the Unix epoch and returned as time.Time in UTC. Every statement
// takes "now" from the database (unixepoch('subsec')) unless Options.Now
// supplies it.
//
// SQLite has one writer at a time: that is what makes the unique insert
// the acceptance point here, and what stands in for FOR UPDATE SKIP LOCKED
// when several relays claim outbox rows.
//
// ExecuteOnce commits concurrent calls together: one transaction, one
// fsync, each call in its own savepoint (group commit, Options.MaxBatch).
//
// A *Store is safe for concurrent use by multiple goroutines.
package idemsqlite
