package idemmysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// ErrWeakDurability is returned by Open and OpenDB when the server may
// acknowledge a commit that a crash then loses, and
// Options.AllowWeakDurability is not set.
var ErrWeakDurability = errors.New("idemmysql: the server's commits are not durable when they return")

// checkDurability reads the server's settings and refuses (or, with
// Options.AllowWeakDurability, logs at error level) each one under which
// an acknowledged commit may be lost:
//
//   - innodb_flush_log_at_trx_commit must be 1: InnoDB writes and
//     flushes its redo log at every commit (0 and 2 flush about once a
//     second: a crash of the server, or of the machine, loses the last
//     second of acknowledged commits — a recorded outcome or an
//     acceptance point that then never happened);
//   - with binary logging on (log_bin), sync_binlog must be 1: the
//     binary log is flushed at every commit, so a replica or a
//     point-in-time recovery never lacks a commit the primary
//     acknowledged. With binary logging off, sync_binlog does not matter.
//
// The check runs once, at Open; a setting changed later with SET GLOBAL
// is not seen.
func checkDurability(ctx context.Context, db *sql.DB, opts Options) error {
	var (
		flush, logBin, syncBinlog sql.NullInt64
		version                   string
	)
	err := queryRow(ctx, db, queries.Get("DurabilitySettings")).Scan(&flush, &logBin, &syncBinlog, &version)
	if err != nil {
		return fmt.Errorf("idemmysql: reading the durability settings: %w", translate(err))
	}
	var weak []string
	if flush.Int64 != 1 {
		weak = append(weak, fmt.Sprintf("innodb_flush_log_at_trx_commit=%d (want 1: the redo log is flushed about once a second, and a crash loses the commits acknowledged since)", flush.Int64))
	}
	if logBin.Int64 != 0 && syncBinlog.Int64 != 1 {
		weak = append(weak, fmt.Sprintf("sync_binlog=%d with the binary log on (want 1: a crash may lose acknowledged commits from the binary log, which replicas and point-in-time recovery read)", syncBinlog.Int64))
	}
	if len(weak) == 0 {
		return nil
	}
	if !opts.AllowWeakDurability {
		return fmt.Errorf("%w: %s on %s; fix the server, or set Options.AllowWeakDurability to accept losing acknowledged operations",
			ErrWeakDurability, strings.Join(weak, "; "), version)
	}
	log := cmp.Or(opts.Logger, slog.Default())
	for _, w := range weak {
		log.Error("idemmysql: WEAK DURABILITY accepted (Options.AllowWeakDurability): a crash may lose acknowledged commits", "setting", w, "server", version)
	}
	return nil
}

// checkSession refuses a pool whose sessions do not run at READ
// COMMITTED (a *sql.DB not prepared by Isolation): the driver's locking
// is designed for it (doc.go).
func checkSession(ctx context.Context, db *sql.DB) error {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return fmt.Errorf("idemmysql: %w", translate(err))
	}
	variable := "@@transaction_isolation"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		variable = "@@tx_isolation"
	}
	var level string
	if err := db.QueryRowContext(ctx, "SELECT "+variable).Scan(&level); err != nil {
		return fmt.Errorf("idemmysql: %w", translate(err))
	}
	if level != "READ-COMMITTED" {
		return fmt.Errorf("idemmysql: sessions run at %s; the Store needs READ-COMMITTED (open the pool with a Config prepared by Config and Isolation, or use Open)", level)
	}
	return nil
}
