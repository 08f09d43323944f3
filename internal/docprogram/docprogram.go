// Package docprogram builds the Go programs the documentation shows, so
// that tests run them as a reader would: the program is cut from its
// Markdown file, copied into a fresh module that requires this checkout
// (a replace directive) with the checkout's own requirements and go.sum,
// and built offline from the module cache the checkout's build filled.
package docprogram

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Source returns the first ```go block of the Markdown file doc (a path
// relative to the checkout's root) after the line holding marker, with
// each old string of replace (pairs: old, new, …) replaced; a missing
// block or a missing old string fails t, so a doc that drifted from its
// test is noticed.
func Source(t testing.TB, doc, marker string, replace ...string) []byte {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(Root(t), doc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(md, []byte(marker))
	_, rest, ok2 := bytes.Cut(rest, []byte("```go\n"))
	src, _, ok3 := bytes.Cut(rest, []byte("```\n"))
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s has no Go program after %q", doc, marker)
	}
	for i := 0; i+1 < len(replace); i += 2 {
		if !bytes.Contains(src, []byte(replace[i])) {
			t.Fatalf("the program of %s no longer holds %q; update this test", doc, replace[i])
		}
		src = bytes.ReplaceAll(src, []byte(replace[i]), []byte(replace[i+1]))
	}
	return src
}

// Build writes src as main.go of a fresh module in a temporary directory
// of t, requiring this checkout, builds it offline and returns the
// directory and the binary's path.
func Build(t testing.TB, src []byte) (dir, bin string) {
	t.Helper()
	root := Root(t)
	dir = t.TempDir()
	ours, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	_, requires, _ := bytes.Cut(ours, []byte("\nrequire"))
	gomod := "module demo\n\ngo 1.26\n\nrequire github.com/idemkit/idem v0.0.0\n\nreplace github.com/idemkit/idem => " + root +
		"\n\nrequire" + string(requires)
	for name, data := range map[string][]byte{"main.go": src, "go.mod": []byte(gomod), "go.sum": sums} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(dir, "program")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	// Offline: everything comes from the module cache the checkout's own
	// build filled.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir, bin
}

// Root is the checkout's root directory (where go.mod is).
func Root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("docprogram: no caller information")
	}
	return strings.TrimSuffix(filepath.Dir(filepath.Dir(filepath.Dir(file))), string(filepath.Separator))
}
