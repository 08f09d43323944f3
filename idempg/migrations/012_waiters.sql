-- Waiters of a commit (Store.Watch, watch.go). A process whose request
-- waits (Prefer: wait) for an operation in flight owned by another
-- process inserts a row here for the scope, after its listener connection
-- runs LISTEN idem_changed; the statements that move a record out of
-- flight (queries.sql Finish, Release, TakeOver; effects.sql MarkUnknown)
-- call pg_notify('idem_changed', encode(scope, 'hex')) only when a row for
-- their scope exists. A transaction that ran NOTIFY serialises on a global
-- lock at commit; the probe of this (almost always empty) table keeps
-- that cost away from the hot path when nobody waits.
--
-- waiter names one Watch call (a random Store ID and a counter); the row
-- is deleted when the watch stops. expires_at bounds the rows of a process
-- that crashed while watching: Watch deletes expired rows before
-- inserting its own. A stale row only makes the next move of its own scope
-- notify once in vain.
--
-- UNLOGGED: the rows are a hint about live connections, which a crash or
-- a failover ends anyway (listeners then wake their watchers and
-- reconnect), so they are not worth WAL.
CREATE UNLOGGED TABLE idem_waiters (
    scope      bytea       NOT NULL,
    waiter     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, waiter)
);
