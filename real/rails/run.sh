#!/bin/sh
# Rails 6.1's migrator (Debian 12: ruby-activerecord, ruby-pg) against $DATABASE_URL: one
# migration that sleeps, so replicas race. Run it through the tap:
#   pgchaos run transaction-mode --replicas 5 --rounds 3 -- real/rails/run.sh
# PGCHAOS_MIGRATION_SLEEP: seconds the migration sleeps (default 1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec ruby "$here/migrate.rb"
