//! Root runs against what the unprivileged server user can plant (docs/safety.md): the run
//! directory and, while it is made, the cluster template belong to that user, so anything
//! running as it (a superuser's `COPY ... TO PROGRAM`, an `archive_command`) can put a
//! symlink where root later writes, or a forged shared memory id where the reaper looks.
//! Real servers; the plants are made by the test (as root, with the link owned by the server
//! user as that user's would be). Without root (no server user) the plants are the user's
//! own and the tests still check that nothing is written through them.

mod common;

use common::LAUNCH;
use pgchaos::launch::{Cluster, Which};
use pgchaos::topology::Topology;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

const SESSION_WITH_STANDBY: &str = r#"
name: root-safety-standby
postgres:
  version: "18.6"
  standby: true
pgbouncer:
  version: "1.25.2"
  pool_mode: session
  default_pool_size: 2
"#;

const SESSION: &str = r#"
name: root-safety
postgres:
  version: "18.6"
pgbouncer:
  version: "1.25.2"
  pool_mode: session
  default_pool_size: 2
"#;

async fn launch_yaml(src: &str) -> Cluster {
    let t = Topology::parse(src, Path::new("root-safety.yaml"), &pgchaos::catalog())
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = pgchaos::launch::LaunchOptions::default();
    match tokio::time::timeout(LAUNCH, pgchaos::launch::launch(&t, opts)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("launching {}: {e:#}", t.name),
        Err(_) => panic!("launching {}: not ready within {LAUNCH:?}", t.name),
    }
}

/// Files root owns outside the run (mode 0644, known content): what a plant points at.
struct Victims {
    dir: PathBuf,
}

impl Victims {
    fn new(tag: &str) -> Victims {
        let dir =
            std::env::temp_dir().join(format!("pgchaos-victims-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Victims { dir }
    }

    fn make(&self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, format!("victim {name}\n")).unwrap();
        p
    }

    /// Every victim still has its content, owner and mode.
    fn assert_untouched(&self) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            assert_eq!(
                std::fs::read_to_string(e.path()).unwrap(),
                format!("victim {name}\n"),
                "{name} was written through a planted symlink"
            );
            assert_eq!(m.uid(), me, "{name} was chowned through a planted symlink");
        }
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Replace `at` by a symlink to `target`, owned by the run directory's owner (the server
/// user when root runs the harness), as that user would plant it.
fn plant(at: &Path, target: &Path) {
    let _ = std::fs::remove_file(at);
    symlink(target, at).unwrap();
    let owner = std::fs::metadata(at.parent().unwrap()).unwrap();
    std::os::unix::fs::lchown(at, Some(owner.uid()), Some(owner.gid())).unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn symlinks_planted_before_a_promote_are_replaced_not_written_through() {
    let victims = Victims::new("promote");
    let cluster = launch_yaml(SESSION_WITH_STANDBY).await;
    let run = cluster.run_dir.clone();
    plant(&run.join("credentials.txt"), &victims.make("credentials"));
    plant(&run.join("pgbouncer.ini"), &victims.make("pgbouncer"));
    plant(&run.join("userlist.txt"), &victims.make("userlist"));
    let mut servers = cluster.servers.lock().await;
    let failover = servers
        .failover()
        .expect("the native launcher offers failover");
    failover
        .promote()
        .await
        .unwrap_or_else(|e| panic!("promote: {e:#}"));
    drop(servers);
    victims.assert_untouched();
    for name in ["credentials.txt", "pgbouncer.ini"] {
        let m = std::fs::symlink_metadata(run.join(name)).unwrap();
        assert!(
            m.is_file(),
            "{name}: the plant was replaced by a regular file"
        );
    }
    let creds = std::fs::read_to_string(run.join("credentials.txt")).unwrap();
    assert!(creds.contains("postgresql://"), "{creds}");
    // The pooler reaches the new primary (its config was written, not the victim).
    let c = common::client(&cluster).await;
    assert_eq!(
        common::rows(&c, "SELECT pg_is_in_recovery()::text").await[0][0].as_deref(),
        Some("false")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_symlink_planted_at_a_log_before_a_restart_is_refused() {
    let victims = Victims::new("restart");
    let cluster = launch_yaml(SESSION).await;
    let run = cluster.run_dir.clone();
    plant(&run.join("postgres.log"), &victims.make("postgres-log"));
    plant(&run.join("pgbouncer.log"), &victims.make("pgbouncer-log"));
    let mut servers = cluster.servers.lock().await;
    let e = servers
        .processes()
        .unwrap()
        .restart(Which::Postgres)
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("postgres.log") && e.contains("symbolic link"),
        "the restart names the plant: {e}"
    );
    let e = format!(
        "{:#}",
        servers
            .processes()
            .unwrap()
            .restart(Which::Pooler)
            .await
            .unwrap_err()
    );
    assert!(
        e.contains("pgbouncer.log") && e.contains("symbolic link"),
        "{e}"
    );
    drop(servers);
    victims.assert_untouched();
    // And a log error message does not read through one either.
    let tail = pgchaos::launch::process::log_tail(&run.join("postgres.log"), 5);
    assert!(!tail.contains("victim"), "{tail}");
}

/// The template a launch uses is the harness user's, holds only directories and regular
/// files, and nothing in it is writable by anyone else (the server user cannot plant there).
#[tokio::test(flavor = "current_thread")]
async fn the_cached_template_is_sealed() {
    let cluster = launch_yaml(SESSION).await;
    drop(cluster);
    let root = pgchaos::provision::Options::from_env(false)
        .cache_dir
        .join("templates/postgres-18.6-v2");
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut n = 0;
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let p = e.path().display().to_string();
            assert!(m.is_dir() || m.is_file(), "{p}: {:?}", m.file_type());
            assert_eq!(m.uid(), me, "{p}: owned by uid {}", m.uid());
            assert_eq!(m.mode() & 0o077, 0, "{p}: mode {:o}", m.mode());
            if m.is_file() {
                assert_eq!(m.mode() & 0o222, 0, "{p}: writable, mode {:o}", m.mode());
            } else {
                stack.push(e.path());
            }
            n += 1;
        }
    }
    assert!(n > 500, "the template's tree was walked ({n} entries)");
}

/// Run `cmd` as uid/gid 65534 (another user than the harness's and the servers').
fn as_nobody(args: &[&str]) -> String {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The id `ipcmk` printed ("Shared memory id: 5", "Semaphore id: 7").
fn ipc_id(out: &str) -> i32 {
    out.trim().rsplit(' ').next().unwrap().parse().unwrap()
}

/// Whether a System V object's id is listed in `/proc/sysvipc/<kind>` (column 2).
fn ipc_exists(kind: &str, id: i32) -> bool {
    std::fs::read_to_string(format!("/proc/sysvipc/{kind}"))
        .unwrap()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(&id.to_string()))
}

fn alive(pid: i32) -> bool {
    // /proc/<pid>/stat's state, not a zombie.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(") ").next().map(|r| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Another user's shared memory segment named in a forged `postmaster.pid`, and another
/// user's semaphore set last operated on by a process the reaper kills: both survive it.
#[test]
fn a_forged_shmid_and_a_foreign_semaphore_survive_the_reaper() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root (as CI runs it) to make another user's objects"
    );
    let shm = ipc_id(&as_nobody(&["ipcmk", "-M", "4096", "-p", "0666"]));
    let sem = ipc_id(&as_nobody(&["ipcmk", "-S", "1", "-p", "0666"]));
    let dir = std::env::temp_dir().join(format!("pgchaos-reap-forged-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("data/postmaster.pid"),
        format!(
            "1\n{d}/data\n1796037611\n5433\n{d}\n127.0.0.1\n  5433001  {shm}\nready   \n",
            d = dir.display()
        ),
    )
    .unwrap();
    // A watched "server" that operated on the foreign set (it is the set's last-op pid).
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("perl")
        .arg("-e")
        .arg(format!("semop({sem}, pack('s!3', 0, 1, 0)) or die \"semop: $!\"; print \"ok\\n\"; $| = 1; sleep 100"))
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "ok\n", "the semop was made");
    let pid = child.id() as i32;
    let mut reaper = pgchaos::launch::reaper::Reaper::spawn(&dir, true).unwrap();
    reaper.watch(pid);
    reaper.finish();
    let _ = child.wait();
    let (shm_left, sem_left) = (ipc_exists("shm", shm), ipc_exists("sem", sem));
    for (flag, id) in [("-m", shm), ("-s", sem)] {
        let _ = std::process::Command::new("ipcrm")
            .args([flag, &id.to_string()])
            .status();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!alive(pid), "the reaper killed the recorded process");
    assert!(
        shm_left,
        "another user's segment {shm}, named in a forged postmaster.pid, was removed"
    );
    assert!(sem_left, "another user's semaphore set {sem} was removed");
}

/// A recorded pid that now names another process (another start time), and a process of
/// another user than the servers': the reaper kills neither.
#[test]
fn the_reaper_kills_only_the_recorded_process_of_the_servers_user() {
    use std::os::unix::process::CommandExt;
    let spawn = || {
        std::process::Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let dir = std::env::temp_dir().join(format!("pgchaos-reap-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut reused, mut foreign, mut ours) = (spawn(), spawn(), spawn());
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let start =
        |c: &std::process::Child| pgchaos::launch::reaper::start_time(c.id() as i32).unwrap();
    let mut reaper = pgchaos::launch::reaper::Reaper::spawn(&dir, true).unwrap();
    reaper.watch_recorded(reused.id() as i32, start(&reused) + 1);
    reaper.watch(ours.id() as i32);
    reaper.finish();
    let mut other = pgchaos::launch::reaper::Reaper::spawn_for(&dir, true, me + 1).unwrap();
    other.watch(foreign.id() as i32);
    other.finish();
    let (r, f, o) = (
        alive(reused.id() as i32),
        alive(foreign.id() as i32),
        alive(ours.id() as i32),
    );
    for c in [&mut reused, &mut foreign, &mut ours] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !o,
        "the recorded process (same start time, the servers' user) was killed"
    );
    assert!(r, "a pid recorded with another start time was killed");
    assert!(f, "a process of another user than the servers' was killed");
}

/// `pgchaos ARGS` from `cwd` with `env`, its exit code and output.
fn pgchaos(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_pgchaos"));
    cmd.args(args).current_dir(cwd).env("PGCHAOS_QUIET", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// A topology planted in `/tmp/topologies/` by another user is not picked up by name: not
/// from a working directory below /tmp (the lookup stops at the repository root, and there
/// is none), and refused from /tmp itself (another user's file).
#[test]
fn a_planted_tmp_topology_is_refused() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root (as CI runs it) to plant as another user"
    );
    let name = format!("pgchaos-planted-{}", std::process::id());
    let folder = Path::new("/tmp/topologies");
    let made_folder = !folder.exists();
    std::fs::create_dir_all(folder).unwrap();
    let planted = folder.join(format!("{name}.yaml"));
    std::fs::write(&planted, "name: planted\npostgres:\n  version: \"18.6\"\n").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let below = std::env::temp_dir().join(format!("pgchaos-cwd-{}/a/b", std::process::id()));
    std::fs::create_dir_all(&below).unwrap();
    let (code, out) = pgchaos(&below, &[], &["check", &name]);
    let (code_tmp, out_tmp) = pgchaos(Path::new("/tmp"), &[], &["up", &name, "--once"]);
    let _ = std::fs::remove_file(&planted);
    if made_folder {
        let _ = std::fs::remove_dir(folder);
    }
    let _ = std::fs::remove_dir_all(below.parent().unwrap().parent().unwrap());
    assert_ne!(code, Some(0), "{out}");
    assert!(
        !out.contains("/tmp/topologies"),
        "not looked up above the cwd: {out}"
    );
    assert_ne!(code_tmp, Some(0), "{out_tmp}");
    assert!(
        out_tmp.contains("owned by uid 65534") && out_tmp.contains(&name),
        "refused with the reason: {out_tmp}"
    );
    // Inside a repository the lookup still walks up to its root.
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/launch");
    let p = pgchaos::topology::resolve_in("topologies", "direct", &here);
    assert!(
        p.is_file() && p.ends_with("topologies/direct.yaml"),
        "{p:?}"
    );
}

/// A cache directory owned by another user is refused before anything in it is used.
#[test]
fn a_cache_owned_by_another_uid_is_refused() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root (as CI runs it) to make another user's directory"
    );
    let cache = std::env::temp_dir().join(format!("pgchaos-cache-foreign-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
    let c = cache.to_str().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (code, out) = pgchaos(&root, &[("PGCHAOS_CACHE", c)], &["up", "direct", "--once"]);
    let (pcode, pout) = pgchaos(&root, &[("PGCHAOS_CACHE", c)], &["provision", "direct"]);
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
    let _ = std::fs::remove_dir_all(&cache);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("belongs to uid 65534") && out.contains(c),
        "{out}"
    );
    assert_ne!(pcode, Some(0), "{pout}");
    assert!(pout.contains("belongs to uid 65534"), "{pout}");
    assert!(left.is_empty(), "nothing written into it: {left:?}");
}
