package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/docprogram"
)

// TestReadmeProgram: the README's library program, copied into a fresh
// module with a replace to this checkout, builds and runs (only its
// listen address is changed, to a free port). Its retry replays; a
// duplicate of a request in flight gets 409 with a Link that answers 200;
// after a crash mid-request (SIGKILL while the request waits at the
// before-commit failpoint) the restarted program heals the operation with
// no extra command — the client's retry continues the same operation
// within the lease — and the Link answers 200 for it too.
func TestReadmeProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a fresh module")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	src := docprogram.Source(t, "README.md", "<!-- library-program", `"127.0.0.1:8081"`, `"`+addr+`"`)
	dir, _ := docprogram.Build(t, src)

	base := "http://" + addr
	post := func(key, body string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
		req.Header.Set("X-User", "ann")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	monitor := func(link string) (int, string) {
		t.Helper()
		path, _, _ := strings.Cut(strings.TrimPrefix(link, "<"), ">")
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("X-User", "ann")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var v struct{ State string }
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v.State
	}

	// A normal run: executed, then replayed byte for byte.
	p := startProgram(t, dir, nil)
	p.awaitListening(t, base)
	first, body, err := post("0c9e5d1a-3b7f-4a26-9e84-5f1d2c7b6a30", `{"sku":"A-1"}`)
	if err != nil || first.StatusCode != http.StatusCreated {
		t.Fatalf("first request: %v %v %s", first, err, body)
	}
	again, body2, err := post("0c9e5d1a-3b7f-4a26-9e84-5f1d2c7b6a30", `{"sku":"A-1"}`)
	if err != nil || again.StatusCode != http.StatusCreated || !bytes.Equal(body, body2) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %v %v %s; want a replay of %s", again, err, body2, body)
	}
	if short, _, err := post("short", `{"sku":"A-1"}`); err != nil || short.StatusCode != http.StatusBadRequest {
		t.Errorf("a short key: %v %v; want 400 (the strict key policy)", short, err)
	}
	p.kill(t)

	// A crash mid-request.
	p = startProgram(t, dir, []string{"IDEM_FAILPOINTS=before-commit=pause"})
	p.awaitListening(t, base)
	go post("b8f4a2e6-91c3-4d57-a0e2-7c6b3f9d1e45", `{"sku":"B-2"}`) // waits at the failpoint until the kill
	p.awaitLog(t, "failpoint before-commit paused")
	busy, _, err := post("b8f4a2e6-91c3-4d57-a0e2-7c6b3f9d1e45", `{"sku":"B-2"}`)
	if err != nil || busy.StatusCode != http.StatusConflict || busy.Header.Get("Link") == "" {
		t.Fatalf("duplicate in flight: %v %v; want 409 with a Link", busy, err)
	}
	op := busy.Header.Get("Idempotency-Operation")
	if status, state := monitor(busy.Header.Get("Link")); status != http.StatusOK || state != "RESERVED" {
		t.Errorf("GET of the 409's Link: %d %q; want 200 RESERVED", status, state)
	}
	p.kill(t)
	killed := time.Now()
	p = startProgram(t, dir, nil)
	p.awaitListening(t, base)
	var healed *http.Response
	for healed == nil {
		resp, _, err := post("b8f4a2e6-91c3-4d57-a0e2-7c6b3f9d1e45", `{"sku":"B-2"}`)
		switch {
		case err != nil:
			t.Fatalf("retry after the crash: %v", err)
		case resp.StatusCode == http.StatusCreated:
			healed = resp
		case resp.StatusCode != http.StatusConflict:
			t.Fatalf("retry after the crash: %v; want 409 until the lease expires, then 201", resp)
		case time.Since(killed) > 30*time.Second:
			t.Fatal("not healed within 30 s of the crash (lease 2 s)")
		default:
			time.Sleep(200 * time.Millisecond) // the client's retry pace, as Retry-After asks
		}
	}
	if got := healed.Header.Get("Idempotency-Operation"); got != op {
		t.Errorf("the healed request is operation %s; the 409 named %s", got, op)
	}
	if status, state := monitor(busy.Header.Get("Link")); status != http.StatusOK || state != "SUCCEEDED" {
		t.Errorf("GET of the Link after healing: %d %q; want 200 SUCCEEDED", status, state)
	}
	t.Logf("healed %v after the crash", time.Since(killed).Round(time.Millisecond))
	p.kill(t)
}

// program is a running README program.
type program struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	wrote  chan struct{} // closed and replaced on every write
	exited chan struct{}
}

func startProgram(t *testing.T, dir string, env []string) *program {
	t.Helper()
	p := &program{cmd: exec.Command(filepath.Join(dir, "program")), wrote: make(chan struct{}), exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.kill(t) })
	return p
}

func (p *program) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(b)
	close(p.wrote)
	p.wrote = make(chan struct{})
	return len(b), nil
}

// awaitLog waits until the program has written substr.
func (p *program) awaitLog(t *testing.T, substr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		p.mu.Lock()
		out, ch := p.out.String(), p.wrote
		p.mu.Unlock()
		if strings.Contains(out, substr) {
			return
		}
		select {
		case <-ch:
		case <-p.exited:
			t.Fatalf("the program exited before writing %q:\n%s", substr, out)
		case <-ctx.Done():
			t.Fatalf("the program did not write %q within 30 s:\n%s", substr, out)
		}
	}
}

// awaitListening waits until the program accepts connections.
func (p *program) awaitListening(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("the program exited: %s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program does not listen: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // it prints nothing when it listens: poll the port
	}
}

// kill SIGKILLs the program and waits for it to exit.
func (p *program) kill(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}
