//! Schema tests: every malformed fixture with its message, line and column; the shipped
//! topologies; defaults, forms and limits.

use super::convert::fmt_duration;
use super::*;
use crate::pooler::PoolMode;
use crate::pooler::pgbouncer::PgbouncerSpec;
use crate::pooler::pgbouncer::settings::{PGBOUNCER_HARNESS_SETTINGS, PGBOUNCER_SETTINGS};
use crate::vocab::Tier;

/// The topology's PgBouncer configuration, if it has one.
fn bouncer(t: &Topology) -> Option<&PgbouncerSpec> {
    t.pooler.as_ref().and_then(|p| p.config::<PgbouncerSpec>())
}

fn catalog() -> &'static Catalog<'static> {
    static CATALOG: std::sync::LazyLock<Catalog<'static>> =
        std::sync::LazyLock::new(crate::catalog);
    &CATALOG
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bad");
const TOPOLOGIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../topologies");

fn parse(src: &str) -> Result<Topology, TopologyError> {
    Topology::parse(src, Path::new("t.yaml"), catalog())
}

fn ok(src: &str) -> Topology {
    parse(src).unwrap_or_else(|e| panic!("expected valid topology, got:\n{e}"))
}

fn err(src: &str) -> TopologyError {
    match parse(src) {
        Ok(t) => panic!("expected an error, parsed {t:?}"),
        Err(e) => e,
    }
}

const MINIMAL: &str = "name: minimal\npostgres:\n  version: \"18.6\"\n";

fn load_bad(file: &str) -> TopologyError {
    let path = Path::new(FIXTURES).join(file);
    match Topology::load(&path, catalog()) {
        Ok(t) => panic!("{file}: expected an error, parsed {t:?}"),
        Err(e) => e,
    }
}

fn check_bad(file: &str, line: usize, column: usize, needle: &str) {
    let e = load_bad(file);
    assert!(!e.is_io(), "{file}: {e}");
    assert_eq!(
        (e.line(), e.column()),
        (Some(line), Some(column)),
        "{file}: wrong position in:\n{e}"
    );
    assert!(
        e.message().contains(needle),
        "{file}: message lacks {needle:?}:\n{e}"
    );
    let shown = e.to_string();
    let head = format!("{}:{line}:{column}: ", e.path().display());
    assert!(
        shown.starts_with(&head),
        "{file}: display should start with {head:?}:\n{shown}"
    );
    assert_eq!(e.message(), e.message().trim(), "{file}");
    assert!(
        e.message().starts_with(|c: char| !c.is_uppercase()),
        "{file}: messages are lower-case: {}",
        e.message()
    );
    if file != "empty.yaml" {
        assert!(
            shown.lines().nth(2).is_some_and(|l| l.contains('^')),
            "{file}: no caret line:\n{shown}"
        );
    }
}

/// One test per bad fixture (file, line:column, a substring of the message); also lists
/// the files so that a fixture without a test is noticed.
macro_rules! bad_fixtures {
    ($($test:ident => $file:literal, $line:literal:$col:literal, $needle:literal;)*) => {
        const BAD_FILES: &[&str] = &[$($file),*];
        $(
            #[test]
            fn $test() {
                check_bad($file, $line, $col, $needle);
            }
        )*
    };
}

bad_fixtures! {
    fixture_bad_duration => "bad-duration.yaml", 7:15, "`run.time_limit` is not a duration: `1 minute`";
    fixture_bad_name => "bad-name.yaml", 2:7, "invalid topology name `Transaction_Mode`";
    fixture_bad_pool_mode => "bad-pool-mode.yaml", 7:14, "unknown pool_mode `transction`";
    fixture_comments_only => "comments-only.yaml", 1:1, "empty topology";
    fixture_direct_clients_exceed_max_connections => "direct-clients-exceed-max-connections.yaml", 6:22, "12 direct client connections do not fit: PostgreSQL has room for 9";
    fixture_duplicate_advisory_key => "duplicate-advisory-key.yaml", 6:43, "duplicate key (1,612001) in `workload.keys`";
    fixture_duplicate_key => "duplicate-key.yaml", 9:3, "duplicate key `pool_mode`";
    fixture_duration_without_unit => "duration-without-unit.yaml", 6:17, "`workload.lock_timeout` needs a unit";
    fixture_empty => "empty.yaml", 1:1, "empty topology";
    fixture_harness_pgbouncer_setting => "harness-pgbouncer-setting.yaml", 8:15, "`listen_port` cannot be set in `pgbouncer.settings`";
    fixture_lock_timeout_too_long => "lock-timeout-too-long.yaml", 6:17, "`workload.lock_timeout` must be at most 1m, found 2m";
    fixture_max_client_conn_below_clients => "max-client-conn-below-clients.yaml", 8:20, "`pgbouncer.max_client_conn` (6) is below `workload.clients` (8)";
    fixture_missing_postgres => "missing-postgres.yaml", 2:1, "missing required key `postgres` at the top level";
    fixture_no_lock_op => "no-lock-op.yaml", 7:5, "leaves no lock op with a weight above 0";
    fixture_pg_invariant_in_expect => "pg-invariant-in-expect.yaml", 7:3, "pg.* invariants must always hold";
    fixture_pgbouncer_setting_has_top_level_key => "pgbouncer-setting-has-top-level-key.yaml", 9:5, "`pool_mode` cannot be set in `pgbouncer.settings`";
    fixture_pgbouncer_setting_too_new => "pgbouncer-setting-too-new.yaml", 9:5, "`transaction_timeout` needs pgbouncer 1.25 or newer";
    fixture_pgbouncer_version_two_parts => "pgbouncer-version-two-parts.yaml", 6:12, "invalid pgbouncer version `1.25`";
    fixture_pool_exceeds_max_connections => "pool-exceeds-max-connections.yaml", 10:22, "the pool needs 35 server connections but PostgreSQL has room for 33";
    fixture_pool_size_zero => "pool-size-zero.yaml", 8:22, "`pgbouncer.default_pool_size` must be an integer from 1 to 10000, found 0";
    fixture_postgres_harness_setting => "postgres-harness-setting.yaml", 7:5, "`port` cannot be set in a topology";
    fixture_postgres_version_major_only => "postgres-version-major-only.yaml", 4:12, "invalid postgres version `18`: expected MAJOR.MINOR";
    fixture_session_op_with_xact_api => "session-op-with-xact-api.yaml", 7:24, "`try_lock` is a session-level op, but `workload.api` is `xact`";
    fixture_steps_reversed => "steps-reversed.yaml", 6:10, "`workload.steps` range `40..1` is empty";
    fixture_tab_indentation => "tab-indentation.yaml", 4:1, "tabs";
    fixture_unknown_invariant => "unknown-invariant.yaml", 6:3, "unknown invariant `app.mutual_exlusion`";
    fixture_unknown_key_in_section => "unknown-key-in-section.yaml", 8:3, "unknown key `server_lifetime` in `pgbouncer`";
    fixture_unknown_op => "unknown-op.yaml", 8:5, "unknown op `tri_lock`";
    fixture_unknown_pgbouncer_setting => "unknown-pgbouncer-setting.yaml", 10:5, "unknown pgbouncer setting `server_lifetme`";
    fixture_unknown_top_level_key => "unknown-top-level-key.yaml", 5:1, "unknown key `pgbouncr` at the top level";
    fixture_wrong_type => "wrong-type.yaml", 6:12, "`workload.clients` must be an integer from 1 to 64, found `four`";
    fixture_statement_mode => "statement-mode.yaml", 6:14, "`pool_mode: statement` is not modelled yet";
    fixture_pgbouncer_timeout_not_seconds => "pgbouncer-timeout-not-seconds.yaml", 8:22, "`pgbouncer.settings.server_lifetime` is not a duration: `soon`";
    fixture_postgres_timeout_not_a_duration => "postgres-timeout-not-a-duration.yaml", 5:27, "`postgres.settings.idle_session_timeout` is not a duration: `500 parsecs`";
    fixture_postgres_lock_timeout => "postgres-lock-timeout.yaml", 5:5, "`lock_timeout` cannot be set in `postgres.settings`";
}

#[test]
fn timeouts_are_accepted_and_kept_by_what_they_do() {
    use crate::vocab::timeout::Effect;
    let t = ok(&format!(
        "{MINIMAL}  settings:\n    idle_session_timeout: 250ms\n    statement_timeout: 2s\n    idle_in_transaction_session_timeout: 0\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n  settings:\n    server_lifetime: 1\n    server_idle_timeout: 0.5\n"
    ));
    let to = t.timeouts();
    assert_eq!(to.get(&Effect::RetireOld), Some(&1000));
    assert_eq!(to.get(&Effect::RetireIdle), Some(&500));
    assert_eq!(to.get(&Effect::EndIdleSession), Some(&250));
    assert_eq!(to.get(&Effect::CancelLongStatement), Some(&2000));
    // 0 is off: not a timeout at all.
    assert!(!to.contains_key(&Effect::EndIdleInTransaction));
    assert_eq!(to.len(), 4);
    assert!(ok(MINIMAL).timeouts().is_empty());
}

#[test]
fn every_bad_fixture_has_a_test() {
    let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = BAD_FILES.iter().map(|f| f.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
    assert!(listed.len() >= 14);
}

#[test]
fn hints_say_what_is_valid() {
    let e = load_bad("bad-pool-mode.yaml");
    assert!(
        e.hints().iter().any(|h| h == "did you mean `transaction`?"),
        "{e}"
    );
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("session, transaction, statement"))
    );

    let e = load_bad("unknown-top-level-key.yaml");
    assert!(
        e.hints().iter().any(|h| h == "did you mean `pgbouncer`?"),
        "{e}"
    );
    assert!(
        e.hints().iter().any(|h| h
            .contains("name, description, launcher, external, postgres, app_pool")
            && h.ends_with(", pgbouncer, pgpool")),
        "{e}"
    );

    let e = load_bad("unknown-pgbouncer-setting.yaml");
    assert!(
        e.hints().iter().any(|h| h.contains("`server_lifetime`")),
        "{e}"
    );

    let e = load_bad("unknown-key-in-section.yaml");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("under `pgbouncer.settings`")),
        "{e}"
    );

    let e = load_bad("pgbouncer-setting-has-top-level-key.yaml");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("use the top-level key")),
        "{e}"
    );

    let e = load_bad("unknown-op.yaml");
    assert!(e.hints().iter().any(|h| h.contains("`try_lock`")), "{e}");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.starts_with("valid ops: try_lock, ping,"))
    );

    let e = load_bad("unknown-invariant.yaml");
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("`app.mutual_exclusion`")),
        "{e}"
    );

    let e = load_bad("tab-indentation.yaml");
    assert!(
        e.hints().iter().any(|h| h.contains("spaces, not tabs")),
        "{e}"
    );
}

#[test]
fn display_is_path_position_message_snippet_caret_hints() {
    let e = load_bad("bad-pool-mode.yaml");
    let path = Path::new(FIXTURES).join("bad-pool-mode.yaml");
    let expected = format!(
        "{}:7:14: unknown pool_mode `transction`\n\
         7 |   pool_mode: transction\n  \
         |              ^^^^^^^^^^\n\
         hint: did you mean `transaction`?\n\
         hint: valid pool modes: session, transaction, statement",
        path.display()
    );
    assert_eq!(e.to_string(), expected);
}

#[test]
fn tabs_are_expanded_in_snippets() {
    let shown = load_bad("tab-indentation.yaml").to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[1], "4 |     version: \"18.6\"");
    assert_eq!(lines[2], "  | ^");
}

#[test]
fn io_errors_name_the_file() {
    let e = Topology::load(Path::new("/nonexistent/dir/t.yaml"), catalog()).unwrap_err();
    assert!(e.is_io());
    assert_eq!(e.line(), None);
    assert!(
        e.to_string()
            .starts_with("/nonexistent/dir/t.yaml: cannot read: "),
        "{e}"
    );
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn shipped_topologies_parse() {
    let mut seen = Vec::new();
    let mut concurrent = Vec::new();
    for entry in std::fs::read_dir(TOPOLOGIES).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let t = Topology::load(&path, catalog()).unwrap_or_else(|e| panic!("{e}"));
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        assert_eq!(t.name, stem, "name should match the file name");
        assert!(t.description.is_some(), "{stem}: describe it");
        assert_eq!(t.source, path);
        if t.run.schedule == Schedule::Concurrent {
            // Scripted experiments: a fixed seed, few cases, every replica scripted.
            assert!(
                !t.workload.script.is_empty(),
                "{stem}: concurrent topologies are scripted"
            );
            assert!(t.run.seed.is_some(), "{stem}: experiments pin their seed");
            concurrent.push(stem);
            continue;
        }
        assert_eq!(t.workload.clients, 4, "{stem}");
        assert!(
            t.workload
                .keys
                .starts_with(&[Key::Big(4242424242), Key::Big(612001)])
        );
        // A topology for containers runs a quarter of the cases in twice the time: each host
        // fault is the engine's kill and start (about 2 s, against milliseconds native).
        let (cases, limit) = match t.launcher {
            // Partitions and freezes held 3 s each: half as many cases again, in 3 minutes.
            LauncherKind::Docker if t.name == "transaction-mode-partitions" => (32, 180),
            LauncherKind::Docker => (64, 120),
            _ => (256, 60),
        };
        assert_eq!(t.run.cases, cases, "{stem}");
        assert_eq!(t.run.seed, None, "{stem}");
        assert_eq!(t.run.time_limit, Duration::from_secs(limit), "{stem}");
        if let Some(b) = bouncer(&t) {
            // Transaction pooling shares 2 servers among 4 clients; session pooling pins
            // a server per client, so it gets one each (no skipped steps). Replicas share
            // them out: each has its own pool.
            let want = if b.pool_mode == PoolMode::Session {
                4
            } else {
                2
            };
            let replicas = t.pooler.as_ref().unwrap().replicas;
            assert_eq!(b.default_pool_size * replicas, want, "{stem}");
        }
        // `holds` is the default: list only violations (and `either`, where timing decides).
        assert!(
            t.expect.values().all(|v| *v != Verdict::Holds),
            "{stem}: list only violations"
        );
        seen.push(stem);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "direct",
            "failover",
            "network-faults",
            "pgpool-caching",
            "pgpool-caching-no-discard",
            "pgpool-load-balance-default",
            "session-mode",
            "session-mode-faults",
            "session-mode-no-reset",
            "session-mode-settings",
            "transaction-mode",
            "transaction-mode-1-24",
            "transaction-mode-faults",
            "transaction-mode-host-faults",
            "transaction-mode-lifetime",
            "transaction-mode-listen",
            "transaction-mode-partitions",
            "transaction-mode-prepared",
            "transaction-mode-prepared-tracked",
            "transaction-mode-reset-always",
            "transaction-mode-reset-always-settings",
            "transaction-mode-settings",
            "transaction-mode-tracked-settings",
            "transaction-mode-two-poolers",
            "transaction-mode-xact",
        ]
    );
    concurrent.sort();
    assert_eq!(
        concurrent,
        [
            "app-pool-pinned",
            "app-pool-unpinned",
            "migrate-race",
            "migrate-race-session-mode",
            "migrate-race-transaction-mode",
            "starvation",
            "transaction-mode-starvation",
            "transaction-mode-xact-wait",
        ]
    );
}

#[test]
fn shipped_topologies_expect_what_was_decided() {
    let violated = |name: &str| -> Vec<String> {
        let t = Topology::load(
            &Path::new(TOPOLOGIES).join(format!("{name}.yaml")),
            catalog(),
        )
        .unwrap();
        catalog()
            .invariants
            .iter()
            .filter(|i| t.expected(i.name) == Verdict::Violated)
            .map(|i| i.name.to_string())
            .collect()
    };
    let direct = ["app.rollback_releases", "app.no_stale_holder"];
    assert_eq!(violated("direct"), direct);
    assert_eq!(violated("session-mode"), direct);
    // pgpool-II's cache with DISCARD ALL in its reset list is session pooling like PgBouncer's;
    // without it, its next client inherits a departed client's locks (docs/pgpool.md §4).
    assert_eq!(violated("pgpool-caching"), direct);
    // With a standby and empty function lists every lock call still goes to the primary
    // (docs/pgpool.md §7 LB1, §17).
    assert_eq!(violated("pgpool-load-balance-default"), direct);
    assert_eq!(
        violated("pgpool-caching-no-discard"),
        violated("session-mode-no-reset")
    );
    assert_eq!(
        violated("session-mode-no-reset"),
        [
            "app.no_orphans",
            "app.rollback_releases",
            "app.no_stale_holder"
        ]
    );
    assert_eq!(
        violated("transaction-mode"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.unlock_reaches_owner",
            "app.rollback_releases",
            "app.no_stale_holder"
        ]
    );
    assert_eq!(
        violated("transaction-mode-reset-always"),
        [
            "app.mutual_exclusion",
            "app.unlock_reaches_owner",
            "app.no_stale_holder"
        ]
    );
    assert_eq!(violated("transaction-mode-xact"), ["app.no_stale_holder"]);
    // A SET outside a transaction stays on the shared server (docs/session-state.md).
    assert_eq!(
        violated("transaction-mode-settings"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.no_stale_holder",
            "app.settings_stay_put"
        ]
    );
    // Named objects stay on the shared server; with PgBouncer's tracking the protocol-level
    // prepared statements follow the client (docs/session-state.md, "Named objects").
    assert_eq!(
        violated("transaction-mode-prepared"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.prepared_statements_follow",
            "app.temp_state_follows"
        ]
    );
    assert_eq!(
        violated("transaction-mode-prepared-tracked"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.temp_state_follows"
        ]
    );
    // A LISTEN stays on the shared server: notifications go to whoever holds it, or nowhere
    // (docs/session-state.md, "LISTEN and NOTIFY").
    assert_eq!(
        violated("transaction-mode-listen"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.no_stale_holder",
            "app.notifications_arrive"
        ]
    );
    // Session pooling keeps settings and LISTENs with their client; the reset at every
    // release clears a client's own.
    assert!(violated("session-mode-settings").is_empty());
    assert_eq!(
        violated("transaction-mode-reset-always-settings"),
        ["app.settings_stay_put", "app.notifications_arrive"]
    );
    // Faults add lost locks to what each pooling mode already breaks.
    assert_eq!(
        violated("failover"),
        [
            "app.rollback_releases",
            "app.no_stale_holder",
            "app.no_lost_lock"
        ]
    );
    assert_eq!(
        violated("network-faults"),
        violated("transaction-mode-faults")
    );
    // Hosts killed or frozen break what processes killed or frozen break; the thinnest two
    // (unlock_reaches_owner, rollback_releases: 0-2 of 64 cases a seed) are `either`.
    assert_eq!(
        violated("transaction-mode-host-faults"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.no_stale_holder",
            "app.no_lost_lock"
        ]
    );
    assert_eq!(
        violated("session-mode-faults"),
        [
            "app.rollback_releases",
            "app.no_stale_holder",
            "app.no_lost_lock"
        ]
    );
    assert_eq!(
        violated("transaction-mode-faults"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.unlock_reaches_owner",
            "app.rollback_releases",
            "app.no_stale_holder",
            "app.no_lost_lock"
        ]
    );
    assert!(violated("migrate-race").is_empty());
    assert!(violated("migrate-race-session-mode").is_empty());
    assert_eq!(
        violated("migrate-race-transaction-mode"),
        [
            "app.mutual_exclusion",
            "app.no_orphans",
            "app.unlock_reaches_owner",
            "app.applied_once"
        ]
    );
    assert_eq!(violated("starvation"), ["app.progress"]);
    assert_eq!(
        violated("app-pool-unpinned"),
        ["app.no_orphans", "app.unlock_reaches_owner"]
    );
    assert!(violated("app-pool-pinned").is_empty());
    assert_eq!(
        violated("transaction-mode-starvation"),
        ["app.mutual_exclusion", "app.progress"]
    );
    assert!(violated("transaction-mode-xact-wait").is_empty());
    // The migration lock is the one golang-migrate v4.19.1 derives for database "chaos"
    // opened from a URL (the CLI and migrate.New: DatabaseName = purl.Path = "/chaos"):
    // 2850675161, computed apart in Python (see workload::keys's tests).
    for name in [
        "migrate-race",
        "migrate-race-session-mode",
        "migrate-race-transaction-mode",
    ] {
        let t = Topology::load(
            &Path::new(TOPOLOGIES).join(format!("{name}.yaml")),
            catalog(),
        )
        .unwrap();
        let id =
            crate::workload::keys::golang_migrate_lock_id("/chaos", "public", "schema_migrations");
        assert_eq!(id, 2_850_675_161);
        assert_eq!(t.workload.keys, [Key::Big(id)], "{name}");
    }

    let t = Topology::load(
        &Path::new(TOPOLOGIES).join("transaction-mode.yaml"),
        catalog(),
    )
    .unwrap();
    assert!(t.workload.keys.contains(&Key::Pair(1, 612001)));
    let t = Topology::load(
        &Path::new(TOPOLOGIES).join("transaction-mode-xact.yaml"),
        catalog(),
    )
    .unwrap();
    assert_eq!(t.workload.api, Api::Xact);
    assert_eq!(t.workload.ops, Api::Xact.default_weights());
    let t = Topology::load(&Path::new(TOPOLOGIES).join("direct.yaml"), catalog()).unwrap();
    assert!(t.is_direct());
}

#[test]
fn documented_example_parses() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/topology.md"))
        .unwrap();
    let start = doc
        .find("```yaml\n")
        .expect("docs/topology.md has a yaml example")
        + 8;
    let len = doc[start..].find("```").unwrap();
    let t = Topology::parse(
        &doc[start..start + len],
        Path::new("docs/topology.md"),
        catalog(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.name, "transaction-mode");
    assert_eq!(bouncer(&t).unwrap().settings["server_lifetime"], "3600");
}

#[test]
fn defaults_apply() {
    let t = ok(MINIMAL);
    assert_eq!(t.name, "minimal");
    assert_eq!(t.description, None);
    assert_eq!(t.postgres.version, "18.6");
    assert_eq!(t.postgres.bin_dir, None);
    assert!(t.postgres.settings.is_empty());
    assert!(!t.postgres.standby);
    assert!(t.pooler.is_none());
    let w = &t.workload;
    assert_eq!(w.clients, 4);
    assert_eq!(w.keys, [Key::Big(4242424242), Key::Big(612001)]);
    assert_eq!(w.api, Api::Session);
    assert_eq!((w.steps_min, w.steps_max), (1, 39));
    assert_eq!(w.ops, Api::Session.default_weights());
    assert_eq!(w.lock_timeout_ms, 1);
    assert_eq!(
        t.run,
        RunSpec {
            time_scale_milli: 1000,
            cases: 256,
            seed: None,
            time_limit: Duration::from_secs(60),
            shrink_time: Duration::from_secs(60),
            max_shrink_runs: 512,
            schedule: Schedule::Sequential,
            sample_every: Duration::from_millis(5),
            op_deadline: Duration::from_secs(2),
            case_time_limit: Duration::from_secs(30),
            shrink_replays: 3,
            shrink_quorum: 2,
            search_states: 20_000,
            search_work: 1_000_000,
            search_time: Duration::from_secs(30),
        }
    );
    assert_eq!(t.app_pool, None);
    assert!(w.script.is_empty() && w.think.is_none());
    assert!(t.expect.is_empty());
    assert_eq!(t.expected("app.mutual_exclusion"), Verdict::Holds);
    assert_eq!(t.expected("pg.exclusion"), Verdict::Holds);
    assert_eq!(t.source, Path::new("t.yaml"));

    let t = ok(&format!(
        "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n"
    ));
    assert_eq!(t.pooler.as_ref().unwrap().binary, None);
    let b = bouncer(&t).unwrap();
    assert_eq!(b.pool_mode, PoolMode::Session);
    assert_eq!(b.default_pool_size, 2);
    assert_eq!(b.max_client_conn, 100);
    assert_eq!(b.server_reset_query, "DISCARD ALL");
    assert!(!b.server_reset_query_always);

    // Null sections mean "use the defaults"; a null pgbouncer means direct.
    let t = ok(&format!("{MINIMAL}pgbouncer:\nworkload: ~\nrun:\n"));
    assert!(t.is_direct());
    assert_eq!(t.workload.clients, 4);
    // Null mappings are empty: `expect:` with every entry commented out.
    let t = ok(&format!(
        "{MINIMAL}  settings:\nexpect:\n  # app.no_orphans: violated\n"
    ));
    assert!(t.expect.is_empty() && t.postgres.settings.is_empty());
}

#[test]
fn full_topology_round_trip() {
    let t = ok(r#"
name: full-1
description: every key
postgres:
  version: 17.10
  bin_dir: /usr/lib/postgresql/17/bin
  settings: { max_connections: 60, fsync: off, random_page_cost: 1.5, shared_buffers: 128MB }
pgbouncer:
  version: "1.25.2"
  binary: /usr/sbin/pgbouncer
  pool_mode: transaction
  default_pool_size: 3
  max_client_conn: 10
  server_reset_query: ""
  server_reset_query_always: true
  settings: { server_lifetime: 3600, server_fast_close: true, reserve_pool_size: 1 }
workload:
  clients: 8
  keys: [-1, [1, 2], [2, 1], 1]
  api: mixed
  steps: 5..=9
  lock_timeout: 1s
  ops: { try_lock: 10, terminate: 0, xact_lock: 5 }
run:
  cases: 10
  seed: 18446744073709551615
  time_limit: 2m
  max_shrink_runs: 0
expect:
  app.no_orphans: violated
  app.mutual_exclusion: holds
"#);
    assert_eq!(t.description.as_deref(), Some("every key"));
    // An unquoted version keeps its spelling (17.10 is not 17.1).
    assert_eq!(t.postgres.version, "17.10");
    assert_eq!(
        t.postgres.bin_dir,
        Some(PathBuf::from("/usr/lib/postgresql/17/bin"))
    );
    let s = &t.postgres.settings;
    assert_eq!(s["max_connections"], "60");
    assert_eq!(s["fsync"], "off");
    assert_eq!(s["random_page_cost"], "1.5");
    assert_eq!(s["shared_buffers"], "128MB");
    assert_eq!(
        t.pooler.as_ref().unwrap().binary,
        Some(PathBuf::from("/usr/sbin/pgbouncer"))
    );
    let b = bouncer(&t).unwrap();
    assert_eq!((b.default_pool_size, b.max_client_conn), (3, 10));
    assert_eq!(b.server_reset_query, "");
    assert!(b.server_reset_query_always);
    assert_eq!(b.settings["server_fast_close"], "1");
    assert_eq!(b.settings["server_lifetime"], "3600");
    let w = &t.workload;
    assert_eq!(
        w.keys,
        [Key::Big(-1), Key::Pair(1, 2), Key::Pair(2, 1), Key::Big(1)]
    );
    assert_eq!((w.steps_min, w.steps_max), (5, 9));
    assert_eq!(w.lock_timeout_ms, 1000);
    assert_eq!(w.ops[&Op::TryLock], 10);
    assert_eq!(w.ops[&Op::XactLock], 5);
    assert_eq!(w.ops[&Op::TryXactLock], 2);
    assert!(
        !w.ops.contains_key(&Op::Terminate),
        "zero weights are removed"
    );
    assert_eq!(t.run.seed, Some(u64::MAX));
    assert_eq!(t.run.time_limit, Duration::from_secs(120));
    assert_eq!(t.run.max_shrink_runs, 0);
    assert_eq!(t.expected("app.no_orphans"), Verdict::Violated);
    assert_eq!(t.expected("app.mutual_exclusion"), Verdict::Holds);
    assert_eq!(t.expect.len(), 2);
}

#[test]
fn steps_forms() {
    let steps = |s: &str| {
        let t = ok(&format!("{MINIMAL}workload:\n  steps: {s}\n"));
        (t.workload.steps_min, t.workload.steps_max)
    };
    assert_eq!(steps("1..40"), (1, 39));
    assert_eq!(steps("3..=3"), (3, 3));
    assert_eq!(steps("2..3"), (2, 2));
    assert_eq!(steps("7"), (7, 7));
    assert_eq!(steps("\"1..=10000\""), (1, 10_000));
    for bad in [
        "0..5",
        "5..5",
        "5..=4",
        "1..=10001",
        "0",
        "1-40",
        "a..b",
        "[1, 40]",
    ] {
        let e = err(&format!("{MINIMAL}workload:\n  steps: {bad}\n"));
        assert_eq!((e.line(), e.column()), (Some(5), Some(10)), "{bad}: {e}");
        assert!(e.message().contains("workload.steps"), "{bad}: {e}");
    }
}

#[test]
fn durations() {
    let lt = |s: &str| {
        ok(&format!("{MINIMAL}workload:\n  lock_timeout: {s}\n"))
            .workload
            .lock_timeout_ms
    };
    assert_eq!(lt("500ms"), 500);
    assert_eq!(lt("10s"), 10_000);
    let tl = |s: &str| {
        ok(&format!("{MINIMAL}run:\n  time_limit: {s}\n"))
            .run
            .time_limit
    };
    assert_eq!(tl("500ms"), Duration::from_millis(500));
    assert_eq!(tl("60s"), Duration::from_secs(60));
    assert_eq!(tl("2m"), Duration::from_secs(120));
    assert_eq!(tl("1h"), Duration::from_secs(3600));
    for bad in ["0s", "1.5s", "s", "10 s", "-1s", "1d", "true"] {
        let e = err(&format!("{MINIMAL}run:\n  time_limit: {bad}\n"));
        assert_eq!((e.line(), e.column()), (Some(5), Some(15)), "{bad}: {e}");
    }
    assert_eq!(parse_duration("18446744073709551615h"), None);
    assert_eq!(fmt_duration(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn keys_forms() {
    let keys = |s: &str| {
        ok(&format!("{MINIMAL}workload:\n  keys: {s}\n"))
            .workload
            .keys
    };
    assert_eq!(
        keys("{ count: 3 }"),
        [Key::Big(1), Key::Big(2), Key::Big(3)]
    );
    assert_eq!(keys("[[0, 5], 5]"), [Key::Pair(0, 5), Key::Big(5)]);
    assert_eq!(
        keys("\n    - 9223372036854775807\n    - [-2147483648, 2147483647]"),
        [Key::Big(i64::MAX), Key::Pair(i32::MIN, i32::MAX)]
    );
    let cases: &[(&str, usize, &str)] = &[
        ("[]", 9, "must not be empty"),
        ("[1, 2, 1]", 16, "duplicate key 1"),
        ("[9223372036854775808]", 10, "invalid advisory key"),
        ("[[1, 2, 3]]", 10, "invalid advisory key"),
        ("[[1, 2147483648]]", 14, "out of the int4 range"),
        ("[x]", 10, "invalid advisory key: found `x`"),
        ("{ count: 0 }", 18, "must be an integer from 1 to 1024"),
        (
            "{ number: 3 }",
            11,
            "unknown key `number` in `workload.keys`",
        ),
        ("42", 9, "must be a list of keys"),
    ];
    for (src, col, needle) in cases {
        let e = err(&format!("{MINIMAL}workload:\n  keys: {src}\n"));
        assert_eq!((e.line(), e.column()), (Some(5), Some(*col)), "{src}: {e}");
        assert!(e.message().contains(needle), "{src}: {e}");
    }
}

#[test]
fn ops_merge_over_api_defaults() {
    let ops = |api: &str, ops: &str| {
        ok(&format!("{MINIMAL}workload:\n  api: {api}\n  ops: {ops}\n"))
            .workload
            .ops
    };
    // A zero weight for the other API's op is allowed (it disables nothing).
    let o = ops("xact", "{ try_lock: 0, xact_lock: 7 }");
    assert_eq!(o[&Op::XactLock], 7);
    assert!(!o.contains_key(&Op::TryLock));
    assert_eq!(o.len(), Api::Xact.default_weights().len());
    // Transaction-level ops are errors under api: session.
    let e = err(&format!(
        "{MINIMAL}workload:\n  api: session\n  ops: {{ xact_lock: 1 }}\n"
    ));
    assert!(
        e.message()
            .contains("`xact_lock` is a transaction-level op"),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(6), Some(10)));
    // discard_all belongs to the session API.
    let e = err(&format!(
        "{MINIMAL}workload:\n  api: xact\n  ops:\n    discard_all: 1\n"
    ));
    assert_eq!((e.line(), e.column()), (Some(7), Some(5)), "{e}");
    // Statement pooling is refused until the model knows it (a pg.* verdict must never come
    // from pgchaos not knowing the pooler).
    let e = err(&format!(
        "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: statement\nworkload:\n  ops: {{ begin: 5 }}\n"
    ));
    assert!(e.message().contains("not modelled yet"), "{e}");
    // Weights are bounded and must be integers.
    let e = err(&format!("{MINIMAL}workload:\n  ops: {{ lock: -1 }}\n"));
    assert!(
        e.message()
            .contains("`workload.ops.lock` must be an integer from 0 to 1000"),
        "{e}"
    );
    let e = err(&format!("{MINIMAL}workload:\n  ops: [lock]\n"));
    assert!(
        e.message().contains("`workload.ops` must be a mapping"),
        "{e}"
    );
}

#[test]
fn default_weights_per_api() {
    let s = Api::Session.default_weights();
    assert_eq!(s.len(), 13);
    assert_eq!(
        (s[&Op::TryLock], s[&Op::Lock], s[&Op::Unlock], s[&Op::Begin]),
        (4, 2, 3, 2)
    );
    assert!(s.keys().all(|op| Api::Session.allows(*op)));
    let x = Api::Xact.default_weights();
    assert_eq!(x.len(), 10);
    assert_eq!(
        (x[&Op::XactLock], x[&Op::TryXactLock], x[&Op::Begin]),
        (3, 4, 3)
    );
    assert!(x.keys().all(|op| Api::Xact.allows(*op)));
    let m = Api::Mixed.default_weights();
    assert_eq!(m.len(), 15);
    assert_eq!(
        (m[&Op::XactLock], m[&Op::TryXactLock], m[&Op::Begin]),
        (2, 2, 2)
    );
    for api in Api::ALL {
        assert!(api.default_weights().values().all(|w| *w > 0));
    }
}

#[test]
fn settings_validation() {
    let e = err(&format!(
        "{MINIMAL}  settings:\n    data_directory: /tmp/x\n"
    ));
    assert!(
        e.message().contains("`data_directory` cannot be set"),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(5), Some(5)));
    let e = err(&format!(
        "{MINIMAL}  settings:\n    max_connections: lots\n"
    ));
    assert!(
        e.message()
            .contains("max_connections` must be a non-negative integer"),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(5), Some(22)));
    let e = err(&format!("{MINIMAL}  settings:\n    work_mem: [1]\n"));
    assert!(
        e.message().contains("must be a string, number or boolean"),
        "{e}"
    );
    let e = err(&format!(
        "{MINIMAL}  settings:\n    application_name: \"a\\nb\"\n"
    ));
    assert!(e.message().contains("one line"), "{e}");
    let e = err(&format!("{MINIMAL}  max_connections: 10\n"));
    assert!(
        e.hints().iter().any(|h| h.contains("postgres.settings")),
        "{e}"
    );
    // reserved connections count against the room.
    let e = err(&format!(
        "{MINIMAL}  settings:\n    max_connections: 19\n    reserved_connections: 10\nworkload:\n  clients: 4\n"
    ));
    assert!(e.message().contains("room for 3"), "{e}");
    // String integers count too.
    ok(&format!(
        "{MINIMAL}  settings:\n    max_connections: \"12\"\n"
    ));
    // A pgbouncer setting newer than the target version is refused, an older one is fine.
    ok(&format!(
        "{MINIMAL}pgbouncer:\n  version: \"1.24.0\"\n  pool_mode: session\n  settings: {{ max_db_client_connections: 9 }}\n"
    ));
}

#[test]
fn pool_must_fit_postgres() {
    let src = |pool: u32, max: u32| {
        format!(
            "{MINIMAL}  settings: {{ max_connections: {max} }}\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n  default_pool_size: {pool}\n  settings: {{ min_pool_size: 1 }}\n"
        )
    };
    // room = 19 - 3 - 3 = 13; pool = size + 1 (min_pool_size).
    ok(&src(12, 19));
    let e = err(&src(13, 19));
    assert!(
        e.message()
            .contains("the pool needs 14 server connections but PostgreSQL has room for 13"),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(8), Some(22)));
    assert!(
        e.hints().iter().any(|h| h.contains("+ min_pool_size 1")),
        "{e}"
    );
}

#[test]
fn versions() {
    let pg = |v: &str| {
        parse(&format!("name: v\npostgres:\n  version: {v}\n")).map(|t| t.postgres.version)
    };
    assert_eq!(pg("\"18.6\"").unwrap(), "18.6");
    assert_eq!(pg("18.6").unwrap(), "18.6");
    for bad in [
        "\"18\"",
        "18",
        "\"18.6.1\"",
        "\"v18.6\"",
        "\"18.\"",
        "[18, 6]",
        "~",
    ] {
        let e = pg(bad).unwrap_err();
        assert_eq!((e.line(), e.column()), (Some(3), Some(12)), "{bad}: {e}");
    }
    let e = pg("\"18.6.1\"").unwrap_err();
    assert!(e.hints()[0].contains("two numbers"), "{e}");
    let bouncer = |v: &str| {
        parse(&format!(
            "{MINIMAL}pgbouncer:\n  version: {v}\n  pool_mode: session\n"
        ))
        .map(|t| t.pooler.unwrap().version)
    };
    assert_eq!(bouncer("1.25.2").unwrap(), "1.25.2");
    assert_eq!(bouncer("\"1.25.2\"").unwrap(), "1.25.2");
    assert!(
        bouncer("1.25")
            .unwrap_err()
            .message()
            .contains("quoted version")
    );
    assert!(
        bouncer("\"1.25.2.1\"")
            .unwrap_err()
            .message()
            .contains("MAJOR.MINOR.PATCH")
    );
}

#[test]
fn structural_errors() {
    let e = err("- a\n- b\n");
    assert_eq!((e.line(), e.column()), (Some(1), Some(1)));
    assert!(
        e.message()
            .contains("expected a mapping here, found a sequence"),
        "{e}"
    );
    let e = err("name: x\npostgres: ~\n");
    assert!(e.message().contains("`postgres` must be a mapping"), "{e}");
    let e = err(&format!("{MINIMAL}pgbouncer: transaction\n"));
    assert_eq!((e.line(), e.column()), (Some(4), Some(12)), "{e}");
    let e = err(&format!("{MINIMAL}---\nname: y\n"));
    assert!(e.message().contains("one YAML document"), "{e}");
    let e = err("name: x\npostgres:\n  bin_dir: /x\n");
    assert!(
        e.message()
            .contains("missing required key `version` in `postgres`"),
        "{e}"
    );
    let e = err(&format!("{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n"));
    assert!(
        e.message()
            .contains("missing required key `pool_mode` in `pgbouncer`"),
        "{e}"
    );
    let e = err("postgres:\n  version: \"18.6\"\n");
    assert!(e.message().contains("missing required key `name`"), "{e}");
    let e = err(&format!("{MINIMAL}run:\n  cases: 0\n"));
    assert!(
        e.message()
            .contains("`run.cases` must be an integer >= 1, found 0"),
        "{e}"
    );
    let e = err(&format!("{MINIMAL}run:\n  seed: sometimes\n"));
    assert!(
        e.message()
            .contains("`run.seed` must be `random` or an integer"),
        "{e}"
    );
    let e = err(&format!("{MINIMAL}workload:\n  api: transaction\n"));
    assert!(e.message().contains("unknown api `transaction`"), "{e}");
    let e = err(&format!("{MINIMAL}description:\n"));
    assert!(
        e.message().contains("`description` must be a string"),
        "{e}"
    );
    let e = err(&format!(
        "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n  server_reset_query_always: yes please\n"
    ));
    assert!(e.message().contains("must be a boolean"), "{e}");
    let e = err(&format!("{MINIMAL}expect:\n  app.no_orphans: maybe\n"));
    assert!(
        e.message()
            .contains("must be `holds`, `violated` or `either`"),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(5), Some(19)));
    // `either` in `expect:` as in `expect_concurrent:` (a run against faults is timed).
    let t = parse(&format!(
        "{MINIMAL}expect:
  app.no_orphans: either
"
    ))
    .unwrap();
    assert_eq!(t.expect["app.no_orphans"], Verdict::Either);
    let e = err(&format!("{MINIMAL}workload:\n  bogus: 1\n"));
    assert!(
        e.message().contains("unknown key `bogus` in `workload`"),
        "{e}"
    );
    assert!(
        e.hints()
            .iter()
            .any(|h| h.contains("clients, keys, api, steps, lock_timeout, ops"))
    );
}

#[test]
fn postgres_standby_is_a_boolean_valid_with_or_without_a_pooler() {
    let t = ok(&format!("{MINIMAL}  standby: true\n"));
    assert!(t.postgres.standby);
    assert!(t.is_direct());
    let t = ok(&format!("{MINIMAL}  standby: false\n"));
    assert!(!t.postgres.standby);
    let t = ok(&format!(
        "{MINIMAL}  standby: true\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n"
    ));
    assert!(t.postgres.standby && t.pooler.is_some());
    // Settings a standby can live with are kept as given.
    let t = ok(&format!(
        "{MINIMAL}  standby: true\n  settings: {{ wal_level: logical, max_wal_senders: 2 }}\n"
    ));
    assert_eq!(t.postgres.settings["wal_level"], "logical");

    // A wrong type is a positioned error, like the other booleans.
    for bad in ["yes please", "1", "\"true\"", "[true]"] {
        let e = err(&format!("{MINIMAL}  standby: {bad}\n"));
        assert_eq!((e.line(), e.column()), (Some(4), Some(12)), "{bad}: {e}");
        assert!(
            e.message()
                .contains("`postgres.standby` must be a boolean (true or false)"),
            "{bad}: {e}"
        );
    }
    let e = err(&format!("{MINIMAL}  standby:\n"));
    assert!(e.message().contains("must be a boolean"), "{e}");
    let e = err(&format!("{MINIMAL}  stanby: true\n"));
    assert!(
        e.message().contains("unknown key `stanby` in `postgres`"),
        "{e}"
    );

    // Settings that leave no standby possible are refused at the value, with the reason.
    for (setting, column, needle) in [
        ("wal_level: minimal", 26, "replica or logical"),
        ("max_wal_senders: 1", 32, "two WAL senders"),
        ("hot_standby: off", 28, "leave `hot_standby` on"),
    ] {
        let src = format!("{MINIMAL}  standby: true\n  settings: {{ {setting} }}\n");
        let e = err(&src);
        assert_eq!(
            (e.line(), e.column()),
            (Some(5), Some(column)),
            "{setting}: {e}"
        );
        assert!(
            e.message().contains("with `postgres.standby: true`"),
            "{setting}: {e}"
        );
        assert!(
            e.hints().iter().any(|h| h.contains(needle)),
            "{setting}: {e}"
        );
        // Without a standby they are the user's business.
        ok(&src.replace("standby: true", "standby: false"));
    }
}

#[test]
fn timeouts_are_durations_in_their_servers_units() {
    let pgb = |v: &str| {
        parse(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n  settings: {{ server_idle_timeout: {v} }}\n"
        ))
    };
    assert!(pgb("0").is_ok(), "off");
    assert!(pgb("600").is_ok(), "PgBouncer's default");
    assert!(
        pgb("0.5").is_ok(),
        "the model knows what each timeout does: any value"
    );
    let e = pgb("soon").unwrap_err();
    assert!(e.message().contains("is not a duration"), "{e}");
    let pg = |v: &str| {
        parse(&format!(
            "name: t\npostgres:\n  version: \"18.6\"\n  settings: {{ statement_timeout: \"{v}\" }}\n"
        ))
    };
    assert!(pg("0").is_ok());
    assert!(pg("2min").is_ok());
    assert!(pg("60000").is_ok(), "a bare number is milliseconds");
    assert!(pg("59s").is_ok() && pg("250ms").is_ok());
    assert!(pg("10 fortnights").is_err());
    assert_eq!(super::settings::postgres_seconds("1.5h"), Some(5400.0));
    assert_eq!(
        crate::pooler::pgbouncer::settings::pgbouncer_seconds("3600"),
        Some(3600.0)
    );
}

#[test]
fn enums_spell_like_yaml() {
    assert_eq!(PoolMode::Transaction.to_string(), "transaction");
    assert_eq!(PoolMode::Session.as_str(), "session");
    assert_eq!(Api::Xact.to_string(), "xact");
    assert_eq!(Verdict::Violated.to_string(), "violated");
    assert_eq!(serde_json::to_string(&Verdict::Holds).unwrap(), "\"holds\"");
    assert_eq!(
        serde_json::from_str::<Verdict>("\"violated\"").unwrap(),
        Verdict::Violated
    );
    assert_eq!(
        serde_json::to_string(&PoolMode::Statement).unwrap(),
        "\"statement\""
    );
    assert_eq!(serde_json::to_string(&Tier::Pg).unwrap(), "\"pg\"");
}

#[test]
fn resolve_names_and_paths() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A name is looked up in topologies/, walking up to the workspace root.
    let p = resolve_from("transaction-mode", here);
    assert!(p.ends_with("topologies/transaction-mode.yaml"), "{p:?}");
    assert!(p.is_file(), "{p:?}");
    let root = Path::new(TOPOLOGIES).parent().unwrap();
    assert_eq!(
        resolve_from("direct", root),
        Path::new("topologies/direct.yaml")
    );
    // Paths are taken as given.
    assert_eq!(resolve_from("x/y", here), Path::new("x/y"));
    assert_eq!(resolve_from("t.yaml", here), Path::new("t.yaml"));
    assert_eq!(resolve_from("t.yml", here), Path::new("t.yml"));
    // Unknown names stay relative, so the load error names them.
    assert_eq!(
        resolve_from("no-such-topology", here),
        Path::new("topologies/no-such-topology.yaml")
    );
    assert!(resolve("no-such-topology").ends_with("topologies/no-such-topology.yaml"));
}

#[test]
fn close_matches_are_close() {
    assert_eq!(
        close_matches("postgress", TOP_KEYS.iter().copied()),
        ["postgres"]
    );
    assert_eq!(
        close_matches("zzzz", TOP_KEYS.iter().copied()),
        Vec::<&str>::new()
    );
    assert!(
        close_matches(
            "pool_size",
            crate::pooler::pgbouncer::section::KEYS.iter().copied()
        )
        .contains(&"default_pool_size")
    );
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(or_list(&["a", "b", "c"]), "`a`, `b` or `c`");
}

#[test]
fn known_pgbouncer_settings_are_sorted_and_cover_harness_keys() {
    let names: Vec<&str> = PGBOUNCER_SETTINGS.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
    for (name, _) in PGBOUNCER_HARNESS_SETTINGS {
        assert!(names.contains(name), "{name}");
    }
}

/// A pooled topology to hang a `faults` section on (6 lines; `faults:` is line 7).
const POOLED: &str = "name: f\npostgres:\n  version: \"18.6\"\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n";

/// The error `src` gives: at `line`:`column`, its message containing `needle`.
#[track_caller]
fn err_at(src: &str, line: usize, column: usize, needle: &str) -> TopologyError {
    let e = err(src);
    assert_eq!(
        (e.line(), e.column()),
        (Some(line), Some(column)),
        "wrong position for {needle:?}:\n{e}"
    );
    assert!(
        e.message().contains(needle),
        "message lacks {needle:?}:\n{e}"
    );
    e
}

#[track_caller]
fn has_hint(e: &TopologyError, needle: &str) {
    assert!(
        e.hints().iter().any(|h| h.contains(needle)),
        "no hint with {needle:?}:\n{e}"
    );
}

#[test]
fn faults_section_defaults_and_values() {
    // Defaults: weight, hold and delay; zero weights dropped; copied to the workload.
    let t = ok(&format!(
        "{POOLED}faults:\n  kinds: {{ pooler_reconnect: 2, pg_restart: 1, pooler_kill: 0 }}\n"
    ));
    let kinds = BTreeMap::from([(Op::PoolerReconnect, 2), (Op::PgRestart, 1)]);
    assert_eq!(t.faults.kinds, kinds);
    assert_eq!(t.faults.weight, limits::DEFAULT_FAULT_WEIGHT);
    assert_eq!(
        t.faults.hold,
        Duration::from_millis(limits::DEFAULT_FAULT_HOLD_MS)
    );
    assert_eq!(
        t.faults.delay,
        Duration::from_millis(limits::DEFAULT_LINK_DELAY_MS)
    );
    assert_eq!(
        (t.faults.hold, t.faults.delay),
        (Duration::from_millis(100), Duration::from_millis(10))
    );
    assert_eq!(t.workload.faults, kinds);
    assert_eq!(t.workload.fault_weight, limits::DEFAULT_FAULT_WEIGHT);
    assert!(t.workload.uses(Op::PoolerReconnect) && t.workload.uses(Op::PgRestart));
    assert!(!t.workload.uses(Op::PoolerKill), "weight 0 is not run");
    // The client ops are untouched by the faults.
    assert_eq!(t.workload.ops, Api::Session.default_weights());

    // Every key given, block style.
    let t = ok(&format!(
        "{POOLED}faults:\n  kinds:\n    link_delay: 3\n    backend_freeze: 1\n  weight: 7\n  hold: 50ms\n  delay: 5ms\n"
    ));
    let kinds = BTreeMap::from([(Op::LinkDelay, 3), (Op::BackendFreeze, 1)]);
    assert_eq!(
        t.faults,
        Faults {
            kinds: kinds.clone(),
            weight: 7,
            hold: Duration::from_millis(50),
            delay: Duration::from_millis(5),
        }
    );
    assert_eq!((t.workload.faults, t.workload.fault_weight), (kinds, 7));
    // The limits themselves are allowed.
    let t = ok(&format!(
        "{POOLED}faults: {{ kinds: {{ pooler_freeze: 1000 }}, weight: 1000, hold: 10s, delay: 1ms }}\n"
    ));
    assert_eq!(t.faults.kinds[&Op::PoolerFreeze], 1000);
    assert_eq!(t.faults.weight, 1000);
    assert_eq!(t.faults.hold, Duration::from_secs(10));
    assert_eq!(t.faults.delay, Duration::from_millis(1));

    // No section: no faults drawn.
    let t = ok(POOLED);
    assert_eq!(t.faults, Faults::default());
    assert!(t.workload.faults.is_empty());
    assert!(Op::FAULTS.iter().all(|op| !t.workload.uses(*op)));
    // Every weight 0: a section that draws nothing.
    let t = ok(&format!(
        "{POOLED}faults:\n  kinds: {{ pooler_reload: 0 }}\n"
    ));
    assert!(t.faults.kinds.is_empty() && t.workload.faults.is_empty());

    // PostgreSQL's faults need no pooler.
    let t = ok(&format!(
        "{MINIMAL}faults:\n  kinds: {{ pg_restart: 1, pg_crash: 1, backend_kill: 1, backend_freeze: 1 }}\n"
    ));
    assert!(t.is_direct());
    assert_eq!(t.workload.faults.len(), 4);
    // A PgBouncer fault with weight 0 is no fault: allowed without a pooler.
    let t = ok(&format!(
        "{MINIMAL}faults:\n  kinds: {{ pg_restart: 1, pooler_kill: 0 }}\n"
    ));
    assert_eq!(t.workload.faults, BTreeMap::from([(Op::PgRestart, 1)]));

    // Each fault alone, where its needs are met (a pooler and a standby).
    let full = "name: f\npostgres:\n  version: \"18.6\"\n  standby: true\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n";
    for op in Op::FAULTS {
        let t = parse(&format!("{full}faults:\n  kinds: {{ {op}: 4 }}\n"))
            .unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(t.workload.faults, BTreeMap::from([(op, 4)]), "{op}");
    }
    // Promote with a standby, and no pooler.
    let t = ok(&format!(
        "{MINIMAL}  standby: true\nfaults:\n  kinds: {{ promote: 1, pg_restart: 1 }}\n"
    ));
    assert!(t.faults.kinds.contains_key(&Op::Promote));
}

#[test]
fn unknown_faults_are_positioned_at_the_name_with_suggestions() {
    // Line 8: `  kinds: { pooler_reconect: 1 }`: the name at column 12.
    let e = err_at(
        &format!("{POOLED}faults:\n  kinds: {{ pooler_reconect: 1 }}\n"),
        8,
        12,
        "unknown fault `pooler_reconect`",
    );
    assert!(
        e.hints()
            .iter()
            .any(|h| h.starts_with("did you mean `pooler_reconnect`")),
        "{e}"
    );
    let valid: Vec<&str> = Op::FAULTS.iter().map(|o| o.name()).collect();
    assert!(
        e.hints()
            .iter()
            .any(|h| *h == format!("valid faults: {}", valid.join(", "))),
        "{e}"
    );
    assert!(
        !e.hints().iter().any(|h| h.contains("client op")),
        "not a client op: {e}"
    );
    // Block style: the key on its own line.
    err_at(
        &format!("{POOLED}faults:\n  kinds:\n    pg_restart: 1\n    pg_reboot: 1\n"),
        10,
        5,
        "unknown fault `pg_reboot`",
    );
    // A client op: pointed to `workload.ops`.
    for (op, column) in [("terminate", 12), ("ping", 12), ("try_lock", 12)] {
        let e = err_at(
            &format!("{POOLED}faults:\n  kinds: {{ {op}: 1 }}\n"),
            8,
            column,
            &format!("unknown fault `{op}`"),
        );
        has_hint(
            &e,
            &format!("`{op}` is a client op: weigh it in `workload.ops`"),
        );
        has_hint(&e, "valid faults: pooler_pause, pooler_reconnect,");
    }
    // A script-only op is not a client op of `workload.ops`.
    let e = err(&format!("{POOLED}faults:\n  kinds: {{ sleep: 1 }}\n"));
    assert!(!e.hints().iter().any(|h| h.contains("client op")), "{e}");
    // An unknown key of the section (not a kind).
    let e = err_at(
        &format!("{POOLED}faults:\n  kinds: {{ pooler_reload: 1 }}\n  holds: 50ms\n"),
        9,
        3,
        "unknown key `holds` in `faults`",
    );
    has_hint(&e, "`hold`");
}

#[test]
fn faults_the_topology_cannot_run_are_positioned_at_the_fault() {
    // A PgBouncer fault without PgBouncer; line 5: `  kinds: { pg_restart: 1, pooler_kill: 1 }`.
    let e = err_at(
        &format!("{MINIMAL}faults:\n  kinds: {{ pg_restart: 1, pooler_kill: 1 }}\n"),
        5,
        27,
        "`pooler_kill` is a fault of the pooler, and this topology has none",
    );
    has_hint(
        &e,
        "add a pooler section (`pgbouncer`), or remove the fault",
    );
    // Every fault that needs the pooler, alone.
    for op in Op::FAULTS {
        let needs = crate::vocab::fault::meaning(op).unwrap().needs_pooler;
        let src = format!("{MINIMAL}  standby: true\nfaults:\n  kinds:\n    {op}: 1\n");
        match parse(&src) {
            Ok(_) => assert!(!needs, "{op} needs PgBouncer"),
            Err(e) => {
                assert!(needs, "{op}: {e}");
                assert_eq!((e.line(), e.column()), (Some(7), Some(5)), "{op}: {e}");
                assert!(
                    e.message().contains("is a fault of the pooler"),
                    "{op}: {e}"
                );
            }
        }
    }

    // Promote without a standby.
    let e = err_at(
        &format!("{POOLED}faults:\n  kinds:\n    pooler_reload: 1\n    promote: 2\n"),
        10,
        5,
        "`promote` fails over to a standby, and this topology has none",
    );
    has_hint(&e, "set `postgres.standby: true`");
    err_at(
        &format!("{MINIMAL}  standby: false\nfaults:\n  kinds: {{ promote: 1 }}\n"),
        6,
        12,
        "`promote` fails over to a standby",
    );
    // Weight 0: no fault, no need.
    ok(&format!(
        "{POOLED}faults:\n  kinds: {{ promote: 0, pg_crash: 1 }}\n"
    ));

    // Link faults and promote: at the kinds mapping.
    let standby = "name: f\npostgres:\n  version: \"18.6\"\n  standby: true\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n";
    for link in ["link_cut", "link_blackhole", "link_delay"] {
        let e = err_at(
            &format!("{standby}faults:\n  kinds: {{ promote: 1, {link}: 1 }}\n"),
            9,
            10,
            &format!("`{link}` and `promote` cannot be combined yet"),
        );
        has_hint(&e, "use two topologies");
    }
    // Either alone is fine; with weight 0 the link fault is not there.
    ok(&format!("{standby}faults:\n  kinds: {{ promote: 1 }}\n"));
    ok(&format!("{standby}faults:\n  kinds: {{ link_cut: 1 }}\n"));
    ok(&format!(
        "{standby}faults:\n  kinds: {{ promote: 1, link_cut: 0 }}\n"
    ));
}

#[test]
fn fault_durations_and_weights_are_positioned_at_the_value() {
    let at = |key: &str, value: &str| {
        format!("{POOLED}faults:\n  kinds: {{ pooler_freeze: 1 }}\n  {key}: {value}\n")
    };
    // Line 9: `  hold: <value>` (value at column 9), `  delay: <value>` (column 10),
    // `  weight: <value>` (column 11).
    let e = err_at(
        &at("hold", "0ms"),
        9,
        9,
        "`faults.hold` must be greater than zero",
    );
    has_hint(&e, "`500ms`");
    let e = err_at(&at("hold", "50"), 9, 9, "`faults.hold` needs a unit");
    has_hint(&e, "write `50ms` or `50s`");
    err_at(
        &at("hold", "11s"),
        9,
        9,
        "`faults.hold` must be at most 10s, found 11s",
    );
    err_at(
        &at("hold", "10001ms"),
        9,
        9,
        "`faults.hold` must be at most 10s, found 10001ms",
    );
    err_at(
        &at("hold", "a while"),
        9,
        9,
        "`faults.hold` is not a duration: `a while`",
    );
    err_at(
        &at("hold", "[1s]"),
        9,
        9,
        "`faults.hold` must be a duration",
    );
    err_at(
        &at("delay", "0s"),
        9,
        10,
        "`faults.delay` must be greater than zero",
    );
    err_at(
        &at("delay", "soon"),
        9,
        10,
        "`faults.delay` is not a duration: `soon`",
    );
    err_at(
        &at("delay", "1m"),
        9,
        10,
        "`faults.delay` must be at most 10s, found 1m",
    );
    err_at(
        &at("weight", "0"),
        9,
        11,
        "`faults.weight` must be an integer from 1 to 1000, found 0",
    );
    err_at(
        &at("weight", "1001"),
        9,
        11,
        "`faults.weight` must be an integer from 1 to 1000, found 1001",
    );
    err_at(
        &at("weight", "often"),
        9,
        11,
        "`faults.weight` must be an integer from 1 to 1000, found `often`",
    );
    // A kind's weight, at its value: `  kinds: { pooler_reconnect: <value> }`.
    for (value, found) in [("-1", "-1"), ("1001", "1001"), ("lots", "`lots`")] {
        err_at(
            &format!("{POOLED}faults:\n  kinds: {{ pooler_reconnect: {value} }}\n"),
            8,
            30,
            &format!(
                "`faults.kinds.pooler_reconnect` must be an integer from 0 to 1000, found {found}"
            ),
        );
    }

    // The section's shape.
    let e = err(&format!("{POOLED}faults:\n  weight: 3\n"));
    assert!(
        e.message()
            .contains("missing required key `kinds` in `faults`"),
        "{e}"
    );
    assert_eq!(e.line(), Some(8), "at the section's mapping: {e}");
    has_hint(&e, "add `kinds: { pooler_reconnect: 1 }`");
    let e = err_at(
        &format!("{POOLED}faults:\n  kinds: [pooler_reconnect]\n"),
        8,
        10,
        "`faults.kinds` must be a mapping",
    );
    has_hint(&e, "faults.kinds: {");
}

#[test]
fn faults_beside_a_script_are_checked_but_not_drawn() {
    // A scripted (concurrent) workload runs its script: the faults section is validated and
    // kept in `faults`, but no step is drawn from it (the script has no fault steps).
    let script = "workload:\n  script:\n    - clients: 2\n      ops: [lock: 42, unlock: 42]\nrun:\n  schedule: concurrent\n";
    let t = ok(&format!(
        "{POOLED}{script}faults:\n  kinds: {{ pooler_reconnect: 2 }}\n  weight: 9\n  hold: 20ms\n"
    ));
    assert_eq!(t.run.schedule, Schedule::Concurrent);
    assert_eq!(t.workload.script.len(), 1);
    assert_eq!(t.faults.kinds, BTreeMap::from([(Op::PoolerReconnect, 2)]));
    assert_eq!(
        (t.faults.weight, t.faults.hold),
        (9, Duration::from_millis(20))
    );
    assert!(t.workload.faults.is_empty(), "{:?}", t.workload.faults);
    assert_eq!(t.workload.fault_weight, 0);
    assert!(!t.workload.uses(Op::PoolerReconnect));
    // Still validated: a PgBouncer fault with no PgBouncer.
    let direct = format!("{MINIMAL}{script}faults:\n  kinds: {{ pooler_reconnect: 2 }}\n");
    err_at(
        &direct,
        11,
        12,
        "`pooler_reconnect` is a fault of the pooler",
    );
    // And a script cannot name a fault itself.
    let e = err(&format!(
        "{POOLED}workload:\n  script:\n    - ops: [pooler_reconnect]\nrun:\n  schedule: concurrent\n"
    ));
    assert!(
        e.message()
            .contains("`pooler_reconnect` cannot be scripted yet"),
        "{e}"
    );
}

#[test]
fn launcher_is_native_by_default_docker_when_named_and_a_typo_is_placed() {
    let base = "name: t\npostgres: { version: \"18.6\" }\n";
    assert_eq!(ok(base).launcher, LauncherKind::Native);
    assert_eq!(
        ok(&format!("{base}launcher: docker\n")).launcher,
        LauncherKind::Docker
    );
    let e = err(&format!("{base}launcher: dockr\n"));
    let text = e.to_string();
    assert!(text.contains("unknown launcher `dockr`"), "{text}");
    assert!(text.contains(":3:"), "line of the launcher key: {text}");
    assert!(e.hints().iter().any(|h| h.contains("`docker`")), "{text}");
}

#[test]
fn replicas_spread_the_clients_and_multiply_the_pool() {
    let two = |extra: &str| {
        format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n  replicas: 2\n{extra}"
        )
    };
    let t = ok(&two(""));
    assert_eq!(t.pooler.as_ref().unwrap().replicas, 2);
    assert_eq!(crate::pooler::rules_for(&t).replicas, 2);
    assert_eq!(crate::pooler::rules_for(&t).replica_of(3), 1);
    let one = ok(&format!(
        "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n"
    ));
    assert_eq!(one.pooler.as_ref().unwrap().replicas, 1, "the default");
    for bad in ["0", "9"] {
        let e = err_at(
            &format!(
                "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n  replicas: {bad}\n"
            ),
            7,
            13,
            "`pgbouncer.replicas` must be an integer from 1 to 8",
        );
        drop(e);
    }
    // Each replica serves half the clients (rounded up): 3 of 5.
    err_at(
        &two("  max_client_conn: 2\nworkload:\n  clients: 5\n"),
        8,
        20,
        "`pgbouncer.max_client_conn` (2) is below the 3 clients each of its 2 replicas serves",
    );
    assert!(parse(&two("  max_client_conn: 3\nworkload:\n  clients: 5\n")).is_ok());
    // Each has its own pool: 2 x 50 servers do not fit in 100 - 3 - 3, one 50 would.
    let e = err(&two("  default_pool_size: 50\n"));
    assert!(
        e.message()
            .contains("the pool needs 100 server connections"),
        "{e}"
    );
    has_hint(&e, "(default_pool_size 50) x 2 replicas");
    assert!(
        parse(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n  default_pool_size: 50\n"
        ))
        .is_ok()
    );
    // A fault of one pooler, and a failover, are refused with replicas (not modelled yet).
    let e = err(&two("faults:\n  kinds: { pooler_crash: 1 }\n"));
    assert!(
        e.message()
            .contains("`pooler_crash` is a fault of one pooler, and this topology runs 2 replicas"),
        "{e}"
    );
    assert!(parse(&two("faults:\n  kinds: { pg_restart: 1 }\n")).is_ok());
    let e = err(
        "name: s\npostgres:\n  version: \"18.6\"\n  standby: true\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\n  replicas: 2\n",
    );
    assert!(
        e.message().contains("`postgres.standby` with 2 replicas"),
        "{e}"
    );
}

#[test]
fn time_scale_multiplies_every_workload_duration() {
    let script = "workload:\n  lock_timeout: 3s\n  think: 10ms..20ms\n  script:\n    - clients: 2\n      ops: [lock: 42, sleep: 2s, migrate: 100ms, pg_sleep: 3ms, unlock: 42]\nrun:\n  schedule: concurrent\n";
    let plain = ok(&format!("{MINIMAL}{script}"));
    assert_eq!(plain.run.time_scale_milli, 1000);
    let t = ok(&format!("{MINIMAL}{script}  time_scale: 0.25\n"));
    assert_eq!(t.run.time_scale_milli, 250);
    assert_eq!(t.workload.lock_timeout_ms, 750);
    let ms: Vec<Option<u64>> = t.workload.script[0].ops.iter().map(|o| o.ms).collect();
    // 2 s, 100 ms and 3 ms a quarter as long (3 ms -> 0.75, rounded to 1); lock and unlock
    // have none.
    assert_eq!(ms, vec![None, Some(500), Some(25), Some(1), None]);
    assert_eq!(
        t.workload.think,
        Some((Duration::from_micros(2500), Duration::from_millis(5)))
    );
    let twice = ok(&format!("{MINIMAL}{script}  time_scale: 2\n"));
    assert_eq!(twice.workload.lock_timeout_ms, 6000);
    for bad in ["0", "0.001", "11", "fast", "-1"] {
        err_at(
            &format!("{MINIMAL}{script}  time_scale: {bad}\n"),
            12,
            15,
            "`run.time_scale` must be a number from 0.01 to 10",
        );
    }
}

#[test]
fn an_external_deployment_names_its_dsns() {
    let dsns = "external:\n  pooler: postgresql://pgchaos_client:${PW1}@pgbouncer.staging:6432/app\n  postgres: \"host=db.staging port=5432 user=pgchaos_observer dbname=app password=${PW2}\"\n";
    let t = ok(&format!("{MINIMAL}launcher: external\n{dsns}"));
    assert_eq!(t.launcher, LauncherKind::External);
    let e = t.external.as_ref().unwrap();
    assert_eq!(
        e.pooler,
        "postgresql://pgchaos_client:${PW1}@pgbouncer.staging:6432/app"
    );
    assert!(e.postgres.contains("user=pgchaos_observer") && e.admin.is_none());
    // The section and the launcher go together.
    err_at(
        &format!("{MINIMAL}{dsns}"),
        5,
        3,
        "an `external:` section is for `launcher: external`",
    );
    err_at(
        &format!("{MINIMAL}launcher: external\n"),
        4,
        11,
        "`launcher: external` needs an `external:` section",
    );
    // Each DSN parses and names its role and database; `postgres` is required.
    err_at(
        &format!(
            "{MINIMAL}launcher: external\nexternal:\n  pooler: postgresql://h:6432/app\n  postgres: postgresql://o@h/app\n"
        ),
        6,
        11,
        "`external.pooler` names no user",
    );
    err_at(
        &format!(
            "{MINIMAL}launcher: external\nexternal:\n  pooler: postgresql://u@h/app\n  postgres: \"host=h port=notaport user=o dbname=app\"\n"
        ),
        7,
        13,
        "`external.postgres` is not a PostgreSQL connection string",
    );
    let e = err(&format!(
        "{MINIMAL}launcher: external\nexternal:\n  pooler: postgresql://u@h/app\n"
    ));
    assert!(e.message().contains("postgres"), "{}", e.message());
    err_at(
        &format!(
            "{MINIMAL}launcher: external\nexternal:\n  pooler: postgresql://u:${{PW@h/app\n  postgres: postgresql://o@h/app\n"
        ),
        6,
        11,
        "`${` without a closing `}`",
    );
}

#[test]
fn external_passwords_come_from_the_environment() {
    let lookup = |n: &str| (n == "SET_ONE").then(|| "s3cret".to_string());
    assert_eq!(
        ExternalSpec::expand_with("postgresql://u:${SET_ONE}@h/db", "external.pooler", lookup),
        Ok("postgresql://u:s3cret@h/db".to_string())
    );
    assert_eq!(
        ExternalSpec::expand_with("postgresql://u@h/db", "external.pooler", lookup),
        Ok("postgresql://u@h/db".to_string())
    );
    let unset = ExternalSpec::expand_with("x=${NOT_SET}", "external.admin", lookup).unwrap_err();
    assert!(
        unset.contains("`external.admin` refers to ${NOT_SET}, which is not set"),
        "{unset}"
    );
    let bad = ExternalSpec::expand_with("x=${a-b}", "external.admin", lookup).unwrap_err();
    assert!(bad.contains("not an environment variable's name"), "{bad}");
}

#[test]
fn an_external_password_is_set_on_the_parsed_dsn_never_pasted_into_it() {
    // A password that would change the host, the port or a parameter if pasted.
    let pw = "p@ss w%20rd:/?x=1";
    let lookup = |n: &str| (n == "PW").then(|| pw.to_string());
    for dsn in [
        "postgresql://u:${PW}@db.staging:5432/app",
        "host=db.staging port=5432 user=u dbname=app password=${PW}",
    ] {
        let (c, _) = ExternalSpec::resolve_with(dsn, "external.pooler", lookup).unwrap();
        assert_eq!(c.get_password(), Some(pw.as_bytes()), "{dsn}");
        assert_eq!(c.get_ports(), [5432], "{dsn}");
        assert_eq!(c.get_dbname(), Some("app"), "{dsn}");
        assert!(
            !format!("{c:?}").contains("p@ss"),
            "Debug redacts it: {c:?}"
        );
    }
    // A literal password is refused; so is a reference outside the password.
    let literal =
        ExternalSpec::resolve_with("postgresql://u:hunter2@h/app", "external.pooler", lookup)
            .unwrap_err();
    assert!(literal.contains("has a literal password"), "{literal}");
    let host =
        ExternalSpec::resolve_with("postgresql://u:${PW}@${PW}/app", "external.pooler", lookup)
            .unwrap_err();
    assert!(host.contains("only the password may be"), "{host}");
    let unset =
        ExternalSpec::resolve_with("postgresql://u:${NOPE}@h/app", "external.admin", lookup)
            .unwrap_err();
    assert!(
        unset.contains("refers to ${NOPE}, which is not set"),
        "{unset}"
    );
    // Refused at load, at the DSN's line and column.
    err_at(
        &format!(
            "{MINIMAL}launcher: external\nexternal:\n  pooler: postgresql://u:hunter2@h/app\n  postgres: postgresql://o@h/app\n"
        ),
        6,
        11,
        "`external.pooler` has a literal password",
    );
}

#[test]
fn a_drawn_set_may_set_every_setting_and_a_script_only_the_ones_it_names() {
    use crate::vocab::Guc;
    let drawn = ok(&format!(
        "{MINIMAL}workload:\n  ops:\n    try_lock: 1\n    set_local: 1\n"
    ));
    for g in Guc::ALL {
        assert!(drawn.workload.may_set(g), "{g}");
    }
    let shown = ok(&format!(
        "{MINIMAL}workload:\n  ops:\n    try_lock: 1\n    show: 1\n"
    ));
    assert!(!shown.workload.may_set(Guc::Role), "show sets nothing");
    let script = ok(&format!(
        "{MINIMAL}run:\n  schedule: concurrent\nworkload:\n  script:\n    - clients: 2\n      ops:\n        - set: lock_timeout\n        - show: role\n        - lock: 1\n"
    ));
    assert!(script.workload.may_set(Guc::LockTimeout));
    assert!(!script.workload.may_set(Guc::Role));
}

#[test]
fn workload_settings_narrows_the_drawn_settings() {
    use crate::vocab::Guc;
    let t = ok(&format!(
        "{MINIMAL}workload:\n  settings: [search_path, role]\n  ops:\n    try_lock: 1\n    set: 1\n"
    ));
    assert_eq!(t.workload.settings, vec![Guc::SearchPath, Guc::Role]);
    assert!(t.workload.may_set(Guc::Role));
    assert!(!t.workload.may_set(Guc::LockTimeout));
    let all = ok(&format!("{MINIMAL}workload:\n  ops:\n    try_lock: 1\n"));
    assert_eq!(all.workload.settings, Guc::ALL.to_vec());
    // Each error points at the value.
    let cases = [
        (
            "settings: [search_pth]",
            5,
            14,
            "unknown setting `search_pth`",
        ),
        (
            "settings: [role, role]",
            5,
            20,
            "setting `role` listed twice",
        ),
        (
            "settings: []",
            5,
            13,
            "must be a non-empty list of settings",
        ),
        (
            "settings: role",
            5,
            13,
            "must be a non-empty list of settings",
        ),
        ("settings: [3]", 5, 14, "must be a setting's name, found"),
    ];
    for (line, l, c, needle) in cases {
        let e = err(&format!(
            "{MINIMAL}workload:\n  {line}\n  ops:\n    try_lock: 1\n"
        ));
        assert_eq!((e.line(), e.column()), (Some(l), Some(c)), "{line}: {e}");
        assert!(e.message().contains(needle), "{line}: {e}");
    }
    let close = err(&format!("{MINIMAL}workload:\n  settings: [search_pth]\n"));
    assert!(
        close.to_string().contains("did you mean `search_path`"),
        "{close}"
    );
}

/// `violated ~5%`: an expected violation with the share of cases it showed in, for a shorter
/// run that does not reach it; a rate anywhere else is refused at its value.
#[test]
fn an_expected_violation_may_carry_its_rate() {
    let t = ok(&format!(
        "{MINIMAL}expect:\n  app.no_orphans: violated ~5%\n  app.mutual_exclusion: violated\nexpect_concurrent:\n  app.no_orphans: violated ~12.5%\n"
    ));
    assert_eq!(t.expected("app.no_orphans"), Verdict::Violated);
    assert_eq!(
        t.expected_rate_in("app.no_orphans", Schedule::Sequential),
        Some(5.0)
    );
    assert_eq!(
        t.expected_rate_in("app.no_orphans", Schedule::Concurrent),
        Some(12.5)
    );
    assert_eq!(
        t.expected_rate_in("app.mutual_exclusion", Schedule::Sequential),
        None
    );
    for bad in [
        "holds ~5%",
        "violated 5%",
        "violated ~0%",
        "violated ~101%",
        "violated ~x%",
    ] {
        let e = err(&format!("{MINIMAL}expect:\n  app.no_orphans: {bad}\n"));
        assert_eq!((e.line(), e.column()), (Some(5), Some(19)), "{bad}: {e}");
        assert!(e.message().contains("violated ~5%"), "{bad}: {e}");
    }
}
