//! `extract`'s tests on real transcripts (tests/fixtures/tap/: psql, psycopg 3 and Rails 6.1
//! through PgBouncer, recorded by `pgchaos run`; ParameterStatus and DataRows past the third
//! of a reply left out) and on made-up ones for what those do not show.

use super::extract::*;
use super::sqlscan::{Kind, LockFn};
use crate::tap::record::ClosedBy;
use crate::tap::record::parse_lines;
use crate::vocab::Key;

fn fixture(name: &str) -> Vec<Item> {
    let path = format!("{}/tests/fixtures/tap/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    extract(&parse_lines(text.lines().map(|l| Ok(l.to_string()))).unwrap())
}

fn lock_statements(items: &[Item]) -> Vec<&Statement> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Statement(s) if !s.calls.is_empty() => Some(&**s),
            _ => None,
        })
        .collect()
}

/// psql 18 through PgBouncer in session mode (`pgchaos run session-mode`, 3 replicas):
/// simple queries, one lock call each, the results the replicas printed (t, t, f).
#[test]
fn psql_simple_queries() {
    let items = fixture("psql-session-mode.jsonl");
    let opens: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Open {
                params, protocol, ..
            } => Some((params["user"].clone(), protocol.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        opens,
        vec![("chaos".to_string(), Some("3.0".to_string())); 3]
    );
    let locks = lock_statements(&items);
    let got: Vec<(u64, Vec<Option<bool>>)> = locks
        .iter()
        .map(|s| (s.lane, s.calls[0].rows.iter().map(|r| r.result).collect()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, vec![Some(true)]),
            (2, vec![Some(false)]),
            (3, vec![Some(true)])
        ]
    );
    for s in &locks {
        assert_eq!(
            (s.protocol, s.ready, &s.calls[0].key),
            (Protocol::Simple, Some('I'), &KeyOf::Known(Key::Big(1)))
        );
        assert_eq!(s.calls[0].func, LockFn::TryLock);
    }
    // The other statements: CREATE TABLE and the SELECT of pg_tables, opaque; lanes closed.
    let verbs: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Statement(s) if s.lane == 1 => Some(match &s.kind {
                Kind::Opaque { verb } => verb.clone(),
                k => format!("{k:?}"),
            }),
            _ => None,
        })
        .collect();
    assert_eq!(verbs, vec!["select", "create", "select"]);
    assert_eq!(
        items
            .iter()
            .filter(|i| matches!(
                i,
                Item::Close {
                    by: ClosedBy::Client,
                    ..
                }
            ))
            .count(),
        3
    );
}

/// psycopg 3 through PgBouncer in transaction mode: named prepared statements, the key a
/// binary int4 parameter; both replicas got the lock (transaction pooling), and both
/// unlocks found no lock (false: the server that granted it was another's by then).
#[test]
fn psycopg_extended_protocol_with_binary_parameters() {
    let items = fixture("psycopg3-transaction-mode.jsonl");
    let prepared: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::Prepared { lane: 1, name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(prepared.first(), Some(&"_pg3_0"));
    let locks = lock_statements(&items);
    let line = |s: &Statement| {
        (
            s.lane,
            s.calls[0].func,
            s.calls[0].key.clone(),
            s.calls[0].rows.iter().map(|r| r.result).collect::<Vec<_>>(),
        )
    };
    let got: Vec<_> = locks.iter().map(|s| line(s)).collect();
    let k = KeyOf::Known(Key::Big(7242007));
    assert!(
        got.contains(&(1, LockFn::TryLock, k.clone(), vec![Some(true)])),
        "{got:?}"
    );
    assert!(
        got.contains(&(2, LockFn::TryLock, k.clone(), vec![Some(true)])),
        "{got:?}"
    );
    assert!(
        got.contains(&(1, LockFn::Unlock, k.clone(), vec![Some(false)])),
        "{got:?}"
    );
    assert!(
        got.contains(&(2, LockFn::Unlock, k, vec![Some(false)])),
        "{got:?}"
    );
    assert_eq!(got.len(), 4, "{got:?}");
    for s in &locks {
        assert_eq!(s.protocol, Protocol::Extended);
    }
    // The duplicate table of the replica that lost: an error with its code.
    assert!(items.iter().any(|i| matches!(i, Item::Statement(s) if matches!(&s.outcome, Outcome::Error(n) if n.code == "42P07"))));
}

/// Rails 6.1's migrator through PgBouncer in transaction mode: its lock key is
/// MIGRATOR_SALT * crc32(database) (computed here, not read from the record), one replica
/// got true, the other false.
#[test]
fn rails_migrator_lock_with_its_key() {
    let items = fixture("rails61-transaction-mode.jsonl");
    let mut crc = flate2::Crc::new();
    crc.update(b"chaos_r1");
    let key = 2053462845i64 * crc.sum() as i64;
    let locks = lock_statements(&items);
    let tries: Vec<(u64, Vec<Option<bool>>)> = locks
        .iter()
        .filter(|s| s.calls[0].func == LockFn::TryLock)
        .map(|s| {
            assert_eq!(s.calls[0].key, KeyOf::Known(Key::Big(key)));
            (s.lane, s.calls[0].rows.iter().map(|r| r.result).collect())
        })
        .collect();
    assert_eq!(tries, vec![(5, vec![Some(true)]), (7, vec![Some(false)])]);
    // Its SETs at connect are session state.
    assert!(items.iter().any(|i| matches!(i, Item::Statement(s) if s.kind == Kind::Set { name: "client_min_messages".into(), value: "'warning'".into(), local: false })));
}

/// Made-up transcripts for what the real ones above do not show: an error in an extended
/// batch skips the Execute; a PREPAREd statement's EXECUTE resolves its key; a key given
/// by an expression comes from the reply's column that repeats it.
#[test]
fn skipped_executes_sql_prepare_and_keys_from_the_reply() {
    let lines = [
        r#"{"t":0,"wall":0,"ev":"begin","format":1,"listen":"","upstream":""}"#,
        r#"{"t":1,"wall":1,"ev":"fe","lane":1,"n":1,"len":0,"msg":{"type":"parse","name":"","sql":"SELECT pg_advisory_lock($1)"}}"#,
        r#"{"t":1,"wall":1,"ev":"fe","lane":1,"n":2,"len":0,"msg":{"type":"bind","portal":"","statement":"","params":[{"v":"abc"}]}}"#,
        r#"{"t":1,"wall":1,"ev":"fe","lane":1,"n":3,"len":0,"msg":{"type":"execute","portal":"","max_rows":0}}"#,
        r#"{"t":1,"wall":1,"ev":"fe","lane":1,"n":4,"len":0,"msg":{"type":"sync"}}"#,
        r#"{"t":2,"wall":2,"ev":"be","lane":1,"n":5,"len":0,"msg":{"type":"parse_complete"},"answers":1}"#,
        r#"{"t":2,"wall":2,"ev":"be","lane":1,"n":6,"len":0,"msg":{"type":"error_response","severity":"ERROR","code":"22P02","message":"invalid input syntax for type bigint"},"answers":2,"skipped":[3]}"#,
        r#"{"t":2,"wall":2,"ev":"be","lane":1,"n":7,"len":0,"msg":{"type":"ready_for_query","status":"I"},"answers":4}"#,
        r#"{"t":3,"wall":3,"ev":"fe","lane":1,"n":8,"len":0,"msg":{"type":"query","sql":"PREPARE p(bigint) AS SELECT pg_try_advisory_lock($1); EXECUTE p(77)"}}"#,
        r#"{"t":4,"wall":4,"ev":"be","lane":1,"n":9,"len":0,"msg":{"type":"command_complete","tag":"PREPARE"},"answers":8}"#,
        r#"{"t":4,"wall":4,"ev":"be","lane":1,"n":10,"len":0,"msg":{"type":"data_row","columns":1,"values":[{"v":"t"}]},"answers":8}"#,
        r#"{"t":4,"wall":4,"ev":"be","lane":1,"n":11,"len":0,"msg":{"type":"command_complete","tag":"SELECT 1"},"answers":8}"#,
        r#"{"t":4,"wall":4,"ev":"be","lane":1,"n":12,"len":0,"msg":{"type":"ready_for_query","status":"I"},"answers":8}"#,
        r#"{"t":5,"wall":5,"ev":"fe","lane":1,"n":13,"len":0,"msg":{"type":"query","sql":"SELECT hashtext('x') AS k, pg_try_advisory_lock(hashtext('x'))"}}"#,
        r#"{"t":6,"wall":6,"ev":"be","lane":1,"n":14,"len":0,"msg":{"type":"data_row","columns":2,"values":[{"v":"-1"},{"v":"f"}]},"answers":13}"#,
        r#"{"t":6,"wall":6,"ev":"be","lane":1,"n":15,"len":0,"msg":{"type":"command_complete","tag":"SELECT 1"},"answers":13}"#,
        r#"{"t":6,"wall":6,"ev":"be","lane":1,"n":16,"len":0,"msg":{"type":"ready_for_query","status":"T"},"answers":13}"#,
    ];
    let items = extract(&parse_lines(lines.iter().map(|l| Ok(l.to_string()))).unwrap());
    let st: Vec<&Statement> = items
        .iter()
        .filter_map(|i| match i {
            Item::Statement(s) => Some(&**s),
            _ => None,
        })
        .collect();
    // The Bind's error, then the Execute it skipped.
    assert!(matches!(&st[0].outcome, Outcome::Error(n) if n.code == "22P02"));
    assert!(matches!(&st[1].outcome, Outcome::NotRun { because: Some(n) } if n.code == "22P02"));
    assert_eq!(st[1].calls[0].key, KeyOf::Unknown(vec!["$1".into()]));
    // PREPARE, then EXECUTE p(77): the body's call with the argument as its key.
    assert_eq!(
        st[3].calls,
        vec![LockCall {
            func: LockFn::TryLock,
            key: KeyOf::Known(Key::Big(77)),
            rows: vec![CallRow {
                result: Some(true),
                key: None
            }]
        }]
    );
    // hashtext('x'): not resolvable from the text; the reply's first column repeats it.
    assert_eq!(
        st[4].calls[0].rows,
        vec![CallRow {
            result: Some(false),
            key: Some(Key::Big(-1))
        }]
    );
    assert_eq!(st[4].ready, Some('T'));
}
