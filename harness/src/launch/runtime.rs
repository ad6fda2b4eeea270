//! The runtime directory: where run directories go, one base per user, and the clean-up of
//! what dead runs left in it (run directories, and the System V shared memory segment a
//! SIGKILLed postmaster leaves). Every I/O error names its path and what was attempted.
//!
//! `$PGCHAOS_RUN_DIR` if set; else `/dev/shm/pgchaos-<uid>` (memory: copying the 46 MB
//! template takes 0.1 s there against about 1 s on this machine's disk); else
//! `<tmp>/pgchaos-<uid>`. The base belongs to the user running the harness (mode 0700, or
//! 0711 for root, whose servers run as an unprivileged user that must reach its own run
//! directory inside); a base owned by anyone else is refused, never used or changed.

use anyhow::{Context, Result, bail};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The base directory for this user's run directories.
pub fn base() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGCHAOS_RUN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && fs::metadata(shm).is_ok_and(|m| !m.permissions().readonly()) {
        return shm.join(format!("pgchaos-{uid}"));
    }
    std::env::temp_dir().join(format!("pgchaos-{uid}"))
}

/// Create (or check) the base directory: owned by this user, not writable by others.
pub fn ensure_base(base: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mode = if uid == 0 { 0o711 } else { 0o700 };
    match fs::symlink_metadata(base) {
        Ok(m) => {
            if !m.is_dir() {
                bail!(
                    "{}: the run directory base is not a directory; remove it or set PGCHAOS_RUN_DIR",
                    base.display()
                );
            }
            if m.uid() != uid {
                bail!(
                    "{}: the run directory base belongs to uid {}, not to you (uid {uid}); \
                     set PGCHAOS_RUN_DIR to a directory of your own",
                    base.display(),
                    m.uid()
                );
            }
            if m.mode() & 0o022 != 0 {
                fs::set_permissions(base, fs::Permissions::from_mode(mode))
                    .with_context(|| format!("{}: setting mode {mode:o}", base.display()))?;
            }
        }
        Err(_) => {
            let parent = base.parent().unwrap_or(Path::new("/"));
            fs::create_dir_all(parent)
                .with_context(|| format!("{}: creating the directory", parent.display()))?;
            match fs::create_dir(base) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return ensure_base(base);
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("{}: creating the run directory base", base.display())
                    });
                }
            }
            fs::set_permissions(base, fs::Permissions::from_mode(mode))
                .with_context(|| format!("{}: setting mode {mode:o}", base.display()))?;
        }
    }
    Ok(())
}

/// A new run directory `run-<pid>-<nanos>` (mode 0700, owned by `os_user` when given), after
/// removing what dead runs left in the base.
pub fn make_run_dir(os_user: Option<(u32, u32)>) -> Result<PathBuf> {
    let base = base();
    ensure_base(&base)?;
    remove_dead_runs(&base, server_uid(os_user));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let dir = base.join(format!("run-{}-{nanos}", std::process::id()));
    fs::create_dir(&dir)
        .with_context(|| format!("{}: creating the run directory", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("{}: setting mode 700", dir.display()))?;
    chown(&dir, os_user)?;
    Ok(dir)
}

/// `chown` when servers run as another user (root harness); names the path on failure.
pub fn chown(path: &Path, os_user: Option<(u32, u32)>) -> Result<()> {
    if let Some((uid, gid)) = os_user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .with_context(|| format!("{}: chown to {uid}:{gid}", path.display()))?;
    }
    Ok(())
}

/// Write a file readable by its owner only, below `anchor` (the run directory): nothing
/// planted there (a symlink, a symlinked directory) is followed ([`crate::safe_fs`]).
pub fn write_private(
    anchor: &Path,
    path: &Path,
    text: &str,
    os_user: Option<(u32, u32)>,
) -> Result<()> {
    crate::safe_fs::write_private(anchor, path, text, os_user)
}

/// The pid in a run directory's name, `run-<pid>-<nanos>`.
pub fn run_dir_pid(name: &str) -> Option<u32> {
    name.strip_prefix("run-")?.split('-').next()?.parse().ok()
}

/// Remove the run directories of harnesses that are gone, with the shared memory segment
/// their postmaster registered (a SIGKILLed postmaster cannot remove it). Normally the
/// reaper has done this already; this catches what it could not (e.g. the machine lost
/// power).
///
/// Only segments of `uid` (the servers' user) are considered ([`remove_sysv_segment`]).
pub fn remove_dead_runs(base: &Path, uid: u32) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(pid) = run_dir_pid(&name)
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            for data in DATA_DIRS {
                remove_sysv_segment(&e.path().join(data), uid, None);
            }
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// The PostgreSQL data directories a run directory can hold: the primary's and, with
/// `postgres.standby`, the standby's (the reaper's script lists the same two).
pub const DATA_DIRS: [&str; 2] = ["data", "standby"];

/// The uid servers run as: the unprivileged server user's when root runs the harness,
/// else the harness's own.
pub fn server_uid(os_user: Option<(u32, u32)>) -> u32 {
    // SAFETY: geteuid has no preconditions.
    os_user.map_or_else(|| unsafe { libc::geteuid() }, |(uid, _)| uid)
}

/// The System V segment a postmaster recorded in `postmaster.pid` (line 1: its pid; line 7:
/// key and id), removed only if it is really that postmaster's: created by that pid, owned
/// and created by `uid` (the servers' user), nothing attached, the postmaster gone, and (when
/// the harness knows it) the pid the one it started. The file is the servers' user's to
/// write, so its id alone is never trusted; it is read only if it is a regular file.
pub fn remove_sysv_segment(data_dir: &Path, uid: u32, postmaster: Option<i32>) {
    let Some((pid, shmid)) = postmaster_shmid(data_dir) else {
        return;
    };
    if postmaster.is_some_and(|p| p != pid) || crate::provision::process_alive(pid) {
        return;
    }
    // SAFETY: shmctl with IPC_STAT into a zeroed struct we own, then IPC_RMID.
    unsafe {
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        if libc::shmctl(shmid, libc::IPC_STAT, &mut ds) == 0 && segment_is_theirs(&ds, uid, pid) {
            libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

/// Whether a segment was created by `pid` as `uid`, is still owned by `uid`, and has
/// nothing attached.
fn segment_is_theirs(ds: &libc::shmid_ds, uid: u32, pid: i32) -> bool {
    ds.shm_perm.cuid == uid && ds.shm_perm.uid == uid && ds.shm_cpid == pid && ds.shm_nattch == 0
}

/// The postmaster's pid and shared memory id in `postmaster.pid`, if it is a regular file
/// there (not a symlink, a FIFO or a device).
pub fn postmaster_shmid(data_dir: &Path) -> Option<(i32, i32)> {
    let bytes = crate::safe_fs::read_tail_nofollow(&data_dir.join("postmaster.pid"), 4096).ok()?;
    parse_shmid(&String::from_utf8_lossy(&bytes))
}

fn parse_shmid(postmaster_pid: &str) -> Option<(i32, i32)> {
    let pid = postmaster_pid.lines().next()?.trim().parse().ok()?;
    let shmid = postmaster_pid
        .lines()
        .nth(6)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((pid, shmid))
}

/// Leftovers of older pgchaos versions, which let PostgreSQL keep its dynamic shared memory
/// in `/dev/shm/PostgreSQL.*`: those owned by the dedicated server user `os_uid` (root runs;
/// today's runs keep dynamic shared memory inside their run directory, so none of these can
/// belong to a live run).
pub fn remove_legacy_dsm(os_uid: u32) {
    let Ok(entries) = fs::read_dir("/dev/shm") else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with("PostgreSQL.")
            && e.metadata().is_ok_and(|m| m.uid() == os_uid)
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postmaster_pid_line_7_holds_the_segment() {
        let text = "4242\n/dev/shm/x/data\n1796037611\n5433\n/dev/shm/x\n127.0.0.1\n  5433001     32790\nready   \n";
        assert_eq!(parse_shmid(text), Some((4242, 32790)));
        assert_eq!(parse_shmid("4242\n"), None);
        assert_eq!(run_dir_pid("run-123-456"), Some(123));
        assert_eq!(run_dir_pid("other"), None);
    }

    #[test]
    fn a_base_owned_by_someone_else_is_refused_and_a_new_one_is_private() {
        let tmp = std::env::temp_dir().join(format!("pgchaos-rt-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let base = tmp.join("base");
        ensure_base(&base).unwrap();
        let m = fs::metadata(&base).unwrap();
        assert_eq!(
            m.mode() & 0o077 & !0o011,
            0,
            "not readable or writable by others"
        );
        // A file in the way is named.
        let file = tmp.join("file");
        fs::write(&file, "").unwrap();
        let e = ensure_base(&file).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()), "{e}");
        // Owned by another user (only testable as root).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let other = tmp.join("other");
            fs::create_dir(&other).unwrap();
            std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
            let e = ensure_base(&other).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
            assert!(e.contains(&other.display().to_string()), "{e}");
        }
        let _ = fs::remove_dir_all(&tmp);
    }
}
