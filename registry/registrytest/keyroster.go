package registrytest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// testKeyRoster: instances announce the keys they hold; KeyHolders lists
// those seen within the window, with their keys, and Lacking names the
// ones without a key; a new announcement replaces the old one, an entry
// older than the window is not listed, a forgotten instance is gone, and
// a bad entry is refused.
//
// threat:key-used-before-held
func testKeyRoster(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	kr, ok := e.h.Store.(registry.KeyRoster)
	if !ok {
		t.Fatalf("driver %s: the Store is not a registry.KeyRoster", e.h.Name)
	}
	holders := func(window time.Duration) []registry.KeyHolder {
		t.Helper()
		hs, err := kr.KeyHolders(e.ctx, window)
		if err != nil {
			t.Fatalf("KeyHolders: %v", err)
		}
		return hs
	}
	announce := func(instance string, ids ...string) {
		t.Helper()
		if err := kr.AnnounceKeys(e.ctx, instance, ids); err != nil {
			t.Fatalf("AnnounceKeys(%s): %v", instance, err)
		}
	}
	e.setNow(base)
	announce("old-server", "k1")
	announce("new-server", "k2", "k1")
	hs := holders(time.Minute)
	if len(hs) != 2 || hs[0].Instance != "new-server" || !slices.Equal(hs[0].KeyIDs, []string{"k1", "k2"}) ||
		!hs[0].SeenAt.Equal(base) || hs[1].Instance != "old-server" || !slices.Equal(hs[1].KeyIDs, []string{"k1"}) {
		t.Fatalf("KeyHolders: %+v, want new-server [k1 k2] and old-server [k1] at %v", hs, base)
	}
	if got := registry.Lacking(hs, "k2"); !slices.Equal(got, []string{"old-server"}) {
		t.Errorf("Lacking k2: %v, want [old-server]", got)
	}
	if got := registry.Lacking(hs, "k1"); len(got) != 0 {
		t.Errorf("Lacking k1: %v, want none", got)
	}

	// The old server restarts with the new file: its entry is replaced.
	e.setNow(base.Add(10 * time.Second))
	announce("old-server", "k1", "k2")
	if got := registry.Lacking(holders(time.Minute), "k2"); len(got) != 0 {
		t.Errorf("Lacking k2 after the restart: %v, want none", got)
	}

	// An instance that stopped announcing ages out of the window.
	e.setNow(base.Add(50 * time.Second))
	announce("stale-later", "k1")
	e.setNow(base.Add(65 * time.Second))
	hs = holders(time.Minute)
	var names []string
	for _, h := range hs {
		names = append(names, h.Instance)
	}
	if strings.Join(names, ",") != "old-server,stale-later" {
		t.Errorf("KeyHolders a minute later: %v, want old-server and stale-later (new-server aged out)", names)
	}

	if err := kr.ForgetInstance(e.ctx, "stale-later"); err != nil {
		t.Fatalf("ForgetInstance: %v", err)
	}
	if err := kr.ForgetInstance(e.ctx, "never-was"); err != nil {
		t.Errorf("ForgetInstance of an unknown instance: %v", err)
	}
	if got := registry.Lacking(holders(time.Minute), "k2"); len(got) != 0 {
		t.Errorf("Lacking k2 after stale-later was forgotten: %v, want none", got)
	}
	for _, bad := range []struct {
		instance string
		ids      []string
	}{{"", []string{"k1"}}, {strings.Repeat("x", 129), []string{"k1"}}, {"ok", []string{"k 1"}}, {"ok", []string{""}}} {
		if err := kr.AnnounceKeys(e.ctx, bad.instance, bad.ids); !errors.Is(err, registry.ErrBadKeyHolder) {
			t.Errorf("AnnounceKeys(%q, %q): %v, want ErrBadKeyHolder", bad.instance, bad.ids, err)
		}
	}
}
