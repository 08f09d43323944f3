package check

import (
	"context"
	"crypto/rand"
	"math/big"
	"strings"
)

// lowEntropyKeys are the keys the key-entropy scenario sends: a short
// counter-like key ("k" and 6 digits) and an order-number-like key of 16
// characters ("order-" and 10 digits), which a policy that only asks for
// 16 characters would take. Their digits are fresh, so that two runs
// against one API do not meet each other's keys; the keys stay far below
// any entropy a random key has (about 20 and 33 random bits).
func lowEntropyKeys() []string {
	return []string{"k" + randomDigits(6), "order-" + randomDigits(10)}
}

// randomDigits returns n random decimal digits.
func randomDigits(n int) string {
	var b strings.Builder
	for range n {
		d, _ := rand.Int(rand.Reader, big.NewInt(10)) // never fails (crypto/rand)
		b.WriteByte(byte('0' + d.Int64()))
	}
	return b.String()
}

// checkKeyEntropy sends one request with each low-entropy key (and a fresh
// payload): keys must be opaque random values (seed 000), and an API that
// takes a guessable key lets any client of the same scope meet another
// one's operation by accident. Refusals (4xx) pass; an accepted key is a
// warning, not a failure — the contract allows an API to take any key, it
// is a weakness, not a broken retry. No answer, or a 5xx, cannot be
// judged and fails.
func checkKeyEntropy(ctx context.Context, r *runner, res *Result) {
	var accepted, refused []string
	for _, key := range lowEntropyKeys() {
		e := r.settle(ctx, key, r.payload(newUnique(), VariantSame), r.cfg.Header)
		res.tally(e)
		switch {
		case e.accepted():
			accepted = append(accepted, key)
			res.note("low-entropy key %q accepted: %s", key, e)
		case e.refused():
			refused = append(refused, e.statusText())
			res.note("low-entropy key %q refused: %s", key, e)
		default:
			res.fail("cannot judge: the low-entropy key %q got %s", key, e.statusText())
			res.note("answer: %s", e)
			return
		}
	}
	if len(accepted) > 0 {
		res.warn("low-entropy keys accepted (%s): the API takes guessable keys; ask for random ones (UUIDv4, 22 base64url characters) and refuse the rest",
			strings.Join(accepted, ", "))
		return
	}
	res.pass("low-entropy keys refused (%s)", strings.Join(refused, ", "))
}
