package bench

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// walMeter reads PostgreSQL's WAL insert position (wal.sql) on a
// connection of its own, outside the store's pool, so that measuring takes
// no connection from the variants. The reads write no WAL. A nil
// *walMeter (SQLite) measures nothing. Not safe for concurrent use: the
// run measures one cell at a time.
type walMeter struct{ conn *pgx.Conn }

// openWAL connects a meter with cfg. ctx governs the connection attempt.
func openWAL(ctx context.Context, cfg *pgx.ConnConfig) (*walMeter, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &walMeter{conn: conn}, nil
}

// position returns the current WAL insert position, "" on a nil meter.
// ctx governs the query.
func (m *walMeter) position(ctx context.Context) (string, error) {
	if m == nil {
		return "", nil
	}
	var lsn string
	err := m.conn.QueryRow(ctx, queries.Get("wal_position")).Scan(&lsn)
	return lsn, err
}

// since returns how many bytes of WAL have been inserted since lsn (from
// position) and true, or 0 and false on a nil meter. The count is
// cluster-wide: whatever else writes WAL meanwhile is in it. ctx governs
// the query.
func (m *walMeter) since(ctx context.Context, lsn string) (bytes int64, ok bool, err error) {
	if m == nil {
		return 0, false, nil
	}
	err = m.conn.QueryRow(ctx, queries.Get("wal_since"), lsn).Scan(&bytes)
	return bytes, err == nil, err
}

// close closes the meter's connection; a nil meter has none.
func (m *walMeter) close(ctx context.Context) {
	if m != nil {
		m.conn.Close(ctx)
	}
}

// walSnapshot is the WAL insert position and the next transaction ID at
// one moment.
type walSnapshot struct {
	lsn string
	xid int64
}

// snapshot returns the WAL insert position and the next transaction ID
// (next_xid: reading it assigns none); the zero snapshot on a nil meter.
// ctx governs the queries.
func (m *walMeter) snapshot(ctx context.Context) (walSnapshot, error) {
	if m == nil {
		return walSnapshot{}, nil
	}
	var s walSnapshot
	var err error
	if s.lsn, err = m.position(ctx); err != nil {
		return s, err
	}
	err = m.conn.QueryRow(ctx, queries.Get("next_xid")).Scan(&s.xid)
	return s, err
}

// sinceSnapshot returns the WAL bytes inserted and the transaction IDs
// assigned — one per transaction that wrote, committed or not — since s,
// and true; 0, 0 and false on a nil meter. Both are cluster-wide. ctx
// governs the queries.
func (m *walMeter) sinceSnapshot(ctx context.Context, s walSnapshot) (bytes, xids int64, ok bool, err error) {
	if m == nil {
		return 0, 0, false, nil
	}
	var next int64
	if err = m.conn.QueryRow(ctx, queries.Get("next_xid")).Scan(&next); err != nil {
		return 0, 0, false, err
	}
	bytes, _, err = m.since(ctx, s.lsn)
	return bytes, next - s.xid, err == nil, err
}
