package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// waitIdle waits until no request is held.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.WaitNoneHeld(ctx); err != nil {
		t.Fatalf("%d requests still held: %v", s.Hung(), err)
	}
}

func waitHung(t *testing.T, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.WaitHung(ctx, n); err != nil {
		t.Fatalf("waiting for %d held requests (%d held): %v", n, s.Hung(), err)
	}
}

func TestProviderFailMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.post(t, "before", body1)
	b.control(t, ModeFail)
	resp, out := b.post(t, "new", body1)
	wantProblem(t, "fail mode", resp, out, http.StatusServiceUnavailable, "PROVIDER_FAILURE")
	if resp, _ := b.do(t, http.MethodGet, "/transfers/new", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET after fail: %d", resp.StatusCode)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d after fail mode, want 1", n)
	}
	b.control(t, ModeOK)
	if resp, _ := b.post(t, "new", body1); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" || b.stats(t) != 2 {
		t.Errorf("ok after fail: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestProviderFailAfter is a 5xx that is no proof of anything: the
// transfer executed, and the key answers it from then on.
func TestProviderFailAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeFailAfter)
	resp, out := b.post(t, "k", body1)
	wantProblem(t, "fail-after", resp, out, http.StatusServiceUnavailable, "PROVIDER_FAILURE")
	got, executed := b.do(t, http.MethodGet, "/transfers/k", "", "")
	if got.StatusCode != http.StatusOK || !strings.Contains(string(executed), `"status":"executed"`) || b.stats(t) != 1 {
		t.Fatalf("after fail-after: GET %d %s, executed %d", got.StatusCode, executed, b.stats(t))
	}
	// Still in fail-after: the key is known, so it is answered, not failed.
	again, againBody := b.post(t, "k", body1)
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(againBody, executed) {
		t.Errorf("retry: %d %v %s", again.StatusCode, again.Header, againBody)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d, want 1", n)
	}
}

// TestProviderDecline checks that a decline is final for its key: the
// same answer in every mode, never an execution.
func TestProviderDecline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeDecline)
	first, firstBody := b.post(t, "d", body1)
	wantProblem(t, "decline", first, firstBody, http.StatusUnprocessableEntity, "DECLINED")
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first decline marked replayed")
	}
	for _, m := range []Mode{ModeDecline, ModeOK, ModeFail, ModeFailAfter, ModeHang, ModeHangBefore} {
		b.control(t, m)
		resp, out := b.post(t, "d", body1)
		if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(out, firstBody) {
			t.Errorf("%s: %d %v %s, want the first decline %s", m, resp.StatusCode, resp.Header, out, firstBody)
		}
		resp, out = b.do(t, http.MethodGet, "/transfers/d", "", "")
		if resp.StatusCode != http.StatusOK || string(out) != `{"key":"d","status":"declined","code":"DECLINED"}` {
			t.Errorf("%s: GET %d %s", m, resp.StatusCode, out)
		}
	}
	b.control(t, ModeOK)
	resp, out := b.post(t, "d", `{"amount":"1.00"}`)
	wantProblem(t, "declined key, other body", resp, out, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
	if resp, out := b.do(t, http.MethodGet, "/stats", "", ""); string(out) != `{"executed":0,"declined":1}` {
		t.Errorf("stats: %d %s", resp.StatusCode, out)
	}
	if resp, out := b.do(t, http.MethodGet, "/transfers", "", ""); resp.StatusCode != http.StatusOK || string(out) != `[]` {
		t.Errorf("GET /transfers: %d %s", resp.StatusCode, out)
	}
}

// TestProviderExecutedKeyEveryMode checks that an executed key is answered
// with its transfer at once whatever the mode, and only new keys feel it.
func TestProviderExecutedKeyEveryMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, executed := b.post(t, "k", body1)
	for _, m := range []Mode{ModeFail, ModeFailAfter, ModeDecline, ModeHang, ModeHangBefore, ModeOK} {
		b.control(t, m)
		resp, out := b.post(t, "k", body1)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(out, executed) {
			t.Errorf("%s: %d %v %s", m, resp.StatusCode, resp.Header, out)
		}
		resp, out = b.post(t, "k", `{"amount":"2.00"}`)
		wantProblem(t, string(m)+" conflict", resp, out, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		if resp, out := b.do(t, http.MethodGet, "/transfers/k", "", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(out, executed) {
			t.Errorf("%s: GET %d %s", m, resp.StatusCode, out)
		}
	}
	if b.srv.Hung() != 0 || b.stats(t) != 1 {
		t.Errorf("held %d, executed %d; want 0 and 1", b.srv.Hung(), b.stats(t))
	}
}

func TestProviderListTransfers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string
	for _, key := range []string{"c", "a", "c", "b"} {
		_, out := b.post(t, key, `{"payee":"p_`+key+`"}`)
		if !slices.Contains(want, string(out)) {
			want = append(want, string(out))
		}
	}
	b.control(t, ModeDecline)
	b.post(t, "x", `{"payee":"p_x"}`)
	b.control(t, ModeFailAfter)
	_, failed := b.post(t, "y", `{"payee":"p_y"}`)
	got, _ := b.srv.Transfer("y")
	if strings.Contains(string(failed), "p_y") || got == nil {
		t.Fatalf("fail-after: answered %s, recorded %s", failed, got)
	}
	want = append(want, string(got))
	resp, out := b.do(t, http.MethodGet, "/transfers", "", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
		string(out) != "["+strings.Join(want, ",")+"]" {
		t.Errorf("GET /transfers: %d %s\nwant [%s]", resp.StatusCode, out, strings.Join(want, ","))
	}
	var list []struct{ ID, Payee string }
	if err := json.Unmarshal(out, &list); err != nil || len(list) != 4 || list[0].ID != "tr_1" || list[3].Payee != "p_y" {
		t.Errorf("list %+v: %v", list, err)
	}
}

func TestProviderControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ body, code string }{
		{`{"mode":"sometimes"}`, "MODE_INVALID"},
		{`{}`, "MODE_INVALID"},
		{`{"mode":`, "INVALID_JSON"},
	} {
		resp, out := b.do(t, http.MethodPost, "/control", "", c.body)
		wantProblem(t, c.body, resp, out, http.StatusBadRequest, c.code)
	}
	b.control(t, ModeHangBefore)
	if resp, out := b.do(t, http.MethodGet, "/control", "", ""); resp.StatusCode != http.StatusOK || string(out) != `{"mode":"hang-before","hung":0}` {
		t.Errorf("GET /control: %d %s", resp.StatusCode, out)
	}
	resp, out := b.do(t, http.MethodGet, "/control?wait_hung=x", "", "")
	wantProblem(t, "wait_hung=x", resp, out, http.StatusBadRequest, "INVALID_QUERY")
	held := make(chan error, 1)
	go func() {
		_, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", "w", body1)
		held <- err
	}()
	if resp, out := b.do(t, http.MethodGet, "/control?wait_hung=1", "", ""); resp.StatusCode != http.StatusOK || string(out) != `{"mode":"hang-before","hung":1}` {
		t.Errorf("GET /control?wait_hung=1: %d %s", resp.StatusCode, out)
	}
	b.control(t, ModeOK)
	if err := <-held; err != nil {
		t.Error(err)
	}
	if _, err := ParseMode("HANG"); err == nil {
		t.Error("ParseMode accepted HANG")
	}
	if err := b.srv.SetMode("off"); err == nil || b.srv.Mode() != ModeOK {
		t.Errorf("SetMode(off): %v, mode %s", err, b.srv.Mode())
	}
}

// TestProviderHangTimeoutAfterEffect is the unknown outcome: the caller
// gives up (as on a timeout), yet the transfer was executed, and a retry
// with the same key finds it. The caller gives up once the provider holds
// the request — not on a timer, which a loaded machine can beat to it, so
// the request would never be held.
func TestProviderHangTimeoutAfterEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHang)
	ctx, giveUp := context.WithCancel(t.Context())
	defer giveUp()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.ts.URL+"/transfers", strings.NewReader(body1))
	req.Header.Set("Idempotency-Key", "lost")
	done := make(chan error, 1)
	go func() {
		resp, err := b.ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitHung(t, b.srv, 1)
	giveUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v, want the request given up", err)
	}
	waitIdle(t, b.srv) // the client left, so the held request ended
	resp, executed := b.do(t, http.MethodGet, "/transfers/lost", "", "")
	if resp.StatusCode != http.StatusOK || b.stats(t) != 1 {
		t.Fatalf("after the timeout: GET %d %s, executed %d", resp.StatusCode, executed, b.stats(t))
	}
	b.control(t, ModeOK)
	again, againBody := b.post(t, "lost", body1)
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" ||
		!bytes.Equal(againBody, executed) || b.stats(t) != 1 {
		t.Errorf("retry: %d %v %s, executed %d", again.StatusCode, again.Header, againBody, b.stats(t))
	}
}

func TestProviderHangReleasedByModeChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHang)
	keys := []string{"h1", "h2"}
	answers := make(chan string, len(keys))
	for _, key := range keys {
		go func() {
			resp, out, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", key, body1)
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- resp.Status + " " + string(out)
		}()
	}
	waitHung(t, b.srv, len(keys))
	b.srv.SetMode(ModeHang) // the same mode again releases nothing
	if n := b.stats(t); n != 2 || b.srv.Hung() != len(keys) {
		t.Fatalf("while held: executed %d, held %d; want 2 and %d", n, b.srv.Hung(), len(keys))
	}
	// The executed key is answered at once while its first request is held.
	if resp, out := b.post(t, "h1", body1); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("h1 while held: %d %s", resp.StatusCode, out)
	}
	b.control(t, ModeOK)
	for range keys {
		if a := <-answers; !strings.HasPrefix(a, "201 ") || !strings.Contains(a, `"status":"executed"`) {
			t.Errorf("released answer %s", a)
		}
	}
	waitIdle(t, b.srv)
}

func TestProviderHangBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHangBefore)
	answers := make(chan int, 2)
	for _, key := range []string{"x", "y"} {
		go func() {
			resp, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", key, body1)
			if err != nil {
				answers <- 0
				return
			}
			answers <- resp.StatusCode
		}()
	}
	waitHung(t, b.srv, 2)
	if resp, _ := b.do(t, http.MethodGet, "/transfers/x", "", ""); resp.StatusCode != http.StatusNotFound || b.stats(t) != 0 {
		t.Fatalf("held before executing: GET %d, executed %d", resp.StatusCode, b.stats(t))
	}
	b.control(t, ModeFail) // released into fail mode: nothing executes
	for range 2 {
		if s := <-answers; s != http.StatusServiceUnavailable {
			t.Errorf("released into fail: %d", s)
		}
	}
	if n := b.stats(t); n != 0 {
		t.Errorf("executed %d after hang-before then fail", n)
	}

	// A client that leaves while held executes nothing.
	b.control(t, ModeHangBefore)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.ts.URL+"/transfers", strings.NewReader(body1))
	req.Header.Set("Idempotency-Key", "z")
	go func() {
		if resp, err := b.ts.Client().Do(req); err == nil {
			resp.Body.Close()
		}
		answers <- 0
	}()
	waitHung(t, b.srv, 1)
	cancel()
	<-answers
	waitIdle(t, b.srv)
	b.control(t, ModeOK)
	if n := b.stats(t); n != 0 {
		t.Errorf("executed %d after the client left", n)
	}
}

// TestProviderHangBeforeSameKey releases two held requests of one key: one
// executes, the other starts over and finds the execution.
func TestProviderHangBeforeSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHangBefore)
	replayed := make(chan string, 2)
	for range 2 {
		go func() {
			resp, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", "s", body1)
			if err != nil || resp.StatusCode != http.StatusCreated {
				replayed <- "error"
				return
			}
			replayed <- resp.Header.Get("Idempotent-Replayed")
		}()
	}
	waitHung(t, b.srv, 2)
	b.control(t, ModeOK)
	got := []string{<-replayed, <-replayed}
	slices.Sort(got)
	if got[0] != "" || got[1] != "true" || b.stats(t) != 1 {
		t.Errorf("answers %q, executed %d; want one first answer, one replay, 1 execution", got, b.stats(t))
	}
}

// TestProviderCountedMode sets modes for a number of new-key requests: a
// known key does not count, the mode reverts to ok by itself, and a
// counted hang holds its request until the next POST /control.
func TestProviderCountedMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	get := func() string {
		t.Helper()
		_, out := b.do(t, http.MethodGet, "/control", "", "")
		return string(out)
	}
	b.post(t, "known", body1)
	if resp, out := b.do(t, http.MethodPost, "/control", "", `{"mode":"decline","count":2}`); resp.StatusCode != http.StatusOK ||
		string(out) != `{"mode":"decline","count":2}` {
		t.Fatalf("counted control: %d %s", resp.StatusCode, out)
	}
	if resp, _ := b.post(t, "known", body1); resp.StatusCode != http.StatusCreated || get() != `{"mode":"decline","hung":0,"count":2}` {
		t.Errorf("a known key counted: %d, control %s", resp.StatusCode, get())
	}
	for _, key := range []string{"d1", "d2"} {
		resp, out := b.post(t, key, body1)
		wantProblem(t, key, resp, out, http.StatusUnprocessableEntity, "DECLINED")
	}
	if c := get(); c != `{"mode":"ok","hung":0}` {
		t.Errorf("after the count: control %s", c)
	}
	if resp, _ := b.post(t, "after", body1); resp.StatusCode != http.StatusCreated {
		t.Errorf("after the count: %d", resp.StatusCode)
	}

	// A counted hang holds its one request past the revert to ok.
	if err := b.srv.SetModeCount(ModeHang, 1); err != nil {
		t.Fatal(err)
	}
	held := make(chan int, 1)
	go func() {
		resp, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", "h", body1)
		if err != nil {
			held <- 0
			return
		}
		held <- resp.StatusCode
	}()
	waitHung(t, b.srv, 1)
	if resp, _ := b.post(t, "free", body1); resp.StatusCode != http.StatusCreated || get() != `{"mode":"ok","hung":1}` {
		t.Errorf("after a counted hang: %d, control %s", resp.StatusCode, get())
	}
	b.control(t, ModeOK) // the mode in force, yet it releases what the count held
	if s := <-held; s != http.StatusCreated {
		t.Errorf("released: %d", s)
	}
	waitIdle(t, b.srv)
	if n := b.stats(t); n != 4 {
		t.Errorf("executed %d, want 4 (known, after, h, free)", n)
	}

	resp, out := b.do(t, http.MethodPost, "/control", "", `{"mode":"fail","count":-1}`)
	wantProblem(t, "negative count", resp, out, http.StatusBadRequest, "MODE_INVALID")
	if err := b.srv.SetModeCount(ModeFail, -1); err == nil {
		t.Error("SetModeCount accepted a negative count")
	}
}
