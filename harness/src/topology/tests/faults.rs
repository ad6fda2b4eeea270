//! Schema tests: the faults section, launchers, replicas, time scale, external
//! deployments, drawn settings and expected rates.

use super::*;

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
    // pgpool-II: none of PgBouncer's, and PostgreSQL's are refused (not modelled through it).
    let pgpool = "name: f\npostgres:\n  version: \"18.6\"\npgpool:\n  version: \"4.3.5\"\n";
    let e = err_at(
        &format!("{pgpool}faults:\n  kinds:\n    pooler_reconnect: 1\n"),
        8,
        5,
        "`pooler_reconnect` is not a fault pgpool has",
    );
    has_hint(&e, "pgpool has no faults of its own here");
    for op in Op::FAULTS {
        let src = format!("{pgpool}faults:\n  kinds:\n    {op}: 1\n");
        let e = err(&src);
        assert_eq!((e.line(), e.column()), (Some(8), Some(5)), "{op}: {e}");
        if !crate::vocab::fault::meaning(op).unwrap().needs_pooler {
            assert!(
                e.message()
                    .contains("is a fault of PostgreSQL, and what pgpool does to its clients"),
                "{op}: {e}"
            );
            has_hint(&e, "fail the node over");
        }
    }
    ok(&format!("{pgpool}faults:\n  kinds:\n    pg_restart: 0\n"));
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
