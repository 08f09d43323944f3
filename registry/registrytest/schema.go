package registrytest

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Portable statements that change a record behind the store's back.
const (
	// moveTerminal sets a terminal state and its response snapshot.
	moveTerminal = `UPDATE idem_operations SET state = $1, resp_status = $2, resp_media_type = $3,
		resp_location = '', resp_etag = '', resp_body = $4, resp_digest = $5 WHERE scope = $6`
	// moveInFlight sets a non-terminal state, without response.
	moveInFlight = `UPDATE idem_operations SET state = $1, resp_status = NULL, resp_media_type = NULL,
		resp_location = NULL, resp_etag = NULL, resp_body = NULL, resp_digest = NULL WHERE scope = $2`
	countState = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND state = $2`
)

// snapshot is the response moveTerminal stores (Location and ETag empty).
var snapshot = idem.Response{Status: 200, MediaType: "text/plain", Body: []byte("moved by the suite")}

// move sets the state of the record at scope with a portable UPDATE, with
// a valid response snapshot when to is terminal.
func (e *env) move(scope idem.ScopeHash, to idem.State) error {
	if to.Terminal() {
		d := snapshot.Digest()
		return e.h.Exec(e.ctx, moveTerminal, string(to), snapshot.Status, snapshot.MediaType, snapshot.Body, d[:], scope[:])
	}
	return e.h.Exec(e.ctx, moveInFlight, string(to), scope[:])
}

// pathTo is a shortest chain of legal moves from RESERVED to s (empty for
// RESERVED itself), found over idem.CanTransition.
func pathTo(s idem.State) []idem.State {
	prev := map[idem.State]idem.State{idem.StateReserved: ""}
	queue := []idem.State{idem.StateReserved}
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		for _, to := range idem.States() {
			if _, seen := prev[to]; !seen && idem.CanTransition(from, to) {
				prev[to] = from
				queue = append(queue, to)
			}
		}
	}
	if _, ok := prev[s]; !ok {
		return nil
	}
	var path []idem.State
	for at := s; at != idem.StateReserved; at = prev[at] {
		path = append([]idem.State{at}, path...)
	}
	return path
}

// testTransitionsEnforced: the database accepts exactly the transitions
// idem.CanTransition allows, keeps identity columns and never lowers the
// owner generation.
// Proves threat:editing-finished-records (docs/threat-model.md).
func testTransitionsEnforced(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	for _, from := range idem.States() {
		path := pathTo(from)
		if from != idem.StateReserved && path == nil {
			t.Errorf("state %s is not reachable from RESERVED", from)
			continue
		}
		for _, to := range idem.States() {
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				e := &env{t: t, h: e.h, ctx: e.ctx, rng: e.rng}
				c := e.claim("conformance.transitions")
				e.reserve(c)
				for _, s := range path {
					if err := e.move(c.Scope, s); err != nil {
						t.Fatalf("legal move to %s on the way to %s refused: %v", s, from, err)
					}
				}
				if n := e.count(countState, c.Scope[:], string(from)); n != 1 {
					t.Fatalf("record not in state %s after moving there", from)
				}
				err := e.move(c.Scope, to)
				legal := idem.CanTransition(from, to)
				switch {
				case legal && err != nil:
					t.Errorf("legal transition %s -> %s refused: %v", from, to, err)
				case !legal && err == nil:
					t.Errorf("illegal transition %s -> %s accepted by the database", from, to)
				}
				want := from
				if legal {
					want = to
				}
				if n := e.count(countState, c.Scope[:], string(want)); n != 1 {
					t.Errorf("after %s -> %s the record is not in state %s", from, to, want)
				}
			})
		}
	}

	c := e.claim("conformance.identity")
	rec := e.reserve(c)
	other := e.fingerprint()
	for _, u := range []struct {
		what, sql string
		arg       any
	}{
		{"operation_id", `UPDATE idem_operations SET operation_id = $1 WHERE scope = $2`, idem.NewOperationID(base, c.Scope)},
		{"fingerprint", `UPDATE idem_operations SET fingerprint = $1 WHERE scope = $2`, other[:]},
	} {
		if err := e.h.Exec(e.ctx, u.sql, u.arg, c.Scope[:]); err == nil {
			t.Errorf("the database let %s change", u.what)
		}
	}
	e.exec(`UPDATE idem_operations SET owner_gen = 3 WHERE scope = $1`, c.Scope[:])
	if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET owner_gen = 2 WHERE scope = $1`, c.Scope[:]); err == nil {
		t.Errorf("the database let owner_gen go down")
	}
	got, err := e.h.Store.Get(e.ctx, c.Scope)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.OperationID != rec.OperationID || got.Fingerprint != rec.Fingerprint || got.OwnerGen != 3 {
		t.Errorf("after refused updates: id %s fingerprint %v gen %d, want %s %v 3",
			got.OperationID, got.Fingerprint, got.OwnerGen, rec.OperationID, rec.Fingerprint)
	}
}

// testDigestCheckedOnReplay: a stored response that does not match its
// digest is never returned — every read reports idem.ErrDigestMismatch.
// Proves threat:tampered-response (docs/threat-model.md).
func testDigestCheckedOnReplay(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	checkMismatch := func(what string, c registry.Claim, opID string) {
		t.Helper()
		if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, idem.ErrDigestMismatch) {
			t.Errorf("%s: Get: %v, want ErrDigestMismatch", what, err)
		}
		if _, err := e.h.Store.GetByID(e.ctx, opID); !errors.Is(err, idem.ErrDigestMismatch) {
			t.Errorf("%s: GetByID: %v, want ErrDigestMismatch", what, err)
		}
		if rec, created, err := e.h.Store.Reserve(e.ctx, c); !errors.Is(err, idem.ErrDigestMismatch) || created {
			t.Errorf("%s: Reserve of the scope: created %v response %+v err %v, want ErrDigestMismatch", what, created, rec.Response, err)
		}
		res, err := e.h.ClaimAndExecute(e.ctx, c, effect("replayed?", outcome("x", 0)))
		if !errors.Is(err, idem.ErrDigestMismatch) || res.Verdict == registry.Replay {
			t.Errorf("%s: ClaimAndExecute of the scope: verdict %v err %v, want ErrDigestMismatch", what, res.Verdict, err)
		}
		if n := e.effects(opID); n != 0 {
			t.Errorf("%s: %d business rows, want 0", what, n)
		}
	}

	// A terminal state written by a legal transition, with a body that
	// does not match the digest stored beside it.
	c := e.claim("conformance.digest")
	rec := e.reserve(c)
	d := snapshot.Digest()
	e.exec(moveTerminal, string(idem.StateSucceeded), snapshot.Status, snapshot.MediaType, []byte("tampered"), d[:], c.Scope[:])
	checkMismatch("body not matching its digest", c, rec.OperationID)

	c = e.claim("conformance.digest")
	rec = e.reserve(c)
	e.exec(moveTerminal, string(idem.StateFailedFinal), 409, snapshot.MediaType, snapshot.Body, d[:], c.Scope[:])
	checkMismatch("status not matching its digest", c, rec.OperationID)

	// A completed record whose body is altered afterwards.
	c = e.claim("conformance.digest")
	rec = e.reserve(c)
	e.complete(rec, outcome("digest", 0))
	err := e.h.Exec(e.ctx, `UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`, []byte("corrupted"), c.Scope[:])
	if err != nil {
		t.Logf("the database refuses to alter a terminal record (%v); mismatches were checked above", err)
		return
	}
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, idem.ErrDigestMismatch) {
		t.Errorf("corrupted after Complete: Get: %v, want ErrDigestMismatch", err)
	}
	if _, err := e.h.Store.GetByID(e.ctx, rec.OperationID); !errors.Is(err, idem.ErrDigestMismatch) {
		t.Errorf("corrupted after Complete: GetByID: %v, want ErrDigestMismatch", err)
	}
}

// testTerminalRequiresSnapshot: the database refuses a terminal state
// without a complete response snapshot (every column set, a 32-byte
// digest) and an in-flight state with one.
func testTerminalRequiresSnapshot(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const set = `UPDATE idem_operations SET state = $1, resp_status = $2, resp_media_type = $3,
		resp_location = $4, resp_etag = $5, resp_body = $6, resp_digest = $7 WHERE scope = $8`
	d := snapshot.Digest()
	valid := []any{snapshot.Status, snapshot.MediaType, "", "", snapshot.Body, d[:]}
	columns := []string{"resp_status", "resp_media_type", "resp_location", "resp_etag", "resp_body", "resp_digest"}
	try := func(state idem.State, snap []any) (registry.Claim, error) {
		c := e.claim("conformance.snapshot-check")
		e.reserve(c)
		return c, e.h.Exec(e.ctx, set, append(append([]any{string(state)}, snap...), c.Scope[:])...)
	}
	for _, s := range idem.States() {
		if !s.Terminal() {
			if !idem.CanTransition(idem.StateReserved, s) {
				continue // the transition trigger refuses it anyway
			}
			if c, err := try(s, valid); err == nil {
				t.Errorf("the database stored a response with state %s", s)
			} else if n := e.count(countState, c.Scope[:], string(idem.StateReserved)); n != 1 {
				t.Errorf("refused update to %s changed the record", s)
			}
			continue
		}
		if _, err := try(s, valid); err != nil {
			t.Errorf("%s with a complete snapshot refused: %v", s, err)
		}
		for i, col := range columns {
			snap := append([]any(nil), valid...)
			snap[i] = nil
			if c, err := try(s, snap); err == nil {
				t.Errorf("the database stored state %s with %s NULL", s, col)
			} else if n := e.count(countState, c.Scope[:], string(idem.StateReserved)); n != 1 {
				t.Errorf("refused update to %s changed the record", s)
			}
		}
		short := append([]any(nil), valid...)
		short[5] = d[:31]
		if _, err := try(s, short); err == nil {
			t.Errorf("the database stored state %s with a 31-byte digest", s)
		}
	}
}
