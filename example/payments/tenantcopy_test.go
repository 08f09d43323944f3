package payments

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// TestCopyTenant: CopyTenant copies exactly the tenant's payments and
// refunds (NULL and non-NULL memos and reasons, refunded totals) between
// databases of either driver, a re-run is harmless, and a destination
// whose row of the tenant differs stops the copy.
// threat:tenant-move-interrupted
func TestCopyTenant(t *testing.T) {
	for _, pair := range [][2]string{{"SQLite", "Postgres"}, {"Postgres", "SQLite"}} {
		t.Run(pair[0]+"-to-"+pair[1], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			open := func(driver string) registry.Store {
				st, err := idemstore.Open(ctx, testDrivers[driver](t), idemstore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(st.Close)
				if _, err := New(ctx, Config{Store: st, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)}); err != nil {
					t.Fatal(err)
				}
				return st
			}
			from, to := open(pair[0]), open(pair[1])
			err := from.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
				for _, q := range []string{
					`INSERT INTO payments VALUES ('pay_1', 'op_1', 'acme', 'alice', '5.00', 'EUR', 'p', NULL, '2026-01-01T00:00:00Z', 200)`,
					`INSERT INTO payments VALUES ('pay_2', 'op_2', 'acme', 'bob', '7.00', 'USD', 'q', 'rent', '2026-01-02T00:00:00Z', 0)`,
					`INSERT INTO payments VALUES ('pay_3', 'op_3', 'globex', 'carol', '1.00', 'EUR', 'r', NULL, '2026-01-03T00:00:00Z', 0)`,
					`INSERT INTO refunds VALUES ('ref_1', 'op_4', 'pay_1', 'op_1', '2.00', NULL, '2026-01-04T00:00:00Z')`,
				} {
					if _, err := tx.Exec(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second run finds every row there
				got, err := CopyTenant(ctx, from, to, "acme")
				if err != nil || got != "2 payments, 1 refunds" {
					t.Fatalf("CopyTenant: %q, %v", got, err)
				}
			}
			wantPays, wantRefs, _ := readTenantRows(ctx, from, "acme")
			gotPays, gotRefs, err := readTenantRows(ctx, to, "acme")
			if err != nil || len(gotPays) != 2 || len(gotRefs) != 1 || gotPays[0] != wantPays[0] || gotPays[1] != wantPays[1] || gotRefs[0] != wantRefs[0] {
				t.Errorf("the copy: %+v %+v (%v), want %+v %+v", gotPays, gotRefs, err, wantPays, wantRefs)
			}
			if others, _, _ := readTenantRows(ctx, to, "globex"); len(others) != 0 {
				t.Errorf("another tenant's rows were copied: %+v", others)
			}
			if err := to.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE payments SET refunded_minor = 0 WHERE id = 'pay_1'`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got, err := CopyTenant(ctx, from, to, "acme"); err == nil {
				t.Errorf("CopyTenant onto a differing row: %q, want an error", got)
			}
		})
	}
}
