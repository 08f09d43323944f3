package payments

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
)

// testStrictKeys: the reference service takes keys under
// idem.StrictKeyPolicy on every operation. Short, content-bearing and
// low-entropy keys are 400 KEY_INVALID problem+json naming the reason, and
// record nothing; UUIDv4s and idem.NewKey keys are accepted.
func testStrictKeys(t *testing.T, b *testBundle) {
	const body = `{"amount":"1.00","currency":"EUR","payee":"p"}`
	for _, c := range []struct{ key, reason string }{
		{"Z", "characters long"},
		{"bob@example.com", "e-mail address"},
		{"order-1", "characters long"},
		{strings.Repeat("a", 20), "too predictable"},
		{"4111111111111111", "card or account number"},
	} {
		r := b.post(t, "tok-alice", "raw:"+c.key, body)
		requireProblem(t, r, http.StatusBadRequest, idem.CodeKeyInvalid)
		if !strings.Contains(string(r.body), c.reason) {
			t.Errorf("key %q: %s, want a detail that mentions %q", c.key, r.body, c.reason)
		}
		requireProblem(t, b.refundPost(t, "tok-alice", "raw:"+c.key, "pay_x", `{"amount":"1.00"}`),
			http.StatusBadRequest, idem.CodeKeyInvalid)
	}
	if n := operationCount(t, b.store); n != 0 {
		t.Errorf("%d operation records after refused keys, want 0", n)
	}
	for _, k := range []string{uuid.NewString(), idem.NewKey(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"} {
		b.mustCreate(t, "tok-alice", "raw:"+k, body)
	}
}
