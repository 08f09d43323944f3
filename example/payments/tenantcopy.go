package payments

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"slices"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed tenantcopy.sql
var tenantCopyFS embed.FS

// tenantCopyQueries are the statements of CopyTenant (tenantcopy.sql).
var tenantCopyQueries = sqlfile.MustLoad(tenantCopyFS, "tenantcopy.sql")

// movedPayment and movedRefund are whole rows of the business tables.
type (
	movedPayment struct {
		id, operationID, tenant, principal, amount, currency, payee string
		memo                                                        sql.NullString
		createdAt                                                   string
		refundedMinor                                               int64
	}
	movedRefund struct {
		id, operationID, paymentID, paymentOperationID, amount string
		reason                                                 sql.NullString
		createdAt                                              string
	}
)

// CopyTenant copies the tenant's payments and refunds from the database
// of from to that of to, for a tenant move between shards (shard.Move's
// Data; docs/shards-move.md): it creates the tables on to if needed,
// inserts the rows to does not hold yet, in one transaction, and then
// reads the tenant's rows back from to and fails unless they are exactly
// the rows of from. So a re-run after a crash is harmless, and a
// destination that holds different rows of the tenant stops the move.
// It returns a summary. The move has fenced the tenant on from, so its
// rows do not change meanwhile. ctx governs every statement. The
// statements are portable between SQLite and PostgreSQL.
func CopyTenant(ctx context.Context, from, to registry.Store, tenant string) (string, error) {
	pays, refs, err := readTenantRows(ctx, from, tenant)
	if err != nil {
		return "", fmt.Errorf("payments: reading the tenant's rows: %w", err)
	}
	if _, err := createTables(ctx, to, ""); err != nil { // the engine told by the transaction: shards are PostgreSQL or SQLite
		return "", err
	}
	err = to.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		for _, p := range pays {
			if _, err := tx.Exec(ctx, tenantCopyQueries.Get("copy_payment"), p.id, p.operationID, p.tenant, p.principal,
				p.amount, p.currency, p.payee, p.memo, p.createdAt, p.refundedMinor); err != nil {
				return err
			}
		}
		for _, r := range refs {
			if _, err := tx.Exec(ctx, tenantCopyQueries.Get("copy_refund"), r.id, r.operationID, r.paymentID,
				r.paymentOperationID, r.amount, r.reason, r.createdAt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("payments: writing the tenant's rows: %w", err)
	}
	gotPays, gotRefs, err := readTenantRows(ctx, to, tenant)
	if err != nil {
		return "", fmt.Errorf("payments: reading the copied rows back: %w", err)
	}
	if !slices.Equal(gotPays, pays) || !slices.Equal(gotRefs, refs) {
		return "", fmt.Errorf("payments: the new shard holds %d payments and %d refunds of the tenant that differ from the old shard's %d and %d",
			len(gotPays), len(gotRefs), len(pays), len(refs))
	}
	return fmt.Sprintf("%d payments, %d refunds", len(pays), len(refs)), nil
}

// readTenantRows reads the tenant's payments and refunds, ordered by id,
// in one transaction.
func readTenantRows(ctx context.Context, store registry.Store, tenant string) (pays []movedPayment, refs []movedRefund, err error) {
	err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		pays, refs = nil, nil
		rows, err := tx.Query(ctx, tenantCopyQueries.Get("tenant_payments"), tenant)
		if err != nil {
			return err
		}
		for rows.Next() {
			var p movedPayment
			if err := rows.Scan(&p.id, &p.operationID, &p.tenant, &p.principal, &p.amount, &p.currency, &p.payee,
				&p.memo, &p.createdAt, &p.refundedMinor); err != nil {
				rows.Close()
				return err
			}
			pays = append(pays, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, tenantCopyQueries.Get("tenant_refunds"), tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r movedRefund
			if err := rows.Scan(&r.id, &r.operationID, &r.paymentID, &r.paymentOperationID, &r.amount, &r.reason, &r.createdAt); err != nil {
				return err
			}
			refs = append(refs, r)
		}
		return rows.Err()
	})
	return pays, refs, err
}
