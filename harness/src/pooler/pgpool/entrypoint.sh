#!/bin/sh
# pgchaos/pgpool entrypoint (docs/containers.md, docs/pgpool.md "In a container"). Runs as the
# image's pgpool user. Writes what holds secrets from the environment into the container's
# private /tmp: pool_passwd (each role's password as TEXT, which pgpool-II also uses for
# SCRAM to PostgreSQL), pool_hba.conf (SCRAM over TCP), pcp.conf (the PCP user postgres and
# its password's MD5, by pg_md5) and ~/.pcppass (for pcp_* -w inside the container); then
# runs pgpool-II in the foreground on the configuration given (default
# /etc/pgpool2/pgpool.conf), -D: no pgpool_status carried over.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (pgchaos compose writes it to .env)}"
: "${CHAOS_PASSWORD:?set CHAOS_PASSWORD (pgchaos compose writes it to .env)}"
umask 077
printf '%s\n' "postgres:TEXT$POSTGRES_PASSWORD" "chaos:TEXT$CHAOS_PASSWORD" > /tmp/pool_passwd
printf '%s\n' "# written by the pgchaos entrypoint" \
    "local all all trust" \
    "host all all 0.0.0.0/0 scram-sha-256" \
    "host all all ::/0 scram-sha-256" > /tmp/pool_hba.conf
md5=$(/usr/sbin/pg_md5 "$POSTGRES_PASSWORD")
printf 'postgres:%s\n' "$md5" > /tmp/pcp.conf
printf '%s\n' "*:9898:postgres:$POSTGRES_PASSWORD" > "${HOME:-/var/lib/pgpool}/.pcppass"
exec /usr/sbin/pgpool -n -D -f "${1:-/etc/pgpool2/pgpool.conf}" -F /tmp/pcp.conf -a /tmp/pool_hba.conf
