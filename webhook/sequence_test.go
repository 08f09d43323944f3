package webhook_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/webhook"
)

// TestAdvanceSequence: a stream's sequence only moves forward — its
// first event and every newer one are fresh, an older or repeated one is
// not and changes nothing; streams are independent; a check whose
// transaction rolls back leaves the stream as it was; and of 20
// concurrent deliveries of one stream's events 1…20, the stream ends at
// 20 whatever their order. On SQLite, PostgreSQL and MariaDB.
// threat:webhook-out-of-order
func TestAdvanceSequence(t *testing.T) {
	engines := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "seq.db") },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
		"mariadb":  func(t *testing.T) string { return mytest.URL(t) },
	}
	for name, dsn := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, err := idemstore.Open(ctx, dsn(t), idemstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			advance := func(stream string, seq int64) bool {
				t.Helper()
				var fresh bool
				if err := st.InTx(ctx, func(ctx context.Context, tx registry.Tx) (err error) {
					fresh, err = webhook.AdvanceSequence(ctx, tx, stream, seq)
					return err
				}); err != nil {
					t.Fatalf("AdvanceSequence(%s, %d): %v", stream, seq, err)
				}
				return fresh
			}
			for _, c := range []struct {
				stream string
				seq    int64
				fresh  bool
			}{
				{"psp:transfer:a", 5, true},
				{"psp:transfer:a", 3, false}, // older
				{"psp:transfer:a", 5, false}, // repeated
				{"psp:transfer:b", 1, true},  // another stream
				{"psp:transfer:a", 9, true},
				{"psp:transfer:a", 6, false},
			} {
				if got := advance(c.stream, c.seq); got != c.fresh {
					t.Errorf("AdvanceSequence(%s, %d) = %v, want %v", c.stream, c.seq, got, c.fresh)
				}
			}
			// Rolled back with its transaction.
			_ = st.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
				if _, err := webhook.AdvanceSequence(ctx, tx, "psp:transfer:a", 100); err != nil {
					t.Fatal(err)
				}
				return context.Canceled
			})
			if !advance("psp:transfer:a", 10) {
				t.Error("an advance that rolled back moved the stream")
			}
			if _, err := webhook.AdvanceSequence(ctx, nil, "s", 1); err == nil {
				t.Error("AdvanceSequence without a transaction did not fail")
			}
			var wg sync.WaitGroup
			advance("psp:transfer:c", 0) // the stream exists: concurrent events race on the compare-and-set
			for seq := int64(1); seq <= 20; seq++ {
				wg.Go(func() {
					err := st.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
						_, err := webhook.AdvanceSequence(ctx, tx, "psp:transfer:c", seq)
						return err
					})
					if err != nil {
						t.Errorf("concurrent advance %d: %v", seq, err)
					}
				})
			}
			wg.Wait()
			if advance("psp:transfer:c", 20) {
				t.Error("after 20 concurrent events, 20 is fresh again: the stream went back")
			}
			if !advance("psp:transfer:c", 21) {
				t.Error("21 is not fresh after 20")
			}
		})
	}
}
