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
// Environment: IDEM_E2E_NORACE=1 builds the binary without the race
// detector; IDEM_E2E_BIN=PATH uses an existing binary instead of building
// one; IDEM_REQUIRE_POSTGRES=1 fails (rather than skips) the PostgreSQL
// subtests when PostgreSQL is not installed.
//
// The package has no non-test code besides this file.
package e2e
