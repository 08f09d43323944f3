package payments

import (
	"os"
	"reflect"
	"testing"

	"github.com/idemkit/idem/canon"
)

func TestSchemaMatchesFile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../canon/testdata/payments.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := canon.ParseSchema(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := Schema(); !reflect.DeepEqual(got, want) {
		t.Errorf("Schema() = %+v, the file says %+v", got, want)
	}
	if Schema() == Schema() {
		t.Error("Schema returns a shared value")
	}
}

func TestAboveLimit(t *testing.T) {
	t.Parallel()
	for amount, want := range map[string]bool{
		"0.01": false, "12.50": false, "999999.99": false, "1000000.00": false,
		"1000000.01": true, "1000001.00": true, "9999999.99": true, "10000000.00": true,
		"123456789012345678901234567890.00": true,
	} {
		if got, err := aboveLimit(amount); err != nil || got != want {
			t.Errorf("aboveLimit(%q) = %v, %v; want %v", amount, got, err, want)
		}
	}
	for _, bad := range []string{"", "12", "12.5", "12.500", "012.50", "-1.00", "1e3.00", "1.0x", ".50"} {
		if _, err := aboveLimit(bad); err == nil {
			t.Errorf("aboveLimit(%q) accepted a non-canonical amount", bad)
		}
	}
}
