package gate

import (
	"os"
	"strconv"
	"strings"
)

// loadAverage returns the machine's 1-minute load average from
// /proc/loadavg, or -1 where there is none. The report carries it because
// the reservation p99 is wall time: on a machine busy with other jobs it
// grows with the run queue.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
