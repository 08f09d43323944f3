package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// lockWait is the InnoDB lock wait timeout of the Store's sessions
// (innodb_lock_wait_timeout, seconds): a statement that waits longer for
// a row lock fails with error 1205, reported as registry.ErrUnavailable.
const lockWait = "10"

// Open connects to the MySQL or MariaDB database named by dsn, checks the
// server's durability settings (durability.go), applies the embedded
// migrations (see Migrate) and returns a Store that owns the database:
// Close closes it. ctx governs opening, the checks and the migration.
//
// dsn is either a URL, mysql://USER:PASSWORD@HOST:PORT/DATABASE?PARAMS
// (PORT defaults to 3306; a unix socket is
// mysql://USER@unix(/path/to/socket)/DATABASE), or a DSN of
// github.com/go-sql-driver/mysql, USER:PASSWORD@tcp(HOST:PORT)/DATABASE?PARAMS.
// PARAMS are that driver's parameters; Config and Isolation then set the
// ones the Store depends on, replacing the caller's values for those.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	mariaDB, err := flavor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	Isolation(cfg, mariaDB)
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: open: %w", err)
	}
	db := sql.OpenDB(ownedConnector{connector})
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemmysql: open: %w", translate(err))
	}
	s, err := OpenDB(ctx, db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}

// ParseDSN parses an Open DSN (a mysql:// URL or a go-sql-driver/mysql
// DSN) and returns it prepared by Config.
func ParseDSN(dsn string) (*mysql.Config, error) {
	native := dsn
	if rest, ok := strings.CutPrefix(dsn, "mysql://"); ok {
		var err error
		if native, err = fromURL(rest); err != nil {
			return nil, err
		}
	}
	cfg, err := mysql.ParseDSN(native)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: DSN: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("idemmysql: DSN names no database")
	}
	Config(cfg)
	return cfg, nil
}

// fromURL turns the part of a mysql:// URL after the scheme into a
// go-sql-driver/mysql DSN.
func fromURL(rest string) (string, error) {
	userinfo, hostpath := "", rest
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userinfo, hostpath = rest[:i], rest[i+1:]
	}
	if strings.HasPrefix(hostpath, "unix(") || strings.HasPrefix(hostpath, "tcp(") {
		return userinfo + "@" + hostpath, nil
	}
	u, err := url.Parse("mysql://" + hostpath)
	if err != nil {
		return "", fmt.Errorf("idemmysql: DSN: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	if userinfo != "" {
		ui, err := url.Parse("mysql://" + userinfo + "@x")
		if err != nil {
			return "", fmt.Errorf("idemmysql: DSN user: %w", err)
		}
		userinfo = ui.User.Username()
		if p, ok := ui.User.Password(); ok {
			userinfo += ":" + p
		}
	}
	dsn := userinfo + "@tcp(" + host + ")" + u.EscapedPath()
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	return dsn, nil
}

// Config sets, on cfg, what the Store depends on, replacing the caller's
// values:
//
//   - ClientFoundRows: an UPDATE reports the rows it matched, so a
//     compare-and-set that held but changed nothing is not taken for a
//     fenced one;
//   - every session in UTC, with strict SQL mode (an over-long value
//     fails instead of being truncated) and an InnoDB lock wait timeout of
//     10 s (lockWait);
//   - server-side prepared statements (InterpolateParams off), so bytes
//     are sent as bytes; ParseTime off (times are integers); one
//     statement per query (MultiStatements off; the migration uses a
//     connection of its own).
//
// The sessions' isolation level, READ COMMITTED, is set by Open, which
// asks the server first: the variable is tx_isolation on MariaDB and
// transaction_isolation on MySQL (Isolation). OpenDB checks it.
func Config(cfg *mysql.Config) {
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = false
	cfg.ParseTime = false
	cfg.MultiStatements = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k := range cfg.Params {
		switch strings.ToLower(k) {
		case "time_zone", "sql_mode", "innodb_lock_wait_timeout", "tx_isolation", "transaction_isolation", "autocommit":
			delete(cfg.Params, k)
		}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE'"
	cfg.Params["innodb_lock_wait_timeout"] = lockWait
	cfg.Collation = "utf8mb4_bin"
}

// Isolation sets READ COMMITTED for every session of cfg, in the variable
// the server understands: tx_isolation when mariaDB is true, else
// transaction_isolation.
func Isolation(cfg *mysql.Config, mariaDB bool) {
	if mariaDB {
		cfg.Params["tx_isolation"] = "'READ-COMMITTED'"
	} else {
		cfg.Params["transaction_isolation"] = "'READ-COMMITTED'"
	}
}

// flavor asks the server behind cfg whether it is MariaDB.
func flavor(ctx context.Context, cfg *mysql.Config) (mariaDB bool, err error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return false, fmt.Errorf("idemmysql: open: %w", err)
	}
	db := sql.OpenDB(ownedConnector{connector})
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return false, fmt.Errorf("idemmysql: open: %w", translate(err))
	}
	return strings.Contains(strings.ToLower(version), "mariadb"), nil
}
