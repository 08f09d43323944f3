package keygen

import (
	"strconv"
	"testing"

	"github.com/idemkit/idem"
)

func TestDerive(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for i := range 20000 {
		label := "k" + strconv.Itoa(i)
		k := Derive(label)
		if !Strict(k) || len(k) != 22 || Derive(label) != k {
			t.Fatalf("Derive(%q) = %q: want the same strict 22-character key every time", label, k)
		}
		if other, dup := seen[k]; dup {
			t.Fatalf("labels %q and %q share key %q", other, label, k)
		}
		seen[k] = label
	}
}

func TestForLabel(t *testing.T) {
	t.Parallel()
	uuid := "0f8fad5b-d9cb-469f-a165-70867728950e"
	for in, want := range map[string]string{
		uuid:             uuid,
		"raw:k":          "k",
		"raw:":           "",
		`"` + uuid + `"`: `"` + uuid + `"`,
		"k1":             Derive("k1"),
		`"k1"`:           `"` + Derive("k1") + `"`,
	} {
		if got := ForLabel(in); got != want {
			t.Errorf("ForLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if k := ForLabel("k1"); ForLabel(k) != k {
		t.Errorf("ForLabel does not map its result %q to itself", k)
	}
	if _, err := idem.ParseKey([]string{ForLabel("order-1")}, idem.StrictKeyPolicy); err != nil {
		t.Errorf("ForLabel(order-1): %v", err)
	}
}
