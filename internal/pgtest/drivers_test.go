package pgtest_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestEachDriver: EachDriver runs fn once per driver, as subtests named
// after the driver, with a SQLite DSN on a file of the given name that
// does not exist yet and a PostgreSQL DSN of a database of its own.
func TestEachDriver(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // driver → dsn
	t.Run("run", func(t *testing.T) {
		pgtest.EachDriver(t, "x.db", func(t *testing.T, driver, dsn string) {
			if want := "TestEachDriver/run/" + driver; t.Name() != want {
				t.Errorf("subtest %q, want %q", t.Name(), want)
			}
			switch driver {
			case "sqlite":
				path, ok := strings.CutPrefix(dsn, "sqlite:")
				if !ok || filepath.Base(path) != "x.db" {
					t.Errorf("sqlite DSN %q, want sqlite:<temp dir>/x.db", dsn)
				}
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Errorf("sqlite file %s: %v, want it not to exist yet", path, err)
				}
			case "postgres":
				if !strings.HasPrefix(dsn, "postgres://") {
					t.Errorf("postgres DSN %q", dsn)
				}
			default:
				t.Errorf("driver %q", driver)
			}
			mu.Lock()
			got[driver] = dsn
			mu.Unlock()
		})
	})
	if len(got) != 2 || got["sqlite"] == "" || got["postgres"] == "" {
		t.Errorf("fn ran for %v, want sqlite and postgres", got)
	}
}
