package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/registry"
)

// The variants, in their base order within a round.
const (
	variantPlain      = "plain"
	variantFloor      = "floor"
	variantFirst      = "idem_first"
	variantFirstOneTx = "idem_first_one_tx"
	variantReplay     = "idem_replay"
	// variantReplayCached: the same replays sent to an instance of the
	// service with the replay cache on (operation.ReplayCache).
	variantReplayCached = "idem_replay_cached"
	variantDBInsert     = "db_insert"
)

var variants = []string{variantPlain, variantFloor, variantFirst, variantFirstOneTx, variantReplay, variantReplayCached, variantDBInsert}

// requestBody is the payments.v1 body every HTTP request sends.
const requestBody = `{"amount":"12.50","currency":"EUR","payee":"acct_1","memo":"invoice 2026-117"}`

// parsedBody is requestBody as the handlers read it (payments.v1 at its
// canonical scale already).
var parsedBody = struct {
	Amount, Currency, Payee string
	Memo                    *string
}{"12.50", "EUR", "acct_1", new("invoice 2026-117")}

// principals is how many principals the requests are spread over; request
// n is sent by principal n % principals.
const principals = 8

// benchTokens returns the bearer tokens of the run's principals.
func benchTokens() payments.Tokens {
	t := payments.Tokens{}
	for i := range principals {
		t[token(i)] = idem.Identity{Tenant: "bench", Principal: "p" + strconv.Itoa(i)}
	}
	return t
}

func token(i int) string { return "bench-" + strconv.Itoa(i) }

// target is what the variants run against: the two servers, the client
// and the store.
type target struct {
	plainURL, idemURL string // ".../v1/payments" on each server
	floorURL          string // the same on the floor server
	oneTxURL          string // the same on the one-transaction server
	cachedURL         string // the same on the server with the replay cache on
	client            *http.Client
	store             registry.Store    // the run's store, untimed
	svc               *payments.Service // the two-phase service, for its plain insert
	runID             string            // makes keys unique to the run
	replayKeys        int
	floorCreated      atomic.Int64 // floor requests answered 201, warm-ups included
}

// op returns the request function of a variant.
func (t *target) op(variant string) op {
	switch variant {
	case variantPlain:
		return func(ctx context.Context, n int64) error {
			return t.post(ctx, t.plainURL, int(n%principals), "", false)
		}
	case variantFloor:
		return func(ctx context.Context, n int64) error {
			err := t.post(ctx, t.floorURL, int(n%principals), t.firstKey(n), false)
			if err == nil {
				t.floorCreated.Add(1)
			}
			return err
		}
	case variantFirst:
		return func(ctx context.Context, n int64) error {
			return t.post(ctx, t.idemURL, int(n%principals), t.firstKey(n), false)
		}
	case variantFirstOneTx:
		return func(ctx context.Context, n int64) error {
			return t.post(ctx, t.oneTxURL, int(n%principals), t.firstKey(n), false)
		}
	case variantReplay:
		return func(ctx context.Context, n int64) error {
			k := int(n % int64(t.replayKeys))
			return t.post(ctx, t.idemURL, k%principals, t.replayKey(k), true)
		}
	case variantReplayCached:
		return func(ctx context.Context, n int64) error {
			k := int(n % int64(t.replayKeys))
			return t.post(ctx, t.cachedURL, k%principals, t.replayKey(k), true)
		}
	case variantDBInsert:
		return t.insert
	}
	panic("bench: unknown variant " + variant)
}

// firstKey is the key of the n-th first execution, and of the n-th floor
// request: derived from the run and n, so that the service's strict key
// policy accepts it.
func (t *target) firstKey(n int64) string {
	return keygen.Derive(t.runID + "-f-" + strconv.FormatInt(n, 10))
}

// replayKey is the key of the k-th replayed operation, the same on every
// call.
func (t *target) replayKey(k int) string { return keygen.Derive(t.runID + "-r-" + strconv.Itoa(k)) }

// post sends one create request as principal p, with key unless it is
// "", and checks the answer: 201 with a Location and a payment body,
// marked as a replay exactly when wantReplay.
func (t *target) post(ctx context.Context, url string, p int, key string, wantReplay bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(requestBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token(p))
	if key != "" {
		req.Header.Set(idem.KeyHeader, key)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	replayed := resp.Header.Get(idemhttp.HeaderReplayed) == "true"
	if resp.StatusCode != http.StatusCreated || replayed != wantReplay ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/v1/payments/pay_") ||
		!bytes.HasPrefix(body.Bytes(), []byte(`{"id":"pay_`)) {
		return fmt.Errorf("POST %s (key %q): status %d, replayed %v (want %v), body %.300s",
			url, key, resp.StatusCode, replayed, wantReplay, body.Bytes())
	}
	return nil
}

// insert is the db_insert variant: the plain handler's transaction, with
// the payment the handler would build, straight on the store's pool.
func (t *target) insert(ctx context.Context, n int64) error {
	req := parsedBody
	id := idem.Identity{Tenant: "bench", Principal: "p" + strconv.Itoa(int(n%principals))}
	requestID := idem.NewOperationID(time.Now(), idem.ScopeHash{})
	p := payments.Payment{
		ID: payments.PaymentID(requestID), Amount: req.Amount, Currency: req.Currency,
		Payee: req.Payee, Memo: req.Memo, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return t.store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return t.svc.InsertPlain(ctx, tx, id, requestID, p, body)
	})
}

// prepareReplays executes the operations of every replay key once,
// through the service, from up to 16 goroutines. ctx governs the
// requests.
func (t *target) prepareReplays(ctx context.Context) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for g := range errs {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= t.replayKeys || ctx.Err() != nil {
					return
				}
				if err := t.post(ctx, t.idemURL, k%principals, t.replayKey(k), false); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: preparing the replay keys: %w", err)
	}
	return ctx.Err()
}
