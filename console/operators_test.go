package console_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/console"
)

// TestLoadOperators: a good file loads; malformed ones are refused.
func TestLoadOperators(t *testing.T) {
	t.Parallel()
	ops, err := console.ParseOperators([]byte(`{"t1": {"name": "alice", "show_responses": true}, "t2": {"name": "bob"}}`))
	if err != nil || len(ops) != 2 || ops["t1"] != (console.Operator{Name: "alice", ShowResponses: true}) || ops["t2"] != (console.Operator{Name: "bob"}) {
		t.Fatalf("ParseOperators: %+v, %v", ops, err)
	}
	for name, in := range map[string]string{
		"not JSON":         `{"t1": `,
		"duplicate token":  `{"t1": {"name": "alice"}, "t1": {"name": "bob"}}`,
		"unknown member":   `{"t1": {"name": "alice", "admin": true}}`,
		"empty name":       `{"t1": {"name": " "}}`,
		"no name":          `{"t1": {}}`,
		"null":             `{"t1": null}`,
		"duplicate name":   `{"t1": {"name": "alice"}, "t2": {"name": "alice"}}`,
		"empty token":      `{"": {"name": "alice"}}`,
		"token with space": `{"a b": {"name": "alice"}}`,
		"no operators":     `{}`,
		"array":            `[]`,
	} {
		if ops, err := console.ParseOperators([]byte(in)); err == nil {
			t.Errorf("%s: accepted %+v", name, ops)
		}
	}
	path := filepath.Join(t.TempDir(), "ops.json")
	if _, err := console.LoadOperators(path); err == nil {
		t.Errorf("missing file accepted")
	}
	os.WriteFile(path, []byte(`{"t1": {"name": "alice"}}`), 0o600)
	if ops, err := console.LoadOperators(path); err != nil || ops["t1"].Name != "alice" {
		t.Errorf("LoadOperators: %+v %v", ops, err)
	}
	if _, err := console.New(console.Config{Operators: ops}); err == nil {
		t.Errorf("New without Store accepted")
	}
}
