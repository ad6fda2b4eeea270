//! A server as a local process: spawned in its own process group, dying with the harness
//! (parent-death signal), as an unprivileged user when the harness runs as root, its log
//! opened without following anything planted at its name; signalled, waited for and stopped.
//! The native launcher and its cluster template start every server this way.

use super::Which;
use crate::safe_fs;
use anyhow::{Context, Result, anyhow, bail};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The unprivileged OS user servers run as when the harness runs as root.
pub const OS_USER: &str = "pgchaos";

/// How long a starting server may take to answer.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(20);

pub(super) struct Server {
    pub(super) which: Which,
    pub(super) child: Child,
    pub(super) log: PathBuf,
}

impl Server {
    pub(super) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(super) fn signal(&self, sig: i32, group: bool) {
        let pid = self.pid();
        // SAFETY: plain syscalls on a pid we own; errors (already gone) are harmless.
        unsafe {
            if group {
                libc::kill(-pid, sig);
            } else {
                libc::kill(pid, sig);
            }
        }
    }

    /// Exit status if the process has ended.
    pub(super) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub(super) fn wait_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Stop the server: a polite signal, then SIGKILL to its process group. (PostgreSQL
    /// backends call setsid(), so the group holds the postmaster only; backends exit as soon
    /// as they notice the postmaster is gone.)
    pub(super) fn stop(&mut self) {
        if self.exited().is_some() {
            self.signal(libc::SIGKILL, true); // stragglers in the group
            return;
        }
        self.signal(libc::SIGCONT, true); // a paused server cannot exit
        let polite = match self.which {
            Which::Postgres => libc::SIGQUIT, // immediate shutdown: the data dir is disposable
            Which::Pooler => libc::SIGINT,
        };
        self.signal(polite, false);
        if !self.wait_exit(Duration::from_secs(5)) {
            self.signal(libc::SIGKILL, true);
            self.wait_exit(Duration::from_secs(5));
        }
        self.signal(libc::SIGKILL, true);
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

/// Last `lines` lines of a log file, indented, for error messages.
/// Only a regular file is read (a symlink planted at the log's name is not followed).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let bytes = safe_fs::read_tail_nofollow(path, 256 * 1024).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `LD_LIBRARY_PATH` for PostgreSQL from a relocatable tarball (`<root>/bin`, `<root>/lib`
/// holding its own `libpq.so.5`): the binaries find it through `$ORIGIN/../lib`, but
/// `libpqwalreceiver.so` (a standby's WAL receiver) carries the build's RUNPATH
/// (`/opt/postgresql/lib`), so without this it loads the system's libpq (Debian 12: 15), which
/// refuses the `primary_conninfo` that `pg_basebackup -R` writes ("invalid connection option
/// \"sslnegotiation\""). `None` for an installation without a bundled libpq.
pub(super) fn bundled_library_path(pg_bin: &Path) -> Option<std::ffi::OsString> {
    let lib = pg_bin.parent()?.join("lib");
    if !lib.join("libpq.so.5").is_file() {
        return None;
    }
    let mut path = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        path.push(":");
        path.push(old);
    }
    Some(path)
}

/// `(uid, gid)` to run servers as, when we are root (postgres refuses to run as root).
pub(super) fn unprivileged_user() -> Result<Option<(u32, u32)>> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let lookup = || -> Option<(u32, u32)> {
        let out = Command::new("id").arg("-u").arg(OS_USER).output().ok()?;
        let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        let out = Command::new("id").arg("-g").arg(OS_USER).output().ok()?;
        let gid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        Some((uid, gid))
    };
    if let Some(ids) = lookup() {
        return Ok(Some(ids));
    }
    // Two harnesses starting at once on a fresh machine both reach useradd: seen here, the
    // loser read the winner's uid, which the second useradd then replaced. One at a time
    // (the lock is released when the file closes).
    let lock = std::fs::File::create("/run/lock/pgchaos-useradd.lock")
        .or_else(|_| std::fs::File::create("/tmp/pgchaos-useradd.lock"))
        .context("creating the useradd lock file")?;
    // SAFETY: flock on an open descriptor we own.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        bail!(
            "locking the useradd lock file: {}",
            std::io::Error::last_os_error()
        );
    }
    if let Some(ids) = lookup() {
        return Ok(Some(ids));
    }
    let status = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .args(["--user-group", OS_USER])
        .status()
        .context("running useradd to create the unprivileged server user")?;
    if !status.success() && lookup().is_none() {
        bail!(
            "postgres refuses to run as root, and creating user {OS_USER:?} failed ({status}); \
             create it with: useradd --system --user-group {OS_USER}"
        );
    }
    lookup()
        .map(Some)
        .ok_or_else(|| anyhow!("user {OS_USER} missing after useradd"))
}

/// A server's log into the report (a regular file only: a symlink or FIFO planted at its
/// name is skipped, not followed; the last 64 MiB).
pub(super) fn copy_log(log: &Path, to: &Path) {
    if let Ok(bytes) = safe_fs::read_tail_nofollow(log, 64 << 20) {
        let _ = fs::write(to, bytes);
    }
}

/// Spawn a server in its own process group, dying with the harness (PR_SET_PDEATHSIG).
/// The harness must spawn servers from a thread that lives as long as the cluster (the
/// death signal follows the spawning thread): the CLI and tests do so from their main task.
/// Its log is `log` below `anchor`, opened without following anything planted there.
pub(super) fn spawn_server(
    mut cmd: Command,
    anchor: &Path,
    log: &Path,
    os_user: Option<(u32, u32)>,
) -> Result<Child> {
    let out = safe_fs::open_log(anchor, log, os_user)
        .with_context(|| format!("{}: opening the server log", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    if let Some((uid, gid)) = os_user {
        cmd.uid(uid).gid(gid);
        cmd.env("HOME", "/tmp");
    }
    // SAFETY: async-signal-safe calls only (prctl, getppid, _exit) between fork and exec.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    Ok(cmd.spawn()?)
}
