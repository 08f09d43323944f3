package launch

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"
)

// readyText is what a child logs once it is bound; the address follows.
const readyText = "listening on "

var (
	addrAttr    = regexp.MustCompile(`\baddr=(\S+)`)
	listeningOn = regexp.MustCompile(`listening on ([^\s"]+)`)
)

// listenAddr returns the address a "listening on" line announces: its
// addr= attribute if it has one (slog's text form), else the word after
// "listening on", without quotes.
func listenAddr(line string) (string, bool) {
	if !strings.Contains(line, readyText) {
		return "", false
	}
	m := addrAttr.FindStringSubmatch(line)
	if m == nil {
		m = listeningOn.FindStringSubmatch(line)
	}
	if m == nil {
		return "", false
	}
	addr := strings.Trim(m[1], `"`)
	return addr, addr != ""
}

// output is a child's combined stdout and stderr: it keeps the text (the
// end of it, with a limit), copies it to an optional writer, announces the
// address of the first "listening on" line and wakes waiters on every
// write. Safe for concurrent use.
type output struct {
	mu      sync.Mutex
	buf     []byte
	dropped int64 // bytes cut from the front of buf to honour limit
	limit   int   // 0: keep everything
	tee     io.Writer
	changed chan struct{} // closed (and replaced) by every write
	partial []byte        // the unfinished last line, until the address is found
	addr    string
	ready   chan struct{} // closed once addr is set
}

func newOutput(limit int, tee io.Writer) *output {
	return &output{limit: limit, tee: tee, changed: make(chan struct{}), ready: make(chan struct{})}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if o.limit > 0 && len(o.buf) > 2*o.limit { // amortised: cut at twice the limit
		cut := len(o.buf) - o.limit
		o.buf = append([]byte(nil), o.buf[cut:]...)
		o.dropped += int64(cut)
	}
	if o.tee != nil {
		o.tee.Write(p) // best effort: a failing copy must not stall the child
	}
	if o.addr == "" {
		o.partial = append(o.partial, p...)
		for {
			i := bytes.IndexByte(o.partial, '\n')
			if i < 0 {
				break
			}
			line := string(o.partial[:i])
			o.partial = o.partial[i+1:]
			if addr, ok := listenAddr(line); ok {
				o.addr, o.partial = addr, nil
				close(o.ready)
				break
			}
		}
	}
	close(o.changed)
	o.changed = make(chan struct{})
	return len(p), nil
}

// String returns the kept text.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.buf
	if o.limit > 0 && len(b) > o.limit {
		b = b[len(b)-o.limit:]
	}
	return string(b)
}

// address returns the announced address, "" before the line came.
func (o *output) address() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.addr
}

// size is how many bytes were written so far, cut ones included.
func (o *output) size() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped + int64(len(o.buf))
}

// search reports whether substr occurs in the text from offset from (a
// count of bytes since the start of the output) on. When it does not, next
// is where the following search should start (so that a match spanning
// writes is found) and changed is closed by the next write.
func (o *output) search(substr string, from int64) (found bool, next int64, changed <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	start := min(max(from-o.dropped, 0), int64(len(o.buf))) // text cut away before it was searched is missed
	if bytes.Contains(o.buf[start:], []byte(substr)) {
		return true, 0, nil
	}
	end := o.dropped + int64(len(o.buf))
	return false, max(end-int64(len(substr))+1, from), o.changed
}
