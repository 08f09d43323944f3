package idempg

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolerParam is the DSN parameter that names the pooler between the
// Store and PostgreSQL (see Open); idem reads and removes it, the server
// never sees it.
const PoolerParam = "idem_pooler"

// The values of PoolerParam.
const (
	PoolerTransaction = "transaction" // PgBouncer pool_mode = transaction
	PoolerSession     = "session"     // pool_mode = session: as without a pooler
)

// applyPooler reads PoolerParam from cfg's runtime parameters (where pgx
// leaves parameters it does not know), removes it, and adjusts cfg and
// opts for a transaction pooler.
func applyPooler(cfg *pgxpool.Config, opts *Options) error {
	params := cfg.ConnConfig.RuntimeParams
	mode, ok := params[PoolerParam]
	if !ok {
		return nil
	}
	delete(params, PoolerParam)
	switch mode {
	case PoolerSession, "":
		return nil
	case PoolerTransaction:
	default:
		return fmt.Errorf("idempg: %s=%q: want %q or %q", PoolerParam, mode, PoolerTransaction, PoolerSession)
	}
	// Named prepared statements live on one server connection, which a
	// transaction pooler gives to another client after the transaction
	// (PgBouncer before 1.21 does not track them): describe and execute
	// in one round trip with an unnamed statement instead.
	if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	// A LISTEN would stay on a server connection handed on to others.
	opts.NoListen = true
	return nil
}
