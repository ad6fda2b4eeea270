#!/usr/bin/env bash
# Sweep: every shipped topology (topologies/*.yaml) x seeds x schedules, each run
# `pgchaos chaos NAME --seed S --schedule SCH --require-expected` with the topology's own limits,
# and a Markdown table of the runs (rewritten after every run, so an interrupted sweep leaves
# the rows it has). Exits 1 when a run has a pg.* violation, an unmet expectation or no
# verdict (an error), listing them; 2 on bad arguments.
#
#   scripts/sweep.sh [--seeds 1-5] [--schedules sequential,concurrent]
#                    [--time-limit DUR]   (concurrent runs only; said in the table)
#                    [--topologies a,b]   (default: every topologies/*.yaml)
#                    [--out docs/sweep.md] [--reports DIR] [--bin target/release/pgchaos]
#                    [--append]           (add to the rows already in --out's data file)
#                    [--render-only]      (rewrite --out from its data file, run nothing)
#
# Runs go one at a time, in the order: schedule, then seed, then topology (so a sweep cut
# short has every topology at the seeds it reached). Skipped, with the reason in the table:
# a scripted topology (`workload.script`) in the sequential schedule (scripted replicas run
# only concurrent), a docker-launched one when `docker info` fails.
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "sweep: $*" >&2; exit 2; }

cd "$(dirname "$0")/.."
seeds="1-5"; schedules="sequential,concurrent"; time_limit=""; only=""
out="docs/sweep.md"; reports=""; bin="./target/release/pgchaos"; append=0; render_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds="${2:?--seeds needs a value}"; shift 2 ;;
        --schedules) schedules="${2:?--schedules needs a value}"; shift 2 ;;
        --time-limit) time_limit="${2:?--time-limit needs a value}"; shift 2 ;;
        --topologies) only="${2:?--topologies needs a value}"; shift 2 ;;
        --out) out="${2:?--out needs a value}"; shift 2 ;;
        --reports) reports="${2:?--reports needs a value}"; shift 2 ;;
        --bin) bin="${2:?--bin needs a value}"; shift 2 ;;
        --append) append=1; shift ;;
        --render-only) render_only=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ "$render_only" = 1 ] || [ -x "$bin" ] || die "$bin is not an executable (just build, or --bin PATH)"
command -v jq >/dev/null || die "jq is needed to read results.json (Debian: apt-get install jq)"

# Seeds: `1-5` or `1,3,9`.
expand_seeds() {
    local part a b
    for part in ${1//,/ }; do
        if [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then
            a=${BASH_REMATCH[1]}; b=${BASH_REMATCH[2]}
            [ "$a" -le "$b" ] || die "--seeds $1: $part is empty"
            seq "$a" "$b"
        elif [[ "$part" =~ ^[0-9]+$ ]]; then
            echo "$part"
        else
            die "--seeds $1: expected e.g. 1-5 or 1,3,9"
        fi
    done
}
seed_list=$(expand_seeds "$seeds")
for s in ${schedules//,/ }; do
    case "$s" in sequential|concurrent) ;; *) die "--schedules: $s is not sequential or concurrent" ;; esac
done
if [ -n "$only" ]; then
    topos=${only//,/ }
    for t in $topos; do [ -f "topologies/$t.yaml" ] || die "--topologies: topologies/$t.yaml does not exist"; done
else
    topos=$(ls topologies/*.yaml | xargs -n1 basename | sed 's/\.yaml$//')
fi

tab=$'\t'
data="${out%.md}.tsv"
cmds="${out%.md}.commands"
machine="$(uname -srm), $(nproc) CPUs, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
if [ "$render_only" = 1 ]; then
    [ -f "$data" ] && [ -f "$cmds" ] || die "--render-only: $data or $cmds does not exist"
else
    stamp=$(date -u +%Y%m%dT%H%M%SZ)
    reports=${reports:-reports/sweep-$stamp}
    mkdir -p "$reports" "$(dirname "$out")"
    if [ "$append" != 1 ] || [ ! -f "$data" ]; then
        : >"$data"; : >"$cmds"
    fi
    command_line="scripts/sweep.sh --seeds $seeds --schedules $schedules${time_limit:+ --time-limit $time_limit}${only:+ --topologies $only}"
    printf '%s\t%s\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "nice -n 10 $command_line" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$cmds"
fi
docker_ok=1
docker info >/dev/null 2>&1 || docker_ok=0

# Why a topology does not run in a schedule, or nothing.
skip_reason() {
    local f="topologies/$1.yaml" sch=$2
    if [ "$sch" = sequential ] && grep -qE '^  script:' "$f"; then
        echo "scripted (workload.script): runs only concurrent"
    elif grep -qE '^launcher: *docker' "$f" && [ "$docker_ok" = 0 ]; then
        echo "launcher docker: the Docker engine is not reachable (docker info failed)"
    fi
}

# A row of the table from a run's results.json (tab-separated; see render).
row_from_results() {
    jq -r --arg sch "$1" --arg seed "$2" --arg exit "$3" --arg wall "$4" --arg tl "$5" '
      def pooler: if .versions.pooler then "\(.pooler) \(.versions.pooler)" else "no pooler" end;
      def unmet: [.invariants[] | select((.verdict == .expected) or (.expected == "either" and .verdict != "unknown") | not)
                  | "\(.name) \(.verdict) (expected \(.expected))"];
      [ .topology, $sch, $seed,
        "\(.cases)/\(.judged_cases)",
        ([.invariants[].unknown[]] | unique | length | tostring),
        ([.invariants[] | select((.name | startswith("pg.")) and .verdict == "violated" and .violating_cases > 0)
            | "\(.name) (\(.violating_cases) cases)"]
          + [.replay_violations[]? | "\(.invariant) (in a \(.phase) replay of case \(.case))"]
          | join(", ") | if . == "" then "0" else . end),
        (unmet | if length == 0 then "yes (\($tl))" else "NO: " + join(", ") + " (\($tl))" end),
        $exit, $wall,
        "PostgreSQL \(.versions.postgres), \(pooler)\(if (.version_drift | length) > 0 then " DRIFT: " + (.version_drift | join("; ")) else "" end)"
      ] | @tsv' "$6"
}

render() {
    {
        echo "# Sweep: every shipped topology, seeds and schedules"
        echo
        echo "Generated by \`just sweep\` (\`scripts/sweep.sh\`); the rows are \`${data}\`."
        echo
        echo "- **Last row:** $(date -u -r "$data" '+%Y-%m-%d %H:%M UTC')"
        echo "- **Machine:** $machine, shared with other work"
        echo "- **Commands** (started at; load average then, when recorded):"
        awk -F'\t' '{ printf "  - %s: `%s`%s\n", $1, $2, ($3 == "" ? "" : " (load " $3 ")") }' "$cmds"
        echo "- **Each run:**"
        echo "  \`pgchaos chaos NAME --seed S --schedule SCH --require-expected --quiet\`, the topology's"
        echo "  own \`run.cases\`, \`time_limit\` and shrinking; a \`--time-limit\` given to concurrent runs is in the expectations column."
        echo "- **Columns:** cases run/judged; unknown: cases where a search ran out of budget for some"
        echo "  invariant; pg.*: violated pg.* invariants (cases); expectations: every invariant's verdict"
        echo "  meets the topology's \`expect\`/\`expect_concurrent\` (time limit in brackets); exit: pgchaos's"
        echo "  exit status (0 pass, 1 mismatch, 2 error); wall: seconds, servers' start and stop included."
        echo
        echo "| topology | schedule | seed | cases run/judged | unknown | pg.* violations | expectations met | exit | wall s | versions |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
        # Sequential before concurrent, then by seed, then by topology.
        sort -t"$tab" -s -k2,2r -k3,3n -k1,1 "$data" |
            awk -F'\t' '{ printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; print "" }'
    } >"$out"
}

if [ "$render_only" = 1 ]; then
    render
    echo "sweep: $out rewritten from $data"
    exit 0
fi

failures=()
for sch in ${schedules//,/ }; do
    for seed in $seed_list; do
        for t in $topos; do
            reason=$(skip_reason "$t" "$sch")
            if [ -n "$reason" ]; then
                echo "sweep: skip $t $sch seed $seed: $reason"
                printf '%s\t%s\t%s\t-\t-\t-\tskipped: %s\t-\t-\t-\n' "$t" "$sch" "$seed" "$reason" >>"$data"
                render
                continue
            fi
            dir="$reports/$sch-s$seed"
            args=(chaos "$t" --seed "$seed" --schedule "$sch" --require-expected --quiet --out "$dir")
            tl="own limit"
            if [ "$sch" = concurrent ] && [ -n "$time_limit" ]; then
                args+=(--time-limit "$time_limit"); tl="--time-limit $time_limit"
            fi
            log="$dir/$t.log"
            mkdir -p "$dir"
            echo "sweep: $(date -u +%H:%M:%S) $t $sch seed $seed"
            t0=$(date +%s.%N)
            code=0
            nice -n 10 "$bin" "${args[@]}" >"$log" 2>&1 || code=$?
            wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
            res="$dir/$t/latest/results.json"
            if [ -f "$res" ] && [ "$(jq -r .seed "$res")" = "$seed" ]; then
                line=$(row_from_results "$sch" "$seed" "$code" "$wall" "$tl" "$res")
                printf '%s\n' "$line" >>"$data"
                pg=$(cut -f6 <<<"$line"); met=$(cut -f7 <<<"$line")
                [ "$pg" = 0 ] || failures+=("$t $sch seed $seed: pg.* $pg")
                [[ "$met" == yes* ]] || failures+=("$t $sch seed $seed: expectations ${met#NO: }")
            else
                why=$(grep -m1 'error' "$log" | tr '\t|' '  ' | cut -c1-200 || true)
                printf '%s\t%s\t%s\t-\t-\t-\tNO: no results.json (%s)\t%s\t%s\t-\n' \
                    "$t" "$sch" "$seed" "${why:-see $log}" "$code" "$wall" >>"$data"
                failures+=("$t $sch seed $seed: no verdict, exit $code (${why:-see $log})")
            fi
            echo "sweep:   exit $code in ${wall}s: $(tail -n1 "$data" | cut -f4-7 | tr '\t' ' ')"
            render
        done
    done
done

echo "sweep: table in $out, reports in $reports"
if [ ${#failures[@]} -gt 0 ]; then
    echo "sweep: ${#failures[@]} run(s) failed:" >&2
    printf '  %s\n' "${failures[@]}" >&2
    exit 1
fi
echo "sweep: every run met its expectations, no pg.* violation"
