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
func (s *Store) Reseal(ctx context.Context, cursor string, limit int) (string, int, error) {
	if s.sealer == nil {
		return "", 0, fmt.Errorf("idempg: reseal: %w", registry.ErrNoSealer)
	}
	c, err := reseal.Parse(cursor)
	if err != nil {
		return "", 0, fmt.Errorf("idempg: %w", err)
	}
	limit = max(limit, 1)
	var next string
	var changed int
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var n int
		var err error
		if c.Effects {
			n, changed, err = s.resealEffects(ctx, tx, &c, limit)
		} else {
			n, changed, err = s.resealResponses(ctx, tx, &c, limit)
		}
		next = c.Next(n, limit)
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("idempg: reseal: %w", translate(err))
	}
	return next, changed, nil
}

// resealResponses re-seals the next batch of response bodies after
// c.Scope and moves c.Scope to the last one; it returns the batch's size
// and how many it changed (the same: the query lists only bodies to
// re-seal).
func (s *Store) resealResponses(ctx context.Context, tx pgx.Tx, c *reseal.Cursor, limit int) (int, int, error) {
	type row struct {
		scope, digest []byte
		operationID   string
		key           *string
		resp          idem.Response
	}
	rows, err := tx.Query(ctx, sealQueries.Get("ResealResponses"), c.Scope, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, 0, err
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
		return 0, 0, err
	}
	for _, b := range batch {
		key, sealed, err := reseal.Response(s.sealer, b.operationID, idem.ScopeHash(b.scope), b.key, b.resp, b.digest)
		if err != nil {
			return 0, 0, err
		}
		if _, err := tx.Exec(ctx, sealQueries.Get("ResealResponse"), b.scope, sealed, key); err != nil {
			return 0, 0, err
		}
		c.Scope = b.scope
	}
	return len(batch), len(batch), nil
}

// resealEffects re-seals the requests and answers of the next batch of
// effect attempts after (c.OperationID, c.Name) and moves the cursor to
// the last one; it returns the batch's size and how many bodies it
// changed.
func (s *Store) resealEffects(ctx context.Context, tx pgx.Tx, c *reseal.Cursor, limit int) (int, int, error) {
	type row struct {
		operationID, name string
		request, answer   []byte
		reqKey, ansKey    *string
	}
	rows, err := tx.Query(ctx, sealQueries.Get("ResealEffects"), c.OperationID, c.Name, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, 0, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var b row
		err := r.Scan(&b.operationID, &b.name, &b.request, &b.reqKey, &b.answer, &b.ansKey)
		return b, err
	})
	if err != nil {
		return 0, 0, err
	}
	changed := 0
	for _, b := range batch {
		reqKey, req, reqChanged, err := reseal.Part(s.sealer, b.operationID, b.name, "request", b.reqKey, b.request)
		if err != nil {
			return 0, 0, err
		}
		ansKey, ans, ansChanged, err := reseal.Part(s.sealer, b.operationID, b.name, "answer", b.ansKey, b.answer)
		if err != nil {
			return 0, 0, err
		}
		if _, err := tx.Exec(ctx, sealQueries.Get("ResealEffect"), b.operationID, b.name, req, reqKey, ans, ansKey); err != nil {
			return 0, 0, err
		}
		if reqChanged {
			changed++
		}
		if ansChanged {
			changed++
		}
		c.OperationID, c.Name = b.operationID, b.name
	}
	return len(batch), changed, nil
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
