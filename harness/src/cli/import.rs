//! `pgchaos import path/to/pgbouncer.ini|pgpool.conf [--name NAME] [--out FILE]`: a topology with the
//! pooling settings of a team's real pooler configuration, so pgchaos runs against the
//! configuration they deploy. Which pooler's file it is, and how it maps onto a topology, is
//! the pooler's (`pooler/<name>/import.rs`, found through `pooler::KINDS`); here: the name,
//! the target, the check that the output loads ([`Topology::parse`]), and the write (temp
//! file beside it, renamed; an existing file only with `--force`). Bad input is an error at
//! `path:line:column` and nothing is written.

use super::Exit;
use crate::topology::{self, Topology};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The pooler's configuration file to import (a pgbouncer.ini or a pgpool.conf).
    ini: PathBuf,
    /// The topology's name, `[a-z0-9-]` (default: the ini file's stem, sanitised).
    #[arg(long)]
    name: Option<String>,
    /// Where to write the topology (default: topologies/NAME.yaml).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The pooler release the topology declares (settings newer than it are refused;
    /// default: the pooler's own, PgBouncer 1.25.2, pgpool-II 4.3.5).
    #[arg(long, alias = "pgbouncer-version")]
    pooler_version: Option<String>,
    /// The database under test (a pgbouncer.ini's `[databases]` name; `*` answers for a name
    /// not listed): its pool_mode, pool_size and other overrides become the topology's.
    /// Needed when the ini pools its databases differently.
    #[arg(long)]
    database: Option<String>,
    /// The user your application connects as: its `[users]` overrides (pool_mode, pool_size,
    /// timeouts) apply over the database's. Needed when `[users]` changes pooling.
    #[arg(long)]
    user: Option<String>,
    /// Semantic keys to import without, acknowledged (`connect_query`): refused otherwise.
    #[arg(long, value_delimiter = ',', value_name = "KEY,...")]
    drop: Vec<String>,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    force: bool,
}

/// A pooler's configuration file as a topology: its name (`name`, else the file's stem,
/// sanitised), the YAML text and the topology it parses to (checked: a text that does not
/// load is a bug here), and the importer's one-line summary. Which pooler's file it is, and
/// how it maps, is the pooler's (`pooler::KINDS`). `target` is where it will be written (the
/// topology's recorded source); `version`: the pooler release to declare (its default when
/// `None`).
pub(super) fn render(
    ini: &Path,
    name: Option<&str>,
    target: impl Fn(&str) -> PathBuf,
    version: Option<&str>,
    select: crate::pooler::Select,
) -> Result<(String, String, Topology, String)> {
    let src =
        std::fs::read_to_string(ini).with_context(|| format!("{}: cannot read", ini.display()))?;
    let name = match name {
        Some(n) if is_topology_name(n) => n.to_string(),
        Some(n) => bail!("--name {n:?}: expected 1 to 64 characters of a-z, 0-9 and -"),
        None => sanitise_name(
            &ini.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    };
    let target = target(&name);
    let shown = std::fs::canonicalize(ini).unwrap_or_else(|_| ini.to_path_buf());
    let stamp = crate::vocab::backend::format_timestamptz(now_us());
    let Some(kind) = crate::pooler::KINDS.iter().find(|k| k.recognises(&src)) else {
        bail!(
            "{}: not a configuration file of a pooler pgchaos knows ({})",
            ini.display(),
            crate::pooler::KINDS
                .iter()
                .map(|k| k.file_kind())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let imported = kind.import(
        &src,
        ini,
        &crate::pooler::Origin {
            ini: &shown,
            when: &stamp,
            name: &name,
            version,
            select,
        },
    )?;
    // Every key the topology does not carry, with its reason, where the user sees it.
    for d in &imported.dropped {
        eprintln!("pgchaos import: {d}");
    }
    // The written file must load: anything else is a bug here, not the user's input.
    let topo = Topology::parse(&imported.yaml, &target, &crate::catalog()).map_err(|e| {
        anyhow!(
            "internal error: the generated topology does not load (a bug in pgchaos import):\n{e}"
        )
    })?;
    Ok((name, imported.yaml, topo, imported.summary))
}

pub fn import(a: Args) -> Result<Exit> {
    let out = a.out.clone();
    let (_, yaml, topo, summary) = render(
        &a.ini,
        a.name.as_deref(),
        |name| match &out {
            Some(p) => p.clone(),
            None => topology::resolve("direct")
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("topologies"))
                .join(format!("{name}.yaml")),
        },
        a.pooler_version.as_deref(),
        crate::pooler::Select {
            database: a.database.as_deref(),
            user: a.user.as_deref(),
            drop: &a.drop,
        },
    )?;
    let target = topo.source.clone();
    write_new(&target, &yaml, a.force)?;
    println!("{}: written ({}): {summary}", target.display(), topo.name);
    println!(
        "next: pgchaos chaos {}, then fill `expect:` from the verdict table",
        target.display()
    );
    Ok(Exit::Ok)
}

/// Now, to the second, in microseconds since the epoch.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64 * 1_000_000)
        .unwrap_or(0)
}

fn is_topology_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

/// An ini file's stem as a topology name: lower case, runs of other characters become one
/// `-`, at most 64 characters; `imported` if nothing is left.
fn sanitise_name(stem: &str) -> String {
    let mut out = String::new();
    for c in stem.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(64);
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "imported".into()
    } else {
        out
    }
}

/// Writes `text` to `target` through a temp file beside it. Without `force` an existing
/// `target` is refused (checked again at the moment of linking, so a race cannot clobber it).
fn write_new(target: &Path, text: &str, force: bool) -> Result<()> {
    if !force && target.exists() {
        bail!(
            "{}: already exists; pass --force to overwrite it",
            target.display()
        );
    }
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file = target
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file name", target.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        file.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, text).with_context(|| format!("{}: cannot write", tmp.display()))?;
    let placed = if force {
        std::fs::rename(&tmp, target)
    } else {
        match std::fs::hard_link(&tmp, target) {
            Ok(()) => std::fs::remove_file(&tmp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&tmp);
                bail!(
                    "{}: already exists; pass --force to overwrite it",
                    target.display()
                );
            }
            // No hard links here (some filesystems): fall back to a rename.
            Err(_) => std::fs::rename(&tmp, target),
        }
    };
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("{}: cannot write", target.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised() {
        assert_eq!(sanitise_name("pgbouncer"), "pgbouncer");
        assert_eq!(sanitise_name("Orders_PROD.v2"), "orders-prod-v2");
        assert_eq!(sanitise_name("__x__"), "x");
        assert_eq!(sanitise_name("___"), "imported");
        assert_eq!(sanitise_name(&"a".repeat(80)).len(), 64);
        assert!(is_topology_name("orders-prod"));
        assert!(!is_topology_name("Orders"));
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgchaos-import-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn args(ini: &Path, out: &Path, force: bool) -> Args {
        Args {
            ini: ini.to_path_buf(),
            name: None,
            out: Some(out.to_path_buf()),
            pooler_version: None,
            database: None,
            user: None,
            drop: vec![],
            force,
        }
    }

    #[test]
    fn writes_only_valid_output_and_never_overwrites_without_force() {
        let d = scratch("write");
        let ini = d.join("Orders_Prod.ini");
        let out = d.join("out.yaml");
        std::fs::write(
            &ini,
            "[databases]\norders = host=10.0.3.17\n[pgbouncer]\npool_mode = transaction\ndefault_pool_size = 3\n",
        )
        .unwrap();
        import(args(&ini, &out, false)).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let t = Topology::load(&out, &crate::catalog()).unwrap();
        assert_eq!(t.name, "orders-prod");
        // Exists: refused, untouched, no temp file left.
        std::fs::write(&out, "keep me\n").unwrap();
        let e = import(args(&ini, &out, false)).err().unwrap();
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
        // --force replaces it.
        import(args(&ini, &out, true)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out)
                .unwrap()
                .lines()
                .skip(1)
                .collect::<Vec<_>>(),
            text.lines().skip(1).collect::<Vec<_>>()
        );
        // Bad input: nothing written.
        let bad = d.join("bad.ini");
        std::fs::write(&bad, "[pgbouncer]\npool_mode = transction\n").unwrap();
        let out2 = d.join("out2.yaml");
        assert!(import(args(&bad, &out2, false)).is_err());
        assert!(!out2.exists());
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "temp files left: {left:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
