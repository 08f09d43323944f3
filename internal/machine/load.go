// Package machine reads what the harness commands (idem gate, idem bench)
// report about the machine they ran on.
package machine

import (
	"os"
	"strconv"
	"strings"
)

// LoadAverage returns the machine's one-minute load average from
// /proc/loadavg; false where there is no such file (not Linux) or it
// cannot be read. Latency and throughput figures are wall-clock figures:
// on a shared machine they must be read against it.
func LoadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	v, err := strconv.ParseFloat(f, 64)
	return v, err == nil
}
