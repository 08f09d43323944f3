package shard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// shardNames are the shards of every test: a is the default.
var shardNames = []string{"a", "b", "c"}

// openShards opens one real store per shard name: SQLite files or
// PostgreSQL databases.
func openShards(t *testing.T, driver string) map[string]registry.Store {
	t.Helper()
	ctx := context.Background()
	stores := make(map[string]registry.Store)
	for _, name := range shardNames {
		var (
			st  registry.Store
			err error
		)
		switch driver {
		case "sqlite":
			st, err = idemsqlite.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), name+".db"), idemsqlite.Options{})
		case "postgres":
			st, err = idempg.Open(ctx, pgtest.DSN(t), idempg.Options{})
		}
		if err != nil {
			t.Fatalf("opening shard %s: %v", name, err)
		}
		t.Cleanup(func() { st.Close() })
		stores[name] = st
	}
	return stores
}

// eachDriver runs fn with SQLite shards and with PostgreSQL shards.
func eachDriver(t *testing.T, fn func(t *testing.T, stores map[string]registry.Store)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) { fn(t, openShards(t, driver)) })
	}
}

// tenantOf authenticates the tests' requests by their X-Tenant header.
func tenantOf(r *http.Request) (idem.Identity, error) {
	if tn, ok := r.Header["X-Tenant"]; ok {
		return idem.Identity{Tenant: tn[0], Principal: "p"}, nil
	}
	return idem.Identity{}, errors.New("no tenant")
}

// server serves POST /v1/notes (an idempotent operation writing a row of
// the business table notes in the shard's database) and the monitor,
// routed by router; it returns the server's URL.
func server(t *testing.T, router *shard.Router) string {
	t.Helper()
	ctx := context.Background()
	handlers := make(map[string]http.Handler)
	for name, st := range router.Shards {
		if err := st.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, tenant TEXT NOT NULL)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		control := &idemhttp.ControlAdmitter{Controller: st}
		mw, err := idemhttp.New(ctx, st, idemhttp.Operation{Name: "notes.create", APIRevision: "v1"}, shard.RequestIdentity,
			idemhttp.Options{MonitorPrefix: "/v1/operations/", Admit: shard.Chain(control.Admit, router.Admit)})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /v1/notes", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			id, _ := idemhttp.Caller(ctx)
			if _, err := idemhttp.Tx(ctx).Exec(ctx, `INSERT INTO notes (id, tenant) VALUES ($1, $2)`, idemhttp.OperationID(ctx), id.Tenant); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"op":%q,"shard":%q}`, idemhttp.OperationID(ctx), name)
		})))
		mux.Handle("GET /v1/operations/", mw.MonitorHandler())
		handlers[name] = mux
	}
	srv := httptest.NewServer(&shard.Handler{Router: router, Identity: tenantOf, Shards: handlers})
	t.Cleanup(srv.Close)
	return srv.URL
}

// answer is one response of the test server.
type answer struct {
	status   int
	replayed bool
	code     string // problem+json code, if any
	op       string // the operation ID of a 201
	shard    string // the shard that served a 201
}

// do sends a request as tenant (no X-Tenant when tenant is "-") and
// decodes the answer.
func do(t *testing.T, method, url, tenant, key string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"text":"hi"}`))
	if tenant != "-" {
		req.Header.Set("X-Tenant", tenant)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body struct{ Code, Op, Shard string }
	json.Unmarshal(b, &body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		code: body.Code, op: body.Op, shard: body.Shard}
}

// notes counts the notes rows of tenant in st.
func notes(t *testing.T, st registry.Store, tenant string) int {
	t.Helper()
	var n int
	err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM notes WHERE tenant = $1`, tenant).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
