package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// hostile is stored text that would drive a terminal: an escape sequence
// that recolours and retitles it, a carriage return that overwrites the
// line, DEL, a C1 CSI, a right-to-left override and an isolate, a backslash.
const hostile = "tr_9\x1b[31mRED\x1b]0;pwned\x07\rX\x7f\u009b2J\u202eevil\u2066x\u2069\\n"

// terminalSafe reports the first rune of out a terminal must not get raw:
// a C0 control but the line break, DEL, a C1 control, a bidi override or
// isolate. ok is true when there is none.
func terminalSafe(out string) (r rune, ok bool) {
	for _, r := range out {
		if r < 0x20 && r != '\n' || r == 0x7f || unsafeRune(r) || r == utf8.RuneError {
			return r, false
		}
	}
	return 0, true
}

// TestPrintable: printable escapes C0 and C1 controls, DEL, bidi
// overrides and isolates, bytes that are not UTF-8 and the backslash, and
// leaves other text, accents and emoji included, as it is.
// threat:cli-terminal-injection
func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, é, 日本, 🙂":     "plain text, é, 日本, 🙂",
		"a\nb\tc\rd":               `a\nb\tc\rd`,
		"\x1b[31m\x00\x7f":         `\x1b[31m\x00\x7f`,
		"\u0085\u009b":             `\u0085\u009b`,
		"\u202a\u202e\u2066\u2069": `\u202a\u202e\u2066\u2069`,
		"\xff\xfe ok":              `\xff\xfe ok`,
		`back\slash`:               `back\\slash`,
		"\u2028 stays":             "\u2028 stays",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	b, _ := json.Marshal(map[string]string{"h": hostile})
	var back map[string]string
	if esc := escapeJSON(b); json.Unmarshal(esc, &back) != nil || back["h"] != hostile {
		t.Errorf("escapeJSON changed the value: %s", esc)
	} else if r, ok := terminalSafe(string(esc)); !ok {
		t.Errorf("escapeJSON left %U in %s", r, esc)
	}
}

// TestOpsEscapesStoredText: a downstream handle, an operator's evidence
// and an audit detail holding terminal escapes, bidi overrides and
// controls are shown by "idem ops show", "idem ops audit" and their
// --json forms escaped: nothing a terminal would act on reaches it.
// threat:cli-terminal-injection
func TestOpsEscapesStoredText(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		_, rec := s.operation(idem.StateReserved)
		ctx := t.Context()
		if _, err := s.BeginEffect(ctx, rec, payments.EffectTransfer, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		rec, err := s.MarkUnknown(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordEffect(ctx, rec, payments.EffectTransfer, hostile, "", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendAudit(ctx, registry.AuditEntry{Actor: "op\u202eerator", Action: "lookup", OperationID: rec.OperationID, Detail: "answered " + hostile}); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"ops", "show", rec.OperationID, "--db", dsn},
			{"ops", "show", rec.OperationID, "--json", "--db", dsn},
			{"ops", "audit", "--db", dsn},
			{"ops", "audit", "--json", "--db", dsn},
		} {
			code, out, stderr := runCmd(t, "", args...)
			if code != exitOK {
				t.Fatalf("%q: code %d, stderr %q", args, code, stderr)
			}
			if r, ok := terminalSafe(out); !ok {
				t.Errorf("%q printed %U raw:\n%q", args, r, out)
			}
			if !strings.Contains(out, "tr_9") || !strings.Contains(out, "RED") {
				t.Errorf("%q does not show the handle's text:\n%q", args, out)
			}
		}
	})
}
