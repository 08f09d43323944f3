package canon

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestJSONModeCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"sorted members", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"sorted by UTF-8 bytes", `{"é":1,"z":2,"Y":3,"_":4}`, "{\"Y\":3,\"_\":4,\"z\":2,\"\u00e9\":1}"},
		{"nested sorting", `{"z":{"y":1,"x":[{"b":1,"a":2}]},"a":null}`, `{"a":null,"z":{"x":[{"a":2,"b":1}],"y":1}}`},
		{"whitespace dropped", " \t\n\r{ \"a\" :\n[ 1 ,\t2 ] , \"b\" : { } }\r\n ", `{"a":[1,2],"b":{}}`},
		{"array order kept", `[3,1,2,"b","a"]`, `[3,1,2,"b","a"]`},
		{"empty containers", `[{},[],""]`, `[{},[],""]`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
		{"top-level string", ` "x" `, `"x"`},
		{"top-level number", `-1.5e3`, `-1.5e3`},
		{"unicode escape of ASCII", `"\u0041\u0062"`, `"Ab"`},
		{"escaped solidus", `"a\/b"`, `"a/b"`},
		{"control char lower-case hex", `"\u001F\u001f\u0001\u0000"`, `"\u001f\u001f\u0001\u0000"`},
		{"short escapes kept", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{"short forms preferred", `"\u0008\u000C\u000a\u000D\u0009"`, `"\b\f\n\r\t"`},
		{"quote and backslash", `"\u0022\u005C\"\\"`, `"\"\\\"\\"`},
		{"non-ASCII written literally", `"\u00e9\u00E9é"`, "\"\u00e9\u00e9\u00e9\""},
		{"DEL and U+2028 literal", `"\u007f\u2028"`, "\"\x7f\u2028\""},
		{"surrogate pair decoded", `"\ud83d\ude00\uD834\uDD1E"`, "\"\U0001F600\U0001D11E\""},
		{"escaped noncharacter", `"\uffff\ufffe"`, "\"\uffff\ufffe\""},
		{"U+FFFD accepted", "\"\xef\xbf\xbd\"", "\"\ufffd\""},
		{"names normalised and sorted after decoding", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"escaped name", `{"\n":1,"\u0000":2}`, `{"\u0000":2,"\n":1}`},
		{"numbers kept lexically", `[10.0,10,1E2,1e+2,0.10,-0,-0.0,1e-400,123456789012345678901234567890]`, `[10.0,10,1E2,1e+2,0.10,-0,-0.0,1e-400,123456789012345678901234567890]`},
		{"solidus in name", `{"a\/b":1}`, `{"a/b":1}`},
		{"case differs but fold differs", `{"ab":1,"aB ":2}`, `{"aB ":2,"ab":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Options{}.Append(nil, []byte(tt.in))
			if err != nil {
				t.Fatalf("%s: %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("%s:\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Options{}.Append(nil, got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("not a fixed point: %s -> %s, %v", got, again, err)
			}
		})
	}
}

func TestJSONModeLexicalNumbersDiffer(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{{`{"n":10.0}`, `{"n":10}`}, {`[1E2]`, `[100]`}, {`-0`, `0`}, {`0.5`, `5e-1`}}
	for _, p := range pairs {
		a, errA := Options{}.Append(nil, []byte(p[0]))
		b, errB := Options{}.Append(nil, []byte(p[1]))
		if errA != nil || errB != nil || bytes.Equal(a, b) {
			t.Errorf("%s and %s: %s %v, %s %v; want different outputs", p[0], p[1], a, errA, b, errB)
		}
	}
}

// manyMembers returns an object with n distinct ASCII members and extra
// appended, so objects take the >12-member path of the case check.
func manyMembers(n int, extra string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		b.WriteString(`"m` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + ",")
	}
	b.WriteString(extra + "}")
	return b.String()
}

func TestJSONModeRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		offset   int  // -2: do not check
		fold     bool // a case-only pair, which ModeJCS keeps apart
	}{
		{"duplicate", `{"a":1,"a":2}`, 7, false},
		{"duplicate same value", `{"a":1,"a":1}`, -2, false},
		{"duplicate via escape", `{"a":1,"\u0061":2}`, -2, false},
		{"duplicate nested in array", `[{"a":1},{"b":1,"b":2}]`, -2, false},
		{"duplicate deep", `{"x":{"y":{"z":[{"q":1,"q":2}]}}}`, -2, false},
		{"case-only duplicate", `{"a":1,"A":2}`, -2, true},
		{"case-only duplicate longer", `{"Amount":1,"aMOUNT":2}`, -2, true},
		{"case-only é É", `{"é":1,"É":2}`, -2, true},
		{"case-only é É escaped", `{"\u00e9":1,"\u00C9":2}`, -2, true},
		{"Kelvin sign vs k", `{"k":1,"K":2}`, -2, true},
		{"Kelvin sign vs K escaped", `{"K":1,"\u212a":2}`, -2, true},
		{"long s vs s", `{"s":1,"\u017f":2}`, -2, true},
		{"Greek sigma forms", `{"Σ":1,"ς":2}`, -2, true},
		{"large object duplicate", manyMembers(13, `"m3":0`), -2, false},
		{"large object case-only", manyMembers(13, `"M3":0`), -2, true},
		{"large object Kelvin", manyMembers(20, `"k":1,"K":2`), -2, true},
		{"large object é É", manyMembers(15, `"é":1,"É":2`), -2, true},
		{"large object long s", manyMembers(15, `"ms":1,"mſ":2`), -2, true},
		{"lone high surrogate", `"\ud800"`, 1, false},
		{"lone low surrogate", `"\udc00"`, 1, false},
		{"high then ASCII escape", `"\ud800\u0041"`, -2, false},
		{"high then high", `"\ud800\ud800"`, -2, false},
		{"high then non-surrogate above DFFF", `"\ud83d\ue000"`, -2, false},
		{"inverted pair", `"\udd1e\ud834"`, -2, false},
		{"high at end of string", `"ab\ud83d"`, 3, false},
		{"lone surrogate in name", `{"\udc00":1}`, -2, false},
		{"invalid UTF-8 byte", "\"\xff\"", 1, false},
		{"lone continuation byte", "\"a\x80\"", 2, false},
		{"truncated sequence", "\"\xe2\x82\"", -2, false},
		{"invalid UTF-8 after escape", "\"\\n\xfe\"", -2, false},
		{"invalid UTF-8 in name", "{\"\xc3\":1}", -2, false},
		{"overlong 2 bytes", "\"\xc0\xaf\"", -2, false},
		{"overlong 3 bytes", "\"\xe0\x80\xaf\"", -2, false},
		{"overlong 4 bytes", "\"\xf0\x80\x80\xaf\"", -2, false},
		{"UTF-8 encoded surrogate ED A0 80", "\"\xed\xa0\x80\"", 1, false},
		{"UTF-8 encoded surrogate ED BF BF", "\"\xed\xbf\xbf\"", -2, false},
		{"above U+10FFFF", "\"\xf4\x90\x80\x80\"", -2, false},
		{"NaN", `NaN`, 0, false},
		{"NaN in array", `[NaN]`, 1, false},
		{"Infinity", `Infinity`, -2, false},
		{"minus Infinity", `[-Infinity]`, -2, false},
		{"1e400", `1e400`, 0, false},
		{"-1e400", `[-1e400]`, 1, false},
		{"1e309", `{"a":1e309}`, 5, false},
		{"overflow without exponent", "1" + strings.Repeat("0", 309), -2, false},
		{"trailing comma array", `[1,]`, 3, false},
		{"trailing comma object", `{"a":1,}`, 7, false},
		{"UTF-8 BOM", "\xef\xbb\xbf{}", 0, false},
		{"trailing data", `{} {}`, 3, false},
		{"trailing garbage", `1 x`, 2, false},
		{"empty", ``, 0, false},
		{"only whitespace", " \n", 2, false},
		{"leading zero", `01`, 1, false},
		{"plus sign", `+1`, 0, false},
		{"bare fraction", `.5`, 0, false},
		{"dot without digits", `1.`, 0, false},
		{"exponent without digits", `1e`, 0, false},
		{"hex", `0x10`, 1, false},
		{"single quotes", `{'a':1}`, 1, false},
		{"raw control char", "\"a\x01\"", 2, false},
		{"raw tab", "\"a\tb\"", 2, false},
		{"invalid escape", `"\x41"`, 1, false},
		{"escaped single quote", `"\'"`, 1, false},
		{"short unicode escape", `"\u12"`, 1, false},
		{"comment", `[1]//`, 3, false},
		{"unterminated string", `"abc`, 0, false},
		{"unterminated array", `[1`, 2, false},
		{"missing colon", `{"a" 1}`, 5, false},
		{"non-string name", `{1:1}`, 1, false},
		{"bad literal", `tru`, 0, false},
		{"capital literal", `True`, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := Options{}.Append(nil, []byte(tt.in))
			if err == nil {
				t.Fatalf("%q accepted as %q", tt.in, out)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Code != CodeInvalidJSON {
				t.Fatalf("%q: %v, want INVALID_JSON", tt.in, err)
			}
			if tt.offset != -2 && ce.Offset != tt.offset {
				t.Errorf("%q: offset %d, want %d (%v)", tt.in, ce.Offset, tt.offset, err)
			}
			if strings.Contains(ce.Reason, tt.in) && len(tt.in) > 3 {
				t.Errorf("reason %q quotes the payload", ce.Reason)
			}
			// ModeJCS shares the strict parser but keeps case-only pairs.
			_, err = Options{Mode: ModeJCS}.Append(nil, []byte(tt.in))
			if tt.fold {
				if err != nil {
					t.Errorf("jcs %q: %v, want it accepted", tt.in, err)
				}
			} else if !errors.As(err, &ce) || ce.Code != CodeInvalidJSON {
				t.Errorf("jcs %q: %v, want INVALID_JSON", tt.in, err)
			}
		})
	}
}

func nested(depth int) string {
	var b strings.Builder
	for i := range depth {
		if i%2 == 0 {
			b.WriteString(`[`)
		} else {
			b.WriteString(`{"a":`)
		}
	}
	b.WriteString("1")
	for i := depth - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteString(`]`)
		} else {
			b.WriteString(`}`)
		}
	}
	return b.String()
}

// Proves threat:deep-json (docs/threat-model.md).
func TestDepthLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ opt, limit int }{{0, DefaultMaxDepth}, {1, 1}, {3, 3}, {200, 200}} {
		o := Options{MaxDepth: tt.opt}
		in := nested(tt.limit)
		got, err := o.Append(nil, []byte(in))
		if err != nil || string(got) != in {
			t.Errorf("MaxDepth %d, depth %d: %v (out %.40s)", tt.opt, tt.limit, err, got)
		}
		_, err = o.Append(nil, []byte(nested(tt.limit+1)))
		wantCode(t, "depth "+strconv.Itoa(tt.limit+1), err, CodeInvalidJSON)
		// Siblings do not add up: many containers side by side at the limit.
		wide := "[" + strings.Repeat(nested(tt.limit-1)+",", 5) + "0]"
		if _, err := o.Append(nil, []byte(wide)); err != nil {
			t.Errorf("MaxDepth %d, wide: %v", tt.opt, err)
		}
	}
	// Scalars have no depth.
	if _, err := (Options{MaxDepth: 1}).Append(nil, []byte(`"x"`)); err != nil {
		t.Error(err)
	}
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	_, err := Options{}.Append(nil, []byte(`[1,]`))
	if got, want := err.Error(), "INVALID_JSON: unexpected character at byte 3"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e := &Error{Code: CodeBodyTooLarge, Offset: -1, Reason: "too big"}
	if e.Error() != "BODY_TOO_LARGE: too big" || e.ErrorCode() != CodeBodyTooLarge {
		t.Errorf("Error() = %q, ErrorCode() = %q", e.Error(), e.ErrorCode())
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, m := range []Mode{ModeRaw, ModeJSON, ModeSchema, ModeJCS} {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, s := range []string{"", "JSON", "xml", "canonical"} {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) accepted", s)
		}
	}
}

func TestSchemaModeWithoutSchema(t *testing.T) {
	t.Parallel()
	if _, err := (Options{Mode: ModeSchema}).Append(nil, []byte(`{}`)); err == nil {
		t.Error("schema mode without a schema accepted")
	}
	if _, err := (Options{Mode: "yaml"}).Append(nil, []byte(`{}`)); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestConcurrentReuse runs many documents at once, with refusals among
// them, so pooled parser state must never leak from one call into another.
func TestConcurrentReuse(t *testing.T) {
	t.Parallel()
	inputs := []struct{ in, want string }{
		{manyMembers(14, `"z":{"y":2,"x":1}`), ""},
		{`{"a":{"b":1,"B":2}}`, "!"},
		{`{"c":[{"e":1,"d":2}],"b":"\u00e9"}`, "{\"b\":\"\u00e9\",\"c\":[{\"d\":2,\"e\":1}]}"},
		{`{"x":{"y":{"z":1,"z":2}},"w":1}`, "!"},
		{`[{"b":1,"a":2},{"d":{"f":1,"e":2}}]`, `[{"a":2,"b":1},{"d":{"e":2,"f":1}}]`},
	}
	first, err := Options{}.Append(nil, []byte(inputs[0].in))
	if err != nil {
		t.Fatal(err)
	}
	inputs[0].want = string(first)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				tt := inputs[(g+i)%len(inputs)]
				got, err := Options{}.Append(nil, []byte(tt.in))
				if tt.want == "!" {
					if err == nil {
						t.Errorf("%s accepted", tt.in)
						return
					}
				} else if err != nil || string(got) != tt.want {
					t.Errorf("%s: got %s, %v; want %s", tt.in, got, err, tt.want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestAppendKeepsDst(t *testing.T) {
	t.Parallel()
	dst := []byte("prefix:")
	got, err := Options{}.Append(dst, []byte(`{"b":1,"a":2}`))
	if err != nil || string(got) != `prefix:{"a":2,"b":1}` {
		t.Errorf("got %q, %v", got, err)
	}
}
