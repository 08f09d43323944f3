package idem_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/idemkit/idem/internal/deployfiles"
)

// promtool returns promtool's path; without it the test skips, or fails
// when IDEM_REQUIRE_PROMTOOL is set (as .ci/run sets it).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("promtool not found and IDEM_REQUIRE_PROMTOOL is set: install Debian's prometheus package")
		}
		t.Skip("promtool not found (Debian's prometheus package); set IDEM_REQUIRE_PROMTOOL=1 to fail instead of skipping")
	}
	return path
}

// TestAlertRules runs promtool on deploy/prometheus: the rules check
// (syntax, templates) and the unit tests of rules_test.yml, where each
// alert fires on some series and not on others.
// threat:alert-blind-spot
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "rules.yml"},
		{"test", "rules", "rules_test.yml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "deploy/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// headingSlug is the anchor GitHub gives a Markdown heading: lower case,
// punctuation but "-" and "_" dropped, spaces as "-".
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestAlertRunbooks: every alert of deploy/prometheus/rules.yml links a
// runbook that exists — docs/operations.md and a heading of it — and is
// made to fire by one of rules_test.yml's cases; and every link to an
// anchor within docs/operations.md (the runbooks link each other) lands
// on a heading.
// threat:alert-blind-spot
func TestAlertRunbooks(t *testing.T) {
	rulesText, err := os.ReadFile("deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := deployfiles.RuleFile(string(rulesText))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules.Alerts) < 10 {
		t.Fatalf("rules.yml has %d alerts; the reader found too few", len(rules.Alerts))
	}
	ops, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} +(.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[headingSlug(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(ops), -1) {
		if !anchors[m[1]] {
			t.Errorf("docs/operations.md links #%s, which none of its headings is", m[1])
		}
	}
	tests, err := os.ReadFile("deploy/prometheus/rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	fired := firedInTests(string(tests))
	for _, a := range rules.Alerts {
		doc, anchor, ok := strings.Cut(a.RunbookURL, "#")
		if !ok || doc != "docs/operations.md" || !anchors[anchor] {
			t.Errorf("alert %s: runbook_url %q is not a heading of docs/operations.md", a.Name, a.RunbookURL)
		}
		if !fired[a.Name] {
			t.Errorf("alert %s fires in no case of rules_test.yml", a.Name)
		}
	}
}

// firedInTests returns the alerts a promtool test file expects to fire:
// an "alertname: X" whose case lists an exp_labels before the next case.
func firedInTests(text string) map[string]bool {
	fired := map[string]bool{}
	name := ""
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "- eval_time:") || strings.HasPrefix(l, "- interval:"):
			name = ""
		case strings.HasPrefix(l, "alertname:"):
			name = strings.TrimSpace(strings.TrimPrefix(l, "alertname:"))
		case strings.HasPrefix(l, "- exp_labels:") && name != "":
			fired[name] = true
		}
	}
	return fired
}
