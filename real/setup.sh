#!/bin/sh
# Install the real tools the scripts beside this one run (as root on Debian 12; see
# docs/tap.md, "Real tools"). The Debian packages system-wide; sqlx-cli and the Python
# packages into $PGCHAOS_REAL_DIR (default ~/.cache/pgchaos-real), never system-wide:
#   sqlx-cli  -> $PGCHAOS_REAL_DIR/sqlx/bin/sqlx   (cargo install --locked, a few minutes)
#   psycopg 3 -> $PGCHAOS_REAL_DIR/venv            (python3 -m venv; pip install)
# Each step is skipped when its tool is already there.
set -eu
tools=${PGCHAOS_REAL_DIR:-$HOME/.cache/pgchaos-real}
mkdir -p "$tools"
if ! ruby -e 'require "active_record"; require "pg"' 2>/dev/null || ! command -v sqitch >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y ruby-activerecord ruby-pg sqitch libdbd-pg-perl postgresql-client \
        || { apt-get update && apt-get install -y ruby-activerecord ruby-pg sqitch libdbd-pg-perl postgresql-client; }
fi
if [ ! -x "$tools/sqlx/bin/sqlx" ]; then
    cargo install sqlx-cli --version 0.9.0 --locked --no-default-features \
        --features postgres,native-tls --root "$tools/sqlx"
fi
if [ ! -x "$tools/venv/bin/python" ] || ! "$tools/venv/bin/python" -c 'import psycopg' 2>/dev/null; then
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet 'psycopg[binary]==3.2.*'
fi
echo "real tools ready in $tools"
