//! The checker's tests on what the history leaves uncertain: an operation whose outcome is
//! unknown (a timeout: Jepsen's `info`), the backend a notification came through.

/// C1's connection is closed under its `unlock 8` (on pid 101); its next call, a `lock` of
/// `key`, opens a new connection and gets no reply in time; a look then shows a new backend,
/// pid 102, idle and holding 7. The pg.* verdicts.
fn timed_out_lock_on_a_new_connection(key: u32) -> Vec<String> {
    let head = r#"{"t":0,"type":"run","format":"pgchaos-history/3","pgchaos":"fixture","topology":"fixture","topology_file":"fixture.yaml","pooler":"pgbouncer","rules":{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false},"seed":0,"launcher":"fixture","versions":{"postgres":"18.6","postgres_declared":"18.6","postgres_full":"PostgreSQL 18.6","pgbouncer":"1.25.2","pgbouncer_declared":"1.25.2","version_drift":[]},"ready_ms":0,"contender":[999,1796000000000999],"contender_start":"2026-11-30 00:00:00.000999+00","keys":[7,8],"started":"20261130T000000Z"}
{"t":1,"type":"case","case":0,"seed":1,"phase":"run","clients":1,"steps":3,"schedule":"concurrent"}
{"t":1001,"type":"invoke","p":"C1","f":"open"}
{"t":1101,"type":"ok","p":"C1","f":"open","value":{"kind":"ok"}}
{"t":2001,"type":"invoke","p":"C1","step":0,"f":"try_lock","key":8}
{"t":2501,"type":"ok","p":"C1","step":0,"f":"try_lock","value":{"kind":"bool","value":true},"backend":[101,1796000000000001]}
{"t":3001,"type":"invoke","p":"C1","step":1,"f":"unlock","key":8}
{"t":3501,"type":"info","p":"C1","step":1,"f":"unlock","value":{"kind":"error","code":"closed","message":"connection closed"}}"#;
    let call = format!(r#"{{"t":4001,"type":"invoke","p":"C1","step":2,"f":"lock","key":{key}}}"#);
    let rows = r#"[{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:00:00.000001+00","state":"idle","query":"/*pgchaos s1*/ SELECT"},{"id":[102,1796000000000002],"backend_start":"2026-11-30 00:00:00.000002+00","state":"idle","query":"/*pgchaos s2*/ SELECT","locks":[{"key":7,"mode":"ExclusiveLock","granted":true}]}]"#;
    let tail = format!(
        r#"{{"t":6001,"type":"obs","at":"sample","backends":{rows}}}
{{"t":9001,"type":"info","p":"C1","step":2,"f":"lock","value":{{"kind":"error","code":"timeout","message":"no reply within 4s"}}}}
{{"t":10001,"type":"obs","at":"end","backends":{rows}}}
{{"t":11001,"type":"case_end","case":0,"steps_us":1,"reset_us":1}}
{{"t":12001,"type":"run_end","cases":1,"stopped_by_time_limit":false,"run_ms":1}}"#
    );
    super::tests::pg_verdicts(&[head, &call, &tail].join("\n"), false)
}

/// A statement whose outcome is unknown, sent by a client whose connection had been closed,
/// opened a new one and may have run there: seen on transaction-mode-host-faults, concurrent,
/// seed 5 (2026-12-07; PgBouncer 1.25.2): C2's `lock 612001` after a "connection closed"
/// reached PostgreSQL on a new server (pid 25) and was granted; its reply was held in the
/// frozen pooler's host and the client timed out; a look showed pid 25 holding 612001. The
/// model let an unknown statement run only on an open connection, and judged the look
/// `pg.locks_match_model` ("the model nothing"). Edited to a lock of another key, the look is
/// violated again: only what the statement could have done is excused.
#[test]
fn a_timed_out_statement_on_a_new_connection_may_have_run() {
    assert_eq!(timed_out_lock_on_a_new_connection(7), Vec::<String>::new());
    let v = timed_out_lock_on_a_new_connection(8);
    assert!(
        v.iter()
            .any(|l| l.starts_with("pg.locks_match_model") && l.contains("holding 7")),
        "{v:?}"
    );
}

/// A notification a client takes after an op may have reached its connection as the op before
/// ended, from that op's backend: recorded on transaction-mode-listen, concurrent, seed 5, case
/// 190 (2026-12-07; PgBouncer 1.25.2). C3 received "C1 s23" (C1's NOTIFY on pid 19123), recorded
/// on 19123, the backend of the `ping` it had just finished; 19123 was not listening, 19122 was,
/// and C3 had been linked to 19122 for the statement before the `ping`. The history records a
/// notification on the backend of the op it was taken after (`client::LogicalClient::collect_as`),
/// and the connection's replies and notifications reach the client through two channels. Judged
/// `pg.notification_matches` before; the previous statement's backend is accepted now. What it
/// must not excuse: C3 receiving "C2 s6", which 19122 had already passed on to C2.
#[test]
fn a_notification_may_be_taken_after_the_next_op() {
    let text = super::tests::fixture_text("notification-taken-after-the-next-op");
    // app.notifications_arrive stays undecided here (a client listened and stopped).
    let pg = |t: &str| super::tests::pg_verdicts(t, false);
    assert_eq!(pg(&text), Vec::<String>::new());
    let received =
        r#""p":"C3","backend":[19123,1796681628047063],"channel":"pgchaos","payload":"C1 s23""#;
    assert_eq!(text.matches(received).count(), 1, "{text}");
    let again = text.replace(
        received,
        r#""p":"C3","backend":[19123,1796681628047063],"channel":"pgchaos","payload":"C2 s6""#,
    );
    let v = pg(&again);
    assert!(
        v.iter()
            .any(|l| l.starts_with("pg.notification_matches") && l.contains("C2 s6")),
        "{v:?}"
    );
}

/// PgBouncer's SHOW SERVERS names a server by its pid alone, and PostgreSQL's pids repeat after
/// its host restarts: recorded on transaction-mode-host-faults, sequential, seed 5, case 18
/// (2026-12-07; PostgreSQL 18.6 and PgBouncer 1.25.2 in containers). pid 23 served C3 and was
/// dropped by a restart of the pooler's host; after PostgreSQL's host restarted, a new backend
/// was pid 23 again, and the looks after steps 22-24 list it in pg_stat_activity (its own
/// backend_start) and in SHOW SERVERS. The model took the listed pid for the dropped backend
/// (`pg.locks_match_model`, "SHOW SERVERS lists pid 23 ..., which host_restart_pooler
/// dropped"). Now a listed pid that the look's pg_stat_activity gives to another backend is
/// that one. Without the new backend's row in the look after step 23, the listing is the
/// dropped server's again, and violated.
#[test]
fn a_pooler_listing_names_the_backend_its_pid_has_now() {
    let text = super::tests::fixture_text("pids-repeat-after-a-host-restart");
    let pg = |t: &str| super::tests::pg_verdicts(t, false);
    assert_eq!(pg(&text), Vec::<String>::new());
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines
        .iter()
        .position(|l| l.contains(r#""type":"obs""#) && l.contains(r#""step":23"#))
        .unwrap();
    let mut look: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    assert_eq!(look["backends"][0]["id"][0], 23, "{look}");
    look["backends"] = serde_json::json!([]);
    lines[at] = look.to_string();
    let v = pg(&(lines.join("\n") + "\n"));
    assert!(
        v.iter()
            .any(|l| l.starts_with("pg.locks_match_model")
                && l.contains("SHOW SERVERS lists pid 23")),
        "{v:?}"
    );
}
