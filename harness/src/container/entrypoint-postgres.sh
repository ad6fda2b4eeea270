#!/bin/sh
# pgchaos/postgres entrypoint (docs/containers.md). Runs as the image's postgres user.
# PGCHAOS_ROLE=primary (default): a new data directory is made with initdb, the superuser's
# password from POSTGRES_PASSWORD, TCP behind SCRAM; /etc/pgchaos/init-postgres.sql and
# /etc/pgchaos/init-chaos.sql, when mounted, run in single-user mode (any error stops the
# container), then CHAOS_PASSWORD becomes the chaos role's password.
# PGCHAOS_ROLE=standby: the data directory is a pg_basebackup of PRIMARY_HOST.
# Arguments are passed to postgres (-c name=value ...).
set -eu
PG=/usr/local/pgsql/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (pgchaos compose writes it to .env)}"
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
        single() {
            "$PG/postgres" --single -D "$PGDATA" -c exit_on_error=on "$1" >/dev/null
        }
        if [ -f /etc/pgchaos/init-postgres.sql ]; then
            single postgres < /etc/pgchaos/init-postgres.sql
        fi
        if [ -n "${CHAOS_PASSWORD:-}" ]; then
            printf "ALTER ROLE chaos PASSWORD '%s'\n" "$CHAOS_PASSWORD" | single postgres
        fi
        if [ -f /etc/pgchaos/init-chaos.sql ]; then
            single chaos < /etc/pgchaos/init-chaos.sql
        fi
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
