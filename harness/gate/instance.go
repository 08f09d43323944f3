package gate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/example/payments"
)

// Instance timeouts.
const (
	startTimeout = 60 * time.Second // until "listening on"
	stopTimeout  = 40 * time.Second // from SIGTERM to exit (serve waits up to 30 s for requests)
	logKeep      = 64 << 10         // bytes of an instance's log kept for error messages
)

// instance is one "idem serve" (or "idem provider") child process in its
// own process group.
type instance struct {
	name string
	cmd  *exec.Cmd
	log  *tailLog
	url  string
	// op is the operation whose reservation histogram scrape reads; ""
	// means payments.OperationCreate.
	op     string
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, set before exited closes
}

var addrRE = regexp.MustCompile(`listening on ([^\s"]+)`)

// startInstance runs "BIN serve --addr 127.0.0.1:0 ARGS…" and returns once
// it logged "listening on ADDR". env, if any, is added to the gate's
// environment (IDEM_FAILPOINTS=…). On failure the process is killed.
func startInstance(ctx context.Context, name, bin string, args, env []string) (*instance, error) {
	return startChild(ctx, name, bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), env)
}

// startChild runs "BIN ARGS…" and returns once it logged "listening on
// ADDR" (idem serve and idem provider both do).
func startChild(ctx context.Context, name, bin string, args, env []string) (*instance, error) {
	in := &instance{
		name:   name,
		cmd:    exec.Command(bin, args...),
		log:    &tailLog{ready: make(chan string, 1)},
		exited: make(chan struct{}),
	}
	if len(env) > 0 {
		in.cmd.Env = append(os.Environ(), env...)
	}
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in.cmd.Stdout, in.cmd.Stderr = in.log, in.log
	if err := in.cmd.Start(); err != nil {
		return nil, fmt.Errorf("gate: starting %s: %w", bin, err)
	}
	go func() { in.err = in.cmd.Wait(); close(in.exited) }()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case addr := <-in.log.ready:
		in.url = "http://" + addr
		return in, nil
	case <-in.exited:
		return nil, fmt.Errorf("gate: %s exited before listening (%v):\n%s", name, in.err, in.log.String())
	case <-timer.C:
		in.kill()
		return nil, fmt.Errorf("gate: %s did not log \"listening on\" within %v:\n%s", name, startTimeout, in.log.String())
	case <-ctx.Done():
		in.kill()
		return nil, fmt.Errorf("gate: starting %s: %w", name, ctx.Err())
	}
}

// kill sends SIGKILL to the instance's process group and waits for it.
func (in *instance) kill() {
	syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
	<-in.exited
}

// stop sends SIGTERM and waits up to stopTimeout for a clean exit, then
// kills the group. It returns an error unless the instance exited 0.
func (in *instance) stop() error {
	select {
	case <-in.exited:
		return fmt.Errorf("gate: %s had exited on its own: %v", in.name, in.err)
	default:
	}
	syscall.Kill(in.cmd.Process.Pid, syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-in.exited:
		syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL) // stragglers of the group, if any
		if in.err != nil {
			return fmt.Errorf("gate: %s did not exit cleanly on SIGTERM: %v", in.name, in.err)
		}
		return nil
	case <-timer.C:
		in.kill()
		return fmt.Errorf("gate: %s did not exit within %v of SIGTERM; killed", in.name, stopTimeout)
	}
}

// scrape reads the instance's reservation histogram from GET /metrics.
func (in *instance) scrape(ctx context.Context) (Histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/metrics", nil)
	if err != nil {
		return Histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %w", in.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %s", in.name, resp.Status)
	}
	h, err := ParseReservationsOf(resp.Body, cmp.Or(in.op, payments.OperationCreate))
	if err != nil {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %w", in.name, err)
	}
	return h, nil
}

// tailLog keeps the end of a child's output and announces the address of
// its first "listening on" line. Safe for concurrent use.
type tailLog struct {
	mu      sync.Mutex
	buf     []byte
	partial []byte
	ready   chan string
	found   bool
}

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 2*logKeep {
		l.buf = append([]byte(nil), l.buf[len(l.buf)-logKeep:]...)
	}
	if l.found {
		return len(p), nil
	}
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if m := addrRE.FindStringSubmatch(line); m != nil {
			l.found = true
			l.partial = nil
			l.ready <- strings.Trim(m[1], `"`)
			break
		}
	}
	return len(p), nil
}

func (l *tailLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf
	if len(b) > logKeep {
		b = b[len(b)-logKeep:]
	}
	return string(b)
}

var errNoHistogram = errors.New("no idem_reservation_seconds histogram for the operation")
