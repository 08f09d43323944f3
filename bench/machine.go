package bench

import (
	"os"
	"strconv"
	"strings"
)

// Load is the machine's one-minute load average at the start and the end
// of a run: on a shared machine, what the figures must be read against.
type Load struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// loadAverage returns the one-minute load average from /proc/loadavg;
// false where there is no such file (not Linux).
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	return v, err == nil
}
