package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCanonModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"canon"}, `{ "b": 10.0, "a": [true, null] }`, `{"a":[true,null],"b":10.0}`},
		{[]string{"canon", "--mode", "jcs"}, `{ "b": 10.0, "a": 1e21 }`, `{"a":1e+21,"b":10}`},
		{[]string{"canon", "--mode", "raw"}, " {\"b\": 1} \n", " {\"b\": 1} \n"},
		{[]string{"canon", "--mode", "schema", "--schema", "../../canon/testdata/payments.v1.json"},
			`{"payee":"acct_1","currency":"EUR","amount":"12.5"}`, `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`},
	}
	for _, c := range cases {
		code, out, stderr := runCmd(t, c.in, c.args...)
		if code != exitOK || out != c.want+"\n" { // the canonical bytes, then a newline
			t.Errorf("%v on %q: code %d, out %q, stderr %q; want %q", c.args, c.in, code, out, stderr, c.want)
		}
	}
}

func TestCanonRefusalIsOneLineWithCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		in   string
		code string
	}{
		{[]string{"canon"}, `{"a":1,"A":2}`, "INVALID_JSON"},
		{[]string{"canon"}, `[NaN]`, "INVALID_JSON"},
		{[]string{"canon", "--max-bytes", "4"}, `[1,2]`, "BODY_TOO_LARGE"},
		{[]string{"canon", "--mode", "schema", "--schema", "../../canon/testdata/payments.v1.json"},
			`{"payee":"acct_1","currency":"EUR","amount":"12.505"}`, "SCHEMA_VIOLATION"},
	}
	for _, c := range cases {
		code, out, stderr := runCmd(t, c.in, c.args...)
		if code != exitRefused || out != "" || !strings.HasPrefix(stderr, c.code+": ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v on %q: code %d, out %q, stderr %q; want exit 1 and one line %s: …", c.args, c.in, code, out, stderr, c.code)
		}
	}
}

func TestCanonUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"canon", "--mode", "yaml"},
		{"canon", "--mode", "schema"},
		{"canon", "--schema", "x.json"},
		{"canon", "extra"},
	} {
		if code, _, _ := runCmd(t, "{}", args...); code != exitUsage {
			t.Errorf("%v: code %d, want %d", args, code, exitUsage)
		}
	}
}

// TestCanonJSONTestSuite runs every file of the JSONTestSuite through
// "idem canon --mode json": y_ accepted (except the duplicate-key files the
// contract refuses), n_ refused with INVALID_JSON, i_ either way but with a
// clean exit.
func TestCanonJSONTestSuite(t *testing.T) {
	t.Parallel()
	dir := "../../canon/testdata/jsontestsuite/test_parsing"
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < 300 {
		t.Fatalf("want the JSONTestSuite files in %s, found %d (%v)", dir, len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCmd(t, string(in), "canon", "--mode", "json")
		refusedOK := code == exitRefused && strings.HasPrefix(stderr, "INVALID_JSON: ")
		switch {
		case strings.HasPrefix(name, "y_object_duplicated_key"):
			if !refusedOK {
				t.Errorf("%s: the contract refuses duplicate members; got code %d, stderr %q", name, code, stderr)
			}
		case strings.HasPrefix(name, "y_"):
			if code != exitOK {
				t.Errorf("%s: refused: %s", name, stderr)
				continue
			}
			again, out2, _ := runCmd(t, out, "canon")
			if again != exitOK || !bytes.Equal([]byte(out), []byte(out2)) {
				t.Errorf("%s: canonical output is not a fixed point: %q → %q", name, out, out2)
			}
		case strings.HasPrefix(name, "n_"):
			if !refusedOK {
				t.Errorf("%s: accepted or refused without INVALID_JSON: code %d, stderr %q", name, code, stderr)
			}
		default:
			if code != exitOK && !refusedOK {
				t.Errorf("%s: neither accepted nor refused cleanly: code %d, stderr %q", name, code, stderr)
			}
		}
	}
}

// TestCanonJCSVectors checks "idem canon --mode jcs" against the RFC 8785
// test vectors byte for byte.
func TestCanonJCSVectors(t *testing.T) {
	t.Parallel()
	inputs, _ := filepath.Glob("../../canon/testdata/jcs/input/*.json")
	if len(inputs) == 0 {
		t.Fatal("no JCS vectors found")
	}
	for _, in := range inputs {
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../canon/testdata/jcs/output", filepath.Base(in)))
		if err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCmd(t, string(src), "canon", "--mode", "jcs")
		if code != exitOK || out != string(want)+"\n" {
			t.Errorf("%s: code %d stderr %q\n got %q\nwant %q and a newline", filepath.Base(in), code, stderr, out, want)
		}
	}
}
