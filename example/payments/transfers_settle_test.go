package payments

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/registry"
)

// testTransferSettleByReplay: a transfer whose outcome became UNKNOWN
// (the provider held the call before executing anything, and the client
// timed out) is settled by the client's retry with the same key: the
// lookup finds nothing, so the stored request is re-sent with the same
// downstream key, the provider executes it now, the outcome is recorded
// as a reconciliation by replay, and the provider executed once in all.
func testTransferSettleByReplay(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 300*time.Millisecond, true)
	if err := b.prov.SetMode(provider.ModeHangBefore); err != nil {
		t.Fatal(err)
	}
	first := b.post(t, "k-settle", trBody)
	op := first.header.Get("Idempotency-Operation")
	if first.status != http.StatusConflict || first.code() != idem.CodeOutcomeUnknown {
		t.Fatalf("first attempt: %d %s", first.status, first.body)
	}
	// The held call ends with its client (the server's provider timeout);
	// only then may the provider work again, or the held call itself
	// would execute the transfer and the retry would find it by lookup.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.prov.WaitNoneHeld(ctx); err != nil {
		t.Fatalf("the provider still holds the timed-out call: %v", err)
	}
	if err := b.prov.SetMode(provider.ModeOK); err != nil {
		t.Fatal(err)
	}
	settled := b.post(t, "k-settle", trBody)
	if settled.status != http.StatusCreated || settled.header.Get("Idempotency-Operation") != op {
		t.Fatalf("retry after the provider recovered: %d %v %s", settled.status, settled.header, settled.body)
	}
	again := b.post(t, "k-settle", trBody)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, settled.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of the settled transfer: %d %s", again.status, again.body)
	}
	if got := b.do(t, http.MethodGet, settled.header.Get("Location"), "tok-tr", "", ""); got.status != http.StatusOK || !bytes.Equal(got.body, settled.body) {
		t.Errorf("GET %s: %d %s; want 200 and the transfer", settled.header.Get("Location"), got.status, got.body)
	}
	if got := b.do(t, http.MethodGet, "/v1/transfers/tr_nope", "tok-tr", "", ""); got.status != http.StatusNotFound {
		t.Errorf("GET of an unknown transfer: %d, want 404", got.status)
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d transfers, want 1", n)
	}
	logs, err := b.store.Reconciliations(context.Background(), op)
	if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileReplay {
		t.Errorf("reconciliation log %+v, %v; want one entry by replay", logs, err)
	}
	if other := b.post(t, "k-settle", `{"amount":"99.00","currency":"EUR","payee":"acct_1"}`); other.code() != idem.CodePayloadConflict {
		t.Errorf("a different request on the settled key: %d %s", other.status, other.body)
	}
}
