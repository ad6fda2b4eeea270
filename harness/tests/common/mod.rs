//! Shared helpers for the ground-truth tests.
//!
//! Deliberately independent of the harness's own SQL (`sql.rs`, `observer.rs`): these tests
//! are the reference the harness is checked against. Only the launcher comes from the
//! library. Every connect goes through the launcher's bounded `connect`, every query through
//! [`try_rows`] (bounded by [`STEP`]); a timeout fails the test.
//!
//! Identity is always `(pg_backend_pid(), backend_start)`, captured in the same statement as
//! the lock call, and compared as a pair, never by pid alone.
#![allow(dead_code)]

use pgchaos::launch::{CLIENT_ROLE, Cluster, SUPERUSER};
use std::fmt;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, SimpleQueryMessage};

/// Bound on every single query and on every "wait until" poll.
pub const STEP: Duration = Duration::from_secs(5);
/// Bound on launching a topology (provisioning from the cache, template copy, start).
pub const LAUNCH: Duration = Duration::from_secs(120);

pub type Rows = Vec<Vec<Option<String>>>;

/// `topologies/NAME.yaml` of this workspace, independent of the cwd.
pub fn topology_path(name: &str) -> String {
    format!("{}/../topologies/{name}.yaml", env!("CARGO_MANIFEST_DIR"))
}

/// A shipped topology, validated.
pub fn topology(name: &str) -> pgchaos::topology::Topology {
    let path = topology_path(name);
    pgchaos::topology::Topology::load(std::path::Path::new(&path), &pgchaos::catalog())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The test suite runs with strict versions: a server other than the declared version fails
/// to launch instead of drifting (PgBouncer 1.25.2 comes from the source mirror, see
/// docs/provisioning.md). The tests of drift itself set `PGCHAOS_STRICT_VERSIONS=0` on the
/// commands they run.
pub fn launch_options() -> pgchaos::launch::LaunchOptions {
    pgchaos::launch::LaunchOptions {
        strict_versions: true,
        ..Default::default()
    }
}

/// Launch a topology by name through the harness's launcher (provisioned from the cache,
/// not pinned, strict versions).
pub async fn launch(name: &str) -> Cluster {
    launch_with(name, None).await
}

/// The same with another launcher than the topology's.
pub async fn launch_with(name: &str, launcher: Option<pgchaos::topology::LauncherKind>) -> Cluster {
    let t = topology(name);
    let opts = pgchaos::launch::LaunchOptions {
        launcher,
        ..launch_options()
    };
    match tokio::time::timeout(LAUNCH, pgchaos::launch::launch(&t, opts)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("launching topology {name}: {e:#}"),
        Err(_) => panic!("launching topology {name}: not ready within {LAUNCH:?}"),
    }
}

/// A logical client's connection (through the pooler when the topology has one).
pub async fn client(cluster: &Cluster) -> Client {
    pgchaos::launch::connect(&cluster.client_config())
        .await
        .unwrap_or_else(|e| panic!("client connect: {e:#}"))
}

/// A direct PostgreSQL connection as the client role (a contender that bypasses the pooler).
pub async fn direct(cluster: &Cluster) -> Client {
    pgchaos::launch::connect(&cluster.direct_config(CLIENT_ROLE))
        .await
        .unwrap_or_else(|e| panic!("direct connect: {e:#}"))
}

/// One simple-query message, bounded by [`STEP`]; rows of every statement, in order.
/// Panics on timeout (after sending a cancel), returns the server's error otherwise.
pub async fn try_rows(client: &Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    match tokio::time::timeout(STEP, client.simple_query(sql)).await {
        Ok(Ok(msgs)) => Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let _ = tokio::time::timeout(
                STEP,
                client.cancel_token().cancel_query(tokio_postgres::NoTls),
            )
            .await;
            panic!("no reply within {STEP:?} to {sql:?}")
        }
    }
}

/// [`try_rows`] that fails the test on a server error.
pub async fn rows(client: &Client, sql: &str) -> Rows {
    try_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"))
}

/// Run a statement that returns no rows we care about (BEGIN, ROLLBACK, DISCARD ALL...).
pub async fn exec(client: &Client, sql: &str) {
    rows(client, sql).await;
}

/// SQLSTATE of an error, or `"closed"` when the connection is gone.
pub fn code(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| "closed".into())
}

/// A PostgreSQL backend: `(pg_backend_pid(), backend_start)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ident {
    pub pid: i32,
    pub backend_start: String,
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(pid {}, started {})", self.pid, self.backend_start)
    }
}

impl Ident {
    fn from_row(row: &[Option<String>]) -> Ident {
        Ident {
            pid: row[0]
                .as_deref()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("bad pid in {row:?}")),
            backend_start: row[1]
                .clone()
                .unwrap_or_else(|| panic!("no backend_start in {row:?}")),
        }
    }

    /// SQL condition matching exactly this backend in `pg_stat_activity`.
    fn where_clause(&self) -> String {
        format!(
            "pid = {} AND backend_start::text = '{}'",
            self.pid,
            self.backend_start.replace('\'', "''")
        )
    }
}

fn identity_sql(expr: &str) -> String {
    format!(
        "SELECT pg_backend_pid(), backend_start::text, {expr} \
         FROM pg_stat_get_activity(pg_backend_pid())"
    )
}

/// Evaluate `expr` (e.g. `pg_try_advisory_lock(42)`) in the same statement as the serving
/// backend's identity. Returns the identity and the expression's text value.
pub async fn try_call(
    client: &Client,
    expr: &str,
) -> Result<(Ident, Option<String>), tokio_postgres::Error> {
    let sql = identity_sql(expr);
    let r = try_rows(client, &sql).await?;
    assert_eq!(r.len(), 1, "{sql:?} returned {r:?}");
    Ok((Ident::from_row(&r[0]), r[0][2].clone()))
}

/// [`try_call`] that fails the test on a server error.
pub async fn call(client: &Client, expr: &str) -> (Ident, Option<String>) {
    try_call(client, expr)
        .await
        .unwrap_or_else(|e| panic!("{expr} failed: {e}"))
}

/// A boolean lock call (`pg_try_advisory_lock`, `pg_advisory_unlock`, ...) with identity.
pub async fn lock_call(client: &Client, expr: &str) -> (Ident, bool) {
    let (id, v) = call(client, expr).await;
    let b = match v.as_deref() {
        Some("t") => true,
        Some("f") => false,
        other => panic!("{expr} returned {other:?}, expected a boolean"),
    };
    (id, b)
}

/// The backend serving this connection right now.
pub async fn identity(client: &Client) -> Ident {
    call(client, "NULL").await.0
}

pub async fn try_lock(client: &Client, key: i64) -> (Ident, bool) {
    lock_call(client, &format!("pg_try_advisory_lock({key})")).await
}

pub async fn unlock(client: &Client, key: i64) -> (Ident, bool) {
    lock_call(client, &format!("pg_advisory_unlock({key})")).await
}

pub async fn try_xact_lock(client: &Client, key: i64) -> (Ident, bool) {
    lock_call(client, &format!("pg_try_advisory_xact_lock({key})")).await
}

/// The contender's availability probe: the try form at transaction scope, in autocommit, so
/// it leaves nothing behind. Asserts the contender is a different backend from every
/// `not_like` identity (a "fresh" contender in the protocol's sense).
pub async fn probe(contender: &Client, key: i64, not_like: &[&Ident]) -> bool {
    let (id, got) = try_xact_lock(contender, key).await;
    for other in not_like {
        assert_ne!(
            &&id, other,
            "the contender must be a different backend from {other}"
        );
    }
    got
}

/// One row of `pg_locks JOIN pg_stat_activity` for a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// `backend_start` is `"<gone>"` when the lock's pid is not in pg_stat_activity.
    pub id: Ident,
    pub mode: String,
    pub granted: bool,
}

/// The observer: a separate direct superuser connection reading `pg_locks` and
/// `pg_stat_activity`.
pub struct Observer {
    pub client: Client,
    pub me: Ident,
}

impl Observer {
    pub async fn connect(cluster: &Cluster) -> Observer {
        let client = pgchaos::launch::connect(&cluster.direct_config(SUPERUSER))
            .await
            .unwrap_or_else(|e| panic!("observer connect: {e:#}"));
        let me = identity(&client).await;
        Observer { client, me }
    }

    /// Every advisory lock row on bigint `key` in this database, with the holder's identity.
    pub async fn holders(&self, key: i64) -> Vec<Holder> {
        let (classid, objid) = ((key as u64) >> 32, (key as u64) & 0xffff_ffff);
        let sql = format!(
            "SELECT l.pid, coalesce(a.backend_start::text, '<gone>'), l.mode, l.granted \
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND l.classid = '{classid}'::oid AND l.objid = '{objid}'::oid AND l.objsubid = 1 \
             ORDER BY l.pid, l.mode"
        );
        rows(&self.client, &sql)
            .await
            .iter()
            .map(|r| Holder {
                id: Ident::from_row(r),
                mode: r[2].clone().unwrap_or_default(),
                granted: r[3].as_deref() == Some("t"),
            })
            .collect()
    }

    /// Asserts `key` is held, granted, by exactly `id` and nobody else.
    pub async fn assert_held_by(&self, key: i64, id: &Ident, context: &str) {
        let h = self.holders(key).await;
        assert_eq!(
            h,
            vec![Holder {
                id: id.clone(),
                mode: "ExclusiveLock".into(),
                granted: true
            }],
            "{context}: key {key} should be held by exactly {id}"
        );
    }

    /// Asserts no backend holds or waits for `key`.
    pub async fn assert_free(&self, key: i64, context: &str) {
        let h = self.holders(key).await;
        assert!(
            h.is_empty(),
            "{context}: key {key} should have no lock row, got {h:?}"
        );
    }

    /// Poll until no lock row for `key` remains; returns how long it took. Panics after
    /// [`STEP`].
    pub async fn wait_free(&self, key: i64, context: &str) -> Duration {
        let t0 = Instant::now();
        loop {
            let h = self.holders(key).await;
            if h.is_empty() {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < STEP,
                "{context}: key {key} still has lock rows after {STEP:?}: {h:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Is exactly this `(pid, backend_start)` in pg_stat_activity?
    pub async fn alive(&self, id: &Ident) -> bool {
        let sql = format!("SELECT 1 FROM pg_stat_activity WHERE {}", id.where_clause());
        !rows(&self.client, &sql).await.is_empty()
    }

    /// `(state, query)` of this backend, if present.
    pub async fn activity(&self, id: &Ident) -> Option<(String, String)> {
        let sql = format!(
            "SELECT state, query FROM pg_stat_activity WHERE {}",
            id.where_clause()
        );
        rows(&self.client, &sql).await.first().map(|r| {
            (
                r[0].clone().unwrap_or_default(),
                r[1].clone().unwrap_or_default(),
            )
        })
    }

    /// Poll until this identity has left pg_stat_activity; returns how long it took.
    /// Panics after [`STEP`].
    pub async fn wait_gone(&self, id: &Ident, context: &str) -> Duration {
        let t0 = Instant::now();
        while self.alive(id).await {
            assert!(
                t0.elapsed() < STEP,
                "{context}: backend {id} still in pg_stat_activity after {STEP:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        t0.elapsed()
    }

    async fn signal(&self, func: &str, id: &Ident) -> bool {
        let sql = format!(
            "SELECT {func}(pid) FROM pg_stat_activity WHERE {}",
            id.where_clause()
        );
        let r = rows(&self.client, &sql).await;
        assert_eq!(r.len(), 1, "{func}: backend {id} not found");
        r[0][0].as_deref() == Some("t")
    }

    /// `pg_terminate_backend` of exactly this identity (the signal only; see `wait_gone`).
    pub async fn terminate(&self, id: &Ident) -> bool {
        self.signal("pg_terminate_backend", id).await
    }

    /// `pg_cancel_backend` of exactly this identity.
    pub async fn cancel(&self, id: &Ident) -> bool {
        self.signal("pg_cancel_backend", id).await
    }
}

// ---------------------------------------------------------------------------------------
// OS processes

/// A process as `/proc/<pid>/stat` shows it: pid plus start time (so a reused pid is not
/// mistaken for the original).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub start_ticks: u64,
}

/// `(state, ppid, start_ticks)` from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.first()?.chars().next()?,
        f.get(1)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
    ))
}

impl Proc {
    pub fn of(pid: i32) -> Option<Proc> {
        stat(pid).map(|(_, _, start_ticks)| Proc { pid, start_ticks })
    }

    /// Still exists: `kill(pid, 0)` succeeds and `/proc/<pid>` is the same process (start
    /// time), zombies included: [`wait_dead`] reaps the ones it can.
    pub fn alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence and permission.
        let exists = unsafe { libc::kill(self.pid, 0) } == 0;
        exists && matches!(stat(self.pid), Some((_, _, start)) if start == self.start_ticks)
    }

    /// A zombie (exited, not yet reaped by its parent).
    pub fn zombie(&self) -> bool {
        matches!(stat(self.pid), Some((state, _, start)) if start == self.start_ticks
            && matches!(state, 'Z' | 'X'))
    }

    /// Reap it if it is a zombie child of this process (see [`become_subreaper`]).
    fn reap(&self) {
        if self.zombie() {
            let mut status = 0;
            // SAFETY: WNOHANG on one pid; ECHILD when it is not our child is harmless.
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// Make this process the child subreaper of its descendants, so that servers orphaned by a
/// killed harness are re-parented here (rather than to an init that may reap them lazily)
/// and [`wait_dead`] can reap them: gone then means `kill(pid, 0)` fails.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// `pid` and all its descendants, now.
pub fn tree(pid: i32) -> Vec<Proc> {
    let mut all: Vec<(i32, i32)> = vec![];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                && let Some((_, ppid, _)) = stat(p)
            {
                all.push((p, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out.into_iter().filter_map(Proc::of).collect()
}

/// Wait until none of `procs` exists any more (`kill(pid, 0)` fails or `/proc/<pid>` is
/// another process), reaping the zombies that are ours; returns the time it took, or the
/// survivors (zombies included) after `within`.
pub async fn wait_dead(procs: &[Proc], within: Duration) -> Result<Duration, Vec<Proc>> {
    let t0 = Instant::now();
    loop {
        procs.iter().for_each(Proc::reap);
        let alive: Vec<Proc> = procs.iter().copied().filter(Proc::alive).collect();
        if alive.is_empty() {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > within {
            return Err(alive);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------
// The binary, for the command-line tests (cli.rs, browser.rs).

/// The workspace root.
pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// Run the pgchaos binary from the workspace root (quiet, strict versions).
///
/// A `chaos` run is given `--require-expected`: the project's own tests hold a run to every
/// violation its topology expects (a user's short run is told what it did not reach, and
/// passes).
pub fn pgchaos(args: &[&str]) -> std::process::Output {
    let mut args: Vec<&str> = args.to_vec();
    if args.first() == Some(&"chaos") {
        args.push("--require-expected");
    }
    command()
        .args(args)
        .current_dir(root())
        .output()
        .expect("run pgchaos")
}

/// The pgchaos binary as a command: quiet, strict versions (`PGCHAOS_STRICT_VERSIONS=1`).
pub fn command() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_pgchaos"));
    c.env("PGCHAOS_QUIET", "1")
        .env("PGCHAOS_STRICT_VERSIONS", "1");
    c
}

/// A run's stdout and stderr, for assertion messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh, empty temporary directory for one test.
pub fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pgchaos-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The latest run of `topology` under `out` (`--out`): its directory and results.json.
pub fn latest(out: &std::path::Path, topology: &str) -> (std::path::PathBuf, serde_json::Value) {
    let dir = out.join(topology).join("latest").canonicalize().unwrap();
    let v =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    (dir, v)
}

/// What `chaos` or `analyze` exiting 0 or 1 means, asserted from the run's own results: 0
/// when the run passed (`results.passed`), 1 when it did not, and then because some app.*
/// verdict is not the one the topology expects (the callers assert no pg.* violation apart).
/// Returns the app.* invariants whose verdict differs from the expectation, in words.
pub fn exit_is_the_verdicts(o: &std::process::Output, results: &serde_json::Value) -> Vec<String> {
    let differ: Vec<String> = results["invariants"]
        .as_array()
        .expect("results.json has invariants")
        .iter()
        .filter(|i| i["name"].as_str().is_some_and(|n| n.starts_with("app.")))
        .filter(|i| i["verdict"] != i["expected"])
        .map(|i| {
            format!(
                "{} {} (expected {})",
                i["name"], i["verdict"], i["expected"]
            )
        })
        .collect();
    let passed = results["passed"]
        .as_bool()
        .expect("results.json says passed");
    assert_eq!(
        o.status.code(),
        Some(if passed { 0 } else { 1 }),
        "the exit is results.json's passed ({passed}); app.* verdicts that differ: {differ:?}\n{}",
        text(o)
    );
    if !passed {
        assert!(
            !differ.is_empty(),
            "exit 1 with every app.* verdict as expected: {results}\n{}",
            text(o)
        );
    }
    differ
}

/// What `matrix` or `merge` exiting 0 or 1 means, asserted from matrix.json's cells: 1 when
/// some cell fails the gate (it could not run; its worst class is unsafe, not accepted, and
/// worse than its written expectation or anything unsafe when nothing is written; or, held to
/// its expectation, it did not reach it), else 0. Returns the failing cells, in words.
pub fn exit_is_the_cells(o: &std::process::Output, matrix: &serde_json::Value) -> Vec<String> {
    use pgchaos::profile::Class;
    let class = |v: &serde_json::Value| v.as_str().and_then(Class::from_name);
    let failing: Vec<String> = matrix["cells"]
        .as_array()
        .expect("matrix.json has cells")
        .iter()
        .filter(|c| {
            let Some(worst) = class(&c["worst"]) else {
                return true;
            };
            let accepted = c["accepted"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| class(x) == Some(worst)));
            !accepted
                && match class(&c["expected"]) {
                    None => worst.is_unsafe(),
                    Some(e) => worst < e || (c["require_expected"] == true && worst != e),
                }
        })
        .map(|c| {
            format!(
                "{} on {}: {} (expected {})",
                c["profile"], c["topology"], c["worst"], c["expected"]
            )
        })
        .collect();
    assert_eq!(
        o.status.code(),
        Some(if failing.is_empty() { 0 } else { 1 }),
        "the exit is whether a cell fails the gate: {failing:?}\n{}",
        text(o)
    );
    failing
}
