package outbox_test

import (
	"fmt"
	"time"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
)

// The body and signature of one delivery. The signature is HMAC-SHA256
// with the decoded secret over "<webhook-id>.<webhook-timestamp>.<body>";
// the value below was checked with openssl dgst -sha256 -mac HMAC.
func ExampleSign() {
	key, err := outbox.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	m := registry.OutboxMessage{
		ID: "op_1/0", OperationID: "op_1", Topic: "payment.created",
		Payload:   []byte(`{"id":"pay_1","amount":"12.50"}`),
		CreatedAt: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC),
	}
	body, err := outbox.Body(m)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	fmt.Println(outbox.Sign(key, m.ID, 1674087231, body))
	// Output:
	// {"id":"op_1/0","type":"payment.created","operation_id":"op_1","timestamp":"2031-03-04T05:06:07Z","data":{"id":"pay_1","amount":"12.50"}}
	// v1,ZwKNsGNhIH/Ow/KAam933YMn4FfaSxJhQzjryxlm99I=
}

// The wait after each failed attempt, with the defaults.
func ExampleRelay_Backoff() {
	var r outbox.Relay
	for _, n := range []int{1, 2, 3, 10, 13} {
		fmt.Println(n, r.Backoff(n))
	}
	// Output:
	// 1 1s
	// 2 2s
	// 3 4s
	// 10 8m32s
	// 13 1h0m0s
}
