package gate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
)

// Principal is one authenticated caller of the run.
type Principal struct {
	Token    string
	Identity idem.Identity
}

// Key is one logical payment: its Idempotency-Key, caller and payload.
type Key struct {
	Index     int
	Key       string
	Principal int // index into Plan.Principals
	Amount    string
	Memo      string
	// Payee is "acct_gate" in the payments workload and unique to the key
	// in the transfers workload (PayeePerKey), so that the provider's
	// executions can be attributed to keys.
	Payee string
	// Refused: the amount is above payments.AmountLimit, so the answer is
	// a stored 422 AMOUNT_LIMIT and no payment may exist.
	Refused bool
	// Conflict: after its retries were answered the key gets one request
	// with a different amount, which must be refused as PAYLOAD_CONFLICT.
	Conflict bool
}

// Plan is what a run sends: the same plan always produces the same
// requests.
type Plan struct {
	// Run identifies the run in keys and memos ("gate RUN kINDEX").
	Run        string
	Principals []Principal
	Keys       []Key
	Retries    int
}

// NewPlan builds the plan of keys keys × retries requests over principals
// callers (two tenants), seeded by seed.
func NewPlan(keys, retries, principals int, conflictRate, refusalRate float64, seed int64) Plan {
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0x9a7e))
	p := Plan{Run: randomHex(4), Retries: retries}
	for i := range principals {
		p.Principals = append(p.Principals, Principal{
			Token:    "gate-" + randomHex(16),
			Identity: idem.Identity{Tenant: fmt.Sprintf("tenant-%d", i%2), Principal: fmt.Sprintf("principal-%d", i)},
		})
	}
	for i := range keys {
		k := Key{
			Index:     i,
			Key:       fmt.Sprintf("gate-%s-%07d-%s", p.Run, i, randomHex(6)),
			Principal: i % principals,
			Amount:    fmt.Sprintf("%d.%02d", 1+rng.IntN(99_999), rng.IntN(100)),
			Memo:      fmt.Sprintf("gate %s k%d", p.Run, i),
			Payee:     "acct_gate",
			Refused:   rng.Float64() < refusalRate,
			Conflict:  rng.Float64() < conflictRate,
		}
		if k.Refused {
			k.Amount = fmt.Sprintf("%d.00", 2_000_000+rng.IntN(1000))
		}
		p.Keys = append(p.Keys, k)
	}
	return p
}

// Tokens returns the bearer tokens of the plan's principals, as the
// --auth file of "idem serve" holds them.
func (p Plan) Tokens() payments.Tokens {
	t := payments.Tokens{}
	for _, pr := range p.Principals {
		t[pr.Token] = pr.Identity
	}
	return t
}

// AuthFile returns the --auth file contents for the plan's principals.
func (p Plan) AuthFile() ([]byte, error) {
	type id struct {
		Tenant    string `json:"tenant"`
		Principal string `json:"principal"`
	}
	m := map[string]id{}
	for _, pr := range p.Principals {
		m[pr.Token] = id{pr.Identity.Tenant, pr.Identity.Principal}
	}
	return json.Marshal(m)
}

// PayeePerKey gives every key its own payee, "acct_RUN_INDEX" (the
// transfers workload).
func (p Plan) PayeePerKey() {
	for i := range p.Keys {
		p.Keys[i].Payee = fmt.Sprintf("acct_%s_%d", p.Run, i)
	}
}

// MemoPrefix is the prefix of every memo of the run.
func (p Plan) MemoPrefix() string { return "gate " + p.Run + " k" }

// Body returns the payload of retry number variant of k. The variants are
// canonically the same payment (payments.v1 compares amounts at scale 2,
// ignores member order and white space and reads one escape form), so
// every one of them must replay, never conflict.
func (k Key) Body(variant int) string {
	amount := k.Amount
	switch variant % 4 {
	case 0:
		return fmt.Sprintf(`{"amount":%q,"currency":"EUR","payee":%q,"memo":%q}`, amount, k.Payee, k.Memo)
	case 1:
		return fmt.Sprintf(`{ "memo" : %q , "payee" : %q, "currency" : "EUR", "amount" : %q }`, k.Memo, k.Payee, amount)
	case 2:
		if strings.HasSuffix(amount, "0") {
			amount = strings.TrimSuffix(amount, "0") // "12.50" is "12.5" at scale 2
		}
		return fmt.Sprintf("{\"currency\":\"EUR\",\n\"amount\":%q,\"payee\":%q,\"memo\":%q}", amount, k.Payee, k.Memo)
	default:
		// The same strings with escapes: \u0067 is "g", \u0045 is "E".
		memo := `\u0067` + strings.TrimPrefix(k.Memo, "g")
		return fmt.Sprintf(`{"payee":%q,"amount":%q,"currency":"\u0045UR","memo":"%s"}`, k.Payee, amount, memo)
	}
}

// ConflictBody is a payload that differs from k's: another amount.
func (k Key) ConflictBody() string {
	return fmt.Sprintf(`{"amount":"%s","currency":"EUR","payee":%q,"memo":%q}`, "1"+k.Amount, k.Payee, k.Memo)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
