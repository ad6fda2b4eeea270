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
    if v["pgbouncer"].is_object() {
        procs.extend(tree(pid(v, "/pgbouncer/pid")));
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
    let bouncer = pid(&v, "/pgbouncer/pid");
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
            .port(v["pgbouncer"]["port"].as_u64().unwrap() as u16)
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
        pgchaos::check::catalog(),
    )
    .unwrap();
    let (pg, bouncer) = pgchaos::provision::binaries(&t, false).unwrap();
    let bouncer = bouncer.unwrap();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    let (uid, gid, home) = if as_root {
        let name = "pgchaos-ci-user";
        let _ = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", name])
            .status();
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, name]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        (id("-u"), id("-g"), PathBuf::from(format!("/home/{name}")))
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
