//! Profiles: every shipped file parses, its key is the tool's own derivation for the
//! `chaos` database (the functions of `workload::keys`, themselves checked against values
//! computed apart in Python), composition keeps the profile's lines, and the outcome
//! classes follow the run's facts.

use super::*;
use crate::vocab::{Key, Op};
use crate::workload::keys;

fn shipped(name: &str) -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profiles")
        .join(format!("{name}.yaml"));
    Profile::load(&path).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

/// The profile composed with a bare direct topology.
fn on_direct(p: &Profile) -> Topology {
    p.compose(
        "postgres:\n  version: \"18.6\"\n",
        "direct",
        &Compose::default(),
    )
    .unwrap()
    .1
}

fn key_of(p: &Profile) -> Key {
    let topo = on_direct(p);
    assert_eq!(topo.workload.keys.len(), 1, "{}: one key", p.name);
    topo.workload.keys[0]
}

/// Each profile's key as its tool computes it for the `chaos` database, for every profile in
/// `profiles/` (a new profile without its derivation here fails).
#[test]
fn keys_are_the_tools_own_derivations() {
    let big = Key::Big;
    let cases: Vec<(&str, Key)> = vec![
        // Zlib.crc32(current_database) * MIGRATOR_SALT
        ("rails", big(keys::rails_migrator_lock_id("chaos"))),
        // the migrate CLI (v4.19.1) hashes "public\0schema_migrations\0/chaos": the URL path
        (
            "golang-migrate",
            big(keys::golang_migrate_lock_id(
                "/chaos",
                "public",
                "schema_migrations",
            )),
        ),
        ("prisma", big(keys::PRISMA_LOCK_ID)),
        (
            "flyway",
            big(keys::flyway_lock_id("public", "flyway_schema_history")),
        ),
        (
            "flyway-session",
            big(keys::flyway_lock_id("public", "flyway_schema_history")),
        ),
        ("sqlx", big(keys::sqlx_lock_id("chaos"))),
        ("authentik", big(keys::AUTHENTIK_LOCK_ID)),
        ("authentik-second-deploy", big(keys::AUTHENTIK_LOCK_ID)),
        (
            "good-job",
            big(keys::good_job_lock_key(&keys::good_job_lockable_key(
                "good_jobs",
                "3f1e9c2a-5b7d-4e8f-9a10-b2c3d4e5f607",
            ))),
        ),
        // crc32 IEEE of "goose", goose's DefaultLockID
        ("goose", big(keys::goose_lock_id())),
        // FNV-1 32 of migrate apply's lock name
        (
            "atlas",
            big(keys::atlas_lock_id(keys::ATLAS_APPLY_LOCK_NAME)),
        ),
        ("sqitch", big(keys::SQITCH_LOCK_ID)),
        ("node-pg-migrate", big(keys::NODE_PG_MIGRATE_LOCK_ID)),
        ("kysely", big(keys::KYSELY_LOCK_ID)),
        ("kysely-xact", big(keys::KYSELY_LOCK_ID)),
        // :erlang.phash2({:ecto, nil, MyApp.Repo})
        ("ecto", big(keys::ecto_lock_id("MyApp.Repo"))),
        ("airflow", big(keys::AIRFLOW_MIGRATIONS_LOCK_ID)),
        ("que", big(keys::QUE_FIRST_JOB_ID)),
        ("tern", big(keys::TERN_LOCK_ID)),
        // ("databasechangeloglock".hashCode(), "public".hashCode())
        ("liquibase-sessionlock", {
            let (a, b) = keys::liquibase_sessionlock_key("databasechangeloglock", "public");
            Key::Pair(a, b)
        }),
    ];
    for (name, want) in &cases {
        let p = shipped(name);
        assert_eq!(key_of(&p), *want, "{name}");
        // Every key in its script is that key.
        let topo = on_direct(&p);
        for op in topo.workload.script.iter().flat_map(|g| &g.ops) {
            if let Some(k) = op.key {
                assert_eq!(k, *want, "{name}: {:?}", op.op);
            }
        }
    }
    // Profiles of an application's queries rather than a lock protocol: no lock op, no key
    // of their own (the workload's default keys are only probed by evidence replays).
    for name in WITHOUT_LOCK {
        let topo = on_direct(&shipped(name));
        for op in topo.workload.script.iter().flat_map(|g| &g.ops) {
            assert!(
                op.key.is_none() && !op.op.takes_key() && op.op != Op::UnlockAll,
                "{name}: a lock op in a profile listed without one: {:?}",
                op.op
            );
        }
    }
    let named: BTreeSet<&str> = cases
        .iter()
        .map(|(n, _)| *n)
        .chain(WITHOUT_LOCK.iter().copied())
        .collect();
    for name in all_shipped() {
        assert!(
            named.contains(name.as_str()),
            "{name}: a profile without its key's derivation in this test"
        );
    }
    // The values themselves, as the tools' sources give them for `chaos`.
    assert_eq!(
        keys::rails_migrator_lock_id("chaos"),
        4_560_344_785_677_148_545
    );
    assert_eq!(
        keys::golang_migrate_lock_id("/chaos", "public", "schema_migrations"),
        2_850_675_161
    );
    assert_eq!(keys::sqlx_lock_id("chaos"), 2_280_172_391_728_170_742);
    assert_eq!(
        keys::flyway_lock_id("public", "flyway_schema_history"),
        77_433_833_903_597
    );
    assert_eq!(keys::goose_lock_id(), 4_097_083_626);
    assert_eq!(
        keys::atlas_lock_id(keys::ATLAS_APPLY_LOCK_NAME),
        2_686_470_616
    );
    assert_eq!(
        keys::liquibase_sessionlock_key("databasechangeloglock", "public"),
        (-1_497_367_772, -977_423_767)
    );
}

/// Shipped profiles that take no advisory lock (an application's queries, or a tool's
/// LISTEN/NOTIFY path alone).
const WITHOUT_LOCK: [&str; 2] = ["rails-prepared", "que-listen"];

fn all_shipped() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// goose's unlock is retried while it returns false: the first unlock guarded as written,
/// then pauses and unlocks while unreleased, then the raise.
#[test]
fn an_unlock_retry_compiles_to_unreleased_steps() {
    let p = shipped("goose");
    let topo = on_direct(&p);
    let ops = &topo.workload.script[0].ops;
    let unlocks: Vec<_> = ops.iter().filter(|o| o.op == Op::Unlock).collect();
    assert_eq!(unlocks.len(), 31, "unlockProbe 30 retries: 31 unlocks");
    assert_eq!(unlocks[0].when, crate::vocab::When::Held);
    assert!(
        unlocks[1..]
            .iter()
            .all(|o| o.when == crate::vocab::When::Unreleased)
    );
    let at = ops.iter().position(|o| o.op == Op::Unlock).unwrap();
    let pauses = ops[at..]
        .iter()
        .filter(|o| o.op == Op::Sleep && o.when == crate::vocab::When::Unreleased)
        .count();
    assert_eq!(pauses, 30);
    assert!(
        ops[at..]
            .iter()
            .all(|o| o.op != Op::Sleep || o.ms == Some(200))
    );
    let e = Profile::parse(
        "tool: x\nworkload:\n  keys: [1]\n  script:\n    - ops:\n        - { lock: 1, attempts: 2 }\n",
        Path::new("p.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`attempts` retries a try or an unlock"), "{e}");
}

#[test]
fn every_shipped_profile_parses_with_five_replicas_and_expectations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let mut n = 0;
    // `detect:` is accepted (pgchaos init reads it); a profile without it is still valid.
    Profile::parse(
        "tool: x\ndetect:\n  - { ecosystem: go, package: a/b }\nworkload:\n  keys: [1]\n  script:\n    - ops: [ping]\n",
        Path::new("p.yaml"),
    )
    .unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        n += 1;
        let p = Profile::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
        let topo = on_direct(&p);
        for g in &topo.workload.script {
            assert_eq!(g.clients, 5, "{}: five replicas (a deploy)", p.name);
        }
        for t in DEFAULT_TOPOLOGIES {
            assert!(
                p.expected.contains_key(t),
                "{}: no expected cell for {t}",
                p.name
            );
        }
    }
    assert!(
        n >= 20,
        "nine profiles of seven tools, and issue 19's eleven: {n}"
    );
}

/// Flyway's retries expand into guarded pauses and tries; Rails' checked unlock is a raise
/// after it.
#[test]
fn retries_and_checks_compile_to_guarded_steps() {
    let p = shipped("flyway");
    let topo = on_direct(&p);
    let ops = &topo.workload.script[0].ops;
    let tries = ops.iter().filter(|o| o.op == Op::TryXactLock).count();
    assert_eq!(tries, 51, "lockRetryCount 50: 51 attempts");
    let pauses: Vec<_> = ops.iter().filter(|o| o.op == Op::Sleep).collect();
    assert_eq!(pauses.len(), 50);
    assert!(
        pauses
            .iter()
            .all(|s| s.ms == Some(100) && s.when == crate::vocab::When::NotHeld)
    );
    assert_eq!(
        ops[1].when,
        crate::vocab::When::Ok,
        "the first try as written"
    );
    assert_eq!(
        ops[3].when,
        crate::vocab::When::NotHeld,
        "retries only while not held"
    );
    let raise = ops.iter().find(|o| o.op == Op::Raise).unwrap();
    assert_eq!(raise.when, crate::vocab::When::LastFailed);
    assert!(
        raise
            .message
            .as_deref()
            .unwrap()
            .contains("Number of retries exceeded")
    );
}

#[test]
fn composition_keeps_the_profiles_lines_and_replaces_the_servers() {
    let p = shipped("rails");
    let base = "# a comment\nname: mine\npostgres:\n  version: \"18.6\"\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transaction\nworkload:\n  keys: [1]\nrun:\n  cases: 9\nexpect:\n  app.progress: violated\n";
    let c = Compose {
        replicas: Some(3),
        seed: 7,
        ..Compose::default()
    };
    let (text, topo) = p.compose(base, "mine", &c).unwrap();
    let src: Vec<&str> = p.text.lines().collect();
    let out: Vec<&str> = text.lines().collect();
    let at = src.iter().position(|l| l.starts_with("workload:")).unwrap();
    assert_eq!(out[at], src[at], "workload at the profile's own line");
    assert_eq!(topo.name, "rails--mine");
    assert_eq!(topo.workload.clients, 3, "--replicas");
    assert_eq!(topo.run.seed, Some(7));
    assert_eq!(topo.run.cases, 1);
    assert!(topo.expect.is_empty(), "the base's expect block is dropped");
    assert_eq!(
        topo.pooler
            .as_ref()
            .and_then(|p| p.config::<crate::pooler::pgbouncer::PgbouncerSpec>())
            .map(|b| b.pool_mode.as_str()),
        Some("transaction")
    );
    assert!(text.contains("# tool: Rails"), "profile keys commented out");
    // A group's count with a comment after it is replaced too (que-listen's groups).
    let p = shipped("que-listen");
    let (text, topo) = p.compose(base, "mine", &c).unwrap();
    assert!(
        topo.workload.script.iter().all(|g| g.clients == 3),
        "{text}"
    );
    assert!(text.contains("- clients: 3                    # the worker processes' lockers"));
    assert_eq!(
        replicas_line("  - clients: 5 # x", None),
        "  - clients: 5 # x"
    );
    assert_eq!(
        replicas_line("  - clients: five", Some(2)),
        "  - clients: five"
    );
}

#[test]
fn a_bad_script_is_reported_at_the_profiles_line_and_column() {
    let text = "tool: x\nworkload:\n  keys: [1]\n  script:\n    - clients: 2\n      ops:\n        - try_lock: 1\n        - { unlock: 1, when: sometimes }\n";
    let e = Profile::parse(text, Path::new("profiles/bad.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("profiles/bad.yaml:8:"), "{e}");
    assert!(e.contains("unknown `when` condition `sometimes`"), "{e}");
    let e = Profile::parse(
        "tool: x\nexpected: { direct: fine }\nworkload: {}\n",
        Path::new("p.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown outcome class \"fine\""), "{e}");
    let e = Profile::parse(
        "tool: x\nworkload:\n  keys: [1]\n  script:\n    - ops: [raise]\n",
        Path::new("p.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`raise` needs the tool's error message"), "{e}");
    let e = Profile::parse(
        "tool: x\nworkload:\n  keys: [1]\n  script:\n    - ops:\n        - { try_lock: 1, pause: 1s }\n",
        Path::new("p.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("p.yaml:6:") && e.contains("give `attempts`"),
        "{e}"
    );
}

#[test]
fn classes_follow_the_facts_worst_first() {
    let mut f = RunFacts::default();
    assert_eq!(f.classes(false), BTreeSet::from([Class::Safe]));
    f.raised.insert("ConcurrentMigrationError".into(), 4);
    assert_eq!(f.classes(false), BTreeSet::from([Class::ErrorPath]));
    let mut stop = RunFacts::default();
    stop.raised
        .insert(format!("{HARNESS_STOP} still waiting"), 1);
    assert_eq!(
        stop.classes(false),
        BTreeSet::from([Class::Safe]),
        "the harness's stop is not the tool's error"
    );
    assert!(
        stop.classes(true).contains(&Class::Stuck),
        "a retry loop that never gives up, stopped at the harness's patience"
    );
    f.lock_timeouts = 1;
    assert!(
        !f.classes(false).contains(&Class::Stuck),
        "the tool's own timeout"
    );
    assert!(
        f.classes(true).contains(&Class::Stuck),
        "a tool that waits forever"
    );
    f.leaked.push("pid 1 key 2".into());
    assert!(
        !f.classes(false).contains(&Class::Leaked),
        "rows alone are not a verdict"
    );
    f.violated.insert("app.no_orphans".into());
    f.violated.insert("app.applied_once".into());
    let c = f.classes(false);
    assert_eq!(c.first(), Some(&Class::RanTwice), "worst first: {c:?}");
    assert!(c.contains(&Class::Leaked) && !c.contains(&Class::Safe));
    assert!(!f.pg_violated());
    f.violated.insert("pg.exclusion".into());
    assert!(f.pg_violated());
    // A missed notification: below stuck, above the tool's own error path.
    let mut m = RunFacts::default();
    m.violated.insert("app.notifications_arrive".into());
    assert_eq!(m.classes(false), BTreeSet::from([Class::Missed]));
    m.raised.insert("Que::Error".into(), 1);
    assert_eq!(m.classes(false).first(), Some(&Class::Missed));
    m.violated.insert("app.progress".into());
    assert_eq!(m.classes(false).first(), Some(&Class::Stuck));
    // Every class that rests on an invariant is reached by that invariant alone (the
    // mapping has a row for each), and an unjudged one is a class invariant to show.
    for c in Class::ALL {
        for inv in c.invariants() {
            let mut one = RunFacts::default();
            one.violated.insert((*inv).to_string());
            let got = one.classes(false);
            assert_eq!(got.first(), Some(&c), "{inv}");
            assert!(RunFacts::class_invariant(inv), "{inv}");
        }
    }
    assert!(!RunFacts::class_invariant("app.settings_stay_put"));
    for c in Class::ALL {
        assert_eq!(Class::from_name(c.name()), Some(c));
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            format!("\"{}\"", c.name())
        );
    }
}

/// Rails with prepared statements: one Parse per replica before its first execution (the
/// statement pool's first `conn.prepare`), every later query a Bind of that statement, each
/// checked by a raise of Rails' error right after it, and no lock anywhere.
#[test]
fn rails_prepared_prepares_once_and_checks_every_execution() {
    use crate::vocab::When;
    let p = shipped("rails-prepared");
    let topo = on_direct(&p);
    assert_eq!(topo.workload.script.len(), 1);
    let ops = &topo.workload.script[0].ops;
    let prepares: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].op == Op::PrepareProtocol)
        .collect();
    assert_eq!(prepares, vec![0], "one Parse, the replica's first op");
    let executes: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].op == Op::ExecuteProtocol)
        .collect();
    assert!(executes.len() >= 3, "several requests: {executes:?}");
    for &i in &executes {
        let next = &ops[i + 1];
        assert_eq!(next.op, Op::Raise, "step {i}: a raise after each execution");
        assert_eq!(next.when, When::LastFailed);
        assert!(
            next.message
                .as_deref()
                .unwrap()
                .contains("PG::InvalidSqlStatementName"),
            "{next:?}"
        );
    }
    // The writes run in a transaction whose error path rolls back.
    let begins = ops.iter().filter(|o| o.op == Op::Begin).count();
    let rollbacks: Vec<_> = ops.iter().filter(|o| o.op == Op::Rollback).collect();
    assert!(begins >= 1);
    assert_eq!(rollbacks.len(), begins);
    assert!(rollbacks.iter().all(|o| o.when == When::LastFailed));
    assert!(ops.iter().all(|o| !o.op.acquires()));
    assert_eq!(
        p.expected.get("transaction-mode-prepared"),
        Some(&Class::ErrorPath)
    );
}

/// Que's LISTEN path: lockers that LISTEN and stay listening (no unlisten, no disconnect:
/// a locker that stopped could not be judged), enqueuers that NOTIFY after them, no lock.
#[test]
fn que_listen_listens_then_waits_and_enqueuers_notify() {
    let p = shipped("que-listen");
    let topo = on_direct(&p);
    let groups = &topo.workload.script;
    assert_eq!(groups.len(), 2, "lockers and enqueuers");
    let (lockers, enqueuers) = (&groups[0].ops, &groups[1].ops);
    assert_eq!(lockers[0].op, Op::Listen, "the locker's first statement");
    assert!(lockers.iter().all(|o| !matches!(
        o.op,
        Op::Unlisten | Op::Notify | Op::Disconnect | Op::DiscardAll
    )));
    assert!(enqueuers.iter().any(|o| o.op == Op::Notify));
    assert!(enqueuers.iter().all(|o| o.op != Op::Listen));
    assert!(
        enqueuers[0].op == Op::Sleep,
        "the enqueuers start after the lockers' LISTEN"
    );
    assert_eq!(p.expected.get("direct"), Some(&Class::Safe));
    assert_eq!(
        p.expected.get("transaction-mode-reset-always"),
        Some(&Class::Missed)
    );
}

/// Every unsafe class a shipped profile expects anywhere has its fix written: the answer
/// table prints one under every unsafe cell.
#[test]
fn every_expected_unsafe_class_has_a_fix() {
    let mut missing = vec![];
    let mut fixes = 0;
    for name in all_shipped() {
        let p = shipped(&name);
        for (t, c) in &p.expected {
            if c.is_unsafe() && !p.fix.contains_key(c) {
                missing.push(format!("{name}: {c} (expected on {t})"));
            }
        }
        fixes += p.fix.len();
    }
    assert!(
        missing.is_empty(),
        "no fix written for:\n{}",
        missing.join("\n")
    );
    assert!(fixes >= 17, "only {fixes} fixes in the shipped profiles");
}

#[test]
fn a_fix_is_by_unsafe_class_and_its_text_is_one_line() {
    let base = "tool: x\nworkload:\n  keys: [1]\n  script:\n    - ops: [ping]\n";
    let p = Profile::parse(
        &format!("fix:\n  ran twice: >-\n    Run it\n    directly.\n  stuck: wait less\n{base}"),
        Path::new("p.yaml"),
    )
    .unwrap();
    assert_eq!(p.fix[&Class::RanTwice], "Run it directly.");
    assert_eq!(p.fix[&Class::Stuck], "wait less");
    for (bad, why) in [
        (
            "fix: { error path: x }\n",
            "fix.error path: not an unsafe outcome class",
        ),
        (
            "fix: { fine: x }\n",
            "fix.fine: not an unsafe outcome class",
        ),
        (
            "fix: { leaked: \"a\\rb\" }\n",
            "fix.leaked: a control character '\\r'",
        ),
        ("fix: { leaked: \" \" }\n", "fix.leaked: empty"),
    ] {
        let e = Profile::parse(&format!("{bad}{base}"), Path::new("p.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}
