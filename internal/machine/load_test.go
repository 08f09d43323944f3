package machine

import (
	"os"
	"testing"
)

func TestLoadAverage(t *testing.T) {
	v, ok := LoadAverage()
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if ok {
			t.Fatalf("no /proc/loadavg, yet LoadAverage = %v, true", v)
		}
		t.Skip("no /proc/loadavg on this system")
	}
	if !ok || v < 0 {
		t.Fatalf("LoadAverage = %v, %v; want a non-negative figure", v, ok)
	}
}
