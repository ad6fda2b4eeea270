#!/bin/sh
# sqitch 1.3.1 (Debian 12: sqitch, libdbd-pg-perl) deploying a one-change project to the
# database of the PG* variables; the change sleeps, so replicas race. Sqitch takes
# pg_try_advisory_lock(75474063), then waits in pg_advisory_lock (App::Sqitch::Engine::pg,
# try_lock / wait_lock), and runs the change's script with psql.
#   pgchaos run transaction-mode --replicas 5 --rounds 3 -- real/sqitch/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export SQITCH_FULLNAME="pgchaos replica ${PGCHAOS_REPLICA:-0}"
export SQITCH_EMAIL="replica${PGCHAOS_REPLICA:-0}@pgchaos.invalid"
export SQITCH_CONFIG="$here/project/sqitch.conf"
cd "$here/project"
exec sqitch deploy "db:pg://$PGUSER:$PGPASSWORD@$PGHOST:$PGPORT/$PGDATABASE"
