package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/registry"
)

// user authenticates the examples' requests by their X-User header.
func user(r *http.Request) (idem.Identity, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return idem.Identity{Tenant: "acme", Principal: u}, nil
	}
	return idem.Identity{}, errors.New("no user")
}

// send POSTs body with key to url and prints the answer's status, whether
// it is a replay, and its body.
func send(url, key, body string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("X-User", "ann")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
}

// ExampleNew makes a handler idempotent in the two-phase style (the
// default): the operation is reserved first, then the handler's writes and
// its response commit together. The retry gets the same bytes back; the
// same key with another body is refused.
func ExampleNew() {
	ctx := context.Background()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{}) // not durable: use Open with a file
	if err != nil {
		panic(err)
	}
	defer store.Close()
	mw, err := idemhttp.New(ctx, store, idemhttp.Operation{Name: "orders.create", APIRevision: "v1"}, user, idemhttp.Options{})
	if err != nil {
		panic(err)
	}
	n := 0
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // the business writes go through idemhttp.Tx(r.Context())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	})))
	defer srv.Close()

	send(srv.URL, "7f7b1eb9-fed4-48ae-b7c2-667664a69f0c", `{"sku":"A-1"}`)
	send(srv.URL, "7f7b1eb9-fed4-48ae-b7c2-667664a69f0c", `{ "sku": "A-1" }`)
	send(srv.URL, "7f7b1eb9-fed4-48ae-b7c2-667664a69f0c", `{"sku":"B-2"}`)
	fmt.Println("handler ran", n, "time(s)")
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"code":"PAYLOAD_CONFLICT","detail":"the key was used for a different request"}
	// handler ran 1 time(s)
}

// ExampleOperation_oneTransaction serves an operation whose every effect
// is a write in the registry's database in one transaction: the handler's
// writes, then the record (already terminal) and the commit. Nothing is in
// flight in the registry meanwhile.
func ExampleOperation_oneTransaction() {
	ctx := context.Background()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	op := idemhttp.Operation{Name: "notes.create", APIRevision: "v1", OneTransaction: true}
	mw, err := idemhttp.New(ctx, store, op, user, idemhttp.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx := idemhttp.Tx(ctx)
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, body BLOB)`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notes (id, body) VALUES ($1, $2)`, idemhttp.OperationID(ctx), idemhttp.Payload(ctx)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"stored":true}`)
	})))
	defer srv.Close()

	send(srv.URL, "898ccc32-df24-48cb-8d83-a60b596745c6", `{"text":"hi"}`)
	send(srv.URL, "898ccc32-df24-48cb-8d83-a60b596745c6", `{"text":"hi"}`)
	var notes int
	store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&notes)
	})
	fmt.Println("notes:", notes)
	// Output:
	// 201 replayed="" {"stored":true}
	// 201 replayed="true" {"stored":true}
	// notes: 1
}

// ledger is an in-process downstream system for the effect example: it
// executes each key at most once and answers a repeat with the first
// result, as a payment provider honouring idempotency keys does.
type ledger struct {
	mu   sync.Mutex
	done map[string]string
}

func (b *ledger) Send(_ context.Context, key string, request []byte) effect.Answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.done[key]; !ok {
		b.done[key] = fmt.Sprintf("tx_%d", len(b.done)+1)
	}
	return effect.Answer{Kind: effect.Executed, Handle: b.done[key], Body: []byte(b.done[key]), Detail: "executed " + b.done[key]}
}

func (b *ledger) Lookup(_ context.Context, key string) effect.Answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.done[key]; ok {
		return effect.Answer{Kind: effect.Executed, Handle: h, Body: []byte(h), Detail: "found " + h}
	}
	return effect.Answer{Kind: effect.NotFound, Detail: "not found"}
}

// ExampleEffect calls a downstream system that cannot join the
// transaction: the attempt and its stable downstream key are stored before
// the call, and the stored response is the operation's own rendering of
// the downstream's answer — the same rendering whoever settles it later
// (a retry, the recovery worker, an operator) would store.
func ExampleEffect() {
	ctx := context.Background()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	b := &ledger{done: map[string]string{}}
	op := idemhttp.Operation{Name: "payouts.create", APIRevision: "v1", Effects: &effect.Operation{
		Downstreams: map[string]effect.Downstream{"bank.transfer": b},
		Render: func(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
			body := fmt.Sprintf(`{"payout":%q,"bank_transfer":%q}`, rec.OperationID[:3], effs[0].Handle)
			return registry.Outcome{State: idem.StateSucceeded,
				Response: idem.Response{Status: http.StatusCreated, MediaType: "application/json", Body: []byte(body)}}, nil
		},
	}}
	mw, err := idemhttp.New(ctx, store, op, user, idemhttp.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Check the request, then call downstream; the middleware answers
		// with the rendered outcome.
		if _, err := idemhttp.Effect(r.Context(), "bank.transfer", idemhttp.Payload(r.Context())); err != nil {
			fmt.Println("effect:", err) // ErrOutcomeUnknown: the middleware answers 409 OUTCOME_UNKNOWN
		}
	})))
	defer srv.Close()

	send(srv.URL, "696a959e-e212-482c-a2c8-fe00d764d423", `{"amount":"10.00"}`)
	send(srv.URL, "696a959e-e212-482c-a2c8-fe00d764d423", `{"amount":"10.00"}`)
	fmt.Println("bank executed", len(b.done), "transfer(s)")
	// Output:
	// 201 replayed="" {"payout":"op_","bank_transfer":"tx_1"}
	// 201 replayed="true" {"payout":"op_","bank_transfer":"tx_1"}
	// bank executed 1 transfer(s)
}

// ExampleSQLTx writes through the request's transaction as a *sql.Tx, as
// code on database/sql (GORM, sqlx, sqlc) does: the row commits together
// with the stored response, and the retry is a replay that writes
// nothing. The handler never commits the *sql.Tx itself.
func ExampleSQLTx() {
	ctx := context.Background()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	op := idemhttp.Operation{Name: "orders.create", APIRevision: "v1", OneTransaction: true}
	mw, err := idemhttp.New(ctx, store, op, user, idemhttp.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := idemhttp.SQLTx(ctx) // a *sql.Tx
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, body) VALUES ($1, $2)`, idemhttp.OperationID(ctx), idemhttp.Payload(ctx)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ordered":true}`)
	})))
	defer srv.Close()
	store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, body BLOB)`)
		return err
	})

	send(srv.URL, "3c2d4e6f-8a9b-4c1d-9e2f-a3b4c5d6e7f8", `{"sku":"A-1"}`)
	send(srv.URL, "3c2d4e6f-8a9b-4c1d-9e2f-a3b4c5d6e7f8", `{"sku":"A-1"}`)
	var orders int
	store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	})
	fmt.Println("orders:", orders)
	// Output:
	// 201 replayed="" {"ordered":true}
	// 201 replayed="true" {"ordered":true}
	// orders: 1
}
