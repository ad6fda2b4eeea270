//! Failover against real servers: a topology with `postgres.standby: true` runs a streaming
//! standby beside the primary; `Failover::promote` fences the primary, promotes the standby
//! and repoints PgBouncer. Advisory locks live in the primary's memory only, so a lock taken
//! before the failover is simply gone on the new primary, and the key is free again there.
//! Nothing of the run (postmasters, backends, the reaper) outlives the cluster.

mod common;

use common::{
    LAUNCH, Observer, Proc, become_subreaper, identity, rows, tree, try_lock, try_rows, wait_dead,
};
use pgchaos::launch::{
    CLIENT_ROLE, Cluster, Control, DB, IO_TIMEOUT, SUPERUSER, Which, connect, simple_first,
};
use pgchaos::topology::Topology;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config};

/// Session pooling in front of a primary with a streaming standby.
const SESSION_WITH_STANDBY: &str = r#"
name: failover-session
description: a primary with a streaming standby behind PgBouncer in session mode
postgres:
  version: "18.6"
  standby: true
pgbouncer:
  version: "1.25.2"
  pool_mode: session
  default_pool_size: 2
"#;

/// The same without a pooler: clients connect straight to the primary.
const DIRECT_WITH_STANDBY: &str = r#"
name: failover-direct
postgres:
  version: "18.6"
  standby: true
"#;

const NO_STANDBY: &str = r#"
name: no-standby
postgres:
  version: "18.6"
"#;

async fn launch_yaml(src: &str) -> Cluster {
    let t = Topology::parse(src, Path::new("failover.yaml"), &pgchaos::catalog())
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = common::launch_options();
    match tokio::time::timeout(LAUNCH, pgchaos::launch::launch(&t, opts)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("launching {}: {e:#}", t.name),
        Err(_) => panic!("launching {}: not ready within {LAUNCH:?}", t.name),
    }
}

async fn promote(cluster: &Cluster) -> anyhow::Result<()> {
    let mut servers = cluster.servers.lock().await;
    let failover = servers
        .failover()
        .expect("the native launcher offers failover");
    failover.promote().await
}

async fn primary_port(cluster: &Cluster) -> Option<u16> {
    let mut servers = cluster.servers.lock().await;
    servers.failover().map(|f| f.primary_port())
}

/// A direct connection to the PostgreSQL listening on `port`, over the run's private socket.
fn at_port(cluster: &Cluster, port: u16, user: &str) -> Config {
    let mut c = Config::new();
    c.host_path(&cluster.run_dir)
        .port(port)
        .user(user)
        .dbname(DB)
        .connect_timeout(IO_TIMEOUT)
        .application_name("failover-test");
    c
}

async fn connect_at(cluster: &Cluster, port: u16, user: &str) -> Client {
    connect(&at_port(cluster, port, user))
        .await
        .unwrap_or_else(|e| panic!("connect to port {port} as {user}: {e:#}"))
}

async fn first(client: &Client, sql: &str) -> String {
    simple_first(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:#}"))
}

/// `(pid, port)` from a data directory's `postmaster.pid` (lines 1 and 4).
fn postmaster(data: &Path) -> (i32, u16) {
    let text = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap_or_else(|e| panic!("{}: {e}", data.display()));
    let lines: Vec<&str> = text.lines().collect();
    (
        lines[0].trim().parse().unwrap(),
        lines[3].trim().parse().unwrap(),
    )
}

/// Advisory lock rows in pg_locks (any key, any database), as `pid` strings.
async fn advisory_holders(observer: &Client) -> Vec<String> {
    rows(
        observer,
        "SELECT pid::text FROM pg_locks WHERE locktype = 'advisory' ORDER BY pid",
    )
    .await
    .into_iter()
    .map(|r| r[0].clone().unwrap_or_default())
    .collect()
}

/// Processes whose command line mentions `dir` (postmasters started with `-D <dir>/...`,
/// the reaper, pg_basebackup).
fn processes_mentioning(dir: &Path) -> Vec<(i32, String)> {
    let needle = dir.to_string_lossy().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmd.contains(&needle) {
            out.push((pid, cmd));
        }
    }
    out
}

/// Drop the cluster and check that nothing of the run remains: every process captured in
/// `procs` gone (reaped), no process mentioning the run directory, the directory removed.
async fn drop_and_check_nothing_left(cluster: Cluster, mut procs: Vec<Proc>) {
    let run_dir: PathBuf = cluster.run_dir.clone();
    if let (Some(pg), _) = cluster.pids() {
        procs.extend(tree(pg));
    }
    drop(cluster);
    if let Err(left) = wait_dead(&procs, Duration::from_secs(5)).await {
        panic!("left 5 s after the cluster was dropped: {left:?}");
    }
    let left = processes_mentioning(&run_dir);
    assert!(
        left.is_empty(),
        "processes of the run remain after drop: {left:?}"
    );
    assert!(!run_dir.exists(), "teardown removes the run directory");
    // No System V segment created by one of the run's processes (a postmaster: the fenced,
    // often SIGKILLed, old primary's too) outlives the teardown. /proc/sysvipc/shm's
    // fifth column is the creator's pid.
    let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
    let segments: Vec<String> = std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .is_some_and(|c| pids.iter().any(|p| p == c))
        })
        .map(str::to_string)
        .collect();
    assert!(
        segments.is_empty(),
        "System V segments of the run's servers remain after drop: {segments:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn promote_fences_the_primary_and_repoints_pgbouncer() {
    // Backends orphaned by a SIGKILLed postmaster come here and can be reaped.
    become_subreaper();
    let cluster = launch_yaml(SESSION_WITH_STANDBY).await;
    let old_port = cluster.pg_port;
    assert_eq!(primary_port(&cluster).await, Some(old_port));
    let (old_pid, bouncer_pid) = cluster.pids();
    let old_pid = old_pid.expect("the primary runs");
    let old_procs = tree(old_pid);
    let old_postmaster = Proc::of(old_pid).expect("the primary's postmaster");

    // The standby: its own postmaster and port, accepting connections, in recovery.
    let (standby_pid, standby_port) = postmaster(&cluster.run_dir.join("standby"));
    assert_ne!(standby_port, old_port);
    assert_ne!(standby_pid, old_pid);
    let standby_procs = tree(standby_pid);
    let standby = connect_at(&cluster, standby_port, SUPERUSER).await;
    assert_eq!(first(&standby, "SELECT pg_is_in_recovery()").await, "t");
    let t = Instant::now();
    loop {
        let r = rows(&standby, "SELECT status FROM pg_stat_wal_receiver").await;
        if r.first().and_then(|r| r[0].as_deref()) == Some("streaming") {
            break;
        }
        assert!(
            t.elapsed() < common::STEP,
            "the standby does not stream from the primary: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(standby);
    cluster
        .check_alive()
        .expect("primary, standby and pooler alive");

    // Before: a session through PgBouncer takes key 42; pg_locks on the primary shows it.
    let a = common::client(&cluster).await;
    assert_eq!(
        first(&a, "SELECT current_setting('port')").await,
        old_port.to_string()
    );
    let a_id = identity(&a).await;
    rows(&a, "SELECT pg_advisory_lock(42)").await;
    let observer = Observer::connect(&cluster).await;
    observer.assert_held_by(42, &a_id, "before promote").await;
    drop(observer);

    // Both servers' logs are saved.
    let logs = std::env::temp_dir().join(format!("pgchaos-failover-{}", std::process::id()));
    cluster.save_logs(&logs).unwrap();
    for name in ["postgres.log", "postgres-standby.log", "pgbouncer.log"] {
        assert!(logs.join(name).is_file(), "save_logs copies {name}");
    }
    let _ = std::fs::remove_dir_all(&logs);

    let t = Instant::now();
    promote(&cluster)
        .await
        .unwrap_or_else(|e| panic!("promote: {e:#}"));
    eprintln!("promote took {:?}", t.elapsed());

    // The old primary is gone (fenced before the promotion), its backends with it.
    assert!(
        !old_postmaster.alive(),
        "the old postmaster {old_pid} is gone"
    );
    if let Err(left) = wait_dead(&old_procs, Duration::from_secs(5)).await {
        panic!("the old primary's processes remain: {left:?}");
    }
    assert!(
        connect(&at_port(&cluster, old_port, SUPERUSER))
            .await
            .is_err(),
        "nothing answers on the old primary's port"
    );

    // The standby is the primary now: same postmaster, out of recovery, no advisory lock.
    assert_eq!(primary_port(&cluster).await, Some(standby_port));
    assert_eq!(cluster.pids(), (Some(standby_pid), bouncer_pid));
    let new_primary = connect_at(&cluster, standby_port, SUPERUSER).await;
    assert_eq!(first(&new_primary, "SELECT pg_is_in_recovery()").await, "f");
    assert_eq!(
        advisory_holders(&new_primary).await,
        Vec::<String>::new(),
        "advisory locks are not replicated: the new primary holds none"
    );
    cluster
        .check_alive()
        .expect("the new primary and the pooler");

    // The session that held the lock lost its server with the old primary.
    assert!(
        try_rows(&a, "SELECT 1").await.is_err(),
        "the old session's server died with the old primary"
    );

    // A new client through PgBouncer lands on the new primary and can take key 42.
    let b = common::client(&cluster).await;
    assert_eq!(
        first(&b, "SELECT current_setting('port')").await,
        standby_port.to_string()
    );
    assert_eq!(first(&b, "SELECT pg_is_in_recovery()").await, "f");
    let (b_id, got) = try_lock(&b, 42).await;
    assert!(got, "key 42 is free on the new primary");
    let observer = Observer {
        me: identity(&new_primary).await,
        client: new_primary,
    };
    observer.assert_held_by(42, &b_id, "after promote").await;

    // The pgbouncer.ini and credentials now name the new primary.
    let ini = std::fs::read_to_string(cluster.run_dir.join("pgbouncer.ini")).unwrap();
    assert!(
        ini.contains(&format!("port={standby_port} dbname={DB}")),
        "{ini}"
    );
    let creds = std::fs::read_to_string(cluster.run_dir.join("credentials.txt")).unwrap();
    assert!(
        creds.contains(&format!("127.0.0.1:{standby_port}/")),
        "{creds}"
    );

    // Logs of both PostgreSQL servers are still saved, the fenced one's included.
    cluster.save_logs(&logs).unwrap();
    for name in ["postgres.log", "postgres-standby.log", "pgbouncer.log"] {
        assert!(
            logs.join(name).is_file(),
            "save_logs after promote copies {name}"
        );
    }
    let _ = std::fs::remove_dir_all(&logs);

    // Once only: there is no standby any more.
    let err = promote(&cluster).await.expect_err("a second promote");
    assert!(err.to_string().contains("no standby"), "{err}");

    drop((a, b, observer));
    let mut procs = old_procs;
    procs.extend(standby_procs);
    procs.extend(bouncer_pid.and_then(Proc::of));
    drop_and_check_nothing_left(cluster, procs).await;
}

#[tokio::test(flavor = "current_thread")]
async fn promote_without_a_pooler_and_without_a_standby() {
    become_subreaper();
    // No standby: the default refusal, and the launch-time port stays the primary's.
    let plain = launch_yaml(NO_STANDBY).await;
    assert!(!plain.run_dir.join("standby").exists());
    let err = promote(&plain).await.expect_err("no standby to promote");
    assert!(
        err.to_string().contains("no standby in this topology"),
        "{err}"
    );
    assert_eq!(primary_port(&plain).await, Some(plain.pg_port));
    let c = common::client(&plain).await;
    assert_eq!(
        first(&c, "SELECT 1").await,
        "1",
        "the refusal changed nothing"
    );
    drop(c);
    drop_and_check_nothing_left(plain, Vec::new()).await;

    // A standby without a pooler: promote needs no pooler to repoint.
    let cluster = launch_yaml(DIRECT_WITH_STANDBY).await;
    let old_port = cluster.pg_port;
    let (old_pid, _) = cluster.pids();
    let old = Proc::of(old_pid.unwrap()).unwrap();
    let (standby_pid, standby_port) = postmaster(&cluster.run_dir.join("standby"));
    let standby_procs = tree(standby_pid);
    let a = connect_at(&cluster, old_port, CLIENT_ROLE).await;
    rows(&a, "SELECT pg_advisory_lock(42)").await;

    promote(&cluster)
        .await
        .unwrap_or_else(|e| panic!("promote: {e:#}"));
    assert!(!old.alive(), "the old primary is fenced");
    assert_eq!(primary_port(&cluster).await, Some(standby_port));
    assert_ne!(standby_port, old_port);
    let b = connect_at(&cluster, standby_port, CLIENT_ROLE).await;
    assert_eq!(first(&b, "SELECT pg_is_in_recovery()").await, "f");
    let (_, got) = try_lock(&b, 42).await;
    assert!(got, "key 42 is free on the new primary");
    // Over TCP with the run's password too.
    let mut tcp = Config::new();
    tcp.host("127.0.0.1")
        .port(standby_port)
        .user(SUPERUSER)
        .password(cluster.password(SUPERUSER).unwrap())
        .dbname(DB)
        .connect_timeout(IO_TIMEOUT);
    let t = connect(&tcp).await.expect("TCP login on the new primary");
    assert_eq!(first(&t, "SELECT pg_is_in_recovery()").await, "f");
    cluster.check_alive().expect("the new primary runs");

    drop((a, b, t));
    let mut procs = vec![old];
    procs.extend(standby_procs);
    drop_and_check_nothing_left(cluster, procs).await;
}

/// Session pooling with a standby, PgBouncer retrying failed server logins after 1 s (its
/// default, 15 s, survives a RELOAD: only a successful login clears it).
const SESSION_WITH_STANDBY_FAST_RETRY: &str = r#"
name: failover-session-retry
postgres:
  version: "18.6"
  standby: true
pgbouncer:
  version: "1.25.2"
  pool_mode: session
  default_pool_size: 2
  settings: { server_login_retry: 1 }
"#;

/// The primary died (SIGKILL) and a client came in meanwhile, so PgBouncer's last server
/// login failed: promote still fences (the dead postmaster), promotes, repoints, and confirms
/// that a client reaches the new primary.
#[tokio::test(flavor = "current_thread")]
async fn promote_after_the_primary_died_and_a_login_failed() {
    become_subreaper();
    let cluster = launch_yaml(SESSION_WITH_STANDBY_FAST_RETRY).await;
    let (old_pid, bouncer_pid) = cluster.pids();
    let old_procs = tree(old_pid.unwrap());
    let (standby_pid, standby_port) = postmaster(&cluster.run_dir.join("standby"));
    let standby_procs = tree(standby_pid);
    cluster
        .control(Which::Postgres, Control::Kill)
        .await
        .unwrap();
    let err = cluster
        .check_alive()
        .expect_err("a dead primary is reported");
    assert!(err.to_string().contains("Postgres"), "{err}");
    // PgBouncer tries the dead primary for this client and fails; the client times out.
    assert!(
        connect(&cluster.client_config()).await.is_err(),
        "no client gets through while no primary is up"
    );

    let t = Instant::now();
    promote(&cluster)
        .await
        .unwrap_or_else(|e| panic!("promote: {e:#}"));
    eprintln!("promote after a failed login took {:?}", t.elapsed());
    assert_eq!(primary_port(&cluster).await, Some(standby_port));
    cluster
        .check_alive()
        .expect("the dead primary is fenced, not reported");
    let b = common::client(&cluster).await;
    assert_eq!(
        first(&b, "SELECT current_setting('port')").await,
        standby_port.to_string()
    );
    let (_, got) = try_lock(&b, 42).await;
    assert!(got, "key 42 is free on the new primary");

    drop(b);
    let mut procs = old_procs;
    procs.extend(standby_procs);
    procs.extend(bouncer_pid.and_then(Proc::of));
    drop_and_check_nothing_left(cluster, procs).await;
}
