-- Named queries of the durability check (durability.go), loaded by
-- internal/sqlfile.

-- name: Durability
-- The session's synchronous_commit (what a commit that does not raise it
-- gets: the database's, role's or server's setting), the primary's
-- synchronous_standby_names, the standbys streaming from this server and
-- how many of them are synchronous. sync_state is NULL to a role that may
-- not read replication details (pg_read_all_stats): such rows are counted
-- in "unseen".
-- statement_timeout matters too: a timeout that fires while a COMMIT
-- waits for the standby ends the wait, and PostgreSQL reports the commit
-- as done although the standby may not have it.
SELECT current_setting('synchronous_commit'),
       current_setting('statement_timeout'),
       current_setting('synchronous_standby_names'),
       count(*) FILTER (WHERE sync_state IS NOT NULL),
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
       count(*) FILTER (WHERE sync_state IS NULL)
FROM pg_stat_replication;
