package idemhttp

import "time"

// SetPollForTest sets the bounds of Prefer: wait's fallback polling
// (wait.go), so that a test can make the poll too slow to matter.
func SetPollForTest(m *Middleware, start, max time.Duration) {
	m.pollStart, m.pollMax = start, max
}

// SetMaxPendingVerdictsForTest sets how many distinct verdict keys r
// keeps pending (verdicts.go), so that a test can reach the bound.
func SetMaxPendingVerdictsForTest(r *Rollouts, n int) { r.maxPending = n }
