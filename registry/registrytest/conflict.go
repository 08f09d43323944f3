package registrytest

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// mixedClaims returns racers claims with one fingerprint and, at a random
// position, one claim on the same scope with another fingerprint.
func mixedClaims(e *env, operation string) (claims []registry.Claim, odd int) {
	c := e.claim(operation)
	other := c
	other.Fingerprint = e.fingerprint()
	claims = make([]registry.Claim, racers+1)
	for i := range claims {
		claims[i] = c
	}
	odd = e.rng.IntN(len(claims))
	claims[odd] = other
	e.t.Logf("the other fingerprint races at position %d of %d", odd, len(claims))
	return claims, odd
}

// testDifferentFingerprintConflicts: whichever fingerprint wins a scope,
// every request with another fingerprint gets Conflict, in both styles.
func testDifferentFingerprintConflicts(t *testing.T, nh NewHarness) {
	t.Run("TwoPhase", func(t *testing.T) {
		t.Parallel()
		conflictsTwoPhase(setup(t, nh))
	})
	t.Run("InTx", func(t *testing.T) {
		t.Parallel()
		conflictsInTx(setup(t, nh))
	})
}

func conflictsTwoPhase(e *env) {
	t := e.t
	type obs struct {
		rec     registry.Record
		created bool
		err     error
	}
	reserveAll := func(claims []registry.Claim) []obs {
		hist := make([]obs, len(claims))
		race(len(claims), func(i int) {
			hist[i].rec, hist[i].created, hist[i].err = e.h.Store.Reserve(e.ctx, claims[i])
		})
		return hist
	}
	// check checks the history against the winning fingerprint and, for
	// requests sharing it, the verdict they must get.
	check := func(round string, claims []registry.Claim, hist []obs, win idem.Fingerprint, same registry.Verdict) {
		for i, o := range hist {
			fp := claims[i].Fingerprint
			switch {
			case o.err != nil:
				t.Errorf("%s: request %d: Reserve: %v", round, i, o.err)
			case o.created:
			case o.rec.Fingerprint != win:
				t.Errorf("%s: request %d got a record with fingerprint %v, the winner's is %v", round, i, o.rec.Fingerprint, win)
			case fp != win && registry.Decide(o.rec, false, fp) != registry.Conflict:
				t.Errorf("%s: request %d (other fingerprint): verdict %v, want conflict", round, i, registry.Decide(o.rec, false, fp))
			case fp == win && registry.Decide(o.rec, false, fp) != same:
				t.Errorf("%s: request %d (winner's fingerprint): verdict %v, want %v", round, i, registry.Decide(o.rec, false, fp), same)
			}
		}
		got, err := e.h.Store.Get(e.ctx, claims[0].Scope)
		if err != nil || got.Fingerprint != win {
			t.Errorf("%s: stored record fingerprint %v (err %v), want the winner's %v", round, got.Fingerprint, err, win)
		}
	}

	claims, odd := mixedClaims(e, "conformance.conflict")
	hist := reserveAll(claims)
	winner := -1
	for i, o := range hist {
		if o.err == nil && o.created {
			if winner >= 0 {
				t.Fatalf("requests %d and %d both created the record", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no request created the record")
	}
	t.Logf("request %d won (other fingerprint: %v)", winner, winner == odd)
	check("race", claims, hist, claims[winner].Fingerprint, registry.InProgress)

	// The odd fingerprint reserves first; then the majority races and loses.
	claims, odd = mixedClaims(e, "conformance.conflict")
	first := e.reserve(claims[odd])
	rest := append(append([]registry.Claim(nil), claims[:odd]...), claims[odd+1:]...)
	hist = reserveAll(rest)
	check("odd first", rest, hist, first.Fingerprint, registry.InProgress)
	for i, o := range hist {
		if o.created {
			t.Errorf("odd first: request %d created an existing record", i)
		}
	}
	// Terminal or not, a different fingerprint stays a conflict.
	e.complete(first, outcome("conflict", 0))
	hist = reserveAll(rest[:10])
	check("after completion", rest[:10], hist, first.Fingerprint, registry.Replay)
}

func conflictsInTx(e *env) {
	t := e.t
	check := func(round string, claims []registry.Claim, hist []txObs, win idem.Fingerprint) {
		for i, o := range hist {
			fp, v := claims[i].Fingerprint, o.res.Verdict
			switch {
			case o.err != nil:
				t.Errorf("%s: request %d: %v", round, i, o.err)
			case v == registry.Execute:
			case o.res.Record.Fingerprint != win:
				t.Errorf("%s: request %d got a record with fingerprint %v, the winner's is %v", round, i, o.res.Record.Fingerprint, win)
			case fp != win && v != registry.Conflict:
				t.Errorf("%s: request %d (other fingerprint): verdict %v, want conflict", round, i, v)
			case fp == win && v != registry.Replay && v != registry.InProgress:
				t.Errorf("%s: request %d (winner's fingerprint): verdict %v, want replay or in_progress", round, i, v)
			}
		}
		got, err := e.h.Store.Get(e.ctx, claims[0].Scope)
		if err != nil || got.Fingerprint != win {
			t.Errorf("%s: stored record fingerprint %v (err %v), want the winner's %v", round, got.Fingerprint, err, win)
		}
		if err == nil {
			if n := e.effects(got.OperationID); n != 1 {
				t.Errorf("%s: %d business rows, want 1", round, n)
			}
		}
	}

	out := outcome("conflict-tx", 1)
	claims, odd := mixedClaims(e, "conformance.conflict-tx")
	hist, calls := raceInTx(e, claims, out)
	winner := -1
	for i, o := range hist {
		if o.err == nil && o.res.Verdict == registry.Execute {
			if winner >= 0 {
				t.Fatalf("requests %d and %d both executed", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no request executed")
	}
	if calls != 1 {
		t.Errorf("business function ran %d times, want 1", calls)
	}
	t.Logf("request %d won (other fingerprint: %v)", winner, winner == odd)
	check("race", claims, hist, claims[winner].Fingerprint)

	claims, odd = mixedClaims(e, "conformance.conflict-tx")
	res, err := e.h.ClaimAndExecute(e.ctx, claims[odd], effect("odd", out))
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("odd fingerprint alone: verdict %v err %v, want execute", res.Verdict, err)
	}
	rest := append(append([]registry.Claim(nil), claims[:odd]...), claims[odd+1:]...)
	hist, calls = raceInTx(e, rest, out)
	if calls != 0 {
		t.Errorf("odd first: business function ran %d times, want 0", calls)
	}
	check("odd first", rest, hist, claims[odd].Fingerprint)
}
