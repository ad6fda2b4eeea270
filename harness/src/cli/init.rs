//! `pgchaos init [DIR] [--from pgbouncer.ini]`: what a team adds to its repository to run
//! the matrix on its own tools and its own PgBouncer. Writes, under DIR:
//!
//! - `pgchaos/topologies/`: the topology imported from `--from` (as `pgchaos import` writes
//!   it), or the shipped `transaction-mode` without one, and the shipped `direct` as the
//!   baseline (the tool without a pooler);
//! - `pgchaos/profiles/`: the shipped profiles (built into the binary) of the tools found
//!   in DIR's dependency files, each picked by its own `detect:` entries (`profile::deps`
//!   reads the files), plus those named with `--with`;
//! - `pgchaos/matrix.sh`: the matrix of those, from the repository's root;
//! - `pgchaos/README.md`: what was found where, and what to run;
//! - `.github/workflows/pgchaos.yml`: the CI example (examples/ci/), four runners merged.
//!
//! Everything is read and rendered first; an unreadable dependency file, a DIR that does
//! not exist, nothing to write a profile for, or a file already there (without `--force`)
//! is an error and nothing is written. Files are written to a temporary name and renamed;
//! if one fails, those already written are removed.

use super::Exit;
use crate::profile::{self, Profile, deps};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The CI example, the same file as `examples/ci/pgchaos.yml`.
const WORKFLOW: &str = include_str!("../../../examples/ci/pgchaos.yml");

#[derive(clap::Args)]
pub struct Args {
    /// The repository to set up (default: the current directory).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Import this pgbouncer.ini as the topology to test (else the shipped
    /// transaction-mode topology).
    #[arg(long, value_name = "INI")]
    from: Option<PathBuf>,
    /// The imported topology's name (default: the ini file's stem).
    #[arg(long)]
    name: Option<String>,
    /// Also add these shipped profiles, detected or not (an application such as authentik
    /// is named by no dependency file).
    #[arg(long, value_delimiter = ',')]
    with: Vec<String>,
    /// Overwrite files that exist.
    #[arg(long)]
    force: bool,
}

/// A file to write: path relative to DIR, text, executable.
struct Out {
    rel: PathBuf,
    text: String,
    exec: bool,
}

pub fn init(a: Args) -> Result<Exit> {
    let dir = &a.dir;
    if !dir.is_dir() {
        bail!("{}: no such directory (nothing was written)", dir.display());
    }
    let (files, found) = deps::scan(dir).map_err(|e| anyhow!("{e:#} (nothing was written)"))?;
    let shipped = profile::shipped()?;
    // Detected profiles, with what detected them.
    let mut chosen: BTreeMap<String, (Profile, Vec<String>)> = BTreeMap::new();
    for p in &shipped {
        let why: Vec<String> = p
            .detected(&found)
            .iter()
            .map(|f| {
                format!(
                    "{} ({}) in {}",
                    f.package,
                    f.ecosystem.name(),
                    f.file.display()
                )
            })
            .collect();
        if !why.is_empty() {
            chosen.insert(p.name.clone(), (p.clone(), why));
        }
    }
    for w in &a.with {
        let p = shipped.iter().find(|p| &p.name == w).ok_or_else(|| {
            anyhow!(
                "--with {w}: no such profile (profiles: {}) (nothing was written)",
                shipped
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        chosen
            .entry(p.name.clone())
            .or_insert_with(|| (p.clone(), vec!["named with --with".into()]));
    }
    if chosen.is_empty() {
        let detectable: Vec<String> = shipped
            .iter()
            .flat_map(|p| {
                p.detect
                    .iter()
                    .map(|d| format!("{} ({})", d.package, d.ecosystem.name()))
            })
            .collect();
        bail!(
            "{}: no tool with a profile in its dependency files ({}); the profiles detect {}; name one with --with (nothing was written)",
            dir.display(),
            if files.is_empty() {
                "none found: Gemfile.lock, go.mod, package.json, Cargo.toml, requirements*.txt, pyproject.toml, mix.lock, pom.xml".to_string()
            } else {
                format!(
                    "read {}",
                    files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            detectable.join(", ")
        );
    }
    // Topologies: the imported one (or the shipped transaction-mode), and direct.
    let mut outs = vec![];
    let shipped_topology = |name: &str| -> Result<String> {
        profile::embedded::TOPOLOGIES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| anyhow!("internal error: topology {name} is not built in"))
    };
    let topo_dir = PathBuf::from("pgchaos/topologies");
    let tested = match &a.from {
        Some(ini) => {
            let (name, yaml, _, summary) = super::import::render(
                ini,
                a.name.as_deref(),
                |n| dir.join(&topo_dir).join(format!("{n}.yaml")),
                None,
            )
            .map_err(|e| anyhow!("{e:#} (nothing was written)"))?;
            if name == "direct" {
                bail!(
                    "--from {}: the topology would be named `direct`, as the baseline beside it: give --name (nothing was written)",
                    ini.display()
                );
            }
            outs.push(Out {
                rel: topo_dir.join(format!("{name}.yaml")),
                text: yaml,
                exec: false,
            });
            format!("{name} (imported from {}: {summary})", ini.display())
        }
        None => {
            if a.name.is_some() {
                bail!("--name names the topology imported with --from: give --from too");
            }
            outs.push(Out {
                rel: topo_dir.join("transaction-mode.yaml"),
                text: shipped_topology("transaction-mode")?,
                exec: false,
            });
            "transaction-mode (the shipped one: import your pgbouncer.ini with --from)".into()
        }
    };
    outs.push(Out {
        rel: topo_dir.join("direct.yaml"),
        text: shipped_topology("direct")?,
        exec: false,
    });
    for (name, (p, _)) in &chosen {
        outs.push(Out {
            rel: PathBuf::from(format!("pgchaos/profiles/{name}.yaml")),
            text: p.text.clone(),
            exec: false,
        });
    }
    outs.push(Out {
        rel: PathBuf::from("pgchaos/matrix.sh"),
        text: MATRIX_SH.into(),
        exec: true,
    });
    outs.push(Out {
        rel: PathBuf::from("pgchaos/README.md"),
        text: readme(&chosen, &tested, &files),
        exec: false,
    });
    outs.push(Out {
        rel: PathBuf::from(".github/workflows/pgchaos.yml"),
        text: WORKFLOW.into(),
        exec: false,
    });
    if !a.force {
        let there: Vec<String> = outs
            .iter()
            .filter(|o| dir.join(&o.rel).exists())
            .map(|o| o.rel.display().to_string())
            .collect();
        if !there.is_empty() {
            bail!(
                "{}: would overwrite {}: give --force to replace them (nothing was written)",
                dir.display(),
                there.join(", ")
            );
        }
    }
    write_all(dir, &outs)?;
    for o in &outs {
        println!("{}: written", dir.join(&o.rel).display());
    }
    for (name, (_, why)) in &chosen {
        println!("profile {name}: {}", why.join("; "));
    }
    println!(
        "next: commit them, then `pgchaos/matrix.sh` here (the matrix of {} on {}), or push and let .github/workflows/pgchaos.yml run it (set the PGCHAOS_GIT variable)",
        chosen.keys().cloned().collect::<Vec<_>>().join(", "),
        tested
    );
    Ok(Exit::Ok)
}

const MATRIX_SH: &str = r#"#!/bin/sh
# The pgchaos matrix of this repository's tools (pgchaos/profiles) on its PgBouncer settings
# and without a pooler (pgchaos/topologies). Written by `pgchaos init`; add options, e.g.
#   pgchaos/matrix.sh --seeds 1-5 --junit junit.xml
# A justfile recipe can call it:  pgchaos *ARGS: pgchaos/matrix.sh {{ARGS}}
set -eu
cd "$(dirname "$0")/.."
exec pgchaos matrix --profiles pgchaos/profiles --topologies pgchaos/topologies "$@"
"#;

fn readme(
    chosen: &BTreeMap<String, (Profile, Vec<String>)>,
    tested: &str,
    files: &[PathBuf],
) -> String {
    let mut s = String::from(
        "# pgchaos: will our migration tools survive our PgBouncer?\n\nWritten by `pgchaos init`. `pgchaos/matrix.sh` runs every profile below on every topology in\n`pgchaos/topologies/` (three seeds each) and prints the matrix; CI runs the same on four\nrunners (`.github/workflows/pgchaos.yml`) and uploads `matrix.html` and `junit.xml`.\n\n## Profiles\n\n",
    );
    for (name, (p, why)) in chosen {
        let _ = writeln!(s, "- `{name}`: {}. Found: {}.", p.tool, why.join("; "));
    }
    let _ = writeln!(
        s,
        "\nEach profile says, in `expected:`, what each reference topology should show; add a line for\nyour own topology once you have read its first run (a cell without an expectation is not\nfailed).\n\n## Topologies\n\n- {tested}\n- direct (the shipped one: PostgreSQL without a pooler, the baseline)\n\nWhen pgbouncer.ini changes, import it again (`pgchaos import INI --out pgchaos/topologies/NAME.yaml --force`).\n\n## Dependency files read\n"
    );
    for f in files {
        let _ = writeln!(s, "- {}", f.display());
    }
    s
}

/// Write every file (temporary name, then rename); on a failure, remove those written.
fn write_all(dir: &Path, outs: &[Out]) -> Result<()> {
    let mut written: Vec<PathBuf> = vec![];
    let result = (|| -> Result<()> {
        for o in outs {
            let path = dir.join(&o.rel);
            let parent = path.parent().unwrap_or(dir);
            std::fs::create_dir_all(parent)
                .with_context(|| format!("{}: creating the directory", parent.display()))?;
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            std::fs::write(&tmp, &o.text).with_context(|| format!("{}: writing", tmp.display()))?;
            if o.exec {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("{}: chmod 755", tmp.display()))?;
            }
            if let Err(e) = std::fs::rename(&tmp, &path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("{}: writing", path.display()));
            }
            written.push(path);
        }
        Ok(())
    })();
    if result.is_err() {
        for p in &written {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}
