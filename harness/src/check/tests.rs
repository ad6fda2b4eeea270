//! The checker's tests on recorded and written histories.

//! The checker on small hand-written histories (`tests/fixtures/histories/*.jsonl`): for
//! every invariant, one history where it holds and one where it is violated, with the
//! evidence text the violation must carry.
use super::*;
use crate::history::HistoryReader;
use std::collections::BTreeSet;
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/histories");

fn check_file(name: &str) -> (RunCheck, CaseCheck) {
    let path = Path::new(FIXTURES).join(format!("{name}.jsonl"));
    let run = check_history(HistoryReader::open(&path).unwrap()).unwrap();
    let events: Vec<Event> = HistoryReader::open(&path)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    let case = crate::history::view::cases(&events)[0].to_vec();
    let verdict = check_case(&CheckContext::of(&run.header), &case).unwrap();
    (run, verdict)
}

/// `(fixture stem, invariant, what the violation says)`.
const TABLE: &[(&str, &str, &str)] = &[
    (
        "exclusion",
        "pg.exclusion",
        "key 7 granted to 2 backends at once: pid 101",
    ),
    (
        "double-grant",
        "pg.exclusion",
        "C2 try_lock 7 replied true on pid 102 (backend_start 2026-11-30 00:53:20.000002+00) at 0.012 ms: no order of the case's operations explains it: the model predicts false",
    ),
    (
        "replies-match-model",
        "pg.replies_match_model",
        "C1 unlock 7 replied true on pid 101 (backend_start 2026-11-30 00:53:20.000001+00) at 0.009 ms: no order of the case's operations explains it: the model predicts false",
    ),
    (
        "locks-match-model",
        "pg.locks_match_model",
        "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding nothing, the model 7",
    ),
    (
        "xact-released-at-end",
        "pg.xact_released_at_end",
        "after commit: a fresh contender could not take key 7 (expected available)",
    ),
    (
        "xact-sample",
        "pg.xact_released_at_end",
        "a look at pg_locks at 0.011 ms: no order of the case's operations explains it: pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding 7, the model nothing",
    ),
    (
        "session-survives-rollback",
        "pg.session_survives_rollback",
        "after rollback: a fresh contender could take key 7 (expected held",
    ),
    (
        "stacking",
        "pg.stacking",
        "after unlock: a fresh contender could take key 7 (expected held",
    ),
    (
        "terminate-releases",
        "pg.terminate_releases",
        "is still in pg_stat_activity after terminate ended it",
    ),
    (
        "cancel-keeps-session-locks",
        "pg.cancel_keeps_session_locks",
        "after cancel: a fresh contender could take key 7 (expected held",
    ),
    (
        "silent-drop",
        "pg.locks_match_model",
        "pid 101 (backend_start 2026-11-30 00:53:20.000001+00) is missing from pg_stat_activity, and nothing ended it",
    ),
    (
        "split-transaction",
        "pg.replies_match_model",
        "C1 try_lock 7 replied true on pid 102",
    ),
    (
        "grant-beside",
        "pg.exclusion",
        "key 7 granted to 2 backends at once",
    ),
    (
        "closed-keeps-the-end",
        "pg.locks_match_model",
        "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding nothing, the model 7",
    ),
    (
        "mutual-exclusion",
        "app.mutual_exclusion",
        "C1 and C2 both believe they hold key 7",
    ),
    (
        "no-orphans",
        "app.no_orphans",
        "backend pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holds key 7, but no client believes it holds it",
    ),
    (
        "exiting-partial",
        "pg.locks_match_model",
        "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding 8",
    ),
    (
        "sample-parts",
        "pg.locks_match_model",
        "SHOW SERVERS lists pid 101 (backend_start 2026-11-30 00:53:20.000001+00), which pooler_kill dropped with every other server",
    ),
    (
        "reconnect-login",
        "pg.replies_match_model",
        "C1 try_lock 7 replied error 08P01",
    ),
    (
        "replica",
        "pg.replies_match_model",
        "C3 try_lock 7 replied false on pid 102 (backend_start 2026-11-30 00:53:20.000002+00)",
    ),
    (
        "handover",
        "pg.replies_match_model",
        "C2 unlock 7 replied true on pid 101 (backend_start 2026-11-30 00:53:20.000001+00)",
    ),
    (
        "reset-pending",
        "app.no_orphans",
        "backend pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holds key 7, but no client believes it holds it",
    ),
    (
        "failed-lock-not-held",
        "app.failed_lock_not_held",
        "C2's lock call on 7 failed with 55P03 at 1010.000 ms, yet no order of what followed explains the servers without it granted",
    ),
    (
        "unlock-reaches-owner",
        "app.unlock_reaches_owner",
        "C1 unlocked 7, which it took on pid 101 (backend_start 2026-11-30 00:53:20.000001+00), but the unlock ran on pid 102",
    ),
    (
        "rollback-releases",
        "app.rollback_releases",
        "C1 rolled back, but key 7, taken in that transaction, is still held by its backend pid 101",
    ),
    (
        "progress",
        "app.progress",
        "C2 ping took 4.080 s, its bound is 2.000 s (it never completed: the client gave up). At the deadline: (sample at 2100.000 ms) C2 ping (2.080 s so far) waits for a connection from the application pool (1/1 open, 0 idle, 1 waiting), its connections held by C1; a new connection to PostgreSQL as a client: refused 53300",
    ),
    (
        // Recorded on pgpool-II 4.3.5: three clients keep their connections on two
        // children (harness/tests/pgpool.rs); with three children it holds.
        "progress-open",
        "app.progress",
        "C3 open took 2.502 s, its bound is 0.500 s (it never completed: the client gave up). At the deadline: (sample at 733.168 ms) C3 open (0.506 s so far) waits for the pooler to accept it: its 2 client connections are served (slot 1946 on pid 1998",
    ),
    (
        "applied-once",
        "app.applied_once",
        "migration version 1 applied 2 times: C1 (step 1), C2 (step 2) (C2 replied error 42P07)",
    ),
    (
        "no-stale-holder",
        "app.no_stale_holder",
        "C1 believes it holds 7, but the backend that granted it (pid 101 (backend_start 2026-11-30 00:53:20.000001+00)) was terminated",
    ),
    (
        "show-matches",
        "pg.show_matches",
        "C2 show lock_timeout replied default on pid 101 (backend_start 2026-11-30 00:53:20.000001+00) at 0.008 ms: no order of the case's operations explains it: the model predicts 1100 on pid 101",
    ),
    (
        // A tracked setting lost on the way to C1's second server (`PoolRules::tracked_settings`).
        "settings-tracked",
        "pg.show_matches",
        "C1 show search_path replied default on pid 102 (backend_start 2026-11-30 00:53:20.000002+00)",
    ),
    (
        "settings-stay-put",
        "app.settings_stay_put",
        "C2 read lock_timeout = 1100 (the value C1 sets) on pid 101 (backend_start 2026-11-30 00:53:20.000001+00), but its own session has default",
    ),
    (
        "objects-match",
        "pg.objects_match",
        "C2 execute replied error 26000 on pid 101",
    ),
    (
        "prepared-statements-follow",
        "app.prepared_statements_follow",
        "C2 execute found the prepared statement of C1 on pid 101",
    ),
    (
        "prepared-protocol",
        "app.prepared_statements_follow",
        "C1 execute_protocol found no protocol-level prepared statement (26000), but its own session has its own protocol-level prepared statement",
    ),
    (
        "temp-state-follows",
        "app.temp_state_follows",
        "C1 read_temp found no temporary table (42P01) on pid 102",
    ),
    (
        "notification-matches",
        "pg.notification_matches",
        "was not listening on pgchaos when the NOTIFY of \"C2 s3\" committed",
    ),
    (
        "notifications-arrive",
        "app.notifications_arrive",
        "C1 listened (step 1) and stayed, but never received C2's notification \"C2 s1\" (step 2,",
    ),
    (
        // C2's first ping after C1 (a listener) left got the reply to PgBouncer's DISCARD
        // ALL: no identity row (docs/session-state.md, "Replies out of step").
        "replies-in-step",
        "app.replies_in_step",
        "C2 ping (step 3) at 0.010 ms got a reply to another statement: ping returns an identity row, but none came",
    ),
    (
        "no-lost-lock",
        "app.no_lost_lock",
        "C1 believes it holds 7, but pooler_reconnect closed the backend that granted it (pid 101 (backend_start 2026-11-30 00:53:20.000001+00))",
    ),
];

#[test]
fn every_invariant_has_a_history_where_it_holds_and_one_where_it_is_violated() {
    let covered: Vec<&str> = TABLE.iter().map(|(_, i, _)| *i).collect();
    for i in catalog() {
        assert!(covered.contains(&i.name), "no fixture for {}", i.name);
    }
    for (stem, inv, detail) in TABLE {
        let (_, holds) = check_file(&format!("{stem}-holds"));
        let wrong: Vec<&Violation> = holds
            .violations
            .iter()
            .filter(|v| v.invariant == *inv || v.invariant.starts_with("pg."))
            .collect();
        assert!(wrong.is_empty(), "{stem}-holds: {wrong:?}");
        let (run, violated) = check_file(&format!("{stem}-violated"));
        let found: Vec<&Violation> = violated
            .violations
            .iter()
            .filter(|v| v.invariant == *inv)
            .collect();
        assert!(
            !found.is_empty(),
            "{stem}-violated does not violate {inv}: {violated:?}"
        );
        assert!(
            found.iter().any(|v| v.detail.contains(detail)),
            "{stem}-violated: {inv} evidence {:?} lacks {detail:?}",
            found.iter().map(|v| &v.detail).collect::<Vec<_>>()
        );
        // The run-level tally agrees with the case.
        assert_eq!(run.tally.violating_cases.get(*inv), Some(&1), "{stem}");
    }
}

/// The replica fixture's violation is the replica rule's: the same history with one
/// pooler of the same two servers (every server anyone's) holds.
#[test]
fn a_server_of_another_replica_is_what_the_replica_history_violates() {
    let path = Path::new(FIXTURES).join("replica-violated.jsonl");
    let mut events: Vec<Event> = HistoryReader::open(&path)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    let Body::Run(h) = &mut events[0].body else {
        panic!("a run header first")
    };
    assert_eq!((h.rules.replicas, h.rules.pool_size), (2, 1));
    h.rules.replicas = 1;
    h.rules.pool_size = 2;
    let ctx = CheckContext::of(h);
    let case = crate::history::view::cases(&events)[0].to_vec();
    let one = check_case(&ctx, &case).unwrap();
    assert!(one.violations.is_empty(), "{:?}", one.violations);
    let (_, two) = check_file("replica-violated");
    assert!(
        two.violations.iter().any(|v| v
            .detail
            .contains("is a server of pooler replica 2 and C3 connects to replica 1")),
        "{:?}",
        two.violations
    );
}

/// The settings fixtures turn on the reset rule: the default C2 reads after C1's SET is
/// explained exactly when a reset that clears settings ran between them (session mode when
/// C1 leaves; transaction mode only with `server_reset_query_always`).
#[test]
fn a_reset_that_clears_settings_is_what_explains_the_default() {
    let judged = |name: &str, edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
        let mut events = events_of(name);
        let Body::Run(h) = &mut events[0].body else {
            panic!("a run header first")
        };
        edit(&mut h.rules);
        let ctx = CheckContext::of(h);
        let case = crate::history::view::cases(&events)[0].to_vec();
        check_case(&ctx, &case).unwrap().violations
    };
    let shows = |v: &[Violation]| v.iter().any(|v| v.invariant == "pg.show_matches");
    // Session mode: DISCARD ALL at C1's disconnect; a reset that leaves settings alone
    // (`SELECT pg_advisory_unlock_all()`) cannot explain C2's default.
    assert!(!shows(&judged("settings-stay-put-holds", &|_| {})));
    assert!(shows(&judged("settings-stay-put-holds", &|r| {
        r.reset_clears_settings = false
    })));
    // Transaction mode: no reset between clients, unless at every release.
    assert!(shows(&judged("show-matches-violated", &|_| {})));
    assert!(!shows(&judged("show-matches-violated", &|r| {
        r.reset_always = true
    })));
    // Histories written before settings were modelled read as resets that clear none.
    let old: crate::pooler::PoolRules = serde_json::from_str(
        r#"{"mode":"session","pool_size":1,"reset_releases_locks":true,"reset_always":false}"#,
    )
    .unwrap();
    assert!(!old.reset_clears_settings);
}

/// The protocol-level fixture turns on the tracking rule: C1's Bind/Execute on a second
/// server fails with 26000 unless the pooler carries its statement there
/// (`PoolRules::tracks_prepared`); with tracking, it is the 26000 that no order explains.
#[test]
fn tracking_is_what_carries_a_protocol_statement() {
    let judged = |edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
        let mut events = events_of("prepared-protocol-violated");
        let Body::Run(h) = &mut events[0].body else {
            panic!("a run header first")
        };
        edit(&mut h.rules);
        let ctx = CheckContext::of(h);
        let case = crate::history::view::cases(&events)[0].to_vec();
        let v = check_case(&ctx, &case).unwrap().violations;
        v.into_iter().map(|v| v.invariant).collect::<BTreeSet<_>>()
    };
    let untracked = judged(&|_| {});
    assert!(
        !untracked.iter().any(|i| i.starts_with("pg.")),
        "{untracked:?}"
    );
    assert!(untracked.contains("app.prepared_statements_follow"));
    let tracked = judged(&|r| r.tracks_prepared = true);
    assert!(tracked.contains("pg.objects_match"), "{tracked:?}");
    // Histories written before objects were modelled read as no tracking.
    let old: crate::pooler::PoolRules = serde_json::from_str(
        r#"{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false}"#,
    )
    .unwrap();
    assert!(!old.tracks_prepared && !old.reset_clears_objects);
}

/// The tracked-settings fixture (transaction mode, two servers, `search_path` tracked):
/// C2 reads the default on the server C1's SET left, and C1 reads its own value on a
/// second server. Both are explained exactly when the pooler restores each client's
/// tracked value at link (`PoolRules::tracked_settings`); without the rule both reads are
/// replies no order explains, and a tracked `lock_timeout` changes nothing.
#[test]
fn tracking_is_what_makes_a_setting_follow_its_client() {
    let judged = |edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
        let mut events = events_of("settings-tracked-holds");
        let Body::Run(h) = &mut events[0].body else {
            panic!("a run header first")
        };
        edit(&mut h.rules);
        let ctx = CheckContext::of(h);
        let case = crate::history::view::cases(&events)[0].to_vec();
        let v = check_case(&ctx, &case).unwrap();
        (
            v.violations
                .iter()
                .map(|v| v.invariant.clone())
                .collect::<BTreeSet<_>>(),
            v.undecided.is_empty(),
        )
    };
    let (tracked, judged_all) = judged(&|_| {});
    assert!(tracked.is_empty(), "{tracked:?}");
    assert!(judged_all);
    let (untracked, _) = judged(&|r| r.tracked_settings.clear());
    assert!(untracked.contains("pg.show_matches"), "{untracked:?}");
    let (other, _) = judged(&|r| r.tracked_settings = vec![crate::vocab::Guc::LockTimeout]);
    assert!(other.contains("pg.show_matches"), "{other:?}");
    // Histories written before tracking was modelled track nothing.
    let old: crate::pooler::PoolRules = serde_json::from_str(
        r#"{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false}"#,
    )
    .unwrap();
    assert!(old.tracked_settings.is_empty());
}

/// NOTIFY's commit lock: a `notify` that fails with 55P03 is explained only while another
/// client's `notify` (or `commit`) overlaps it in real time, and then sends nothing; alone,
/// PostgreSQL has no reason to refuse it (docs/session-state.md, "NOTIFY's commit lock").
#[test]
fn a_notify_times_out_on_the_commit_lock_only_beside_another() {
    let head =
        std::fs::read_to_string(Path::new(FIXTURES).join("notification-matches-holds.jsonl"))
            .unwrap();
    let head: Vec<&str> = head.lines().take(6).collect();
    let history = |c2_inv: u64, c2_done: u64| {
        let mut lines: Vec<String> = head.iter().map(|l| l.to_string()).collect();
        lines.push(r#"{"t":5010,"type":"invoke","p":"C1","step":0,"f":"notify"}"#.into());
        lines.push(format!(
            r#"{{"t":{c2_inv},"type":"invoke","p":"C2","step":1,"f":"notify"}}"#
        ));
        lines.push(r#"{"t":6010,"type":"ok","p":"C1","step":0,"f":"notify","value":{"kind":"ok"},"backend":[101,1796000000000001]}"#.into());
        lines.push(format!(r#"{{"t":{c2_done},"type":"fail","p":"C2","step":1,"f":"notify","value":{{"kind":"error","code":"55P03","message":"canceling statement due to lock timeout"}},"backend":[102,1796000000000002]}}"#));
        lines.push(r#"{"t":12010,"type":"obs","at":"end","backends":[{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:53:20.000001+00","state":"idle","query":"/*pgchaos s0*/ SELECT"},{"id":[102,1796000000000002],"backend_start":"2026-11-30 00:53:20.000002+00","state":"idle","query":"/*pgchaos s0*/ SELECT"}]}"#.into());
        lines.push(r#"{"t":13010,"type":"probe","why":"end","key":7,"available":true}"#.into());
        lines.push(r#"{"t":14010,"type":"case_end","case":0,"steps_us":1,"reset_us":1}"#.into());
        lines.push(
            r#"{"t":15010,"type":"run_end","cases":1,"stopped_by_time_limit":false,"run_ms":1}"#
                .into(),
        );
        judge_lines(lines.iter().map(String::as_str))
            .violations
            .iter()
            .map(|v| v.invariant.clone())
            .collect::<Vec<String>>()
    };
    // C2's notify runs while C1's commits: the lock timeout is PostgreSQL's answer.
    let beside = history(5500, 6500);
    assert!(!beside.iter().any(|i| i.starts_with("pg.")), "{beside:?}");
    // C2's notify starts after C1's ended: nothing held the lock.
    let alone = history(7010, 8010);
    assert!(
        alone.iter().any(|i| i == "pg.replies_match_model"),
        "{alone:?}"
    );
}

/// Recorded on PostgreSQL 18.6 (direct, concurrent schedule, this 2-core machine):
/// C2's backend held 612001 and 4242424242 and exited at C2's disconnect; C3, waiting for
/// 612001, was granted it, and its next statement, a try_lock of 4242424242, was refused:
/// the exit had released one key and not yet the other (`LockReleaseAll` goes one lock
/// partition at a time). No pg.* verdict. The same history with C2's second call on
/// 612001, so that no backend ever held 4242424242, is still violated: the rule excuses a
/// refusal only while an exiting backend holds the key.
#[test]
fn an_exit_releases_one_key_at_a_time() {
    let text = fixture_text("exit-releases-one-key-at-a-time");
    let pg = |text: &str| pg_verdicts(text, true);
    assert_eq!(pg(&text), Vec::<String>::new());
    // C2's second call takes 612001 again (stacked) instead of 4242424242: its backend
    // never holds 4242424242, and C3's refusal has nothing to explain it.
    let other = r#""p":"C2","step":2,"f":"try_lock","key":4242424242"#;
    assert_eq!(text.matches(other).count(), 1, "{text}");
    let edited = text.replace(other, r#""p":"C2","step":2,"f":"try_lock","key":612001"#);
    let v = pg(&edited);
    assert!(
        v.iter()
            .any(|l| l.starts_with("pg.replies_match_model: C3 try_lock 4242424242 replied false")),
        "{v:?}"
    );
}

/// `app.notifications_arrive` judges both ways, and says unknown where it cannot: a
/// client that listened and stopped may or may not have heard.
#[test]
fn notifications_are_judged_both_ways_or_left_unknown() {
    let (_, v) = check_file("notifications-arrive-violated");
    let lines: Vec<&str> = v
        .violations
        .iter()
        .filter(|x| x.invariant == notify::NAME)
        .map(|x| x.detail.as_str())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().any(|l| l
            .starts_with("C2 received a notification it never listened for: \"C2 s1\" on pid 101")),
        "{lines:?}"
    );
    assert!(!v.unknown_for(notify::NAME));
    let (_, holds) = check_file("notifications-arrive-holds");
    assert!(holds.undecided.is_empty(), "{holds:?}");
    // C1's LISTEN was rolled back: it does not listen at the end, having listened.
    let (run, rolled) = check_file("notification-matches-violated");
    assert!(!rolled.violates(notify::NAME));
    assert_eq!(rolled.undecided, [notify::NAME]);
    assert!(rolled.unknown_for(notify::NAME));
    assert_eq!(
        run.tally.unknown_indices.get(notify::NAME).map(Vec::len),
        Some(1)
    );
}

#[test]
#[ignore]
fn print_fixtures() {
    for (stem, inv, _) in TABLE {
        for v in ["holds", "violated"] {
            let (_, c) = check_file(&format!("{stem}-{v}"));
            eprintln!("== {stem}-{v} (want {inv}): unknown {:?}", c.unknown);
            for x in &c.violations {
                eprintln!("   {} @{}: {}", x.invariant, x.step, x.detail);
            }
        }
    }
}

#[test]
fn every_fixture_is_in_the_table() {
    for e in std::fs::read_dir(FIXTURES).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        let stem = name
            .trim_end_matches(".jsonl")
            .trim_end_matches("-holds")
            .trim_end_matches("-violated")
            .to_string();
        // Judged by a test of its own (its name says where).
        // an_exit_releases_one_key_at_a_time, a_cancelled_statement_on_a_new_connection_ran,
        // a_transaction_lock_outside_a_block_lasts_to_its_statement_end,
        // a_look_reads_pg_stat_activity_then_pg_locks, a_safe_restart_drains_before_it_exits,
        // tests_release::an_unlock_all_releases_one_key_at_a_time,
        // tests_unknown::a_notification_may_be_taken_after_the_next_op,
        // tests_unknown::a_pooler_listing_names_the_backend_its_pid_has_now
        let own = [
            "safe-restart-drains",
            "exit-releases-one-key-at-a-time",
            "cancelled-statement-on-a-new-connection",
            "xact-lock-held-to-statement-end",
            "look-reads-activity-then-locks",
            "unlock-all-releases-one-key-at-a-time",
            "notification-taken-after-the-next-op",
            "pids-repeat-after-a-host-restart",
        ];
        assert!(
            TABLE.iter().any(|(s, _, _)| *s == stem) || own.contains(&stem.as_str()),
            "{name} is not checked"
        );
    }
}

/// A statement cancelled before its identity row, sent on a connection its client opened
/// again: recorded on transaction-mode, concurrent schedule, seed 1, case 17 (2026-12-07). C4
/// disconnects, then its `begin` opens a new connection, is handed pid 20429 and is cancelled
/// there by C2's `cancel` (57014, no identity: BEGIN's row comes after it); C4 leaves inside
/// the aborted transaction, and PgBouncer closes 20429 with the locks it held. The model took
/// any error of a statement with no identity on a new connection for the connect's refusal,
/// and found "pid 20429 missing from pg_stat_activity, and nothing ended it"
/// (pg.locks_match_model). No pg.* verdict now; with the reply edited to a refusal (53300),
/// the statement never ran, and the same end look is violated.
#[test]
fn a_cancelled_statement_on_a_new_connection_ran() {
    let text = fixture_text("cancelled-statement-on-a-new-connection");
    let pg = |text: &str| pg_verdicts(text, false);
    assert_eq!(pg(&text), Vec::<String>::new());
    let cancelled = r#""code":"57014","message":"canceling statement due to user request""#;
    assert_eq!(text.matches(cancelled).count(), 1, "{text}");
    let refused = text.replace(
        cancelled,
        r#""code":"53300","message":"sorry, too many clients already""#,
    );
    let v = pg(&refused);
    assert!(
        v.iter().any(|l| l.starts_with("pg.locks_match_model")
            && l.contains("pid 20429 (backend_start 2026-12-07 03:13:17.417702+00) is missing")),
        "{v:?}"
    );
}

/// PgBouncer's SIGINT drains before it exits (`vocab::fault::Meaning::drains`): recorded on
/// transaction-mode-faults, concurrent schedule, seed 3, case 27 (2026-12-07, PgBouncer 1.25.2
/// from the source mirror, build d44e0af, whose header lacks `restart_drains`). C1 and C4
/// hold 612001 on pid 2024; the `pooler_restart` is sent; C4's `try_lock` still runs on 2024,
/// which closes at its release, and C3's `try_lock` (sent before the signal, handed pid 2025
/// before PgBouncer read it) is granted 612001 0.4 ms later, before the clients are dropped.
/// With the restart as one instant (the header as recorded) the model found it impossible
/// (pg.exclusion); with the drain, it holds. The drain must not excuse a statement sent after
/// the signal: moved to after the restart's invoke, C3's call is a violation again.
#[test]
fn a_safe_restart_drains_before_it_exits() {
    let recorded = fixture_text("safe-restart-drains");
    let pg = |text: &str| pg_verdicts(text, true);
    let rule = r#""closes_server_in_flight":true"#;
    assert_eq!(recorded.matches(rule).count(), 1);
    assert!(!recorded.contains("restart_drains"));
    let drains = recorded.replacen(rule, &format!(r#"{rule},"restart_drains":true"#), 1);
    let c3 = r#"C3 try_lock 612001 replied true on pid 2025 (backend_start 2026-12-07 15:58:13.911825+00)"#;
    let instant = pg(&recorded);
    assert!(
        instant
            .iter()
            .any(|l| l.starts_with("pg.exclusion") && l.contains(c3)),
        "{instant:?}"
    );
    assert_eq!(pg(&drains), Vec::<String>::new());
    // C3's call sent just after the restart's signal: no server may be handed out then.
    let mut lines: Vec<String> = drains.lines().map(str::to_string).collect();
    let sent = lines
        .iter()
        .position(|l| l.contains(r#""p":"C3","step":10,"f":"try_lock""#))
        .unwrap();
    let call = lines.remove(sent);
    let signal = lines
        .iter()
        .position(|l| l.contains(r#""type":"invoke","p":"nemesis","step":6,"f":"pooler_restart""#))
        .unwrap();
    let t = |l: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["t"].as_u64().unwrap()
    };
    let after = t(&lines[signal]) + 1;
    assert!(after < t(&lines[signal + 1]));
    let moved = call.replacen(
        &format!(r#""t":{}"#, t(&call)),
        &format!(r#""t":{after}"#),
        1,
    );
    lines.insert(signal + 1, moved);
    let late = pg(&(lines.join("\n") + "\n"));
    assert!(
        late.iter()
            .any(|l| l.starts_with("pg.exclusion") && l.contains(c3) && l.contains("(Draining)")),
        "{late:?}"
    );
}

/// A look is two reads, `pg_stat_activity` and then `pg_locks`: recorded on session-mode,
/// concurrent schedule, seed 1, a shrink replay of case 18 (2026-12-07, one run of four of
/// `tests/cli.rs`'s concurrent test, on the join that read them in that order too). The
/// sample at +6,377.099 ms lists pid 11279 (which a `terminate` was ending), idle after its
/// COMMIT, without its locks, and pid 11280 idle after step 23 yet holding 4242424242, which
/// its step 24 was granted when 11279's exit released it; pid 11281, already serving C2 by
/// then, is not listed (still logging in when pg_stat_activity was read). One read at one
/// instant explains none of it (`pg.terminate_releases`: "11279 still in pg_stat_activity
/// after terminate ended it; or 11281 missing"); pg_stat_activity before the exit and
/// pg_locks after the grant explain all of it. The locks read is still judged: with a lock on
/// 11280 that it never held (its later `unlock 612001` replied false) the look is violated.
#[test]
fn a_look_reads_pg_stat_activity_then_pg_locks() {
    let text = fixture_text("look-reads-activity-then-locks");
    let pg = |text: &str| pg_verdicts(text, true);
    assert_eq!(pg(&text), Vec::<String>::new());
    // The sample, edited as JSON.
    let edit = |f: &dyn Fn(&mut Vec<serde_json::Value>)| -> String {
        let mut hits = 0;
        let out: String = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                if v["t"] == 6_377_098_698u64 && v["type"] == "obs" {
                    hits += 1;
                    f(v["backends"].as_array_mut().unwrap());
                }
                v.to_string() + "\n"
            })
            .collect();
        assert_eq!(hits, 1);
        out
    };
    let is = |b: &serde_json::Value, pid: i64| b["id"][0] == pid;
    let foreign = edit(&|bs| {
        let b = bs.iter_mut().find(|b| is(b, 11280)).unwrap();
        b["locks"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"key": 612001, "mode": "ExclusiveLock", "granted": true}));
    });
    let v = pg(&foreign);
    assert!(
        v.iter()
            .any(|l| l.starts_with("pg.") && l.contains("pid 11280") && l.contains("612001")),
        "{v:?}"
    );
}

/// A transaction lock taken outside a block lasts to the end of its statement: recorded on
/// transaction-mode-xact, concurrent schedule, seed 1, a shrink replay of case 55
/// (2026-12-07). C2's `try_xact_lock 612001` (outside a block) read the server's clock at
/// +227,751..+227,759 µs and was granted; C1's `try_xact_lock 612001` inside its block read it
/// at +227,764..+227,776 µs, after C2's call, and was refused: C2's implicit transaction had not
/// yet committed. The model granted and released such a lock at one point, and the servers'
/// order put C2's call wholly before C1's, so the refusal was `pg.replies_match_model`. Now the
/// call is granted at a first point and released at the statement's end, and a
/// transaction-lock call orders by the clock only its own backend's later ops. With C2's reply
/// edited to a refusal, nobody held 612001 and C1's refusal is still violated.
#[test]
fn a_transaction_lock_outside_a_block_lasts_to_its_statement_end() {
    let text = fixture_text("xact-lock-held-to-statement-end");
    let pg = |text: &str| pg_verdicts(text, true);
    assert_eq!(pg(&text), Vec::<String>::new());
    let granted = r#""p":"C2","step":0,"f":"try_xact_lock","value":{"kind":"bool","value":true}"#;
    assert_eq!(text.matches(granted).count(), 1, "{text}");
    let refused = text.replace(
        granted,
        r#""p":"C2","step":0,"f":"try_xact_lock","value":{"kind":"bool","value":false}"#,
    );
    let v = pg(&refused);
    assert!(
        v.iter().any(|l| l.starts_with("pg.replies_match_model: C")
            && l.contains("try_xact_lock 612001 replied false")),
        "{v:?}"
    );
}

/// The verdicts of a one-client case: `op` on key 7 invoked at 5001, replied (`reply`, a
/// completion's body after `"f":op,`) at 6001 on backend 101, and a sample at `sample_t`
/// showing 101 holding key 7.
fn one_lock_call_with_a_look(op: &str, reply: &str, sample_t: u64) -> Vec<String> {
    let head = r#"{"t":0,"type":"run","format":"pgchaos-history/3","pgchaos":"fixture","topology":"fixture","topology_file":"fixture.yaml","pooler":"pgbouncer","rules":{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false},"seed":0,"launcher":"fixture","versions":{"postgres":"18.6","postgres_declared":"18.6","postgres_full":"PostgreSQL 18.6","pgbouncer":"1.25.2","pgbouncer_declared":"1.25.2","version_drift":[]},"ready_ms":0,"contender":[999,1796000000000999],"contender_start":"2026-11-30 00:00:00.000999+00","keys":[7],"started":"20261130T000000Z"}
{"t":1,"type":"case","case":0,"seed":1,"phase":"run","clients":1,"steps":1,"schedule":"concurrent"}
{"t":1001,"type":"invoke","p":"C1","f":"open"}
{"t":2001,"type":"ok","p":"C1","f":"open","value":{"kind":"ok"}}"#;
    let invoke = format!(r#"{{"t":5001,"type":"invoke","p":"C1","step":0,"f":"{op}","key":7}}"#);
    let held = r#"{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:00:00.000001+00","state":"active","query":"/*pgchaos s0*/ SELECT","locks":[{"key":7,"mode":"ExclusiveLock","granted":true}]}"#;
    let sample = format!(r#"{{"t":{sample_t},"type":"obs","at":"sample","backends":[{held}]}}"#);
    let reply = format!(
        r#"{{"t":6001,"p":"C1","step":0,"f":"{op}",{reply},"backend":[101,1796000000000001]}}"#
    );
    let tail = r#"{"t":9001,"type":"obs","at":"end","backends":[{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:00:00.000001+00","state":"idle","query":"/*pgchaos s0*/ SELECT"}]}
{"t":11001,"type":"case_end","case":0,"steps_us":1,"reset_us":1}
{"t":12001,"type":"run_end","cases":1,"stopped_by_time_limit":false,"run_ms":1}"#;
    let mut v = vec![head.to_string(), invoke];
    if sample_t < 6001 {
        v.extend([sample, reply]);
    } else {
        v.extend([reply, sample]);
    }
    v.push(tail.to_string());
    let text = v.join("\n");
    judge_lines(text.lines())
        .violations
        .iter()
        .map(|v| v.invariant.clone())
        .collect()
}

/// A look taken while a client's `try_xact_lock` outside a block runs sees the lock on its
/// backend: the client is taking it, and its statement will release it. Not an orphan (found
/// as `app.no_orphans` on transaction-mode-xact, concurrent schedule, seed 1, case 55,
/// 2026-12-07: a sample between the call and its reply). A look after the reply that still
/// shows the lock is violated.
#[test]
fn a_transaction_lock_seen_during_its_statement_is_no_orphan() {
    let verdicts = |t| {
        one_lock_call_with_a_look(
            "try_xact_lock",
            r#""type":"ok","value":{"kind":"bool","value":true}"#,
            t,
        )
    };
    assert_eq!(verdicts(5501), Vec::<String>::new());
    assert!(
        verdicts(7001).contains(&"app.no_orphans".to_string()),
        "{:?}",
        verdicts(7001)
    );
}

/// A waiting `xact_lock` that fails with lock_timeout may be granted in the instant its error
/// is raised and hold the lock until the error aborts its transaction: a look during the call
/// that shows the lock on its backend is no orphan (found as `app.no_orphans` on
/// transaction-mode-xact, concurrent schedule, seed 2, case 31, 2026-12-07: a sample between
/// the grant and the 55P03). A look after the failed reply that still shows it is violated.
#[test]
fn a_failed_transaction_lock_call_seen_holding_is_no_orphan() {
    let verdicts = |t| {
        one_lock_call_with_a_look(
            "xact_lock",
            r#""type":"fail","value":{"kind":"error","code":"55P03","message":"canceling statement due to lock timeout"}"#,
            t,
        )
    };
    let during = verdicts(5501);
    assert!(
        !during.contains(&"app.no_orphans".to_string()),
        "{during:?}"
    );
    assert!(
        verdicts(7001).contains(&"app.no_orphans".to_string()),
        "{:?}",
        verdicts(7001)
    );
}

fn transaction_mode() -> Topology {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../topologies/transaction-mode.yaml"
    );
    Topology::load(std::path::Path::new(path), &crate::catalog()).unwrap()
}

/// The first case of a history written as JSON lines, judged as `check` judges it.
pub(super) fn judge_lines<'a>(lines: impl Iterator<Item = &'a str>) -> CaseCheck {
    let events: Vec<Event> = lines
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let run = check_history(events.clone().into_iter().map(Ok)).unwrap();
    let case = crate::history::view::cases(&events)[0].to_vec();
    check_case(&CheckContext::of(&run.header), &case).unwrap()
}

/// A fixture read through the history's reader (observations are stored as deltas) and
/// written back as whole events, one per line, so that a test's edit is textual.
pub(super) fn fixture_text(name: &str) -> String {
    events_of(name)
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect()
}

/// The pg.* violations of the first case of a JSON-lines history, as `invariant: detail`;
/// `decided`: every invariant of it was judged (none left unknown).
pub(super) fn pg_verdicts(text: &str, decided: bool) -> Vec<String> {
    let verdict = judge_lines(text.lines());
    assert!(!decided || verdict.undecided.is_empty(), "{verdict:?}");
    verdict
        .violations
        .iter()
        .filter(|v| v.invariant.starts_with("pg."))
        .map(|v| format!("{}: {}", v.invariant, v.detail))
        .collect()
}

fn events_of(name: &str) -> Vec<Event> {
    let path = Path::new(FIXTURES).join(format!("{name}.jsonl"));
    HistoryReader::open(&path)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap()
}

fn results_of(events: Vec<Event>) -> crate::report::Results {
    let run = check_history(events.into_iter().map(Ok)).unwrap();
    crate::report::Results::build(&transaction_mode(), &run.header, &run.tally, false, 1, true)
}

/// A history with no case, or whose every step was skipped, judges nothing: its pg.*
/// verdicts are unknown ("rests on nothing") and the run does not pass.
#[test]
fn a_history_that_judged_nothing_does_not_pass() {
    let full = events_of("stacking-holds");
    let no_cases: Vec<Event> = full
        .iter()
        .filter(|e| matches!(e.body, Body::Run(_) | Body::RunEnd(_)))
        .cloned()
        .collect();
    // Every step turned into a skip.
    let skipped: Vec<Event> = full
        .iter()
        .filter_map(|e| match &e.body {
            Body::Invoke(i) if i.step.is_some() => Some(Event {
                t: e.t,
                body: Body::Skip(crate::history::Skip {
                    p: i.p,
                    step: i.step.unwrap(),
                    f: i.f,
                    key: i.key,
                    ms: None,
                    guc: None,
                    when: Default::default(),
                    message: None,
                    reason: "skipped by the test".into(),
                }),
            }),
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) if c.step.is_some() => None,
            Body::Obs(_) | Body::Probe(_) => None,
            _ => Some(e.clone()),
        })
        .collect();
    for (what, events) in [("no case", no_cases), ("every step skipped", skipped)] {
        let r = results_of(events);
        assert!(!r.passed, "{what}: passed");
        let topo = transaction_mode();
        let mut unknown = 0;
        for i in r.invariants.iter().filter(|i| i.tier == Tier::Pg) {
            let inv = by_name(&i.name).unwrap();
            let note = i.note.as_deref().unwrap_or("");
            if topo.exercises(inv.needs()) {
                assert_eq!(i.verdict, Verdict::Unknown, "{what}: {}", i.name);
                assert!(
                    note.contains("rests on nothing"),
                    "{what}: {} {note}",
                    i.name
                );
                unknown += 1;
            } else {
                // The workload cannot exercise it (session API: no transaction lock).
                assert_eq!(i.verdict, Verdict::Holds, "{what}: {}", i.name);
                assert!(note.contains("not exercised"), "{what}: {} {note}", i.name);
            }
        }
        assert!(unknown >= 6, "{what}: {unknown}");
        assert!(r.thinly_judged(), "{what}");
    }
    // The same history as recorded rests on something: judged, not thin.
    let r = results_of(full);
    assert_eq!(r.judged_cases, 1);
    assert!(!r.thinly_judged());
}

/// Every phase counts: a pg.* violation in a shrink or evidence replay fails the run even
/// when every generated case is clean, and says where it was seen.
#[test]
fn a_pg_violation_in_a_replay_fails_the_run() {
    let clean = events_of("exclusion-holds");
    let mut bad = events_of("exclusion-violated");
    for e in bad.iter_mut() {
        if let Body::Case(c) = &mut e.body {
            c.phase = Phase::Shrink;
            c.invariant = Some("app.mutual_exclusion".into());
        }
    }
    let mut events: Vec<Event> = clean
        .iter()
        .filter(|e| !matches!(e.body, Body::RunEnd(_)))
        .cloned()
        .collect();
    events.extend(bad.into_iter().filter(|e| !matches!(e.body, Body::Run(_))));
    let run = check_history(events.into_iter().map(Ok)).unwrap();
    assert_eq!(run.tally.cases, 1);
    assert!(
        run.tally.violating_cases.is_empty(),
        "the generated case is clean"
    );
    assert_eq!(run.tally.replay_pg.len(), 1);
    assert_eq!(run.tally.replay_pg[0].2, "pg.exclusion");
    let r =
        crate::report::Results::build(&transaction_mode(), &run.header, &run.tally, false, 1, true);
    assert!(!r.passed);
    let ex = r
        .invariants
        .iter()
        .find(|i| i.name == "pg.exclusion")
        .unwrap();
    assert_eq!(ex.verdict, Verdict::Violated);
    assert!(
        ex.note
            .as_deref()
            .unwrap()
            .contains("shrink or evidence replay")
    );
    assert_eq!(r.replay_violations.len(), 1);
    assert_eq!(r.replay_violations[0].phase, "shrink");
}
