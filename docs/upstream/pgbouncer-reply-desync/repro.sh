#!/usr/bin/env bash
# Reproduce PgBouncer's reply desync: a notification reaches a server on which PgBouncer has
# just sent a query of its own, and PgBouncer hands that server to a waiting client before the
# query's reply; the client gets that reply as the reply to its first statement. See README.md
# beside this script.
#
#   repro.sh PGBOUNCER_BIN
#
# Three scenarios (SCENARIO=reset, the default, SCENARIO=check or SCENARIO=lost):
#   reset  session pooling: a LISTENing client leaves, PgBouncer sends server_reset_query
#          (DISCARD ALL); the waiting client gets DISCARD ALL's reply.
#   lost   reset's start; then the waiting client's second statement (BEGIN and a 0.5 s
#          SELECT, one Query) is sent while its first statement's reply is still to come, that
#          reply ends it, the client leaves: PgBouncer releases the server and sends DISCARD ALL
#          into the transaction BEGIN opens; the server stays `tested`, its backend `idle in
#          transaction (aborted)`, and a new client gets no server (README.md, "A consequence").
#   check  transaction pooling, server_check_delay = 0, server_check_query =
#          SELECT pg_sleep(0.5): a client LISTENed and left its server listening; PgBouncer
#          sends the check query before handing the server to a waiting client, and that
#          client gets the check query's reply.
#
# Signals order the events, not timing luck. reset: PgBouncer is stopped (SIGSTOP) while A's
# psql exits and the NOTIFY's notification reaches PgBouncer's server socket (seen with ss);
# on SIGCONT, Linux's epoll reports the two sockets in the order they became readable; A's
# backend is stopped meanwhile, so that DISCARD ALL's reply cannot arrive before PgBouncer has
# read the notification. check: A's backend is stopped while PgBouncer sends it the check
# query; when it continues, PostgreSQL sends the pending notification before it reads the
# query, and the check query sleeps 0.5 s before it replies.
#
# Needs PostgreSQL's initdb, postgres and psql (from $PG_BIN if set, else from PATH), and
# the PgBouncer binary to test. `ss` (iproute2) is used to see the notification arrive; without
# it the script waits a fixed second instead.
#
# Environment:
#   PG_BIN          directory holding initdb, postgres, psql (default: PATH)
#   SCENARIO        reset (default) or check, see above
#   ATTEMPTS        attempts to make (default 5)
#   TOTAL_TIMEOUT   seconds the whole run may take, setup and cleanup included (default 150)
#   REPRO_USER      when run as root: the unprivileged user the servers run as (postgres and
#                   PgBouncer refuse root); default nobody. A dedicated user is better: any
#                   process of that user can reach the servers.
#   REPRO_KEEP_LOGS a directory to copy the servers' logs and the clients' output into at the
#                   end (created if missing); by default nothing is kept.
#
# Exit: 0 when a wrong reply was seen (lost: a server lost to the pool; the evidence is
# printed); 1 when none was (lost: no server lost), and at least
# one attempt met the condition (PgBouncer's log shows the notification was the first packet
# it read after sending its query) and got its own reply; 2 on a setup error, a timeout, or
# when no attempt met the condition. Servers listen on 127.0.0.1 (PostgreSQL, password
# required) and on Unix sockets in a private temporary directory (trust); nothing is left
# running and the temporary directory is removed however the script ends.
set -uo pipefail

ATTEMPTS=${ATTEMPTS:-5}
SCENARIO=${SCENARIO:-reset}
TOTAL_TIMEOUT=${TOTAL_TIMEOUT:-150}
CHANNEL=repro_channel
BPORT=6432 # PgBouncer's Unix socket name only (.s.PGSQL.6432): it listens on no TCP port.

say() { printf '%s\n' "$*"; }
fail() { say "repro.sh: $*" >&2; exit 2; }

case $ATTEMPTS in '' | *[!0-9]* | 0) fail "ATTEMPTS must be a positive integer, got '$ATTEMPTS'" ;; esac
case $TOTAL_TIMEOUT in '' | *[!0-9]* | 0) fail "TOTAL_TIMEOUT must be a positive integer, got '$TOTAL_TIMEOUT'" ;; esac
case $SCENARIO in
    reset)
        POOLING="pool_mode = session"
        MARK='resetting: '        # PgBouncer's log line (verbose >= 1) when it sends the query
        QUERY_NAME="DISCARD ALL"
        SETUP="session pooling, default_pool_size = 1, server_reset_query = DISCARD ALL"
        ;;
    lost)
        POOLING="pool_mode = session"
        MARK='resetting: '
        QUERY_NAME="DISCARD ALL"
        SETUP="session pooling, default_pool_size = 1, server_reset_query = DISCARD ALL; B: a 0.3 s SELECT, then BEGIN and a 0.5 s SELECT in one Query, then B leaves"
        ;;
    check)
        POOLING=$'pool_mode = transaction\nserver_check_delay = 0\nserver_check_query = SELECT pg_sleep(0.5)'
        MARK='P: checking: '
        QUERY_NAME="the check query"
        SETUP="transaction pooling, default_pool_size = 1, server_check_delay = 0, server_check_query = SELECT pg_sleep(0.5)"
        ;;
    *) fail "SCENARIO must be reset, check or lost, got '$SCENARIO'" ;;
esac
[ $# -eq 1 ] || fail "usage: repro.sh PGBOUNCER_BIN"
BOUNCER=$1
[ -f "$BOUNCER" ] && [ -x "$BOUNCER" ] || fail "PgBouncer binary '$BOUNCER' is missing or not executable"
case $BOUNCER in /*) ;; *) BOUNCER=$PWD/$BOUNCER ;; esac
BOUNCER_VERSION=$(timeout 10 "$BOUNCER" --version 2>&1 | head -n 1)
case $BOUNCER_VERSION in
    PgBouncer\ *) ;;
    *) fail "'$BOUNCER' is not PgBouncer: its --version printed '$BOUNCER_VERSION'" ;;
esac

# libpq's environment must not redirect the script's connections.
for v in $(env | sed -n 's/^\(PG[A-Z_]*\)=.*/\1/p'); do
    [ "$v" = PG_BIN ] || unset "$v"
done

tool() {
    local t
    if [ -n "${PG_BIN:-}" ]; then t=$PG_BIN/$1; else t=$(command -v "$1") || t=; fi
    if [ -z "$t" ] || [ ! -x "$t" ]; then
        if [ -n "${PG_BIN:-}" ]; then fail "$1 not found in PG_BIN=$PG_BIN"; fi
        fail "$1 not found on PATH (set PG_BIN to PostgreSQL's bin directory)"
    fi
    printf '%s' "$t"
}
INITDB=$(tool initdb) || exit 2
POSTGRES=$(tool postgres) || exit 2
PSQL=$(tool psql) || exit 2
for t in timeout mktemp; do command -v "$t" >/dev/null || fail "$t not found on PATH"; done
HAVE_SS=0
command -v ss >/dev/null && HAVE_SS=1

DEADLINE=$((SECONDS + TOTAL_TIMEOUT))
# Seconds left before the deadline, at least 1 (a command bounded by it ends in time).
left() {
    local n=$((DEADLINE - SECONDS))
    [ "$n" -gt 0 ] || n=1
    printf '%s' "$n"
}
past_deadline() { [ "$SECONDS" -ge "$DEADLINE" ]; }

# --- who runs the servers -------------------------------------------------------------------
AS=()
if [ "$(id -u)" = 0 ]; then
    RUSER=${REPRO_USER:-nobody}
    RUID=$(id -u "$RUSER" 2>/dev/null) || fail "REPRO_USER '$RUSER' does not exist"
    RGID=$(id -g "$RUSER") || fail "no group for REPRO_USER '$RUSER'"
    [ "$RUID" != 0 ] || fail "REPRO_USER '$RUSER' is root; postgres refuses to run as root"
    command -v setpriv >/dev/null || fail "setpriv (util-linux) not found: needed to run the servers as $RUSER"
    AS=(setpriv --reuid="$RUID" --regid="$RGID" --clear-groups --)
else
    RUSER=$(id -un)
fi

# --- state and cleanup ------------------------------------------------------------------------
TMP=
PG_PID=
BOUNCER_PID=
A_PID=
B_PID=
A_FD_OPEN=0
STOPPED_BACKEND=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ "$A_FD_OPEN" = 1 ] && exec 3>&-
    for p in $A_PID $B_PID; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$STOPPED_BACKEND" ] && kill -CONT "$STOPPED_BACKEND" 2>/dev/null
    if [ -n "$BOUNCER_PID" ]; then
        kill -CONT "$BOUNCER_PID" 2>/dev/null
        kill -QUIT "$BOUNCER_PID" 2>/dev/null
    fi
    if [ -n "$PG_PID" ]; then
        kill -INT "$PG_PID" 2>/dev/null # fast shutdown
    fi
    local i
    for i in $(seq 1 50); do
        local alive=0
        for p in $BOUNCER_PID $PG_PID; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for p in $BOUNCER_PID $PG_PID; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ -n "${REPRO_KEEP_LOGS:-}" ] && [ -n "$TMP" ]; then
        mkdir -p "$REPRO_KEEP_LOGS" && cp "$TMP"/*.log "$TMP"/*.out "$TMP"/*.err "$REPRO_KEEP_LOGS"/ 2>/dev/null
    fi
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'say "repro.sh: interrupted" >&2; exit 2' INT TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pgbouncer-desync.XXXXXX") || fail "mktemp failed"
chmod 700 "$TMP"
SRV=$TMP/srv   # the servers' own directory: data directory and Unix sockets
CONF=$TMP/conf # configuration the servers read
mkdir -m 700 "$SRV" && mkdir -m 700 "$CONF" || fail "creating $SRV, $CONF failed"
if [ "${#AS[@]}" -gt 0 ]; then
    # root: the servers' user may pass through $TMP, owns $SRV and reads $CONF; nothing the
    # script later writes or opens for writing lies in a directory that user owns.
    chmod 711 "$TMP"
    chown "$RUID:$RGID" "$SRV" || fail "chown $SRV failed"
    chgrp "$RGID" "$CONF" && chmod 750 "$CONF" || fail "chgrp $CONF failed"
fi

# --- PostgreSQL -------------------------------------------------------------------------------
PASSWORD=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
[ ${#PASSWORD} -eq 32 ] || fail "could not read /dev/urandom"
"${AS[@]}" env HOME="$SRV" LC_ALL=C timeout "$(left)" "$INITDB" -D "$SRV/data" -U postgres \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync -E UTF8 --locale=C \
    > "$TMP/initdb.log" 2>&1 || {
    past_deadline && fail "timed out after ${TOTAL_TIMEOUT}s (TOTAL_TIMEOUT) in initdb"
    cat "$TMP/initdb.log" >&2
    fail "initdb failed (as $RUSER)"
}

free_port() {
    local p i
    for i in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if [ "$HAVE_SS" = 1 ]; then
            [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ] && { printf '%s' "$p"; return 0; }
        elif ! (exec 9<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            printf '%s' "$p"
            return 0
        fi
    done
    return 1
}

psql_direct() { # SQL as the superuser over the private socket
    timeout "$(left)" "$PSQL" -X -q -At -v ON_ERROR_STOP=1 \
        "host=$SRV port=$PG_PORT dbname=${DB:-postgres} user=postgres connect_timeout=5" -c "$1"
}

PG_PORT=
for try in 1 2 3 4 5; do
    PG_PORT=$(free_port) || fail "no free TCP port found on 127.0.0.1"
    "${AS[@]}" env HOME="$SRV" "$POSTGRES" -D "$SRV/data" -p "$PG_PORT" -k "$SRV" \
        -c listen_addresses=127.0.0.1 -c unix_socket_permissions=0700 -c fsync=off \
        -c synchronous_commit=off -c max_connections=20 \
        > "$TMP/postgres.log" 2>&1 &
    PG_PID=$!
    ready=0
    while ! past_deadline && kill -0 "$PG_PID" 2>/dev/null; do
        if psql_direct "SELECT 1" >/dev/null 2>&1; then ready=1; break; fi
        sleep 0.1
    done
    [ "$ready" = 1 ] && break
    wait "$PG_PID" 2>/dev/null
    PG_PID=
    grep -q "could not bind" "$TMP/postgres.log" || { cat "$TMP/postgres.log" >&2; fail "postgres did not start"; }
done
[ -n "$PG_PID" ] || fail "postgres could not bind a port on 127.0.0.1 in 5 tries"
psql_direct "CREATE ROLE repro LOGIN PASSWORD '$PASSWORD'" >/dev/null &&
    psql_direct "CREATE DATABASE repro OWNER repro" >/dev/null || fail "creating role and database failed"
DB=repro

cat > "$CONF/userlist.txt" <<EOF
"repro" ""
EOF
cat > "$CONF/pgbouncer.ini" <<EOF
[databases]
repro = host=127.0.0.1 port=$PG_PORT dbname=repro user=repro password=$PASSWORD

[pgbouncer]
listen_addr =
listen_port = $BPORT
unix_socket_dir = $SRV
auth_type = trust
auth_file = $CONF/userlist.txt
admin_users = repro
$POOLING
default_pool_size = 1
max_client_conn = 10
server_reset_query = DISCARD ALL
verbose = 2
EOF
chmod 640 "$CONF/userlist.txt" "$CONF/pgbouncer.ini"
[ "${#AS[@]}" -gt 0 ] && chgrp "$RGID" "$CONF/userlist.txt" "$CONF/pgbouncer.ini"

PG_VERSION=$("$POSTGRES" --version)
PSQL_VERSION=$("$PSQL" --version)

# conninfo through PgBouncer to database $1. A and B keep psql's application_name: were they
# to differ, PgBouncer would send its own SET application_name before B's statement, and
# whether DISCARD ALL's reply is then taken as the SET's reply or B's depends on how the
# replies are split into reads (seen both ways).
bouncer_conn() {
    printf 'host=%s port=%s dbname=%s user=repro connect_timeout=5' "$SRV" "$BPORT" "$1"
}
admin() {
    timeout 5 "$PSQL" -X -q -A -F '|' "$(bouncer_conn pgbouncer)" -c "$1"
}
# The number of clients of database repro waiting for a server (SHOW POOLS).
waiting_clients() {
    admin "SHOW POOLS" 2>/dev/null | awk -F'|' '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "cl_waiting") w = i; if ($i == "database") d = i } next }
        w && $d == "repro" { print $w; found = 1 }
        END { if (!found) print -1 }'
}
# Bytes PgBouncer has not yet read from its server connections (its side of the TCP
# connections to PostgreSQL's port).
bouncer_unread() {
    ss -Htn state established "( dport = :$PG_PORT )" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
    local bound=$((SECONDS + $1)) what=$2
    shift 2
    while ! "$@"; do
        if [ "$SECONDS" -ge "$bound" ] || past_deadline; then
            say "repro.sh: timed out waiting for $what" >&2
            return 1
        fi
        sleep 0.05
    done
}
gone() { ! kill -0 "$1" 2>/dev/null; }

if [ "$SCENARIO" = lost ]; then
    # Statement 2 is sent as soon as DISCARD ALL's reply answers statement 1, while statement
    # 1 sleeps: statement 1's reply then answers statement 2, and psql leaves with BEGIN run.
    cat > "$TMP/b.sql" <<'EOF'
\echo -- statement 1: SELECT 'reply to statement 1', pg_sleep(0.3)
SELECT 'reply to statement 1' AS reply, pg_sleep(0.3);
\echo -- statement 2: BEGIN and SELECT 'reply to statement 2', pg_sleep(0.5), one Query
BEGIN \; SELECT 'reply to statement 2' AS reply, pg_sleep(0.5);
EOF
else
    cat > "$TMP/b.sql" <<'EOF'
\echo -- statement 1: SELECT 'reply to statement 1', pg_backend_pid()
SELECT 'reply to statement 1' AS reply, pg_backend_pid() AS backend;
\echo -- statement 2: SELECT 'reply to statement 2', pg_backend_pid()
SELECT 'reply to statement 2' AS reply, pg_backend_pid() AS backend;
\echo -- statement 3: SELECT 'reply to statement 3', pg_backend_pid()
SELECT 'reply to statement 3' AS reply, pg_backend_pid() AS backend;
EOF
fi

OUT_OF_STEP=0
LOST=0
LOST_EVIDENCE=
IN_STEP=0
MISSED=0
OTHER=0
WINDOW_HIT=0
EVIDENCE=

# The type of the first packet PgBouncer read from a server after it logged $MARK (its own
# query), in its log from line $2 on; needs verbose = 2.
first_packet_after_mark() {
    tail -n +"$2" "$1" | awk -v mark="$MARK" '!r && index($0, mark) { r = 1; next }
        r && / S-0x[0-9a-f]*: .*read pkt=/ { s = $0; sub(/.*read pkt=./, "", s); print substr(s, 1, 1); exit }'
}
# Whether PgBouncer handed the server on (reuse_on_release) before its query's ReadyForQuery.
released_before_reply() {
    tail -n +"$2" "$1" | awk -v mark="$MARK" '!r && index($0, mark) { r = 1; next }
        r && /reuse_on_release/ { print "yes"; exit }
        r && / S-0x[0-9a-f]*: .*read pkt=.Z/ { print "no"; exit }'
}

# A LISTENs through PgBouncer; sets a_backend ("pid (backend_start ...)") and a_pid.
a_listens() {
    a_backend=$(psql_direct "SELECT pid || ' (backend_start ' || backend_start || ')' FROM pg_stat_activity
                             WHERE usename = 'repro' AND state = 'idle' AND query LIKE 'LISTEN $CHANNEL%'" 2>/dev/null)
    [ -n "$a_backend" ]
}
a_backend_pid() {
    a_pid=${a_backend%% *}
    case $a_pid in '' | *[!0-9]*) say "repro.sh: unexpected backend row '$a_backend'" >&2; return 2 ;; esac
}
start_b() { # B runs b.sql through PgBouncer; 3>&-: B must not hold A's pipe open
    "$PSQL" -X -At -f "$TMP/b.sql" "$(bouncer_conn repro)" \
        > "$TMP/b.$1.out" 2> "$TMP/b.$1.err" 3>&- &
    B_PID=$!
}

# SCENARIO=reset: sets a_backend, unread and log_from.
drive_reset() {
    local n=$1 log=$2
    log_from=1
    # A: LISTENs through PgBouncer and keeps the pool's only server.
    rm -f "$TMP/a.fifo"
    mkfifo -m 600 "$TMP/a.fifo" || return 2
    "$PSQL" -X -q -v ON_ERROR_STOP=1 "$(bouncer_conn repro)" \
        < "$TMP/a.fifo" > "$TMP/a.$n.out" 2>&1 &
    A_PID=$!
    exec 3<> "$TMP/a.fifo"
    A_FD_OPEN=1
    printf 'LISTEN %s;\n' "$CHANNEL" >&3
    wait_for 10 "A's LISTEN to run" a_listens || { cat "$TMP/a.$n.out" "$log" >&2; return 2; }
    a_backend_pid || return 2

    # B: its first statement waits for the server A holds.
    start_b "$n"
    b_waits() { [ "$(waiting_clients)" -ge 1 ] 2>/dev/null; }
    wait_for 10 "B to wait for the server" b_waits || { cat "$TMP/b.$n.err" "$log" >&2; return 2; }

    # PgBouncer stops; A leaves (its Terminate and close reach PgBouncer's socket first); a
    # NOTIFY for A's channel makes A's backend, still listening, send a notification to
    # PgBouncer's server socket second; PgBouncer continues and reads them in that order.
    kill -STOP "$BOUNCER_PID" || return 2
    exec 3>&-
    A_FD_OPEN=0
    wait_for 10 "A's psql to exit" gone "$A_PID" || return 2
    wait "$A_PID" 2>/dev/null
    A_PID=
    psql_direct "NOTIFY $CHANNEL, 'for A, who left'" > /dev/null 2>&1 || { say "NOTIFY failed" >&2; return 2; }
    unread=unknown
    if [ "$HAVE_SS" = 1 ]; then
        notified() { [ "$(bouncer_unread)" -gt 0 ]; }
        wait_for 5 "the notification to reach PgBouncer's server socket" notified || return 2
        unread=$(bouncer_unread)
    else
        sleep 1
    fi
    # A's backend stops too, before PgBouncer continues: PgBouncer sends DISCARD ALL to it and
    # reads the notification alone (without the stop, the reset's reply sometimes arrives in
    # the same read as the notification on a loaded machine, and nothing goes wrong); once
    # PgBouncer's log shows it read the notification, the backend continues.
    kill -STOP "$a_pid" || return 2
    STOPPED_BACKEND=$a_pid
    kill -CONT "$BOUNCER_PID" || return 2
    notification_read() { [ "$(first_packet_after_mark "$log" 1)" = A ]; }
    wait_for 10 "PgBouncer to read the notification after sending DISCARD ALL" notification_read
    kill -CONT "$a_pid"
    STOPPED_BACKEND=
}

# SCENARIO=lost starts as reset does; B's script differs (b.sql above).
drive_lost() { drive_reset "$@"; }

# SCENARIO=lost, after B left: is the server kept `tested` with its backend aborted in a
# transaction, and does a new client wait for a server in vain? Counts LOST, keeps evidence.
observe_lost() {
    local n=$1 servers backend c_out c_rc=0
    sleep 1.5
    servers=$(admin "SHOW SERVERS" 2>&1)
    backend=$(psql_direct "SELECT pid || ' | ' || state || ' | ' || query FROM pg_stat_activity WHERE usename = 'repro'" 2>&1)
    c_out=$(timeout 5 "$PSQL" -X -At "$(bouncer_conn repro)" -c "SELECT 'C got a server', pg_backend_pid()" 2>&1 3>&-) || c_rc=$?
    local state
    state=$(printf '%s\n' "$servers" | awk -F'|' '$1 == "S" { print $5; exit }')
    say "attempt $n (lost): 1.5 s after B left, PgBouncer's server: ${state:-none}; its backend: ${backend:-none};" \
        "a new client C: $([ "$c_rc" = 124 ] && echo 'no server within 5 s' || echo "$c_out (exit $c_rc)")"
    if [ "$state" = tested ] && [[ "$backend" == *"idle in transaction (aborted) | DISCARD ALL" ]] && [ "$c_rc" = 124 ]; then
        LOST=$((LOST + 1))
        [ -n "$LOST_EVIDENCE" ] || LOST_EVIDENCE=$(
            say "== attempt $n: SHOW SERVERS 1.5 s after B left"
            printf '%s\n' "$servers"
            say "== attempt $n: pg_stat_activity (pid | state | query) of repro"
            printf '%s\n' "$backend"
            say "== attempt $n: C, a new client: SELECT 'C got a server': no reply within 5 s (timeout)"
        )
    fi
}

# SCENARIO=check: sets a_backend, unread and log_from.
drive_check() {
    local n=$1 log=$2
    # A: LISTENs through PgBouncer and leaves. In transaction pooling nothing resets the
    # server: it goes back to the pool still listening, to be checked before its next use
    # (server_check_delay = 0).
    timeout "$(left)" "$PSQL" -X -q -v ON_ERROR_STOP=1 "$(bouncer_conn repro)" -c "LISTEN $CHANNEL" \
        > "$TMP/a.$n.out" 2>&1 3>&- || { cat "$TMP/a.$n.out" >&2; return 2; }
    wait_for 10 "A's backend to be idle after LISTEN" a_listens || { cat "$log" >&2; return 2; }
    a_backend_pid || return 2

    # A's backend stops; B's first statement makes PgBouncer send the check query to it.
    kill -STOP "$a_pid" || return 2
    STOPPED_BACKEND=$a_pid
    log_from=$(($(wc -l < "$log") + 1))
    start_b "$n"
    check_sent() { tail -n +"$log_from" "$log" | grep -q "$MARK"; }
    wait_for 10 "PgBouncer to send the check query" check_sent || { cat "$TMP/b.$n.err" "$log" >&2; return 2; }
    # A NOTIFY for A's channel; the backend continues: it sends the notification at once (its
    # latch is set), then runs the check query, which sleeps 0.5 s before its reply.
    psql_direct "NOTIFY $CHANNEL, 'for A, who left'" > /dev/null 2>&1 || { say "NOTIFY failed" >&2; return 2; }
    kill -CONT "$a_pid"
    STOPPED_BACKEND=
    unread=
}

# One attempt, on a fresh PgBouncer: prints its verdict; returns 2 on a setup failure.
attempt() {
    local n=$1 log=$TMP/pgbouncer.$1.log
    "${AS[@]}" env HOME="$SRV" "$BOUNCER" "$CONF/pgbouncer.ini" > "$log" 2>&1 &
    BOUNCER_PID=$!
    bouncer_up() {
        kill -0 "$BOUNCER_PID" 2>/dev/null || return 0 # exited: stop waiting
        admin "SHOW VERSION" >/dev/null 2>&1
    }
    wait_for 10 "PgBouncer to accept connections" bouncer_up || { cat "$log" >&2; return 2; }
    if ! kill -0 "$BOUNCER_PID" 2>/dev/null; then
        say "repro.sh: PgBouncer exited at start; its log:" >&2
        cat "$log" >&2
        return 2
    fi

    local a_backend a_pid unread log_from
    "drive_$SCENARIO" "$n" "$log" || return 2

    wait_for 20 "B's psql to exit" gone "$B_PID" || return 2
    local b_rc=0
    wait "$B_PID" 2>/dev/null || b_rc=$?
    B_PID=
    [ "$SCENARIO" = lost ] && observe_lost "$n"
    kill -QUIT "$BOUNCER_PID" 2>/dev/null
    wait_for 10 "PgBouncer to exit" gone "$BOUNCER_PID" || return 2
    wait "$BOUNCER_PID" 2>/dev/null
    BOUNCER_PID=
    # The next attempt starts with no backend of this one.
    psql_direct "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'repro'" >/dev/null 2>&1
    no_backends() { [ "$(psql_direct "SELECT count(*) FROM pg_stat_activity WHERE usename = 'repro'" 2>/dev/null)" = 0 ]; }
    wait_for 10 "this attempt's backends to exit" no_backends || return 2

    # Did the attempt meet the condition? PgBouncer's log (verbose = 2) shows the packets it
    # read from the server after it sent its own query: the notification ('A') first means it
    # was read while that query's reply was still to come. And was the server handed on
    # (reuse_on_release) before that reply's ReadyForQuery ('Z')?
    local hit=no released_early
    [ "$(first_packet_after_mark "$log" "$log_from")" = A ] && hit=yes && WINDOW_HIT=$((WINDOW_HIT + 1))
    released_early=$(released_before_reply "$log" "$log_from")

    # B's first reply: line 2 of its output (line 1 is the \echo before statement 1).
    local first verdict got
    first=$(sed -n '2p' "$TMP/b.$n.out")
    got=${first:-an empty row}
    if [ "$(wc -l < "$TMP/b.$n.out")" -lt 2 ]; then
        verdict="no reply (psql exit $b_rc)"
        got=nothing
        OTHER=$((OTHER + 1))
    else
        case $first in
            "reply to statement 1|"*)
                if [ "$hit" = yes ]; then
                    verdict="in step"
                    IN_STEP=$((IN_STEP + 1))
                else
                    verdict="in step, but the notification was not read before the reply: no judgement"
                    MISSED=$((MISSED + 1))
                fi
                ;;
            *) verdict="OUT OF STEP"; OUT_OF_STEP=$((OUT_OF_STEP + 1)) ;;
        esac
    fi
    local unread_text=
    [ -n "$unread" ] && unread_text=" $unread bytes unread on PgBouncer's server socket at SIGCONT;"
    say "attempt $n: A's backend $a_backend;$unread_text" \
        "notification read before $QUERY_NAME's reply: $hit; server handed to B before that reply: ${released_early:-?};" \
        "B's statement 1 got: $got -> $verdict"
    if [ "$verdict" = "OUT OF STEP" ] && [ -z "$EVIDENCE" ]; then
        EVIDENCE=$(
            say "== attempt $n: B's psql output (each statement announced by \\echo; psql exit $b_rc)"
            cat "$TMP/b.$n.out"
            say "== attempt $n: B's psql stderr"
            cat "$TMP/b.$n.err"
            say "== attempt $n: PgBouncer's log from PgBouncer's query (verbose = 2; admin console lines left out)"
            tail -n +"$log_from" "$log" |
                grep -E "read pkt|resetting|P: checking|reuse_on_release|activate_client|closing because|FIXME|Assert" |
                grep -v "pgbouncer/repro" | awk -v mark="$MARK" 'index($0, mark) { p = 1 } p { print } p && /FIXME/ { exit }'
            grep -E "FIXME: transaction|Assert" "$log"
        )
    elif [ "$got" = nothing ]; then
        say "   B's output:" && sed 's/^/   | /' "$TMP/b.$n.out" "$TMP/b.$n.err"
        grep -E 'WARNING|FATAL|ERROR' "$log" | sed 's/^/   log| /'
    fi
    return 0
}

say "PgBouncer: $BOUNCER_VERSION ($BOUNCER)"
say "PostgreSQL: $PG_VERSION; $PSQL_VERSION"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uname -srm); servers run as $RUSER"
say "SCENARIO=$SCENARIO: $SETUP; $ATTEMPTS attempts"
for n in $(seq 1 "$ATTEMPTS"); do
    past_deadline && fail "timed out after ${TOTAL_TIMEOUT}s (TOTAL_TIMEOUT) before attempt $n"
    attempt "$n" || fail "attempt $n could not be set up (see above)"
done
say "$ATTEMPTS attempts: $OUT_OF_STEP out of step, $IN_STEP in step, $MISSED in step without the condition met," \
    "$OTHER without a reply; the notification was read before $QUERY_NAME's reply in $WINDOW_HIT of $ATTEMPTS"
if [ "$SCENARIO" = lost ]; then
    say "lost: a server kept tested, its backend aborted, a new client without a server in $LOST of $ATTEMPTS attempts"
    if [ "$LOST" -gt 0 ]; then
        say ""
        say "$LOST_EVIDENCE"
        say ""
        say "$EVIDENCE"
        exit 0
    fi
    [ "$WINDOW_HIT" -gt 0 ] || { say "repro.sh: no attempt met the condition: nothing to judge" >&2; exit 2; }
    exit 1
fi
if [ "$OUT_OF_STEP" -gt 0 ]; then
    say ""
    say "$EVIDENCE"
    exit 0
fi
if [ "$IN_STEP" -eq 0 ]; then
    say "repro.sh: no attempt met the condition (or every attempt lost its reply): nothing to judge" >&2
    exit 2
fi
exit 1
