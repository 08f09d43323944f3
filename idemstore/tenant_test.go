package idemstore_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/registry/registrytest"
)

// TestMain starts PostgreSQL and MariaDB on demand and stops them after
// the tests.
func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }

// clock is an injectable "now" for a Store (Options.Now); zero means
// database time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// open opens a Store on dsn with an injectable clock.
func open(t *testing.T, dsn string) (registry.Store, *clock) {
	t.Helper()
	c := &clock{}
	st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE conformance_effects (operation_id TEXT, note TEXT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st, c
}

// TestTenantCopyAcrossDrivers: a tenant exported from SQLite imports into
// PostgreSQL and back — records of every state with their responses,
// tombstones, effects, lookups, reconciliations, pending settlements and
// outbox messages — and on each target a settled key replays the
// byte-identical response (the driver verifies it against its stored
// digest) and the target's own export is the source's stream byte for
// byte.
// threat:tenant-copy-altered
func TestTenantCopyAcrossDrivers(t *testing.T) {
	t.Parallel()
	lite, liteClock := open(t, "sqlite:"+filepath.Join(t.TempDir(), "src.db"))
	pg, pgClock := open(t, pgtest.DSN(t))
	back, _ := open(t, "sqlite:"+filepath.Join(t.TempDir(), "back.db"))
	const tenant = "acme\x00\xff"
	f := registrytest.BuildTenant(t, lite, liteClock.set, tenant)
	liteClock.set(time.Time{})
	pgClock.set(time.Time{})

	fromLite := copyTenant(t, f, tenant, lite, pg)
	fromPG := copyTenant(t, f, tenant, pg, back)
	if !bytes.Equal(fromLite, fromPG) {
		t.Errorf("PostgreSQL's export of the imported tenant differs from SQLite's:\n%s\nwant\n%s", fromPG, fromLite)
	}
}

// copyTenant fences the tenant on from, exports it and imports it into
// to, checking the counts, the target's replays and its rows; it returns
// the exported stream.
func copyTenant(t *testing.T, f registrytest.TenantFixture, tenant string, from, to registry.Store) []byte {
	t.Helper()
	if err := from.(registry.TenantMover).FenceTenant(t.Context(), tenant, "next"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	counts, err := from.(registry.TenantMover).ExportTenant(t.Context(), tenant, &out)
	if err != nil || counts != f.Counts {
		t.Fatalf("ExportTenant: %+v %v, want %+v", counts, err, f.Counts)
	}
	got, err := to.(registry.TenantMover).ImportTenant(t.Context(), bytes.NewReader(out.Bytes()))
	if err != nil || got != f.Counts {
		t.Fatalf("ImportTenant: %+v %v, want %+v", got, err, f.Counts)
	}
	for _, want := range []registry.Record{f.Settled, f.Once, f.Reconciled} {
		rec, err := to.Get(t.Context(), want.Scope)
		if err != nil || rec.Response == nil || !bytes.Equal(rec.Response.Body, want.Response.Body) ||
			rec.Response.Status != want.Response.Status || rec.Response.Digest() != want.Response.Digest() {
			t.Errorf("the target's replay of %s: %+v %v, want %+v", want.OperationID, rec.Response, err, want.Response)
		}
	}
	for _, want := range []registry.Record{f.Retired, f.Unknown} {
		if rec, err := to.Get(t.Context(), want.Scope); err != nil || rec.State != want.State || rec.Retired() != want.Retired() {
			t.Errorf("on the target, %s: %s retired=%v %v", want.OperationID, rec.State, rec.Retired(), err)
		}
	}
	registrytest.CheckTenantRows(t, to, f)
	return out.Bytes()
}

// TestTenantCopyAcrossDriversMySQL: a tenant exported from SQLite imports
// into MariaDB (idemmysql) and back into another SQLite — records of
// every state with their responses, tombstones, effects, lookups,
// reconciliations, pending settlements and outbox messages — and on each
// target a settled key replays the byte-identical response and the
// target's own export is the source's stream byte for byte.
// threat:tenant-copy-altered
func TestTenantCopyAcrossDriversMySQL(t *testing.T) {
	t.Parallel()
	lite, liteClock := open(t, "sqlite:"+filepath.Join(t.TempDir(), "src.db"))
	my, myClock := open(t, mysqlDSN(t))
	back, _ := open(t, "sqlite:"+filepath.Join(t.TempDir(), "back.db"))
	const tenant = "acme\x00\xff"
	f := registrytest.BuildTenant(t, lite, liteClock.set, tenant)
	liteClock.set(time.Time{})
	myClock.set(time.Time{})
	fromLite := copyTenant(t, f, tenant, lite, my)
	fromMy := copyTenant(t, f, tenant, my, back)
	if !bytes.Equal(fromLite, fromMy) {
		t.Errorf("MariaDB's export of the imported tenant differs from SQLite's:\n%s\nwant\n%s", fromMy, fromLite)
	}
}

// mysqlDSN is a fresh MariaDB database of t as a mysql:// DSN.
func mysqlDSN(t *testing.T) string {
	native := mytest.DSN(t) // root@tcp(127.0.0.1:PORT)/DB
	user, rest, _ := strings.Cut(native, "@tcp(")
	addr, db, _ := strings.Cut(rest, ")/")
	return "mysql://" + user + "@" + addr + "/" + db
}
