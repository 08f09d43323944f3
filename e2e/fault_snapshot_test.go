package e2e

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for snapshots

	"github.com/idemkit/idem/idemmysql"
)

// snapshot is the database's business rows, outbox rows and operation
// records at the end of a scenario, plus the provider's execution count.
type snapshot struct {
	Payments   []map[string]string `json:"payments"`
	Outbox     []map[string]string `json:"outbox"`
	Operations []map[string]string `json:"operations"`
	// ProviderExecuted is the provider's count of executed transfers, -1
	// without a provider.
	ProviderExecuted int `json:"provider_executed"`
}

// openDB opens the run's database with database/sql: PostgreSQL through
// pgx's stdlib driver, SQLite read-only, MySQL/MariaDB with the sessions
// idemmysql sets up.
func openDB(dsn string) (*sql.DB, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	}
	if strings.HasPrefix(dsn, "mysql://") {
		cfg, err := idemmysql.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(connector), nil
	}
	return sql.Open("pgx", dsn)
}

// takeSnapshot reads the rows and the provider's count. The test fails
// if the database cannot be read.
func (f *faultRun) takeSnapshot() *snapshot {
	f.t.Helper()
	snap, err := f.readSnapshot(true)
	if err != nil {
		f.t.Fatalf("snapshot of the database: %v", err)
	}
	return snap
}

// readSnapshot reads the rows and, with askProvider, the provider's count.
func (f *faultRun) readSnapshot(askProvider bool) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := openDB(f.dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	snap := &snapshot{ProviderExecuted: -1}
	for _, q := range []struct {
		name string
		into *[]map[string]string
		sql  string
	}{
		{"payments", &snap.Payments, `SELECT id, operation_id, tenant, principal, amount, currency, payee, memo FROM payments ORDER BY id`},
		{"idem_outbox", &snap.Outbox, `SELECT message_id, operation_id, topic, payload FROM idem_outbox ORDER BY seq`},
		{"idem_operations", &snap.Operations, `SELECT operation_id, operation, state, owner_gen, scope, fingerprint, resp_status, resp_digest,
			CASE WHEN retired_at IS NULL THEN 'no' ELSE 'yes' END AS retired FROM idem_operations ORDER BY operation_id`},
	} {
		rows, err := queryMaps(ctx, db, q.sql)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", q.name, err)
		}
		*q.into = rows
	}
	f.mu.Lock()
	prov := f.prov
	f.mu.Unlock()
	if prov != nil && askProvider {
		r, err := f.do(prov, http.MethodGet, "/stats", "", nil, "")
		if err != nil || r.status != http.StatusOK {
			return nil, fmt.Errorf("provider GET /stats: %v %v", r, err)
		}
		var s struct {
			Executed int `json:"executed"`
		}
		if err := json.Unmarshal(r.body, &s); err != nil {
			return nil, fmt.Errorf("provider GET /stats: %s: %w", r.body, err)
		}
		snap.ProviderExecuted = s.Executed
	}
	if askProvider {
		f.mu.Lock()
		f.last = snap
		f.mu.Unlock()
	}
	return snap, nil
}

// byteColumns are shown hex-encoded; payload as text when it is valid JSON.
var byteColumns = map[string]bool{"scope": true, "fingerprint": true, "resp_digest": true}

func queryMaps(ctx context.Context, db *sql.DB, q string) ([]map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := map[string]string{}
		for i, c := range cols {
			switch v := vals[i].(type) {
			case nil:
			case []byte:
				if byteColumns[c] {
					m[c] = hex.EncodeToString(v)
				} else {
					m[c] = string(v)
				}
			default:
				m[c] = fmt.Sprint(v)
			}
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
