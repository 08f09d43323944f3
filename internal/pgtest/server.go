package pgtest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// Server is a PostgreSQL cluster of the test's own, apart from the
// shared one DSN uses: tests that need several clusters (the shards of
// a tenant-sharded registry, each on its own server) start one each.
type Server struct{ c *cluster }

// NewServer starts a cluster like the shared one (see the package
// documentation; its DSNs lead to the server itself, never to a pooler) and stops and deletes it when t ends. Like
// NewPair, it skips t when the PostgreSQL binaries are missing, unless
// IDEM_REQUIRE_POSTGRES=1 (RequireEnv), fails t with the server log tail
// when the server cannot start, and needs no Main.
func NewServer(t testing.TB) *Server {
	t.Helper()
	c, err := startCluster()
	skipOrFail(t, err)
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
	})
	return &Server{c: c}
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.c.port }

// DSN creates the database db (a plain identifier) and returns its
// connection string:
//
//	postgres://postgres@127.0.0.1:PORT/db?sslmode=disable
func (s *Server) DSN(db string) (string, error) {
	if err := s.c.client("createdb", "--", db); err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.c.port, db), nil
}

// skipOrFail skips t when err says the PostgreSQL binaries are missing
// (unless RequireEnv is "1") and fails it on any other error.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	switch {
	case errors.Is(err, errNoBinaries) && os.Getenv(RequireEnv) != "1":
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}
}
