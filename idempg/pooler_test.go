package idempg

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestPoolerParam: idem_pooler=transaction turns off named prepared
// statements and the LISTEN connection, and never reaches the server (a
// server refuses an unknown startup parameter); session changes nothing;
// another value is refused at Open.
func TestPoolerParam(t *testing.T) {
	dsn := pgtest.DSN(t)
	sep := "&"
	if !strings.Contains(dsn, "?") {
		sep = "?"
	}
	open := func(t *testing.T, param string) *Store {
		t.Helper()
		st, err := Open(t.Context(), dsn+sep+param, Options{})
		if err != nil {
			t.Fatalf("Open with %s: %v", param, err)
		}
		t.Cleanup(st.Close)
		if _, err := st.Control(t.Context()); err != nil {
			t.Fatalf("a statement with %s: %v", param, err)
		}
		return st
	}
	t.Run("transaction", func(t *testing.T) {
		st := open(t, "idem_pooler=transaction")
		cfg := st.pool.Config().ConnConfig
		if cfg.DefaultQueryExecMode != pgx.QueryExecModeExec {
			t.Errorf("query mode %v; want exec (no named prepared statements)", cfg.DefaultQueryExecMode)
		}
		if _, ok := cfg.RuntimeParams[PoolerParam]; ok {
			t.Error("idem_pooler is still among the startup parameters")
		}
		if st.listener != nil {
			t.Error("a LISTEN connection is configured behind a transaction pooler")
		}
		if ch, stop := st.Watch(t.Context(), newClaim("pooler").Scope); ch != nil {
			stop()
			t.Error("Watch returned a channel behind a transaction pooler")
		}
	})
	t.Run("transaction keeps a chosen mode", func(t *testing.T) {
		st := open(t, "idem_pooler=transaction&default_query_exec_mode=simple_protocol")
		if m := st.pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeSimpleProtocol {
			t.Errorf("query mode %v; want the DSN's simple_protocol", m)
		}
	})
	t.Run("session", func(t *testing.T) {
		st := open(t, "idem_pooler=session")
		if st.listener == nil {
			t.Error("no LISTEN connection behind a session pooler")
		}
	})
	t.Run("migrate", func(t *testing.T) {
		// Migrate (idem migrate) reads the parameter too: a server refuses
		// it as a startup parameter.
		if err := Migrate(t.Context(), dsn+sep+"idem_pooler=transaction"); err != nil {
			t.Fatalf("Migrate with idem_pooler=transaction: %v", err)
		}
	})
	t.Run("other", func(t *testing.T) {
		st, err := Open(t.Context(), dsn+sep+"idem_pooler=statement", Options{})
		if err == nil {
			st.Close()
			t.Fatal("Open accepted idem_pooler=statement")
		}
		if !strings.Contains(err.Error(), "idem_pooler") {
			t.Errorf("error %q does not name the parameter", err)
		}
	})
}
