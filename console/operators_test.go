package console_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/console"
)

// TestLoadOperators: a good file loads; malformed ones, and tokens that
// cannot hold 128 random bits (one character, 13, a single repeated one),
// are refused. threat:console-token-weak
func TestLoadOperators(t *testing.T) {
	t.Parallel()
	ops, err := console.ParseOperators([]byte(`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "alice", "show_responses": true}, "tok-bob-Hd3sF6gJ0aK9wE2rU7iO": {"name": "bob"}}`))
	if err != nil || len(ops) != 2 || ops["tok-alice-Zr4kW9pQ2mX7vT1nB8y"] != (console.Operator{Name: "alice", ShowResponses: true}) || ops["tok-bob-Hd3sF6gJ0aK9wE2rU7iO"] != (console.Operator{Name: "bob"}) {
		t.Fatalf("ParseOperators: %+v, %v", ops, err)
	}
	for name, in := range map[string]string{
		"not JSON":            `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": `,
		"duplicate token":     `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "alice"}, "tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "bob"}}`,
		"unknown member":      `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "alice", "admin": true}}`,
		"empty name":          `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": " "}}`,
		"no name":             `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {}}`,
		"null":                `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": null}`,
		"duplicate name":      `{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "alice"}, "tok-bob-Hd3sF6gJ0aK9wE2rU7iO": {"name": "alice"}}`,
		"empty token":         `{"": {"name": "alice"}}`,
		"token with space":    `{"a b": {"name": "alice"}}`,
		"one-character token": `{"x": {"name": "alice"}}`,
		"short token":         `{"op-alice-7f3c": {"name": "alice"}}`,
		"low-variety token":   `{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": {"name": "alice"}}`,
		"no operators":        `{}`,
		"array":               `[]`,
	} {
		if ops, err := console.ParseOperators([]byte(in)); err == nil {
			t.Errorf("%s: accepted %+v", name, ops)
		}
	}
	path := filepath.Join(t.TempDir(), "ops.json")
	if _, err := console.LoadOperators(path); err == nil {
		t.Errorf("missing file accepted")
	}
	os.WriteFile(path, []byte(`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"name": "alice"}}`), 0o600)
	if ops, err := console.LoadOperators(path); err != nil || ops["tok-alice-Zr4kW9pQ2mX7vT1nB8y"].Name != "alice" {
		t.Errorf("LoadOperators: %+v %v", ops, err)
	}
	if _, err := console.New(console.Config{Operators: ops}); err == nil {
		t.Errorf("New without Store accepted")
	}
}
