// Package payments is the reference service behind "idem serve": a small
// payments API whose POST /v1/payments is made idempotent by idemhttp,
// following http.idempotency.v1 (SPEC R).
//
// Routes (Service.Handler):
//
//	POST /v1/payments                 create a payment (idempotent, schema payments.v1)
//	POST /v1/transfers                a transfer through the provider (idempotent, effects;
//	                                  only with Config.Provider, see transfers.go)
//	GET  /v1/payments                 the caller's payments, newest first
//	GET  /v1/payments/{id}            one of the caller's payments
//	POST /v1/payments/{id}/refunds    refund (part of) a payment (idempotent, schema
//	                                  refunds.v1; see refunds.go)
//	GET  /v1/payments/{id}/refunds    the payment's refunds and refunded total
//	GET  /v1/payments/{id}/refunds/{refundID}
//	                                  one refund of the payment
//	GET  /v1/operations/{operationID} an operation's state, to its owner only
//	POST /webhooks/provider           the provider's signed transfer events (only with
//	                                  Config.ProviderEventSecrets; see provider_events.go)
//	GET  /healthz                     liveness: 200 when the store answers, else 503
//	GET  /readyz                      readiness: 200, or 503 with the reason (storage, draining, fenced)
//
// The service does not serve its metrics: Config.Registry holds them, for
// an admin listener to serve ("idem serve --admin-addr"), never the API's
// port, where anyone could read them.
//
// Every route but /healthz, /readyz and /webhooks/provider (signed by the
// provider instead) needs "Authorization: Bearer
// TOKEN" with a token of Config.Auth; without one it answers 401
// UNAUTHENTICATED. The idempotent routes take keys under
// idem.StrictKeyPolicy (opaque, random: a UUIDv4, a ULID, idem.NewKey);
// any other key is 400 KEY_INVALID. Every field of their request schemas
// is bounded (MaxPayee, MaxMemo, …), so every valid request gets an answer
// that is stored and replayed. Errors are application/problem+json with a code member:
// the contract's codes, plus NOT_FOUND (404) for an unknown resource or
// one owned by another principal — the two are indistinguishable — and
// INTERNAL (500) for defects.
//
// A payment's id is "pay_" followed by the suffix of the operation ID that
// created it, never anything derived from the client's key. The payment
// row, the "payment.created" outbox message and the operation's outcome
// commit in one transaction.
//
// A committed payment is never cancelled by its key (SPEC A8): it is
// compensated by refunds, each an idempotent operation with a key of its
// own, whose sum never exceeds the payment's amount (refunds.go,
// docs/contract.md §10).
//
// Rollout controls (SPEC E6): the idempotent routes (POST /v1/payments,
// its refunds and transfers) refuse new operations with 503 DRAINING while
// the registry is draining and with 503 WRITER_FENCED once the registry's
// writer epoch is above the service's (Config.WriterEpoch); replays of
// finished operations are always served. Each operation follows its
// rollout row in the registry ("idem rollout": off, shadow, or enforce
// for a share of the callers; Config.Rollouts), in its configured mode
// (Config.Modes, default enforce) while the row sets none, at its API
// revision (Config.Revisions); an operation that has been enforced and
// is configured or set off without force is served read-only (503
// READ_ONLY for new keys, replays go on).
// See docs/operations.md.
package payments

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
)

//go:embed payments.sql
var sqlFiles embed.FS

var queries = sqlfile.MustLoad(sqlFiles, "payments.sql")

// Names of the operation and the outbox topic.
const (
	// OperationCreate is the idempotent operation of POST /v1/payments.
	OperationCreate = "payments.create"
	// APIRevision is the API major revision bound into every scope, unless
	// Config.APIRevision says otherwise.
	APIRevision = "v1"
	// TopicCreated is the outbox topic of a new payment; the message
	// payload is the payment as JSON, as in the 201 response.
	TopicCreated = "payment.created"
)

// Codes this service answers with besides the contract's.
const (
	// CodeNotFound (404): no such resource visible to the caller. It is
	// idemhttp.CodeNotFound, the code of the operation monitor the service
	// also serves (GET /v1/operations/{id}), so every 404 has one code.
	CodeNotFound = idemhttp.CodeNotFound
	// CodeInternal (500): a defect of the service; nothing was stored.
	CodeInternal idem.Code = "INTERNAL"
)

// Config configures a Service. Store and Auth are required.
type Config struct {
	// Store holds the registry and the business tables.
	Store registry.Store
	// Database is the engine Store runs on, which picks the statements
	// that differ between engines (payments.sql, plain.sql):
	// "postgres", "sqlite" or "mysql", as idemstore.Kind names the DSN.
	// "" means the engine the transactions' type tells (Tx.Native): a
	// pgx.Tx is PostgreSQL, a *sql.Tx SQLite — a store on MySQL or
	// MariaDB must be named. Another value is an error of New.
	Database string
	// Auth maps bearer tokens to identities.
	Auth Tokens
	// Identity, when set, authenticates requests in place of Auth (which
	// is still required): "idem serve" with shards authenticates once in
	// shard.Handler and gives each shard's service shard.RequestIdentity.
	Identity func(*http.Request) (idem.Identity, error)
	// Admit, when set, is asked before a new operation is accepted, after
	// the registry's drain and writer epoch: "idem serve" with shards
	// gives each shard's service shard.Router.Admit (a draining tenant's
	// new keys get 503 DRAINING).
	Admit func(context.Context) error
	// Lease and Retention of POST /v1/payments operations; 0 means
	// registry.DefaultLease and registry.DefaultRetention.
	Lease, Retention time.Duration
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the middleware's metrics, for the caller to serve
	// on an admin listener (the service's own routes do not); nil means a
	// new, otherwise empty registry. New registers
	// the metrics with it (and panics if they are already registered), so
	// two Services need two registries.
	Registry *prometheus.Registry
	// Provider is the downstream provider's base URL for transfers
	// ("http://127.0.0.1:9090"); "" leaves POST /v1/transfers unregistered
	// (404).
	Provider string
	// ProviderEventSecrets are the signing keys of the provider's
	// transfer events (the bytes "whsec_…" secrets decode to; two during a
	// rotation): with them, and with Provider, POST /webhooks/provider
	// receives the events (provider_events.go). None leaves the route
	// unregistered (404).
	ProviderEventSecrets [][]byte
	// ProviderTimeout bounds one provider call; 0 means
	// DefaultProviderTimeout. A call that times out leaves its transfer
	// UNKNOWN.
	ProviderTimeout time.Duration
	// WriterEpoch is the writer epoch the service accepts and commits
	// operations at (SPEC E6); negative means the registry's epoch when New
	// runs, which is what "idem serve" uses: a later "idem epoch bump"
	// fences this service. 0, the registry's initial epoch, stays valid
	// until the first bump.
	WriterEpoch int64
	// APIRevision is the API major revision bound into the scope of every
	// operation not given another in Revisions; "" means APIRevision
	// ("v1"). The routes and payloads do
	// not change with it: it exists so that tests (and "idem serve
	// --api-revision") can run a server whose operations live in another
	// revision's scopes, which never hit the records of the first (SPEC C2).
	APIRevision string
	// OneTransaction makes POST /v1/payments run in one database
	// transaction (idemhttp.Operation.OneTransaction): the payment, its
	// outbox message and the operation record commit together and
	// nothing is reserved beforehand. false (the default) is the
	// two-phase style, where a duplicate sent while the first request
	// runs gets 409 IN_PROGRESS. POST /v1/transfers follows it: in one
	// transaction a transfer commits twice — its record, directly
	// EXECUTING, with the provider call's downstream key before the call,
	// and the provider's answer with the outcome after it — where the
	// two-phase style commits four times. Refunds are always two-phase.
	OneTransaction bool
	// ReplayCache is the replay cache of every operation of the service
	// (idemhttp.Operation.ReplayCache): each operation keeps its own,
	// bounded by it. The zero value, the default, is off.
	ReplayCache idemhttp.ReplayCache
	// AdmitRefresh is how often the service reads the registry's control
	// row to follow drain and epoch changes, and its rollout rows when it
	// builds Rollouts itself; 0 means idemhttp.DefaultAdmitRefresh.
	AdmitRefresh time.Duration
	// Rollouts are the registry's rollout rows every operation follows
	// ("idem rollout", docs/operations.md): nil means one New builds over
	// Store with AdmitRefresh and Logger. Share one between services on
	// one store only if they flush it together.
	Rollouts *idemhttp.Rollouts
	// Modes are the configured modes per operation name (Operations):
	// idemhttp.Enforce, Shadow or Off, the mode used while the
	// operation's rollout row sets none. An operation not in it is
	// enforced. A name the service does not serve is an error of New.
	Modes map[string]idemhttp.Mode
	// Revisions are the API revisions per operation name: an operation
	// not in it, or with Revision.API "", uses APIRevision. A name the
	// service does not serve is an error of New.
	Revisions map[string]Revision
}

// Service is the reference payments service. Create it with New; it is
// safe for concurrent use.
type Service struct {
	store registry.Store
	db    string // the engine: "postgres", "sqlite" or "mysql" (Config.Database)
	// identity authenticates requests: Config.Identity or Auth.Identity.
	identity func(*http.Request) (idem.Identity, error)
	log      *slog.Logger
	mux      *http.ServeMux
	epoch    int64 // the writer epoch of every claim
	// effects of the operations that have any (Effects), by name.
	effects effect.Set
	// rollouts are the rollout rows its operations follow.
	rollouts *idemhttp.Rollouts
}

// New creates the business tables if they do not exist (the registry's own
// tables are the driver's business: idemstore.Open migrates them) and
// returns the service. ctx governs the table creation only.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("payments: Config.Store is required")
	}
	if len(cfg.Auth) == 0 {
		return nil, errors.New("payments: Config.Auth holds no tokens")
	}
	if err := checkRollout(cfg); err != nil {
		return nil, err
	}
	db, err := createTables(ctx, cfg.Store, cfg.Database)
	if err != nil {
		return nil, err
	}
	s := &Service{store: cfg.Store, db: db, identity: cfg.Identity, log: cfg.Logger, mux: http.NewServeMux(), epoch: cfg.WriterEpoch, rollouts: cfg.Rollouts}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.identity == nil {
		s.identity = cfg.Auth.Identity
	}
	if s.rollouts == nil {
		s.rollouts = &idemhttp.Rollouts{Store: cfg.Store, Refresh: cfg.AdmitRefresh, Logger: s.log}
	}
	if s.epoch < 0 {
		ctl, err := cfg.Store.Control(ctx)
		if err != nil {
			return nil, fmt.Errorf("payments: reading the writer epoch: %w", err)
		}
		s.epoch = ctl.WriterEpoch
	}
	admit := &idemhttp.ControlAdmitter{Controller: cfg.Store, WriterEpoch: s.epoch, Refresh: cfg.AdmitRefresh}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	createOp := idemhttp.Operation{
		Name: OperationCreate,
		Binding: idem.Binding{
			Canon: canon.Options{Mode: canon.ModeSchema, Schema: Schema()},
		},
		// The library's strict policy, as seed 000 asks: opaque,
		// high-entropy keys (idem.StrictKeyPolicy); refunds and transfers
		// share it.
		KeyPolicy:      idem.StrictKeyPolicy,
		FinalStatuses:  []int{http.StatusUnprocessableEntity}, // AMOUNT_LIMIT
		Lease:          cfg.Lease,
		Retention:      cfg.Retention,
		OneTransaction: cfg.OneTransaction,
	}
	configure(&createOp, cfg)
	create, err := idemhttp.New(ctx, cfg.Store, createOp, s.identity, idemhttp.Options{
		Challenge:     "Bearer",
		MonitorPrefix: "/v1/operations/",
		Admit:         shard.Chain(admit.Admit, cfg.Admit),
		WriterEpoch:   &s.epoch,
		Metrics:       idemhttp.NewMetrics(reg),
		Logger:        s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	create.Rollouts = s.rollouts // shared by the copies below
	reg.MustRegister(idemhttp.NewUnknownCollector(cfg.Store))
	s.mux.Handle("POST /v1/payments", create.Handler(http.HandlerFunc(s.create)))
	if cfg.Provider != "" {
		transfer := *create // same store, identity, admission, epoch and metrics
		transfer.Operation.Name = OperationTransfer
		transfer.Operation.Effects = TransferEffects(cfg.Provider, cfg.ProviderTimeout)
		transfer.Operation.OneTransaction = cfg.OneTransaction // two commits per transfer, or four
		configure(&transfer.Operation, cfg)
		s.effects = effect.Set{OperationTransfer: transfer.Operation.Effects}
		s.mux.Handle("POST /v1/transfers", transfer.Handler(http.HandlerFunc(s.createTransfer)))
	}
	if len(cfg.ProviderEventSecrets) > 0 {
		events, err := s.newProviderEvents(ctx, cfg, reg, shard.Chain(admit.Admit, cfg.Admit))
		if err != nil {
			return nil, err
		}
		s.mux.Handle("POST "+PathProviderEvents, events)
	}
	refund := *create // same store, identity, admission, epoch and metrics
	refund.Operation.Name = OperationRefund
	refund.Operation.Binding = idem.Binding{Canon: canon.Options{Mode: canon.ModeSchema, Schema: RefundSchema()}}
	refund.Operation.FinalStatuses = []int{
		http.StatusNotFound,            // NOT_FOUND: no such payment of the caller's
		http.StatusUnprocessableEntity, // REFUND_EXCEEDS_PAYMENT, AMOUNT_LIMIT
	}
	refund.Operation.OneTransaction = false // two-phase, whatever Config.OneTransaction says
	configure(&refund.Operation, cfg)
	s.mux.Handle("POST /v1/payments/{id}/refunds", refund.Handler(http.HandlerFunc(s.refund)))
	s.mux.HandleFunc("GET /v1/payments", s.authenticated(s.list))
	s.mux.HandleFunc("GET /v1/payments/{id}", s.authenticated(s.get))
	s.mux.HandleFunc("GET /v1/payments/{id}/refunds", s.authenticated(s.listRefunds))
	s.mux.HandleFunc("GET /v1/payments/{id}/refunds/{refundID}", s.authenticated(s.getRefund))
	s.mux.HandleFunc("GET /v1/transfers/{id}", s.authenticated(s.getTransfer))
	s.mux.Handle("GET /v1/operations/{operationID}", create.MonitorHandler())
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	return s, nil
}

// WriterEpoch returns the writer epoch the service writes at.
func (s *Service) WriterEpoch() int64 { return s.epoch }

// authenticated wraps a handler of a non-idempotent route: it answers 401
// UNAUTHENTICATED itself when the request carries no known bearer token.
func (s *Service) authenticated(h func(http.ResponseWriter, *http.Request, idem.Identity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := s.identity(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			idemhttp.WriteProblem(w, idem.CodeUnauthenticated, "authentication required")
			return
		}
		h(w, r, id)
	}
}

// marshal encodes v as JSON like json.Marshal, but without escaping <, >
// and &: the API's bodies are not meant to be embedded in HTML.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeJSON writes an application/json response of v.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, CodeInternal, "")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// writeProblem writes a problem+json response with a status of its own,
// for codes the contract does not know (idemhttp.WriteProblem takes the
// status from the contract).
func writeProblem(w http.ResponseWriter, status int, code idem.Code, detail string) {
	idemhttp.Problem{Status: status, Code: code, Detail: detail}.Write(w)
}

// storable reports whether s can be held by the service's TEXT columns
// on every engine: valid UTF-8 without NUL (PostgreSQL refuses both in a
// text parameter; SQLite would store them). An identifier in a request
// path that is not storable names nothing: the handlers answer 404
// NOT_FOUND without asking the store, on both engines alike, instead of
// letting the statement fail. Request bodies are held to the same by
// their schemas (Text).
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// storeFailed logs a storage error and answers 503 STORE_UNAVAILABLE:
// nothing is known, so the client may retry. When the request's own
// context ended first, the client went away and the store call failed
// for that reason: logged at Info and answered 499 CLIENT_GONE, as the
// middleware does, never reported as storage trouble.
func (s *Service) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(r.Context().Err(), context.Canceled) { // not an execution's time limit
		s.log.InfoContext(r.Context(), "payments: "+what+": the client went away", "err", err)
		idemhttp.WriteProblem(w, idemhttp.CodeClientGone, "the request ended before it was answered")
		return
	}
	s.log.ErrorContext(r.Context(), "payments: "+what, "err", err)
	idemhttp.WriteProblem(w, idem.CodeStoreUnavailable, "the store did not answer; retry later")
}

// internal logs a defect and answers 500 INTERNAL.
func (s *Service) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.ErrorContext(r.Context(), "payments: "+what, "err", err)
	writeProblem(w, http.StatusInternalServerError, CodeInternal, "internal error")
}
