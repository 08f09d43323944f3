package idemstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/registry"
)

// TestOpenMySQL: a mysql:// DSN opens the MySQL/MariaDB driver, migrated
// and usable; an unknown scheme is refused without printing the DSN.
func TestOpenMySQL(t *testing.T) {
	native := mytest.DSN(t) // root@tcp(127.0.0.1:PORT)/DB
	user, rest, _ := strings.Cut(native, "@tcp(")
	addr, db, _ := strings.Cut(rest, ")/")
	dsn := "mysql://" + user + "@" + addr + "/" + db
	if Kind(dsn) != "mysql" {
		t.Fatalf("Kind(%q) = %q, want mysql", dsn, Kind(dsn))
	}
	s, err := Open(t.Context(), dsn, Options{})
	if err != nil {
		t.Fatalf("Open(%q): %v", dsn, err)
	}
	defer s.Close()
	if _, ok := s.(*idemmysql.Store); !ok {
		t.Errorf("Open(%q) = %T, want *idemmysql.Store", dsn, s)
	}
	if _, err := s.Get(t.Context(), [32]byte{1}); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get on a fresh store: %v, want ErrNotFound", err)
	}
	if _, err := Open(t.Context(), "mariadb://root:secret@host/db", Options{}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of an unknown scheme: %v, want a refusal without the password", err)
	}
}
