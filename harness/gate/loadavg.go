package gate

import "github.com/idemkit/idem/internal/machine"

// loadAverage returns the machine's 1-minute load average, or -1 where
// there is none. The report carries it because the reservation p99 is
// wall time: on a machine busy with other jobs it grows with the run
// queue.
func loadAverage() float64 {
	if v, ok := machine.LoadAverage(); ok {
		return v
	}
	return -1
}
