//! Nothing outlives the harness and nobody else gets in, against real servers: teardown on
//! drop; Ctrl-C, SIGTERM and SIGHUP stop the servers and remove the run; a SIGKILLed harness
//! leaves no process, run directory or shared-memory segment (the reaper); TCP logins need
//! the run's password; a non-root user can run pgchaos after root has; I/O errors name their
//! path.

mod common;

use common::*;
use serde_json::Value;
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// `pgchaos up NAME --json` in the background, once it has printed its JSON line.
fn spawn_up(topology: &str) -> (Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["up", topology, "--json"])
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (child, v)
}

fn pid(v: &Value, path: &str) -> i32 {
    v.pointer(path)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("{path} missing in {v}")) as i32
}

/// Every process of the servers (postmaster and its children, pgbouncer), alive now.
fn server_procs(v: &Value) -> Vec<Proc> {
    let mut procs = tree(pid(v, "/postgres/pid"));
    if v["pooler"].is_object() {
        procs.extend(tree(pid(v, "/pooler/pid")));
    }
    procs.retain(Proc::alive);
    procs
}

/// The System V segment the postmaster registered, from its `postmaster.pid` (line 7).
fn sysv_segment(run_dir: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(run_dir.join("data/postmaster.pid")).ok()?;
    text.lines().nth(6)?.split_whitespace().nth(1)?.parse().ok()
}

fn segment_exists(id: i32) -> bool {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1).and_then(|s| s.parse().ok()) == Some(id))
}

fn dsm_files() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with("PostgreSQL."))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_until(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !ok() {
        assert!(t0.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Dropping a Cluster stops postgres (with all its children) and pgbouncer, and removes the
/// run directory.
#[tokio::test(flavor = "current_thread")]
async fn drop_stops_every_server_process() {
    let cluster = launch("transaction-mode").await;
    let c = client(&cluster).await;
    let _ = try_lock(&c, 1).await; // a server connection: one more postgres child
    let (pg, bouncer) = cluster.pids();
    let (pg, bouncer) = (pg.expect("postgres pid"), bouncer.expect("pgbouncer pid"));
    let mut procs = tree(pg);
    procs.extend(tree(bouncer));
    procs.retain(Proc::alive);
    assert!(
        procs.len() >= 3,
        "postmaster, children, pgbouncer: {procs:?}"
    );
    let run_dir = cluster.run_dir.clone();
    assert!(run_dir.exists());
    let segment = sysv_segment(&run_dir);
    drop(c);
    drop(cluster);
    if let Err(left) = wait_dead(&procs, STEP).await {
        panic!("still running {STEP:?} after dropping the cluster: {left:?}");
    }
    assert!(!run_dir.exists(), "{} left behind", run_dir.display());
    if let Some(id) = segment {
        assert!(
            !segment_exists(id),
            "shared memory segment {id} left behind"
        );
    }
}

/// Ctrl-C, SIGTERM (what `timeout`, CI runners and container runtimes send) and SIGHUP all
/// stop `up` the same way: exit 128 + the signal, servers stopped, run directory removed.
#[tokio::test(flavor = "current_thread")]
async fn stop_signals_stop_the_servers_and_remove_the_run() {
    for (sig, code) in [
        (libc::SIGINT, 130),
        (libc::SIGTERM, 143),
        (libc::SIGHUP, 129),
    ] {
        let (mut child, v) = spawn_up("session-mode");
        let procs = server_procs(&v);
        let run_dir = PathBuf::from(v["run_dir"].as_str().unwrap());
        assert!(procs.len() >= 2 && run_dir.is_dir(), "{v}");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(code), "signal {sig}: {err}");
        assert!(err.contains("servers stopped"), "{err}");
        if let Err(left) = wait_dead(&procs, STEP).await {
            panic!("signal {sig}: servers outlived the harness: {left:?}");
        }
        assert!(
            !run_dir.exists(),
            "signal {sig}: {} left",
            run_dir.display()
        );
    }
}

/// `timeout` stops a chaos run with SIGTERM: the servers stop and no half-written report is
/// left.
#[test]
fn timeout_stops_a_chaos_run_cleanly() {
    let out = std::env::temp_dir().join(format!("pgchaos-timeout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new("timeout")
        .args(["-s", "TERM", "4"])
        .arg(env!("CARGO_BIN_EXE_pgchaos"))
        .args([
            "chaos",
            "transaction-mode",
            "--cases",
            "100000",
            "--seed",
            "1",
        ])
        .args(["--quiet", "--out", out.to_str().unwrap()])
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(124), "timeout's code: {err}");
    assert!(
        err.contains("interrupted by SIGTERM; servers stopped"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(out.join("transaction-mode"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing half-written: {left:?}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A server that dies under the harness: `up` notices, exits 2 naming it, and stops the other.
#[test]
fn a_server_that_dies_is_reported() {
    let (mut child, v) = spawn_up("transaction-mode");
    let pg = pid(&v, "/postgres/pid");
    let bouncer = pid(&v, "/pooler/pid");
    // SAFETY: signalling a process this test's child started.
    unsafe { libc::kill(pg, libc::SIGKILL) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("Postgres") && err.contains("died"), "{err}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !Path::new(&format!("/proc/{bouncer}")).exists()
            || std::fs::read_to_string(format!("/proc/{bouncer}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "pgbouncer outlived the harness"
    );
}

/// `pgchaos up` killed with SIGKILL (no Drop, no signal handler) still leaves nothing: the
/// servers die with it (parent-death signal), and the reaper removes the run directory and
/// the postmaster's System V segment. No dynamic shared memory segment appears in /dev/shm.
#[tokio::test(flavor = "current_thread")]
async fn sigkilled_harness_leaves_nothing() {
    // Orphans come here, not to PID 1 (which on these machines reaps zombies only lazily).
    become_subreaper();
    let dsm_before = dsm_files();
    let (mut child, v) = spawn_up("transaction-mode");
    let run_dir = PathBuf::from(v["run_dir"].as_str().unwrap());
    let procs = server_procs(&v);
    assert!(
        procs.len() >= 3,
        "postmaster, children, pgbouncer: {procs:?}"
    );
    let segment = sysv_segment(&run_dir).expect("the postmaster registered a segment");
    assert!(segment_exists(segment));
    // Give the servers some work so their shared memory is in use.
    let c = {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(&run_dir)
            .port(v["pooler"]["port"].as_u64().unwrap() as u16)
            .user("chaos")
            .dbname("chaos");
        pgchaos::launch::connect(&cfg).await.unwrap()
    };
    let _ = try_lock(&c, 7).await;

    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    drop(c);
    if let Err(left) = wait_dead(&procs, Duration::from_secs(5)).await {
        let zombies: Vec<bool> = left.iter().map(Proc::zombie).collect();
        panic!("left 5 s after SIGKILL of the harness: {left:?} (zombie: {zombies:?})")
    }
    wait_until(Duration::from_secs(10), "the run directory removed", || {
        !run_dir.exists()
    })
    .await;
    wait_until(
        Duration::from_secs(5),
        "the shared memory segment removed",
        || !segment_exists(segment),
    )
    .await;
    let new: Vec<String> = dsm_files()
        .into_iter()
        .filter(|f| !dsm_before.contains(f))
        .collect();
    assert!(
        new.is_empty(),
        "dynamic shared memory left in /dev/shm: {new:?}"
    );
}

/// A topology where most steps freeze a backend or PgBouncer (SIGSTOP) for 3 s.
const FREEZING_TOPOLOGY: &str = r#"
name: sigkill-during-a-fault
description: Transaction pooling where most steps are faults freezing a backend or PgBouncer.
postgres:
  version: "18.6"
  settings:
    max_connections: 40
pgbouncer:
  version: "1.25.2"
  pool_mode: transaction
  default_pool_size: 2
  max_client_conn: 50
workload:
  clients: 4
  keys: [4242424242, 612001]
  api: session
  steps: 1..40
  lock_timeout: 1ms
faults: { kinds: { backend_freeze: 1, pooler_freeze: 1 }, weight: 50, hold: 3s }
run: { cases: 1000, time_limit: 60s, seed: 1 }
expect:
  app.mutual_exclusion: violated
  app.no_orphans: violated
  app.unlock_reaches_owner: violated
  app.rollback_releases: violated
  app.no_stale_holder: violated
  app.no_lost_lock: violated
"#;

/// `(comm, state, ppid)` from `/proc/<pid>/stat`.
fn comm_state_ppid(pid: i32) -> Option<(String, char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut f = text.get(close + 1..)?.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// Every pid in /proc with its `(comm, state, ppid)`, now.
fn all_procs() -> Vec<(i32, String, char, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| comm_state_ppid(p).map(|(c, s, pp)| (p, c, s, pp)))
        .collect()
}

/// Live (non-zombie) `postgres` and `pgbouncer` processes of the run in `run_dir`, whoever
/// their parent is now: a postgres process works in `<run_dir>/data`, PgBouncer is started
/// with `<run_dir>/pgbouncer.ini`. Catches what forked after a snapshot of the tree.
fn run_servers(run_dir: &Path) -> Vec<Proc> {
    let dir = run_dir.to_string_lossy().to_string();
    all_procs()
        .into_iter()
        .filter(|(_, comm, state, _)| {
            (comm == "postgres" || comm == "pgbouncer") && !matches!(state, 'Z' | 'X')
        })
        .filter(|(pid, ..)| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|p| p.to_string_lossy().to_string())
                .unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            cwd.starts_with(&dir) || cmdline.contains(&dir)
        })
        .filter_map(|(pid, ..)| Proc::of(pid))
        .collect()
}

/// The harness child, SIGKILLed if the test fails before it does (the reaper cleans up).
struct Harness(Child);

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A temporary directory, removed however the test ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which server a fault holds stopped when the harness is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frozen {
    /// PgBouncer itself (`pooler_freeze`).
    Pooler,
    /// A child of the run's postmaster (`backend_freeze`).
    Backend,
}

/// Start `pgchaos chaos` on [`FREEZING_TOPOLOGY`], wait (30 s at most) until a fault holds
/// `frozen` stopped (state `T`), SIGKILL the harness and check, within 10 s, that nothing of
/// the run is left. Returns what happened, for the log.
async fn sigkill_while_frozen(frozen: Frozen) -> String {
    let dsm_before = dsm_files();
    let tmp =
        std::env::temp_dir().join(format!("pgchaos-sigkill-{frozen:?}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let _tmp = TempDir(tmp.clone());
    let topology = tmp.join("sigkill-during-a-fault.yaml");
    std::fs::write(&topology, FREEZING_TOPOLOGY).unwrap();
    let stderr_path = tmp.join("stderr.txt");
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let child = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .arg("chaos")
        .arg(&topology)
        .args(["--quiet", "--out"])
        .arg(tmp.join("reports"))
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let mut harness = Harness(child);
    let harness_pid = harness.0.id() as i32;
    let base = pgchaos::launch::runtime::base();
    let prefix = format!("run-{harness_pid}-");

    let t0 = std::time::Instant::now();
    let within = Duration::from_secs(30);
    let (run_dir, stopped, postmasters, snapshot, reaper) = loop {
        if let Some(status) = harness.0.try_wait().unwrap() {
            panic!(
                "the harness ended ({status}) before a {frozen:?} was stopped: {}",
                stderr()
            );
        }
        let run_dir = std::fs::read_dir(&base).ok().and_then(|d| {
            d.flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
        });
        let procs = all_procs();
        let child_of = |parent: i32, name: &str| -> Vec<i32> {
            procs
                .iter()
                .filter(|(_, comm, _, ppid)| *ppid == parent && comm == name)
                .map(|(pid, ..)| *pid)
                .collect()
        };
        let postmasters = child_of(harness_pid, "postgres");
        let poolers = child_of(harness_pid, "pgbouncer");
        let stopped = procs.iter().find(|(pid, _, state, ppid)| {
            *state == 'T'
                && match frozen {
                    Frozen::Pooler => poolers.contains(pid),
                    Frozen::Backend => postmasters.contains(ppid),
                }
        });
        if let (Some(run_dir), Some((pid, comm, ..))) = (run_dir.clone(), stopped) {
            let mut snapshot: Vec<Proc> = vec![];
            for p in postmasters.iter().chain(&poolers) {
                snapshot.extend(tree(*p));
            }
            let reaper = procs
                .iter()
                .filter(|(_, comm, _, ppid)| *ppid == harness_pid && comm == "sh")
                .find_map(|(p, ..)| {
                    let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
                    String::from_utf8_lossy(&cmdline)
                        .contains("pgchaos-reaper")
                        .then(|| Proc::of(*p))?
                });
            let stopped = Proc::of(*pid).map(|p| (p, comm.clone()));
            let postmasters: Vec<Proc> = postmasters.iter().filter_map(|p| Proc::of(*p)).collect();
            break (
                run_dir,
                stopped.expect("the stopped process"),
                postmasters,
                snapshot,
                reaper,
            );
        }
        assert!(
            t0.elapsed() < within,
            "no {frozen:?} in state T (stopped) within {within:?} of starting `pgchaos chaos` \
             with backend_freeze and pooler_freeze (hold 3s, weight 50); run directory \
             {run_dir:?}, postmasters {postmasters:?}, pgbouncer {poolers:?}; stderr: {}",
            stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stopped_at = t0.elapsed();
    assert!(
        snapshot.contains(&stopped.0),
        "{stopped:?} in the servers' tree {snapshot:?}"
    );
    assert!(
        snapshot.len() >= 3,
        "postmaster, children, pgbouncer: {snapshot:?}"
    );
    let reaper = reaper.expect("the run's reaper (sh ... pgchaos-reaper) is the harness's child");
    let segment = sysv_segment(&run_dir).expect("the postmaster registered a segment");
    assert!(segment_exists(segment));

    let still_stopped = matches!(comm_state_ppid(stopped.0.pid), Some((_, 'T', _)));
    harness.0.kill().unwrap(); // SIGKILL
    let killed = std::time::Instant::now();
    let status = harness.0.wait().unwrap();
    // Diagnostic: is the postmaster already dead (parent-death signal) when the reaper can
    // first act?
    let postmaster_states: Vec<_> = postmasters
        .iter()
        .map(|p| {
            let state = if p.alive() {
                comm_state_ppid(p.pid).map(|(_, s, _)| s)
            } else {
                None
            };
            (p.pid, state)
        })
        .collect();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", stderr());

    // Within 10 s: no server process of the run (the tree seen before the kill, the stopped
    // one included, and anything of the run found since), zombies reaped; the reaper done.
    let within = Duration::from_secs(10);
    let mut procs = snapshot.clone();
    procs.push(reaper);
    loop {
        for p in run_servers(&run_dir) {
            if !procs.contains(&p) {
                procs.push(p);
            }
        }
        match wait_dead(&procs, Duration::ZERO).await {
            Ok(_) => break,
            Err(left) if killed.elapsed() > within => {
                let states: Vec<_> = left
                    .iter()
                    .map(|p| comm_state_ppid(p.pid).map(|(c, s, pp)| format!("{c} {s} ppid {pp}")))
                    .collect();
                // Do not leave a stopped server behind for the next test: the reaper did not
                // get it, so this test does (its own run's processes, by pid).
                for p in &left {
                    if p.alive() && p.pid != reaper.pid {
                        // SAFETY: a process of this test's run, checked by start time.
                        unsafe { libc::kill(p.pid, libc::SIGKILL) };
                    }
                }
                let _ = wait_dead(&left, Duration::from_secs(2)).await;
                panic!(
                    "left {within:?} after SIGKILL of the harness while a fault held {frozen:?} \
                     {stopped:?} stopped (still stopped just before the kill: {still_stopped}): \
                     {left:?} ({states:?}); the postmaster(s) when the harness was reaped (pid, \
                     state; None: dead): {postmaster_states:?}"
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let left = within.saturating_sub(killed.elapsed());
    wait_until(left, "the run directory removed", || !run_dir.exists()).await;
    let left = within.saturating_sub(killed.elapsed());
    wait_until(left, "the shared memory segment removed", || {
        !segment_exists(segment)
    })
    .await;
    let new: Vec<String> = dsm_files()
        .into_iter()
        .filter(|f| !dsm_before.contains(f))
        .collect();
    assert!(
        new.is_empty(),
        "dynamic shared memory left in /dev/shm: {new:?}"
    );
    format!(
        "{frozen:?} {stopped:?} stopped {stopped_at:?} after the start (still stopped just \
         before the kill: {still_stopped}); everything gone {:?} after SIGKILL",
        killed.elapsed()
    )
}

/// `pgchaos chaos` SIGKILLed while a fault holds a server stopped (SIGSTOP), PgBouncer
/// (`pooler_freeze`) then a backend (`backend_freeze`): a stopped process does not notice
/// that its parent is gone, yet nothing is left: no process of the run (the stopped one
/// included), no zombie we cannot reap, no System V segment, no dynamic shared memory segment
/// in /dev/shm, no run directory.
#[tokio::test(flavor = "current_thread")]
async fn sigkill_during_a_fault_leaves_nothing() {
    // Orphans come here, not to PID 1 (which on these machines reaps zombies only lazily).
    become_subreaper();
    for frozen in [Frozen::Pooler, Frozen::Backend] {
        let what = sigkill_while_frozen(frozen).await;
        eprintln!("sigkill_during_a_fault_leaves_nothing: {what}");
    }
}

/// Over TCP, PostgreSQL and PgBouncer want the run's password; the Unix sockets live in a
/// directory only the harness's user can enter; the credentials file is private.
#[tokio::test(flavor = "current_thread")]
async fn tcp_logins_need_the_runs_password() {
    let cluster = launch("transaction-mode").await;
    let run = &cluster.run_dir;
    assert_eq!(std::fs::metadata(run).unwrap().mode() & 0o777, 0o700);
    let creds = run.join("credentials.txt");
    assert_eq!(std::fs::metadata(&creds).unwrap().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&creds).unwrap();
    assert!(text.contains(&cluster.client_dsn()), "{text}");

    // With the password: in, directly and through the pooler.
    for cfg in [
        cluster.direct_config("postgres"),
        cluster.direct_config("chaos"),
    ] {
        let c = pgchaos::launch::connect(&cfg)
            .await
            .expect("with the password");
        assert_eq!(
            pgchaos::launch::simple_first(&c, "SELECT 1").await.unwrap(),
            "1"
        );
    }
    let port = cluster.pooler_port.unwrap();
    let mut pooled = tokio_postgres::Config::new();
    pooled
        .host("127.0.0.1")
        .port(port)
        .user("chaos")
        .dbname("chaos")
        .password(cluster.password("chaos").unwrap());
    let c = pgchaos::launch::connect(&pooled)
        .await
        .expect("pooler with the password");
    assert_eq!(
        pgchaos::launch::simple_first(&c, "SELECT 2").await.unwrap(),
        "2"
    );

    // Without it, or with a wrong one: refused, by both.
    for (port, user, db) in [
        (cluster.pg_port, "postgres", "chaos"),
        (cluster.pg_port, "chaos", "chaos"),
        (port, "chaos", "chaos"),
        (port, "postgres", "pgbouncer"),
    ] {
        for pw in [None, Some("wrong")] {
            let mut cfg = tokio_postgres::Config::new();
            cfg.host("127.0.0.1").port(port).user(user).dbname(db);
            if let Some(p) = pw {
                cfg.password(p);
            }
            let r = pgchaos::launch::connect(&cfg).await;
            assert!(
                r.is_err(),
                "{user}@127.0.0.1:{port}/{db} with password {pw:?} got in"
            );
        }
    }
}

/// A normal user can run pgchaos on a machine where root (or anyone) ran it before: each
/// user's runtime files are apart (`/dev/shm/pgchaos-<uid>`). As root this test creates a
/// user and runs as it; as a normal user it runs as itself. Binaries come from the shared
/// cache (readable by all); the user's own cache holds its initdb template.
#[test]
fn a_normal_user_can_run_after_root() {
    // Root (this test, when root) has a runtime directory already.
    let t = pgchaos::topology::Topology::load(
        &root().join("topologies/transaction-mode.yaml"),
        &pgchaos::catalog(),
    )
    .unwrap();
    let (pg, bouncer) = pgchaos::launch::binaries(&t, true).unwrap();
    let bouncer = bouncer.unwrap();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    // A user this test creates is removed when it ends, however it ends (with its home, its
    // cache and its runtime directory); one that was there before is left as it was.
    let mut _created = None;
    let (uid, gid, home) = if as_root {
        let name = "pgchaos-ci-user";
        let made = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", name])
            .status()
            .is_ok_and(|s| s.success());
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, name]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        let uid = id("-u");
        if made {
            _created = Some(CreatedUser { name, uid });
        }
        (uid, id("-g"), PathBuf::from(format!("/home/{name}")))
    } else {
        // SAFETY: getuid/getgid have no preconditions.
        let (u, g) = unsafe { (libc::getuid(), libc::getgid()) };
        (u, g, PathBuf::from(std::env::var("HOME").unwrap()))
    };
    // The workspace must be readable by the user (it is under /work here); reports go to
    // a directory of the user's own.
    let out = std::env::temp_dir().join(format!("pgchaos-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = env!("CARGO_BIN_EXE_pgchaos");
    let run = |args: &[&str]| {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", &home)
            .env("PGCHAOS_QUIET", "1")
            .env("PGCHAOS_PG_BIN", &pg.bin_dir)
            .env("PGCHAOS_PGBOUNCER_BIN", &bouncer.path);
        if as_root {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd.output().unwrap()
    };
    let o = run(&["up", "transaction-mode", "--once", "--json"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "as uid {uid}: {all}");
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    let run_dir = v["run_dir"].as_str().unwrap();
    assert!(
        run_dir.contains(&format!("pgchaos-{uid}/")),
        "the user's own runtime directory: {run_dir}"
    );
    let o = run(&[
        "chaos",
        "transaction-mode",
        "--cases",
        "64",
        "--seed",
        "1",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "as uid {uid}: {all}");
    let report = out.join("transaction-mode/latest/results.json");
    assert_eq!(std::fs::metadata(&report).unwrap().uid(), uid);
    let _ = std::fs::remove_dir_all(&out);
}

/// A user account a test created: removed on drop (`userdel -r`), with its runtime directory.
struct CreatedUser {
    name: &'static str,
    uid: u32,
}

impl Drop for CreatedUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(format!("/dev/shm/pgchaos-{}", self.uid));
        let _ = Command::new("userdel").args(["-r", self.name]).output();
    }
}

/// An I/O error names the path and what was attempted: a run directory base that is a file,
/// a report root that cannot be created.
#[test]
fn io_errors_name_their_path() {
    let tmp = std::env::temp_dir().join(format!("pgchaos-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let file = tmp.join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["up", "direct", "--once"])
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .env("PGCHAOS_RUN_DIR", &file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(file.to_str().unwrap()),
        "names the path: {err}"
    );
    assert!(err.contains("not a directory"), "says what is wrong: {err}");
    let o = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["chaos", "direct", "--cases", "1", "--quiet", "--out"])
        .arg(file.join("reports"))
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(file.to_str().unwrap()),
        "names the path: {err}"
    );
    assert!(err.contains("creating"), "says what was attempted: {err}");
    let _ = std::fs::remove_dir_all(&tmp);
}
