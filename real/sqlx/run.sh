#!/bin/sh
# sqlx-cli's `sqlx migrate run` (cargo install sqlx-cli, see real/setup.sh) against
# $DATABASE_URL, one migration that sleeps. sqlx takes pg_advisory_lock($1) with a key made
# from the database name, bound as a binary int8 (sqlx-postgres migrate.rs).
#   pgchaos run transaction-mode --replicas 5 --rounds 3 -- real/sqlx/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tools=${PGCHAOS_REAL_DIR:-$HOME/.cache/pgchaos-real}
exec "$tools/sqlx/bin/sqlx" migrate run --source "$here/migrations" --database-url "$DATABASE_URL"
