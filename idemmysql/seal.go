package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/reseal"
	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed seal.sql
var sealFiles embed.FS

// sealQueries holds the named statements of seal.sql.
var sealQueries = sqlfile.MustLoad(sealFiles, "seal.sql")

var _ registry.Resealer = (*Store)(nil)

// Reseal re-encrypts stored bodies under the Sealer's active key; see
// registry.Resealer. Each batch is one transaction that locks the rows it
// re-seals (FOR UPDATE), durable as every commit Open accepts. ctx
// governs the call.
func (s *Store) Reseal(ctx context.Context, cursor string, limit int) (registry.ResealBatch, error) {
	if s.sealer == nil {
		return registry.ResealBatch{}, fmt.Errorf("idemmysql: reseal: %w", registry.ErrNoSealer)
	}
	c, err := reseal.Parse(cursor)
	if err != nil {
		return registry.ResealBatch{}, fmt.Errorf("idemmysql: %w", err)
	}
	limit = max(limit, 1)
	var out registry.ResealBatch
	err = s.writeTx(ctx, "reseal", func(tx *sql.Tx, _ any) error {
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
		return registry.ResealBatch{}, err
	}
	return out, nil
}

// resealResponses re-seals the next batch of response bodies after
// c.Scope, moves c.Scope to the last one and adds what it changed and
// skipped to out; it returns the batch's size.
func (s *Store) resealResponses(ctx context.Context, tx *sql.Tx, c *reseal.Cursor, limit int, out *registry.ResealBatch) (int, error) {
	type row struct {
		scope, digest []byte
		operationID   string
		key           sql.NullString
		resp          idem.Response
	}
	rows, err := queryRows(ctx, tx, sealQueries.Get("ResealResponses"), c.Scope, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, err
	}
	var batch []row
	for rows.Next() {
		var b row
		var mediaType, location, etag sql.NullString
		if err := rows.Scan(&b.scope, &b.operationID, &b.key, &b.resp.Body, &b.resp.Status, &mediaType,
			&location, &etag, &b.digest); err != nil {
			rows.Close()
			return 0, err
		}
		b.resp.MediaType, b.resp.Location, b.resp.ETag = mediaType.String, location.String, etag.String
		if b.resp.Body == nil { // the driver returns an empty BLOB as nil
			b.resp.Body = []byte{}
		}
		batch = append(batch, b)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, b := range batch {
		c.Scope = b.scope
		var scope idem.ScopeHash
		if err := copyHash(scope[:], b.scope, "scope"); err != nil {
			return 0, err
		}
		key, sealed, err := reseal.Response(s.sealer, b.operationID, scope, nullable(b.key), b.resp, b.digest)
		switch {
		case reseal.Unopenable(err):
			out.Skipped = append(out.Skipped, registry.SkippedBody{Body: "operation " + b.operationID, Err: err})
			continue
		case err != nil:
			return 0, err
		}
		if _, err := exec(ctx, tx, sealQueries.Get("ResealResponse"), b.scope, sealed, key); err != nil {
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
func (s *Store) resealEffects(ctx context.Context, tx *sql.Tx, c *reseal.Cursor, limit int, out *registry.ResealBatch) (int, error) {
	type row struct {
		operationID, name string
		request, answer   []byte
		reqKey, ansKey    sql.NullString
	}
	rows, err := queryRows(ctx, tx, sealQueries.Get("ResealEffects"), c.OperationID, c.Name, s.sealer.ActiveKeyID(), limit)
	if err != nil {
		return 0, err
	}
	var batch []row
	for rows.Next() {
		var b row
		if err := rows.Scan(&b.operationID, &b.name, &b.request, &b.reqKey, &b.answer, &b.ansKey); err != nil {
			rows.Close()
			return 0, err
		}
		batch = append(batch, b)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, b := range batch {
		c.OperationID, c.Name = b.operationID, b.name
		reqKey, req, reqChanged, reqSkip, err := reseal.Part(s.sealer, b.operationID, b.name, "request", nullable(b.reqKey), b.request)
		if err != nil {
			return 0, err
		}
		ansKey, ans, ansChanged, ansSkip, err := reseal.Part(s.sealer, b.operationID, b.name, "answer", nullable(b.ansKey), b.answer)
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
		if _, err := exec(ctx, tx, sealQueries.Get("ResealEffect"), b.operationID, b.name, req, reqKey, ans, ansKey); err != nil {
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
	if err := s.checkOpen(); err != nil {
		return nil, s.fail("key usage", err)
	}
	rows, err := queryRows(ctx, s.db, sealQueries.Get("KeyUsage"))
	if err != nil {
		return nil, s.fail("key usage", err)
	}
	defer rows.Close()
	usage := map[string]int64{}
	for rows.Next() {
		var key string
		var n int64
		if err := rows.Scan(&key, &n); err != nil {
			return nil, s.fail("key usage", err)
		}
		usage[key] += n
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("key usage", err)
	}
	return usage, nil
}
