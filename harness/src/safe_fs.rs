//! Files in directories another user can write: the run directory and the cluster template
//! while it is made belong to the unprivileged server user (`pgchaos`) when the harness runs
//! as root, and anything running as that user (a PostgreSQL superuser's `COPY ... TO
//! PROGRAM`, a topology's `archive_command`) can plant a symlink, a FIFO or a hard link there.
//!
//! So below a trusted anchor (a directory whose own path only its owner can change: the run
//! directory in the user's base, the template's staging directory in the cache) every path
//! component is opened with `O_NOFOLLOW` relative to its parent's descriptor; files are
//! created with `O_EXCL` (a rewrite writes a new file and renames it over the old name, which
//! replaces a symlink rather than following it); an existing log is appended to only if it is
//! a regular file with one link, owned by us or the server user; reads refuse anything but a
//! regular file (a FIFO would hang them, `/dev/zero` never ends); owners and modes are changed
//! with `fchown`/`fchmod` on the open descriptor, never by path. Every error names the path.
//!
//! May import nothing of the crate; the launcher, the pooler's console files, `init` and the
//! profiles' dependency reads use it.

use anyhow::{Context, Result, anyhow, bail};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// `(uid, gid)` of the server user when the harness runs as root and servers as that user.
pub type Owner = Option<(u32, u32)>;

/// An open directory: everything below it is reached through its descriptor.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// One path component: not empty, no `/`, not `.` or `..`.
fn component(name: &OsStr) -> Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        bail!("{:?}: not a single file name", name);
    }
    CString::new(b).map_err(|_| anyhow!("{:?}: contains a NUL byte", name))
}

fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(errno());
        }
        Ok(st)
    }
}

fn is_kind(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// `fchmod` and (for root) `fchown` on an open descriptor.
fn set_owner_mode(fd: i32, mode: u32, owner: Owner, path: &Path) -> Result<()> {
    // SAFETY: fchmod/fchown on a descriptor we hold.
    unsafe {
        if libc::fchmod(fd, mode as libc::mode_t) != 0 {
            return Err(errno()).with_context(|| format!("{}: fchmod {mode:o}", path.display()));
        }
        if let Some((uid, gid)) = owner
            && libc::fchown(fd, uid, gid) != 0
        {
            return Err(errno())
                .with_context(|| format!("{}: fchown to {uid}:{gid}", path.display()));
        }
    }
    Ok(())
}

impl Dir {
    /// A trusted anchor, opened as named (symlinks in its own path are followed: it is up to
    /// the caller that only its owner can change that path).
    pub fn open(path: &Path) -> Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| anyhow!("{}: contains a NUL byte", path.display()))?;
        // SAFETY: open with a valid C string; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(errno())
                .with_context(|| format!("{}: opening the directory", path.display()));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// `anchor`, then each component of `rel` without following symlinks.
    pub fn walk(anchor: &Path, rel: &Path) -> Result<Dir> {
        let mut dir = Dir::open(anchor)?;
        for c in rel.components() {
            match c {
                Component::Normal(name) => dir = dir.sub(name)?,
                Component::CurDir => {}
                _ => bail!(
                    "{}: must be a plain relative path below {}",
                    rel.display(),
                    anchor.display()
                ),
            }
        }
        Ok(dir)
    }

    /// The directory holding `path` (which must lie below `anchor`), reached without
    /// following symlinks below the anchor, and the file's own name.
    pub fn parent_of(anchor: &Path, path: &Path) -> Result<(Dir, OsString)> {
        let rel = path.strip_prefix(anchor).map_err(|_| {
            anyhow!(
                "{}: not inside {} (where the harness writes)",
                path.display(),
                anchor.display()
            )
        })?;
        let name = rel
            .file_name()
            .ok_or_else(|| anyhow!("{}: no file name", path.display()))?
            .to_os_string();
        let dir = Dir::walk(anchor, rel.parent().unwrap_or(Path::new("")))?;
        Ok((dir, name))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn join(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    fn openat(&self, name: &OsStr, flags: i32, mode: u32) -> Result<OwnedFd, std::io::Error> {
        let c = component(name).map_err(std::io::Error::other)?;
        // SAFETY: openat relative to a directory descriptor we hold, valid C string.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: a fresh descriptor.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A subdirectory, refused if it is a symlink (or anything but a directory).
    pub fn sub(&self, name: &OsStr) -> Result<Dir> {
        let path = self.join(name);
        let fd = self
            .openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| refusal(e, &path, "a directory"))?;
        Ok(Dir { fd, path })
    }

    /// A subdirectory, made (`mode`, ours) if missing; a symlink there is refused.
    pub fn sub_or_make(&self, name: &OsStr, mode: u32) -> Result<Dir> {
        match self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => Ok(Dir {
                fd,
                path: self.join(name),
            }),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => self.mkdir(name, mode, None),
            Err(e) => Err(refusal(e, &self.join(name), "a directory")),
        }
    }

    /// A new subdirectory (it must not exist), `mode`, owned by `owner` (or by us).
    pub fn mkdir(&self, name: &OsStr, mode: u32, owner: Owner) -> Result<Dir> {
        let path = self.join(name);
        let c = component(name)?;
        // SAFETY: mkdirat relative to a directory descriptor we hold.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
            return Err(errno())
                .with_context(|| format!("{}: creating the directory", path.display()));
        }
        let dir = self.sub(name)?;
        let st = fstat(dir.fd.as_raw_fd()).with_context(|| format!("{}: fstat", path.display()))?;
        if st.st_uid != euid() {
            bail!(
                "{}: replaced by a directory of uid {} while it was being made; refusing it",
                path.display(),
                st.st_uid
            );
        }
        set_owner_mode(dir.fd.as_raw_fd(), mode, owner, &path)?;
        Ok(dir)
    }

    /// A new file (`O_EXCL`: nothing may be there, not even a dangling symlink), `mode`,
    /// owned by `owner` (or by us).
    pub fn create(&self, name: &OsStr, mode: u32, owner: Owner) -> Result<File> {
        let path = self.join(name);
        let fd = self
            .openat(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            .with_context(|| format!("{}: creating the file", path.display()))?;
        set_owner_mode(fd.as_raw_fd(), mode, owner, &path)?;
        Ok(File::from(fd))
    }

    /// Write `bytes` as `name`: a new file under a temporary name, renamed over `name` (a
    /// symlink or anything else there is replaced, never followed or written through).
    pub fn replace(&self, name: &OsStr, bytes: &[u8], mode: u32, owner: Owner) -> Result<()> {
        let path = self.join(name);
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(
            ".new-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let mut f = self.create(&tmp, mode, owner)?;
        let done = f
            .write_all(bytes)
            .with_context(|| format!("{}: writing", self.join(&tmp).display()))
            .and_then(|()| {
                let (t, n) = (component(&tmp)?, component(name)?);
                // SAFETY: renameat within one directory descriptor we hold.
                let r = unsafe {
                    libc::renameat(
                        self.fd.as_raw_fd(),
                        t.as_ptr(),
                        self.fd.as_raw_fd(),
                        n.as_ptr(),
                    )
                };
                if r != 0 {
                    return Err(errno()).with_context(|| format!("{}: replacing", path.display()));
                }
                Ok(())
            });
        if done.is_err() {
            self.remove(&tmp);
        }
        done
    }

    /// Remove an entry (a file or a symlink itself), ignoring errors.
    pub fn remove(&self, name: &OsStr) {
        if let Ok(c) = component(name) {
            // SAFETY: unlinkat relative to a directory descriptor we hold.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// A log to append to: created if missing; if it exists it must be a regular file with
    /// one link, owned by us or by `owner` (a server's log from an earlier start).
    pub fn append(&self, name: &OsStr, mode: u32, owner: Owner) -> Result<File> {
        let path = self.join(name);
        let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK;
        let fd = self
            .openat(name, flags, 0o600)
            .map_err(|e| refusal(e, &path, "a regular file"))?;
        let raw = fd.as_raw_fd();
        let st = fstat(raw).with_context(|| format!("{}: fstat", path.display()))?;
        let ours = st.st_uid == euid() || owner.is_some_and(|(u, _)| u == st.st_uid);
        if !is_kind(&st, libc::S_IFREG) || st.st_nlink != 1 || !ours {
            bail!(
                "{}: not a regular file of ours with one link (mode {:o}, {} links, uid {}); refusing to write to it",
                path.display(),
                st.st_mode,
                st.st_nlink,
                st.st_uid
            );
        }
        set_owner_mode(raw, mode, owner, &path)?;
        // SAFETY: fcntl on a descriptor we hold: back to blocking writes.
        unsafe { libc::fcntl(raw, libc::F_SETFL, libc::O_WRONLY | libc::O_APPEND) };
        Ok(File::from(fd))
    }

    /// A regular file's content (its last `cap` bytes when it is longer), refused if it is a
    /// symlink, a FIFO, a device or anything but a regular file.
    pub fn read_tail(&self, name: &OsStr, cap: u64) -> Result<Vec<u8>> {
        let path = self.join(name);
        let fd = self
            .openat(name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .map_err(|e| refusal(e, &path, "a regular file"))?;
        read_regular(fd, &path, cap)
    }

    /// Copy the tree below `self` into `to` (an empty directory of ours): directories
    /// `dir_mode`, files `file_mode` (keeping their owner-execute bit), all owned by `owner`.
    /// Anything but directories and regular files (a symlink, a FIFO, a device) is refused.
    pub fn copy_tree(&self, to: &Dir, dir_mode: u32, file_mode: u32, owner: Owner) -> Result<()> {
        let list = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .with_context(|| format!("{}: listing", self.path.display()))?;
        for entry in list {
            let entry = entry.with_context(|| format!("{}: listing", self.path.display()))?;
            let name = entry.file_name();
            let path = self.join(&name);
            let fd = self
                .openat(&name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                .map_err(|e| refusal(e, &path, "a directory or a regular file"))?;
            let st = fstat(fd.as_raw_fd()).with_context(|| format!("{}: fstat", path.display()))?;
            if is_kind(&st, libc::S_IFDIR) {
                let from = Dir { fd, path };
                let sub = to.mkdir(&name, dir_mode, owner)?;
                from.copy_tree(&sub, dir_mode, file_mode, owner)?;
            } else if is_kind(&st, libc::S_IFREG) {
                let mode = file_mode | (st.st_mode & 0o100);
                let mut out = to.create(&name, mode, owner)?;
                let mut src = File::from(fd);
                std::io::copy(&mut src, &mut out).with_context(|| {
                    format!("copying {} to {}", path.display(), to.join(&name).display())
                })?;
            } else {
                bail!(
                    "{}: neither a directory nor a regular file (mode {:o}); refusing to copy it",
                    path.display(),
                    st.st_mode
                );
            }
        }
        Ok(())
    }

    /// `fchmod` of the directory itself.
    pub fn set_mode(&self, mode: u32) -> Result<()> {
        set_owner_mode(self.fd.as_raw_fd(), mode, None, &self.path)
    }

    /// Owner and mode of the directory itself.
    pub fn owner_mode(&self) -> Result<(u32, u32)> {
        let st = fstat(self.fd.as_raw_fd())
            .with_context(|| format!("{}: fstat", self.path.display()))?;
        Ok((st.st_uid, st.st_mode & 0o7777))
    }
}

fn read_regular(fd: OwnedFd, path: &Path, cap: u64) -> Result<Vec<u8>> {
    let st = fstat(fd.as_raw_fd()).with_context(|| format!("{}: fstat", path.display()))?;
    if !is_kind(&st, libc::S_IFREG) {
        bail!(
            "{}: not a regular file (mode {:o}); refusing to read it",
            path.display(),
            st.st_mode
        );
    }
    let mut f = File::from(fd);
    let len = st.st_size as u64;
    if len > cap {
        f.seek(SeekFrom::Start(len - cap))
            .with_context(|| format!("{}: seeking", path.display()))?;
    }
    let mut out = Vec::new();
    f.take(cap)
        .read_to_end(&mut out)
        .with_context(|| format!("{}: reading", path.display()))?;
    Ok(out)
}

/// The error for an entry that could not be opened as `what`: a symlink is named as such.
fn refusal(e: std::io::Error, path: &Path, what: &str) -> anyhow::Error {
    // O_NOFOLLOW | O_DIRECTORY on a symlink fails with ENOTDIR, not ELOOP.
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) if link => anyhow!(
            "{}: is a symbolic link; refusing to follow it (expected {what})",
            path.display()
        ),
        Some(libc::ENOTDIR) => anyhow!("{}: not {what}: {e}", path.display()),
        _ => anyhow!("{}: opening: {e}", path.display()),
    }
}

/// A whole regular file of at most `cap` bytes, opened without following a symlink and
/// without blocking on a FIFO: a symlink, a FIFO, a device, or a larger file is refused.
pub fn read_regular_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| refusal(e, path, "a regular file"))?;
    let m = f
        .metadata()
        .with_context(|| format!("{}: fstat", path.display()))?;
    if !m.file_type().is_file() {
        bail!(
            "{}: not a regular file ({:?}); refusing to read it",
            path.display(),
            m.file_type()
        );
    }
    if m.len() > cap {
        bail!(
            "{}: {} bytes, more than the {cap} read; refusing it",
            path.display(),
            m.len()
        );
    }
    let mut out = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut out)
        .with_context(|| format!("{}: reading", path.display()))?;
    if out.len() as u64 > cap {
        bail!(
            "{}: grew past {cap} bytes while read; refusing it",
            path.display()
        );
    }
    Ok(out)
}

/// The last `cap` bytes of a regular file, its final component opened without following a
/// symlink (for logs named by path only: error messages and saved logs).
pub fn read_tail_nofollow(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{}: no file name", path.display()))?;
    Dir::open(dir)?.read_tail(name, cap)
}

/// Write `text` as `path` below `anchor` (mode 0600, owned by `owner` or by us), replacing
/// whatever is there (see [`Dir::replace`]).
pub fn write_private(anchor: &Path, path: &Path, text: &str, owner: Owner) -> Result<()> {
    let (dir, name) = Dir::parent_of(anchor, path)?;
    dir.replace(&name, text.as_bytes(), 0o600, owner)
}

/// Open `path` below `anchor` to append a server's log to it (see [`Dir::append`]).
pub fn open_log(anchor: &Path, path: &Path, owner: Owner) -> Result<File> {
    let (dir, name) = Dir::parent_of(anchor, path)?;
    dir.append(&name, 0o600, owner)
}

/// A new directory `path` below `anchor` (mode 0700, owned by `owner` or by us).
pub fn make_dir(anchor: &Path, path: &Path, owner: Owner) -> Result<()> {
    let (dir, name) = Dir::parent_of(anchor, path)?;
    dir.mkdir(&name, 0o700, owner).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgchaos-safefs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_written_through() {
        let d = scratch("replace");
        let victim = d.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        symlink(&victim, run.join("credentials.txt")).unwrap();
        write_private(&run, &run.join("credentials.txt"), "secret", None).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let m = std::fs::symlink_metadata(run.join("credentials.txt")).unwrap();
        assert!(m.is_file(), "the symlink itself was replaced by a file");
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(run.join("credentials.txt")).unwrap(),
            "secret"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_symlinked_directory_below_the_anchor_is_refused() {
        let d = scratch("subdir");
        let elsewhere = d.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        symlink(&elsewhere, run.join("data")).unwrap();
        let e = write_private(&run, &run.join("data/pg_hba.conf"), "x", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!elsewhere.join("pg_hba.conf").exists());
        let e = make_dir(&run, &run.join("data"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("data"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn logs_refuse_symlinks_fifos_and_hard_links_and_append_to_their_own() {
        let d = scratch("log");
        let victim = d.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        symlink(&victim, run.join("postgres.log")).unwrap();
        let e = open_log(&run, &run.join("postgres.log"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::hard_link(&victim, run.join("pgbouncer.log")).unwrap();
        let e = open_log(&run, &run.join("pgbouncer.log"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 links"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let fifo = CString::new(run.join("fifo.log").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        assert!(open_log(&run, &run.join("fifo.log"), None).is_err());
        assert!(read_tail_nofollow(&run.join("fifo.log"), 100).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "no hang");
        let log = run.join("own.log");
        open_log(&run, &log, None)
            .unwrap()
            .write_all(b"one\n")
            .unwrap();
        open_log(&run, &log, None)
            .unwrap()
            .write_all(b"two\n")
            .unwrap();
        assert_eq!(read_tail_nofollow(&log, 100).unwrap(), b"one\ntwo\n");
        assert_eq!(read_tail_nofollow(&log, 4).unwrap(), b"two\n");
        let e = read_tail_nofollow(&run.join("postgres.log"), 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_tree_is_copied_with_its_modes_and_a_symlink_in_it_is_refused() {
        let d = scratch("copy");
        let src = d.join("src");
        std::fs::create_dir_all(src.join("base/1")).unwrap();
        std::fs::write(src.join("PG_VERSION"), "18\n").unwrap();
        std::fs::write(src.join("base/1/1259"), vec![7u8; 100_000]).unwrap();
        let dst = d.join("dst");
        std::fs::create_dir(&dst).unwrap();
        let to = Dir::open(&dst).unwrap();
        Dir::open(&src)
            .unwrap()
            .copy_tree(&to, 0o700, 0o600, None)
            .unwrap();
        assert_eq!(
            std::fs::read(dst.join("base/1/1259")).unwrap(),
            vec![7u8; 100_000]
        );
        let m = std::fs::metadata(dst.join("base")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(dst.join("PG_VERSION")).unwrap().mode() & 0o777,
            0o600
        );
        symlink("/etc/passwd", src.join("base/pg_hba.conf")).unwrap();
        let dst2 = d.join("dst2");
        std::fs::create_dir(&dst2).unwrap();
        let e = Dir::open(&src)
            .unwrap()
            .copy_tree(&Dir::open(&dst2).unwrap(), 0o700, 0o600, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
