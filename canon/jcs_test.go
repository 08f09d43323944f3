package canon

import (
	"bytes"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The RFC 8785 vectors (testdata/jcs, Apache-2.0) are copied from
// github.com/cyberphone/json-canonicalization. structures.json holds
// names that differ only in case ("f"/"F"), which ModeJCS keeps apart as
// RFC 8785 does (docs/contract.md section 5).
func TestJCSVectors(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob("testdata/jcs/input/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 6 {
		t.Fatalf("found %d JCS vectors, want at least 6", len(inputs))
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata/jcs/output", name))
			if err != nil {
				t.Fatal(err)
			}
			hexText, err := os.ReadFile(filepath.Join("testdata/jcs/outhex", strings.TrimSuffix(name, ".json")+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			wantHex, err := hex.DecodeString(strings.Join(strings.Fields(string(hexText)), ""))
			if err != nil || !bytes.Equal(wantHex, want) {
				t.Fatalf("output and outhex disagree for %s (%v)", name, err)
			}
			got, err := Options{Mode: ModeJCS}.Append(nil, body)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestJCSCaseOnlyNames: ModeJCS keeps names that differ only in case as
// distinct members (sorted by code units) but refuses exact duplicates,
// also when one of them is escaped.
func TestJCSCaseOnlyNames(t *testing.T) {
	t.Parallel()
	keep := []struct{ in, want string }{
		{`{"a":1,"A":2}`, `{"A":2,"a":1}`},
		{`{"k":1,"\u212a":2,"K":3}`, "{\"K\":3,\"k\":1,\"\u212a\":2}"},
		{`{"\u00e9":1,"\u00c9":2}`, "{\"\u00c9\":2,\"\u00e9\":1}"},
		{manyMembers(13, `"M3":0`), ""},
	}
	for _, tt := range keep {
		got, err := Options{Mode: ModeJCS}.Append(nil, []byte(tt.in))
		if err != nil || (tt.want != "" && string(got) != tt.want) {
			t.Errorf("%s: got %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"A":1,"a":2,"A":3}`, manyMembers(13, `"m3":0`), `[{"x":{"\u00e9":1,"é":2}}]`} {
		_, err := Options{Mode: ModeJCS}.Append(nil, []byte(in))
		wantCode(t, in, err, CodeInvalidJSON)
	}
}

// TestJCSNumbers is the number table of RFC 8785 Appendix B plus the ES6
// test-file samples. Each double is fed as several JSON lexemes that all
// denote it; ModeJCS must write the ECMAScript form for every one.
func TestJCSNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // minus zero
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4340000000000001, "9007199254740994"},
		{0x4340000000000002, "9007199254740996"},
		{0x4330000000000000, "4503599627370496"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
		{0x3ff0000000000000, "1"},
		{0xbff0000000000000, "-1"},
		{0x3fb999999999999a, "0.1"},
		{0x3eb0000000000000, "9.5367431640625e-7"},
		{0x4415af1d78b58c40, "100000000000000000000"}, // 1e20: the last plain form
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		lexemes := []string{
			strconv.FormatFloat(f, 'g', -1, 64),
			strconv.FormatFloat(f, 'e', -1, 64),
			strconv.FormatFloat(f, 'E', -1, 64),
			strconv.FormatFloat(f, 'f', -1, 64),
		}
		if !strings.HasPrefix(tt.want, "-") {
			lexemes = append(lexemes, tt.want) // the canonical form is a fixed point
		}
		for _, lx := range lexemes {
			got, err := Options{Mode: ModeJCS}.Append(nil, []byte(lx))
			if err != nil || string(got) != tt.want {
				t.Errorf("%016x as %s: got %s, %v; want %s", tt.bits, lx, got, err, tt.want)
			}
			// Inside a container the same rewriting applies.
			got, err = Options{Mode: ModeJCS}.Append(nil, []byte(`{"n":[`+lx+`]}`))
			if err != nil || string(got) != `{"n":[`+tt.want+`]}` {
				t.Errorf("%016x as [%s]: got %s, %v", tt.bits, lx, got, err)
			}
		}
	}
}

// TestJCSNumbersRefused: values that are not finite doubles have no JCS form.
func TestJCSNumbersRefused(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		strconv.FormatFloat(math.NaN(), 'g', -1, 64),   // NaN
		strconv.FormatFloat(math.Inf(1), 'g', -1, 64),  // +Inf
		strconv.FormatFloat(math.Inf(-1), 'g', -1, 64), // -Inf
		"1e309", "-1e309", "1.8e308", "[17976931348623159e292]",
		"1" + strings.Repeat("0", 309), // 1e309 without an exponent
		"Infinity", "-Infinity", "[NaN]",
	} {
		_, err := Options{Mode: ModeJCS}.Append(nil, []byte(in))
		wantCode(t, in, err, CodeInvalidJSON)
	}
}

// TestJCSMemberOrder: RFC 8785 sorts names by UTF-16 code units, which
// differs from UTF-8 byte order above U+FFFF; ModeJSON sorts by UTF-8 bytes.
func TestJCSMemberOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, jcs, json string
	}{
		{ // U+20AC, U+1F600 (D83D DE00), U+FB33
			`{"\ufb33":3,"\ud83d\ude00":2,"\u20ac":1}`,
			"{\"\u20ac\":1,\"\U0001f600\":2,\"\ufb33\":3}",
			"{\"\u20ac\":1,\"\ufb33\":3,\"\U0001f600\":2}",
		},
		{ // U+FFFF sorts after U+10000 in UTF-16, before it in UTF-8
			`{"\uffff":1,"\ud800\udc00":2}`,
			"{\"\U00010000\":2,\"\uffff\":1}",
			"{\"\uffff\":1,\"\U00010000\":2}",
		},
		{ // same high surrogate: low surrogates order like the code points
			`{"😁":2,"😀":1,"a😀":3,"a":0}`,
			`{"a":0,"a😀":3,"😀":1,"😁":2}`,
			`{"a":0,"a😀":3,"😀":1,"😁":2}`,
		},
		{ // prefixes first; ASCII by code unit
			`{"ab":2,"a":1,"B":0,"":-1,"\u0000":-2}`,
			`{"":-1,"\u0000":-2,"B":0,"a":1,"ab":2}`,
			`{"":-1,"\u0000":-2,"B":0,"a":1,"ab":2}`,
		},
		{ // more than 12 members: the large-object path
			`{"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1,"\ud83d\ude00":0,"\ufb33":14}`,
			"{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"k\":11,\"l\":12,\"m\":13,\"\U0001f600\":0,\"\ufb33\":14}",
			"{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"k\":11,\"l\":12,\"m\":13,\"\ufb33\":14,\"\U0001f600\":0}",
		},
	}
	for _, tt := range tests {
		got, err := Options{Mode: ModeJCS}.Append(nil, []byte(tt.in))
		if err != nil || string(got) != tt.jcs {
			t.Errorf("jcs %s: got %s, %v; want %s", tt.in, got, err, tt.jcs)
		}
		got, err = Options{Mode: ModeJSON}.Append(nil, []byte(tt.in))
		if err != nil || string(got) != tt.json {
			t.Errorf("json %s: got %s, %v; want %s", tt.in, got, err, tt.json)
		}
	}
}

// TestJCSVersusJSONNumbers: jcs rewrites numbers, json keeps the lexeme.
func TestJCSVersusJSONNumbers(t *testing.T) {
	t.Parallel()
	in := `[10.0,10,1E2,-0,-0.0,0.10,1e-7,123456789012345678901234567890]`
	wantJSON := in
	wantJCS := `[10,10,100,0,0,0.1,1e-7,1.2345678901234568e+29]`
	if got, err := (Options{Mode: ModeJSON}).Append(nil, []byte(in)); err != nil || string(got) != wantJSON {
		t.Errorf("json: got %s, %v; want %s", got, err, wantJSON)
	}
	if got, err := (Options{Mode: ModeJCS}).Append(nil, []byte(in)); err != nil || string(got) != wantJCS {
		t.Errorf("jcs: got %s, %v; want %s", got, err, wantJCS)
	}
}
