package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// runCmd runs the idem command in process and returns its exit code,
// stdout and stderr.
func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	return code, out.String(), errb.String()
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"nope"}, {"help", "nope"}} {
		code, out, stderr := runCmd(t, "", args...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, `unknown command "nope"`) || !pointsToHelp(stderr, "idem help") {
			t.Errorf("%q: code %d, out %q, stderr %q", args, code, out, stderr)
		}
	}
	// "idem" alone is a usage error: two lines on stderr, not the list.
	if code, out, stderr := runCmd(t, ""); code != exitUsage || out != "" || !pointsToHelp(stderr, "idem help") {
		t.Errorf("idem: code %d, out %q, stderr %q", code, out, stderr)
	}
}

// pointsToHelp reports whether stderr, a usage error, is the error and
// one line naming help (the help command or flag), and no more: a long
// usage would scroll the error away.
func pointsToHelp(stderr, help string) bool {
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	return len(lines) == 2 && strings.Contains(lines[1], help)
}

// subcommands are every command and action as typed after "idem", with
// their summaries as "idem help" lists them.
func subcommands() map[string]string {
	m := map[string]string{}
	for _, c := range commands() {
		m[c.name] = c.summary
		for _, a := range c.actions {
			m[c.name+" "+a.name] = a.summary
		}
	}
	return m
}

// TestHelpListsCommands: "idem help", -h and --help list every command
// and every action with its one-line summary, on stdout, exit 0, in
// lines of at most 100 columns.
func TestHelpListsCommands(t *testing.T) {
	t.Parallel()
	_, want, _ := runCmd(t, "", "help")
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}} {
		code, out, stderr := runCmd(t, "", args...)
		if code != exitOK || stderr != "" || out != want {
			t.Fatalf("%q: code %d, stderr %q, out differs from idem help:\n%s", args, code, stderr, out)
		}
	}
	for name, summary := range subcommands() {
		if summary == "" || strings.Contains(summary, "\n") {
			t.Errorf("%q: summary %q, want one line", name, summary)
		}
		words := strings.Fields(name)
		line := regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(words[len(words)-1]) + ` +` + regexp.QuoteMeta(summary) + `$`)
		if !line.MatchString(want) {
			t.Errorf("help does not list %q with its summary %q:\n%s", name, summary, want)
		}
	}
	for _, a := range []string{"relay", "ops list", "ops show", "ops reconcile", "ops dead-letters", "ops requeue", "epoch bump", "drain on"} {
		if _, ok := subcommands()[a]; !ok {
			t.Errorf("%q has no summary in idem help", a)
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if utf8.RuneCountInString(l) > 100 {
			t.Errorf("help line wider than 100 columns: %q", l)
		}
	}
}

// TestCommandHelp: "idem help CMD", "idem CMD --help" and "idem CMD -h"
// print the same help — synopsis, summary, flags — on stdout and exit 0,
// for every command and every ops and shard action (epoch and drain have one help
// for their actions, which lists them); a bad flag prints the error and
// one line with the synopsis pointing to --help on stderr, and exits 2.
func TestCommandHelp(t *testing.T) {
	t.Parallel()
	for name, summary := range subcommands() {
		if name == "help" || name == "ops" || name == "shard" { // they print their actions: TestOpsUsage, TestShardUsage
			continue
		}
		words := strings.Fields(name)
		if words[0] != "ops" && words[0] != "shard" { // epoch and drain have one help, listing their actions
			name, summary = words[0], subcommands()[words[0]]
		}
		var first string
		for i, args := range [][]string{
			append([]string{"help"}, words...),
			append(slices.Clone(words), "--help"),
			append(slices.Clone(words), "-h"),
		} {
			code, out, stderr := runCmd(t, "", args...)
			if code != exitOK || stderr != "" || !strings.HasPrefix(out, "usage: idem "+name+" ") ||
				!strings.Contains(out, "\n"+summary+"\n") || !strings.Contains(out, "\nflags:\n  -") {
				t.Errorf("%q: code %d, stderr %q, out:\n%s\nwant the help on stdout, exit 0", args, code, stderr, out)
			}
			if i == 0 {
				first = out
			} else if out != first {
				t.Errorf("%q prints another help than idem help %s:\n%s\n---\n%s", args, name, out, first)
			}
		}
		code, out, stderr := runCmd(t, "", append(slices.Clone(words), "--no-such-flag")...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, "-no-such-flag") ||
			!strings.Contains(stderr, "usage: idem "+name+" ") || !pointsToHelp(stderr, "idem "+name+" --help") {
			t.Errorf("%s --no-such-flag: code %d, out %q, stderr:\n%s\nwant the usage on stderr, exit 2", name, code, out, stderr)
		}
	}
}

// jsonCommands are the commands and actions that take --json, as the
// README's "Commands" section says.
var jsonCommands = []string{"bench", "check", "drain", "epoch", "gate", "keys", "prune", "recover",
	"ops list", "ops show", "ops reconcile", "ops approve", "ops lookup", "ops dead-letters", "ops requeue", "ops audit", "version"}

// TestJSONFlag: exactly the commands of jsonCommands take --json, and
// the README says which those are.
func TestJSONFlag(t *testing.T) {
	t.Parallel()
	for name := range subcommands() {
		if name == "help" || name == "ops" {
			continue
		}
		_, out, _ := runCmd(t, "", append([]string{"help"}, strings.Fields(name)...)...)
		if got, want := strings.Contains(out, "\n  -json\n"), slices.Contains(jsonCommands, strings.Fields(name)[0]) || slices.Contains(jsonCommands, name); got != want {
			t.Errorf("%s: takes --json %v, want %v:\n%s", name, got, want, out)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const claim = "`bench`, `check`, `drain`, `epoch`, `gate`, `keys rotate`, `ops` (every action), `prune`, `recover` and `version` take `--json`"
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), claim) {
		t.Errorf("README.md does not say %q", claim)
	}
}
