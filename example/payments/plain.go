package payments

import (
	"context"
	"embed"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed plain.sql
var plainFS embed.FS

var plainQueries = sqlfile.MustLoad(plainFS, "plain.sql")

// PlainCreate returns POST /v1/payments as a careful service would write it
// without idem: the baseline "idem bench" compares the idempotent handler
// against. It is not one of the service's routes.
//
// It does what the idempotent route does, minus the registry: it
// authenticates the bearer token (401 UNAUTHENTICATED), reads at most
// canon.DefaultMaxBytes of body (413 BODY_TOO_LARGE), checks the media type
// and the payments.v1 schema with the same canonicaliser (415, 400
// INVALID_JSON or SCHEMA_VIOLATION), refuses amounts above AmountLimit (422
// AMOUNT_LIMIT), then writes the payment row and its payment.created
// outbox message in one transaction of its own (InsertPlain) and answers
// 201 with Location and the payment as JSON, the same body the idempotent
// route answers. Storage trouble answers 503 STORE_UNAVAILABLE.
//
// Without an operation, each request gets a fresh ID of the operation-ID
// form (idem.NewOperationID), which names the payment ("pay_…") and fills
// the operation_id columns, so the rows have the same shape and indexes as
// the idempotent route's. A retried request creates a second payment: that
// is what the baseline is for. Safe for concurrent use.
func (s *Service) PlainCreate() http.Handler { return s.PlainCreateWith(nil) }

// PlainStep is extra work PlainCreateWith runs in the plain handler's
// transaction, before InsertPlain: id is the authenticated caller and r
// the request (its body already read). An error rolls the transaction
// back and answers 503 STORE_UNAVAILABLE, as a failed insert does. ctx
// governs the step's statements.
type PlainStep func(ctx context.Context, tx registry.Tx, id idem.Identity, r *http.Request) error

// PlainCreateWith returns PlainCreate's handler with step run in its
// transaction (see PlainStep); a nil step makes it PlainCreate. "idem
// bench" uses it for its floor variant: the plain handler plus the
// smallest idempotency row. Safe for concurrent use if step is.
func (s *Service) PlainCreateWith(step PlainStep) http.Handler {
	opts := canon.Options{Mode: canon.ModeSchema, Schema: Schema()}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.plainCreate(w, r, opts, step)
	})
}

func (s *Service) plainCreate(w http.ResponseWriter, r *http.Request, opts canon.Options, step PlainStep) {
	ctx := r.Context()
	id, err := s.identity(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		idemhttp.WriteProblem(w, idem.CodeUnauthenticated, "authentication required")
		return
	}
	body, rerr := readPlainBody(r)
	if rerr != nil {
		idemhttp.WriteProblem(w, idem.Code(rerr.Code), rerr.Reason)
		return
	}
	res, err := canon.Canonicalize(r.Header.Get("Content-Type"), body, opts)
	if err != nil {
		code, detail := idem.CodeOf(err), "invalid request"
		if ce, ok := err.(*canon.Error); ok {
			detail = ce.Reason
			if ce.Offset >= 0 {
				detail += " at byte " + strconv.Itoa(ce.Offset)
			}
		}
		idemhttp.WriteProblem(w, code, detail)
		return
	}
	req, over, err := parseCreate(res.Payload)
	if err != nil {
		s.internal(w, r, "plain create: canonical payload", err)
		return
	}
	if over {
		writeProblem(w, http.StatusUnprocessableEntity, CodeAmountLimit, "amount above "+AmountLimit)
		return
	}
	requestID := idem.NewOperationID(time.Now(), idem.ScopeHash{})
	p := newPayment(requestID, req)
	out, err := marshal(p)
	if err != nil {
		s.internal(w, r, "plain create: encoding", err)
		return
	}
	if err := s.store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		if step != nil {
			if err := step(ctx, tx, id, r); err != nil {
				return err
			}
		}
		return s.InsertPlain(ctx, tx, id, requestID, p, out)
	}); err != nil {
		s.storeFailed(w, r, "plain create: insert", err)
		return
	}
	h := w.Header()
	h.Set("Location", "/v1/payments/"+p.ID)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

// readPlainBody reads the whole body, refusing more than
// canon.DefaultMaxBytes (BODY_TOO_LARGE) while reading, as the idempotent
// route does; a body that cannot be read is INVALID_JSON.
func readPlainBody(r *http.Request) ([]byte, *canon.Error) {
	tooLarge := &canon.Error{Code: canon.CodeBodyTooLarge, Offset: -1,
		Reason: "body larger than " + strconv.Itoa(canon.DefaultMaxBytes) + " bytes"}
	if r.ContentLength > canon.DefaultMaxBytes {
		return nil, tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, canon.DefaultMaxBytes+1))
	switch {
	case err != nil:
		return nil, &canon.Error{Code: canon.CodeInvalidJSON, Offset: -1, Reason: "the body could not be read"}
	case len(b) > canon.DefaultMaxBytes:
		return nil, tooLarge
	}
	return b, nil
}

// InsertPlain writes the business rows of one payment creation in tx: the
// payment row (the statement the idempotent route uses) and one
// payment.created outbox message with payload body and message ID
// registry.MessageID(requestID, 0), into the registry's outbox table. It
// is the plain handler's transaction body and what "idem bench" times as
// the database's own insert rate. requestID fills the operation_id
// columns; it must be unique (see PlainCreate). ctx governs the two
// statements; tx must be a transaction of the Service's store.
func (s *Service) InsertPlain(ctx context.Context, tx registry.Tx, id idem.Identity, requestID string, p Payment, body []byte) error {
	if err := insertPayment(ctx, tx, id, requestID, p); err != nil {
		return err
	}
	return s.insertPlainOutbox(ctx, tx, requestID, TopicCreated, body)
}

// insertPlainOutbox writes the one outbox message of a request that no
// record holds (the plain handler, or idemhttp's plain executions, where
// AddOutbox refuses), with ID registry.MessageID(requestID, 0), in tx.
func (s *Service) insertPlainOutbox(ctx context.Context, tx registry.Tx, requestID, topic string, body []byte) error {
	// The outbox's created_at column differs between the engines.
	_, err := tx.Exec(ctx, plainQueries.Get("insert_outbox_"+s.db), registry.MessageID(requestID, 0), requestID, topic, body)
	return err
}

// addOutbox queues the message of the execution in ctx (idemhttp.AddOutbox)
// or, in a plain execution, writes it in tx at once; an error when
// neither could be done.
func (s *Service) addOutbox(ctx context.Context, tx registry.Tx, opID, topic string, body []byte) error {
	if idemhttp.PlainExecution(ctx) {
		return s.insertPlainOutbox(ctx, tx, opID, topic, body)
	}
	if !idemhttp.AddOutbox(ctx, registry.Message{Topic: topic, Payload: body}) {
		return errors.New("outbox unavailable")
	}
	return nil
}
