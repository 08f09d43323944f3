package bench

// Load is the machine's one-minute load average at the start and the end
// of a run: on a shared machine, what the figures must be read against.
type Load struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}
