#!/bin/sh
# pgchaos/postgres entrypoint (docs/containers.md). Runs as the image's postgres user and
# keeps the official image's contract, so testcontainers' postgres module drives it as is:
# POSTGRES_PASSWORD (required), POSTGRES_USER (only postgres), POSTGRES_DB, the files
# /docker-entrypoint-initdb.d/*.sql run once by psql on a temporary server (its log on
# stdout, the final server's on stderr: "database system is ready to accept connections"
# appears on both), and arguments passed to postgres (-c name=value ...).
# PGCHAOS_ROLE=standby: the data directory is a pg_basebackup of PRIMARY_HOST instead.
set -eu
PG=/usr/local/pgsql/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
if [ "${POSTGRES_USER:-postgres}" != postgres ]; then
    echo "POSTGRES_USER must be postgres in pgchaos images, not $POSTGRES_USER" >&2
    exit 2
fi
umask 077
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    case "${PGCHAOS_ROLE:-primary}" in
    primary)
        printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pgchaos-pwfile
        "$PG/initdb" -D "$PGDATA" -U postgres --pwfile=/tmp/pgchaos-pwfile \
            --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync >/dev/null
        : > /tmp/pgchaos-pwfile
        printf '%s\n' "# written by the pgchaos entrypoint" \
            "local all all trust" \
            "host all all 0.0.0.0/0 scram-sha-256" \
            "host all all ::/0 scram-sha-256" \
            "host replication all 0.0.0.0/0 scram-sha-256" > "$PGDATA/pg_hba.conf"
        "$PG/pg_ctl" -D "$PGDATA" -w -t 60 \
            -o "-c listen_addresses='' -c unix_socket_directories=/tmp" start 2>&1
        # Values from the environment reach SQL only as psql variables (\getenv, then :"db"
        # and :'pw', which psql quotes), in statements read from stdin: never spliced into
        # the SQL text, never on a command line.
        if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
            "$PG/psql" -X -q -v ON_ERROR_STOP=1 -h /tmp -U postgres -d postgres <<'SQL'
\getenv db POSTGRES_DB
CREATE DATABASE :"db";
SQL
        fi
        for f in /docker-entrypoint-initdb.d/*.sql; do
            [ -f "$f" ] || continue
            "$PG/psql" -X -q -v ON_ERROR_STOP=1 -h /tmp -U postgres -d postgres -f "$f"
        done
        if [ -n "${CHAOS_PASSWORD:-}" ]; then
            "$PG/psql" -X -q -v ON_ERROR_STOP=1 -h /tmp -U postgres -d postgres <<'SQL'
\getenv pw CHAOS_PASSWORD
ALTER ROLE chaos PASSWORD :'pw';
SQL
        fi
        "$PG/pg_ctl" -D "$PGDATA" -w -m fast stop >/dev/null
        ;;
    standby)
        PGPASSWORD=$POSTGRES_PASSWORD "$PG/pg_basebackup" -h "${PRIMARY_HOST:?set PRIMARY_HOST}" \
            -p 5432 -U postgres -D "$PGDATA" -R -X stream -c fast
        ;;
    *)
        echo "PGCHAOS_ROLE must be primary or standby, not ${PGCHAOS_ROLE}" >&2
        exit 2
        ;;
    esac
fi
exec "$PG/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp "$@"
