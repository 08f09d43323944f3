package main

import (
	"testing"

	"github.com/idemkit/idem/example/internal/orderstest"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
)

// bin is the example built for the tests (TestMain).
var bin string

func TestMain(m *testing.M) {
	pgtest.Main(mytest.Runner{M: runner(func() int { return orderstest.Binary(&bin, ".", m.Run) })})
}

type runner func() int

func (r runner) Run() int { return r() }

// engines are the databases GORM's example runs on (not SQLite: GORM's
// SQLite driver needs cgo).
var engines = []struct {
	name string
	open func(*testing.T) orderstest.Engine
}{
	{"postgres", orderstest.Postgres},
	{"mariadb", orderstest.MariaDB},
}

// TestKillBeforeCommit: a SIGKILL after GORM wrote the order through
// idem's *sql.Tx and before the commit leaves neither the order nor the
// idem record; the retry with the same key creates the order once.
//
// threat:sqltx-split-commit
func TestKillBeforeCommit(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { orderstest.KillBeforeCommit(t, bin, e.open(t)) })
	}
}

// TestReplay: a retry replays the stored order without a second one, in
// both styles.
func TestReplay(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { orderstest.Replay(t, bin, e.open(t)) })
		t.Run(e.name+"/two-phase", func(t *testing.T) { orderstest.Replay(t, bin, e.open(t), "-two-phase") })
	}
}
