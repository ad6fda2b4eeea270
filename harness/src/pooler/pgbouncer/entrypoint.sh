#!/bin/sh
# pgchaos/pgbouncer entrypoint (docs/containers.md). Runs as the image's pgbouncer user.
# Writes the auth file (plain-text passwords, from which PgBouncer computes SCRAM for both
# sides) and the HBA file into the container's private /tmp, then runs PgBouncer on the
# configuration given (default /etc/pgbouncer/pgbouncer.ini).
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (pgchaos compose writes it to .env)}"
: "${CHAOS_PASSWORD:?set CHAOS_PASSWORD (pgchaos compose writes it to .env)}"
umask 077
printf '"%s" "%s"\n' postgres "$POSTGRES_PASSWORD" chaos "$CHAOS_PASSWORD" > /tmp/userlist.txt
printf '%s\n' "# written by the pgchaos entrypoint" \
    "local all all trust" \
    "host all all 0.0.0.0/0 scram-sha-256" \
    "host all all ::/0 scram-sha-256" > /tmp/pgbouncer_hba.conf
exec /usr/local/bin/pgbouncer "${1:-/etc/pgbouncer/pgbouncer.ini}"
