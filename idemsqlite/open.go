package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// settings are the DSN parameters Open always sets, overriding any the
// caller gave for the same pragma: WAL so readers never block the writer,
// a 10 s busy timeout so writers queue for the lock instead of failing
// with SQLITE_BUSY, FULL sync so a commit is durable when it returns,
// foreign keys on, and BEGIN IMMEDIATE for every read-write transaction so
// a transaction takes the write lock before it reads anything.
//
// The busy timeout comes first: pragmas run in this order on every new
// connection, and switching a new file to WAL takes a lock that racing
// first connections would otherwise fail on at once ("database is locked").
var settings = []struct{ key, value, pragma string }{
	{"_pragma", "busy_timeout(10000)", "busy_timeout"},
	{"_pragma", "journal_mode(WAL)", "journal_mode"},
	{"_pragma", "synchronous(FULL)", "synchronous"},
	{"_pragma", "foreign_keys(1)", "foreign_keys"},
	{"_txlock", "immediate", ""},
}

// idleConns is how many idle connections Open keeps: opening a SQLite
// connection re-runs the pragmas above, so keep enough for a busy server.
const idleConns = 16

// Open opens the SQLite database named by dsn with modernc.org/sqlite,
// applies the embedded migrations (see Migrate) and returns a Store that
// owns the database: Close closes it.
//
// dsn is "sqlite:PATH", "sqlite:PATH?PARAMS" or a plain file path (with
// optional "?PARAMS"); PARAMS are modernc.org/sqlite DSN parameters. The
// file is created if missing. Open always adds
// _pragma=journal_mode(WAL), _pragma=busy_timeout(10000),
// _pragma=synchronous(FULL), _pragma=foreign_keys(1) and
// _txlock=immediate, replacing the caller's values for those. In-memory
// databases are refused: each pooled connection would see its own.
//
// The read-write transactions begun on the returned Store's DB queue for
// SQLite's write lock in Go, first come first served, instead of polling
// it (see gate): throughput under concurrency rises and no writer of this
// process starves. A transaction that waits at that queue for 10 s, or
// whose context ends, goes on to SQLite's own busy timeout, so a
// goroutine that begins a second write transaction while its first is
// open still fails (after up to 20 s) rather than hanging. The pool's
// connections are modernc.org/sqlite connections wrapped for that queue.
//
// ctx governs opening and migrating only.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	name, err := driverDSN(dsn)
	if err != nil {
		return nil, err
	}
	connector, err := sqlite.NewConnector(name)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: open: %w", err)
	}
	db := sql.OpenDB(&gatedConnector{Connector: connector, gate: make(gate, 1)})
	db.SetMaxIdleConns(idleConns)
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemsqlite: open: %w", translate(err))
	}
	s, err := OpenDB(ctx, db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}

// pingTries bounds how often ping tries a busy database.
const pingTries = 50

// ping opens the first connection, running the pragmas of settings. A
// new file's switch to WAL needs a lock that SQLite may refuse at once
// with SQLITE_BUSY, without its busy handler, while other connections
// (other processes opening the same new file) hold it briefly: ping then
// tries again, after 1 ms, 2 ms, … up to 100 ms between tries, at most
// pingTries times or until ctx ends. A retry loop written here because
// the busy handler does not cover this case.
func ping(ctx context.Context, db *sql.DB) error {
	delay := time.Millisecond
	for try := 1; ; try++ {
		err := db.PingContext(ctx)
		if err == nil || try == pingTries || sqliteCode(err)&0xff != codeBusy {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// driverDSN turns an Open DSN into a modernc.org/sqlite DSN with the
// driver's settings.
func driverDSN(dsn string) (string, error) {
	p, rawQuery, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite:"), "?")
	if p == "" {
		return "", errors.New("idemsqlite: open: empty database path")
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", fmt.Errorf("idemsqlite: open: DSN parameters: %w", err)
	}
	if p == ":memory:" || strings.Contains(p, ":memory:") || q.Get("mode") == "memory" ||
		strings.Contains(p, "mode=memory") {
		return "", errors.New("idemsqlite: open: in-memory databases are not supported; use a file")
	}
	q.Del("_txlock")
	q.Del("_journal_mode")
	q.Del("_journal")
	q.Del("_busy_timeout")
	q.Del("_timeout")
	q.Del("_synchronous")
	q.Del("_sync")
	q.Del("_foreign_keys")
	q.Del("_fk")
	var pragmas []string
	for _, v := range q["_pragma"] {
		if !overridden(v) {
			pragmas = append(pragmas, v)
		}
	}
	q.Del("_pragma")
	for _, v := range pragmas {
		q.Add("_pragma", v)
	}
	for _, st := range settings {
		q.Add(st.key, st.value)
	}
	return p + "?" + q.Encode(), nil
}

// overridden reports whether a caller's _pragma sets one of the pragmas
// of settings.
func overridden(pragma string) bool {
	name := strings.ToLower(strings.TrimSpace(pragma))
	for _, st := range settings {
		if st.pragma != "" && strings.HasPrefix(name, st.pragma) {
			return true
		}
	}
	return false
}
