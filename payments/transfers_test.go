package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/provider"
	"github.com/idemkit/idem/registry"
)

// trBench is a service with a real provider on a fresh database.
type trBench struct {
	store registry.Store
	prov  *provider.Server
	srv   *httptest.Server
}

type trAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a trAnswer) code() idem.Code {
	var p struct{ Code idem.Code }
	json.Unmarshal(a.body, &p)
	return p.Code
}

const trBody = `{"amount":"12.5","currency":"EUR","payee":"acct_1"}`

func newTrBench(t *testing.T, dsn string, timeout time.Duration, withProvider bool) *trBench {
	t.Helper()
	ctx := context.Background()
	store, err := drivers.Open(ctx, dsn, drivers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	b := &trBench{store: store, prov: provider.New()}
	psrv := httptest.NewServer(b.prov.Handler())
	t.Cleanup(psrv.Close)
	t.Cleanup(func() { b.prov.SetMode(provider.ModeOK) }) // release held requests first
	cfg := Config{Store: store, Auth: Tokens{"tok-tr": {Tenant: "t", Principal: "p"}},
		Logger: slog.New(slog.DiscardHandler), ProviderTimeout: timeout}
	if withProvider {
		cfg.Provider = psrv.URL + "/"
	}
	svc, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(svc.Handler())
	t.Cleanup(b.srv.Close)
	return b
}

func (b *trBench) post(t *testing.T, key, body string) trAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/transfers", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok-tr")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return trAnswer{}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return trAnswer{resp.StatusCode, resp.Header, data}
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
	dsns := map[string]func(*testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "t.db") },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	}
	tests := map[string]func(*testing.T, func(*testing.T) string){
		"ExecuteAndReplay": testTransferReplay,
		"Concurrent":       testTransferConcurrent,
		"Hang":             testTransferHang,
		"SettleByReplay":   testTransferSettleByReplay,
		"Fail":             testTransferFail,
		"AmountLimit":      testTransferLimit,
		"NoProvider":       testTransferNoProvider,
	}
	for db, dsn := range dsns {
		for name, fn := range tests {
			t.Run(db+"/"+name, func(t *testing.T) {
				t.Parallel()
				fn(t, dsn)
			})
		}
	}
}

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
	answers := make([]trAnswer, 20)
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

func testTransferHang(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 300*time.Millisecond, true)
	if err := b.prov.SetMode(provider.ModeHang); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		a := b.post(t, "k1", trBody)
		op := a.header.Get("Idempotency-Operation")
		if a.status != http.StatusConflict || a.code() != idem.CodeOutcomeUnknown || op == "" ||
			a.header.Get("Link") != "</v1/operations/"+op+`>; rel="monitor"` {
			t.Fatalf("attempt %d: %d %v %s", i, a.status, a.header, a.body)
		}
		if n := b.prov.Executed(); n != 1 {
			t.Errorf("attempt %d: provider executed %d, want 1", i, n)
		}
		recs := b.records(t, idem.StateUnknown)
		if len(recs) != 1 || recs[0].OperationID != op {
			t.Fatalf("unknown records %+v", recs)
		}
		effs := b.effects(t, op)
		if len(effs) != 1 || effs[0].DownstreamKey != registry.DownstreamKey(op, EffectTransfer) || effs[0].Result != "" {
			t.Errorf("effects %+v", effs)
		}
	}
	// The retry settles by replay (ReplayUnknown): it re-sent the call with
	// the same downstream key, which the provider held too and never
	// executed twice; the operation stays UNKNOWN.
}

func testTransferFail(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	if err := b.prov.SetMode(provider.ModeFail); err != nil {
		t.Fatal(err)
	}
	first := b.post(t, "k1", trBody)
	op := first.header.Get("Idempotency-Operation")
	if first.status != http.StatusBadGateway || first.code() != CodeDownstreamFailed || op == "" {
		t.Fatalf("fail mode: %d %v %s", first.status, first.header, first.body)
	}
	// Stored as FAILED_FINAL (every begun effect failed) and replayed,
	// even once the provider works again.
	b.prov.SetMode(provider.ModeOK)
	again := b.post(t, "k1", trBody)
	if again.status != http.StatusBadGateway || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %v %s", again.status, again.header, again.body)
	}
	if n := b.prov.Executed(); n != 0 {
		t.Errorf("provider executed %d, want 0", n)
	}
	if recs := b.records(t, idem.StateFailedFinal); len(recs) != 1 || recs[0].OperationID != op {
		t.Errorf("failed records %+v", recs)
	}
	if effs := b.effects(t, op); len(effs) != 1 || effs[0].Result != registry.EffectFailed {
		t.Errorf("effects %+v", effs)
	}
	// A new key is a new operation with a new downstream key.
	if a := b.post(t, "k2", trBody); a.status != http.StatusCreated || b.prov.Executed() != 1 {
		t.Errorf("new key: %d %s, executed %d", a.status, a.body, b.prov.Executed())
	}
}

func testTransferLimit(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, true)
	body := `{"amount":"1000000.01","currency":"EUR","payee":"acct_1"}`
	for i := range 2 {
		a := b.post(t, "k1", body)
		if a.status != http.StatusUnprocessableEntity || a.code() != idem.CodeAmountLimit {
			t.Errorf("attempt %d: %d %s", i, a.status, a.body)
		}
	}
	if n := b.prov.Executed(); n != 0 {
		t.Errorf("provider executed %d, want 0", n)
	}
	if recs := b.records(t, idem.StateFailedFinal); len(recs) != 1 {
		t.Errorf("failed records %+v", recs)
	}
}

func testTransferNoProvider(t *testing.T, dsn func(*testing.T) string) {
	b := newTrBench(t, dsn(t), 0, false)
	if a := b.post(t, "k1", trBody); a.status != http.StatusNotFound {
		t.Errorf("without a provider: %d %s", a.status, a.body)
	}
}
