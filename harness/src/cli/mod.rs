//! The command line: parses arguments, hands each subcommand to its own file, and maps
//! outcomes to exit codes: 0 verdicts as expected, 1 verdicts differ from `expect` (or a
//! replay differed), 2 usage, configuration or environment error, 128 + the signal when
//! interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; servers stopped either way).
//!
//! May import everything; nothing imports it.

mod analyze;
mod bench;
mod chaos;
mod compare;
mod containers;
mod history;
mod import;
mod init;
mod matrix;
mod merge;
mod mutate;
mod reproduce;
mod run;
mod up;

use crate::topology::{self, Topology};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "pgchaos",
    version,
    about = "Chaos and property testing of PostgreSQL advisory locks through connection poolers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Obtain the binaries a topology needs (default: every topology in topologies/).
    Provision {
        topology: Vec<String>,
        /// Refuse a version other than the declared one.
        #[arg(long)]
        strict_versions: bool,
        /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
        /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
        #[arg(long, value_name = "DIR")]
        source_mirror: Option<std::path::PathBuf>,
    },
    /// Validate topology files; exit 0, or 2 with the error.
    Check { topology: Vec<String> },
    /// Start a topology, print versions and endpoints, stay up until Ctrl-C.
    Up(up::Args),
    /// Run random cases, check invariants, shrink failures, write a report.
    Chaos(chaos::Args),
    /// Replay a case file on a fresh topology, or regenerate a case from its seed.
    Reproduce(reproduce::Args),
    /// Run your own command as N replicas through the topology's pooler, with a wire tap in
    /// front of it that records every message: `run TOPOLOGY --replicas N -- COMMAND ARGS`.
    Run(run::Args),
    /// Re-check a stored run's history with the current checker.
    Analyze(analyze::Args),
    /// Print a stored run's history, or one case of it.
    History(history::Args),
    /// Compare runs: run directories, or topology names meaning their latest run.
    Compare(compare::Args),
    /// The concurrent workers' op rate (observation off, sampling on) beside pgbench's.
    Bench(bench::Args),
    /// Write a topology with the pooling settings of a pgbouncer.ini.
    Import(import::Args),
    /// Set a repository up: its tools' profiles (from its dependency files), a topology from
    /// its pgbouncer.ini, a matrix script and a CI workflow.
    Init(init::Args),
    /// Run client profiles (profiles/) on topologies: the compatibility matrix.
    Matrix(matrix::Args),
    /// Combine the partitions of a matrix (`matrix --partition K/N`) into the whole.
    Merge(merge::Args),
    /// Measure the checker on a stored history: edit each case and count what it catches.
    Mutate(mutate::Args),
    /// Build the container images of topologies' servers from the provisioned binaries.
    Images(containers::ImagesArgs),
    /// Write a compose file that starts a topology's servers from the local images.
    Compose(containers::ComposeArgs),
    /// (Internal: the reaper of a `launcher: external` run.) Terminate the backends of the
    /// role in PGCHAOS_REAP_ROLE on the PostgreSQL of PGCHAOS_REAP_DSN.
    #[command(hide = true)]
    ReapExternal,
}

impl Cmd {
    /// The `--source-mirror` of a command that provisions.
    fn source_mirror(&self) -> Option<&Path> {
        match self {
            Cmd::Provision { source_mirror, .. } => source_mirror.as_deref(),
            Cmd::Up(a) => a.source_mirror.as_deref(),
            Cmd::Chaos(a) => a.source_mirror.as_deref(),
            Cmd::Reproduce(a) => a.source_mirror.as_deref(),
            Cmd::Run(a) => a.source_mirror.as_deref(),
            Cmd::Bench(a) => a.source_mirror.as_deref(),
            Cmd::Matrix(a) => a.source_mirror.as_deref(),
            Cmd::Images(a) => a.source_mirror.as_deref(),
            Cmd::Compose(a) => a.source_mirror.as_deref(),
            _ => None,
        }
    }
}

/// `--source-mirror DIR`: checked (a missing directory is an error naming it), made
/// absolute and put in `PGCHAOS_SOURCE_MIRROR`, where provisioning and the child processes
/// (`matrix`'s cells) read it.
fn use_source_mirror(dir: &Path) -> Result<()> {
    crate::provision::mirror::check_dir(dir)?;
    let abs =
        std::path::absolute(dir).with_context(|| format!("--source-mirror {}", dir.display()))?;
    // SAFETY: called from `main` right after parsing the arguments, before the runtime or
    // any other thread exists: nothing reads the environment concurrently.
    unsafe { std::env::set_var(crate::provision::mirror::ENV, abs) };
    Ok(())
}

/// Exit code for an outcome.
pub enum Exit {
    Ok,
    Mismatch,
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    if let Some(dir) = cli.cmd.source_mirror()
        && let Err(e) = use_source_mirror(dir)
    {
        eprintln!("pgchaos: error: {e:#}");
        return 2;
    }
    // One thread: servers are spawned with a parent-death signal tied to the spawning
    // thread, so the thread that spawns them must live as long as they do.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgchaos: error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    let result = rt.block_on(async {
        let stop = match stop_signal() {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        tokio::select! {
            r = run(cli) => r.map(Ok),
            sig = stop => Ok(Err(sig)),
        }
    });
    match result {
        Ok(Ok(Exit::Ok)) => 0,
        Ok(Ok(Exit::Mismatch)) => 1,
        Ok(Err((name, signo))) => {
            eprintln!("pgchaos: interrupted by {name}; servers stopped");
            128 + signo
        }
        Err(e) => {
            match e.downcast_ref::<crate::launch::owned::Stopped>() {
                // A deployment's run met something it does not own: stopped on purpose,
                // everything of its own ended.
                Some(s) => eprintln!(
                    "pgchaos: {s}\npgchaos: the run stopped cleanly (its own backends terminated, nothing paused); no verdict is given for it"
                ),
                None => eprintln!("pgchaos: error: {e:#}"),
            }
            2
        }
    }
}

/// Resolves at the first of Ctrl-C (SIGINT), SIGTERM (what `timeout`, CI runners and
/// container runtimes send) and SIGHUP (a closed terminal), with its name and number. The
/// run future is then dropped, which stops the servers and removes unfinished reports.
fn stop_signal() -> Result<impl std::future::Future<Output = (&'static str, i32)>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => ("SIGINT", libc::SIGINT),
            _ = term.recv() => ("SIGTERM", libc::SIGTERM),
            _ = hup.recv() => ("SIGHUP", libc::SIGHUP),
        }
    })
}

/// A topology by name or path, validated against the checker's invariants.
pub fn load(arg: &str) -> Result<Topology> {
    let path = topology::resolve(arg);
    if path.to_string_lossy() != arg {
        topology::check_found(&path).map_err(|e| anyhow!("{e}"))?;
    }
    Topology::load(&path, &crate::catalog()).map_err(|e| anyhow!("{e}"))
}

/// `--schedule`: run the topology's cases `sequential` or `concurrent` instead of its
/// `run.schedule`. A scripted workload only runs concurrent.
fn with_schedule(mut topo: Topology, flag: Option<&str>) -> Result<Topology> {
    let Some(f) = flag else {
        return Ok(topo);
    };
    let schedule = topology::Schedule::from_name(f.trim())
        .ok_or_else(|| anyhow!("--schedule {f:?}: expected `sequential` or `concurrent`"))?;
    if schedule == topology::Schedule::Sequential && !topo.workload.script.is_empty() {
        bail!(
            "--schedule sequential: {} has a `workload.script`, and scripted replicas run only concurrent",
            topo.source.display()
        );
    }
    if schedule == topology::Schedule::Concurrent
        && topo.workload.script.is_empty()
        && topo.expect_concurrent.is_empty()
        && !topo.expect.is_empty()
    {
        // Without `expect_concurrent`, `expect` is the concurrent schedule's expectation too:
        // say so, so a differing verdict is read as what it is.
        eprintln!(
            "pgchaos: note: {} has no `expect_concurrent`: its `expect` block is judged against the concurrent schedule too",
            topo.source.display()
        );
    }
    topo.run.schedule = schedule;
    Ok(topo)
}

/// The CPU choice for a run: `--cpu`, else PGCHAOS_CPU, else `auto`; `auto` pins sequential
/// runs only (concurrent cases wait for each other for real, and their servers get both
/// CPUs, as in production). A CPU number pins either.
fn cpu_for(topo: &Topology, flag: Option<&str>) -> Result<crate::launch::cpu::CpuChoice> {
    use crate::launch::cpu::CpuChoice;
    let c = CpuChoice::from_flag_or_env(flag)?;
    Ok(match (c, topo.run.schedule) {
        (CpuChoice::Auto, topology::Schedule::Concurrent) => CpuChoice::Off,
        (c, _) => c,
    })
}

/// `--time-limit`: the same forms as the YAML (`500ms`, `60s`, `2m`, `1h`).
fn parse_duration(s: &str) -> Result<Duration> {
    topology::parse_duration(s.trim())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("invalid duration {s:?}: expected e.g. 500ms, 60s, 2m, 1h"))
}

async fn run(cli: Cli) -> Result<Exit> {
    match cli.cmd {
        Cmd::Check { topology } => {
            if topology.is_empty() {
                bail!("usage: pgchaos check TOPOLOGY...");
            }
            for t in &topology {
                let topo = load(t)?;
                if let Some(why) = crate::launch::capability::refusal(&topo, topo.launcher) {
                    bail!("{why}");
                }
                println!("{}: ok ({})", topo.source.display(), topo.name);
            }
            Ok(Exit::Ok)
        }
        Cmd::Provision {
            topology,
            strict_versions,
            ..
        } => {
            let list = if topology.is_empty() {
                all_topologies()?
            } else {
                topology
            };
            for t in &list {
                let topo = load(t)?;
                let t0 = Instant::now();
                let (pg, b) = crate::launch::binaries(&topo, strict_versions)?;
                println!(
                    "{}: postgres {} from {} ({}){}  [{:.1}s]",
                    topo.name,
                    pg.version,
                    pg.source,
                    pg.bin_dir.display(),
                    b.map(|b| format!(
                        "; {} {} from {} ({}){}{}",
                        topo.pooler.as_ref().map_or("pooler", |p| p.kind),
                        b.version,
                        b.source,
                        b.path.display(),
                        b.tarball_sha256
                            .map(|h| format!(" tarball sha256 {h}"))
                            .unwrap_or_default(),
                        b.drift.map(|d| format!(" DRIFT: {d}")).unwrap_or_default()
                    ))
                    .unwrap_or_default(),
                    t0.elapsed().as_secs_f64()
                );
            }
            Ok(Exit::Ok)
        }
        Cmd::Up(a) => up::up(a).await,
        Cmd::Chaos(a) => chaos::chaos(a).await,
        Cmd::Bench(a) => bench::bench(a).await,
        Cmd::Reproduce(a) => reproduce::reproduce(a).await,
        Cmd::Run(a) => run::run(a).await,
        Cmd::Analyze(a) => analyze::analyze(a),
        Cmd::History(a) => history::history(a),
        Cmd::Compare(a) => compare::compare(a),
        Cmd::Import(a) => import::import(a),
        Cmd::Init(a) => init::init(a),
        Cmd::Matrix(a) => matrix::matrix(a).await,
        Cmd::Merge(a) => merge::merge_cmd(a),
        Cmd::Mutate(a) => mutate::mutate(a),
        Cmd::Images(a) => containers::images(a),
        Cmd::Compose(a) => containers::compose(a),
        Cmd::ReapExternal => crate::launch::external::reap_from_env()
            .await
            .map(|()| Exit::Ok),
    }
}

/// `--launcher NAME`.
fn parse_launcher(s: &str) -> std::result::Result<crate::topology::LauncherKind, String> {
    crate::topology::LauncherKind::from_name(s)
        .ok_or_else(|| format!("unknown launcher `{s}` (launchers: native, docker, external)"))
}

fn all_topologies() -> Result<Vec<String>> {
    let dir = topology::resolve("direct")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("topologies"));
    let mut out = vec![];
    for e in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p.display().to_string());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("2 weeks").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("").is_err());
    }
}
