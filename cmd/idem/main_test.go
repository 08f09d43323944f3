package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
	code, _, stderr := runCmd(t, "", "nope")
	if code != exitUsage || !strings.Contains(stderr, `unknown command "nope"`) {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
}

func TestHelpListsCommands(t *testing.T) {
	code, _, stderr := runCmd(t, "", "help")
	if code != exitOK {
		t.Fatalf("code %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(stderr, c.name) {
			t.Errorf("help does not list %q:\n%s", c.name, stderr)
		}
	}
}
