package registrytest

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of a database writer against sealed bodies: with a key ring, a
// body the ring did not seal for its record and its digest — plaintext,
// moved, edited — is never served; the database lets a settled response
// change only by a re-seal; a rotation skips what it cannot open.

const (
	// forgeResponse overwrites the whole response of the record at $7:
	// $1 status, $2 media type, $3 body, $4 digest, $5 key (NULL:
	// plaintext), $6 ETag; Location is emptied.
	forgeResponse = `UPDATE idem_operations SET resp_status = $1, resp_media_type = $2, resp_body = $3,
		resp_digest = $4, resp_key = $5, resp_etag = $6, resp_location = '' WHERE scope = $7`
	// copySettled copies the whole response of the record at $1 onto the
	// settled record at $2.
	copySettled = `UPDATE idem_operations SET
		resp_status = (SELECT o.resp_status FROM idem_operations o WHERE o.scope = $1),
		resp_media_type = (SELECT o.resp_media_type FROM idem_operations o WHERE o.scope = $1),
		resp_location = (SELECT o.resp_location FROM idem_operations o WHERE o.scope = $1),
		resp_etag = (SELECT o.resp_etag FROM idem_operations o WHERE o.scope = $1),
		resp_body = (SELECT o.resp_body FROM idem_operations o WHERE o.scope = $1),
		resp_digest = (SELECT o.resp_digest FROM idem_operations o WHERE o.scope = $1),
		resp_key = (SELECT o.resp_key FROM idem_operations o WHERE o.scope = $1)
		WHERE scope = $2`
	// restatus changes a record's status and digest, nothing else.
	restatus = `UPDATE idem_operations SET resp_status = $1, resp_digest = $2 WHERE scope = $3`
	// setKey sets a record's key, nothing else.
	setKey = `UPDATE idem_operations SET resp_key = $1 WHERE scope = $2`
	// setBodyKey sets a record's body and key together.
	setBodyKey = `UPDATE idem_operations SET resp_body = $1, resp_key = $2 WHERE scope = $3`
	// bodyOfScope reads nothing but proves a row is there with that body.
	countBody = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND resp_body = $2`
)

// settled is a record settled by settledSealed.
type settled struct {
	claim       registry.Claim
	out         registry.Outcome
	operationID string
}

// settledSealed reserves and completes a record with st, its body
// holding marker.
func (e *env) settledSealed(st registry.Store, marker string) settled {
	e.t.Helper()
	c := e.claim("conformance.forgery")
	rec, _, err := st.Reserve(e.ctx, c)
	if err != nil {
		e.t.Fatalf("Reserve: %v", err)
	}
	out := sealedOutcome(marker)
	if _, err := st.Complete(e.ctx, rec, effect("forgery", out)); err != nil {
		e.t.Fatalf("Complete: %v", err)
	}
	return settled{claim: c, out: out, operationID: rec.OperationID}
}

// wantTampered checks that every read of the record at c.Scope fails
// closed with registry.ErrTampered and returns no response.
func (e *env) wantTampered(st registry.Store, what string, c registry.Claim) {
	e.t.Helper()
	if got, err := st.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrTampered) || got.Response != nil {
		e.t.Errorf("%s: Get %q %v, want ErrTampered and no response", what, bodyOf(got), err)
	}
	if got, _, err := st.Reserve(e.ctx, c); !errors.Is(err, registry.ErrTampered) || got.Response != nil {
		e.t.Errorf("%s: Reserve (the replay path) %q %v, want ErrTampered and no response", what, bodyOf(got), err)
	}
}

// testSealedForgeryFailsClosed: with a key ring and every trigger on
// idem_operations dropped, a database writer (a) plants a forged
// plaintext response with resp_key NULL and its digest recomputed,
// (b) copies another settled record's sealed response, whole, onto a
// record, (c) edits a sealed body, or changes the status and recomputes
// the digest over the (guessed) plaintext: every one fails closed with
// ErrTampered — on Get and on the replay path — and an untouched record
// still reads. So does an effect's request replaced by a plaintext one.
//
// threat:sealed-body-forgery
// Proves threat:moved-sealed-body (docs/threat-model.md).
// Proves threat:tampered-response (docs/threat-model.md).
func testSealedForgeryFailsClosed(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	if e.h.DropGuards == nil {
		t.Fatalf("driver %s: Harness.DropGuards is nil", e.h.Name)
	}
	st := e.sealedStore(ring(t, "k1"))
	forged := e.settledSealed(st, "victim-a")
	moved := e.settledSealed(st, "victim-b")
	from := e.settledSealed(st, "donor")
	edited := e.settledSealed(st, "victim-c")
	restated := e.settledSealed(st, "victim-d")
	intact := e.settledSealed(st, "intact")
	pending := e.claim("conformance.forgery")
	prec, _, err := st.Reserve(e.ctx, pending)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := st.BeginEffect(e.ctx, prec, "transfer", []byte(`{"to":"alice"}`)); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if err := e.h.DropGuards(e.ctx); err != nil {
		t.Fatalf("DropGuards: %v", err)
	}

	// (a) A forged plaintext body with a correct digest.
	fake := idem.Response{Status: 201, MediaType: "application/json", ETag: `"x"`, Body: []byte(`{"secret":"forged"}`)}
	digest := fake.Digest()
	e.exec(forgeResponse, fake.Status, fake.MediaType, fake.Body, digest[:], nil, fake.ETag, forged.claim.Scope[:])
	if e.count(countBody, forged.claim.Scope[:], fake.Body) != 1 {
		t.Fatalf("the forged body did not land")
	}
	e.wantTampered(st, "a forged plaintext body", forged.claim)

	// (b) Another settled record's sealed response, copied whole.
	e.exec(copySettled, from.claim.Scope[:], moved.claim.Scope[:])
	e.wantTampered(st, "a body moved from another record", moved.claim)

	// (c) An edited sealed body, and a changed status with its digest
	// recomputed over the plaintext.
	e.exec(`UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`, []byte("\x01edited-ciphertext-of-some-length"), edited.claim.Scope[:])
	e.wantTampered(st, "an edited sealed body", edited.claim)
	resp := restated.out.Response
	resp.Status = 200
	digest = resp.Digest()
	e.exec(restatus, resp.Status, digest[:], restated.claim.Scope[:])
	e.wantTampered(st, "a status changed with its digest recomputed", restated.claim)

	// An effect's request replaced by a plaintext one.
	e.exec(`UPDATE idem_effects SET request = $1, request_key = NULL WHERE operation_id = $2`, []byte(`{"to":"mallory"}`), prec.OperationID)
	if effs, err := st.Effects(e.ctx, prec.OperationID); !errors.Is(err, registry.ErrTampered) || len(effs) != 0 {
		t.Errorf("a forged plaintext effect request: %+v %v, want ErrTampered", effs, err)
	}

	if got, err := st.Get(e.ctx, intact.claim.Scope); err != nil || got.Response == nil ||
		string(got.Response.Body) != string(intact.out.Response.Body) {
		t.Errorf("the untouched record: %q %v", bodyOf(got), err)
	}
}

// testSettledBodyGuard: with its triggers in place the database lets a
// settled response change only by a re-seal — body and key together,
// from one key to another — so neither a downgrade to plaintext, nor a
// plaintext record given a key (the first of two UPDATEs that would plant
// a body), nor a key or body changed alone, nor a status or digest
// change, is stored; a re-seal-shaped change is.
//
// threat:settled-body-rewrite
// Proves threat:editing-finished-records (docs/threat-model.md).
// Proves threat:writer-without-ring (docs/threat-model.md).
func testSettledBodyGuard(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	sealed := e.settledSealed(e.sealedStore(ring(t, "k1")), "guarded")
	plain := e.settledSealed(e.h.Store, "plain")
	refused := []struct {
		what string
		sql  string
		args []any
	}{
		{"a sealed body downgraded to plaintext", setBodyKey, []any{[]byte(`{"secret":"x"}`), nil, sealed.claim.Scope[:]}},
		{"a sealed record's key dropped", setKey, []any{nil, sealed.claim.Scope[:]}},
		{"a sealed record's key changed alone", setKey, []any{"k2", sealed.claim.Scope[:]}},
		{"a sealed body changed under its key", setBodyKey, []any{[]byte("other"), "k1", sealed.claim.Scope[:]}},
		{"a plaintext record given a key and a body", setBodyKey, []any{[]byte("forged"), "x", plain.claim.Scope[:]}},
		{"a plaintext record given a key", setKey, []any{"x", plain.claim.Scope[:]}},
		{"a plaintext body changed", setBodyKey, []any{[]byte("forged"), nil, plain.claim.Scope[:]}},
		{"a status changed", `UPDATE idem_operations SET resp_status = 200 WHERE scope = $1`, []any{plain.claim.Scope[:]}},
		{"a digest changed", `UPDATE idem_operations SET resp_digest = $1 WHERE scope = $2`, []any{make([]byte, 32), sealed.claim.Scope[:]}},
	}
	for _, r := range refused {
		if err := e.h.Exec(e.ctx, r.sql, r.args...); err == nil {
			t.Errorf("the database stored %s", r.what)
		}
	}
	if err := e.h.Exec(e.ctx, setBodyKey, []byte("\x01re-sealed"), "k2", sealed.claim.Scope[:]); err != nil {
		t.Errorf("a re-seal-shaped change (body and key to another key): %v", err)
	}
}

// testResealSkipsUnopenable: a rotation reports and skips what it cannot
// open — a body under a key the ring lacks, a tampered body, a plaintext
// body (never sealed: it could be a forgery) — and re-seals the rest in
// the same pass.
//
// threat:rotation-stops-or-seals-forgery
func testResealSkipsUnopenable(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	k1 := e.sealedStore(ring(t, "k1"))
	good1 := e.settledSealed(k1, "good-1")
	lost := e.settledSealed(e.sealedStore(ring(t, "k2")), "lost-key") // k2 is not in the rotating ring
	tampered := e.settledSealed(k1, "tampered")
	plain := e.settledSealed(e.h.Store, "plain")
	good2 := e.settledSealed(k1, "good-2")
	if err := e.h.DropGuards(e.ctx); err != nil {
		t.Fatalf("DropGuards: %v", err)
	}
	e.exec(`UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`, []byte("\x01edited-ciphertext-of-some-length"), tampered.claim.Scope[:])

	rs := e.sealedStore(ring(t, "k1", "k3")).(registry.Resealer)
	changed, skipped := 0, map[string]bool{}
	for cursor, batches := "", 0; ; batches++ {
		if batches > 100 {
			t.Fatalf("Reseal does not finish")
		}
		b, err := rs.Reseal(e.ctx, cursor, 2)
		if err != nil {
			t.Fatalf("Reseal(%q): %v", cursor, err)
		}
		changed += b.Changed
		for _, s := range b.Skipped {
			if !errors.Is(s.Err, registry.ErrUnreadable) {
				t.Errorf("skipped %s: %v, want ErrUnreadable", s.Body, s.Err)
			}
			skipped[s.Body] = true
		}
		if cursor = b.Next; cursor == "" {
			break
		}
	}
	if changed != 2 {
		t.Errorf("Reseal changed %d bodies, want the 2 it can open", changed)
	}
	for _, c := range []settled{lost, tampered, plain} {
		if !skipped["operation "+c.operationID] {
			t.Errorf("operation %s not reported as skipped: %v", c.operationID, skipped)
		}
	}
	if len(skipped) != 3 {
		t.Errorf("skipped %v, want 3", skipped)
	}
	k3 := e.sealedStore(ring(t, "k3"))
	for _, c := range []settled{good1, good2} {
		if got, err := k3.Get(e.ctx, c.claim.Scope); err != nil || string(bodyOf(got)) != string(c.out.Response.Body) {
			t.Errorf("after the rotation, with k3 only: %q %v", bodyOf(got), err)
		}
	}
}

// testResealUpgradesLegacy: a response sealed by an earlier version,
// whose seal binds the scope alone, is refused on replay (it does not
// authenticate the operation ID and digest) and re-sealed by a rotation
// to a new key, after which it replays.
func testResealUpgradesLegacy(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	k1 := ring(t, "k1")
	st := e.sealedStore(k1)
	old := e.settledSealed(st, "sealed-by-an-earlier-version")
	if err := e.h.DropGuards(e.ctx); err != nil {
		t.Fatalf("DropGuards: %v", err)
	}
	_, legacy, err := k1.Seal(old.out.Response.Body, append([]byte("idem/sealed/response\x00"), old.claim.Scope[:]...))
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`, legacy, old.claim.Scope[:])
	e.wantTampered(st, "a body with the earlier binding", old.claim)

	rs := e.sealedStore(ring(t, "k1", "k2")).(registry.Resealer)
	b, err := rs.Reseal(e.ctx, "", 10)
	if err != nil || b.Changed != 1 || len(b.Skipped) != 0 {
		t.Fatalf("Reseal: %+v %v, want the body re-sealed", b, err)
	}
	if got, err := e.sealedStore(ring(t, "k2")).Get(e.ctx, old.claim.Scope); err != nil ||
		string(bodyOf(got)) != string(old.out.Response.Body) {
		t.Errorf("after the rotation: %q %v, want the body", bodyOf(got), err)
	}
}
