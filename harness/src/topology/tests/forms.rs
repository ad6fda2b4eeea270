//! Schema tests: defaults, forms (steps, durations, keys, ops), settings, versions and
//! structural errors.

use super::*;

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
