package payments

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/registry"
)

// The largest valid request of every operation, built from the bounds its
// schema declares (not from numbers written again here), gets an answer
// that is stored and replayed byte for byte; one character over any bound
// is a 400 SCHEMA_VIOLATION that records nothing.

// worstChars are candidate characters for a string at its bound, the ones
// whose JSON rendering is longest first: a control character is written as
// a six-byte \u00XX escape by canon and by encoding/json, U+2028 as
// \u2028 by encoding/json. A field takes the first whose repetition its
// pattern accepts.
var worstChars = []string{"\x01", "\u2028", "\U0001F600", "Z", "9", "z"}

// boundedValue is the largest value a field accepts, as a JSON text, and
// one that is a character (or digit) over its bound. It fails the test
// for a field without a bound.
func boundedValue(t *testing.T, name string, f *canon.Field) (largest, over string) {
	t.Helper()
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	switch f.Type {
	case canon.TypeString:
		if f.MaxLength <= 0 {
			t.Fatalf("field %s: a string without max_length", name)
		}
		for _, c := range worstChars {
			v := strings.Repeat(c, f.MaxLength)
			if f.Pattern == "" || regexp.MustCompile("^(?:"+f.Pattern+")$").MatchString(v) {
				return quote(v), quote(v + c)
			}
		}
		t.Fatalf("field %s: no candidate character matches %q", name, f.Pattern)
	case canon.TypeDecimal:
		digits := strings.Repeat("9", canon.MaxDecimalDigits)
		frac := strings.Repeat("9", f.Scale)
		return quote(digits + "." + frac), quote("9" + digits + "." + frac)
	case canon.TypeEnum:
		longest := slices.MaxFunc(f.Values, func(a, b string) int { return len(a) - len(b) })
		return quote(longest), quote(longest + "x")
	}
	t.Fatalf("field %s: type %s has no bound this test knows", name, f.Type)
	return "", ""
}

// bodyOf writes an object of the given members (JSON texts) in name order.
func bodyOf(members map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range slices.Sorted(maps.Keys(members)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + name + `":` + members[name])
	}
	return b.String() + "}"
}

// largestBodies returns the largest valid body of schema s with every
// member at its bound, except for the members in fixed, and for each
// bounded member a body with that member one over its bound.
func largestBodies(t *testing.T, s *canon.Schema, fixed map[string]string) (largest string, over map[string]string) {
	t.Helper()
	members, overs := map[string]string{}, map[string]string{}
	for name, f := range s.Fields {
		members[name], overs[name] = boundedValue(t, name, f)
	}
	maps.Copy(members, fixed)
	over = map[string]string{}
	for name, o := range overs {
		m := maps.Clone(members)
		m[name] = o
		over[name] = bodyOf(m)
	}
	return bodyOf(members), over
}

// operationCount is the number of operation records of the store, in any
// state.
func operationCount(t *testing.T, store registry.Store) int {
	t.Helper()
	recs, err := store.ListOperations(context.Background(), registry.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// requireStoredReplay checks that first was stored (its operation is
// SUCCEEDED or REJECTED, as want says) and that again replays it.
func requireStoredReplay(t *testing.T, b *testBundle, first, again response, want idem.State) {
	t.Helper()
	requireReplay(t, first, again)
	recs, err := b.store.ListOperations(context.Background(), registry.ListFilter{State: want, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.OperationID == first.header.Get("Idempotency-Operation") {
			return
		}
	}
	t.Fatalf("operation %s is not stored as %s", first.header.Get("Idempotency-Operation"), want)
}

// testLargestPayment: the largest valid payment (amount at AmountLimit,
// every string at its bound in six-byte escapes) is 201, stored and
// replayed; the largest amount the schema accepts is the stored 422
// AMOUNT_LIMIT; one over any bound is 400 SCHEMA_VIOLATION and records
// nothing.
func testLargestPayment(t *testing.T, b *testBundle) {
	largest, over := largestBodies(t, Schema(), map[string]string{"amount": `"` + AmountLimit + `"`})
	if len(largest) < MaxMemo*6 {
		t.Fatalf("the largest body is only %d bytes: %s", len(largest), largest)
	}
	first := b.post(t, "tok-alice", "k-largest", largest)
	if first.status != http.StatusCreated {
		t.Fatalf("largest valid payment (%d bytes): %v", len(largest), first)
	}
	var p Payment
	if err := json.Unmarshal(first.body, &p); err != nil || p.Memo == nil || len([]rune(*p.Memo)) != MaxMemo ||
		len([]rune(p.Payee)) != MaxPayee || p.Amount != AmountLimit {
		t.Fatalf("largest payment answered %d bytes: %.200s (err %v)", len(first.body), first.body, err)
	}
	requireStoredReplay(t, b, first, b.post(t, "tok-alice", "k-largest", largest), idem.StateSucceeded)

	// The largest amount the schema takes is above the business limit:
	// a refusal, stored and replayed like the 201.
	schemaLargest, _ := largestBodies(t, Schema(), nil)
	refused := b.post(t, "tok-alice", "k-largest-amount", schemaLargest)
	requireProblem(t, refused, http.StatusUnprocessableEntity, CodeAmountLimit)
	requireStoredReplay(t, b, refused, b.post(t, "tok-alice", "k-largest-amount", schemaLargest), idem.StateRejected)

	ops, pays := operationCount(t, b.store), countPayments(t, b.store)
	for name, body := range over {
		requireProblem(t, b.post(t, "tok-alice", "k-over-"+name, body), http.StatusBadRequest, idem.CodeSchemaViolation)
	}
	if len(over) != len(Schema().Fields) {
		t.Errorf("%d over-bound bodies for %d fields", len(over), len(Schema().Fields))
	}
	if n := operationCount(t, b.store); n != ops {
		t.Errorf("%d operation records after the refusals, want %d: a refusal recorded something", n, ops)
	}
	if n := countPayments(t, b.store); n != pays {
		t.Errorf("%d payments after the refusals, want %d", n, pays)
	}
}

// testLargestRefund: the same for refunds, on a payment of AmountLimit.
func testLargestRefund(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k-pay-largest", `{"amount":"`+AmountLimit+`","currency":"EUR","payee":"p"}`)
	largest, over := largestBodies(t, RefundSchema(), map[string]string{"amount": `"` + AmountLimit + `"`})
	first := b.refundPost(t, "tok-alice", "k-ref-largest", p.ID, largest)
	if first.status != http.StatusCreated {
		t.Fatalf("largest valid refund (%d bytes): %v", len(largest), first)
	}
	requireStoredReplay(t, b, first, b.refundPost(t, "tok-alice", "k-ref-largest", p.ID, largest), idem.StateSucceeded)

	ops := operationCount(t, b.store)
	for name, body := range over {
		requireProblem(t, b.refundPost(t, "tok-alice", "k-ref-over-"+name, p.ID, body), http.StatusBadRequest, idem.CodeSchemaViolation)
	}
	if n := operationCount(t, b.store); n != ops {
		t.Errorf("%d operation records after the refusals, want %d", n, ops)
	}
}

// TestLargestTransfer: POST /v1/transfers reads the payments schema; its
// largest valid request is 201 through a real provider, stored and
// replayed, and one over a bound is refused before the provider is called.
// Proves threat:unstorable-answer (docs/threat-model.md).
func TestLargestTransfer(t *testing.T) {
	t.Parallel()
	b := newTrBench(t, "sqlite:"+t.TempDir()+"/x.db", 0, true)
	largest, over := largestBodies(t, Schema(), map[string]string{"amount": `"` + AmountLimit + `"`})
	first := b.post(t, "k-tr-largest", largest)
	if first.status != http.StatusCreated {
		t.Fatalf("largest valid transfer (%d bytes): %d %s", len(largest), first.status, first.body)
	}
	again := b.post(t, "k-tr-largest", largest)
	if again.status != first.status || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s, first %s", again.status, again.header, again.body, first.body)
	}
	if n := len(b.records(t, idem.StateSucceeded)); n != 1 {
		t.Fatalf("%d SUCCEEDED records, want 1", n)
	}
	for name, body := range over {
		if a := b.post(t, "k-tr-over-"+name, body); a.status != http.StatusBadRequest || a.code() != idem.CodeSchemaViolation {
			t.Errorf("%s over its bound: %d %s", name, a.status, a.body)
		}
	}
	recs, err := b.store.ListOperations(context.Background(), registry.ListFilter{})
	if err != nil || len(recs) != 1 || b.prov.Executed() != 1 {
		t.Errorf("%d records (err %v) and %d provider executions, want 1 and 1", len(recs), err, b.prov.Executed())
	}
}
