// Package launch starts and stops child processes that announce their
// address with a "listening on ADDR" log line — "idem serve" and "idem
// provider" — so that the launch gate (harness/gate) and the end-to-end
// tests (e2e) start, watch and stop them one way.
//
// Start runs the program in its own process group, keeps its combined
// standard output and error, and returns once it logged its address.
// Stop asks it to end with SIGTERM and kills the whole group when it does
// not in time; Kill kills the group at once. When the child exits, what
// is left of its group is killed with it, and the group is never
// signalled after that: once the child is reaped its number may lead
// another process's group (internal/procgroup). WaitLog waits, without
// polling, until the child has logged a given text.
//
//	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
//	defer cancel()
//	c, err := launch.Start(ctx, launch.Spec{Bin: "idem", Args: []string{"serve", "--addr", "127.0.0.1:0"}})
//	if err != nil {
//		return err // the child is gone; err holds its output
//	}
//	defer c.Kill()
//	… http.Get(c.URL() + "/healthz") …
//	return c.Stop(0) // SIGTERM; SIGKILL after DefaultStopTimeout
//
// Errors about a child start with its name (Spec.Name) and carry no
// package prefix: callers add their own.
package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/procgroup"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM, before it kills
// the process group, when given a timeout of zero or less.
const DefaultStopTimeout = 10 * time.Second

var (
	// ErrExited says the child exited on its own: before it logged
	// "listening on" (Start), before Stop asked it to, or before it logged
	// what WaitLog waits for. The error wrapping it also wraps the exit
	// error (an *exec.ExitError unless it exited 0).
	ErrExited = errors.New("exited on its own")
	// ErrStopTimeout says the child did not exit within Stop's timeout of
	// SIGTERM, so Stop killed its process group.
	ErrStopTimeout = errors.New("killed with its process group")

	errExitZero = errors.New("exit status 0")
)

// Spec says what to run. Only Bin is required.
type Spec struct {
	// Bin is the program: a path, or a name looked up in $PATH.
	Bin string
	// Args are its arguments, without the program's name.
	Args []string
	// Env is added to this process's environment (a later entry for the
	// same name wins); nil adds nothing.
	Env []string
	// Dir is the working directory; "" means this process's.
	Dir string
	// Name names the child in errors; "" means Bin's base name and the
	// first argument ("idem serve").
	Name string
	// Output, if not nil, receives a copy of everything the child writes
	// to its standard output and error, as it comes, one write at a time.
	// Its errors are ignored.
	Output io.Writer
	// LogLimit, if positive, is how many bytes of output Log keeps (the
	// last ones); 0 keeps all of it.
	LogLimit int
}

func (s Spec) name() string {
	if s.Name != "" {
		return s.Name
	}
	name := filepath.Base(s.Bin)
	if len(s.Args) > 0 {
		name += " " + s.Args[0]
	}
	return name
}

// Child is a started program, in its own process group. Its methods are
// safe for concurrent use.
type Child struct {
	name   string
	args   []string
	cmd    *exec.Cmd
	group  *procgroup.Group // cmd's process group, signalled only while cmd is unreaped
	out    *output
	addr   string
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, set before exited closes
}

// Start runs spec.Bin in a new process group and returns once the child
// logged a line containing "listening on ADDR" (on either stream): ADDR
// is its addr= attribute when the line has one (slog's text form), else
// the word after "listening on".
//
// ctx bounds only that wait — give it a deadline: when it ends first,
// Start kills the process group. The child's life is not tied to ctx;
// end it with Stop or Kill. When the child exits before logging the line,
// the error wraps ErrExited. On every error no process is left running,
// and the error ends with the child's output so far.
func Start(ctx context.Context, spec Spec) (*Child, error) {
	if spec.Bin == "" {
		return nil, errors.New("launch: Spec.Bin is empty")
	}
	c := &Child{
		name:   spec.name(),
		args:   slices.Clone(spec.Args),
		cmd:    exec.Command(spec.Bin, spec.Args...),
		out:    newOutput(spec.LogLimit, spec.Output),
		exited: make(chan struct{}),
	}
	if len(spec.Env) > 0 {
		c.cmd.Env = append(os.Environ(), spec.Env...)
	}
	c.cmd.Dir = spec.Dir
	c.group = procgroup.New(c.cmd)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.group.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", c.name, err)
	}
	// Wait kills what is left of the group as the child exits, before it
	// reaps the child: after that the group's number may be another's.
	go func() { c.err = c.group.Wait(); close(c.exited) }()

	select {
	case <-c.out.ready:
	case <-c.exited:
		select {
		case <-c.out.ready: // it listened, then exited: Stop will say so
		default:
			return nil, fmt.Errorf("%s %w before logging \"listening on\": %w\n%s", c.name, ErrExited, exitError(c.err), c.out)
		}
	case <-ctx.Done():
		c.Kill()
		return nil, fmt.Errorf("%s did not log \"listening on\": %w\n%s", c.name, ctx.Err(), c.out)
	}
	c.addr = c.out.address()
	return c, nil
}

// Name returns the child's name (Spec.Name or its default).
func (c *Child) Name() string { return c.name }

// Args returns a copy of the arguments it was started with (Spec.Args).
func (c *Child) Args() []string { return slices.Clone(c.args) }

// Pid returns its process ID, which is also its process group's ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Addr returns the address it announced, such as "127.0.0.1:43127".
func (c *Child) Addr() string { return c.addr }

// URL returns "http://" and Addr.
func (c *Child) URL() string { return "http://" + c.addr }

// Log returns its output so far, stdout and stderr interleaved as
// written (the last Spec.LogLimit bytes, if set).
func (c *Child) Log() string { return c.out.String() }

// WaitLog waits until the child's output, from its start, contains substr
// (a line of it, when substr holds no newline). It is woken by every
// write, never by a timer. It fails with ctx's error when ctx ends first,
// and with an error wrapping ErrExited when the child exits without
// writing substr. With a Spec.LogLimit, text cut from the log before
// WaitLog looked at it is not found.
func (c *Child) WaitLog(ctx context.Context, substr string) error {
	return c.WaitLogFrom(ctx, substr, 0)
}

// LogSize is how many bytes the child has written so far: a mark from
// which WaitLogFrom looks.
func (c *Child) LogSize() int64 { return c.out.size() }

// WaitLogFrom is WaitLog looking only at what the child wrote from the
// mark from (LogSize) on: a line written again, not the earlier one.
func (c *Child) WaitLogFrom(ctx context.Context, substr string, from int64) error {
	for {
		found, next, changed := c.out.search(substr, from)
		if found {
			return nil
		}
		from = next
		select {
		case <-changed:
		case <-c.exited: // no more writes: cmd.Wait has read the output to the end
			if found, _, _ := c.out.search(substr, from); found {
				return nil
			}
			return fmt.Errorf("%s %w without logging %q: %w", c.name, ErrExited, substr, exitError(c.err))
		case <-ctx.Done():
			return fmt.Errorf("%s did not log %q: %w", c.name, substr, ctx.Err())
		}
	}
}

// Signal sends sig to the child's process (not to its group). Once the
// child has exited it returns an error wrapping os.ErrProcessDone.
func (c *Child) Signal(sig os.Signal) error {
	if err := c.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: sending %v: %w", c.name, sig, err)
	}
	return nil
}

// Stop ends the child: SIGTERM to its process, then up to timeout (zero
// or less means DefaultStopTimeout) for it to exit, then SIGKILL to its
// process group (whose other members die with the child in any case). It
// returns nil only when the child exited with status 0 after the SIGTERM.
// Otherwise the error wraps ErrExited (it had exited before Stop was
// called), ErrStopTimeout (killed), or the exit error (*exec.ExitError).
// Stop returns once the child has exited.
func (c *Child) Stop(timeout time.Duration) error {
	timeout = cmp.Or(max(timeout, 0), DefaultStopTimeout)
	select {
	case <-c.exited:
		return fmt.Errorf("%s had %w: %w", c.name, ErrExited, exitError(c.err))
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		if !errors.Is(err, os.ErrProcessDone) {
			c.Kill()
			return fmt.Errorf("%s: sending SIGTERM: %w", c.name, err)
		}
		<-c.exited // it exited between the check above and the signal
		return fmt.Errorf("%s had %w: %w", c.name, ErrExited, exitError(c.err))
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-c.exited:
		if c.err != nil {
			return fmt.Errorf("%s did not exit cleanly on SIGTERM: %w", c.name, c.err)
		}
		return nil
	case <-timer.C:
		c.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM: %w", c.name, timeout, ErrStopTimeout)
	}
}

// Kill sends SIGKILL to the child's process group and waits until the
// child has exited. After the child exited on its own (what was left of
// its group died with it) it sends nothing and returns nil.
func (c *Child) Kill() error {
	err := c.group.Signal(syscall.SIGKILL)
	if err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: killing its process group: %w", c.name, err)
	}
	<-c.exited
	return nil
}

// Exited returns a channel closed once the child has exited and its
// output has been read to the end. The other processes of its group, if
// any, are killed as it exits, so none of them holds the output open.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Wait waits until the child has exited and returns how: nil for status
// 0, else the *exec.ExitError (see ExitSignal).
func (c *Child) Wait() error {
	<-c.exited
	return c.err
}

// ExitSignal returns the signal that ended a process, given Wait's error;
// ok is false when the process exited by itself (or err is not an exit
// error).
func ExitSignal(err error) (sig syscall.Signal, ok bool) {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 0, false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// exitError is err, or an error saying "exit status 0" for nil.
func exitError(err error) error { return cmp.Or(err, errExitZero) }
