#!/bin/sh
# psycopg 3 (PyPI, in the venv real/setup.sh makes): a migration guarded by a session
# advisory lock, every statement a server-side prepared one (prepare=True: a named Parse,
# then Bind/Execute with the key as a bound parameter).
#   pgchaos run transaction-mode --replicas 5 --rounds 3 -- real/psycopg/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tools=${PGCHAOS_REAL_DIR:-$HOME/.cache/pgchaos-real}
exec "$tools/venv/bin/python" "$here/migrate.py"
