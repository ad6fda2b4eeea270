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
use anyhow::{Result, anyhow, bail};
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
    /// With --from: the database under test (as `pgchaos import --database`).
    #[arg(long)]
    database: Option<String>,
    /// With --from: the user the application connects as (as `pgchaos import --user`).
    #[arg(long)]
    user: Option<String>,
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
    let chosen = choose(&a, &files, &found)?;
    let (mut outs, tested) = topologies(&a)?;
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
    writable(dir, &outs, a.force)?;
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

/// The shipped profiles to write, by name, each with what chose it: those the dependencies
/// `found` in DIR's dependency `files` detect, and those named with `--with`. None is an
/// error.
fn choose(
    a: &Args,
    files: &[PathBuf],
    found: &[deps::Found],
) -> Result<BTreeMap<String, (Profile, Vec<String>)>> {
    let dir = &a.dir;
    let shipped = profile::shipped()?;
    // Detected profiles, with what detected them.
    let mut chosen: BTreeMap<String, (Profile, Vec<String>)> = BTreeMap::new();
    for p in &shipped {
        let why: Vec<String> = p
            .detected(found)
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
    Ok(chosen)
}

/// The topologies' files: the one imported with `--from` (or the shipped transaction-mode),
/// and direct. Returns them and what the tested one is, for people.
fn topologies(a: &Args) -> Result<(Vec<Out>, String)> {
    let dir = &a.dir;
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
                crate::pooler::Select {
                    database: a.database.as_deref(),
                    user: a.user.as_deref(),
                    drop: &[],
                },
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
    Ok((outs, tested))
}

/// Every file may be written: no symlink on its way ([`no_symlinks`]), and without `force`
/// none there yet.
fn writable(dir: &Path, outs: &[Out], force: bool) -> Result<()> {
    for o in outs {
        no_symlinks(dir, &o.rel)?;
    }
    if !force {
        let there: Vec<String> = outs
            .iter()
            .filter(|o| std::fs::symlink_metadata(dir.join(&o.rel)).is_ok())
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
    Ok(())
}

const MATRIX_SH: &str = r#"#!/bin/sh
# The pgchaos matrix of this repository's tools (pgchaos/profiles) on its PgBouncer settings
# and without a pooler (pgchaos/topologies). Written by `pgchaos init`; add options, e.g.
#   pgchaos/matrix.sh --seeds 1-5 --junit junit.xml
# A justfile recipe can call it:  pgchaos *ARGS: pgchaos/matrix.sh {{ARGS}}
# It fails (exit 1) when a tool shows an unsafe outcome on a topology whose expectation is not
# written in its profile: accept a known one explicitly with --accept CLASS (e.g. ran-twice).
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
        "\nThe gate: a cell whose profile writes no expectation for its topology expects **safe**, so an\nunsafe outcome (ran twice, lost, leaked, stuck, missed) of a tool on your PgBouncer fails the\nmatrix (exit 1, a failed JUnit case). Fix the deployment (each unsafe cell's fix is printed under\nthe table), or accept a known outcome explicitly: `pgchaos/matrix.sh --accept ran-twice`, or a line\n`NAME: ran twice` in the profile's `expected:`.\n\n## Topologies\n\n- {tested}\n- direct (the shipped one: PostgreSQL without a pooler, the baseline)\n\nWhen pgbouncer.ini changes, import it again (`pgchaos import INI --out pgchaos/topologies/NAME.yaml --force`).\n\n## Dependency files read\n"
    );
    for f in files {
        let _ = writeln!(s, "- {}", f.display());
    }
    s
}

/// Refuse a path below DIR with a symlink in it (`pgchaos/`, `.github/`, a workflow file,
/// dangling or not), or whose file is not a regular file: init writes only inside the
/// repository.
fn no_symlinks(dir: &Path, rel: &Path) -> Result<()> {
    let mut p = dir.to_path_buf();
    for c in rel.components() {
        p.push(c);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            return Ok(());
        };
        let last = p == dir.join(rel);
        if m.file_type().is_symlink() {
            bail!(
                "{}: a symbolic link; init writes only inside the repository and follows none (nothing was written)",
                p.display()
            );
        }
        if (last && !m.is_file()) || (!last && !m.is_dir()) {
            bail!(
                "{}: not a {} ({:?}) (nothing was written)",
                p.display(),
                if last { "regular file" } else { "directory" },
                m.file_type()
            );
        }
    }
    Ok(())
}

/// Write every file (a new file under a temporary name, renamed over the old one), each
/// directory reached without following a symlink; on a failure, remove those written.
fn write_all(dir: &Path, outs: &[Out]) -> Result<()> {
    use crate::safe_fs::Dir;
    let mut written: Vec<PathBuf> = vec![];
    let result = (|| -> Result<()> {
        for o in outs {
            let mut at = Dir::open(dir)?;
            for c in o.rel.parent().into_iter().flat_map(Path::components) {
                at = at.sub_or_make(c.as_os_str(), 0o755)?;
            }
            let name = o
                .rel
                .file_name()
                .ok_or_else(|| anyhow!("{}: no file name", o.rel.display()))?;
            let mode = if o.exec { 0o755 } else { 0o644 };
            at.replace(name, o.text.as_bytes(), mode, None)?;
            written.push(dir.join(&o.rel));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    /// A repository `repo` and a directory `outside` beside it, both empty.
    fn sandbox(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
        let d = std::env::temp_dir().join(format!("pgchaos-init-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (repo, outside) = (d.join("repo"), d.join("outside"));
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        (d, repo, outside)
    }

    fn run(repo: &Path, force: bool) -> Result<Exit> {
        init(Args {
            dir: repo.to_path_buf(),
            from: None,
            name: None,
            database: None,
            user: None,
            with: vec!["goose".into()],
            force,
        })
    }

    fn empty(dir: &Path) -> bool {
        std::fs::read_dir(dir).unwrap().next().is_none()
    }

    #[test]
    fn symlinked_components_are_refused_and_nothing_is_written_outside() {
        for (tag, link) in [("pgchaos", "pgchaos"), ("github", ".github")] {
            let (d, repo, outside) = sandbox(tag);
            symlink(&outside, repo.join(link)).unwrap();
            for force in [false, true] {
                let e = format!("{:#}", run(&repo, force).err().expect("refused"));
                assert!(e.contains("symbolic link") && e.contains(link), "{e}");
                assert!(e.contains("nothing was written"), "{e}");
                assert!(empty(&outside), "{link}: written outside the repository");
                assert!(!repo.join("pgchaos/matrix.sh").exists() || link == "pgchaos");
            }
            let _ = std::fs::remove_dir_all(&d);
        }
        // A dangling workflow link: refused, its target not created, with --force too.
        let (d, repo, outside) = sandbox("dangling");
        std::fs::create_dir_all(repo.join(".github/workflows")).unwrap();
        symlink(
            outside.join("made"),
            repo.join(".github/workflows/pgchaos.yml"),
        )
        .unwrap();
        for force in [false, true] {
            let e = format!("{:#}", run(&repo, force).err().expect("refused"));
            assert!(
                e.contains("pgchaos.yml") && e.contains("symbolic link"),
                "{e}"
            );
            assert!(empty(&outside));
            assert!(!repo.join("pgchaos").exists(), "nothing was written");
        }
        // Without plants, the same call writes its files.
        std::fs::remove_file(repo.join(".github/workflows/pgchaos.yml")).unwrap();
        run(&repo, false).unwrap();
        assert!(repo.join(".github/workflows/pgchaos.yml").is_file());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_or_dev_zero_as_go_mod_is_refused_without_a_hang() {
        let (d, repo, _) = sandbox("fifo");
        let fifo =
            std::ffi::CString::new(repo.join("go.mod").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let t = Instant::now();
        let e = format!("{:#}", run(&repo, false).err().expect("refused"));
        assert!(t.elapsed() < Duration::from_secs(5), "no hang");
        assert!(
            e.contains("go.mod") && e.contains("not a regular file"),
            "{e}"
        );
        std::fs::remove_file(repo.join("go.mod")).unwrap();
        symlink("/dev/zero", repo.join("go.mod")).unwrap();
        let e = format!("{:#}", run(&repo, false).err().expect("refused"));
        assert!(e.contains("go.mod") && e.contains("symbolic link"), "{e}");
        assert!(!repo.join("pgchaos").exists(), "nothing was written");
        // A device node itself (root can make one): not a regular file.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::remove_file(repo.join("go.mod")).unwrap();
            // SAFETY: mknod of /dev/zero's device (1, 5) with a valid C string.
            let r =
                unsafe { libc::mknod(fifo.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 5)) };
            assert_eq!(r, 0);
            let t = Instant::now();
            let e = format!("{:#}", run(&repo, false).err().expect("refused"));
            assert!(t.elapsed() < Duration::from_secs(5), "no endless read");
            assert!(e.contains("not a regular file"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
