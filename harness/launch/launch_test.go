package launch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds every Start and WaitLog of the tests; the children
// are local and ready in milliseconds.
const startTimeout = 30 * time.Second

// start starts a helper and kills it when the test ends.
func start(t *testing.T, s Spec) *Child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Kill() })
	return c
}

// get fetches path from c and returns the body.
func get(t *testing.T, c *Child, path string) string {
	t.Helper()
	resp, err := http.Get(c.URL() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantSignal checks that err, Wait's result, reports death by sig.
func wantSignal(t *testing.T, err error, sig syscall.Signal) {
	t.Helper()
	if got, ok := ExitSignal(err); !ok || got != sig {
		t.Fatalf("exit %v: ExitSignal = %v, %v; want %v", err, got, ok, sig)
	}
}

// pidOf returns the pid a helper logged in its first line.
func pidOf(t *testing.T, log string) int {
	t.Helper()
	m := regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no pid in %q", log)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"serve", "slog"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var tee syncBuffer
			s := spec(mode)
			s.Dir, s.Output = t.TempDir(), &tee
			c := start(t, s)
			if host, port, err := net.SplitHostPort(c.Addr()); err != nil || host != "127.0.0.1" || port == "0" {
				t.Fatalf("Addr() = %q (%v); want 127.0.0.1:PORT", c.Addr(), err)
			}
			if c.URL() != "http://"+c.Addr() || c.Name() != "helper "+mode || c.Pid() <= 0 {
				t.Errorf("URL %q, Name %q, Pid %d", c.URL(), c.Name(), c.Pid())
			}
			get(t, c, "/say?m=served")
			if err := c.Stop(0); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			select {
			case <-c.Exited():
			default:
				t.Fatal("Exited not closed after Stop returned")
			}
			if err := c.Wait(); err != nil {
				t.Errorf("Wait = %v; want nil", err)
			}
			if _, ok := ExitSignal(c.Wait()); ok {
				t.Error("ExitSignal of a clean exit reports a signal")
			}
			log := c.Log()
			for _, want := range []string{"listening on " + c.Addr(), "served", "cwd " + s.Dir} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
			if tee.String() != log {
				t.Errorf("Output got %q; Log is %q", tee.String(), log)
			}
			if err := c.Stop(0); !errors.Is(err, ErrExited) {
				t.Errorf("second Stop = %v; want ErrExited", err)
			}
		})
	}
}

func TestStopUnclean(t *testing.T) {
	t.Parallel()
	c := start(t, spec("failterm"))
	err := c.Stop(0)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || errors.Is(err, ErrExited) || errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Stop = %v; want exit status 1", err)
	}
	if !strings.Contains(err.Error(), "helper failterm did not exit cleanly on SIGTERM") {
		t.Errorf("Stop's error %q does not name the child", err)
	}
}

func TestStopTimeout(t *testing.T) {
	t.Parallel()
	c := start(t, spec("stubborn"))
	err := c.Stop(100 * time.Millisecond)
	if !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Stop = %v; want ErrStopTimeout", err)
	}
	wantSignal(t, c.Wait(), syscall.SIGKILL)
}

func TestKill(t *testing.T) {
	t.Parallel()
	c := start(t, spec("serve"))
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, c.Wait(), syscall.SIGKILL)
	if err := c.Kill(); err != nil {
		t.Errorf("Kill after exit = %v; want nil", err)
	}
	err := c.Stop(0)
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Stop after Kill = %v; want ErrExited", err)
	}
	wantSignal(t, err, syscall.SIGKILL) // Stop's error wraps the exit error
	if err := c.Signal(syscall.SIGTERM); err == nil {
		t.Error("Signal after exit succeeded")
	}
}

func TestSignal(t *testing.T) {
	t.Parallel()
	c := start(t, spec("serve"))
	if err := c.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.WaitLog(ctx, "got user defined signal 1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
}

func TestStartNeverListens(t *testing.T) {
	t.Parallel()
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c, err := Start(ctx, spec("silent"))
		if c != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start = %v, %v; want context.DeadlineExceeded", c, err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		// ctx ends once the helper has logged its pid, so the error holds
		// it; by then the process must be gone (killed and reaped).
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s := spec("silent")
		s.Output = writerFunc(func(p []byte) {
			if bytes.Contains(p, []byte("\n")) {
				cancel()
			}
		})
		c, err := Start(ctx, s)
		if c != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Start = %v, %v; want context.Canceled", c, err)
		}
		pid := pidOf(t, err.Error())
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("signal 0 to the silent helper (pid %d): %v; want ESRCH", pid, err)
		}
	})
}

func TestStartExits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Start(ctx, spec("exit"))
	var exit *exec.ExitError
	if c != nil || !errors.Is(err, ErrExited) || !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Start = %v, %v; want ErrExited with exit status 3", c, err)
	}
	pidOf(t, err.Error()) // the output is in the error
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := Start(ctx, Spec{}); err == nil {
		t.Error("Start with no Bin succeeded")
	}
	if _, err := Start(ctx, Spec{Bin: "/nonexistent/idem", Args: []string{"serve"}}); err == nil || !strings.Contains(err.Error(), "idem serve") {
		t.Errorf("Start of a missing program = %v; want an error naming idem serve", err)
	}
}

func TestWaitLog(t *testing.T) {
	t.Parallel()
	c := start(t, spec("serve"))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.WaitLog(ctx, "listening on"); err != nil {
		t.Fatalf("WaitLog of a line already written: %v", err)
	}

	// A waiter started before the text comes is woken by the write; a
	// text split over two writes is found.
	done := make(chan error, 1)
	go func() { done <- c.WaitLog(ctx, "hello world") }()
	get(t, c, "/say?m=hello+w&m=orld")
	if err := <-done; err != nil {
		t.Fatalf("WaitLog: %v", err)
	}

	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if err := c.WaitLog(short, "never written"); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitLog with an ended ctx = %v; want context.Canceled", err)
	}

	done = make(chan error, 1)
	go func() { done <- c.WaitLog(ctx, "never written") }()
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrExited) {
		t.Errorf("WaitLog across the exit = %v; want ErrExited", err)
	}
	if err := c.WaitLog(ctx, "hello world"); err != nil {
		t.Errorf("WaitLog after the exit of a text written before: %v", err)
	}
}

func TestLogLimit(t *testing.T) {
	t.Parallel()
	s := spec("serve")
	s.LogLimit = 16
	c := start(t, s)
	get(t, c, "/say?m="+strings.Repeat("x", 40)+"&m=tail-0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.WaitLog(ctx, "tail-0123456789"); err != nil {
		t.Fatal(err)
	}
	if log := c.Log(); len(log) > 16 || !strings.HasSuffix(log, "tail-0123456789") {
		t.Errorf("Log() = %q; want the last 16 bytes", log)
	}
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`time=… level=INFO msg="listening on 127.0.0.1:8080" addr=127.0.0.1:8080`: "127.0.0.1:8080",
		`time=… level=INFO msg="listening on 127.0.0.1:1" addr=127.0.0.1:2 x=y`:   "127.0.0.1:2",
		`listening on [::1]:9000`:                 "[::1]:9000",
		`msg="listening on 127.0.0.1:7"`:          "127.0.0.1:7",
		`msg="listening on x" addr="127.0.0.1:5"`: "127.0.0.1:5",
		`listening at 127.0.0.1:8080`:             "",
		`level=INFO msg=started addr=127.0.0.1`:   "",
		`listening on `:                           "",
	} {
		got, ok := listenAddr(line)
		if got != want || ok != (want != "") {
			t.Errorf("listenAddr(%q) = %q, %v; want %q", line, got, ok, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writerFunc is an io.Writer calling f with every write.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
