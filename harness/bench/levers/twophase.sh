#!/usr/bin/env bash
# The two-phase record's HOT exploration of docs/benchmarks.md ("Can the
# completion UPDATE be HOT?"): pgbench runs, side by side and in rotating
# order, of a two-phase request as three transactions — the reservation
# (synchronous_commit off, as Reserve), the business writes (plain's
# payment and outbox rows) and the completion UPDATE (Finish's SET list
# and fence, durable) — against copies of idem_operations from
# twophase_setup.sql (tp_split: twophase_split.sql, the same request with
# the in-flight and retirement bookkeeping in tables of their own); plus
# plain.sql alone for the ratio. Per run: tps,
# WAL bytes per request from pg_current_wal_insert_lsn(), and the share
# of the table's updates that were HOT (pg_stat_user_tables.n_tup_hot_upd
# ÷ n_tup_upd). Usage: twophase.sh 'postgres://…' on a database "idem
# migrate" prepared and setup.sql and twophase_setup.sql ran on; CLIENTS
# (16), SECONDS_PER_RUN (10) and ROUNDS (3) from the environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
dsn=$1
clients=${CLIENTS:-16} seconds=${SECONDS_PER_RUN:-10} rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp plain.sql "$work/"
tables=(tp_asis tp_ff85 tp_hotmax tp_hotblocked tp_hotmax50)
for t in "${tables[@]}"; do
	sed "s/INSERT INTO TABLE /INSERT INTO $t /; s/UPDATE TABLE /UPDATE $t /" twophase.sql >"$work/$t.sql"
done
cp twophase_split.sql "$work/tp_split.sql"
variants=(plain "${tables[@]}" tp_split)
q() { psql -qAt "$dsn" -c "$1"; }
upd() { q "SELECT coalesce(sum(n_tup_upd), 0) || ' ' || coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_user_tables WHERE relname = '$1'"; }
for round in $(seq 1 "$rounds"); do
	n=${#variants[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${variants[$(((i + round) % n))]}
		read -r u0 h0 <<<"$(upd "$v")"
		w0=$(q "SELECT pg_current_wal_insert_lsn()")
		out=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/$v.sql" "$dsn" 2>&1)
		w1=$(q "SELECT pg_current_wal_insert_lsn()")
		tx=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out")
		# pg_stat_user_tables counts a backend's updates once it flushes
		# them (at the latest when it exits): wait, up to 10 s, until
		# every request's one UPDATE is counted.
		for _ in $(seq 1 100); do
			read -r u1 h1 <<<"$(upd "$v")"
			[[ $v == plain || $((u1 - u0)) -ge $tx ]] && break
			sleep 0.1
		done
		tps=$(awk '/^tps/ {print $3}' <<<"$out")
		wal=$(q "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $tx)")
		hot=$(q "SELECT CASE WHEN $u1 - $u0 > 0 THEN round(100.0 * ($h1 - $h0) / ($u1 - $u0)) || '%' ELSE '-' END")
		printf 'round %d %-14s tps %7.0f  WAL bytes/req %5s  HOT %s\n' "$round" "$v" "$tps" "$wal" "$hot"
	done
done
