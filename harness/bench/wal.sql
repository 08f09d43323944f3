-- Write-ahead log position around each timed cell on PostgreSQL (wal.go).
-- The insert position, not pg_current_wal_lsn's write position: with
-- asynchronous commit (the reservation's) records can sit in the WAL
-- buffers after the cell ends, and they belong to it.

-- name: wal_position
SELECT pg_current_wal_insert_lsn()::text

-- name: wal_since
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint
