//! Ground truth: the seed experiments (000: advisory locks from a pool; 002: the acceptance
//! protocol with holder A, contender B, observer O) run against real PostgreSQL and PgBouncer
//! launched by the harness. (The no-orphan guarantees are in `lifecycle.rs`.)
//!
//! Every lock call reports `(pg_backend_pid(), backend_start)` in the same statement; every
//! outcome is read from `pg_locks JOIN pg_stat_activity` on a separate direct connection and
//! compared by that pair, never by pid alone. Each test owns its cluster (free ports), which
//! `Drop` stops when the test ends, on success or panic.

mod common;

use common::*;
use pgchaos::vocab::Key;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Seed 000, experiments 1-5, against `direct`.

/// 1. Five instances on five connections try a singleton job: exactly one gets the lock and
/// runs the job; while it runs the observer sees exactly that backend holding the key.
#[tokio::test(flavor = "current_thread")]
async fn seed000_1_singleton_job_runs_once() {
    const K: i64 = 612001;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let mut conns = vec![];
    for _ in 0..5 {
        conns.push(client(&cluster).await);
    }
    let ran = AtomicU32::new(0);
    // Every instance has tried before the winner finishes: no second winner after an unlock.
    let tried = tokio::sync::Barrier::new(conns.len());
    let results = futures_util::future::join_all(conns.iter().map(|c| {
        let (ran, tried) = (&ran, &tried);
        async move {
            let (id, got) = try_lock(c, K).await;
            tried.wait().await;
            if got {
                ran.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(150)).await; // the job
            }
            (id, got)
        }
    }))
    .await;

    let winners: Vec<&Ident> = results.iter().filter(|r| r.1).map(|r| &r.0).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one instance gets the lock: {results:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1, "instances that ran the job");
    let distinct: std::collections::HashSet<&Ident> = results.iter().map(|r| &r.0).collect();
    assert_eq!(
        distinct.len(),
        5,
        "five connections, five backends: {results:?}"
    );
    let winner = winners[0].clone();
    obs.assert_held_by(K, &winner, "after the job").await;

    let i = results.iter().position(|r| r.1).unwrap();
    let (id, released) = unlock(&conns[i], K).await;
    assert_eq!(id, winner, "unlock runs on the winner's backend");
    assert!(released, "the winner's unlock releases");
    obs.assert_free(K, "after the winner's unlock").await;
}

/// 2. The pool trap: a lock taken on connection A, the unlock sent on connection B returns
/// false, and the lock stays held by A's backend (A idle, as in a pool).
#[tokio::test(flavor = "current_thread")]
async fn seed000_2_unlock_on_another_connection_is_false() {
    const K: i64 = 612002;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let (ida, locked) = try_lock(&a, K).await;
    assert!(locked, "A takes the free lock");
    let (idb, unlocked) = unlock(&b, K).await;
    assert_ne!(ida, idb, "A and B are different sessions");
    assert!(!unlocked, "B does not hold the lock: unlock returns false");
    drop(b);
    obs.assert_held_by(K, &ida, "after B's unlock").await;
    let contender = direct(&cluster).await;
    assert!(
        !probe(&contender, K, &[&ida, &idb]).await,
        "the lock is still taken"
    );
    // A is still alive (idle, like a pooled connection), holding it.
    assert_eq!(
        obs.activity(&ida).await.map(|s| s.0).as_deref(),
        Some("idle")
    );
}

/// 3. A transaction-level lock: held while the transaction is open (a second caller gets
/// false), released at ROLLBACK (a new call gets true).
#[tokio::test(flavor = "current_thread")]
async fn seed000_3_xact_lock_released_at_rollback() {
    const K: i64 = 612003;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let tx = client(&cluster).await;
    let other = client(&cluster).await;
    exec(&tx, "BEGIN").await;
    let (idt, got) = try_xact_lock(&tx, K).await;
    assert!(got, "the transaction takes the free lock");
    obs.assert_held_by(K, &idt, "inside the transaction").await;
    let (ido, second) = try_xact_lock(&other, K).await;
    assert_ne!(idt, ido);
    assert!(!second, "a second caller while the transaction is open");
    exec(&tx, "ROLLBACK").await;
    obs.assert_free(K, "after ROLLBACK").await;
    let (ido2, after) = try_xact_lock(&other, K).await;
    assert_eq!(ido, ido2);
    assert!(after, "after ROLLBACK the key is free");
    // The autocommit xact lock of the second caller ended with its statement.
    obs.assert_free(K, "after the autocommit xact lock").await;
}

/// 4. Session locks stack: locked twice, the first unlock is true and the lock is still
/// held; the second unlock is true and releases it; a third returns false.
#[tokio::test(flavor = "current_thread")]
async fn seed000_4_session_locks_stack() {
    const K: i64 = 612004;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let contender = direct(&cluster).await;
    let a = client(&cluster).await;
    let (id1, _) = call(&a, &format!("pg_advisory_lock({K})::text")).await;
    let (id2, _) = call(&a, &format!("pg_advisory_lock({K})::text")).await;
    assert_eq!(id1, id2, "one session");
    obs.assert_held_by(K, &id1, "after two locks").await;

    let (id, first) = unlock(&a, K).await;
    assert_eq!(id, id1);
    assert!(first, "first unlock");
    obs.assert_held_by(K, &id1, "after the first unlock (count was 2)")
        .await;
    assert!(
        !probe(&contender, K, &[&id1]).await,
        "still held after one unlock"
    );

    let (id, second) = unlock(&a, K).await;
    assert_eq!(id, id1);
    assert!(second, "second unlock");
    obs.assert_free(K, "after the second unlock").await;
    assert!(
        probe(&contender, K, &[&id1]).await,
        "free after two unlocks"
    );
    let (_, third) = unlock(&a, K).await;
    assert!(!third, "a third unlock finds nothing to release");
}

/// 5. A leaked lock (the unlock went to another connection) disappears when the holding
/// session ends: A's identity leaves pg_stat_activity, no lock row remains, a contender
/// gets it.
#[tokio::test(flavor = "current_thread")]
async fn seed000_5_session_end_releases() {
    const K: i64 = 612005;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let contender = direct(&cluster).await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let (ida, locked) = try_lock(&a, K).await;
    assert!(locked);
    let (idb, unlocked) = unlock(&b, K).await;
    assert_ne!(ida, idb);
    assert!(!unlocked, "the unlock on B leaks A's lock");
    obs.assert_held_by(K, &ida, "leaked lock before A closes")
        .await;
    assert!(!probe(&contender, K, &[&ida, &idb]).await);

    drop(a); // Terminate: the session ends
    obs.wait_gone(&ida, "A closed").await;
    obs.assert_free(K, "after A's session ended").await;
    assert!(
        probe(&contender, K, &[&ida, &idb]).await,
        "free after A's session ended"
    );
}

// ---------------------------------------------------------------------------------------
// Seed 002, the acceptance protocol: holder A, contender B (a different backend), observer O.

/// A session lock taken inside a transaction survives ROLLBACK.
#[tokio::test(flavor = "current_thread")]
async fn seed002_session_lock_survives_rollback() {
    const K: i64 = 4242424242;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let b = direct(&cluster).await;
    let a = client(&cluster).await;
    exec(&a, "BEGIN").await;
    let (ida, got) = try_lock(&a, K).await;
    assert!(got);
    exec(&a, "ROLLBACK").await;
    assert_eq!(identity(&a).await, ida, "A keeps its backend");
    obs.assert_held_by(K, &ida, "after ROLLBACK").await;
    assert!(
        !probe(&b, K, &[&ida]).await,
        "ROLLBACK does not release a session lock"
    );
    // Only an explicit unlock (or the session's end) does.
    let (id, released) = unlock(&a, K).await;
    assert_eq!(id, ida);
    assert!(released);
    obs.assert_free(K, "after A's unlock").await;
    assert!(probe(&b, K, &[&ida]).await);
}

/// A transaction-level lock is released at COMMIT and at ROLLBACK.
#[tokio::test(flavor = "current_thread")]
async fn seed002_xact_lock_released_at_commit_and_rollback() {
    const K: i64 = 4242424243;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let b = direct(&cluster).await;
    let a = client(&cluster).await;
    for end in ["COMMIT", "ROLLBACK"] {
        exec(&a, "BEGIN").await;
        let (ida, got) = try_xact_lock(&a, K).await;
        assert!(got, "{end}: A takes the free key");
        obs.assert_held_by(K, &ida, &format!("inside the transaction ({end})"))
            .await;
        assert!(
            !probe(&b, K, &[&ida]).await,
            "{end}: held while the transaction is open"
        );
        exec(&a, end).await;
        obs.assert_free(K, &format!("after {end}")).await;
        assert!(probe(&b, K, &[&ida]).await, "free after {end}");
        assert!(obs.alive(&ida).await, "{end}: A's session is still there");
    }
}

/// pg_terminate_backend from the observer releases: A's identity leaves pg_stat_activity
/// within a bounded wait, then no lock row remains and the contender gets the key. A itself
/// still believes it holds the lock until its next statement fails.
#[tokio::test(flavor = "current_thread")]
async fn seed002_terminate_releases() {
    const K: i64 = 9_000_000_001; // above 2^32: classid 2, objid 410065409
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let b = direct(&cluster).await;
    let a = client(&cluster).await;
    let (ida, got) = try_lock(&a, K).await;
    assert!(got);
    obs.assert_held_by(K, &ida, "before terminate").await;
    assert!(!probe(&b, K, &[&ida]).await);

    assert!(
        obs.terminate(&ida).await,
        "pg_terminate_backend signalled A"
    );
    let took = obs.wait_gone(&ida, "after pg_terminate_backend").await;
    assert!(took < STEP);
    obs.assert_free(K, "after A left pg_stat_activity").await;
    assert!(probe(&b, K, &[&ida]).await, "free after terminate");

    let e = try_call(&a, "1")
        .await
        .expect_err("A's next statement fails: its backend is gone");
    // 57P01 admin_shutdown if the FATAL message is read, or a closed connection.
    assert!(
        matches!(code(&e).as_str(), "57P01" | "closed"),
        "unexpected error after terminate: {e}"
    );
}

/// pg_cancel_backend does not release: neither on an idle holder, nor when it interrupts
/// the holder's running statement.
#[tokio::test(flavor = "current_thread")]
async fn seed002_cancel_does_not_release() {
    const K: i64 = 4242424244;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let b = direct(&cluster).await;
    let a = client(&cluster).await;
    let (ida, got) = try_lock(&a, K).await;
    assert!(got);

    // Idle holder.
    assert!(obs.cancel(&ida).await, "pg_cancel_backend signalled A");
    tokio::time::sleep(Duration::from_millis(200)).await; // let the signal land
    assert!(obs.alive(&ida).await, "cancel does not end the session");
    obs.assert_held_by(K, &ida, "after cancelling the idle holder")
        .await;
    assert!(!probe(&b, K, &[&ida]).await, "still held after cancel");
    assert_eq!(
        identity(&a).await,
        ida,
        "A's next statement runs, same backend"
    );

    // Busy holder: the cancel interrupts its statement, the lock stays.
    let t0 = Instant::now();
    let sleeper = try_rows(&a, "SELECT pg_sleep(4)");
    let canceller = async {
        loop {
            if let Some((state, query)) = obs.activity(&ida).await
                && state == "active"
                && query.contains("pg_sleep")
            {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "A never became active"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        obs.cancel(&ida).await
    };
    let (slept, cancelled) = tokio::join!(sleeper, canceller);
    assert!(cancelled, "pg_cancel_backend signalled the busy A");
    let e = slept.expect_err("the cancelled statement fails");
    assert_eq!(code(&e), "57014", "query_canceled: {e}");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "cancelled, not finished"
    );
    assert!(obs.alive(&ida).await);
    obs.assert_held_by(K, &ida, "after cancelling A's statement")
        .await;
    assert!(
        !probe(&b, K, &[&ida]).await,
        "still held after cancelling a statement"
    );
    let (id, released) = unlock(&a, K).await;
    assert_eq!(id, ida);
    assert!(released, "A still owns the lock");
}

/// DISCARD ALL releases session locks (the whole stacked count), keeps the session, and is
/// refused inside a transaction block (releasing nothing).
#[tokio::test(flavor = "current_thread")]
async fn seed002_discard_all_releases_session_locks() {
    const K: i64 = 4242424245;
    let cluster = launch("direct").await;
    let obs = Observer::connect(&cluster).await;
    let b = direct(&cluster).await;
    let a = client(&cluster).await;
    let (ida, got) = try_lock(&a, K).await;
    assert!(got);
    let (_, again) = try_lock(&a, K).await;
    assert!(again, "re-entry stacks");

    exec(&a, "BEGIN").await;
    let e = try_rows(&a, "DISCARD ALL")
        .await
        .expect_err("DISCARD ALL inside a transaction block");
    assert_eq!(code(&e), "25001", "active_sql_transaction: {e}");
    exec(&a, "ROLLBACK").await;
    obs.assert_held_by(K, &ida, "after the refused DISCARD ALL")
        .await;
    assert!(!probe(&b, K, &[&ida]).await);

    exec(&a, "DISCARD ALL").await;
    obs.assert_free(K, "after DISCARD ALL").await;
    assert!(probe(&b, K, &[&ida]).await, "free after DISCARD ALL");
    let (id, unlocked) = unlock(&a, K).await;
    assert_eq!(id, ida, "same session after DISCARD ALL");
    assert!(
        !unlocked,
        "nothing left to unlock (count 2 released at once)"
    );
}

/// Transaction mode (pool_size 2, no reset): C1's session lock survives ROLLBACK and C1's
/// disconnect on the pooled backend; C2, a new client, is handed that same backend and
/// "re-enters" the lock (count 2); C2's single unlock leaves it held; a direct contender is
/// refused. The harness's own observer must agree with the ground truth.
#[tokio::test(flavor = "current_thread")]
async fn seed002_transaction_mode_handoff_inherits_lock() {
    const K: i64 = 4242424242;
    let cluster = launch("transaction-mode").await;
    let obs = Observer::connect(&cluster).await;
    let contender = direct(&cluster).await;

    let c1 = client(&cluster).await;
    exec(&c1, "BEGIN").await;
    let (id1, got) = try_lock(&c1, K).await;
    assert!(got);
    exec(&c1, "ROLLBACK").await;
    drop(c1);
    // Give PgBouncer time to see the client go; the server stays.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(obs.alive(&id1).await, "C1's backend outlives C1");
    obs.assert_held_by(K, &id1, "after C1's ROLLBACK and disconnect")
        .await;

    let c2 = client(&cluster).await;
    let (id2, got) = try_lock(&c2, K).await;
    assert_eq!(
        id2, id1,
        "C2 is handed C1's backend (same pid AND backend_start)"
    );
    assert!(got, "re-entry on the inherited backend");
    let (id2u, unlocked) = unlock(&c2, K).await;
    assert_eq!(id2u, id1);
    assert!(unlocked, "C2's unlock decrements the inherited count");
    obs.assert_held_by(K, &id1, "after C2's single unlock (count was 2)")
        .await;
    assert!(
        !probe(&contender, K, &[&id1]).await,
        "a direct contender is refused"
    );

    // Cross-check the harness's observer against the ground truth.
    let lib = pgchaos::observe::Observer::connect(&cluster)
        .await
        .expect("harness observer");
    // The server's clock, read on another connection before and after the look.
    let now = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8, \
               (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8";
    let int = |r: &Rows, i: usize| -> i64 { r[0][i].as_deref().unwrap().parse().unwrap() };
    let before = rows(&contender, now).await;
    let snap = lib.snapshot().await.expect("harness snapshot");
    let after = rows(&contender, now).await;
    let t = snap.server.expect("a look carries the server's times");
    let (b, a) = (int(&before, 0), int(&after, 0));
    assert!(
        b <= t.lo && t.lo <= t.mid && t.mid <= t.hi && t.hi <= a,
        "look times {t:?} between {b} and {a}"
    );
    assert_eq!(t.clock, int(&before, 1), "the postmaster's clock");
    let held: Vec<_> = snap.held().into_iter().collect();
    assert_eq!(held.len(), 1, "harness snapshot: {held:?}");
    assert_eq!(held[0].0.pid, id1.pid);
    assert_eq!(held[0].1, Key::Big(K));
    assert_eq!(
        snap.backend(held[0].0).map(|b| b.backend_start.as_str()),
        Some(id1.backend_start.as_str())
    );
    assert_eq!(
        held[0].0.backend_start(),
        id1.backend_start,
        "identity round-trips"
    );
    assert!(!lib.probe(Key::Big(K)).await.expect("harness probe"));

    // The second unlock finally releases it.
    let (_, last) = unlock(&c2, K).await;
    assert!(last);
    obs.assert_free(K, "after C2's second unlock").await;
    assert!(probe(&contender, K, &[&id1]).await);
}

/// Session mode with the default reset: C1's lock survives ROLLBACK while C1 is connected;
/// when C1 leaves, DISCARD ALL on release frees the key while the backend stays in the pool;
/// C2 (possibly on the same backend) holds nothing: one lock and one unlock leave no row.
#[tokio::test(flavor = "current_thread")]
async fn seed002_session_mode_reset_on_release() {
    const K: i64 = 4242424242;
    let cluster = launch("session-mode").await;
    let obs = Observer::connect(&cluster).await;
    let contender = direct(&cluster).await;

    let c1 = client(&cluster).await;
    exec(&c1, "BEGIN").await;
    let (id1, got) = try_lock(&c1, K).await;
    assert!(got);
    exec(&c1, "ROLLBACK").await;
    obs.assert_held_by(K, &id1, "after ROLLBACK, C1 connected")
        .await;
    assert!(!probe(&contender, K, &[&id1]).await);

    drop(c1);
    let took = obs.wait_free(K, "after C1 disconnected").await;
    assert!(
        obs.alive(&id1).await,
        "the lock went by the reset query, not by the backend's exit"
    );
    assert!(probe(&contender, K, &[&id1]).await, "free after C1 left");

    let c2 = client(&cluster).await;
    let id2 = identity(&c2).await;
    obs.assert_free(K, "C2 connected").await;
    let (id, got) = try_lock(&c2, K).await;
    assert_eq!(id, id2, "session mode: one backend per client");
    assert!(got);
    obs.assert_held_by(K, &id2, "C2's lock").await;
    let (_, unlocked) = unlock(&c2, K).await;
    assert!(unlocked);
    obs.assert_free(K, "after C2's single unlock: nothing was inherited")
        .await;
    eprintln!(
        "session-mode: reset freed the key {took:?} after C1 left; C2 {} C1's backend",
        if id2 == id1 {
            "reused"
        } else {
            "did not reuse"
        }
    );
}

/// Transaction mode with server_reset_query_always: a session lock taken by an autocommit
/// statement is gone before the client's next statement, which runs on the same backend.
#[tokio::test(flavor = "current_thread")]
async fn seed002_reset_always_drops_session_lock_before_next_statement() {
    const K: i64 = 4242424242;
    let cluster = launch("transaction-mode-reset-always").await;
    let obs = Observer::connect(&cluster).await;
    let contender = direct(&cluster).await;
    let c = client(&cluster).await;

    let (id1, got) = try_lock(&c, K).await;
    assert!(got);
    let (id2, own) = call(
        &c,
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())",
    )
    .await;
    assert_eq!(id2, id1, "the next statement runs on the same backend");
    assert_eq!(
        own.as_deref(),
        Some("0"),
        "the lock is gone before the next statement"
    );
    obs.assert_free(K, "after the reset").await;
    assert!(
        obs.alive(&id1).await,
        "released by the reset, not by the backend's exit"
    );
    assert!(probe(&contender, K, &[&id1]).await, "free for a contender");
    let (id3, unlocked) = unlock(&c, K).await;
    assert_eq!(id3, id1);
    assert!(!unlocked, "the client's unlock finds nothing");
}

// ---------------------------------------------------------------------------------------
// Client profiles' keys, where the tool computes them on the server.

/// GoodJob computes its per-job key in SQL, and Rails and sqlx hash what
/// `current_database()` returns: on the real server, the expression GoodJob sends gives the
/// key of `profiles/good-job.yaml`, the database the profiles' keys were derived for is the
/// one the harness's clients land in (through the pooler too), and pg_locks shows a bigint
/// key as (classid, objid) = its high and low 32 bits.
#[tokio::test(flavor = "current_thread")]
async fn profile_keys_computed_on_the_server() {
    use pgchaos::workload::keys;
    let cluster = launch("transaction-mode").await;
    let c = client(&cluster).await;
    let job = "3f1e9c2a-5b7d-4e8f-9a10-b2c3d4e5f607";
    let sql = format!(
        "SELECT {}::text, current_database()",
        keys::GOOD_JOB_LOCK_KEY_SQL.replace("$1", &format!("'good_jobs-{job}'"))
    );
    let r = rows(&c, &sql).await;
    let key: i64 = r[0][0].as_deref().unwrap().parse().unwrap();
    assert_eq!(
        key,
        keys::good_job_lock_key(&keys::good_job_lockable_key("good_jobs", job))
    );
    let profile = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/good-job.yaml"),
    )
    .unwrap();
    assert!(profile.contains(&format!("keys: [{key}]")), "{profile}");
    assert_eq!(r[0][1].as_deref(), Some("chaos"), "the profiles' database");
    // pg_locks columns of a held bigint key.
    let d = direct(&cluster).await;
    let (_, got) = try_lock(&d, key).await;
    assert!(got);
    let obs = Observer::connect(&cluster).await;
    let cols = rows(
        &obs.client,
        "SELECT classid::text, objid::text FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1",
    )
    .await;
    let (hi, lo) = keys::pg_locks_classid_objid(key);
    assert_eq!(
        (cols[0][0].as_deref(), cols[0][1].as_deref()),
        (Some(hi.to_string().as_str()), Some(lo.to_string().as_str()))
    );
    // liquibase-sessionlock's two-int key: pg_locks shows (classid, objid) = the two int4
    // as unsigned, objsubid 2 (profiles/liquibase-sessionlock.yaml's comment).
    let (a, b) = keys::liquibase_sessionlock_key("databasechangeloglock", "public");
    let r = rows(&d, &format!("SELECT pg_try_advisory_lock({a}, {b})")).await;
    assert_eq!(r[0][0].as_deref(), Some("t"));
    let cols = rows(
        &obs.client,
        "SELECT classid::text, objid::text FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2",
    )
    .await;
    assert_eq!(
        (cols[0][0].as_deref(), cols[0][1].as_deref()),
        (Some("2797599524"), Some("3317543529"))
    );
    // Airflow's lock_timeout "1800" has no unit: milliseconds (1.8 s, not 30 min), and a SET
    // made with set_config(..., false) inside a transaction is undone by its ROLLBACK
    // (profiles/airflow.yaml).
    let before = rows(&d, "SHOW lock_timeout").await;
    let r = rows(
        &d,
        "BEGIN; SELECT set_config('lock_timeout', '1800', false); SHOW lock_timeout",
    )
    .await;
    assert_eq!(r[0][0].as_deref(), Some("1800ms"), "{r:?}");
    assert_eq!(r[1][0].as_deref(), Some("1800ms"), "{r:?}");
    exec(&d, "ROLLBACK").await;
    assert_eq!(rows(&d, "SHOW lock_timeout").await, before, "rolled back");
}

/// The observer's SQL names the clients' role as the role is named: an external deployment's
/// role may be mixed-case or hold quotes. On the real server, a role `Ops"Te'am$x` holding a
/// lock is found by `sql::look` (which once read the name as `'...'::regrole` unquoted:
/// "role "ops"te'am$x" does not exist", tried by hand on 18.6), counted by
/// `sql::role_backends`, and ended by `sql::terminate_role`; the superuser's session is not.
#[tokio::test(flavor = "current_thread")]
async fn the_observers_sql_names_a_mixed_case_role_as_it_is() {
    use pgchaos::{launch::SUPERUSER, sql};
    const ROLE: &str = r#"Ops"Te'am$x"#;
    let cluster = launch("direct").await;
    let su = pgchaos::launch::connect(&cluster.direct_config(SUPERUSER))
        .await
        .unwrap();
    exec(
        &su,
        &format!(
            "CREATE ROLE {} LOGIN PASSWORD 'pw'; GRANT ALL ON DATABASE chaos TO {}",
            sql::ident(ROLE),
            sql::ident(ROLE)
        ),
    )
    .await;
    let mut config = cluster.direct_config(SUPERUSER);
    config.user(ROLE).password("pw");
    let team = pgchaos::launch::connect(&config).await.unwrap();
    let pid = rows(
        &team,
        "SELECT pg_backend_pid(), pg_try_advisory_lock(612001)",
    )
    .await;
    assert_eq!(pid[0][1].as_deref(), Some("t"));
    let pid = pid[0][0].clone().unwrap();
    let look = rows(&su, &sql::look(ROLE, false)).await;
    let listed: Vec<&Vec<Option<String>>> = look
        .iter()
        .filter(|r| r[1].as_deref() == Some(&pid))
        .collect();
    assert!(!listed.is_empty(), "{look:?}");
    assert!(
        listed.iter().any(|r| r[7].as_deref() == Some("612001")),
        "the lock's row (objid 612001): {look:?}"
    );
    assert_eq!(
        rows(&su, &sql::role_backends(ROLE)).await[0][0].as_deref(),
        Some("1")
    );
    let ended = rows(&su, &sql::terminate_role(ROLE)).await;
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0][0].as_deref(), Some(pid.as_str()));
    assert_eq!(rows(&su, "SELECT 1").await[0][0].as_deref(), Some("1"));
}
