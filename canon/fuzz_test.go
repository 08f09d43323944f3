package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fuzz targets' committed seeds are the f.Add calls below, every file of
// the JSONTestSuite and the JCS vectors, and testdata/fuzz/<Target>/.

var fuzzSeeds = []string{
	`{"b":1,"a":[true,false,null,{"d":"\u00e9","c":-0.0}]}`,
	`{"a":1,"A":2}`,
	`{"k":1,"\u212a":2}`,
	`"\ud83d\ude00\u0000\/\"\\"`,
	`[1E400]`,
	`[1e-400,123456789012345678901234567890,-0]`,
	"\"\xed\xa0\x80\"",
	"\xef\xbb\xbf{}",
	`{"amount":"12.5","currency":"EUR","payee":"acct_1","memo":null}`,
	`{"amount":"012.50","currency":"EUR","payee":"acct_1"}`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`{"m0":0,"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,"m10":10,"m11":11,"m12":12,"M3":0}`,
}

func addFileSeeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	addFileSeeds(f, filepath.Join(suiteDir, "*.json"))
	addFileSeeds(f, "testdata/jcs/input/*.json")
}

// decodeStd decodes one JSON text with encoding/json; numbers stay
// json.Number, so lexically different numbers compare unequal.
func decodeStd(b []byte, useNumber bool) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if useNumber {
		dec.UseNumber()
	}
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

// checkRefusal asserts that err is a *Error with one of codes.
func checkRefusal(t *testing.T, in []byte, err error, codes ...string) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("%q: error %T %v, want *canon.Error", in, err, err)
	}
	for _, c := range codes {
		if ce.Code == c {
			return
		}
	}
	t.Fatalf("%q: code %s (%v), want one of %v", in, ce.Code, err, codes)
}

func FuzzJSON(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Options{}.Append(nil, in)
		if err != nil {
			checkRefusal(t, in, err, CodeInvalidJSON)
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted %q, which encoding/json says is not JSON", in)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("%q: output %q is not valid JSON", in, out)
		}
		again, err := Options{}.Append(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q: not a fixed point: %q -> %q, %v", in, out, again, err)
		}
		// Whitespace does not matter.
		var ind, cmp bytes.Buffer
		if err := json.Indent(&ind, in, "\t", "  "); err != nil {
			t.Fatalf("json.Indent(%q): %v", in, err)
		}
		if err := json.Compact(&cmp, in); err != nil {
			t.Fatalf("json.Compact(%q): %v", in, err)
		}
		for _, v := range [][]byte{ind.Bytes(), cmp.Bytes()} {
			if got, err := (Options{}).Append(nil, v); err != nil || !bytes.Equal(got, out) {
				t.Fatalf("%q re-spaced as %q: %q, %v; want %q", in, v, got, err, out)
			}
		}
		// Accepted input has no duplicates, valid UTF-8 and no lone
		// surrogates, so encoding/json reads the same value from both.
		vin, errIn := decodeStd(in, true)
		vout, errOut := decodeStd(out, true)
		if errIn != nil || errOut != nil || !reflect.DeepEqual(vin, vout) {
			t.Fatalf("%q and its output %q decode differently: %#v (%v) vs %#v (%v)", in, out, vin, errIn, vout, errOut)
		}
		// JCS of the canonical form is JCS of the input.
		j1, err1 := Options{Mode: ModeJCS}.Append(nil, in)
		j2, err2 := Options{Mode: ModeJCS}.Append(nil, out)
		if err1 != nil || err2 != nil || !bytes.Equal(j1, j2) {
			t.Fatalf("%q: jcs of input %q (%v) != jcs of output %q (%v)", in, j1, err1, j2, err2)
		}
	})
}

func FuzzJCS(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		o := Options{Mode: ModeJCS}
		out, err := o.Append(nil, in)
		if err != nil {
			checkRefusal(t, in, err, CodeInvalidJSON)
			return
		}
		again, err := o.Append(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q: not a fixed point: %q -> %q, %v", in, out, again, err)
		}
		// ModeJCS refuses exact duplicates, so encoding/json (float64
		// numbers) must read the same value from input and output.
		vin, errIn := decodeStd(in, false)
		vout, errOut := decodeStd(out, false)
		if errIn != nil || errOut != nil || !reflect.DeepEqual(vin, vout) {
			t.Fatalf("%q and its output %q decode differently: %#v (%v) vs %#v (%v)", in, out, vin, errIn, vout, errOut)
		}
	})
}

func FuzzSchema(f *testing.F) {
	addSeeds(f)
	o := schemaOpts(paymentsSchema())
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := o.Append(nil, in)
		if err != nil {
			checkRefusal(t, in, err, CodeInvalidJSON, CodeSchemaViolation)
			// What the json mode refuses, the schema mode refuses as
			// INVALID_JSON too.
			if _, jerr := (Options{}).Append(nil, in); jerr != nil {
				checkRefusal(t, in, err, CodeInvalidJSON)
			}
			return
		}
		if _, err := (Options{}).Append(nil, in); err != nil {
			t.Fatalf("%q: schema mode accepts what json mode refuses: %v", in, err)
		}
		again, err := o.Append(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q: not a fixed point: %q -> %q, %v", in, out, again, err)
		}
	})
}

// FuzzMemberOrder builds {"a":x,"b":y} and {"b":y,"a":x} with varying
// whitespace from a string and a number, then flips one byte of the
// document: outputs must be equal exactly when encoding/json reads equal
// values (numbers compared lexically in json mode).
func FuzzMemberOrder(f *testing.F) {
	f.Add("hello", 10.0, uint8(0), uint16(3), uint8(1))
	f.Add("é\u2028\x00\"\\/<>&", -0.0, uint8(7), uint16(9), uint8(0x20))
	f.Add("\U0001F600", 1e21, uint8(2), uint16(12), uint8(0x01))
	f.Add("", 5e-324, uint8(5), uint16(0), uint8(0x80))
	f.Add("12.50", 1.7976931348623157e308, uint8(255), uint16(40), uint8(0x10))
	f.Fuzz(func(t *testing.T, s string, n float64, ws uint8, pos uint16, mask uint8) {
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return
		}
		xb, err := json.Marshal(s) // invalid UTF-8 becomes U+FFFD
		if err != nil {
			t.Fatal(err)
		}
		x, y := string(xb), strconv.FormatFloat(n, 'g', -1, 64)
		if ws&1 != 0 {
			x, y = y, x
		}
		sp := func(bit uint) string {
			return []string{"", " ", "\n\t", "\r\n  "}[(ws>>bit)&3]
		}
		doc1 := []byte(sp(1) + `{"a"` + sp(3) + `:` + x + `,` + sp(5) + `"b":` + y + `}`)
		doc2 := []byte(`{` + sp(2) + `"b"` + sp(4) + `:` + sp(6) + y + `,"a":` + x + sp(1) + `}` + sp(2))
		for _, m := range []Mode{ModeJSON, ModeJCS} {
			o := Options{Mode: m}
			out1, err1 := o.Append(nil, doc1)
			out2, err2 := o.Append(nil, doc2)
			if err1 != nil || err2 != nil || !bytes.Equal(out1, out2) {
				t.Fatalf("%s: %s -> %s (%v) but %s -> %s (%v)", m, doc1, out1, err1, doc2, out2, err2)
			}
		}
		// Flip one byte inside the value of "a" (x starts after `{"a":`).
		start := bytes.IndexByte(doc1, ':') + 1
		for start < len(doc1) && strings.IndexByte(" \t\r\n", doc1[start]) >= 0 {
			start++
		}
		if mask == 0 || len(x) == 0 {
			return
		}
		flipped := bytes.Clone(doc1)
		flipped[start+int(pos)%len(x)] ^= mask
		o := Options{}
		out1, _ := o.Append(nil, doc1)
		out2, err := o.Append(nil, flipped)
		if err != nil {
			return // the flip broke the document
		}
		v1, err1 := decodeStd(doc1, true)
		v2, err2 := decodeStd(flipped, true)
		if err1 != nil || err2 != nil {
			t.Fatalf("encoding/json refuses %q (%v) or %q (%v)", doc1, err1, flipped, err2)
		}
		if same := reflect.DeepEqual(v1, v2); same != bytes.Equal(out1, out2) {
			t.Fatalf("%q -> %q and %q -> %q: equal values=%v but equal outputs=%v", doc1, out1, flipped, out2, same, !same)
		}
	})
}
