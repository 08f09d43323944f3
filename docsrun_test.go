package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/procgroup"
)

// runnableDocs are the files whose marked blocks TestRunnableDocs runs.
var runnableDocs = []string{"README.md", "docs/check.md", "docs/operations.md"}

// A runnable block is a fenced block right after a line
//
//	<!-- runnable -->             run it, and wait for any server it started with &
//	<!-- runnable: background --> start it in the background, then wait for it to listen
//
// optionally followed — before the next runnable block, prose may stand
// between — by a line "<!-- output -->" and a fenced block: the block's
// stdout, with "…" matching anything within a line and a line of
// "…" alone matching any number of lines; runs of spaces count as one,
// and the output gets the same rewrites as the block. A block without an output
// block must exit 0.
type runnableBlock struct {
	file, opts string
	line       int // of the marker
	script     string
	output     string // "" when the block has none
	hasOutput  bool
}

var (
	runnableMarker = regexp.MustCompile(`^<!-- runnable(?:: ([a-z ]+))? -->$`)
	outputMarker   = "<!-- output -->"
)

// parseRunnable returns the runnable blocks of a markdown text.
func parseRunnable(file, text string) ([]runnableBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []runnableBlock
	fenced := func(i int) (body string, end int, err error) {
		if i >= len(lines) || !strings.HasPrefix(lines[i], "```") {
			return "", 0, fmt.Errorf("%s:%d: a marker must be followed by a fenced block", file, i+1)
		}
		for j := i + 1; j < len(lines); j++ {
			if lines[j] == "```" {
				return strings.Join(lines[i+1:j], "\n") + "\n", j, nil
			}
		}
		return "", 0, fmt.Errorf("%s:%d: unterminated fenced block", file, i+1)
	}
	for i := 0; i < len(lines); i++ {
		m := runnableMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := runnableBlock{file: file, opts: m[1], line: i + 1}
		script, end, err := fenced(i + 1)
		if err != nil {
			return nil, err
		}
		b.script, i = script, end
		// Its output block, if any, is the next one before the next
		// runnable block: prose may stand between them.
		for j := i + 1; j < len(lines) && !runnableMarker.MatchString(lines[j]); j++ {
			if lines[j] == outputMarker {
				out, end, err := fenced(j + 1)
				if err != nil {
					return nil, err
				}
				b.output, b.hasOutput, i = out, true, end
				break
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// outputPattern turns an output block into the regular expression the
// block's stdout must match in full.
func outputPattern(tmpl string) *regexp.Regexp {
	var re strings.Builder
	re.WriteString(`^`)
	for _, l := range strings.Split(strings.TrimSuffix(tmpl, "\n"), "\n") {
		l = collapseSpaces(l)
		if l == "…" {
			re.WriteString(`(?:[^\n]*\n)*?`)
			continue
		}
		parts := strings.Split(l, "…")
		for k, p := range parts {
			if k > 0 {
				re.WriteString(`[^\n]*?`)
			}
			re.WriteString(regexp.QuoteMeta(p))
		}
		re.WriteString(`\n`)
	}
	re.WriteString(`$`)
	return regexp.MustCompile(re.String())
}

// TestRunnableDocs runs every block of runnableDocs marked runnable, in
// order, one bash session per file (so a block sees the variables and
// servers of the blocks before it), and fails when a block's stdout
// drifts from its output block or a block without one fails. To run
// them here, as written:
//
//   - "go run ./cmd/idem" is the idem binary built once, also on PATH as
//     idem;
//   - 127.0.0.1:8080 and :9090 are free ports, and "idem serve" and
//     "idem provider" without --addr get --addr with those;
//   - the session runs in a scratch directory whose entries link to the
//     checkout's, so files the blocks write (auth.json, demo.db) stay out
//     of the checkout;
//   - when the session ends, its process group (servers started with &)
//     is killed.
func TestRunnableDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds idem and runs servers")
	}
	for _, tool := range []string{"bash", "curl", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the runnable docs need %s: %v", tool, err)
		}
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "idem"), "./cmd/idem")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, file := range runnableDocs {
		t.Run(filepath.Base(file), func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseRunnable(file, string(text))
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) == 0 {
				t.Fatalf("%s has no runnable block", file)
			}
			runSession(t, root, bin, blocks)
		})
	}
}

// runSession runs blocks in one bash session and checks each one's
// stdout and exit status.
func runSession(t *testing.T, root, bin string, blocks []runnableBlock) {
	scratch := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(scratch, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	serve, provider := freePort(t), freePort(t)
	rewrite := strings.NewReplacer("go run ./cmd/idem", "idem", "127.0.0.1:8080", "127.0.0.1:"+serve, "127.0.0.1:9090", "127.0.0.1:"+provider)
	var script strings.Builder
	script.WriteString("wait_port() { for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo \"port $1 never listened\" >&2; return 1; }\n")
	for i, b := range blocks {
		body := rewrite.Replace(b.script)
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			for cmd, port := range map[string]string{"idem serve": serve, "idem provider": provider} {
				if strings.Contains(l, cmd) && !strings.Contains(l, "--addr") {
					l = strings.Replace(l, cmd, cmd+" --addr 127.0.0.1:"+port, 1)
				}
			}
			lines = append(lines, l)
		}
		body = strings.TrimRight(strings.Join(lines, "\n"), "\n")
		background := b.opts == "background"
		if background {
			body += " &"
		}
		fmt.Fprintf(&script, "echo '@@block %d'\n%s\necho \"@@status $?\"\n", i, body)
		if background || regexp.MustCompile(`&\s*(#.*)?$`).MatchString(body) {
			for _, p := range []string{serve, provider} {
				if strings.Contains(body, "127.0.0.1:"+p) {
					fmt.Fprintf(&script, "wait_port %s\n", p)
				}
			}
		}
	}
	// The servers the blocks started hold the session's stdout: stop them
	// when the last block is done, so that the output ends.
	script.WriteString("kill $(jobs -p) 2>/dev/null; wait\n")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// bash leads a process group; the servers the blocks started, which
	// may outlive it, are killed with it (procgroup.Group.Wait).
	group := procgroup.New(cmd)
	cmd.WaitDelay = 10 * time.Second // a server that escaped the job list does not hold the test
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = group.Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := group.Wait(); err != nil {
		t.Fatalf("the session failed: %v\nstderr:\n%s", err, stderr.String())
	}
	outs := strings.Split(strings.ReplaceAll(stdout.String(), "\r", ""), "@@block ")[1:]
	if len(outs) != len(blocks) {
		t.Fatalf("%d blocks ran, want %d\nstdout:\n%s\nstderr:\n%s", len(outs), len(blocks), stdout.String(), stderr.String())
	}
	for i, b := range blocks {
		_, out, _ := strings.Cut(outs[i], "\n")
		at := strings.LastIndex(out, "@@status ")
		status, _ := strconv.Atoi(strings.TrimSpace(out[at+len("@@status "):]))
		out = out[:at]
		switch {
		case b.hasOutput && !outputPattern(rewrite.Replace(b.output)).MatchString(normalizeOutput(out)):
			t.Errorf("%s:%d: the block's output drifted from the documented one.\ngot:\n%s\ndocumented:\n%s\nstderr of the session:\n%s",
				b.file, b.line, out, b.output, tail(stderr.String(), 3000))
		case !b.hasOutput && status != 0:
			t.Errorf("%s:%d: the block exited %d.\nstdout:\n%s\nstderr of the session:\n%s", b.file, b.line, status, out, tail(stderr.String(), 3000))
		}
	}
}

// collapseSpaces trims s's trailing spaces and makes each run of spaces
// one: a table's column widths follow its widest cell, which may differ
// from run to run.
func collapseSpaces(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// normalizeOutput is out as matched: no carriage returns, spaces
// collapsed in every line.
func normalizeOutput(out string) string {
	lines := strings.Split(strings.ReplaceAll(out, "\r", ""), "\n")
	for i, l := range lines {
		lines[i] = collapseSpaces(l)
	}
	return strings.Join(lines, "\n")
}

// freePort is a port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestOutputPattern: the output blocks' wildcards match what they say
// and no more.
func TestOutputPattern(t *testing.T) {
	for _, c := range []struct {
		tmpl, out string
		match     bool
	}{
		{"a…c\n", "abc\n", true},
		{"a…c\n", "ab\nc\n", false},
		{"x\n…\ny\n", "x\n1\n2\ny\n", true},
		{"x\n…\ny\n", "x\ny\n", true},
		{"x\ny\n", "x\ny\nz\n", false},
		{"(1+1)\n", "(1+1)\n", true},
		{"(1+1)\n", "11\n", false},
		{"a   b  …\n", "a b c\n", true}, // runs of spaces are one, as normalizeOutput leaves them
	} {
		if got := outputPattern(c.tmpl).MatchString(c.out); got != c.match {
			t.Errorf("template %q on %q: %v, want %v", c.tmpl, c.out, got, c.match)
		}
	}
}
