package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/registry"
)

// trBench is a service with a real provider on a fresh database: a
// testBundle (setupConfig) whose service sends transfers to prov.
type trBench struct {
	*testBundle
	prov *provider.Server
}

// waitExecuted waits, bounded, until p has executed n transfers. After a
// provider call timed out the provider may still be about to execute it:
// on a loaded machine the caller's timeout can come first.
func waitExecuted(t *testing.T, p *provider.Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.WaitExecuted(ctx, n); err != nil {
		t.Fatalf("the provider executed %d transfers, want %d: %v", p.Executed(), n, err)
	}
}

const trBody = `{"amount":"12.5","currency":"EUR","payee":"acct_1"}`

func newTrBench(t *testing.T, dsn string, timeout time.Duration, withProvider bool) *trBench {
	t.Helper()
	prov := provider.New()
	psrv := httptest.NewServer(prov.Handler())
	t.Cleanup(psrv.Close)
	t.Cleanup(func() { prov.SetMode(provider.ModeOK) }) // release held requests first
	cfg := Config{ProviderTimeout: timeout, OneTransaction: oneTxStyle(t)}
	if withProvider {
		cfg.Provider = psrv.URL + "/"
	}
	return &trBench{testBundle: setupConfig(t, dsn, cfg), prov: prov}
}

// post sends POST /v1/transfers as tok-tr.
func (b *trBench) post(t *testing.T, key, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/transfers", "tok-tr", key, body)
}

func (b *trBench) records(t *testing.T, state idem.State) []registry.Record {
	t.Helper()
	recs, err := b.store.ListOperations(context.Background(), registry.ListFilter{State: state})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func (b *trBench) effects(t *testing.T, opID string) []registry.Effect {
	t.Helper()
	effs, err := b.store.Effects(context.Background(), opID)
	if err != nil {
		t.Fatal(err)
	}
	return effs
}

func TestTransfers(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*testing.T, func(*testing.T) string){
		"ExecuteAndReplay": testTransferReplay,
		"Concurrent":       testTransferConcurrent,
		"Hang":             testTransferHang,
		"SettleByReplay":   testTransferSettleByReplay,
		"Fail":             testTransferFail,
		"Finding1":         testTransferFinding1,
		"AmountLimit":      testTransferLimit,
		"NoProvider":       testTransferNoProvider,
	}
	for db, dsn := range testDrivers {
		for _, style := range []string{"two-phase", "one-tx"} {
			for name, fn := range tests {
				t.Run(db+"/"+style+"/"+name, func(t *testing.T) {
					t.Parallel()
					fn(t, dsn)
				})
			}
		}
	}
}

// oneTxStyle reports whether t runs a transfer test in the
// one-transaction style (Config.OneTransaction): TestTransfers names its
// subtests DRIVER/STYLE/CASE.
func oneTxStyle(t *testing.T) bool { return strings.Contains(t.Name(), "/one-tx/") }

func testTransferReplay(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	first := b.post(t, "k1", trBody)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	op := first.header.Get("Idempotency-Operation")
	var tr Transfer
	if err := json.Unmarshal(first.body, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.ID != TransferID(op) || tr.Amount != "12.50" || tr.Currency != "EUR" || tr.Payee != "acct_1" ||
		!strings.HasPrefix(tr.ProviderTransfer, "tr_") || tr.CreatedAt == "" {
		t.Errorf("transfer %s (operation %s)", first.body, op)
	}
	if got := first.header.Get("Location"); got != "/v1/transfers/"+tr.ID {
		t.Errorf("Location %q", got)
	}
	for _, body := range []string{trBody, `{"payee":"acct_1","currency":"EUR","amount":"12.50"}`} {
		again := b.post(t, "k1", body)
		if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) ||
			again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Idempotency-Operation") != op {
			t.Errorf("replay: %d %v %s", again.status, again.header, again.body)
		}
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d, want 1", n)
	}
	key := registry.DownstreamKey(op, EffectTransfer)
	got, ok := b.prov.Transfer(key)
	if !ok || !bytes.Contains(got, []byte(`"reference":"`+op+`"`)) {
		t.Errorf("provider transfer for %s: %v %s", key, ok, got)
	}
	effs := b.effects(t, op)
	if len(effs) != 1 || effs[0].DownstreamKey != key || effs[0].Handle != tr.ProviderTransfer || effs[0].Result != registry.EffectSucceeded {
		t.Errorf("effects %+v", effs)
	}
	if recs := b.records(t, idem.StateSucceeded); len(recs) != 1 || recs[0].OperationID != op {
		t.Errorf("succeeded records %+v", recs)
	}
}

func testTransferConcurrent(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	var wg sync.WaitGroup
	answers := make([]response, 20)
	for i := range answers {
		wg.Go(func() { answers[i] = b.post(t, "same", trBody) })
	}
	wg.Wait()
	for _, a := range answers {
		if a.status != http.StatusCreated && !(a.status == http.StatusConflict && a.code() == idem.CodeInProgress) {
			t.Errorf("concurrent answer %d %s", a.status, a.body)
		}
	}
	final := b.post(t, "same", trBody)
	if final.status != http.StatusCreated {
		t.Fatalf("final: %d %s", final.status, final.body)
	}
	for _, a := range answers {
		if a.status == http.StatusCreated && !bytes.Equal(a.body, final.body) {
			t.Errorf("two different transfers: %s and %s", a.body, final.body)
		}
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d, want 1", n)
	}
}

// testTransferHang: the provider executes the transfer and withholds its
// answer; the client's call times out. Nothing is stored but UNKNOWN (409
// OUTCOME_UNKNOWN with the monitor Link). The retry asks the provider
// about the downstream key, finds the execution, and replays the
// transfer's own 201: the provider executed once in all.
func testTransferHang(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 300*time.Millisecond, true)
	if err := b.prov.SetMode(provider.ModeHang); err != nil {
		t.Fatal(err)
	}
	a := b.post(t, "k1", trBody)
	op := a.header.Get("Idempotency-Operation")
	if a.status != http.StatusConflict || a.code() != idem.CodeOutcomeUnknown || op == "" ||
		a.header.Get("Link") != "</v1/operations/"+op+`>; rel="monitor"` || a.header.Get("Retry-After") == "" {
		t.Fatalf("first attempt: %d %v %s", a.status, a.header, a.body)
	}
	waitExecuted(t, b.prov, 1) // it may come after the call timed out
	if recs := b.records(t, idem.StateUnknown); len(recs) != 1 || recs[0].OperationID != op {
		t.Fatalf("unknown records %+v", recs)
	}
	effs := b.effects(t, op)
	if len(effs) != 1 || effs[0].DownstreamKey != registry.DownstreamKey(op, EffectTransfer) || effs[0].Result != "" ||
		!bytes.Contains(effs[0].Request, []byte(`"reference":"`+op+`"`)) {
		t.Errorf("effects %+v", effs)
	}
	settled := b.post(t, "k1", trBody)
	var tr Transfer
	if settled.status != http.StatusCreated || settled.header.Get("Idempotency-Operation") != op ||
		settled.header.Get("Location") != "/v1/transfers/"+TransferID(op) || json.Unmarshal(settled.body, &tr) != nil ||
		tr.ID != TransferID(op) || tr.Amount != "12.50" || !strings.HasPrefix(tr.ProviderTransfer, "tr_") {
		t.Fatalf("retry: %d %v %s", settled.status, settled.header, settled.body)
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d, want 1", n)
	}
	logs, err := b.store.Reconciliations(context.Background(), op)
	if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileProvider || logs[0].Actor != "client retry" {
		t.Errorf("reconciliation log %+v, %v; want one entry by lookup", logs, err)
	}
}

// testTransferFailThenRecover: the provider answers 503 PROVIDER_FAILURE
// to a new key. A 5xx is no evidence: the transfer is UNKNOWN (409), never
// a stored failure. Once the provider works, the retry's lookup finds
// nothing, so it re-sends the same request with the same key; the provider
// executes it now, once.
func testTransferFail(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	if err := b.prov.SetMode(provider.ModeFail); err != nil {
		t.Fatal(err)
	}
	first := b.post(t, "k1", trBody)
	op := first.header.Get("Idempotency-Operation")
	if first.status != http.StatusConflict || first.code() != idem.CodeOutcomeUnknown || op == "" {
		t.Fatalf("fail mode: %d %v %s", first.status, first.header, first.body)
	}
	// Still failing: still UNKNOWN, nothing stored.
	if again := b.post(t, "k1", trBody); again.status != http.StatusConflict || again.code() != idem.CodeOutcomeUnknown {
		t.Errorf("retry while failing: %d %s", again.status, again.body)
	}
	if recs := b.records(t, idem.StateUnknown); len(recs) != 1 || recs[0].OperationID != op || recs[0].Response != nil {
		t.Errorf("unknown records %+v", recs)
	}
	b.prov.SetMode(provider.ModeOK)
	settled := b.post(t, "k1", trBody)
	if settled.status != http.StatusCreated || settled.header.Get("Idempotency-Operation") != op {
		t.Fatalf("retry after recovery: %d %v %s", settled.status, settled.header, settled.body)
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d, want 1", n)
	}
	logs, err := b.store.Reconciliations(context.Background(), op)
	if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileReplay {
		t.Errorf("reconciliation log %+v, %v; want one entry by re-send", logs, err)
	}
	if effs := b.effects(t, op); len(effs) != 1 || effs[0].Result != registry.EffectSucceeded || effs[0].Answer == nil {
		t.Errorf("effects %+v", effs)
	}
}

// testTransferFinding1: the provider executes and hangs (409 UNKNOWN);
// then it fails every new key. The retry must not conclude "nothing
// happened": the provider answers an executed key in every mode, so the
// retry settles SUCCEEDED with the transfer's 201, and the provider
// executed exactly once.
func testTransferFinding1(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 300*time.Millisecond, true)
	b.prov.SetMode(provider.ModeHang)
	first := b.post(t, "k1", trBody)
	if first.status != http.StatusConflict || first.code() != idem.CodeOutcomeUnknown {
		t.Fatalf("hang: %d %s", first.status, first.body)
	}
	waitExecuted(t, b.prov, 1) // before fail mode: the execution may come after the call timed out
	b.prov.SetMode(provider.ModeFail)
	retry := b.post(t, "k1", trBody)
	if retry.status != http.StatusCreated || retry.header.Get("Location") == "" {
		t.Fatalf("retry in fail mode: %d %v %s", retry.status, retry.header, retry.body)
	}
	again := b.post(t, "k1", trBody)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, retry.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %s", again.status, again.body)
	}
	if n := b.prov.Executed(); n != 1 {
		t.Errorf("provider executed %d, want 1", n)
	}
	for _, st := range []idem.State{idem.StateFailedFinal, idem.StateUnknown} {
		if recs := b.records(t, st); len(recs) != 0 {
			t.Errorf("%s records %+v", st, recs)
		}
	}
}

func testTransferLimit(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	body := `{"amount":"1000000.01","currency":"EUR","payee":"acct_1"}`
	for i := range 2 {
		a := b.post(t, "k1", body)
		if a.status != http.StatusUnprocessableEntity || a.code() != CodeAmountLimit {
			t.Errorf("attempt %d: %d %s", i, a.status, a.body)
		}
	}
	if n := b.prov.Executed(); n != 0 {
		t.Errorf("provider executed %d, want 0", n)
	}
	if recs := b.records(t, idem.StateRejected); len(recs) != 1 {
		t.Errorf("rejected records %+v", recs)
	}
}

func testTransferNoProvider(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, false)
	if a := b.post(t, "k1", trBody); a.status != http.StatusNotFound {
		t.Errorf("without a provider: %d %s", a.status, a.body)
	}
}
