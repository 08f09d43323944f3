package registrytest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// Cases of bodies sealed at rest (SPEC C4, registry.Sealer): no plaintext
// in the database, a body bound to its record, and rotation.

// Portable statements that look at sealed columns.
const (
	countRespBody   = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND resp_body = $2`
	countRespKey    = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND resp_key = $2`
	countEffectBody = `SELECT count(*) FROM idem_effects WHERE operation_id = $1 AND (request = $2 OR answer = $3)`
	countEffectKeys = `SELECT count(*) FROM idem_effects WHERE operation_id = $1 AND request_key = $2 AND answer_key = $2`
	// copySealed moves the in-flight record at $2 to SUCCEEDED with the
	// whole sealed response of the record at $1: body, key, digest and
	// every other field — a legal transition, so only the body's binding
	// to its record can tell.
	copySealed = `UPDATE idem_operations SET state = 'SUCCEEDED',
		resp_status = (SELECT o.resp_status FROM idem_operations o WHERE o.scope = $1),
		resp_media_type = (SELECT o.resp_media_type FROM idem_operations o WHERE o.scope = $1),
		resp_location = (SELECT o.resp_location FROM idem_operations o WHERE o.scope = $1),
		resp_etag = (SELECT o.resp_etag FROM idem_operations o WHERE o.scope = $1),
		resp_body = (SELECT o.resp_body FROM idem_operations o WHERE o.scope = $1),
		resp_digest = (SELECT o.resp_digest FROM idem_operations o WHERE o.scope = $1),
		resp_key = (SELECT o.resp_key FROM idem_operations o WHERE o.scope = $1)
		WHERE scope = $2`
	// rewriteBody changes a terminal record's body in place, keeping its key.
	rewriteBody = `UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`
)

// ring builds a key ring from fixed test secrets: keys named in ids, the
// last one active.
func ring(t *testing.T, ids ...string) *keyring.Ring {
	t.Helper()
	f := keyring.File{Active: ids[len(ids)-1]}
	for _, id := range ids {
		k, err := keyring.NewKey(id)
		if err != nil {
			t.Fatal(err)
		}
		k.Secret = testSecrets[id]
		f.Keys = append(f.Keys, k)
	}
	r, err := keyring.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testSecrets are the suite's keys (base64 of 32 bytes each).
var testSecrets = map[string]string{
	"k1": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
	"k2": "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=",
	"k3": "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=",
}

// sealedStore opens the harness's database with s and fails the test if
// the driver offers no sealed Store.
func (e *env) sealedStore(s registry.Sealer) registry.Store {
	e.t.Helper()
	if e.h.Sealed == nil {
		e.t.Fatalf("driver %s: Harness.Sealed is nil", e.h.Name)
	}
	return e.h.Sealed(e.t, s)
}

// sealedOutcome returns a successful outcome whose body holds marker.
func sealedOutcome(marker string) registry.Outcome {
	out := outcome("sealed", 1)
	out.Response.Body = []byte(`{"secret":"` + marker + `"}`)
	return out
}

// testSealedAtRest: with a Sealer, no body the Store keeps — a response,
// an effect's request and answer, a reconciled response — is stored in
// plaintext; each names its key; the sealed Store reads them back as they
// were, and a Store without the key cannot (ErrUnreadable), never
// returning the sealed bytes.
// Proves threat:reading-bodies-at-rest (docs/threat-model.md).
func testSealedAtRest(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	st := e.sealedStore(ring(t, "k1"))

	c := e.claim("conformance.sealed")
	rec, created, err := st.Reserve(e.ctx, c)
	if err != nil || !created {
		t.Fatalf("Reserve: %v %v", created, err)
	}
	out := sealedOutcome("completed-body")
	if _, err := st.Complete(e.ctx, rec, effect("sealed", out)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if n := e.count(countRespBody, c.Scope[:], out.Response.Body); n != 0 {
		t.Errorf("the response body is stored in plaintext")
	}
	if n := e.count(countRespKey, c.Scope[:], "k1"); n != 1 {
		t.Errorf("the response does not name key k1")
	}
	got, err := st.Get(e.ctx, c.Scope)
	if err != nil || got.Response == nil || !bytes.Equal(got.Response.Body, out.Response.Body) {
		t.Errorf("sealed Get: %v, body %q, want %q", err, bodyOf(got), out.Response.Body)
	}
	if got, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrUnreadable) || got.Response != nil {
		t.Errorf("Get without the key: response %q err %v, want ErrUnreadable", bodyOf(got), err)
	}

	// The one-transaction style seals too.
	once := e.claim("conformance.sealed")
	if _, err := st.ExecuteOnce(e.ctx, once, effect("once", out)); err != nil {
		t.Fatalf("ExecuteOnce: %v", err)
	}
	if e.count(countRespBody, once.Scope[:], out.Response.Body) != 0 || e.count(countRespKey, once.Scope[:], "k1") != 1 {
		t.Errorf("ExecuteOnce stored the body in plaintext or without its key")
	}

	// An effect's request and answer, and the reconciled response.
	u := e.claim("conformance.sealed")
	rec, _, err = st.Reserve(e.ctx, u)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	request, answer := []byte(`{"amount":"sealed-request"}`), []byte(`{"status":"sealed-answer"}`)
	if _, err := st.BeginEffect(e.ctx, rec, "transfer", request); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if rec, err = st.MarkUnknown(e.ctx, rec); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	if err := st.RecordEffect(e.ctx, rec, "transfer", "h-1", registry.EffectSucceeded, answer); err != nil {
		t.Fatalf("RecordEffect: %v", err)
	}
	if e.count(countEffectBody, rec.OperationID, request, answer) != 0 || e.count(countEffectKeys, rec.OperationID, "k1") != 1 {
		t.Errorf("the effect's request or answer is stored in plaintext or without its key")
	}
	effs, err := st.Effects(e.ctx, rec.OperationID)
	if err != nil || len(effs) != 1 || !bytes.Equal(effs[0].Request, request) || !bytes.Equal(effs[0].Answer, answer) {
		t.Errorf("sealed Effects: %+v %v, want the request and answer back", effs, err)
	}
	if _, err := e.h.Store.Effects(e.ctx, rec.OperationID); !errors.Is(err, registry.ErrUnreadable) {
		t.Errorf("Effects without the key: %v, want ErrUnreadable", err)
	}
	settled := sealedOutcome("reconciled-body")
	if _, err := st.Reconcile(e.ctx, rec.OperationID, registry.Reconciliation{
		Outcome: idem.StateSucceeded, Response: settled.Response, Method: registry.ReconcileProvider,
		Actor: "conformance", Evidence: "the provider executed h-1",
	}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if e.count(countRespBody, u.Scope[:], settled.Response.Body) != 0 || e.count(countRespKey, u.Scope[:], "k1") != 1 {
		t.Errorf("Reconcile stored the body in plaintext or without its key")
	}
	if got, err := st.GetByID(e.ctx, rec.OperationID); err != nil || !bytes.Equal(bodyOf(got), settled.Response.Body) {
		t.Errorf("sealed GetByID after Reconcile: %q %v", bodyOf(got), err)
	}
}

// testSealedBodyBound: a sealed response copied whole — body, key, digest
// and every other field — onto another record does not open there: every
// read fails closed with ErrUnreadable and nothing is replayed. In place,
// the database refuses to change a terminal record's sealed body without a
// change of key.
// Proves threat:editing-finished-records (docs/threat-model.md).
// Proves threat:moved-sealed-body (docs/threat-model.md).
func testSealedBodyBound(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	st := e.sealedStore(ring(t, "k1"))
	from := e.claim("conformance.sealed")
	rec, _, err := st.Reserve(e.ctx, from)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := st.Complete(e.ctx, rec, effect("sealed", sealedOutcome("victim"))); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	to := e.claim("conformance.sealed")
	moved := e.reserve(to)
	e.exec(copySealed, from.Scope[:], to.Scope[:])
	if n := e.count(countRespKey, to.Scope[:], "k1"); n != 1 {
		t.Fatalf("the copy did not land (%d rows)", n)
	}
	if got, err := st.Get(e.ctx, to.Scope); !errors.Is(err, registry.ErrUnreadable) || got.Response != nil {
		t.Errorf("Get of the moved body: %q %v, want ErrUnreadable", bodyOf(got), err)
	}
	if _, err := st.GetByID(e.ctx, moved.OperationID); !errors.Is(err, registry.ErrUnreadable) {
		t.Errorf("GetByID of the moved body: %v, want ErrUnreadable", err)
	}
	if got, _, err := st.Reserve(e.ctx, to); !errors.Is(err, registry.ErrUnreadable) || got.Response != nil {
		t.Errorf("Reserve of the moved body's scope: %q %v, want ErrUnreadable", bodyOf(got), err)
	}
	if got, err := st.Get(e.ctx, from.Scope); err != nil || got.Response == nil {
		t.Errorf("the original still reads: %v", err)
	}
	if err := e.h.Exec(e.ctx, rewriteBody, []byte("replaced"), from.Scope[:]); err == nil {
		t.Errorf("the database let a terminal record's body change without a new key")
	}
}

// testResealRotates: after a new key becomes active, Reseal moves every
// sealed body to it, in batches, each read back byte-identical; afterwards
// no body uses the old key, a ring without it reads everything it sealed,
// and a second pass changes nothing. A plaintext body is never sealed (it
// could be a forgery): it stays plaintext and a Store with a ring refuses
// it.
// Proves threat:compromised-key (docs/threat-model.md).
func testResealRotates(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	old := e.sealedStore(ring(t, "k1"))
	want := map[idem.ScopeHash][]byte{}
	var plain idem.ScopeHash
	for i, st := range []registry.Store{old, old, e.h.Store} { // two sealed with k1, one plaintext
		c := e.claim("conformance.reseal")
		rec, _, err := st.Reserve(e.ctx, c)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		out := sealedOutcome(string(rune('a' + i)))
		if _, err := st.Complete(e.ctx, rec, effect("reseal", out)); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if st == e.h.Store {
			plain = c.Scope
			continue
		}
		want[c.Scope] = out.Response.Body
	}
	u := e.claim("conformance.reseal")
	urec, _, err := old.Reserve(e.ctx, u)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	request := []byte("reseal-request")
	if _, err := old.BeginEffect(e.ctx, urec, "transfer", request); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}

	next := e.sealedStore(ring(t, "k1", "k2"))
	rs, ok := next.(registry.Resealer)
	if !ok {
		t.Fatalf("driver %s: the sealed Store is not a registry.Resealer", e.h.Name)
	}
	if total := resealAll(t, e, rs, 1); total != 3 { // two responses and one request
		t.Errorf("Reseal changed %d bodies, want 3", total)
	}
	usage, err := rs.KeyUsage(e.ctx)
	if err != nil {
		t.Fatalf("KeyUsage: %v", err)
	}
	if len(usage) != 2 || usage["k2"] != 3 || usage[""] != 1 {
		t.Errorf("KeyUsage after the rotation: %v, want k2: 3 and one plaintext", usage)
	}
	only := e.sealedStore(ring(t, "k2"))
	for scope, body := range want {
		got, err := only.Get(e.ctx, scope)
		if err != nil || got.Response == nil || !bytes.Equal(got.Response.Body, body) {
			t.Errorf("after the rotation, with k2 only: %q %v, want %q", bodyOf(got), err, body)
		}
	}
	if got, err := only.Get(e.ctx, plain); !errors.Is(err, registry.ErrTampered) || got.Response != nil {
		t.Errorf("the plaintext record with a ring: %q %v, want ErrTampered", bodyOf(got), err)
	}
	effs, err := only.Effects(e.ctx, urec.OperationID)
	if err != nil || len(effs) != 1 || !bytes.Equal(effs[0].Request, request) {
		t.Errorf("the effect's request after the rotation: %+v %v", effs, err)
	}
	if n := resealAll(t, e, rs, 100); n != 0 {
		t.Errorf("a second pass changed %d bodies, want 0", n)
	}
	if _, err := e.h.Store.(registry.Resealer).Reseal(e.ctx, "", 1); !errors.Is(err, registry.ErrNoSealer) {
		t.Errorf("Reseal without a sealer: %v, want ErrNoSealer", err)
	}
}

// resealAll walks the whole store with Reseal in batches of limit, from
// the first cursor to the last, and returns how many bodies it changed.
func resealAll(t *testing.T, e *env, rs registry.Resealer, limit int) int {
	t.Helper()
	total := 0
	for cursor, batches := "", 0; ; batches++ {
		if batches > 100 {
			t.Fatalf("Reseal does not finish")
		}
		b, err := rs.Reseal(e.ctx, cursor, limit)
		if err != nil {
			t.Fatalf("Reseal(%q): %v", cursor, err)
		}
		total += b.Changed
		if b.Next == "" {
			return total
		}
		cursor = b.Next
	}
}

// bodyOf returns a record's response body, nil if it has none.
func bodyOf(r registry.Record) []byte {
	if r.Response == nil {
		return nil
	}
	return r.Response.Body
}
