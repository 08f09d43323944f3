package idempg

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// candidateRows builds, in a temporary table, every combination of a
// small set of values per column that the record's CHECK constraints
// read: valid and invalid widths, every state and a bogus one, each
// nullable column NULL or not (the digest also at the wrong width), a
// zero and a positive TTL — 258,048 rows.
const candidateRows = `CREATE TEMP TABLE candidates AS
SELECT scope, owner, fingerprint, state, owner_gen, retired_at, tombstone_until, tombstone_ttl,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key
FROM unnest(ARRAY[decode(repeat('ab', 32), 'hex'), '\x0102'::bytea]) AS scope,
     unnest(ARRAY[decode(repeat('cd', 32), 'hex'), '\x01'::bytea]) AS owner,
     unnest(ARRAY[decode(repeat('ef', 32), 'hex'), '\x'::bytea]) AS fingerprint,
     unnest(ARRAY['RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED', 'BOGUS']) AS state,
     unnest(ARRAY[0, 1]::bigint[]) AS owner_gen,
     unnest(ARRAY[NULL, now()]::timestamptz[]) AS retired_at,
     unnest(ARRAY[NULL, now()]::timestamptz[]) AS tombstone_until,
     unnest(ARRAY[NULL, 0, 5]::bigint[]) AS tombstone_ttl,
     unnest(ARRAY[NULL, 201]::integer[]) AS resp_status,
     unnest(ARRAY[NULL, 'application/json']::text[]) AS resp_media_type,
     unnest(ARRAY[NULL, '']::text[]) AS resp_location,
     unnest(ARRAY[NULL, '']::text[]) AS resp_etag,
     unnest(ARRAY[NULL, '\x']::bytea[]) AS resp_body,
     unnest(ARRAY[NULL, decode(repeat('01', 32), 'hex'), '\x01'::bytea]) AS resp_digest,
     unnest(ARRAY[NULL, 'k1']::text[]) AS resp_key`

// checkExpr returns the conjunction of idem_operations' CHECK
// constraints as the database holds them, each with a CHECK's meaning (a
// NULL result passes), as one SQL expression over the record's columns.
func checkExpr(t *testing.T, pool *pgxpool.Pool) (string, int) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'idem_operations'::regclass AND contype = 'c' ORDER BY conname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			t.Fatal(err)
		}
		expr, ok := strings.CutPrefix(def, "CHECK ")
		if !ok {
			t.Fatalf("constraint %q is not a CHECK", def)
		}
		parts = append(parts, "coalesce("+expr+", true)")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(parts, " AND "), len(parts)
}

// TestOneCheckEquivalent: migration 013 replaces the record's eleven
// CHECK constraints by one that calls idem_operations_valid; on every
// candidate row the constraints after it accept exactly what the
// constraints before it accepted — nothing newly accepted, nothing newly
// refused.
func TestOneCheckEquivalent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := upgradeFrom(t, "013")
	before, n := checkExpr(t, pool)
	if n != 11 {
		t.Fatalf("%d CHECK constraints before migration 013, want 11", n)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, candidateRows); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE candidates ADD COLUMN before boolean`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE candidates SET before = `+before); err != nil {
		t.Fatal(err)
	}
	// Migration 013 alone: later ones add rules of their own (015).
	ddl, err := fs.ReadFile(migrationFS, "migrations/013_one_check.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(ddl)); err != nil {
		t.Fatal(err)
	}
	after, n := checkExpr(t, pool)
	if n != 1 {
		t.Fatalf("%d CHECK constraints after migration 013, want 1", n)
	}
	var total, accepted, differ int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE before),
		count(*) FILTER (WHERE before IS DISTINCT FROM (`+after+`)) FROM candidates`).Scan(&total, &accepted, &differ); err != nil {
		t.Fatal(err)
	}
	if total != 258048 || accepted == 0 || accepted == total {
		t.Fatalf("%d candidates, %d accepted before: the candidates do not probe the constraints", total, accepted)
	}
	if differ != 0 {
		t.Errorf("%d of %d candidate rows get another verdict after migration 013", differ, total)
	}
	t.Logf("%d candidates, %d accepted by both constraint sets", total, accepted)
}
