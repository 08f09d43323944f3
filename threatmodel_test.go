package idem_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestThreatModelNamesRealTests: every test docs/threat-model.md cites as
// the proof of a control exists — a func TestX or FuzzX in a _test.go
// file of the module, and for TestConformance/Case a case of the
// conformance suite — so the document cannot cite a test that was renamed
// or never written. (CI runs every test of the module.)
func TestThreatModelNamesRealTests(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/threat-model.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "registry/registrytest/") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := sources.String()
	cited := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)(?:/([A-Za-z0-9_]+))?`").FindAllStringSubmatch(string(doc), -1)
	if len(cited) < 20 {
		t.Fatalf("docs/threat-model.md cites %d tests; want every threat covered", len(cited))
	}
	for _, c := range cited {
		if !strings.Contains(src, "func "+c[1]+"(") {
			t.Errorf("docs/threat-model.md cites %s, which no _test.go file defines", c[1])
		}
		if c[2] != "" && !strings.Contains(src, `{"`+c[2]+`", `) && !strings.Contains(src, `t.Run("`+c[2]+`"`) {
			t.Errorf("docs/threat-model.md cites %s/%s, which is no subtest of it", c[1], c[2])
		}
	}
}
