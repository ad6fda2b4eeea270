#!/bin/bash
# pgpool-lab.sh: the hand-test lab behind docs/pgpool.md, as one script.
#
# PostgreSQL 18.6 (primary, optional streaming standby) + pgpool-II 4.3.5 from Debian 12's
# binary packages, all on 127.0.0.1 and Unix sockets in DIR, run as an unprivileged user.
# Nothing is installed system-wide: the .debs are unpacked into DIR/root.
#
#   docs/pgpool-lab.sh DIR provision          download + unpack pgpool2 4.3.5 and its libraries
#   docs/pgpool-lab.sh DIR init [standby]     initdb a primary (+ a standby by pg_basebackup -R),
#                                             role alice/alicepw, database app, pgpool config files
#   docs/pgpool-lab.sh DIR start | stop       servers and pgpool (pgpool: -n -D, fast stop)
#   docs/pgpool-lab.sh DIR set KEY=VALUE...   edit pgpool.conf (restart pgpool to apply)
#   docs/pgpool-lab.sh DIR env                print shell helpers: eval "$(docs/pgpool-lab.sh DIR env)"
#                                             then C (client via pgpool), O (primary), S (standby), PCP
#   docs/pgpool-lab.sh DIR clean              stop everything, kill pgpool's process group, remove
#                                             its leaked SysV objects, delete DIR
#
# Environment: LAB_USER (default pgchaos; must exist), PGBIN (default the project's 18.6 cache),
# PG_PORT 35432, STANDBY_PORT 35433, POOL_PORT 39999, PCP_PORT 39898.
set -euo pipefail

DIR=${1:?usage: pgpool-lab.sh DIR provision|init [standby]|start|stop|set K=V...|env|clean}
CMD=${2:?missing command}
shift 2
LAB_USER=${LAB_USER:-pgchaos}
PGBIN=${PGBIN:-/var/cache/pgchaos/postgres/18.6/bin}
PGLIB=$(dirname "$PGBIN")/lib
PG_PORT=${PG_PORT:-35432}
STANDBY_PORT=${STANDBY_PORT:-35433}
POOL_PORT=${POOL_PORT:-39999}
PCP_PORT=${PCP_PORT:-39898}
ROOT=$DIR/root
SOCK=$DIR/sock
POOLDIR=$DIR/pgpool
LIBS=$ROOT/usr/lib:$ROOT/usr/lib/x86_64-linux-gnu
CONF="-f $POOLDIR/pgpool.conf -F $POOLDIR/pcp.conf -a $POOLDIR/pool_hba.conf"

die() { echo "pgpool-lab: $*" >&2; exit 1; }
as_user() { runuser -u "$LAB_USER" -- "$@"; }
main_pid() { [ -f "$POOLDIR/pgpool.pid" ] && tr -d '\0\n' < "$POOLDIR/pgpool.pid" || true; }

need_user() { id -u "$LAB_USER" >/dev/null 2>&1 || die "user $LAB_USER does not exist (set LAB_USER)"; }
need_port_free() {
	if ss -ltn "sport = :$1" | grep -q LISTEN; then die "port $1 is in use"; fi
}

provision() {
	mkdir -p "$DIR/debs" "$ROOT"
	(cd "$DIR/debs" && apt-get download pgpool2=4.3.5-1+deb12u1 libpgpool2=4.3.5-1+deb12u1 \
		libmemcached11 libhashkit2 2>&1 | grep -v unsandboxed) || die "apt-get download failed (apt-get update first?)"
	for f in "$DIR"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
	local missing
	missing=$(LD_LIBRARY_PATH=$LIBS ldd "$ROOT/usr/sbin/pgpool" "$ROOT/usr/sbin/pcp_proc_info" | grep 'not found' || true)
	[ -z "$missing" ] || die "libraries missing: $missing"
	LD_LIBRARY_PATH=$LIBS "$ROOT/usr/sbin/pgpool" --version 2>&1 # stderr: pgpool-II version 4.3.5 (tamahomeboshi)
}

write_pgpool_conf() {
	local standby=$1
	mkdir -p "$POOLDIR/oiddir"
	cat > "$POOLDIR/pgpool.conf" <<EOF
backend_clustering_mode = 'streaming_replication'
listen_addresses = '127.0.0.1'
port = $POOL_PORT
socket_dir = '$SOCK'
pcp_listen_addresses = '127.0.0.1'
pcp_port = $PCP_PORT
pcp_socket_dir = '$SOCK'
wd_ipc_socket_dir = '$SOCK'
pid_file_name = '$POOLDIR/pgpool.pid'
logdir = '$POOLDIR'
memqcache_oiddir = '$POOLDIR/oiddir'
log_destination = 'stderr'
log_line_prefix = '%m: %a pid %p: '
log_connections = on
log_per_node_statement = on
log_min_messages = info
backend_hostname0 = '127.0.0.1'
backend_port0 = $PG_PORT
backend_weight0 = 1
backend_flag0 = 'ALLOW_TO_FAILOVER'
backend_data_directory0 = '$DIR/primary'
backend_application_name0 = 'node0'
enable_pool_hba = on
pool_passwd = 'pool_passwd'
num_init_children = 2
max_pool = 1
child_life_time = 300
connection_life_time = 0
client_idle_limit = 0
reset_query_list = 'ABORT; DISCARD ALL'
load_balance_mode = on
read_only_function_list = ''
write_function_list = ''
statement_level_load_balance = off
sr_check_period = 10
sr_check_user = 'alice'
sr_check_password = ''
health_check_period = 0
failover_on_backend_shutdown = off
failover_on_backend_error = off
failover_command = ''
EOF
	if [ "$standby" = standby ]; then
		cat >> "$POOLDIR/pgpool.conf" <<EOF
backend_hostname1 = '127.0.0.1'
backend_port1 = $STANDBY_PORT
backend_weight1 = 1
backend_flag1 = 'ALLOW_TO_FAILOVER'
backend_data_directory1 = '$DIR/standby'
backend_application_name1 = 'walreceiver'
EOF
	fi
	printf 'local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n' > "$POOLDIR/pool_hba.conf"
	echo 'alice:TEXTalicepw' > "$POOLDIR/pool_passwd"
	echo "pcpadmin:$(LD_LIBRARY_PATH=$LIBS "$ROOT/usr/sbin/pg_md5" pcppw)" > "$POOLDIR/pcp.conf"
	printf '127.0.0.1:%s:pcpadmin:pcppw\n' "$PCP_PORT" > "$DIR/pcppass"
	chmod 600 "$POOLDIR/pool_passwd" "$POOLDIR/pcp.conf" "$DIR/pcppass"
}

init() {
	need_user
	[ -x "$ROOT/usr/sbin/pgpool" ] || die "run provision first"
	[ ! -e "$DIR/primary" ] || die "$DIR/primary exists (clean first)"
	local standby=${1:-}
	mkdir -p "$SOCK" "$DIR/log" "$POOLDIR"
	echo secret > "$DIR/pwfile"
	chown -R "$LAB_USER:" "$DIR"
	chmod 755 "$DIR"
	as_user "$PGBIN/initdb" --no-sync -D "$DIR/primary" -U "$LAB_USER" --auth-local=trust \
		--auth-host=scram-sha-256 --pwfile="$DIR/pwfile" > "$DIR/log/initdb.log"
	cat >> "$DIR/primary/postgresql.conf" <<EOF
port = $PG_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
dynamic_shared_memory_type = mmap
log_connections = on
log_disconnections = on
log_line_prefix = '%m [%p] %u@%d '
EOF
	need_port_free "$PG_PORT"
	as_user "$PGBIN/pg_ctl" -D "$DIR/primary" -l "$DIR/log/primary.log" -w -t 30 start >/dev/null
	"$PGBIN/psql" -X -q -h "$SOCK" -p "$PG_PORT" -U "$LAB_USER" -d postgres \
		-c "create role alice login password 'alicepw'" -c "grant pg_monitor to alice" \
		-c "create database app owner alice"
	if [ "$standby" = standby ]; then
		as_user "$PGBIN/pg_basebackup" -h "$SOCK" -p "$PG_PORT" -U "$LAB_USER" -D "$DIR/standby" -R -X stream -c fast --no-sync
		sed -i "s/^port = $PG_PORT/port = $STANDBY_PORT/" "$DIR/standby/postgresql.conf"
	fi
	as_user "$PGBIN/pg_ctl" -D "$DIR/primary" -w -t 30 stop >/dev/null
	write_pgpool_conf "$standby"
	chown -R "$LAB_USER:" "$DIR"
}

start() {
	need_user
	need_port_free "$PG_PORT"
	as_user "$PGBIN/pg_ctl" -D "$DIR/primary" -l "$DIR/log/primary.log" -w -t 30 start >/dev/null
	if [ -d "$DIR/standby" ]; then
		need_port_free "$STANDBY_PORT"
		# the tarball's libpqwalreceiver.so has RUNPATH /opt/postgresql/lib: without this it loads
		# the system libpq 15, which rejects pg_basebackup 18's conninfo (sslnegotiation)
		as_user env LD_LIBRARY_PATH="$PGLIB" "$PGBIN/pg_ctl" -D "$DIR/standby" -l "$DIR/log/standby.log" -w -t 30 start >/dev/null
	fi
	need_port_free "$POOL_PORT"
	need_port_free "$PCP_PORT"
	# -n: foreground; -D: discard pgpool_status (else a once-detached node stays detached);
	# setsid: own process group, so clean can kill children that outlive a killed main
	as_user env LD_LIBRARY_PATH="$LIBS" setsid "$ROOT/usr/sbin/pgpool" -n -D $CONF \
		>> "$DIR/log/pgpool.log" 2>&1 < /dev/null &
	local i
	for i in $(seq 1 100); do
		# database postgres: pgpool never caches it, so the probe leaves no backend behind
		if PGCONNECT_TIMEOUT=2 PGPASSWORD=alicepw "$PGBIN/psql" -X -qAt -h 127.0.0.1 -p "$POOL_PORT" \
			-U alice -d postgres -c 'select 1' >/dev/null 2>&1; then
			echo "pgpool ready (main pid $(main_pid))"
			return 0
		fi
		sleep 0.1
	done
	tail -5 "$DIR/log/pgpool.log" >&2
	die "pgpool not ready after 10 s"
}

stop_pgpool() {
	local pid i
	pid=$(main_pid)
	[ -n "$pid" ] || return 0
	kill -INT "$pid" 2>/dev/null || true
	for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	# a SIGKILLed main leaves its children serving: stop the whole process group, gently first
	# (the PCP process then removes its own 1-byte segment), then for good
	kill -INT -- "-$pid" 2>/dev/null || true
	for i in $(seq 1 30); do pgrep -g "$pid" >/dev/null || break; sleep 0.1; done
	kill -KILL -- "-$pid" 2>/dev/null || true
	# a SIGKILLed main also leaks its 134 MB SysV segment (creator = main) and its semaphore
	# set (9 semaphores, last operated on by main or its children): remove them
	ipcs -m -p | awk -v p="$pid" '$3 == p { print $1 }' | xargs -r -n1 ipcrm -m 2>/dev/null || true
	local sem
	for sem in $(ipcs -s | awk -v u="$LAB_USER" '$3 == u { print $2 }'); do
		if ipcs -s -i "$sem" | awk -v p="$pid" '$5 == p { f = 1 } END { exit !f }'; then ipcrm -s "$sem" || true; fi
	done
	rm -f "$POOLDIR/pgpool.pid"
}

stop() {
	stop_pgpool
	local d
	for d in standby primary; do
		[ -f "$DIR/$d/postmaster.pid" ] && as_user "$PGBIN/pg_ctl" -D "$DIR/$d" -m fast -w -t 30 stop >/dev/null || true
	done
}

setconf() {
	local kv k v f=$POOLDIR/pgpool.conf
	for kv in "$@"; do
		k=${kv%%=*}
		v=${kv#*=}
		if grep -q "^$k = " "$f"; then sed -i "s|^$k = .*|$k = $v|" "$f"; else echo "$k = $v" >> "$f"; fi
	done
}

env_helpers() {
	cat <<EOF
export PGCONNECT_TIMEOUT=5 PCPPASSFILE=$DIR/pcppass LD_LIBRARY_PATH=$LIBS
C() { PGPASSWORD=alicepw $PGBIN/psql -X -e -h 127.0.0.1 -p $POOL_PORT -U alice -d app "\$@"; }
O() { $PGBIN/psql -X -h $SOCK -p $PG_PORT -U $LAB_USER -d postgres "\$@"; }
S() { $PGBIN/psql -X -h $SOCK -p $STANDBY_PORT -U $LAB_USER -d postgres "\$@"; }
PCP() { local t=\$1; shift; $ROOT/usr/sbin/pcp_\$t -h 127.0.0.1 -p $PCP_PORT -U pcpadmin -w "\$@"; }
LOCKS="select l.pid, a.backend_start, l.classid, l.objid, l.objsubid, l.mode, l.granted, a.state from pg_locks l join pg_stat_activity a using (pid) where l.locktype = 'advisory' order by 1"
EOF
}

case $CMD in
provision) provision ;;
init) init "${1:-}" ;;
start) start ;;
stop) stop ;;
set) setconf "$@" ;;
env) env_helpers ;;
clean)
	stop
	rm -rf "$DIR"
	;;
*) die "unknown command $CMD" ;;
esac
