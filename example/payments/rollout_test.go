package payments

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// TestRolloutConfig: New refuses modes and revisions for operations the
// service does not serve, unknown modes and a revision declaring itself
// compatible with itself; Service.Rollouts is the one given, or one New
// built.
func TestRolloutConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idemstore.Open(ctx, "sqlite:"+t.TempDir()+"/cfg.db", idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	base := Config{Store: store, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)}
	for name, tc := range map[string]struct {
		cfg  func(*Config)
		want string
	}{
		"mode of an unknown operation": {func(c *Config) { c.Modes = map[string]idemhttp.Mode{"payments.crate": idemhttp.Shadow} }, `unknown operation "payments.crate"`},
		"transfers without a provider": {func(c *Config) { c.Modes = map[string]idemhttp.Mode{OperationTransfer: idemhttp.Shadow} }, `unknown operation "transfers.create"`},
		"transfers off": {func(c *Config) {
			c.Provider = "http://127.0.0.1:1"
			c.Modes = map[string]idemhttp.Mode{OperationTransfer: idemhttp.Off}
		}, "cannot be off"},
		"unknown mode":              {func(c *Config) { c.Modes = map[string]idemhttp.Mode{OperationCreate: "sideways"} }, `unknown mode "sideways"`},
		"revision of an unknown op": {func(c *Config) { c.Revisions = map[string]Revision{"x": {API: "v2"}} }, `unknown operation "x"`},
		"compatible with itself": {func(c *Config) {
			c.Revisions = map[string]Revision{OperationCreate: {API: "v2", AcceptsRecordsOf: "v2"}}
		}, "its own records"},
		"compatible with the default v1": {func(c *Config) { c.Revisions = map[string]Revision{OperationRefund: {AcceptsRecordsOf: "v1"}} }, "its own records"},
	} {
		cfg := base
		tc.cfg(&cfg)
		if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want an error saying %q", name, err, tc.want)
		}
	}
	given := &idemhttp.Rollouts{Store: store}
	cfg := base
	cfg.Rollouts = given
	if svc, err := New(ctx, cfg); err != nil || svc.Rollouts() != given {
		t.Errorf("New with Config.Rollouts: %v, Rollouts() is not the one given", err)
	}
	if svc, err := New(ctx, base); err != nil || svc.Rollouts() == nil || svc.Rollouts().Store != registry.RolloutStore(store) {
		t.Errorf("New without Config.Rollouts: %v, Rollouts() %v", err, svc.Rollouts())
	}
}

// TestRevisionCompatibility: a retry that crosses the deploy of a new
// revision of payments.create replays when the new revision declares
// that it accepts the old one's records (Revision.AcceptsRecordsOf), and
// executes again without the declaration (the seed's rule).
func TestRevisionCompatibility(t *testing.T) {
	t.Parallel()
	for name, dsn := range testDrivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := dsn(t)
			const body = `{"amount":"3.00","currency":"EUR","payee":"acct_rev"}`
			v1 := setupConfig(t, db, Config{})
			first, _ := v1.mustCreate(t, "tok-alice", "rev-1", body)
			compatible := setupConfig(t, db, Config{Revisions: map[string]Revision{OperationCreate: {API: "v2", AcceptsRecordsOf: "v1"}}})
			requireReplay(t, first, compatible.post(t, "tok-alice", "rev-1", body))
			if n := countPayments(t, v1.store); n != 1 {
				t.Fatalf("%d payments after the compatible retry, want 1", n)
			}
			incompatible := setupConfig(t, db, Config{Revisions: map[string]Revision{OperationCreate: {API: "v2"}}})
			incompatible.mustCreate(t, "tok-alice", "rev-1", body)
			if n := countPayments(t, v1.store); n != 2 {
				t.Errorf("%d payments after the retry under an undeclared v2, want 2 (the seed's rule)", n)
			}
		})
	}
}

// TestModesFollowRollout: payments.create configured off executes every
// request (no record: the same key runs twice); once an operator sets
// its row to enforce, the running service follows within its refresh,
// without a restart, and a retry replays.
func TestModesFollowRollout(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, "sqlite:"+t.TempDir()+"/modes.db", Config{Modes: map[string]idemhttp.Mode{OperationCreate: idemhttp.Off}, AdmitRefresh: 20 * time.Millisecond})
	const body = `{"amount":"4.00","currency":"EUR","payee":"acct_mode"}`
	b.mustCreate(t, "tok-alice", "mode-1", body)
	b.mustCreate(t, "tok-alice", "mode-1", body) // off: no idempotency
	if n := countPayments(t, b.store); n != 2 {
		t.Fatalf("%d payments after the same key twice, off: want 2", n)
	}
	// Off still authenticates and checks the payload, as a server without idempotency would.
	requireProblem(t, b.post(t, "", "mode-x", body), http.StatusUnauthorized, idem.CodeUnauthenticated)
	requireProblem(t, b.post(t, "tok-alice", "mode-x", `{"amount":"4.00"}`), http.StatusBadRequest, idem.CodeSchemaViolation)
	if _, err := b.store.SetRollout(t.Context(), registry.RolloutChange{Operation: OperationCreate, Mode: registry.RolloutEnforce, Percent: 100, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var first response
	for i := 0; ; i++ {
		key := "mode-follow-" + strconv.Itoa(i)
		first = b.post(t, "tok-alice", key, body)
		if first.status != http.StatusCreated {
			t.Fatalf("create under enforce: %v", first)
		}
		if again := b.post(t, "tok-alice", key, body); again.header.Get("Idempotent-Replayed") == "true" {
			requireReplay(t, first, again)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service did not follow the rollout row to enforce within 10s")
		}
	}
}

// TestShadowPlainRequests: in shadow, a never-enforced operation executes
// plainly what enforce would refuse before the registry — a payment or a
// refund without a key — while still checking the payload and the
// caller as a server without idempotency would (400, 401).
func TestShadowPlainRequests(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, "sqlite:"+t.TempDir()+"/shadow.db", Config{Modes: map[string]idemhttp.Mode{OperationCreate: idemhttp.Shadow, OperationRefund: idemhttp.Shadow}})
	const body = `{"amount":"6.00","currency":"EUR","payee":"acct_shadow"}`
	for i := range 2 {
		if r := b.post(t, "tok-alice", "", body); r.status != http.StatusCreated {
			t.Fatalf("POST %d without a key in shadow: %v, want 201", i, r)
		}
	}
	if n := countPayments(t, b.store); n != 2 {
		t.Fatalf("%d payments, want 2", n)
	}
	requireProblem(t, b.post(t, "tok-alice", "", `{"amount":"6.00"}`), http.StatusBadRequest, idem.CodeSchemaViolation)
	requireProblem(t, b.post(t, "", "", body), http.StatusUnauthorized, idem.CodeUnauthenticated)
	_, p := b.mustCreate(t, "tok-alice", "shadow-pay", body)
	if r := b.refundPost(t, "tok-alice", "", p.ID, `{"amount":"1.00"}`); r.status != http.StatusCreated {
		t.Errorf("refund without a key in shadow: %v, want 201", r)
	}
}

// TestTransferForcedOff: transfers.create forced off by its rollout row
// is refused with 503 READ_ONLY and calls no provider: a transfer without
// its record has no downstream key, and a re-send could pay twice.
func TestTransferForcedOff(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, "sqlite:"+t.TempDir()+"/off.db", Config{Provider: "http://127.0.0.1:1", AdmitRefresh: time.Millisecond})
	ctx := t.Context()
	for _, c := range []registry.RolloutChange{
		{Operation: OperationTransfer, Mode: registry.RolloutEnforce, Percent: 100, Actor: "test"},
		{Operation: OperationTransfer, Mode: registry.RolloutOff, Force: true, Seen: 1, Actor: "test"},
	} {
		if _, err := b.store.SetRollout(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	r := b.do(t, http.MethodPost, "/v1/transfers", "tok-tr", "off-1", `{"amount":"1.00","currency":"EUR","payee":"acct_off"}`)
	requireProblem(t, r, http.StatusServiceUnavailable, idemhttp.CodeReadOnly)
}
