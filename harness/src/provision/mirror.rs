//! A source mirror: a directory of release tarballs, `<component>-<version>.tar.gz`
//! (`pgbouncer-1.25.2.tar.gz`), for machines that cannot download them (air-gapped CI, a
//! company's own copy of upstream sources). Set by `--source-mirror DIR` on the commands
//! that provision, else `PGCHAOS_SOURCE_MIRROR`; a pooler built from source consults it
//! after the cache and before the upstream download.
//!
//! A mirror that is set must exist: a missing directory is an error naming it, never a
//! silent fall-through to another version. A mirror without the wanted tarball is not an
//! error (the next source is tried). A tarball that does not unpack is an error naming the
//! file. The tarball's SHA-256 is recorded in the cache entry's marker and in
//! `results.json`'s versions: a build is traceable to the exact bytes it came from.

use super::{Options, first_line, untar};
use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The environment variable naming the mirror directory.
pub const ENV: &str = "PGCHAOS_SOURCE_MIRROR";

/// A release tarball found in the mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tarball {
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
}

/// The mirror directory from `get` (the environment): `None` when unset or empty.
pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    get(ENV).map(PathBuf::from)
}

/// `<component>-<version>.tar.gz`.
pub fn tarball_name(component: &str, version: &str) -> String {
    format!("{component}-{version}.tar.gz")
}

/// The tarball of `component` `version` in the configured mirror: `Ok(None)` when no mirror
/// is set or it holds no such file; an error when the mirror is set but is not a directory,
/// or the file cannot be read.
pub(crate) fn find(opts: &Options, component: &str, version: &str) -> Result<Option<Tarball>> {
    let Some(dir) = &opts.source_mirror else {
        return Ok(None);
    };
    check_dir(dir)?;
    let path = dir.join(tarball_name(component, version));
    if !path.exists() {
        return Ok(None);
    }
    if !path.is_file() {
        bail!("source mirror: {} is not a file", path.display());
    }
    let sha256 = sha256_file(&path)?;
    Ok(Some(Tarball { path, sha256 }))
}

/// The mirror directory exists and is a directory, or an error naming it and where it was set.
pub fn check_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!(
            "source mirror {} (--source-mirror or {ENV}) {}",
            dir.display(),
            if dir.exists() {
                "is not a directory"
            } else {
                "does not exist"
            }
        );
    }
    Ok(())
}

/// Lowercase hex SHA-256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>())
}

/// Unpack `t` into `into` and return the source tree holding `marker` (e.g. `configure`),
/// at most two levels down; errors name the tarball.
pub(crate) fn unpack(
    opts: &Options,
    step: &str,
    t: &Path,
    into: &Path,
    marker: &str,
) -> Result<PathBuf> {
    untar(opts, step, t, into).map_err(|e| {
        anyhow!(
            "{} does not unpack (corrupt or not a .tar.gz?): {}",
            t.display(),
            first_line(&e)
        )
    })?;
    super::find_dir_with(into, marker, 2).ok_or_else(|| {
        anyhow!(
            "{} unpacks to no source tree with a {marker} (not a release tarball?)",
            t.display()
        )
    })
}

/// The error for a tarball whose built binary reports another version than its name.
pub(crate) fn version_mismatch(t: &Path, named: &str, built: &str) -> anyhow::Error {
    anyhow!(
        "{}: its name says version {named}, but the binary built from it reports {built}",
        t.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "pgchaos-mirror-test-{name}-{}-{}",
            std::process::id(),
            super::super::unique()
        ));
        fs::create_dir_all(&p).unwrap();
        p
    }

    fn opts(cache: &Path, mirror: Option<PathBuf>) -> Options {
        Options {
            cache_dir: cache.to_path_buf(),
            strict_versions: false,
            quiet: true,
            source_mirror: mirror,
        }
    }

    #[test]
    fn sha256_of_known_bytes() {
        let d = scratch("sha");
        let f = d.join("abc");
        fs::write(&f, b"abc").unwrap();
        // FIPS 180-2's test vector for "abc".
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let e = sha256_file(&d.join("missing")).unwrap_err();
        assert!(format!("{e:#}").contains("missing"), "{e:#}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn finding_a_tarball() {
        let d = scratch("find");
        let cache = d.join("cache");
        // No mirror: nothing to find, no error.
        assert_eq!(
            find(&opts(&cache, None), "pgbouncer", "1.25.2").unwrap(),
            None
        );
        // A mirror that does not exist: an error naming it.
        let gone = d.join("no-such-mirror");
        let e = find(&opts(&cache, Some(gone.clone())), "pgbouncer", "1.25.2").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "source mirror {} (--source-mirror or PGCHAOS_SOURCE_MIRROR) does not exist",
                gone.display()
            )
        );
        // A file where the directory should be.
        let file = d.join("a-file");
        fs::write(&file, "x").unwrap();
        let e = find(&opts(&cache, Some(file)), "pgbouncer", "1.25.2").unwrap_err();
        assert!(e.to_string().ends_with("is not a directory"), "{e}");
        // A mirror without the version: not found, no error.
        let m = d.join("mirror");
        fs::create_dir_all(&m).unwrap();
        fs::write(m.join("pgbouncer-1.24.1.tar.gz"), b"abc").unwrap();
        let o = opts(&cache, Some(m.clone()));
        assert_eq!(find(&o, "pgbouncer", "1.25.2").unwrap(), None);
        let t = find(&o, "pgbouncer", "1.24.1").unwrap().unwrap();
        assert_eq!(t.path, m.join("pgbouncer-1.24.1.tar.gz"));
        assert!(t.sha256.starts_with("ba7816bf"), "{t:?}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupt_tarball_is_named() {
        let d = scratch("corrupt");
        let cache = d.join("cache");
        fs::create_dir_all(&cache).unwrap();
        let bad = d.join("pgbouncer-1.25.2.tar.gz");
        fs::write(&bad, b"this is not gzip").unwrap();
        let into = d.join("x");
        fs::create_dir_all(&into).unwrap();
        let e = unpack(&opts(&cache, None), "test-untar", &bad, &into, "configure").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{} does not unpack", bad.display())),
            "{msg}"
        );
        assert_eq!(
            version_mismatch(&bad, "1.25.2", "1.24.1").to_string(),
            format!(
                "{}: its name says version 1.25.2, but the binary built from it reports 1.24.1",
                bad.display()
            )
        );
        fs::remove_dir_all(&d).unwrap();
    }
}
