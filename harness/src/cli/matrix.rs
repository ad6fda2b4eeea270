//! `pgchaos matrix`: every profile on every topology, each (profile, topology, seed) one
//! `pgchaos chaos` run of the composed topology in a child process (its own servers, its
//! own report directory), then the cells classed from each run's results and history.
//! Writes `reports/matrix/<stamp>/` (matrix.md, .json, .html, the composed topologies and
//! the runs), complete or absent; `--junit` and `--update-readme` after it.

use super::Exit;
use crate::profile::{self, Compose, Profile, RunFacts};
use crate::report::RunDir;
use crate::report::junit::junit_xml;
use crate::report::matrix::{Cell, CellRun, Matrix, ProfileRow};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Profiles, by name (profiles/NAME.yaml) or path; comma-separated or repeated
    /// (default: every file in profiles/).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// Topologies, by name or path (default: direct, session-mode, transaction-mode,
    /// transaction-mode-xact, transaction-mode-reset-always).
    #[arg(long, value_delimiter = ',')]
    topologies: Vec<String>,
    /// Replicas of each profile (default: the profile's own, 5).
    #[arg(long)]
    replicas: Option<u32>,
    /// Seeds: `1-3`, or `1,5,9` (one run each).
    #[arg(long, default_value = "1-3")]
    seeds: String,
    /// Report root (default: reports/; the matrix goes to <out>/matrix/<stamp>/).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Shrink replays per violated invariant in each run.
    #[arg(long, default_value_t = 6)]
    max_shrink_runs: u32,
    /// Also write the cells as JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Replace the table between `<!-- matrix:begin -->` and `<!-- matrix:end -->` in
    /// this file (the README) with the new one.
    #[arg(long)]
    update_readme: Option<PathBuf>,
}

/// `1-3` or `1,5,9`.
fn parse_seeds(s: &str) -> Result<Vec<u64>> {
    let bad = || anyhow!("--seeds {s:?}: expected a range like `1-3` or a list like `1,5,9`");
    let s = s.trim();
    if let Some((a, b)) = s.split_once('-') {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b || b - a >= 100 {
            return Err(bad());
        }
        return Ok((a..=b).collect());
    }
    let seeds: Vec<u64> = s
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    if seeds.is_empty() {
        return Err(bad());
    }
    Ok(seeds)
}

pub async fn matrix(a: Args) -> Result<Exit> {
    let t0 = Instant::now();
    let seeds = parse_seeds(&a.seeds)?;
    if a.replicas == Some(0) {
        bail!("--replicas must be at least 1");
    }
    // Everything is read and composed before anything runs: bad input fails first.
    let names = if a.profiles.is_empty() {
        profile::all()?
    } else {
        a.profiles.clone()
    };
    let profiles: Vec<Profile> = names
        .iter()
        .map(|n| Profile::load(&profile::resolve(n)))
        .collect::<Result<_>>()?;
    let topo_args: Vec<String> = if a.topologies.is_empty() {
        profile::DEFAULT_TOPOLOGIES
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        a.topologies.clone()
    };
    let mut bases = vec![];
    for t in &topo_args {
        let topo = super::load(t)?;
        bases.push(topo);
    }
    let compose = Compose {
        replicas: a.replicas,
        seed: seeds[0],
        cases: 1,
        max_shrink_runs: a.max_shrink_runs,
        ..Compose::default()
    };
    let mut composed = vec![];
    for p in &profiles {
        for base in &bases {
            let (text, topo) = p.compose(&base.text, &base.name, &compose)?;
            composed.push((p, base.name.clone(), text, topo));
        }
    }
    let exe = std::env::current_exe().context("finding the pgchaos binary to run cells")?;
    let dir = RunDir::create(&a.out, "matrix", seeds[0])?;
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("topologies"))
        .with_context(|| format!("{}: creating", root.display()))?;
    eprintln!(
        "pgchaos matrix: {} profiles x {} topologies x {} seeds = {} runs",
        profiles.len(),
        bases.len(),
        seeds.len(),
        composed.len() * seeds.len()
    );
    let mut cells = vec![];
    let mut versions = None;
    for (p, tname, text, topo) in &composed {
        let file = format!("topologies/{}.yaml", topo.name);
        let path = root.join(&file);
        std::fs::write(&path, text).with_context(|| format!("{}: writing", path.display()))?;
        let mut cell = Cell {
            profile: p.name.clone(),
            topology: tname.clone(),
            topology_file: file,
            expected: p.expected.get(tname).copied(),
            worst: None,
            count: 0,
            runs: vec![],
        };
        for &seed in &seeds {
            let t_run = Instant::now();
            let run = match run_one(&exe, &path, seed, &root.join("runs"), a.max_shrink_runs).await
            {
                Ok(run_dir) => {
                    let rel = run_dir
                        .strip_prefix(&root)
                        .unwrap_or(&run_dir)
                        .display()
                        .to_string();
                    // The versions line, from a pooled run when there is one.
                    if !versions.as_deref().is_some_and(|v: &str| v.contains(" + "))
                        && let Ok(r) = crate::report::Results::load(&run_dir)
                    {
                        versions = Some(crate::report::html::versions_line(&r));
                    }
                    let facts = crate::report::matrix::run_facts(&run_dir)?;
                    let classes = facts.classes(p.waits_forever);
                    let worst = classes.first().copied();
                    let evidence = worst.and_then(|w| {
                        w.invariants()
                            .iter()
                            .map(|inv| format!("failures/{inv}/case.yaml"))
                            .find(|f| run_dir.join(f).is_file())
                            .map(|f| format!("{rel}/{f}"))
                    });
                    CellRun {
                        seed,
                        dir: Some(rel),
                        classes,
                        facts,
                        evidence,
                        error: None,
                        run_ms: t_run.elapsed().as_millis() as u64,
                    }
                }
                Err(e) => CellRun {
                    seed,
                    dir: None,
                    classes: Default::default(),
                    facts: RunFacts::default(),
                    evidence: None,
                    error: Some(format!("{e:#}")),
                    run_ms: t_run.elapsed().as_millis() as u64,
                },
            };
            let names: Vec<&str> = run.classes.iter().map(|c| c.name()).collect();
            eprintln!(
                "pgchaos matrix: {} on {} seed {seed}: {} ({:.1} s)",
                p.name,
                tname,
                run.error.clone().unwrap_or_else(|| names.join(", ")),
                t_run.elapsed().as_secs_f64()
            );
            cell.runs.push(run);
        }
        cell.fold();
        cells.push(cell);
    }
    let m = Matrix {
        versions: versions.unwrap_or_else(|| "versions unknown (no run completed)".into()),
        seeds: seeds.clone(),
        replicas: a.replicas,
        profiles: profiles
            .iter()
            .map(|p| ProfileRow {
                name: p.name.clone(),
                tool: p.tool.clone(),
                file: pathdiff(&p.path, Path::new(".")),
            })
            .collect(),
        topologies: bases.iter().map(|b| b.name.clone()).collect(),
        cells,
        run_ms: t0.elapsed().as_millis() as u64,
    };
    let write = |name: &str, text: String| {
        let p = root.join(name);
        std::fs::write(&p, text).with_context(|| format!("{}: writing", p.display()))
    };
    write("matrix.json", serde_json::to_string_pretty(&m)?)?;
    write("matrix.md", m.markdown())?;
    write("matrix.html", m.html())?;
    let final_dir = dir.commit()?;
    if let Some(j) = &a.junit {
        let cases = m.junit(|rel| std::fs::read_to_string(final_dir.join(rel)).ok());
        std::fs::write(j, junit_xml("pgchaos matrix", &cases))
            .with_context(|| format!("--junit {}: writing", j.display()))?;
    }
    if let Some(readme) = &a.update_readme {
        update_readme(readme, &readme_block(&m))?;
    }
    println!("{}", m.table(None));
    println!("matrix: {}", final_dir.join("matrix.md").display());
    println!("html: {}", final_dir.join("matrix.html").display());
    let differ: Vec<String> = m
        .differing()
        .map(|c| format!("{} on {}", c.profile, c.topology))
        .collect();
    if m.cells.iter().any(Cell::pg_violated) {
        println!(
            "!!! a pg.* invariant was violated in a cell: PostgreSQL, the pooler or pgchaos is wrong. Read its report."
        );
    }
    if differ.is_empty() {
        println!("every cell is what its profile expected: PASS");
        Ok(Exit::Ok)
    } else {
        println!(
            "{} cells differ from what their profiles expected: {}",
            differ.len(),
            differ.join("; ")
        );
        Ok(Exit::Mismatch)
    }
}

/// The longest a cell's run may take before it is taken for hung.
const CHILD_BOUND: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// One cell's run for one seed: `pgchaos chaos` in a child process. The child dies with
/// this process (parent-death signal; killed if this future is dropped), and stops its
/// own servers on the way out.
async fn run_one(exe: &Path, topo: &Path, seed: u64, out: &Path, shrink: u32) -> Result<PathBuf> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("chaos")
        .arg(topo)
        .args(["--seed", &seed.to_string(), "--quiet"])
        .args(["--max-shrink-runs", &shrink.to_string()])
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    // A run ends at its `time_limit` (5 minutes) plus shrinking; a child still running
    // long after that is hung, and is killed (dropped) rather than waited for forever.
    let output = tokio::time::timeout(CHILD_BOUND, cmd.output())
        .await
        .map_err(|_| {
            anyhow!(
                "`pgchaos chaos {}` still running after {} minutes: killed",
                topo.display(),
                CHILD_BOUND.as_secs() / 60
            )
        })?
        .with_context(|| format!("running {} chaos {}", exe.display(), topo.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    match output.status.code() {
        Some(0 | 1) => {
            let report = stdout
                .lines()
                .find_map(|l| l.strip_prefix("report: "))
                .ok_or_else(|| anyhow!("`pgchaos chaos` printed no report path:\n{stdout}"))?;
            Ok(Path::new(report.trim())
                .parent()
                .unwrap_or(Path::new("."))
                .to_path_buf())
        }
        code => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            bail!(
                "`pgchaos chaos {}` exited with {}: {}",
                topo.display(),
                code.map(|c| c.to_string())
                    .unwrap_or_else(|| "a signal".into()),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}

/// `path` relative to `base` when it is under it (else as it is).
fn pathdiff(path: &Path, base: &Path) -> String {
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&base)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// The README's block: how it was made, then the table (no links: runs are not committed).
fn readme_block(m: &Matrix) -> String {
    format!(
        "<!-- generated by `just readme-matrix` (pgchaos matrix --update-readme README.md); do not edit -->\n\n{}; seeds {}; {} s.\n\n{}",
        m.versions,
        crate::report::matrix::seeds_text(&m.seeds),
        m.run_ms / 1000,
        m.table(None)
    )
}

const BEGIN: &str = "<!-- matrix:begin -->";
const END: &str = "<!-- matrix:end -->";

/// Replace the marked block of `path` with `table` (written to a temporary file, then
/// renamed: the README is never half-written).
fn update_readme(path: &Path, table: &str) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--update-readme {}: cannot read", path.display()))?;
    let new = replace_block(&text, table).ok_or_else(|| {
        anyhow!(
            "--update-readme {}: no `{BEGIN}` ... `{END}` block to replace",
            path.display()
        )
    })?;
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new).with_context(|| format!("{}: writing", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}: replacing", path.display()))
}

fn replace_block(text: &str, table: &str) -> Option<String> {
    let b = text.find(BEGIN)?;
    let e = text[b..].find(END)? + b;
    Some(format!("{}{BEGIN}\n{}{}", &text[..b], table, &text[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_as_ranges_or_lists() {
        assert_eq!(parse_seeds("1-3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("1, 5,9").unwrap(), vec![1, 5, 9]);
        assert_eq!(parse_seeds("7").unwrap(), vec![7]);
        for bad in ["3-1", "x", "1-", "", "1-500"] {
            let e = parse_seeds(bad).unwrap_err().to_string();
            assert!(e.contains("--seeds"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_readme_block_is_replaced_and_nothing_else() {
        let t = "intro\n<!-- matrix:begin -->\nold\n<!-- matrix:end -->\nafter\n";
        assert_eq!(
            replace_block(t, "| new |\n").unwrap(),
            "intro\n<!-- matrix:begin -->\n| new |\n<!-- matrix:end -->\nafter\n"
        );
        assert_eq!(replace_block("no block", "x"), None);
    }
}
