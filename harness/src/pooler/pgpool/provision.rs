//! How pgpool-II is obtained: an explicit binary (a topology's `binary:`, or
//! `PGCHAOS_PGPOOL_BIN`), or Debian 12's binary packages (`pgpool2`, `libpgpool2`,
//! `libmemcached11`, `libhashkit2`) fetched with `apt-get download` from the machine's own
//! apt sources into a scratch directory and unpacked with `dpkg -x` into the cache,
//! `<cache>/pgpool/<version>/root`; nothing is installed system-wide (docs/pgpool.md §1, §12).
//! The binary's libraries live beside it, so the entry's `bin/pgpool` is a small wrapper that
//! sets `LD_LIBRARY_PATH` and `exec`s it (same pid, same process group). The version that
//! runs is read from `pgpool --version` (on stderr).

use crate::provision::*;
use anyhow::{Context, Result, anyhow, bail};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian 12 packages and the release they carry.
pub const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("pgpool2", "4.3.5-1+deb12u1"),
    ("libpgpool2", "4.3.5-1+deb12u1"),
    ("libmemcached11", ""),
    ("libhashkit2", ""),
];
pub const DEBIAN_RELEASE: &str = "4.3.5";

/// Obtain pgpool-II `version`.
pub fn pgpool(version: &str, explicit: Option<&Path>, opts: &Options) -> Result<PoolerBinary> {
    check_version_syntax(version)?;
    if let Some(given) = explicit
        .map(Path::to_path_buf)
        .or_else(|| env_path("PGCHAOS_PGPOOL_BIN"))
    {
        if !is_executable(&given) {
            bail!(
                "pgpool binary {} is missing or not executable",
                given.display()
            );
        }
        let actual = pgpool_version(&given)?;
        return settle(opts, version, given, actual, "explicit path".into());
    }
    let opts = &absolute_cache(opts)?;
    prepare_cache(opts)?;
    let dest = opts.cache_dir.join("pgpool").join(version);
    if entry_state(&dest) == Entry::Complete {
        let path = dest.join("bin/pgpool");
        let actual = pgpool_version(&path)?;
        let source = entry_source(&dest).unwrap_or_else(|| "cache".into());
        return settle(opts, version, path, actual, format!("cache ({source})"));
    }
    if !same_version(version, DEBIAN_RELEASE) {
        bail!(
            "pgpool {version} could not be obtained: the only release pgchaos provisions is \
             {DEBIAN_RELEASE} (Debian 12's binary package); declare `version: \"{DEBIAN_RELEASE}\"`, \
             or give a built binary (`pgpool.binary`, or PGCHAOS_PGPOOL_BIN)"
        );
    }
    let _lock = CacheLock::acquire(opts, &format!("pgpool-{version}"))?;
    match entry_state(&dest) {
        Entry::Complete => {
            let path = dest.join("bin/pgpool");
            let actual = pgpool_version(&path)?;
            return settle(opts, version, path, actual, "cache".into());
        }
        Entry::Incomplete => {
            note(
                opts,
                &format!("pgpool {version}: removing incomplete {}", dest.display()),
            );
            remove_dir(&dest)?;
        }
        Entry::Missing => {}
    }
    note(
        opts,
        &format!("pgpool {version}: trying Debian 12 binary packages (apt-get download)"),
    );
    let tmp = TempDir::new(&opts.cache_dir)?;
    let debs = mkdir(&tmp.path().join("debs"))?;
    let staged = mkdir(&tmp.path().join("entry"))?;
    let root = mkdir(&staged.join("root"))?;
    let wanted: Vec<String> = DEBIAN_PACKAGES
        .iter()
        .map(|(p, v)| {
            if v.is_empty() {
                p.to_string()
            } else {
                format!("{p}={v}")
            }
        })
        .collect();
    // apt uses the machine's own sources (no mirror is named here); it drops privileges to
    // `_apt` unless told not to, and `_apt` cannot write the scratch directory.
    let download = run(
        opts,
        "pgpool-apt-download",
        Command::new("apt-get")
            .current_dir(&debs)
            .args(["-q", "-o", "APT::Sandbox::User=root", "download"])
            .args(&wanted),
    );
    if let Err(e) = download {
        bail!(
            "pgpool {version}: `apt-get download {}` failed (are the apt lists there? `apt-get update` once): {e:#}",
            wanted.join(" ")
        );
    }
    for e in fs::read_dir(&debs)? {
        let deb = e?.path();
        if deb.extension().is_some_and(|x| x == "deb") {
            run(
                opts,
                "pgpool-dpkg-x",
                Command::new("dpkg").arg("-x").arg(&deb).arg(&root),
            )?;
        }
    }
    let sbin = root.join("usr/sbin/pgpool");
    if !is_executable(&sbin) {
        bail!("pgpool {version}: the packages unpacked no usr/sbin/pgpool");
    }
    let bin = mkdir(&staged.join("bin"))?;
    let dest_root = dest.join("root");
    let w = bin.join("pgpool");
    fs::write(&w, wrapper(&dest_root, "pgpool"))
        .with_context(|| format!("writing {}", w.display()))?;
    fs::set_permissions(&w, fs::Permissions::from_mode(0o755))?;
    // Check the unpacked binary before it is published: every library found.
    let missing = Command::new("ldd")
        .arg(&sbin)
        .env("LD_LIBRARY_PATH", library_path(&root))
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("not found"))
                .map(str::trim)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if !missing.is_empty() {
        bail!(
            "pgpool {version}: libraries missing for {}: {}",
            sbin.display(),
            missing.join("; ")
        );
    }
    install_entry(&staged, &dest, "Debian 12 binary packages")?;
    let path = dest.join("bin/pgpool");
    let actual = pgpool_version(&path)?;
    settle(
        opts,
        version,
        path,
        actual,
        "Debian 12 binary packages".into(),
    )
}

/// `LD_LIBRARY_PATH` for binaries unpacked under `root` (libpcp; libmemcached, libhashkit).
pub fn library_path(root: &Path) -> String {
    format!(
        "{}:{}",
        root.join("usr/lib").display(),
        root.join("usr/lib/x86_64-linux-gnu").display()
    )
}

/// Where a provisioned pgpool's binaries are (`pgpool`, the `pcp_*` tools, `pg_md5`), and the
/// root its packages were unpacked into (its libraries under `usr/lib`): the cache's wrapper
/// `<entry>/bin/pgpool` runs `<entry>/root/usr/sbin/pgpool`; a binary given as is (`binary:`,
/// `PGCHAOS_PGPOOL_BIN`) has its tools beside it and its libraries where the system keeps
/// them (no root).
pub fn unpacked(exe: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
    let mut head = [0u8; 2];
    fs::File::open(exe)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .with_context(|| format!("{}: reading", exe.display()))?;
    if head == *b"#!" {
        let entry = exe
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| anyhow!("{}: not <entry>/bin/pgpool", exe.display()))?;
        let root = entry.join("root");
        let sbin = root.join("usr/sbin");
        if !is_executable(&sbin.join("pgpool")) {
            bail!(
                "{}: a wrapper whose unpacked binary {} is missing",
                exe.display(),
                sbin.join("pgpool").display()
            );
        }
        return Ok((sbin, Some(root)));
    }
    let real = fs::canonicalize(exe).with_context(|| format!("{}: resolving", exe.display()))?;
    let sbin = real
        .parent()
        .ok_or_else(|| anyhow!("{}: no directory", real.display()))?
        .to_path_buf();
    Ok((sbin, None))
}

/// What pgpool-II's image carries (`pgchaos/pgpool`): the binary at `usr/sbin/pgpool`, the PCP
/// tools and `pg_md5` beside it (the entrypoint hashes the PCP password with it), and the
/// unpacked packages' libraries (libpcp, libmemcached, libhashkit) in
/// `usr/lib/x86_64-linux-gnu`, where the image's `LD_LIBRARY_PATH` looks.
pub fn image_files(exe: &Path) -> Result<crate::pooler::ImageFiles> {
    let (sbin, root) = unpacked(exe)?;
    let mut files = vec![("usr/sbin/pgpool".to_string(), sbin.join("pgpool"))];
    let mut tools: Vec<PathBuf> = fs::read_dir(&sbin)
        .with_context(|| format!("{}: listing", sbin.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with("pcp_") || n == "pg_md5")
        })
        .collect();
    tools.sort();
    for t in tools {
        let name = t.file_name().expect("listed").to_string_lossy().to_string();
        files.push((format!("usr/sbin/{name}"), t));
    }
    let Some(root) = root else {
        return Ok(crate::pooler::ImageFiles {
            files,
            ..Default::default()
        });
    };
    let mut libs = vec![];
    for dir in [root.join("usr/lib"), root.join("usr/lib/x86_64-linux-gnu")] {
        let Ok(list) = fs::read_dir(&dir) else {
            continue;
        };
        for e in list.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if name.contains(".so") && p.is_file() {
                libs.push((format!("usr/lib/x86_64-linux-gnu/{name}"), p));
            }
        }
    }
    libs.sort();
    files.extend(libs);
    Ok(crate::pooler::ImageFiles {
        files,
        library_path: Some(library_path(&root)),
        provided: vec![root],
    })
}

/// The wrapper that runs `root/usr/sbin/<tool>` with its libraries.
fn wrapper(root: &Path, tool: &str) -> String {
    format!(
        "#!/bin/sh\n# generated by pgchaos: {tool} from Debian's packages, with their libraries\n\
         LD_LIBRARY_PATH={libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} exec {bin} \"$@\"\n",
        libs = shell_quote(&library_path(root)),
        bin = shell_quote(&root.join("usr/sbin").join(tool).to_string_lossy()),
    )
}

/// The release a pgpool binary reports (`pgpool-II version 4.3.5 (tamahomeboshi)`, on
/// stderr).
pub fn pgpool_version(path: &Path) -> Result<String> {
    let out = Command::new(path)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", path.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    parse_version(&text).ok_or_else(|| {
        anyhow!(
            "{} --version printed no pgpool-II version: {}",
            path.display(),
            text.trim()
        )
    })
}

pub fn parse_version(text: &str) -> Option<String> {
    let rest = text.split("pgpool-II version ").nth(1)?;
    let v = rest.split_whitespace().next()?;
    check_version_syntax(v).ok()?;
    Some(v.to_string())
}

fn settle(
    opts: &Options,
    declared: &str,
    path: PathBuf,
    actual: String,
    source: String,
) -> Result<PoolerBinary> {
    accept_pooler(
        opts,
        PoolerBinary {
            path,
            version: actual.clone(),
            declared: declared.to_string(),
            source: source.clone(),
            drift: None,
            built_from: None,
            tarball_sha256: None,
        },
        || format!("--strict-versions: pgpool {declared} declared, {actual} obtained ({source})"),
        || format!("pgpool declared {declared}, obtained {actual} ({source})"),
        &[format!("Results are recorded against pgpool-II {actual}.")],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_pgpool_s_banner() {
        assert_eq!(
            parse_version("pgpool-II version 4.3.5 (tamahomeboshi)\n").as_deref(),
            Some("4.3.5")
        );
        assert_eq!(
            parse_version("pgpool-II version 4.6.1 (chirikoboshi)").as_deref(),
            Some("4.6.1")
        );
        assert_eq!(parse_version("pgbouncer 1.25.2"), None);
    }

    #[test]
    fn the_image_carries_the_unpacked_binary_its_pcp_tools_and_libraries_not_the_wrapper() {
        let entry =
            std::env::temp_dir().join(format!("pgchaos-pgpool-image-{}", std::process::id()));
        let _ = fs::remove_dir_all(&entry);
        let root = entry.join("root");
        for d in [
            "bin",
            "root/usr/sbin",
            "root/usr/lib/tmpfiles.d",
            "root/usr/lib/x86_64-linux-gnu",
        ] {
            fs::create_dir_all(entry.join(d)).unwrap();
        }
        let wrapper = entry.join("bin/pgpool");
        fs::write(&wrapper, super::wrapper(&root, "pgpool")).unwrap();
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        for f in [
            "pgpool",
            "pcp_proc_info",
            "pcp_node_count",
            "pg_md5",
            "pgproto",
            "wd_cli",
        ] {
            let p = root.join("usr/sbin").join(f);
            fs::write(&p, b"\x7fELF").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(root.join("usr/lib/libpcp.so.2"), b"x").unwrap();
        fs::write(
            root.join("usr/lib/x86_64-linux-gnu/libmemcached.so.11"),
            b"x",
        )
        .unwrap();
        let got = image_files(&wrapper).unwrap();
        let dsts: Vec<&str> = got.files.iter().map(|(d, _)| d.as_str()).collect();
        assert_eq!(
            dsts,
            [
                "usr/sbin/pgpool",
                "usr/sbin/pcp_node_count",
                "usr/sbin/pcp_proc_info",
                "usr/sbin/pg_md5",
                "usr/lib/x86_64-linux-gnu/libmemcached.so.11",
                "usr/lib/x86_64-linux-gnu/libpcp.so.2",
            ]
        );
        assert_eq!(
            got.files[0].1,
            root.join("usr/sbin/pgpool"),
            "not the wrapper"
        );
        assert_eq!(got.provided, std::slice::from_ref(&root));
        assert_eq!(
            got.library_path.as_deref(),
            Some(library_path(&root).as_str())
        );
        // A binary given as is: its tools beside it, the system's libraries.
        let given = image_files(&root.join("usr/sbin/pgpool")).unwrap();
        assert_eq!(given.files.len(), 4);
        assert!(given.library_path.is_none() && given.provided.is_empty());
        let _ = fs::remove_dir_all(&entry);
    }

    #[test]
    fn the_wrapper_execs_the_unpacked_binary_with_its_libraries() {
        let w = wrapper(Path::new("/c/pgpool/4.3.5/root"), "pgpool");
        assert!(w.starts_with("#!/bin/sh\n"));
        assert!(w.contains("LD_LIBRARY_PATH=/c/pgpool/4.3.5/root/usr/lib:/c/pgpool/4.3.5/root/usr/lib/x86_64-linux-gnu"), "{w}");
        assert!(
            w.contains("exec /c/pgpool/4.3.5/root/usr/sbin/pgpool \"$@\""),
            "{w}"
        );
    }
}
