//! The command line: parses arguments, prepares binaries, launches, runs, and maps outcomes
//! to exit codes: 0 ok, 1 verdicts differ from `expect` (or a replay differed), 2 usage,
//! config or environment error, 130 interrupted.

use crate::cpu::{self, CpuChoice};
use crate::engine::{self, RunOptions};
use crate::launch::Cluster;
use crate::provision::{self, BouncerBinary, Options, PgBinaries};
use crate::report::{self, CaseFile};
use crate::runner::{Runner, symbol, symbolic};
use crate::topology::{self, Topology};
use crate::workload;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use serde_json::json;
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
    },
    /// Validate topology files; exit 0, or 2 with the error.
    Check { topology: Vec<String> },
    /// Start a topology, print versions and endpoints, stay up until Ctrl-C.
    Up {
        topology: String,
        /// Check health and tear down at once.
        #[arg(long)]
        once: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[arg(long)]
        strict_versions: bool,
    },
    /// Run random cases, check invariants, shrink failures, write a report.
    Chaos {
        topology: String,
        #[arg(long)]
        cases: Option<u32>,
        /// A number, or `random`.
        #[arg(long)]
        seed: Option<String>,
        /// e.g. 60s, 2m, 500ms.
        #[arg(long)]
        time_limit: Option<String>,
        /// Report root (default: reports/).
        #[arg(long, default_value = "reports")]
        out: PathBuf,
        #[arg(long)]
        strict_versions: bool,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Pin the harness and its servers to one CPU: `auto` (the one it runs on), `off`,
        /// or a CPU number. Default: PGCHAOS_CPU, else auto.
        #[arg(long)]
        cpu: Option<String>,
    },
    /// Replay a case file on a fresh topology, or regenerate a case from its seed.
    Reproduce {
        /// A case.yaml, or with --seed a topology.
        target: String,
        /// Regenerate the case with this case seed from the topology's workload, and shrink it.
        #[arg(long)]
        seed: Option<u64>,
        /// With --seed: shrink for this invariant (default: the first one the case violates).
        #[arg(long)]
        invariant: Option<String>,
        /// Replay this many times.
        #[arg(long, default_value_t = 1)]
        times: u32,
        #[arg(long)]
        strict_versions: bool,
        /// Pin the harness and its servers to one CPU: `auto` (the one it runs on), `off`,
        /// or a CPU number. Default: PGCHAOS_CPU, else auto.
        #[arg(long)]
        cpu: Option<String>,
    },
    /// Compare runs: run directories, or topology names meaning their latest run.
    Compare {
        runs: Vec<String>,
        #[arg(long)]
        markdown: bool,
        #[arg(long, default_value = "reports")]
        reports: PathBuf,
    },
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
        tokio::select! {
            r = run(cli) => r.map(Some),
            _ = tokio::signal::ctrl_c() => Ok(None),
        }
    });
    match result {
        Ok(Some(Exit::Ok)) => 0,
        Ok(Some(Exit::Mismatch)) => 1,
        Ok(None) => {
            eprintln!("pgchaos: interrupted; servers stopped");
            130
        }
        Err(e) => {
            eprintln!("pgchaos: error: {e:#}");
            2
        }
    }
}

fn load(arg: &str) -> Result<Topology> {
    let path = topology::resolve(arg);
    Topology::load(&path).map_err(|e| anyhow!("{e}"))
}

/// Binaries for a topology, provisioning what is missing.
pub fn binaries(t: &Topology, strict: bool) -> Result<(PgBinaries, Option<BouncerBinary>)> {
    let opts = Options::from_env(strict);
    let pg = provision::postgres(&t.postgres.version, t.postgres.bin_dir.as_deref(), &opts)?;
    let bouncer = match &t.pgbouncer {
        Some(b) => Some(provision::pgbouncer(
            &b.version,
            b.binary.as_deref(),
            &opts,
        )?),
        None => None,
    };
    Ok((pg, bouncer))
}

/// Load, provision and launch (not pinned: for tests and examples).
pub async fn start(arg: &str, strict: bool) -> Result<Cluster> {
    launch(&load(arg)?, strict, CpuChoice::Off).await
}

/// Provision, place the harness thread per `cpu` (after provisioning: a build uses every
/// CPU; before the servers start, so they inherit it), and launch.
async fn launch(t: &Topology, strict: bool, cpu: CpuChoice) -> Result<Cluster> {
    let (pg, bouncer) = binaries(t, strict)?;
    let pinned = cpu::pin(cpu)?;
    let mut cluster = Cluster::launch(t, &pg, bouncer.as_ref()).await?;
    cluster.pinned_cpu = pinned;
    Ok(cluster)
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
                println!("{}: ok ({})", topo.source.display(), topo.name);
            }
            Ok(Exit::Ok)
        }
        Cmd::Provision {
            topology,
            strict_versions,
        } => {
            let list = if topology.is_empty() {
                all_topologies()?
            } else {
                topology
            };
            for t in &list {
                let topo = load(t)?;
                let t0 = Instant::now();
                let (pg, b) = binaries(&topo, strict_versions)?;
                println!(
                    "{}: postgres {} from {} ({}){}  [{:.1}s]",
                    topo.name,
                    pg.version,
                    pg.source,
                    pg.bin_dir.display(),
                    b.map(|b| format!(
                        "; pgbouncer {} from {} ({}){}",
                        b.version,
                        b.source,
                        b.path.display(),
                        b.drift.map(|d| format!(" DRIFT: {d}")).unwrap_or_default()
                    ))
                    .unwrap_or_default(),
                    t0.elapsed().as_secs_f64()
                );
            }
            Ok(Exit::Ok)
        }
        Cmd::Up {
            topology,
            once,
            json,
            strict_versions,
        } => {
            let mut cluster = start(&topology, strict_versions).await?;
            let runner = Runner::new(&cluster).await?; // health: observer, contender, console
            runner.observer.reset().await?;
            drop(runner);
            let v = &cluster.versions;
            let (pg_pid, bouncer_pid) = cluster.pids();
            let doc = json!({
                "topology": cluster.topology.name,
                "postgres": {"version": v.postgres, "declared_version": v.postgres_declared, "full_version": v.postgres_full, "dsn": cluster.direct_dsn(), "pid": pg_pid},
                "pgbouncer": cluster.topology.pgbouncer.as_ref().map(|_| json!({
                    "version": v.pgbouncer, "declared_version": v.pgbouncer_declared,
                    "pool_mode": cluster.pool_mode().map(|m| m.as_str()),
                    "dsn": cluster.client_dsn(), "admin_dsn": cluster.admin_dsn(), "pid": bouncer_pid,
                })),
                "client_dsn": cluster.client_dsn(),
                "version_drift": v.version_drift,
                "ready_ms": cluster.ready_ms,
            });
            if json {
                println!("{}", serde_json::to_string(&doc)?);
            } else {
                println!("topology   {}", cluster.topology.name);
                println!(
                    "postgres   {} (declared {})  {}",
                    v.postgres,
                    v.postgres_declared,
                    cluster.direct_dsn()
                );
                if let Some(b) = &v.pgbouncer {
                    println!(
                        "pgbouncer  {} (declared {})  pool_mode={}  {}",
                        b,
                        v.pgbouncer_declared.clone().unwrap_or_default(),
                        cluster.pool_mode().map(|m| m.as_str()).unwrap_or(""),
                        cluster.client_dsn()
                    );
                    println!("admin      {}", cluster.admin_dsn().unwrap_or_default());
                }
                for d in &v.version_drift {
                    println!("DRIFT      {d}");
                }
                println!("ready in   {} ms", cluster.ready_ms);
            }
            if !once {
                if !json {
                    println!("up; Ctrl-C to stop");
                }
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    cluster.check_alive()?;
                }
            }
            cluster.shutdown();
            Ok(Exit::Ok)
        }
        Cmd::Chaos {
            topology,
            cases,
            seed,
            time_limit,
            out,
            strict_versions,
            quiet,
            cpu,
        } => {
            let topo = load(&topology)?;
            let seed = match seed.as_deref().map(str::trim) {
                None => topo.run.seed.unwrap_or_else(workload::random_seed),
                Some("random") => workload::random_seed(),
                Some(s) => s.parse().map_err(|_| {
                    anyhow!("--seed {s:?}: expected a non-negative integer or `random`")
                })?,
            };
            let time_limit = match time_limit {
                Some(s) => parse_duration(&s)?,
                None => topo.run.time_limit,
            };
            let cases = cases.unwrap_or(topo.run.cases);
            if cases == 0 {
                bail!("--cases must be at least 1");
            }
            let choice = CpuChoice::from_flag_or_env(cpu.as_deref())?;
            let cluster = launch(&topo, strict_versions, choice).await?;
            let label = report::topo_label(&topo);
            eprintln!(
                "pgchaos: {} ready in {} ms; seed {seed}; {cases} cases; {}; versions PG {} PgBouncer {}{}",
                topo.name,
                cluster.ready_ms,
                match cluster.pinned_cpu {
                    Some(c) => format!("pinned to CPU {c}"),
                    None => "not pinned".into(),
                },
                cluster.versions.postgres,
                cluster
                    .versions
                    .pgbouncer
                    .clone()
                    .unwrap_or_else(|| "none".into()),
                if cluster.versions.version_drift.is_empty() {
                    String::new()
                } else {
                    format!(" (DRIFT: {})", cluster.versions.version_drift.join("; "))
                }
            );
            let runner = Runner::new(&cluster).await?;
            let bar = if quiet {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new(u64::from(cases))
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} cases  {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let pb = bar.clone();
            let bar_for_print = bar.clone();
            let label_for_print = label.clone();
            let outcome = engine::run(
                &runner,
                RunOptions {
                    cases,
                    seed,
                    time_limit,
                    max_shrink_runs: topo.run.max_shrink_runs,
                    progress: Box::new(move |done, _, violated| {
                        pb.set_position(u64::from(done));
                        pb.set_message(format!("{violated} invariants violated"));
                    }),
                    on_failure: Box::new(move |f, at| {
                        let steps: Vec<String> = f.minimal.iter().map(|s| s.to_string()).collect();
                        let line = format!(
                            "[{:.1}s] {} violated in case {} (seed {}): minimal {} steps after {} shrink runs: {}\n        reproduce: pgchaos reproduce --seed {} --invariant {} {}",
                            at.as_secs_f64(),
                            f.invariant,
                            f.case_index,
                            f.case_seed,
                            f.minimal.len(),
                            f.shrink_runs,
                            steps.join("; "),
                            f.case_seed,
                            f.invariant,
                            label_for_print
                        );
                        if bar_for_print.is_hidden() {
                            println!("{line}");
                        } else {
                            bar_for_print.println(line);
                        }
                    }),
                },
            )
            .await?;
            bar.finish_and_clear();
            let contender = (
                runner.observer.contender_id.pid,
                runner.observer.contender_start.clone(),
            );
            let dir = report::write_run(
                &out,
                &cluster,
                &label,
                &outcome,
                (contender.0, &contender.1),
            )?;
            cluster.save_logs(&dir.join("logs"))?;
            println!("{}", report::verdict_table(&outcome));
            let sps = if outcome.steps_ms > 0 {
                outcome.steps as f64 * 1000.0 / outcome.steps_ms as f64
            } else {
                0.0
            };
            println!(
                "{} cases, {} steps ({} skipped) in {:.1}s; {:.0} steps/s; seed {}",
                outcome.cases,
                outcome.steps,
                outcome.skipped_steps,
                outcome.run_ms as f64 / 1000.0,
                sps,
                outcome.run_seed
            );
            for f in &outcome.failures {
                println!(
                    "  {}: minimal case {} steps -> pgchaos reproduce {}/failures/{}/case.yaml",
                    f.invariant,
                    f.minimal.len(),
                    dir.display(),
                    f.invariant
                );
            }
            println!("report: {}", dir.join("report.md").display());
            let pg_violated = outcome
                .invariants
                .iter()
                .any(|i| i.tier == "pg" && i.violating_cases > 0);
            if pg_violated {
                println!(
                    "!!! a pg.* invariant was violated: PostgreSQL, the pooler or pgchaos is wrong. Read the report."
                );
            }
            if outcome.passed() {
                println!("verdicts match the topology's expect block: PASS");
                Ok(Exit::Ok)
            } else {
                println!("verdicts differ from the topology's expect block: FAIL");
                Ok(Exit::Mismatch)
            }
        }
        Cmd::Reproduce {
            target,
            seed,
            invariant,
            times,
            strict_versions,
            cpu,
        } => {
            let choice = CpuChoice::from_flag_or_env(cpu.as_deref())?;
            reproduce(&target, seed, invariant, times, strict_versions, choice).await
        }
        Cmd::Compare {
            runs,
            markdown,
            reports,
        } => {
            if runs.is_empty() {
                bail!("usage: pgchaos compare RUN_DIR|TOPOLOGY...");
            }
            let dirs = runs
                .iter()
                .map(|r| report::resolve_run(r, &reports))
                .collect::<Result<Vec<_>>>()?;
            println!("{}", report::compare(&dirs, markdown)?);
            Ok(Exit::Ok)
        }
    }
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

/// Replay a case (from a file, or regenerated from its seed and shrunk) `times` times on a
/// fresh topology, comparing each step with the recorded one, symbolically.
async fn reproduce(
    target: &str,
    seed: Option<u64>,
    invariant: Option<String>,
    times: u32,
    strict: bool,
    cpu_choice: CpuChoice,
) -> Result<Exit> {
    let (topo, case) = match seed {
        Some(seed) => {
            let topo = load(target)?;
            let steps = workload::case_tree(&topo.workload, seed).current();
            let case = CaseFile {
                topology: report::topo_label(&topo),
                description: Some(format!("regenerated from case seed {seed}")),
                invariant: None,
                expect_violated: vec![],
                case_seed: Some(seed),
                versions: None,
                steps: steps
                    .into_iter()
                    .map(|s| report::CaseStep {
                        step: s,
                        expected: None,
                        observed: None,
                        backend: None,
                        backend_pid: None,
                        backend_start: None,
                        violations: vec![],
                    })
                    .collect(),
            };
            (topo, case)
        }
        None => {
            let case = CaseFile::load(Path::new(target))?;
            // Recorded relative to the workspace root: also try the name under topologies/.
            let topo = if Path::new(&case.topology).exists() {
                load(&case.topology)?
            } else {
                let stem = Path::new(&case.topology)
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default();
                load(stem).with_context(|| format!("{target}: topology {}", case.topology))?
            };
            (topo, case)
        }
    };
    let cluster = launch(&topo, strict, cpu_choice).await?;
    let runner = Runner::new(&cluster).await?;
    let mut steps = case.steps();
    let mut chosen_invariant: Option<String> = None;
    if seed.is_some() {
        // Regenerated: find what it violates and shrink it, as the chaos run would.
        let first = runner.run_case(&steps, false).await?;
        let violated = first.violated();
        println!(
            "case seed {}: {} steps, violates: {}",
            seed.unwrap_or(0),
            steps.len(),
            if violated.is_empty() {
                "nothing".into()
            } else {
                violated.join(", ")
            }
        );
        let chosen = match &invariant {
            Some(i) if !violated.contains(i) => bail!(
                "case seed {}: does not violate {i} (it violates: {})",
                seed.unwrap_or(0),
                if violated.is_empty() {
                    "nothing".to_string()
                } else {
                    violated.join(", ")
                }
            ),
            Some(i) => Some(i.clone()),
            None => violated.first().cloned(),
        };
        if let Some(inv) = &chosen {
            let (min, runs) =
                engine::shrink(&runner, seed.unwrap_or(0), inv, topo.run.max_shrink_runs).await?;
            println!("shrunk for {inv} to {} steps in {runs} runs", min.len());
            steps = min;
            chosen_invariant = Some(inv.clone());
        }
    }
    let mut same_all = 0;
    for attempt in 1..=times.max(1) {
        let run = runner.run_case(&steps, true).await?;
        let order = symbolic(&run.steps);
        let mut same = true;
        println!("replay {attempt}/{times}:");
        for (r, rec) in run.steps.iter().zip(&case.steps) {
            let backend = r
                .backend
                .as_ref()
                .map(|s| symbol(&order, s.backend))
                .or(r.target.map(|t| symbol(&order, t)));
            let observed = r.reply.to_string();
            let step_same = rec.observed.as_ref().is_none_or(|o| *o == observed)
                && (rec.backend.is_none() || rec.backend == backend);
            same &= step_same || seed.is_some();
            println!(
                "  {:>2}. {:<28} {:<22} {:<4} {}{}",
                r.index + 1,
                r.step.to_string(),
                observed,
                backend.unwrap_or_default(),
                if rec.observed.is_some() {
                    if step_same { "same" } else { "DIFFERENT" }
                } else {
                    ""
                },
                if r.violations.is_empty() {
                    String::new()
                } else {
                    format!(
                        "  [{}]",
                        r.violations
                            .iter()
                            .map(|v| v.invariant.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            );
            if let (false, Some(o)) = (step_same, &rec.observed) {
                println!(
                    "      recorded: {o} on {}",
                    rec.backend.clone().unwrap_or_default()
                );
            }
        }
        let violated = run.violated();
        let mut want: Vec<String> = case.expect_violated.clone();
        want.extend(case.invariant.iter().cloned());
        want.extend(chosen_invariant.iter().cloned());
        let missing: Vec<&String> = want.iter().filter(|w| !violated.contains(w)).collect();
        if !missing.is_empty() {
            same = false;
            println!("  did NOT violate {missing:?}");
        }
        println!(
            "  violated: {}",
            if violated.is_empty() {
                "nothing".to_string()
            } else {
                violated.join(", ")
            }
        );
        if same {
            same_all += 1;
        }
    }
    println!("reproduced {same_all}/{} times", times.max(1));
    Ok(if same_all == times.max(1) {
        Exit::Ok
    } else {
        Exit::Mismatch
    })
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
