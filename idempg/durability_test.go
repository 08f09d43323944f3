package idempg

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestDurabilityWarnings: the throwaway cluster (synchronous_commit on, no
// standby) gets no warning; a session whose synchronous_commit is off gets
// one naming the setting; asynchronous standbys get one (the table).
func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	ts := openStore(t, "")
	d, err := ts.Durability(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.SynchronousCommit != "on" || d.Standbys != 0 {
		t.Errorf("durability of the test cluster: %+v; want synchronous_commit on and no standby", d)
	}
	if w := d.Warnings(); len(w) != 0 {
		t.Errorf("warnings for the test cluster: %q; want none", w)
	}
	if !pgtest.Pooled() { // a session parameter in the DSN: not through PgBouncer
		off := openStore(t, "&synchronous_commit=off")
		d, err := off.Durability(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if w := d.Warnings(); len(w) != 1 || !strings.Contains(w[0], `synchronous_commit is "off"`) {
			t.Errorf("warnings with synchronous_commit off: %q; want the one about it", w)
		}
	}
	for _, c := range []struct {
		d    Durability
		want int
	}{
		{Durability{SynchronousCommit: "on", Standbys: 1}, 1},
		{Durability{SynchronousCommit: "on", Standbys: 2, Synchronous: 1}, 0},
		{Durability{SynchronousCommit: "remote_apply", Standbys: 1, Synchronous: 1}, 0},
		{Durability{SynchronousCommit: "local", Standbys: 1}, 2},
		{Durability{SynchronousCommit: "on", Unseen: 1}, 0},
		{Durability{SynchronousCommit: "on", StatementTimeout: "5s", Standbys: 1, Synchronous: 1, SynchronousStandbyNames: "s1"}, 1},
		{Durability{SynchronousCommit: "on", StatementTimeout: "5s"}, 0},
		{Durability{SynchronousCommit: "on", StatementTimeout: "0", Standbys: 1, Synchronous: 1, SynchronousStandbyNames: "s1"}, 0},
	} {
		if got := c.d.Warnings(); len(got) != c.want {
			t.Errorf("%+v: warnings %q; want %d", c.d, got, c.want)
		}
	}
}

// TestDurabilityStandbys: on a primary whose standby streams
// asynchronously the Store warns; with the standby synchronous it does
// not.
func TestDurabilityStandbys(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "sync"}[sync], func(t *testing.T) {
			t.Parallel()
			pair := pgtest.NewPair(t, sync)
			dsn, err := pair.DSN("durability")
			if err != nil {
				t.Fatal(err)
			}
			st, err := Open(t.Context(), dsn, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			d, err := st.Durability(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if d.Standbys != 1 || d.Unseen != 0 {
				t.Fatalf("durability %+v: want the one standby seen", d)
			}
			w := d.Warnings()
			switch {
			case sync && len(w) != 0:
				t.Errorf("synchronous standby: warnings %q; want none", w)
			case !sync && (len(w) != 1 || !strings.Contains(w[0], "asynchronously")):
				t.Errorf("asynchronous standby: warnings %q; want the one about it", w)
			}
		})
	}
}
