package idemmysql

import (
	"slices"
	"testing"
)

// TestBind: $N placeholders become "?" in order of use, a repeated $N binds
// its argument again, and $N inside literals and comments is left alone.
func TestBind(t *testing.T) {
	for _, tc := range []struct {
		in       string
		args     []any
		want     string
		wantArgs []any
	}{
		{"SELECT 1", nil, "SELECT 1", nil},
		{"SELECT $2, $1, $2", []any{"a", "b"}, "SELECT ?, ?, ?", []any{"b", "a", "b"}},
		{"SELECT '$1', \"$2\", `$3`, $1 -- $2\n/* $3 */", []any{"a"}, "SELECT '$1', \"$2\", `$3`, ? -- $2\n/* $3 */", []any{"a"}},
		{"SELECT 'it''s $1', $10", []any{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "SELECT 'it''s $1', ?", []any{9}},
	} {
		got, args, err := bind(tc.in, tc.args)
		if err != nil || got != tc.want || !slices.Equal(args, tc.wantArgs) {
			t.Errorf("bind(%q) = %q %v %v, want %q %v", tc.in, got, args, err, tc.want, tc.wantArgs)
		}
	}
	if _, _, err := bind("SELECT $3", []any{1}); err == nil {
		t.Error("bind with too few arguments: no error")
	}
	if _, _, err := bind("SELECT 'open", nil); err == nil {
		t.Error("bind of an unterminated literal: no error")
	}
}
