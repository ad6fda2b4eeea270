//! `client`'s tests.

use super::*;

/// A connect that did not complete is the open's `timeout` (outcome unknown to the
/// model, judged by app.progress); any other failure without a SQLSTATE is `closed`; the
/// step after it sent nothing.
#[test]
fn a_connect_that_timed_out_is_a_timeout_and_the_step_sends_nothing() {
    let e = anyhow::Error::new(crate::launch::ConnectTimedOut(Duration::from_millis(2500)))
        .context("connecting C5");
    let r = connect_reply(&e);
    assert_eq!(r.code(), Some(code::TIMEOUT), "{r:?}");
    assert_eq!(r.outcome(), crate::vocab::Outcome::Info);
    let r = connect_reply(&anyhow::anyhow!("connection refused"));
    assert_eq!(r.code(), Some(code::CLOSED));
    let step = not_connected(&Reply::error(code::TIMEOUT));
    assert_eq!(step.code(), Some(code::NOT_CONNECTED));
    assert_eq!(step.outcome(), crate::vocab::Outcome::Fail);
    assert!(!step.ended_by_server());
}

/// The server's time: before and after the call beside it; before a waiting lock call
/// and after it in its result row; after transaction control only.
#[test]
fn server_times_are_read_from_the_rows() {
    let s = |v: &str| Some(v.to_string());
    let pm = "2026-12-06 16:48:26.268513+00";
    let id = |t: &str| vec![s("7"), s("2026-12-06 16:48:30.1+00"), s("3"), s(pm), s(t)];
    let pm_us = parse_timestamptz(pm).unwrap();
    let us = |t: &str| parse_timestamptz(t).unwrap();
    let mut beside = id("2026-12-06 16:48:30.720570+00");
    beside.extend([s("t"), s("2026-12-06 16:48:30.720579+00")]);
    let t = server_time(Op::TryLock, &[beside]).unwrap();
    assert_eq!(t.clock, pm_us);
    assert_eq!(t.lo, Some(us("2026-12-06 16:48:30.720570+00")));
    assert_eq!(t.hi, Some(us("2026-12-06 16:48:30.720579+00")));
    let waited = vec![
        id("2026-12-06 16:48:34.419036+00"),
        vec![s(""), s("2026-12-06 16:48:34.588418+00")],
    ];
    let t = server_time(Op::Lock, &waited).unwrap();
    assert!(t.lo < t.hi, "{t:?}");
    let failed = vec![id("2026-12-06 16:48:34.419036+00")];
    assert_eq!(server_time(Op::Lock, &failed).unwrap().hi, None);
    let commit = server_time(Op::Commit, &failed).unwrap();
    assert_eq!(
        (commit.lo, commit.hi),
        (None, Some(us("2026-12-06 16:48:34.419036+00")))
    );
    assert!(server_time(Op::TryLock, &[vec![s("t")]]).is_none());
    // One clock: ordered where one ended before the other began; another clock never.
    let a = ServerTime {
        clock: 1,
        lo: Some(10),
        hi: Some(20),
    };
    let b = ServerTime {
        clock: 1,
        lo: Some(15),
        hi: Some(30),
    };
    let c = ServerTime {
        clock: 1,
        lo: Some(21),
        hi: None,
    };
    assert!(!a.precedes(&b) && !b.precedes(&a) && a.precedes(&c));
    assert!(a.precedes_on(&b) && !b.precedes_on(&a));
    assert!(!a.precedes(&ServerTime { clock: 2, ..c }));
}

#[test]
fn identity_rows_parse() {
    let row = vec![
        Some("7139".to_string()),
        Some("2025-11-30 09:00:00.123456+00".to_string()),
    ];
    assert_eq!(
        parse_identity(&row),
        Some(BackendId {
            pid: 7139,
            start_us: 1764493200123456
        })
    );
    let mut with_result = row.clone();
    with_result.push(Some("12".into()));
    with_result.push(Some("2025-11-30 08:00:00+00".into()));
    with_result.push(Some("2025-11-30 09:00:01+00".into()));
    assert_eq!(echoed_step(&with_result), Some(12));
    with_result.push(Some("t".into()));
    with_result.push(Some("2025-11-30 09:00:02+00".into()));
    assert!(parse_identity(&with_result).is_some());
    assert_eq!(echoed_step(&with_result), Some(12));
    assert_eq!(echoed_step(&row), None);
    assert!(parse_identity(&row[..1]).is_none());
    let mut bad = row.clone();
    bad[1] = Some("Sun Nov 30 09:00:00.123456 2025 UTC".into());
    assert!(
        parse_identity(&bad).is_none(),
        "non-ISO DateStyle is refused"
    );
}

fn echo_row(step: usize, result: Option<&str>) -> Vec<Option<String>> {
    let mut r = vec![
        Some("7139".to_string()),
        Some("2025-11-30 09:00:00.123456+00".to_string()),
        Some(step.to_string()),
        Some("2025-11-30 08:00:00+00".to_string()),
        Some("2025-11-30 09:00:01+00".to_string()),
    ];
    if let Some(x) = result {
        r.push(Some(x.to_string()));
        r.push(Some("2025-11-30 09:00:02+00".to_string()));
    }
    r
}

fn raw(rows: Vec<Vec<Option<String>>>, error: Option<&str>) -> Raw {
    Raw {
        rows,
        error: error.map(|c| (c.to_string(), String::new())),
    }
}

#[test]
fn a_reply_in_step_names_its_backend() {
    let b = Some(BackendId {
        pid: 7139,
        start_us: 1764493200123456,
    });
    let ok = |op, rows| in_step(op, 5, &raw(rows, None));
    assert_eq!(ok(Op::TryLock, vec![echo_row(5, Some("t"))]), Ok(b));
    assert_eq!(ok(Op::Listen, vec![echo_row(5, None)]), Ok(b));
    assert_eq!(
        ok(Op::Lock, vec![echo_row(5, None), vec![Some(String::new())]]),
        Ok(b)
    );
    assert_eq!(ok(Op::DiscardAll, vec![]), Ok(None));
    // An error after the identity (lock_timeout), or before any (25P02): in step.
    assert_eq!(
        in_step(Op::Lock, 5, &raw(vec![echo_row(5, None)], Some("55P03"))),
        Ok(b)
    );
    assert_eq!(
        in_step(Op::TryLock, 5, &raw(vec![], Some("25P02"))),
        Ok(None)
    );
}

/// The replies PgBouncer 1.24.1 gave out of step (docs/session-state.md, "Replies out of
/// step"): DISCARD ALL's (no row) to a statement that always returns one, then each
/// statement's reply to the next.
#[test]
fn a_reply_to_another_statement_is_out_of_step() {
    let bad = |op, rows, error| in_step(op, 5, &raw(rows, error)).unwrap_err();
    assert!(bad(Op::Ping, vec![], None).contains("none came"));
    assert!(bad(Op::Ping, vec![echo_row(4, Some("1"))], None).contains("echoes step 4"));
    // The step is compared even when an error follows.
    assert!(bad(Op::Lock, vec![echo_row(4, None)], Some("55P03")).contains("step 4"));
    // The wrong shape: a three-column identity where the result was due beside it, a
    // result row where none is, a row for DISCARD ALL.
    assert!(bad(Op::TryLock, vec![echo_row(5, None)], None).contains("columns"));
    assert!(
        bad(
            Op::Set,
            vec![echo_row(5, None), vec![Some("x".into())]],
            None
        )
        .contains("does not return")
    );
    assert!(bad(Op::DiscardAll, vec![echo_row(5, None)], None).contains("returns no row"));
    assert!(bad(Op::Lock, vec![echo_row(5, None)], None).contains("result row"));
}
