package canon

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMemberKeysOrderAndFold covers the prefix keys that sort members and
// screen case-only duplicates: names sharing their first eight bytes or
// more, shorter than eight bytes, holding zero bytes (escaped), and objects
// of every size up to past the pairwise limit (32) and the insertion-sort
// limit (16). Each object is written sorted by bytes exactly as a plain
// byte sort orders it, and the same object with one name repeated with its
// case changed at any position, before or after the eighth byte, is
// refused.
func TestMemberKeysOrderAndFold(t *testing.T) {
	stems := []string{"", "a", "ab", "abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefgh\\u0000", "abcdefg\\u0000", "ABCDEFGHz", "abcdefgH_x"}
	for n := 1; n <= 40; n++ {
		var names []string
		for i := range n {
			names = append(names, stems[i%len(stems)]+strconv.Itoa(i/len(stems))+strings.Repeat("q", i%3))
		}
		var in strings.Builder
		in.WriteByte('{')
		for i, nm := range names {
			if i > 0 {
				in.WriteByte(',')
			}
			in.WriteString(`"` + nm + `":` + strconv.Itoa(i))
		}
		in.WriteByte('}')
		got, err := (Options{}).Append(nil, []byte(in.String()))
		if err != nil {
			t.Fatalf("n=%d: %v (%s)", n, err, in.String())
		}
		// The expected order: decoded names sorted as bytes.
		type kv struct {
			dec, raw string
			v        int
		}
		var kvs []kv
		for i, nm := range names {
			kvs = append(kvs, kv{strings.ReplaceAll(nm, `\u0000`, "\x00"), strings.ReplaceAll(nm, `\u0000`, `\u0000`), i})
		}
		slices.SortFunc(kvs, func(a, b kv) int { return bytes.Compare([]byte(a.dec), []byte(b.dec)) })
		var want strings.Builder
		want.WriteByte('{')
		for i, e := range kvs {
			if i > 0 {
				want.WriteByte(',')
			}
			want.WriteString(`"` + e.raw + `":` + strconv.Itoa(e.v))
		}
		want.WriteByte('}')
		if string(got) != want.String() {
			t.Errorf("n=%d:\n got %s\nwant %s", n, got, want.String())
		}
		// A case-only duplicate of each name, its case changed at
		// each letter in turn.
		for d, nm := range names {
			for p := 0; p < len(nm); p++ {
				c := nm[p]
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') || (p > 0 && nm[p-1] == '\\') {
					continue
				}
				dup := nm[:p] + string(c^0x20) + nm[p+1:]
				bad := strings.TrimSuffix(in.String(), "}") + `,"` + dup + `":-1}`
				_, err := (Options{}).Append(nil, []byte(bad))
				var ce *Error
				if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "differ only in case") {
					t.Errorf("n=%d dup of %d (%q) at %d: err %v", n, d, dup, p, err)
				}
			}
		}
	}
}
