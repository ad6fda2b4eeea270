//! The checker's tests on statements that release a scope's locks (`Op::releases_all`):
//! PostgreSQL releases them one lock partition at a time, and a look taken while one runs may
//! see some of its keys still held.

use super::tests::{fixture_text, pg_verdicts};

/// Recorded on transaction-mode, concurrent schedule, seed 1, a shrink replay of case 9
/// (PgBouncer 1.25.2, PostgreSQL 18.6; a cold `.ci/run` of 2026-12-07, `tests/cli.rs`'s
/// concurrent test). C3's `unlock_all` on pid 7400 ran from server time +907 752 to +907 768
/// µs; the sample's reads ran from +907 639 to +907 824 µs. Its `pg_stat_activity` read found
/// 7400 idle in C3's transaction after step 28 (holding 612001, 4242424242 and (1,612001)),
/// and its `pg_locks` read found 7400 holding 612001 alone: the read came in the middle of
/// `pg_advisory_unlock_all()`, which had released two keys' partitions and not yet the third.
/// The model released them at one point and judged the look `pg.locks_match_model`; now the
/// call has two points and releases one key at a time between them. The rule must not excuse
/// a look taken after the call replied: moved there, the same look is violated.
#[test]
fn an_unlock_all_releases_one_key_at_a_time() {
    let text = fixture_text("unlock-all-releases-one-key-at-a-time");
    let pg = |text: &str| pg_verdicts(text, true);
    assert_eq!(pg(&text), Vec::<String>::new());
    let look = r#"{"t":3615050309,"type":"obs","at":"sample""#;
    let replied = r#"{"t":3615596328,"type":"ok","p":"C3","step":31,"f":"unlock_all""#;
    assert_eq!(text.matches(look).count(), 1);
    assert_eq!(text.matches(replied).count(), 1);
    // 0.1 ms after the reply, before C3's next event (its disconnect at 3615596659).
    let late = text.replacen(look, r#"{"t":3615596428,"type":"obs","at":"sample""#, 1);
    let v = pg(&late);
    assert!(
        v.iter().any(|l| l.starts_with("pg.locks_match_model")
            && l.contains("pid 7400 (backend_start 2026-12-07 19:54:36.899007+00) holding 612001")),
        "{v:?}"
    );
}

/// One client holds transaction locks on keys 7 and 8 on backend 101 and commits (invoked at
/// 5001, answered at 6001); a sample at `sample_t` shows 101 holding key 8 alone, idle in
/// its transaction. The history, one case (concurrent schedule, run phase).
pub(super) fn commit_with_a_look_text(sample_t: u64) -> String {
    let head = r#"{"t":0,"type":"run","format":"pgchaos-history/3","pgchaos":"fixture","topology":"fixture","topology_file":"fixture.yaml","pooler":"pgbouncer","rules":{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false},"seed":0,"launcher":"fixture","versions":{"postgres":"18.6","postgres_declared":"18.6","postgres_full":"PostgreSQL 18.6","pgbouncer":"1.25.2","pgbouncer_declared":"1.25.2","version_drift":[]},"ready_ms":0,"contender":[999,1796000000000999],"contender_start":"2026-11-30 00:00:00.000999+00","keys":[7,8],"started":"20261130T000000Z"}
{"t":1,"type":"case","case":0,"seed":1,"phase":"run","clients":1,"steps":4,"schedule":"concurrent"}
{"t":1001,"type":"invoke","p":"C1","f":"open"}
{"t":1101,"type":"ok","p":"C1","f":"open","value":{"kind":"ok"}}"#;
    let b = r#""backend":[101,1796000000000001]"#;
    let mut v = vec![head.to_string()];
    for (step, (f, key, t)) in [
        ("begin", "", 2001),
        ("xact_lock", r#","key":7"#, 3001),
        ("xact_lock", r#","key":8"#, 4001),
    ]
    .into_iter()
    .enumerate()
    {
        v.push(format!(
            r#"{{"t":{t},"type":"invoke","p":"C1","step":{step},"f":"{f}"{key}}}"#
        ));
        v.push(format!(
            r#"{{"t":{},"type":"ok","p":"C1","step":{step},"f":"{f}","value":{{"kind":"ok"}},{b}}}"#,
            t + 500
        ));
    }
    let row = r#"{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:00:00.000001+00","state":"idle in transaction","query":"/*pgchaos s2*/ SELECT","locks":[{"key":8,"mode":"ExclusiveLock","granted":true}]}"#;
    let sample = format!(r#"{{"t":{sample_t},"type":"obs","at":"sample","backends":[{row}]}}"#);
    let commit = [
        r#"{"t":5001,"type":"invoke","p":"C1","step":3,"f":"commit"}"#.to_string(),
        format!(
            r#"{{"t":6001,"type":"ok","p":"C1","step":3,"f":"commit","value":{{"kind":"ok"}},{b}}}"#
        ),
    ];
    // Events are written in time order; a sample ends at the next event.
    let mut tail = vec![(5001, commit[0].clone()), (6001, commit[1].clone())];
    tail.push((sample_t, sample));
    tail.sort_by_key(|(t, _)| *t);
    v.extend(tail.into_iter().map(|(_, l)| l));
    v.push(r#"{"t":9001,"type":"obs","at":"end","backends":[{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:00:00.000001+00","state":"idle","query":"/*pgchaos s3*/ COMMIT"}]}
{"t":11001,"type":"case_end","case":0,"steps_us":1,"reset_us":1}
{"t":12001,"type":"run_end","cases":1,"stopped_by_time_limit":false,"run_ms":1}"#.to_string());
    v.join("\n")
}

/// [`commit_with_a_look_text`]'s pg.* verdicts.
fn commit_with_a_look(sample_t: u64) -> Vec<String> {
    pg_verdicts(&commit_with_a_look_text(sample_t), false)
}

/// COMMIT releases a transaction's locks the same way (`ProcReleaseLocks` ->
/// `LockReleaseAll`): a look while it runs may see one of two keys held; a look after it
/// replied may not (`pg.xact_released_at_end`). Each half fails if the rule is wrong: without
/// it the first is judged `pg.locks_match_model`, and a rule that outlived the statement
/// would excuse the second.
#[test]
fn a_commit_releases_its_keys_one_at_a_time() {
    assert_eq!(commit_with_a_look(5501), Vec::<String>::new());
    assert!(
        commit_with_a_look(7001)
            .iter()
            .any(|l| l.starts_with("pg.xact_released_at_end") && l.contains("holding 8")),
        "{:?}",
        commit_with_a_look(7001)
    );
    // Before the commit was sent, both keys are held: one alone is a violation too.
    assert!(
        commit_with_a_look(4801)
            .iter()
            .any(|l| l.starts_with("pg.locks_match_model")),
        "{:?}",
        commit_with_a_look(4801)
    );
}
