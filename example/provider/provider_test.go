package provider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// bundle is a provider behind an httptest server.
type bundle struct {
	srv *Server
	ts  *httptest.Server
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{srv: New()}
	b.ts = httptest.NewServer(b.srv.Handler())
	t.Cleanup(b.ts.Close)
	// Runs before Close: release held requests, which Close would wait for.
	t.Cleanup(func() { b.srv.SetMode(ModeOK) })
	return b
}

// send does one request with c; key "" sends no Idempotency-Key. It never
// calls t.Fatal, so goroutines may use it.
func (b *bundle) send(c *http.Client, method, path, key, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp, out, err
}

func (b *bundle) do(t *testing.T, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	resp, out, err := b.send(b.ts.Client(), method, path, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

func (b *bundle) post(t *testing.T, key, body string) (*http.Response, []byte) {
	t.Helper()
	return b.do(t, http.MethodPost, "/transfers", key, body)
}

func (b *bundle) control(t *testing.T, mode Mode) {
	t.Helper()
	if resp, out := b.do(t, http.MethodPost, "/control", "", `{"mode":"`+string(mode)+`"}`); resp.StatusCode != http.StatusOK ||
		string(out) != `{"mode":"`+string(mode)+`"}` {
		t.Fatalf("control %s: %d %s", mode, resp.StatusCode, out)
	}
}

func (b *bundle) stats(t *testing.T) int {
	t.Helper()
	resp, out := b.do(t, http.MethodGet, "/stats", "", "")
	var s struct{ Executed int }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &s) != nil {
		t.Fatalf("stats: %d %s", resp.StatusCode, out)
	}
	return s.Executed
}

// wantProblem checks that a response is the problem code with status.
func wantProblem(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	var p struct {
		Status int
		Code   string
	}
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(body, &p) != nil || p.Code != code || p.Status != status {
		t.Errorf("%s: %d %q %s, want %d %s", what, resp.StatusCode, resp.Header.Get("Content-Type"), body, status, code)
	}
}

const body1 = `{"amount":"12.50","currency":"EUR","payee":"acct_1","reference":"a&b"}`

func TestProviderOnceAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, firstBody := b.post(t, "k-1", body1)
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" ||
		first.Header.Get("Location") != "/transfers/k-1" || first.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("first: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	var tr map[string]any
	if err := json.Unmarshal(firstBody, &tr); err != nil {
		t.Fatal(err)
	}
	if tr["id"] != "tr_1" || tr["key"] != "k-1" || tr["amount"] != "12.50" || tr["currency"] != "EUR" ||
		tr["payee"] != "acct_1" || tr["reference"] != "a&b" || tr["status"] != "executed" || tr["created_at"] == nil {
		t.Errorf("transfer %s", firstBody)
	}
	// Same canonical body: other member order and spacing.
	again, againBody := b.post(t, "k-1", ` {"reference":"a&b", "payee":"acct_1","currency":"EUR","amount":"12.50"}`)
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(againBody, firstBody) {
		t.Errorf("replay: %d %v %s, first %s", again.StatusCode, again.Header, againBody, firstBody)
	}
	if resp, got := b.do(t, http.MethodGet, "/transfers/k-1", "", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(got, firstBody) {
		t.Errorf("GET: %d %s", resp.StatusCode, got)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d, want 1", n)
	}
}

func TestProviderConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, firstBody := b.post(t, "k", body1)
	for _, body := range []string{
		`{"amount":"12.5","currency":"EUR","payee":"acct_1","reference":"a&b"}`, // canonical JSON keeps "12.5" ≠ "12.50"
		`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`,
		`{}`,
	} {
		resp, out := b.post(t, "k", body)
		wantProblem(t, body, resp, out, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
	}
	if resp, got := b.do(t, http.MethodGet, "/transfers/k", "", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(got, firstBody) {
		t.Errorf("GET after conflicts: %d %s", resp.StatusCode, got)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d, want 1", n)
	}
}

func TestProviderGetByKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, out := b.do(t, http.MethodGet, "/transfers/never", "", "")
	wantProblem(t, "unknown key", resp, out, http.StatusNotFound, "NOT_FOUND")
	const odd = "idem:op/1?x=%"
	first, firstBody := b.post(t, odd, `{"amount":"1.00"}`)
	if first.StatusCode != http.StatusCreated || first.Header.Get("Location") != "/transfers/"+url.PathEscape(odd) {
		t.Fatalf("post: %d %v", first.StatusCode, first.Header)
	}
	if resp, got := b.do(t, http.MethodGet, first.Header.Get("Location"), "", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(got, firstBody) {
		t.Errorf("GET %s: %d %s", first.Header.Get("Location"), resp.StatusCode, got)
	}
}

func TestProviderStatsCountsDistinct(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := map[string]bool{}
	for i, key := range []string{"a", "b", "a", "c", "b", "a"} {
		resp, out := b.post(t, key, `{"payee":"p"}`)
		var tr struct{ ID string }
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &tr) != nil {
			t.Fatalf("post %d: %d %s", i, resp.StatusCode, out)
		}
		ids[tr.ID] = true
	}
	if n := b.stats(t); n != 3 || len(ids) != 3 || !ids["tr_1"] || !ids["tr_3"] {
		t.Errorf("executed %d, ids %v; want 3 distinct", n, ids)
	}
}

func TestProviderRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name   string
		keys   []string
		body   string
		status int
		code   string
	}{
		{"no key", nil, body1, 400, "KEY_MISSING"},
		{"empty key", []string{""}, body1, 400, "KEY_MISSING"},
		{"two keys", []string{"a", "b"}, body1, 400, "KEY_MULTIPLE"},
		{"space in key", []string{"a b"}, body1, 400, "KEY_INVALID"},
		{"long key", []string{strings.Repeat("k", 256)}, body1, 400, "KEY_INVALID"},
		{"truncated", []string{"k"}, `{"amount":`, 400, "INVALID_JSON"},
		{"array", []string{"k"}, `[1]`, 400, "INVALID_JSON"},
		{"duplicate member", []string{"k"}, `{"a":1,"a":2}`, 400, "INVALID_JSON"},
		{"empty body", []string{"k"}, ``, 400, "INVALID_JSON"},
		{"too large", []string{"k"}, `{"a":"` + strings.Repeat("x", MaxBody) + `"}`, 413, "BODY_TOO_LARGE"},
	} {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/transfers", strings.NewReader(c.body))
		for _, k := range c.keys {
			req.Header.Add("Idempotency-Key", k)
		}
		resp, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantProblem(t, c.name, resp, out, c.status, c.code)
	}
	if n := b.stats(t); n != 0 {
		t.Errorf("refused requests executed %d transfers", n)
	}
}

func TestProviderConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 50
	type result struct {
		status   int
		replayed string
		body     []byte
		err      error
	}
	history := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, out, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", "same", body1)
			if err != nil {
				history[i] = result{err: err}
				return
			}
			history[i] = result{resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), out, nil}
		})
	}
	wg.Wait()
	firsts := 0
	for i, r := range history {
		if r.err != nil || r.status != http.StatusCreated || !bytes.Equal(r.body, history[0].body) {
			t.Errorf("request %d: %+v, request 0 answered %s", i, r, history[0].body)
		}
		if r.replayed == "" {
			firsts++
		}
	}
	if n := b.stats(t); n != 1 || firsts != 1 {
		t.Errorf("executed %d, %d answers not replayed; want 1 and 1", n, firsts)
	}
}
