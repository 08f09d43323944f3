// Package e2e holds end-to-end tests of the reference service: they build
// the real idem binary (go build, with -race unless IDEM_E2E_NORACE is
// set), run "idem serve" as child processes on SQLite and on a throwaway
// PostgreSQL (internal/pgtest), and check the fixed interface of SPEC R
// and the contract http.idempotency.v1 over HTTP only — plus, where a
// claim is about stored effects, by counting rows in the database.
//
// Run them with
//
//	go test -count=1 ./e2e/
//
// The fault suite of SPEC V1 is the TestFault* tests (docs/faults.md):
// every exchange goes into a recorded history, checked with a snapshot
// of the database for the invariants of V1; each test logs its seed
// (-fault.seed=N or IDEM_FAULT_SEED=N to repeat it), saves its artifacts
// on failure under $IDEM_FAULT_ARTIFACTS (default os.TempDir();
// IDEM_FAULT_KEEP=1 saves them always), and -fault.long (or
// IDEM_FAULT_LONG=1) runs the long form.
//
// Environment: IDEM_E2E_NORACE=1 builds the binary without the race
// detector; IDEM_E2E_BIN=PATH uses an existing binary instead of building
// one; IDEM_REQUIRE_POSTGRES=1 fails (rather than skips) the PostgreSQL
// subtests when PostgreSQL is not installed.
//
// The package has no non-test code besides this file.
package e2e
