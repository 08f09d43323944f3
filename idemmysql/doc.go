// Package idemmysql is the MySQL/MariaDB driver of the registry
// (registry.Store), on github.com/go-sql-driver/mysql and database/sql.
// Open it with a mysql:// URL or a go-sql-driver DSN (Open); the embedded
// migrations (migrations/*.sql) create the tables on first use.
//
// # Acceptance point and locks
//
// The acceptance point is a unique insert: the primary key of
// idem_operations is the 32-byte scope. Of concurrent inserts of one scope
// InnoDB lets one through and makes the others wait on the index record's
// lock until that transaction ends; they then fail with a duplicate-key
// error (1062) and read the committed record, or, if it rolled back,
// insert their own. Every session runs at READ COMMITTED (Open sets it,
// OpenDB checks it): reads see what is committed when each statement
// starts, as on PostgreSQL, and InnoDB takes no gap or next-key locks for
// searches — only the duplicate-key check's record lock, which is what
// makes the insert exact. A state change is one compare-and-set UPDATE
// (owner generation, state and the writer epoch in its WHERE clause),
// whose matched-row count (clientFoundRows) says whether it held; the
// record is then read back in the same transaction, under the row lock the
// UPDATE holds (MySQL has no UPDATE … RETURNING). The writer fence reads
// the control row with a shared lock, so BumpEpoch waits for claims in
// flight and claims for a bump in progress. Outbox relays pick messages
// with FOR UPDATE SKIP LOCKED (MariaDB 10.6, MySQL 8.0).
//
// Waiters for the same scope that find the first transaction rolled back
// can deadlock on the upgrade of their shared locks; InnoDB then aborts
// one (1213). Statements that wrote nothing outside the database are run
// again — Reserve's insert, ExecuteOnce up to its claim, the driver's own
// transactions — up to five times; a deadlock after a business function
// ran is returned, wrapping registry.ErrUnavailable. A lock wait longer
// than innodb_lock_wait_timeout (10 s in the Store's sessions), a lost
// connection, too many connections, a killed query, a statement timeout
// and a read-only server also wrap registry.ErrUnavailable (errors.go);
// every other database error is returned as a storage failure, never as a
// key conflict.
//
// # Durability
//
// Open refuses a server whose commit may be lost after it is acknowledged:
// innodb_flush_log_at_trx_commit must be 1, and with the binary log on,
// sync_binlog must be 1. Options.AllowWeakDurability accepts such a server
// with an error logged for each weak setting (durability.go).
//
// # Storage rules in the database
//
// CHECK constraints (enforced from MariaDB 10.2 and MySQL 8.0.16) hold the
// per-row rules: the states, a 2xx or 4xx status, a body of at most 64 KiB
// (plus 1 KiB when sealed), a response exactly on terminal records, a
// tombstone without one. BEFORE triggers that SIGNAL SQLSTATE '45000' hold
// the transition table (RESERVED → EXECUTING, SUCCEEDED, FAILED_FINAL,
// REJECTED; EXECUTING → SUCCEEDED, FAILED_FINAL, UNKNOWN; UNKNOWN →
// SUCCEEDED, FAILED_FINAL), immutable identity columns, a terminal record
// that may only be retired or re-sealed, tombstones that never change,
// deletion of reservations and expiring tombstones only, outbox messages
// deleted only once published, append-only audit, reconciliation and
// lookup logs, rollout rows never deleted, and a writer epoch that never
// decreases. Creating triggers with the binary
// log on needs the SUPER privilege or log_bin_trust_function_creators=1.
//
// # Tenants
//
// Every record stores registry.TenantHash of its claim's tenant
// (migration 006; NULL for records made before it), and the Store is a
// registry.TenantMover (tenant.go, tenantcopy.go): a row of
// idem_tenant_fences makes the triggers refuse every write that could
// change an outcome of the tenant with SQLSTATE IDM03, which the driver
// returns as registry.ErrTenantMoved; ClaimOutbox leaves the tenant's
// messages alone. FenceTenant waits for the transactions that touched
// idem_operations before the fence committed (the table's metadata lock,
// which takes the LOCK TABLES privilege) — see its doc comment.
//
// # Servers
//
// Tested on MariaDB 10.11 (internal/mytest starts a throwaway server per
// test binary). The SQL keeps to what MySQL 8.0.16 also has (CHECK,
// SKIP LOCKED, JSON_TABLE, the isolation variable chosen by Open), but no
// test runs it on MySQL. MySQL's TRUNCATE fires no trigger: the empty
// table idem_truncate_guard holds foreign keys to every evidence table,
// so InnoDB refuses to truncate them. MySQL commits DDL implicitly, so a
// migration is not atomic (Migrate).
package idemmysql
