package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// saveArtifacts runs in the test's cleanup: when the test failed, or
// IDEM_FAULT_KEEP=1, it writes to a new directory under
// $IDEM_FAULT_ARTIFACTS (default os.TempDir()), and logs its path:
//
//	history.jsonl     every exchange, one JSON object a line, in send order
//	db.json           payments, outbox and operation rows, the provider's count
//	server-NAME.log   each child process's output
//	seed              the run's seed and the base seed to rerun it with
//
// The servers were registered after the run, so their cleanups have
// stopped them by now and their logs are complete; the database is
// dropped only after this (pgtest registered its cleanup first).
func (f *faultRun) saveArtifacts() {
	t := f.t
	if !t.Failed() && os.Getenv(faultKeepEnv) != "1" {
		return
	}
	root := os.Getenv(faultArtifactsEnv)
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Logf("artifacts: %v", err)
		return
	}
	dir, err := os.MkdirTemp(root, "idem-fault-"+unsafeName.ReplaceAllString(t.Name(), "_")+"-")
	if err != nil {
		t.Logf("artifacts: %v", err)
		return
	}
	write := func(name string, fill func(w *bufio.Writer) error) {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Logf("artifacts: %v", err)
			return
		}
		defer fh.Close()
		w := bufio.NewWriter(fh)
		if err := fill(w); err == nil {
			err = w.Flush()
		}
		if err != nil {
			t.Logf("artifacts: %s: %v", name, err)
		}
	}
	write("history.jsonl", func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		for _, e := range f.hist.exchanges() {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	})
	// The rows as they are now; the provider has stopped, so its count
	// comes from the last snapshot checked, if any.
	snap, err := f.readSnapshot(false)
	f.mu.Lock()
	if last := f.last; last != nil {
		if err != nil {
			snap = last
		} else {
			snap.ProviderExecuted = last.ProviderExecuted
		}
	}
	f.mu.Unlock()
	if err != nil {
		t.Logf("artifacts: reading the database again: %v", err)
	}
	write("db.json", func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(snap)
	})
	write("seed", func(w *bufio.Writer) error {
		_, err := w.WriteString("seed " + strconv.FormatUint(f.seed, 10) + "\nbase seed " + strconv.FormatUint(baseSeed(), 10) +
			"\nrerun: go test ./e2e -run '^" + t.Name() + "$' -fault.seed=" + strconv.FormatUint(baseSeed(), 10) + "\n")
		return err
	})
	f.mu.Lock()
	servers := append([]*server(nil), f.servers...)
	f.mu.Unlock()
	for i, s := range servers {
		name := s.name
		if name == "" {
			name = strconv.Itoa(i)
		}
		write("server-"+unsafeName.ReplaceAllString(name, "_")+".log", func(w *bufio.Writer) error {
			_, err := w.WriteString(s.child.Log())
			return err
		})
	}
	t.Logf("fault artifacts saved in %s", dir)
}
