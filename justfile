# pgchaos daily driver. A topology NAME means topologies/NAME.yaml.
set shell := ["bash", "-euo", "pipefail", "-c"]

bin := "./target/release/pgchaos"

# The source mirror PgBouncer is built from (docs/provisioning.md): PGCHAOS_SOURCE_MIRROR when
# set, else ../shared/pgbouncer beside the repository when it exists (this project's machines
# and CI have it), else none. Exported: every recipe that provisions sees it.
shared_mirror := justfile_directory() / ".." / "shared" / "pgbouncer"
export PGCHAOS_SOURCE_MIRROR := if env("PGCHAOS_SOURCE_MIRROR", "") != "" { absolute_path(env("PGCHAOS_SOURCE_MIRROR")) } else if path_exists(shared_mirror) == "true" { shared_mirror } else { "" }

# List the recipes.
default:
    @just --list

# Build the harness (release: the runner drives thousands of round trips a second).
build:
    cargo build --release --quiet

# Obtain PostgreSQL and PgBouncer for every topology (or the ones named).
provision *NAMES: build
    {{bin}} provision {{NAMES}}

# Start a topology and stay up until Ctrl-C (add --once to check and stop, --json for JSON).
up NAME *ARGS: build
    {{bin}} up {{NAME}} {{ARGS}}

# Validate topology files.
check *NAMES: build
    {{bin}} check {{NAMES}}

# Run the chaos engine on a topology: random cases, invariants, minimal repros, a report
# (report.md, report.html with a timeline of each minimal case; add --junit PATH for JUnit XML).
chaos NAME *ARGS: build
    {{bin}} chaos {{NAME}} {{ARGS}}

# Replay a minimal case file (add --times 10), or: just reproduce --seed S NAME
reproduce *ARGS: build
    {{bin}} reproduce {{ARGS}}

# Re-check a run's history with the current checker (a run directory, or a topology's latest).
analyze RUN *ARGS: build
    {{bin}} analyze {{RUN}} {{ARGS}}

# Op rate of the concurrent workers (observation off, sampling on) beside pgbench's.
bench NAME *ARGS: build
    {{bin}} bench {{NAME}} {{ARGS}}

# Print a run's history in words (add --case N, or --json).
history RUN *ARGS: build
    {{bin}} history {{RUN}} {{ARGS}}

# Compare the latest runs of topologies (or run directories); add --markdown, or --html PATH.
compare *NAMES: build
    {{bin}} compare {{NAMES}}

# Write a topology from a pgbouncer.ini's pooling settings (add --name, --out, --force).
import INI *ARGS: build
    {{bin}} import {{INI}} {{ARGS}}

# Put `pgchaos` on PATH (~/.cargo/bin, or $CARGO_HOME/bin): the binary embeds the shipped
# profiles and topologies, so `pgchaos init` and `pgchaos merge` work anywhere.
install:
    cargo install --path harness --locked

# Set a repository up for the gate (profiles of its tools, its imported pgbouncer.ini, a matrix
# script, a CI workflow): just init DIR --from pgbouncer.ini
init *ARGS: build
    {{bin}} init {{ARGS}}

# Merge matrix partitions (`matrix --partition K/N --dir D`) into the whole: just merge --out OUT D1 D2 ...
merge *ARGS: build
    {{bin}} merge {{ARGS}}

# Client profiles (profiles/) on topologies: the compatibility matrix (add --profiles,
# --topologies, --seeds 1-3, --replicas N, --junit PATH, --accept CLASS,...). A gate: exits 1
# when a cell shows an unsafe class its profile does not expect (nothing written: safe).
matrix *ARGS: build
    {{bin}} matrix {{ARGS}}

# Options: --seeds 1-2, --schedules concurrent, --time-limit 90s (concurrent runs only),
# --topologies a,b, --append, --render-only (scripts/sweep.sh --help). Exits 1 on a pg.*
# violation, an unmet expectation or a run without a verdict, listing them.
# Every shipped topology x seeds (default 1-5) x both schedules, --require-expected: docs/sweep.md.
sweep *ARGS: build
    nice -n 10 scripts/sweep.sh {{ARGS}}

# Regenerate the README's matrix: every profile on the five topologies, seeds 1-3.
readme-matrix: build
    {{bin}} matrix --jobs 3 --require-expected --update-readme README.md

# Rewrite docs/design.md's module table from harness/src's module docs (the docs test checks it).
docs:
    PGCHAOS_WRITE_DOCS=1 cargo test --release --test docs the_module_table_is_the_source_trees

# Build the container images of topologies' servers from the provisioned binaries (no pull).
images *NAMES: build
    {{bin}} images {{NAMES}}

# Write compose/NAME (or --out DIR): a topology's servers as containers, for psql and you.
compose NAME *ARGS: build
    {{bin}} compose {{NAME}} {{ARGS}}

# The Docker tests: images, the shipped compose directories, launcher docker's verdicts and
# leftovers (harness/tests/docker.rs), the fault scenarios in containers (scenarios.rs, docker_*).
# Needs a running Docker engine and docker-compose; fails, never skips, without them.
test-docker: build
    #!/usr/bin/env bash
    set -euo pipefail
    if ! docker info >/dev/null 2>&1; then
        echo "test-docker: the Docker engine is not reachable (docker info failed): start it, or run as a user who may use it" >&2
        exit 1
    fi
    if ! command -v docker-compose >/dev/null 2>&1; then
        echo "test-docker: docker-compose is not on PATH (Debian: apt-get install docker-compose)" >&2
        exit 1
    fi
    {{bin}} provision --strict-versions transaction-mode session-mode failover session-mode-faults transaction-mode-faults
    export PGCHAOS_STRICT_VERSIONS=1
    cargo test --release --test docker -- --include-ignored --test-threads 1
    cargo test --release --test scenarios -- --ignored docker_ --test-threads 1

# The test suite: unit tests, then real-server tests (provisions servers and chromium first).
# Versions are strict: a server other than the declared version fails (the tests of drift
# itself opt out); PgBouncer 1.25.2 comes from the source mirror above.
test: build browser
    {{bin}} provision --strict-versions
    PGCHAOS_STRICT_VERSIONS=1 cargo test --release --workspace

# The browser test (harness/tests/browser.rs) renders report.html in Debian's chromium. It is
# provisioned as `pgchaos provision` provisions PgBouncer's build dependencies: installed
# when missing and running as root, otherwise a failure that prints the command to run.
# Install chromium for the browser test (as root), or print the command to run.
browser:
    #!/usr/bin/env bash
    set -euo pipefail
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        exit 0
    fi
    cmd="apt-get install -y chromium"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "the browser test needs chromium, which is not on PATH: install it with the system's package manager" >&2
        exit 1
    fi
    if [ "$(id -u)" != 0 ]; then
        printf 'the browser test needs chromium, which is not installed\nrun as root:\n  %s\n' "$cmd" >&2
        exit 1
    fi
    echo "pgchaos: installing chromium for the browser test: $cmd"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y chromium; then
        echo "pgchaos: apt-get install failed; running apt-get update and retrying"
        apt-get update
        apt-get install -y chromium
    fi

# Formatting and lints, as CI wants them.
lint:
    cargo fmt --all -- --check
    cargo clippy --release --workspace --all-targets -- -D warnings
