package payments

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// healthTimeout bounds the store check of GET /healthz.
const healthTimeout = 2 * time.Second

// get handles GET /v1/payments/{id}: 404 NOT_FOUND for an unknown id and
// for another principal's payment alike.
func (s *Service) get(w http.ResponseWriter, r *http.Request, id idem.Identity) {
	if !storable(r.PathValue("id")) {
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
		return
	}
	var (
		p     Payment
		found bool
	)
	err := s.store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		var err error
		p, err = scanPayment(tx.QueryRow(ctx, queries.Get("get_payment"), r.PathValue("id"), id.Tenant, id.Principal))
		if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		s.storeFailed(w, r, "get payment", err)
	case !found:
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

// list handles GET /v1/payments: all of the caller's payments, newest
// first (by id, which sorts by creation time), as {"payments": […]}.
func (s *Service) list(w http.ResponseWriter, r *http.Request, id idem.Identity) {
	var ps []Payment
	err := s.store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		ps = ps[:0]
		return queryRows(ctx, tx, queries.Get("list_payments"), []any{id.Tenant, id.Principal},
			func(row registry.Row) error {
				p, err := scanPayment(row)
				ps = append(ps, p)
				return err
			})
	})
	if err != nil {
		s.storeFailed(w, r, "list payments", err)
		return
	}
	if ps == nil {
		ps = []Payment{}
	}
	writeJSON(w, http.StatusOK, struct {
		Payments []Payment `json:"payments"`
	}{ps})
}

func scanPayment(row registry.Row) (Payment, error) {
	var (
		p    Payment
		memo sql.NullString
	)
	if err := row.Scan(&p.ID, &p.Amount, &p.Currency, &p.Payee, &memo, &p.CreatedAt); err != nil {
		return Payment{}, err
	}
	if memo.Valid {
		p.Memo = &memo.String
	}
	return p, nil
}

// queryRows runs a query returning many rows in tx and calls each for
// every row.
func queryRows(ctx context.Context, tx registry.Tx, query string, args []any, each func(registry.Row) error) error {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// healthz handles GET /healthz: 200 {"status":"ok"} when a trivial
// transaction on the store succeeds within healthTimeout, else 503
// STORE_UNAVAILABLE.
func (s *Service) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	err := s.store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		var one int
		return tx.QueryRow(ctx, queries.Get("ping")).Scan(&one)
	})
	if err != nil {
		s.storeFailed(w, r, "health check", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
