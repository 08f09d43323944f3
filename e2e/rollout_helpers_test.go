package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// opCreate is the operation of POST /v1/payments.
const opCreate = "payments.create"

// rollout runs "idem rollout ARGS… --db DSN --actor e2e" and fails t
// unless it exits 0.
func rollout(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	args = append([]string{"rollout"}, args...)
	args = append(args, "--db", dsn, "--actor", "e2e")
	out, err := exec.Command(idemBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("idem %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tenantToken is a bearer token and the tenant it authenticates.
type tenantToken struct{ token, tenant string }

// writeTenants writes an --auth file with n tokens, "tok-I-RANDOM" for tenant
// "tenant-I" (principal "p-I"), and returns its path and the tokens.
func writeTenants(t *testing.T, n int) (string, []tenantToken) {
	t.Helper()
	type id struct {
		Tenant    string `json:"tenant"`
		Principal string `json:"principal"`
	}
	m := map[string]id{}
	var out []tenantToken
	for i := range n {
		tt := tenantToken{fmt.Sprintf("tok-%03d-%s", i, rand.Text()), fmt.Sprintf("tenant-%03d", i)}
		m[tt.token] = id{tt.tenant, fmt.Sprintf("p-%03d", i)}
		out = append(out, tt)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, out
}

// keylessMode sends a POST /v1/payments without an Idempotency-Key as
// token and reports how it was served: "enforce" for 400 KEY_MISSING
// (the contract refuses it), "shadow" for 201 (executed as without
// idempotency); any other answer fails t.
func keylessMode(t *testing.T, s *server, token string) string {
	t.Helper()
	r := s.post(t, token, "", `{"amount":"1.00","currency":"EUR","payee":"acct_probe","memo":"probe"}`)
	switch {
	case problemErr(r, http.StatusBadRequest, "KEY_MISSING") == "":
		return "enforce"
	case r.status == http.StatusCreated:
		return "shadow"
	}
	t.Fatalf("keyless POST as %s: %v; want 400 KEY_MISSING (enforce) or 201 (shadow)", token, r)
	return ""
}

// awaitKeylessMode waits until every server serves token's tenant in
// mode (keylessMode), failing t after awaitTimeout.
func awaitKeylessMode(t *testing.T, servers []*server, token, mode string) {
	t.Helper()
	for _, s := range servers {
		var last string
		await(t, fmt.Sprintf("%s serving %s in %s", s.url, token, mode), func() bool {
			last = keylessMode(t, s, token)
			return last == mode
		}, &last)
	}
}

// queryInt runs a query returning one integer on the database (SQLite
// read-only).
func queryInt(t *testing.T, dsn, q string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	var n int
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// paymentsWithMemo counts the payment rows with that memo: each
// execution of a request that carries it, whatever its operation.
func paymentsWithMemo(t *testing.T, dsn, memo string) int {
	t.Helper()
	return queryInt(t, dsn, `SELECT count(*) FROM payments WHERE memo = $1`, memo)
}
