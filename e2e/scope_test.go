package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const tokens = `{"tok-a-Zr4kW9pQ2mX7vT1nB8yL":{"tenant":"t1","principal":"alice"},"tok-b-Hd3sF6gJ0aK9wE2rU7iO":{"tenant":"t1","principal":"bob"},"tok-c-Mq5nX1cV8bN3zP6tY0uE":{"tenant":"t2","principal":"alice"}}`

// authFile writes the tokens file of TestScoping and returns its path.
func authFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestScoping: the same key and body from another principal of the same
// tenant, or from a principal of the same name in another tenant, is a
// different operation; resources and operations are visible to their
// owner only.
// Proves threat:another-principal-outcome (docs/threat-model.md).
// Proves threat:leaked-key (docs/threat-model.md).
func TestScoping(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--auth", authFile(t))
		wantProblem(t, "demo token with --auth", s.post(t, "demo", "k-scope", payBody), http.StatusUnauthorized, "UNAUTHENTICATED")

		who := []string{"tok-a-Zr4kW9pQ2mX7vT1nB8yL", "tok-b-Hd3sF6gJ0aK9wE2rU7iO", "tok-c-Mq5nX1cV8bN3zP6tY0uE"}
		first := map[string]reply{}
		ops := map[string]string{}
		pays := map[string]string{}
		for _, tok := range who {
			r := s.post(t, tok, "k-scope", payBody)
			ops[tok] = wantCreated(t, "POST as "+tok, r)
			pays[tok], _ = payment(t, "POST as "+tok, r.body)["id"].(string)
			first[tok] = r
		}
		if ops["tok-a-Zr4kW9pQ2mX7vT1nB8yL"] == ops["tok-b-Hd3sF6gJ0aK9wE2rU7iO"] || ops["tok-a-Zr4kW9pQ2mX7vT1nB8yL"] == ops["tok-c-Mq5nX1cV8bN3zP6tY0uE"] || ops["tok-b-Hd3sF6gJ0aK9wE2rU7iO"] == ops["tok-c-Mq5nX1cV8bN3zP6tY0uE"] {
			t.Errorf("operation IDs shared across scopes: %v", ops)
		}
		for _, tok := range who {
			wantReplay(t, "retry as "+tok, first[tok], s.post(t, tok, "k-scope", payBody))
		}

		for _, tok := range who {
			var list struct {
				Payments []struct {
					ID string `json:"id"`
				} `json:"payments"`
			}
			r := s.get(t, tok, "/v1/payments")
			if err := json.Unmarshal(r.body, &list); r.status != http.StatusOK || err != nil {
				t.Fatalf("GET /v1/payments as %s: %v (%v)", tok, r, err)
			}
			var ids []string
			for _, p := range list.Payments {
				ids = append(ids, p.ID)
			}
			if !slices.Equal(ids, []string{pays[tok]}) {
				t.Errorf("GET /v1/payments as %s lists %v; want only its own %s", tok, ids, pays[tok])
			}
		}
		aPay, aOp := "/v1/payments/"+pays["tok-a-Zr4kW9pQ2mX7vT1nB8yL"], "/v1/operations/"+ops["tok-a-Zr4kW9pQ2mX7vT1nB8yL"]
		for _, tok := range []string{"tok-b-Hd3sF6gJ0aK9wE2rU7iO", "tok-c-Mq5nX1cV8bN3zP6tY0uE"} {
			wantProblem(t, "GET alice's payment as "+tok, s.get(t, tok, aPay), http.StatusNotFound, "NOT_FOUND")
			wantProblem(t, "GET alice's operation as "+tok, s.get(t, tok, aOp), http.StatusNotFound, "NOT_FOUND")
		}
		wantProblem(t, "GET an operation without a token", s.get(t, "", aOp), http.StatusUnauthorized, "UNAUTHENTICATED")
		wantProblem(t, "GET payments without a token", s.get(t, "", "/v1/payments"), http.StatusUnauthorized, "UNAUTHENTICATED")
		if r := s.get(t, "tok-a-Zr4kW9pQ2mX7vT1nB8yL", aPay); r.status != http.StatusOK {
			t.Errorf("GET %s as alice: %v", aPay, r)
		}

		var v struct {
			OperationID string `json:"operation_id"`
			State       string `json:"state"`
		}
		r := s.get(t, "tok-a-Zr4kW9pQ2mX7vT1nB8yL", aOp)
		if err := json.Unmarshal(r.body, &v); r.status != http.StatusOK || err != nil || v.OperationID != ops["tok-a-Zr4kW9pQ2mX7vT1nB8yL"] || v.State != "SUCCEEDED" {
			t.Errorf("GET %s as alice: %v; want 200 with operation_id %s and state SUCCEEDED", aOp, r, ops["tok-a-Zr4kW9pQ2mX7vT1nB8yL"])
		}
		for _, tok := range who {
			if c := countRows(t, dsn, ops[tok]); c != (counts{1, 1, 3, 3}) {
				t.Errorf("rows of %s's operation: %+v; want one payment and one outbox row (three of each in all)", tok, c)
			}
		}
	})
}
