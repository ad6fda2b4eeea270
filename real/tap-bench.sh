#!/bin/sh
# The tap's cost in throughput: pgbench (4 clients, from the PostgreSQL build pgchaos uses)
# through the tap and straight to the pooler (`pgchaos run --no-tap`), alternating arms in one
# sitting so the machine's drift hits both alike. Usage:
#   real/tap-bench.sh [TOPOLOGY] [SECONDS] [PAIRS]     (default: transaction-mode 10 3)
# Prints each arm's tps and the ratio of the medians; docs/tap.md records the figures.
set -eu
topo=${1:-transaction-mode}
secs=${2:-10}
pairs=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
bin=${PGCHAOS_BIN:-$here/../target/release/pgchaos}
pgbench=${PGBENCH:-/var/cache/pgchaos/postgres/18.6/bin/pgbench}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
script="$out/bench.sql"
printf '\\set k random(1, 1000000)\nSELECT pg_try_advisory_xact_lock(:k);\n' > "$script"
arm() {
    "$bin" run "$topo" --replicas 1 --out "$out/runs" --deadline "$((secs + 60))s" $1 -- \
        "$pgbench" -n -c 4 -j 2 -T "$secs" -f "$script" >/dev/null 2>&1
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out/runs/$topo/latest/replicas/r1/1.stdout")
    echo "${tps:?pgbench printed no tps}"
}
tap=""; direct=""
for i in $(seq "$pairs"); do
    a=$(arm ""); b=$(arm --no-tap)
    echo "pair $i: through the tap $a tps, straight to the pooler $b tps"
    tap="$tap $a"; direct="$direct $b"
done
median() { echo "$@" | tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
mt=$(median $tap); md=$(median $direct)
echo "median: tap $mt tps, no tap $md tps; tap/no-tap = $(echo "$mt $md" | awk '{printf "%.3f", $1/$2}')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ)"
