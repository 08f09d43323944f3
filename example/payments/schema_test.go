package payments

import (
	"os"
	"reflect"
	"testing"

	"github.com/idemkit/idem/canon"
)

func TestSchemaMatchesFile(t *testing.T) {
	t.Parallel()
	for file, schema := range map[string]func() *canon.Schema{
		"payments.v1.json": Schema,
		"refunds.v1.json":  RefundSchema,
	} {
		f, err := os.Open("../../canon/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		want, err := canon.ParseSchema(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := schema(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: schema %+v, the file says %+v", file, got, want)
		}
		if schema() == schema() {
			t.Errorf("%s: the schema function returns a shared value", file)
		}
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
