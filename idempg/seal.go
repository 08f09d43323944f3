package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/reseal"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed seal.sql
var sealFS embed.FS

// sealQueries holds the named statements of seal.sql.
var sealQueries = sqlfile.MustLoad(sealFS, "seal.sql")

var _ registry.Resealer = (*Store)(nil)

// Reseal re-encrypts stored bodies under the Sealer's active key; see
// registry.Resealer. Each batch is one transaction that locks its rows
// (SELECT … FOR UPDATE), so a concurrent Prune or re-seal waits or skips
// them. The commit is durable. ctx governs the transaction.
func (s *Store) Reseal(ctx context.Context, cursor string, limit int) (registry.ResealBatch, error) {
	if s.sealer == nil {
		return registry.ResealBatch{}, fmt.Errorf("idempg: reseal: %w", registry.ErrNoSealer)
	}
	c, err := reseal.Parse(cursor)
	if err != nil {
		return registry.ResealBatch{}, fmt.Errorf("idempg: %w", err)
	}
	limit = max(limit, 1)
	var out registry.ResealBatch
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		out = registry.ResealBatch{} // a retried transaction starts again
		var n int
		var err error
		if c.Effects {
			n, err = s.resealEffects(ctx, tx, &c, limit, &out)
		} else {
			n, err = s.resealResponses(ctx, tx, &c, limit, &out)
		}
		out.Next = c.Next(n, limit)
		return err
	})
	if err != nil {
		return registry.ResealBatch{}, fmt.Errorf("idempg: reseal: %w", translate(err))
	}
	return out, nil
}

// resealResponses re-seals the next batch of response bodies after
// c.Scope, moves c.Scope to the last one and adds what it changed and
// skipped to out; it returns the batch's size.
func (s *Store) resealResponses(ctx context.Context, tx pgx.Tx, c *reseal.Cursor, limit int, out *registry.ResealBatch) (int, error) {
	type row struct {
		scope, digest []byte
		operationID   string
		key           *string
		resp          idem.Response
	}
	rows, err := tx.Query(ctx, sealQueries.Get("ResealResponses"), c.Scope, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var b row
		var status int32
		err := r.Scan(&b.scope, &b.operationID, &b.key, &b.resp.Body, &status, &b.resp.MediaType,
			&b.resp.Location, &b.resp.ETag, &b.digest)
		b.resp.Status = int(status)
		return b, err
	})
	if err != nil {
		return 0, err
	}
	for _, b := range batch {
		c.Scope = b.scope
		key, sealed, err := reseal.Response(s.sealer, b.operationID, idem.ScopeHash(b.scope), b.key, b.resp, b.digest)
		switch {
		case reseal.Unopenable(err):
			out.Skipped = append(out.Skipped, registry.SkippedBody{Body: "operation " + b.operationID, Err: err})
			continue
		case err != nil:
			return 0, err
		}
		if _, err := tx.Exec(ctx, sealQueries.Get("ResealResponse"), b.scope, sealed, key); err != nil {
			return 0, err
		}
		out.Changed++
	}
	return len(batch), nil
}

// resealEffects re-seals the requests and answers of the next batch of
// effect attempts after (c.OperationID, c.Name), moves the cursor to the
// last one and adds what it changed and skipped to out; it returns the
// batch's size.
func (s *Store) resealEffects(ctx context.Context, tx pgx.Tx, c *reseal.Cursor, limit int, out *registry.ResealBatch) (int, error) {
	type row struct {
		operationID, name string
		request, answer   []byte
		reqKey, ansKey    *string
	}
	rows, err := tx.Query(ctx, sealQueries.Get("ResealEffects"), c.OperationID, c.Name, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var b row
		err := r.Scan(&b.operationID, &b.name, &b.request, &b.reqKey, &b.answer, &b.ansKey)
		return b, err
	})
	if err != nil {
		return 0, err
	}
	for _, b := range batch {
		c.OperationID, c.Name = b.operationID, b.name
		reqKey, req, reqChanged, reqSkip, err := reseal.Part(s.sealer, b.operationID, b.name, "request", b.reqKey, b.request)
		if err != nil {
			return 0, err
		}
		ansKey, ans, ansChanged, ansSkip, err := reseal.Part(s.sealer, b.operationID, b.name, "answer", b.ansKey, b.answer)
		if err != nil {
			return 0, err
		}
		for _, skip := range []*registry.SkippedBody{reqSkip, ansSkip} {
			if skip != nil {
				out.Skipped = append(out.Skipped, *skip)
			}
		}
		if !reqChanged && !ansChanged {
			continue
		}
		if _, err := tx.Exec(ctx, sealQueries.Get("ResealEffect"), b.operationID, b.name, req, reqKey, ans, ansKey); err != nil {
			return 0, err
		}
		if reqChanged {
			out.Changed++
		}
		if ansChanged {
			out.Changed++
		}
	}
	return len(batch), nil
}

// KeyUsage counts stored bodies by sealing key; see registry.Resealer.
// ctx governs the query.
func (s *Store) KeyUsage(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, sealQueries.Get("KeyUsage"))
	if err != nil {
		return nil, fmt.Errorf("idempg: key usage: %w", translate(err))
	}
	usage := map[string]int64{}
	var key string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&key, &n}, func() error { usage[key] += n; return nil })
	if err != nil {
		return nil, fmt.Errorf("idempg: key usage: %w", translate(err))
	}
	return usage, nil
}
