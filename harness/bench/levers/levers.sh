#!/usr/bin/env bash
# The record-width exploration of docs/benchmarks.md ("Where the
# one-transaction record's cost goes"): pgbench runs, side by side and in
# rotating order, of the plain handler's transaction, the floor (plus a
# 32-byte key row), and plus idem's one-transaction record in
# idem_operations as it is, as it was before migration 013 with eleven
# CHECKs (rec_elevenchecks) and, from that, without its operation-ID
# index (rec_noopid),
# with its primary key only (rec_pkonly), with every index but no CHECK
# (rec_nocheck), without the retire index (rec_noretire), with a hash
# index on the operation ID in place of the unique B-tree (rec_hashopid),
# and as it is behind the one-transaction claim (claim: idem_claim, an
# advisory lock and an index probe, first); WAL bytes per transaction
# from pg_current_wal_insert_lsn(). Usage: levers.sh 'postgres://…' on a
# database "idem migrate" prepared and setup.sql ran on; CLIENTS (16),
# SECONDS_PER_RUN (12) and ROUNDS (2) from the environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
dsn=$1
clients=${CLIENTS:-16} seconds=${SECONDS_PER_RUN:-12} rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp plain.sql floor.sql "$work/"
for t in idem_operations rec_elevenchecks rec_noopid rec_pkonly rec_nocheck rec_noretire rec_hashopid; do
	sed "s/INSERT INTO TABLE /INSERT INTO $t /" record.sql >"$work/$t.sql"
done
sed "s/INSERT INTO TABLE /INSERT INTO idem_operations /" claim.sql >"$work/claim.sql"
variants=(plain floor idem_operations claim rec_elevenchecks rec_noopid rec_pkonly rec_nocheck rec_noretire rec_hashopid)
lsn() { psql -qAt "$dsn" -c "SELECT pg_current_wal_insert_lsn()"; }
for round in $(seq 1 "$rounds"); do
	n=${#variants[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${variants[$(((i + round) % n))]}
		w0=$(lsn)
		out=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/$v.sql" "$dsn" 2>&1)
		w1=$(lsn)
		tx=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out")
		tps=$(awk '/^tps/ {print $3}' <<<"$out")
		wal=$(psql -qAt "$dsn" -c "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $tx)")
		printf 'round %d %-16s tps %8.0f  WAL bytes/tx %s\n' "$round" "$v" "$tps" "$wal"
	done
done
