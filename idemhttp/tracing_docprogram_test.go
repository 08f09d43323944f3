package idemhttp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/docprogram"
)

// printedSpan is a span as the program of docs/tracing.md prints it.
type printedSpan struct {
	Name, Trace, Span, Parent string
	Attributes                map[string]string
	line                      string
}

// TestTracingDocProgram: the traced service of docs/tracing.md, built in
// a fresh module and run (only its listen address is changed), prints
// the spans of a payment posted with a traceparent — idem.run (executed,
// the caller's span its parent), idem.reserve and idem.execute — and of
// its retry — idem.run (replayed), idem.reserve (which found the record)
// and idem.replay — all in the caller's
// trace; its /metrics scraped as OpenMetrics holds an exemplar with that
// trace's ID; no printed span holds the key or the user.
// threat:trace-leaks-key
func TestTracingDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a fresh module")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	src := docprogram.Source(t, "docs/tracing.md", "<!-- tracing-program", `"127.0.0.1:8083"`, `"`+addr+`"`)
	dir, bin := docprogram.Build(t, src)
	cmd := exec.Command(bin)
	cmd.Dir = dir
	var out, logs syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	const traceID, parent = "5f1c0e7b9d2a43c8a1b6e4d7c2f90a13", "7a3e91c4d05b2f68"
	const key, user = "pay-7Hq2xLm9Rt4Vz8Kc", "user-e5b1a9"
	post := func() (*http.Response, string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/payments", strings.NewReader(`{"amount":"12.50"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("X-User", user)
			req.Header.Set("Traceparent", "00-"+traceID+"-"+parent+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the program does not answer: %v\n%s", err, logs.String())
			}
			time.Sleep(50 * time.Millisecond) // polling for the program to listen
		}
	}
	first, b1 := post()
	again, b2 := post()
	if first.StatusCode != http.StatusCreated || again.StatusCode != http.StatusCreated || b1 != b2 || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("payment and retry: %d %q, %d %q %v\n%s", first.StatusCode, b1, again.StatusCode, b2, again.Header, logs.String())
	}

	// The spans are exported synchronously, before each response is
	// sent; the program's stdout reaches out through a pipe: wait for
	// the last one, the retry's idem.run, to be read.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"idem.outcome":"replayed"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the retry's idem.run was not printed within 10 s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the program's output
	}
	var spans []printedSpan
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var s printedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("the program printed %q: %v", sc.Text(), err)
		}
		s.line = sc.Text()
		spans = append(spans, s)
	}
	var got []string
	runs := map[string]string{} // span ID → outcome of each idem.run
	for _, s := range spans {
		if s.Trace != traceID {
			t.Errorf("span %s is in trace %s, not the caller's", s.Name, s.Trace)
		}
		if s.Name == "idem.run" {
			runs[s.Span] = s.Attributes["idem.outcome"]
			if s.Parent != parent || s.Attributes["idem.operation"] != "payments.create" {
				t.Errorf("idem.run: parent %s, %v; want the caller's span %s", s.Parent, s.Attributes, parent)
			}
		}
		if strings.Contains(s.line, key) || strings.Contains(s.line, user) {
			t.Errorf("span %s holds the key or the user: %s", s.Name, s.line)
		}
	}
	for _, s := range spans {
		if s.Name == "idem.run" {
			got = append(got, "run:"+s.Attributes["idem.outcome"])
		} else {
			got = append(got, s.Name+"<"+runs[s.Parent])
		}
	}
	want := "[idem.reserve<executed idem.execute<executed run:executed idem.reserve<replayed idem.replay<replayed run:replayed]"
	if fmt.Sprint(got) != want {
		t.Errorf("spans %v, want %s\n%s", got, want, out.String())
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	exemplar := `# {trace_id="` + traceID + `"}`
	found := false
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "idem_reservation_seconds_bucket{") && strings.Contains(line, exemplar) {
			found = true
		}
	}
	if !found {
		t.Errorf("no idem_reservation_seconds bucket carries the exemplar %s:\n%s", exemplar, metrics)
	}
}
