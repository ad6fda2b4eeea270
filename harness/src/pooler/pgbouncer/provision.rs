//! How PgBouncer is obtained (the sources in order are in `provision`'s module doc): an
//! explicit binary, the cache, the source mirror's tarball built here, the upstream source
//! tarball built here, the nearest cached build, the Debian source package of the next
//! release built here. The version actually obtained is read from the binary; a difference
//! from the declared one is drift. Only the `pgbouncer` target is built (`make pgbouncer`):
//! a release's man pages need pandoc, which the binary does not.

use crate::provision::*;
use anyhow::{Result, anyhow, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) const PGBOUNCER_RELEASES: &str = "https://www.pgbouncer.org/downloads/files";
/// What building PgBouncer from source needs (Debian package names).
pub(crate) const BUILD_DEPS: &[&str] = &[
    "make",
    "gcc",
    "pkg-config",
    "libevent-dev",
    "libssl-dev",
    "libc-ares-dev",
    "dpkg-dev",
];

/// Obtain PgBouncer `version` (e.g. "1.25.2"): see the module doc for the sources.
pub fn pgbouncer(version: &str, explicit: Option<&Path>, opts: &Options) -> Result<PoolerBinary> {
    check_version_syntax(version)?;
    let explicit = explicit
        .map(Path::to_path_buf)
        .or_else(|| env_path("PGCHAOS_PGBOUNCER_BIN"));
    if let Some(given) = explicit {
        note(
            opts,
            &format!("pgbouncer {version}: explicit path {}", given.display()),
        );
        let path = if given.is_dir() {
            [given.join("pgbouncer"), given.join("bin/pgbouncer")]
                .into_iter()
                .find(|p| is_executable(p))
                .ok_or_else(|| {
                    anyhow!(
                        "{} is a directory without an executable pgbouncer or bin/pgbouncer",
                        given.display()
                    )
                })?
        } else if is_executable(&given) {
            given
        } else {
            bail!(
                "pgbouncer binary {} is missing or not executable",
                given.display()
            );
        };
        let actual = pgbouncer_version(opts, &path)?;
        return settle_bouncer(
            opts,
            version,
            path,
            actual,
            "explicit path".into(),
            "explicit path",
        );
    }

    let opts = &absolute_cache(opts)?;
    prepare_cache(opts)?;
    let root = opts.cache_dir.join("pgbouncer");
    let dest = root.join(version);
    if let Some(found) = bouncer_cache_hit(opts, version, &dest, false)? {
        return Ok(found);
    }
    let _lock = CacheLock::acquire(opts, &format!("pgbouncer-{version}"))?;
    if let Some(found) = bouncer_cache_hit(opts, version, &dest, true)? {
        return Ok(found);
    }
    let mut failures = vec![format!(
        "cache: no complete {}",
        dest.join("bin/pgbouncer").display()
    )];

    // The source mirror: set and missing, or a tarball that does not build as its name
    // says, is an error (never a silent fall-through to another version).
    match from_mirror(opts, version)? {
        Ok(b) => return Ok(b),
        Err(why) => failures.push(why),
    }

    // Upstream source tarball. A failed attempt is remembered for an hour, so that every
    // launch on a machine without internet access does not pay for (and serialise on) it.
    let label = "upstream release";
    let marker = root.join(format!(".upstream-failed-{version}"));
    let recently_failed = fs::metadata(&marker)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < std::time::Duration::from_secs(3600));
    if recently_failed {
        note(
            opts,
            &format!(
                "pgbouncer {version}: {label} failed within the last hour ({}); not retrying",
                marker.display()
            ),
        );
    }
    let attempt = (|| -> Result<PoolerBinary> {
        if recently_failed {
            bail!("not retried: it failed within the last hour");
        }
        note(opts, &format!("pgbouncer {version}: trying {label}"));
        let tmp = TempDir::new(&opts.cache_dir)?;
        let name = mirror::tarball_name("pgbouncer", version);
        let file = tmp.path().join(&name);
        curl(
            opts,
            "pgbouncer-curl",
            &format!("{PGBOUNCER_RELEASES}/{version}/{name}"),
            &file,
        )?;
        let t = mirror::Tarball {
            sha256: mirror::sha256_file(&file)?,
            path: file,
        };
        build_tarball(opts, version, &t, tmp.path(), label)
    })();
    match attempt {
        Ok(b) => return Ok(b),
        Err(e) => {
            if !recently_failed {
                note(
                    opts,
                    &format!("pgbouncer {version}: {label} failed: {}", first_line(&e)),
                );
                let _ = fs::write(&marker, format!("{e:#}\n"));
            }
            failures.push(format!("{label}: {e:#}"));
        }
    }

    // A cached build of another version, the nearest: only when not strict (it cannot be
    // the declared version), and only once the Debian source package is known not to be
    // the declared version either (a cached build of it says which version it is).
    if !opts.strict_versions && debian_known_other(&root, version) {
        match nearest_cached(opts, &root, version) {
            Some(Ok(b)) => return Ok(b),
            Some(Err(e)) => failures.push(e),
            None => {}
        }
    }

    // The Debian source package.
    let label = "Debian source package";
    note(
        opts,
        &format!("pgbouncer {version}: trying {label} ({DEBIAN_SUITE})"),
    );
    match bouncer_from_debian(opts, version) {
        Ok(b) => Ok(b),
        Err(e) if e.to_string().starts_with("--strict-versions") => Err(e),
        Err(e) => {
            note(
                opts,
                &format!("pgbouncer {version}: {label} failed: {}", first_line(&e)),
            );
            failures.push(format!("{label}: {e:#}"));
            bail!(
                "pgbouncer {version} could not be obtained; tried, in order:\n- explicit path: \
                 none given (argument or PGCHAOS_PGBOUNCER_BIN)\n- {}",
                failures.join("\n- ")
            )
        }
    }
}

/// The source mirror's tarball of `version`, built: `Ok(Err(why))` when there is none to
/// try (no mirror set, or no such file in it); `Err` when the mirror is set but missing or
/// the tarball does not build as its name says.
fn from_mirror(opts: &Options, version: &str) -> Result<std::result::Result<PoolerBinary, String>> {
    let Some(dir) = &opts.source_mirror else {
        return Ok(Err(format!(
            "source mirror: none set (--source-mirror or {})",
            mirror::ENV
        )));
    };
    match mirror::find(opts, "pgbouncer", version)? {
        Some(t) => bouncer_from_tarball(opts, version, &t, "source mirror").map(Ok),
        None => {
            let name = mirror::tarball_name("pgbouncer", version);
            note(
                opts,
                &format!("pgbouncer {version}: source mirror has no {name}"),
            );
            Ok(Err(format!(
                "source mirror: no {}",
                dir.join(name).display()
            )))
        }
    }
}

/// A complete cache entry under `root` was built from the Debian source package, and it is
/// not `version`: Debian's package is known not to supply `version`.
pub(crate) fn debian_known_other(root: &Path, version: &str) -> bool {
    complete_versions(root).iter().any(|v| {
        !same_version(v, version)
            && entry_source(&root.join(v)).is_some_and(|s| s.starts_with("Debian source package"))
    })
}

/// The nearest cached build of another version, as drift: `None` when there is none,
/// `Some(Err(why))` when it does not run.
fn nearest_cached(
    opts: &Options,
    root: &Path,
    version: &str,
) -> Option<std::result::Result<PoolerBinary, String>> {
    let cached = complete_versions(root);
    let near = nearest(version, &cached)?;
    let dir = root.join(near);
    let path = dir.join("bin/pgbouncer");
    let from = entry_source(&dir).unwrap_or_else(|| "an earlier run".into());
    note(
        opts,
        &format!("pgbouncer {version}: trying cache, nearest version {near} ({from})"),
    );
    let r = pgbouncer_version(opts, &path).and_then(|actual| {
        let why = format!("cached build from {from}");
        settle_bouncer(opts, version, path, actual, "cache".into(), &why)
    });
    Some(r.map_err(|e| {
        note(
            opts,
            &format!(
                "pgbouncer {version}: cached {near} unusable: {}",
                first_line(&e)
            ),
        );
        format!("cache {near}: {e:#}")
    }))
}

pub(crate) fn bouncer_cache_hit(
    opts: &Options,
    version: &str,
    dest: &Path,
    locked: bool,
) -> Result<Option<PoolerBinary>> {
    match entry_state(dest) {
        Entry::Missing => Ok(None),
        Entry::Incomplete => {
            if locked {
                note(
                    opts,
                    &format!(
                        "pgbouncer {version}: removing incomplete {}",
                        dest.display()
                    ),
                );
                remove_dir(dest)?;
            }
            Ok(None)
        }
        Entry::Complete => {
            let path = dest.join("bin/pgbouncer");
            match pgbouncer_version(opts, &path) {
                Ok(actual) if same_version(&actual, version) => {
                    note(
                        opts,
                        &format!("pgbouncer {version}: cache {}", path.display()),
                    );
                    Ok(Some(PoolerBinary {
                        path,
                        version: actual,
                        declared: version.to_string(),
                        source: "cache".into(),
                        drift: None,
                        built_from: entry_source(dest),
                        tarball_sha256: entry_field(dest, "tarball_sha256"),
                    }))
                }
                other => {
                    if locked {
                        discard_entry(opts, "pgbouncer", version, other, dest)?;
                    }
                    Ok(None)
                }
            }
        }
    }
}

/// Accept `actual` for `declared`, or refuse it (strict), recording drift loudly.
pub(crate) fn settle_bouncer(
    opts: &Options,
    declared: &str,
    path: PathBuf,
    actual: String,
    source: String,
    nearest_from: &str,
) -> Result<PoolerBinary> {
    accept_pooler(
        opts,
        PoolerBinary {
            path,
            version: actual.clone(),
            declared: declared.to_string(),
            source,
            drift: None,
            built_from: None,
            tarball_sha256: None,
        },
        || {
            format!(
                "--strict-versions: pgbouncer {declared} cannot be obtained here; nearest is \
                 {actual} ({nearest_from})"
            )
        },
        || {
            format!(
                "pgbouncer declared {declared}, obtained {actual} (nearest available: {nearest_from})"
            )
        },
        &[
            format!("Results are recorded against PgBouncer {actual}."),
            format!(
                "To refuse this, use --strict-versions; to use PgBouncer {declared}, put \
                 pgbouncer-{declared}.tar.gz in a source mirror (--source-mirror DIR or \
                 PGCHAOS_SOURCE_MIRROR), or build it and pass it (PGCHAOS_PGBOUNCER_BIN)."
            ),
        ],
    )
}

pub(crate) fn bouncer_from_debian(opts: &Options, declared: &str) -> Result<PoolerBinary> {
    let tmp = TempDir::new(&opts.cache_dir)?;
    let t = tmp.path();
    let (mirror, signed_by) = choose_debian_mirror(&machine_apt_sources()).ok_or_else(|| {
        anyhow!(
            "no Debian mirror found in the machine's apt sources (/etc/apt/sources.list, \
             /etc/apt/sources.list.d/)"
        )
    })?;
    let apt = mkdir(&t.join("apt"))?;
    mkdir(&apt.join("lists"))?;
    mkdir(&apt.join("lists/partial"))?;
    mkdir(&apt.join("cache"))?;
    mkdir(&apt.join("cache/archives"))?;
    mkdir(&apt.join("cache/archives/partial"))?;
    let key_opt = match signed_by {
        Some(k) if k.contains("BEGIN PGP") => {
            let f = apt.join("keyring.asc");
            fs::write(&f, format!("{}\n", k.trim()))?;
            format!("[signed-by={}] ", f.display())
        }
        Some(k) if Path::new(&k).is_file() => format!("[signed-by={k}] "),
        _ => String::new(),
    };
    let list = apt.join("sources.list");
    fs::write(
        &list,
        format!("deb-src {key_opt}{mirror} {DEBIAN_SUITE} main\n"),
    )?;
    let mut apt_opts: Vec<String> = vec![
        format!("Dir::Etc::SourceList={}", list.display()),
        "Dir::Etc::SourceParts=/dev/null".into(),
        format!("Dir::State::Lists={}", apt.join("lists").display()),
        format!("Dir::Cache={}", apt.join("cache").display()),
        "APT::Get::List-Cleanup=0".into(),
    ];
    if is_root() {
        // The private directories are root's; apt's _apt sandbox user cannot write them.
        apt_opts.push("APT::Sandbox::User=root".into());
    }
    let apt_get = |args: &[&str]| {
        let mut c = Command::new("apt-get");
        for o in &apt_opts {
            c.arg("-o").arg(o);
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run(
        opts,
        "pgbouncer-apt-update",
        &mut apt_get(&["-q", "update"]),
    )?;
    let src = mkdir(&t.join("src"))?;
    run(
        opts,
        "pgbouncer-apt-source",
        apt_get(&["-q", "source", "--download-only", "pgbouncer"]).current_dir(&src),
    )?;
    let dsc = find_file_with_suffix(&src, ".dsc", 1)
        .ok_or_else(|| anyhow!("apt-get source left no .dsc in {}", src.display()))?;
    let deb_version = dsc_version(&fs::read_to_string(&dsc)?)
        .ok_or_else(|| anyhow!("no Version: in {}", dsc.display()))?;
    let upstream = upstream_version(&deb_version);
    let label = format!("Debian source package pgbouncer {deb_version} ({DEBIAN_SUITE})");
    if opts.strict_versions && !same_version(&upstream, declared) {
        bail!(
            "--strict-versions: pgbouncer {declared} cannot be obtained here; nearest is \
             {upstream} (Debian source package)"
        );
    }
    let tree = t.join("src/pgbouncer");
    ensure_build_deps(opts)?;
    run(
        opts,
        "pgbouncer-dpkg-source",
        Command::new("dpkg-source")
            .arg("-x")
            .arg(&dsc)
            .arg(&tree)
            .current_dir(&src),
    )?;
    // The build installs under the version the package declares; a concurrent run
    // asking for that version exactly is kept out by its lock.
    let _lock = if same_version(&upstream, declared) {
        None
    } else {
        Some(CacheLock::acquire(opts, &format!("pgbouncer-{upstream}"))?)
    };
    let dest = opts.cache_dir.join("pgbouncer").join(&upstream);
    let b = match bouncer_cache_hit(opts, &upstream, &dest, true)? {
        Some(b) => b, // built by another run meanwhile
        None => build_and_install(opts, &tree, &upstream, t, &label, None)?,
    };
    let PoolerBinary {
        path,
        version,
        source,
        ..
    } = b;
    settle_bouncer(
        opts,
        declared,
        path,
        version,
        source,
        "Debian source package",
    )
}

/// Build PgBouncer `version` from the tarball `t` (source mirror) in a scratch directory
/// and install it into the cache: an error (nothing cached) when it does not unpack, does
/// not build, or builds another version than its name says.
pub(crate) fn bouncer_from_tarball(
    opts: &Options,
    version: &str,
    t: &mirror::Tarball,
    label: &str,
) -> Result<PoolerBinary> {
    note(
        opts,
        &format!(
            "pgbouncer {version}: trying {label} {} (sha256 {})",
            t.path.display(),
            t.sha256
        ),
    );
    let tmp = TempDir::new(&opts.cache_dir)?;
    let label = format!("{label} {}", t.path.display());
    build_tarball(opts, version, t, tmp.path(), &label)
}

/// Unpack `t` into `tmp` and build and install it (see [`build_and_install`]).
pub(crate) fn build_tarball(
    opts: &Options,
    version: &str,
    t: &mirror::Tarball,
    tmp: &Path,
    label: &str,
) -> Result<PoolerBinary> {
    let x = mkdir(&tmp.join("x"))?;
    let src = mirror::unpack(opts, "pgbouncer-untar", &t.path, &x, "configure")?;
    build_and_install(opts, &src, version, tmp, label, Some(t))
}

/// `./configure && make pgbouncer` in `src`, the binary staged under `tmp`, then renamed
/// into `<cache>/pgbouncer/<version it reports>`. Built from a tarball (`from`), a binary
/// reporting another version than `version` is an error naming both, and the tarball's
/// file name and SHA-256 go into the marker (`source=` says where it was).
pub(crate) fn build_and_install(
    opts: &Options,
    src: &Path,
    version: &str,
    tmp: &Path,
    label: &str,
    from: Option<&mirror::Tarball>,
) -> Result<PoolerBinary> {
    ensure_build_deps(opts)?;
    let dest = opts.cache_dir.join("pgbouncer").join(version);
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let t0 = std::time::Instant::now();
    note(
        opts,
        &format!("pgbouncer {version}: building in {}", src.display()),
    );
    run(
        opts,
        "pgbouncer-configure",
        Command::new("./configure")
            .arg(format!("--prefix={}", dest.display()))
            .current_dir(src),
    )?;
    // The binary only: `make` alone also builds the man pages, which need pandoc.
    run(
        opts,
        "pgbouncer-make",
        Command::new("make")
            .arg(format!("-j{jobs}"))
            .arg("pgbouncer")
            .current_dir(src),
    )?;
    let built = src.join("pgbouncer");
    if !is_executable(&built) {
        bail!("make pgbouncer produced no {}", built.display());
    }
    let staged = mkdir(&tmp.join("stage"))?;
    mkdir(&staged.join("bin"))?;
    let path = staged.join("bin/pgbouncer");
    fs::copy(&built, &path)
        .map_err(|e| anyhow!("copying {} to {}: {e}", built.display(), path.display()))?;
    let actual = pgbouncer_version(opts, &path)?;
    let mut fields: Vec<(&str, &str)> = Vec::new();
    let tarball_path;
    if let Some(t) = from {
        if !same_version(&actual, version) {
            return Err(mirror::version_mismatch(&t.path, version, &actual));
        }
        tarball_path = t
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        fields.push(("tarball", &tarball_path));
        fields.push(("tarball_sha256", &t.sha256));
    }
    let dest = opts.cache_dir.join("pgbouncer").join(&actual);
    install_entry_with(&staged, &dest, label, &fields)?;
    note(
        opts,
        &format!(
            "pgbouncer {actual}: built in {:.1} s, cached at {}",
            t0.elapsed().as_secs_f64(),
            dest.display()
        ),
    );
    Ok(PoolerBinary {
        path: dest.join("bin/pgbouncer"),
        version: actual,
        declared: version.to_string(),
        source: label.to_string(),
        drift: None,
        built_from: entry_source(&dest),
        tarball_sha256: entry_field(&dest, "tarball_sha256"),
    })
}

pub(crate) fn pgbouncer_version(opts: &Options, path: &Path) -> Result<String> {
    let out = run_output(
        opts,
        "pgbouncer-version",
        Command::new(path).arg("--version"),
    )?;
    parse_pgbouncer_version(&out).ok_or_else(|| {
        anyhow!(
            "cannot read a version from `{} --version`: {out:?}",
            path.display()
        )
    })
}

/// First line "PgBouncer 1.24.1" (older: "PgBouncer version 1.12.0") -> "1.24.1".
pub(crate) fn parse_pgbouncer_version(out: &str) -> Option<String> {
    let line = out.lines().find(|l| !l.trim().is_empty())?;
    let mut words = line.split_whitespace();
    if !words.next()?.eq_ignore_ascii_case("pgbouncer") {
        return None;
    }
    words
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

/// Check (and, as root on Debian/Ubuntu, install) what building PgBouncer needs.
pub(crate) fn ensure_build_deps(opts: &Options) -> Result<()> {
    static CHECKED: AtomicBool = AtomicBool::new(false);
    if CHECKED.load(Ordering::Relaxed) {
        return Ok(());
    }
    check_build_deps(opts)?;
    CHECKED.store(true, Ordering::Relaxed);
    Ok(())
}

pub(crate) fn check_build_deps(opts: &Options) -> Result<()> {
    if which("dpkg-query").is_none() {
        for tool in ["make", "cc", "pkg-config"] {
            if which(tool).is_none() {
                bail!(
                    "building pgbouncer needs {tool} (and libevent, OpenSSL, c-ares development \
                     files); install them with the system's package manager"
                );
            }
        }
        return Ok(());
    }
    let mut q = Command::new("dpkg-query");
    q.args(["-W", "-f=${Package} ${Status}\\n"])
        .args(BUILD_DEPS);
    let out = exec(opts, "pgbouncer-build-deps", &mut q, true)?.stdout;
    let missing = missing_packages(BUILD_DEPS, &out);
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!("apt-get install -y {}", missing.join(" "));
    if !is_root() {
        bail!(
            "building pgbouncer needs packages that are not installed: {}\nrun as root:\n  {cmd}",
            missing.join(" ")
        );
    }
    note(opts, &format!("installing build dependencies: {cmd}"));
    let install = || {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    if run(opts, "apt-get-install", &mut install()).is_err() {
        note(
            opts,
            "apt-get install failed; running apt-get update and retrying",
        );
        run(
            opts,
            "apt-get-update",
            Command::new("apt-get").arg("update"),
        )?;
        run(opts, "apt-get-install", &mut install())?;
    }
    Ok(())
}

/// Packages of `wanted` not reported "install ok installed" by dpkg-query.
pub(crate) fn missing_packages(wanted: &[&str], dpkg_query_out: &str) -> Vec<String> {
    wanted
        .iter()
        .filter(|p| {
            !dpkg_query_out.lines().any(|l| {
                let mut it = l.splitn(2, ' ');
                let name = it.next().unwrap_or("");
                let name = name.split(':').next().unwrap_or(name); // libfoo:amd64
                name == **p && it.next().map(str::trim) == Some("install ok installed")
            })
        })
        .map(|p| p.to_string())
        .collect()
}

/// The "Version:" field of a .dsc.
pub(crate) fn dsc_version(dsc: &str) -> Option<String> {
    dsc.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
}

/// Debian version -> upstream: "1:1.24.1-1+deb13u2" -> "1.24.1", "1.24.1+dfsg-2" -> "1.24.1".
pub(crate) fn upstream_version(deb: &str) -> String {
    let v = deb.split_once(':').map_or(deb, |(_, v)| v);
    let v = v.rsplit_once('-').map_or(v, |(u, _)| u);
    v.split(['+', '~']).next().unwrap_or(v).to_string()
}
