//! `pgchaos matrix`: every profile on every topology. Each cell (profile, topology) is one
//! child process, `pgchaos chaos COMPOSED --seeds ...` (one launch of its servers, one run
//! and report directory per seed, each violated invariant shrunk once per cell and only when
//! it is a class's evidence), cells side by side (`--jobs`); then each run is classed from
//! its results and history. `--partition K/N` runs a share of the cells (by count, as
//! cargo-nextest's `count:`), `merge` (cli/merge.rs) puts partitions together. Writes
//! `reports/matrix/<stamp>/` or `--dir` (matrix.json, .md, .html, junit.xml, the composed
//! topologies and the runs), complete or absent; `--junit` and `--update-readme` after it.

use super::Exit;
use crate::profile::{self, Class, Compose, Profile, RunFacts};
use crate::report::RunDir;
use crate::report::junit::junit_xml;
use crate::report::matrix::{Cell, CellRun, Matrix, PlannedCell, ProfileRow, fingerprint};
use crate::topology::limits::{MAX_TIME_SCALE, MIN_TIME_SCALE};
use crate::vocab::{Partition, parse_seeds};
use anyhow::{Context, Result, anyhow, bail};
use futures_util::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
    /// Profiles, by name (profiles/NAME.yaml), path, or a directory of them; comma-separated
    /// or repeated (default: every file in profiles/).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// Topologies, by name, path, or a directory of them (default: direct, session-mode,
    /// transaction-mode, transaction-mode-xact, transaction-mode-reset-always).
    #[arg(long, value_delimiter = ',')]
    topologies: Vec<String>,
    /// Replicas of each profile (default: the profile's own, 5).
    #[arg(long)]
    replicas: Option<u32>,
    /// Seeds: `1-3`, or `1,5,9` (one run each; a cell's runs share its servers).
    #[arg(long, default_value = "1-3")]
    seeds: String,
    /// Report root (default: reports/; the matrix goes to <out>/matrix/<stamp>/).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Write the matrix into exactly this directory instead (it must not exist, or be
    /// empty): what CI uploads.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Shrink candidates per violated invariant in a run.
    #[arg(long, default_value_t = 6)]
    max_shrink_runs: u32,
    /// `once`: a cell's runs shrink each violated invariant in the first seed's run that
    /// violates it, later seeds keep their failing case as it ran (its own evidence);
    /// `every`: each run shrinks its own failures.
    #[arg(long, default_value = "once", value_name = "once|every")]
    shrink: String,
    /// Cells run at once, each in its own child process with its own servers (default: the
    /// CPUs this process may use).
    #[arg(long, short = 'j')]
    jobs: Option<u32>,
    /// Multiply every duration of the profiles' scripts (sleeps, migrations, lock_timeout)
    /// by this: 0.5 runs each protocol twice as fast (the composed topologies say so,
    /// `run.time_scale`). Default 1: as the profiles are written.
    #[arg(long, value_name = "F")]
    time_scale: Option<f64>,
    /// Run only partition K of N of the cells (by count, in matrix order: cell i goes to
    /// partition i mod N + 1); `pgchaos merge` combines the partitions' directories.
    #[arg(long, value_name = "K/N")]
    partition: Option<String>,
    /// Also write the cells as JUnit XML here (the matrix directory has `junit.xml` too).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Outcome classes that fail no cell, comma-separated (`ran-twice,leaked` or `ran
    /// twice`): a known outcome accepted explicitly. A cell whose profile writes no
    /// expectation for its topology expects safe, and any other unsafe class fails it.
    #[arg(long, value_delimiter = ',', value_name = "CLASS,...")]
    accept: Vec<String>,
    /// A cell that did not reach the class its profile expects (only safer ones showed)
    /// fails; without it the cell is reported "not reached" and passes.
    #[arg(long)]
    require_expected: bool,
    /// Replace the table between `<!-- matrix:begin -->` and `<!-- matrix:end -->` in
    /// this file (the README) with the new one.
    #[arg(long)]
    update_readme: Option<PathBuf>,
    /// No progress bar: a line per finished cell, as when stderr is not a terminal.
    #[arg(long)]
    quiet: bool,
}

/// A cell to run: a profile composed with a topology.
struct Planned<'p> {
    profile: &'p Profile,
    topology: String,
    /// The composed topology's file, relative to the matrix directory.
    file: String,
    text: String,
    fingerprint: String,
}

/// `--profiles`: names, paths and directories (every `*.yaml` in it, by name).
fn profile_paths(args: &[String]) -> Result<Vec<PathBuf>> {
    if args.is_empty() {
        return Ok(profile::all()?
            .iter()
            .map(|n| profile::resolve(n))
            .collect());
    }
    let mut out = vec![];
    for a in args {
        let p = Path::new(a);
        if p.is_dir() {
            let mut found = vec![];
            for e in std::fs::read_dir(p).with_context(|| format!("--profiles {a}: reading"))? {
                let f = e
                    .with_context(|| format!("--profiles {a}: reading"))?
                    .path();
                if f.extension().is_some_and(|x| x == "yaml") {
                    found.push(f);
                }
            }
            if found.is_empty() {
                bail!("--profiles {a}: the directory has no profiles (*.yaml)");
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(profile::resolve(a));
        }
    }
    Ok(out)
}

pub async fn matrix(a: Args) -> Result<Exit> {
    let t0 = Instant::now();
    let Settings {
        seeds,
        shrink_once,
        time_scale_milli,
        accept,
        partition,
        jobs,
    } = settings(&a)?;
    // Everything is read and composed before anything runs: bad input fails first.
    let profiles = load_profiles(&a.profiles)?;
    let bases = load_topologies(&a.topologies)?;
    let compose = Compose {
        replicas: a.replicas,
        seed: seeds[0],
        cases: 1,
        max_shrink_runs: a.max_shrink_runs,
        time_scale_milli,
        ..Compose::default()
    };
    let plan = plan_cells(&profiles, &bases, &compose)?;
    let planned: Vec<PlannedCell> = plan
        .iter()
        .map(|c| PlannedCell {
            profile: c.profile.name.clone(),
            topology: c.topology.clone(),
            fingerprint: c.fingerprint.clone(),
        })
        .collect();
    let total = plan.len();
    let mine: Vec<Planned> = match partition {
        Some(p) => p.pick(plan),
        None => plan,
    };
    let exe = std::env::current_exe().context("finding the pgchaos binary to run cells")?;
    let out = match &a.dir {
        Some(d) => OutDir::exact(d)?,
        None => OutDir::Stamped(RunDir::create(&a.out, "matrix", seeds[0])?),
    };
    let root = out.path().to_path_buf();
    std::fs::create_dir_all(root.join("topologies"))
        .with_context(|| format!("{}: creating", root.display()))?;
    for c in &mine {
        let path = root.join(&c.file);
        std::fs::write(&path, &c.text).with_context(|| format!("{}: writing", path.display()))?;
    }
    eprintln!(
        "pgchaos matrix: {} profiles x {} topologies x {} seeds = {} runs{}; {jobs} cells at a time{}",
        profiles.len(),
        bases.len(),
        seeds.len(),
        total * seeds.len(),
        match partition {
            Some(p) => format!(
                "; partition {p}: {} cells, {} runs",
                mine.len(),
                mine.len() * seeds.len()
            ),
            None => String::new(),
        },
        if time_scale_milli == 1000 {
            String::new()
        } else {
            format!("; time scale {}", f64::from(time_scale_milli) / 1000.0)
        }
    );
    let opts = CellOpts {
        exe: &exe,
        root: &root,
        seeds: &seeds,
        max_shrink_runs: a.max_shrink_runs,
        shrink_once,
        accept: &accept,
        require_expected: a.require_expected,
    };
    let cells = run_cells(&opts, &mine, &bases, jobs, a.quiet).await;
    let (versions, servers, drift) = versions_line(&root, &cells);
    if !drift.is_empty() {
        eprintln!(
            "pgchaos matrix: DRIFT: {}",
            drift.iter().cloned().collect::<Vec<_>>().join("; ")
        );
    }
    let m = Matrix {
        pgchaos: env!("CARGO_PKG_VERSION").into(),
        versions,
        servers,
        drift,
        seeds: seeds.clone(),
        replicas: a.replicas,
        time_scale_milli,
        shrink: if shrink_once { "once" } else { "every" }.into(),
        max_shrink_runs: a.max_shrink_runs,
        profiles: profiles
            .iter()
            .map(|p| ProfileRow {
                name: p.name.clone(),
                tool: p.tool.clone(),
                file: pathdiff(&p.path, Path::new(".")),
                fix: p.fix.clone(),
            })
            .collect(),
        topologies: bases.iter().map(|b| b.name.clone()).collect(),
        plan: planned,
        partition,
        merged: 0,
        jobs,
        accept: accept.clone(),
        require_expected: a.require_expected,
        cells,
        run_ms: t0.elapsed().as_millis() as u64,
    };
    write_matrix(&root, &m)?;
    let final_dir = out.commit()?;
    finish(
        &m,
        &final_dir,
        a.junit.as_deref(),
        a.update_readme.as_deref(),
    )
}

/// The options `matrix` checks before it reads anything.
struct Settings {
    seeds: Vec<u64>,
    shrink_once: bool,
    time_scale_milli: u32,
    accept: BTreeSet<Class>,
    partition: Option<Partition>,
    jobs: u32,
}

/// Check the options that need no file: seeds, replicas, shrink, time scale, accepted
/// classes, partition and jobs.
fn settings(a: &Args) -> Result<Settings> {
    let seeds = parse_seeds(&a.seeds)?;
    if a.replicas == Some(0) {
        bail!("--replicas must be at least 1");
    }
    let shrink_once = match a.shrink.trim() {
        "once" => true,
        "every" => false,
        s => bail!("--shrink {s:?}: expected `once` or `every`"),
    };
    let time_scale_milli = match a.time_scale {
        None => 1000,
        Some(f) if (MIN_TIME_SCALE..=MAX_TIME_SCALE).contains(&f) => (f * 1000.0).round() as u32,
        Some(f) => {
            bail!("--time-scale {f}: expected a number from {MIN_TIME_SCALE} to {MAX_TIME_SCALE}")
        }
    };
    let accept = parse_accept(&a.accept)?;
    let partition = a.partition.as_deref().map(Partition::parse).transpose()?;
    if partition.is_some() && a.update_readme.is_some() {
        bail!(
            "--update-readme with --partition: a partition is not the whole matrix; merge the partitions, or run the matrix whole"
        );
    }
    let jobs = match a.jobs {
        Some(0) => bail!("--jobs must be at least 1"),
        Some(j) => j,
        None => std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    };
    Ok(Settings {
        seeds,
        shrink_once,
        time_scale_milli,
        accept,
        partition,
        jobs,
    })
}

/// `--profiles`, loaded; two with one name are refused.
fn load_profiles(args: &[String]) -> Result<Vec<Profile>> {
    let profiles: Vec<Profile> = profile_paths(args)?
        .iter()
        .map(|p| Profile::load(p))
        .collect::<Result<_>>()?;
    let mut names = BTreeSet::new();
    for p in &profiles {
        if !names.insert(&p.name) {
            bail!(
                "--profiles: two profiles are named {} ({})",
                p.name,
                p.path.display()
            );
        }
    }
    Ok(profiles)
}

/// `--topologies`: names, paths and directories (every `*.yaml` in it, by name), loaded;
/// two with one name are refused.
fn load_topologies(args: &[String]) -> Result<Vec<crate::topology::Topology>> {
    let topo_args: Vec<String> = if args.is_empty() {
        profile::DEFAULT_TOPOLOGIES
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        args.to_vec()
    };
    let mut topo_files = vec![];
    for t in &topo_args {
        let p = Path::new(t);
        if p.is_dir() {
            let mut found = vec![];
            for e in std::fs::read_dir(p).with_context(|| format!("--topologies {t}: reading"))? {
                let f = e
                    .with_context(|| format!("--topologies {t}: reading"))?
                    .path();
                if f.extension().is_some_and(|x| x == "yaml") {
                    found.push(f.display().to_string());
                }
            }
            if found.is_empty() {
                bail!("--topologies {t}: the directory has no topologies (*.yaml)");
            }
            found.sort();
            topo_files.extend(found);
        } else {
            topo_files.push(t.clone());
        }
    }
    let mut bases: Vec<crate::topology::Topology> = vec![];
    for t in &topo_files {
        let topo = super::load(t)?;
        if bases.iter().any(|b| b.name == topo.name) {
            bail!("--topologies: {} is named twice", topo.name);
        }
        bases.push(topo);
    }
    Ok(bases)
}

/// The cells: each profile composed with each topology, in that order.
fn plan_cells<'p>(
    profiles: &'p [Profile],
    bases: &[crate::topology::Topology],
    compose: &Compose,
) -> Result<Vec<Planned<'p>>> {
    let mut plan = vec![];
    for p in profiles {
        for base in bases {
            let (text, topo) = p.compose(&base.text, &base.name, compose)?;
            plan.push(Planned {
                profile: p,
                topology: base.name.clone(),
                file: format!("topologies/{}.yaml", topo.name),
                fingerprint: fingerprint(&[&p.text, &base.text]),
                text,
            });
        }
    }
    Ok(plan)
}

/// Run the cells, `jobs` at a time (those of external topologies one at a time), each
/// reported as it finishes; returns them in plan order.
async fn run_cells(
    opts: &CellOpts<'_>,
    mine: &[Planned<'_>],
    bases: &[crate::topology::Topology],
    jobs: u32,
    quiet: bool,
) -> Vec<Cell> {
    let n_mine = mine.len();
    let done = std::cell::Cell::new(0usize);
    // A deployment pgchaos did not start takes one run at a time (its lease,
    // launch/owned.rs): the cells of external topologies run in turn, the others beside them.
    let external: BTreeSet<&str> = bases
        .iter()
        .filter(|b| b.launcher == crate::topology::LauncherKind::External)
        .map(|b| b.name.as_str())
        .collect();
    let one_deployment_run = tokio::sync::Mutex::new(());
    if jobs > 1 && !external.is_empty() {
        eprintln!(
            "pgchaos matrix: the cells of {} run one at a time (a deployment takes one run at a time)",
            external.iter().copied().collect::<Vec<_>>().join(", ")
        );
    }
    let progress = crate::report::terminal::MatrixProgress::new(n_mine, quiet);
    let mut cells: Vec<(usize, Cell)> = futures_util::stream::iter(mine.iter().enumerate())
        .map(|(i, c)| {
            let done = &done;
            let external = &external;
            let one_deployment_run = &one_deployment_run;
            let progress = &progress;
            async move {
                let _turn = match external.contains(c.topology.as_str()) {
                    true => Some(one_deployment_run.lock().await),
                    false => None,
                };
                let name = format!("{} on {}", c.profile.name, c.topology);
                progress.start(&name);
                let t_cell = Instant::now();
                let cell = run_cell(opts, c).await;
                done.set(done.get() + 1);
                let seeds: Vec<String> = cell
                    .runs
                    .iter()
                    .map(|r| {
                        let names: Vec<&str> = r.classes.iter().map(|c| c.name()).collect();
                        format!(
                            "{} {}",
                            r.seed,
                            r.error.clone().unwrap_or_else(|| names.join(", "))
                        )
                    })
                    .collect();
                let line = format!(
                    "pgchaos matrix: [{}/{n_mine}] {name}: seeds {} ({:.1} s)",
                    done.get(),
                    seeds.join("; "),
                    t_cell.elapsed().as_secs_f64()
                );
                progress.done(&name, &line);
                (i, cell)
            }
        })
        .buffer_unordered(jobs as usize)
        .collect()
        .await;
    progress.finish();
    cells.sort_by_key(|(i, _)| *i);
    cells.into_iter().map(|(_, c)| c).collect()
}

/// Where the matrix is written: `<out>/matrix/<stamp>/` (with `latest`), or exactly `--dir`;
/// either way into a temporary directory first, renamed into place when complete.
pub(super) enum OutDir {
    Stamped(RunDir),
    Exact(ExactDir),
}

/// `--dir`'s temporary directory, removed if never renamed into place.
pub(super) struct ExactDir {
    tmp: PathBuf,
    dir: PathBuf,
}

impl OutDir {
    /// `dir` must not exist, or be an empty directory; its parent must exist.
    pub(super) fn exact(dir: &Path) -> Result<OutDir> {
        if dir.exists() {
            let empty = dir.is_dir()
                && std::fs::read_dir(dir)
                    .with_context(|| format!("{}: reading", dir.display()))?
                    .next()
                    .is_none();
            if !empty {
                bail!(
                    "{}: exists and is not an empty directory: give a new directory (nothing was written)",
                    dir.display()
                );
            }
        }
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            bail!(
                "{}: its directory {} does not exist (nothing was written)",
                dir.display(),
                parent.display()
            );
        }
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp).with_context(|| format!("{}: creating", tmp.display()))?;
        Ok(OutDir::Exact(ExactDir {
            tmp,
            dir: dir.to_path_buf(),
        }))
    }

    pub(super) fn path(&self) -> &Path {
        match self {
            OutDir::Stamped(r) => r.path(),
            OutDir::Exact(e) => &e.tmp,
        }
    }

    /// Rename into place.
    pub(super) fn commit(self) -> Result<PathBuf> {
        match self {
            OutDir::Stamped(r) => r.commit(),
            OutDir::Exact(e) => {
                let (tmp, dir) = (&e.tmp, &e.dir);
                if dir.exists() {
                    // Empty (checked before): rename does not replace a directory here.
                    let _ = std::fs::remove_dir(dir);
                }
                std::fs::rename(tmp, dir)
                    .with_context(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
                Ok(dir.clone())
            }
        }
    }
}

impl Drop for ExactDir {
    fn drop(&mut self) {
        // Not committed (an error or an interruption): nothing half-written is left. A
        // committed one was renamed away, so this finds nothing.
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// `matrix.json`, `matrix.md`, `matrix.html` and `junit.xml` into `root`.
pub(super) fn write_matrix(root: &Path, m: &Matrix) -> Result<()> {
    let write = |name: &str, text: String| {
        let p = root.join(name);
        std::fs::write(&p, text).with_context(|| format!("{}: writing", p.display()))
    };
    write("matrix.json", serde_json::to_string_pretty(m)?)?;
    write("matrix.md", m.markdown() + "\n" + &m.fixes())?;
    write("matrix.html", m.html())?;
    let cases = m.junit(|rel| std::fs::read_to_string(root.join(rel)).ok());
    write("junit.xml", junit_xml("pgchaos matrix", &cases))?;
    Ok(())
}

/// The table, where things are, `--junit`, `--update-readme`, and the exit code.
pub(super) fn finish(
    m: &Matrix,
    dir: &Path,
    junit: Option<&Path>,
    update: Option<&Path>,
) -> Result<Exit> {
    if let Some(j) = junit {
        let cases = m.junit(|rel| std::fs::read_to_string(dir.join(rel)).ok());
        std::fs::write(j, junit_xml("pgchaos matrix", &cases))
            .with_context(|| format!("--junit {}: writing", j.display()))?;
    }
    if let Some(readme) = update {
        update_readme(readme, &readme_block(m))?;
    }
    println!("{}", m.table(None));
    println!("matrix: {}", dir.join("matrix.md").display());
    println!("html: {}", dir.join("matrix.html").display());
    println!("junit: {}", dir.join("junit.xml").display());
    println!("{}", m.versions);
    if let Some(d) = m.drift_line() {
        println!("{d}");
    }
    let differ: Vec<String> = m
        .differing()
        .map(|c| {
            format!(
                "{} on {}: {}",
                c.profile,
                c.topology,
                c.failure().unwrap_or_default()
            )
        })
        .collect();
    for c in m.cells.iter().filter(|c| !c.differs() && c.not_reached()) {
        println!(
            "{} on {}: expected {}, not reached in {} seeds ({}): not a failure without --require-expected",
            c.profile,
            c.topology,
            c.expectation(),
            c.runs.len(),
            c.label()
        );
    }
    if m.cells.iter().any(Cell::pg_violated) {
        println!(
            "!!! a pg.* invariant was violated in a cell: PostgreSQL, the pooler or pgchaos is wrong. Read its report."
        );
    }
    if differ.is_empty() {
        println!("no cell shows an unsafe class that is not expected or accepted: PASS");
        Ok(Exit::Ok)
    } else {
        println!("{} cells FAIL:", differ.len());
        for d in &differ {
            println!("  {d}");
        }
        Ok(Exit::Mismatch)
    }
}

/// The versions line, from a pooled run when there is one, and each server's version.
#[allow(clippy::type_complexity)]
fn versions_line(
    root: &Path,
    cells: &[Cell],
) -> (String, BTreeMap<String, String>, BTreeSet<String>) {
    let mut line = None;
    let mut servers = BTreeMap::new();
    let mut drift = BTreeSet::new();
    for r in cells.iter().flat_map(|c| &c.runs) {
        let Some(d) = &r.dir else { continue };
        if let Ok(res) = crate::report::Results::load(&root.join(d)) {
            drift.extend(res.version_drift.iter().cloned());
            servers
                .entry("postgres".to_string())
                .or_insert_with(|| res.versions.postgres.clone());
            if let Some(b) = &res.versions.pooler {
                servers
                    .entry(res.pooler.clone())
                    .or_insert_with(|| b.clone());
            }
            let v = crate::report::html::versions_line(&res);
            // A pooled run's line names its pooler too.
            if line.as_deref().is_none_or(|l: &str| !l.contains(" + ")) {
                line = Some(v);
            }
        }
    }
    (
        line.unwrap_or_else(|| "versions unknown (no run completed)".into()),
        servers,
        drift,
    )
}

struct CellOpts<'a> {
    exe: &'a Path,
    root: &'a Path,
    seeds: &'a [u64],
    max_shrink_runs: u32,
    shrink_once: bool,
    accept: &'a BTreeSet<Class>,
    require_expected: bool,
}

/// `--accept`: class names, with `-` for the space (`ran-twice`); unknown ones refused.
fn parse_accept(args: &[String]) -> Result<BTreeSet<Class>> {
    let mut out = BTreeSet::new();
    for a in args {
        let name = a.trim().replace('-', " ");
        if name.is_empty() {
            continue;
        }
        let class = Class::from_name(&name).ok_or_else(|| {
            anyhow!(
                "--accept {a:?}: not an outcome class (one of: {})",
                Class::ALL
                    .iter()
                    .map(|c| c.name().replace(' ', "-"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        out.insert(class);
    }
    Ok(out)
}

/// One cell: its seeds in one child process (`pgchaos chaos --seeds`), on one set of
/// servers, then each run classed from its results and history.
async fn run_cell(o: &CellOpts<'_>, c: &Planned<'_>) -> Cell {
    let p = c.profile;
    let mut cell = Cell {
        profile: p.name.clone(),
        topology: c.topology.clone(),
        topology_file: c.file.clone(),
        expected: p.expected.get(&c.topology).copied(),
        accepted: o.accept.clone(),
        require_expected: o.require_expected,
        worst: None,
        count: 0,
        runs: vec![],
    };
    let t_run = Instant::now();
    let (dirs, error) = match run_seeds(o, &o.root.join(&c.file)).await {
        Ok(d) => (d, None),
        Err((d, e)) => (d, Some(e)),
    };
    let each_ms = t_run.elapsed().as_millis() as u64 / o.seeds.len().max(1) as u64;
    for (i, &seed) in o.seeds.iter().enumerate() {
        let run = match dirs.get(i) {
            Some(run_dir) => classify(o.root, run_dir, seed, p.waits_forever, each_ms),
            None => Err(anyhow!(
                "{}",
                error
                    .clone()
                    .unwrap_or_else(|| "the run printed no report".into())
            )),
        };
        cell.runs.push(run.unwrap_or_else(|e| CellRun {
            seed,
            dir: None,
            classes: Default::default(),
            facts: RunFacts::default(),
            evidence: None,
            error: Some(format!("{e:#}")),
            run_ms: each_ms,
        }));
    }
    cell.fold();
    cell
}

/// A run's classes, from its results and history only, with the minimal case behind the
/// worst.
fn classify(
    root: &Path,
    run_dir: &Path,
    seed: u64,
    waits_forever: bool,
    run_ms: u64,
) -> Result<CellRun> {
    let rel = run_dir
        .strip_prefix(root)
        .unwrap_or(run_dir)
        .display()
        .to_string();
    let facts = crate::report::matrix::run_facts(run_dir)?;
    let classes = facts.classes(waits_forever);
    let worst = classes.first().copied();
    let evidence = worst.and_then(|w| {
        w.invariants()
            .iter()
            .map(|inv| format!("failures/{inv}/case.yaml"))
            .find(|f| run_dir.join(f).is_file())
            .map(|f| format!("{rel}/{f}"))
    });
    Ok(CellRun {
        seed,
        dir: Some(rel),
        classes,
        facts,
        evidence,
        error: None,
        run_ms,
    })
}

/// The invariants whose minimal cases are the classes' evidence, a group per class
/// (`app.mutual_exclusion|app.applied_once,app.no_lost_lock,...`): a run shrinks only
/// these, one per class; its other failures keep their failing case as it ran.
fn class_evidence() -> String {
    Class::ALL
        .iter()
        .map(|c| c.invariants().join("|"))
        .filter(|g| !g.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// The longest one seed's run may take before the cell is taken for hung.
const CHILD_BOUND: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// A cell's runs: `pgchaos chaos TOPOLOGY --seeds ...` in a child process. The child dies
/// with this process (parent-death signal; killed if this future is dropped), and stops its
/// own servers on the way out. Returns the run directories in seed order; on an error,
/// those that were written and the error.
async fn run_seeds(
    o: &CellOpts<'_>,
    topo: &Path,
) -> std::result::Result<Vec<PathBuf>, (Vec<PathBuf>, String)> {
    let seeds: Vec<String> = o.seeds.iter().map(u64::to_string).collect();
    let mut cmd = tokio::process::Command::new(o.exe);
    cmd.arg("chaos")
        .arg(topo)
        .args(["--seeds", &seeds.join(","), "--quiet"])
        .args(["--max-shrink-runs", &o.max_shrink_runs.to_string()])
        .args(["--shrink", if o.shrink_once { "once" } else { "every" }])
        .args(["--shrink-only", &class_evidence()])
        .arg("--out")
        .arg(o.root.join("runs"))
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
    let bound = CHILD_BOUND * o.seeds.len() as u32;
    let output = match tokio::time::timeout(bound, cmd.output()).await {
        Err(_) => {
            return Err((
                vec![],
                format!(
                    "`pgchaos chaos {}` still running after {} minutes: killed",
                    topo.display(),
                    bound.as_secs() / 60
                ),
            ));
        }
        Ok(Err(e)) => {
            return Err((
                vec![],
                format!("running {} chaos {}: {e}", o.exe.display(), topo.display()),
            ));
        }
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dirs: Vec<PathBuf> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("report: "))
        .map(|r| {
            Path::new(r.trim())
                .parent()
                .unwrap_or(Path::new("."))
                .to_path_buf()
        })
        .collect();
    match output.status.code() {
        Some(0 | 1) if dirs.len() == o.seeds.len() => Ok(dirs),
        code => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            Err((
                dirs,
                format!(
                    "`pgchaos chaos {}` exited with {}: {}",
                    topo.display(),
                    code.map(|c| c.to_string())
                        .unwrap_or_else(|| "a signal".into()),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            ))
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

/// The README's block: how it was made, the table (no links: runs are not committed), then
/// the fix for each unsafe cell.
fn readme_block(m: &Matrix) -> String {
    format!(
        "<!-- generated by `just readme-matrix` (pgchaos matrix --update-readme README.md); do not edit -->\n\n{}; seeds {}; {}.\n\n{}\n{}",
        m.versions,
        crate::report::matrix::seeds_text(&m.seeds),
        m.how_run(),
        m.table(None),
        m.fixes(),
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
    fn the_readme_block_is_replaced_and_nothing_else() {
        let t = "intro\n<!-- matrix:begin -->\nold\n<!-- matrix:end -->\nafter\n";
        assert_eq!(
            replace_block(t, "| new |\n").unwrap(),
            "intro\n<!-- matrix:begin -->\n| new |\n<!-- matrix:end -->\nafter\n"
        );
        assert_eq!(replace_block("no block", "x"), None);
    }
}
