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

// TestThreatModelTiesTestsToThreats: every threat of docs/threat-model.md
// that cites a proof is tagged `threat:<slug>`, and is tied to its proofs
// both ways. Every test its
// row cites says `threat:<slug>` in its doc comment or body (for
// TestConformance/Case: in the case's function), so a test cannot be
// cited for a threat it does not know it proves; and every `threat:<slug>`
// a test says names a tagged threat whose row cites that test, so a proof
// cannot silently lose its threat.
func TestThreatModelTiesTestsToThreats(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/threat-model.md")
	if err != nil {
		t.Fatal(err)
	}
	funcs := testFuncs(t)
	cite := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)(?:/([A-Za-z0-9_]+))?`")
	tag := regexp.MustCompile("threat:([a-z0-9]+(?:-[a-z0-9]+)*)")
	rows := map[string]map[string]bool{} // slug → the tests its row cites
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(line, "|")
		m := regexp.MustCompile("^\\s*`threat:([a-z0-9-]+)`").FindStringSubmatch(cells[1])
		if m == nil {
			if cite.MatchString(line) {
				t.Errorf("a row cites tests but names no threat (`threat:<slug>` first in its first cell): %.80s", line)
			}
			continue
		}
		slug := m[1]
		if rows[slug] != nil {
			t.Errorf("threat:%s tags two rows", slug)
		}
		rows[slug] = map[string]bool{}
		cited := cite.FindAllStringSubmatch(line, -1)
		if len(cited) == 0 {
			t.Errorf("threat:%s cites no test", slug)
		}
		for _, c := range cited {
			rows[slug][c[0][1:len(c[0])-1]] = true
			text := funcs[c[1]]
			if c[2] != "" {
				if fn, ok := conformanceCase(funcs, c[2]); ok && c[1] == "TestConformance" {
					text += funcs[fn]
				}
			}
			if !strings.Contains(text, "threat:"+slug) {
				t.Errorf("threat:%s cites %s, whose doc comment or body does not say threat:%s", slug, c[0], slug)
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/threat-model.md tags no threat")
	}
	for name, text := range funcs {
		for _, m := range tag.FindAllStringSubmatch(text, -1) {
			slug := m[1]
			switch {
			case rows[slug] == nil:
				t.Errorf("%s says threat:%s, which tags no row of docs/threat-model.md", name, slug)
			case !rows[slug][name] && !citedAsCase(rows[slug], funcs, name) && !citedSubtest(rows[slug], name):
				t.Errorf("%s says threat:%s, but that threat's row does not cite it", name, slug)
			}
		}
	}
}

// testFuncs maps every top-level function of the module's _test.go files
// and of registry/registrytest to its doc comment and body.
func testFuncs(t *testing.T) map[string]string {
	t.Helper()
	funcs := map[string]string{}
	decl := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?([A-Za-z0-9_]+)[\[(]`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") && !(strings.HasPrefix(path, "registry/registrytest/") && strings.HasSuffix(path, ".go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		locs := decl.FindAllStringSubmatchIndex(src, -1)
		starts := make([]int, len(locs)+1)
		for i, l := range locs {
			start := l[0]
			// The doc comment: the // lines right above the func line.
			for start > 0 {
				prev := strings.LastIndex(src[:start-1], "\n") + 1
				if !strings.HasPrefix(src[prev:start-1], "//") {
					break
				}
				start = prev
			}
			starts[i] = start
		}
		starts[len(locs)] = len(src)
		for i, l := range locs {
			funcs[src[l[2]:l[3]]] += src[starts[i]:starts[i+1]]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// conformanceCase returns the function the conformance suite runs as the
// case named name.
func conformanceCase(funcs map[string]string, name string) (string, bool) {
	m := regexp.MustCompile(`\{"` + regexp.QuoteMeta(name) + `", (test[A-Za-z0-9_]+)\}`).FindStringSubmatch(funcs["Run"] + allCases(funcs))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// allCases is the source that lists the conformance suite's cases.
func allCases(funcs map[string]string) string {
	var b strings.Builder
	for _, text := range funcs {
		if strings.Contains(text, "var cases = []struct") {
			b.WriteString(text)
		}
	}
	return b.String()
}

// citedAsCase reports whether fn is the function of a conformance case
// that cited (the test names a row cites) includes as TestConformance/Case.
func citedAsCase(cited map[string]bool, funcs map[string]string, fn string) bool {
	for _, m := range regexp.MustCompile(`\{"([A-Za-z0-9_]+)", `+regexp.QuoteMeta(fn)+`\}`).FindAllStringSubmatch(allCases(funcs), -1) {
		if cited["TestConformance/"+m[1]] {
			return true
		}
	}
	return false
}

// citedSubtest reports whether cited (the test names a row cites)
// includes a subtest of the test fn.
func citedSubtest(cited map[string]bool, fn string) bool {
	for c := range cited {
		if strings.HasPrefix(c, fn+"/") {
			return true
		}
	}
	return false
}
