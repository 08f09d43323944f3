package pgtest

import (
	"path/filepath"
	"testing"
)

// EachDriver runs fn twice, as subtests of t named "sqlite" and "postgres",
// each on a fresh, empty database of its own: for "sqlite" the connection
// string is "sqlite:" followed by a file named file in the subtest's
// t.TempDir() (the file does not exist yet), for "postgres" it is a new
// database of the shared cluster from [DSN] (dropped when the subtest
// finishes). fn receives the subtest's t, the driver's name and the
// connection string.
//
// Both subtests call t.Parallel: they run in parallel with each other and
// with the other parallel tests, and, as any parallel subtest, only after
// the function that called EachDriver has returned. The "postgres" subtest
// skips or fails as DSN does when PostgreSQL is not installed, and the
// test binary must call [Main] from its TestMain.
func EachDriver(t *testing.T, file string, fn func(t *testing.T, driver, dsn string)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			var dsn string
			if driver == "postgres" {
				dsn = DSN(t)
			} else {
				dsn = "sqlite:" + filepath.Join(t.TempDir(), file)
			}
			fn(t, driver, dsn)
		})
	}
}
