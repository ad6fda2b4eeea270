//! `pgchaos chaos TOPOLOGY`: launch, run the chaos loop with the history streaming into the
//! report directory, write the report, print the verdict table.

use super::{Exit, cpu_for, load, parse_duration, with_schedule};
use crate::engine::{self, RunOptions, ShrinkChoice, Sink};
use crate::history::{self, Body, HistoryWriter, RunEnd};
use crate::launch::{self, LaunchOptions};
use crate::report::results::HistoryOut;
use crate::report::terminal::{Progress, verdict_table};
use crate::report::{self, Results, RunDir, junit};
use crate::run::Runner;
use crate::vocab::{Partition, parse_seeds};
use crate::workload;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    topology: String,
    #[arg(long)]
    cases: Option<u32>,
    /// A number, or `random`.
    #[arg(long)]
    seed: Option<String>,
    /// For the generated cases, e.g. 60s, 2m, 500ms (the topology's `run.time_limit`).
    #[arg(long)]
    time_limit: Option<String>,
    /// For shrinking and evidence replays over the run (the topology's `run.shrink_time`).
    #[arg(long)]
    shrink_time: Option<String>,
    /// Report root (default: reports/).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    #[arg(long)]
    strict_versions: bool,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
    /// Start the servers with this launcher instead of the topology's (`native`, `docker`, `external`).
    #[arg(long, value_parser = super::parse_launcher)]
    launcher: Option<crate::topology::LauncherKind>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Pin the harness and its servers to one CPU: `auto` (the one it runs on), `off`,
    /// or a CPU number. Default: PGCHAOS_CPU, else auto.
    #[arg(long)]
    cpu: Option<String>,
    /// Cap on shrink replays (the topology's `run.max_shrink_runs`; 0: no shrinking: the
    /// failing case is replayed with evidence, or in the concurrent schedule is its own).
    #[arg(long)]
    max_shrink_runs: Option<u32>,
    /// Run cases `sequential` or `concurrent`, whatever the topology's `run.schedule` says.
    #[arg(long)]
    schedule: Option<String>,
    /// Also write the verdicts as JUnit XML to this file (a test case per invariant, failed
    /// when its verdict differs from `expect`), once the report directory is in place.
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// Several seeds, one run each on the same servers (each its own report directory):
    /// `1-3` or `1,5,9`. The reset between cases also separates the runs.
    #[arg(long, conflicts_with = "seed")]
    seeds: Option<String>,
    /// Run only partition K of N of the `--seeds` (by count: seed i of the list goes to
    /// partition i mod N + 1), as CI runners split a long list.
    #[arg(long, value_name = "K/N")]
    partition: Option<String>,
    /// With --seeds: `every` seed's run shrinks its failures (default), or `once`: an
    /// invariant is shrunk in the first run that violates it, and later runs keep their
    /// failing case as it ran (in the concurrent schedule its own evidence).
    #[arg(long, value_name = "every|once")]
    shrink: Option<String>,
    /// Shrink only these invariants' failures, and of a group `a|b` the first violated (one
    /// minimal case serves the group): `app.mutual_exclusion|app.applied_once,app.no_orphans`.
    /// Other failures keep their failing case as it ran; `pg.*` ones are always shrunk.
    #[arg(long, value_name = "INV[|INV],...")]
    shrink_only: Option<String>,
    /// An expected violation (`expect:`) that no case reached fails the run. Without it,
    /// such an invariant is reported as "not reached in N cases" and the run may pass: a
    /// short run misses what a long one finds in a few percent of its cases.
    #[arg(long)]
    require_expected: bool,
}

pub async fn chaos(a: Args) -> Result<Exit> {
    let topo = with_schedule(load(&a.topology)?, a.schedule.as_deref())?;
    let mut seeds =
        match (a.seed.as_deref().map(str::trim), a.seeds.as_deref()) {
            (Some(_), Some(_)) => bail!("--seed and --seeds: give one"),
            (None, Some(list)) => parse_seeds(list)?,
            (None, None) => vec![topo.run.seed.unwrap_or_else(workload::random_seed)],
            (Some("random"), None) => vec![workload::random_seed()],
            (Some(s), None) => vec![s.parse().map_err(|_| {
                anyhow!("--seed {s:?}: expected a non-negative integer or `random`")
            })?],
        };
    if let Some(p) = &a.partition {
        if a.seeds.is_none() {
            bail!("--partition splits a list of seeds: give --seeds too");
        }
        let p = Partition::parse(p)?;
        seeds = p.pick(seeds);
        if seeds.is_empty() {
            println!(
                "partition {p} has no seeds to run (more partitions than seeds): nothing to do"
            );
            return Ok(Exit::Ok);
        }
    }
    let time_limit = match a.time_limit {
        Some(s) => parse_duration(&s)?,
        None => topo.run.time_limit,
    };
    let shrink_time = match a.shrink_time {
        Some(s) => parse_duration(&s)?,
        None => topo.run.shrink_time,
    };
    let cases = a.cases.unwrap_or(topo.run.cases);
    if cases == 0 {
        bail!("--cases must be at least 1");
    }
    let shrink_once = match a.shrink.as_deref().map(str::trim) {
        None | Some("every") => false,
        Some("once") => true,
        Some(s) => bail!(
            "--shrink {s:?}: expected `every` (each seed's run shrinks its failures) or `once` (an invariant is shrunk in the first seed's run that violates it)"
        ),
    };
    let only = a
        .shrink_only
        .as_deref()
        .map(ShrinkChoice::parse_only)
        .transpose()?;
    let cpu = cpu_for(&topo, a.cpu.as_deref())?;
    if let Some(p) = &a.junit {
        junit_path_usable(p)?;
    }
    // The first report directory before anything starts: a bad --out fails first.
    let first_dir = RunDir::create(&a.out, &topo.name, seeds[0])?;
    let cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            cpu,
            launcher: a.launcher,
        },
    )
    .await?;
    eprintln!("{}", ready_line(&topo, &cluster, &seeds, cases));
    let runner = Runner::new(&cluster).await?;
    let mut shrunk: BTreeSet<String> = BTreeSet::new();
    let mut junit_cases = vec![];
    let mut passed = true;
    let mut first_dir = Some(first_dir);
    for &seed in &seeds {
        let run_dir = match first_dir.take() {
            Some(d) => d,
            None => RunDir::create(&a.out, &topo.name, seed)?,
        };
        let opts = RunOptions {
            cases,
            seed,
            time_limit,
            shrink_time,
            max_shrink_runs: a.max_shrink_runs.unwrap_or(topo.run.max_shrink_runs),
            shrink: ShrinkChoice {
                only: only.clone(),
                done: if shrink_once {
                    shrunk.clone()
                } else {
                    BTreeSet::new()
                },
            },
        };
        let (results, dir) =
            one_seed(&runner, &topo, run_dir, &opts, a.quiet, a.require_expected).await?;
        for f in &results.invariants {
            if f.first_failure.as_ref().is_some_and(|f| f.shrink_runs > 0) {
                shrunk.insert(f.name.clone());
            }
        }
        if a.junit.is_some() {
            let mut cases = junit::from_results(&results, &dir);
            if seeds.len() > 1 {
                for c in &mut cases {
                    c.name = format!("{} (seed {seed})", c.name);
                }
            }
            junit_cases.extend(cases);
        }
        passed &= results.passed();
    }
    if let Some(p) = &a.junit {
        let xml = junit::junit_xml(&format!("pgchaos.{}", topo.name), &junit_cases);
        std::fs::write(p, xml).with_context(|| {
            format!(
                "--junit {}: cannot write the JUnit XML (the reports are under {})",
                p.display(),
                a.out.display()
            )
        })?;
        println!("junit: {}", p.display());
    }
    if passed {
        Ok(Exit::Ok)
    } else {
        Ok(Exit::Mismatch)
    }
}

/// The line printed once the servers are up: the topology, how fast it started, the seeds,
/// the cases, the CPU it is pinned to and the versions (with any drift).
fn ready_line(
    topo: &crate::topology::Topology,
    cluster: &launch::Cluster,
    seeds: &[u64],
    cases: u32,
) -> String {
    format!(
        "pgchaos: {} ready in {} ms; {}; {cases} cases; {}; versions PG {} {} {}{}",
        topo.name,
        cluster.ready_ms,
        match seeds {
            [s] => format!("seed {s}"),
            many => format!(
                "seeds {} (one run each, on these servers)",
                crate::report::matrix::seeds_text(many)
            ),
        },
        match cluster.pinned_cpu {
            Some(c) => format!("pinned to CPU {c}"),
            None => "not pinned".into(),
        },
        cluster.versions.postgres,
        cluster.pooler.name(),
        cluster
            .versions
            .pooler
            .clone()
            .unwrap_or_else(|| "none".into()),
        if cluster.versions.version_drift.is_empty() {
            String::new()
        } else {
            format!(" (DRIFT: {})", cluster.versions.version_drift.join("; "))
        }
    )
}

/// One seed's run on the launched servers: its own report directory, history and verdicts
/// (what a `chaos --seed S` run writes). Returns the results and the committed directory.
async fn one_seed(
    runner: &Runner<'_>,
    topo: &crate::topology::Topology,
    run_dir: RunDir,
    opts: &RunOptions,
    quiet: bool,
    require_expected: bool,
) -> Result<(Results, PathBuf)> {
    let cluster = runner.cluster;
    let seed = opts.seed;
    let cases = opts.cases;
    let label = report::topo_label(topo);
    let topo_copy = run_dir.path().join("topology.yaml");
    std::fs::write(&topo_copy, &topo.text)
        .with_context(|| format!("{}: writing", topo_copy.display()))?;
    // The writer thread stays on the run's CPU: measured, a writer on the other vCPU slowed
    // the pinned one (reset 270 -> 500 ms per 64 cases), compressing here costs ~1%.
    let writer = HistoryWriter::create(&run_dir.path().join(history::store::FILE))?;
    let header = runner.header(seed, &label);
    let mut sink = Sink::new(
        Instant::now(),
        crate::engine::check_context(runner),
        Some(&writer),
    );
    sink.rec.emit(Body::Run(Box::new(header.clone())));
    sink.write_loose()?;
    let progress = Progress::new(cases, quiet, &label);
    let outcome = engine::run(runner, &mut sink, opts, &mut |e| progress.event(e)).await?;
    progress.finish();
    sink.rec.emit(Body::RunEnd(RunEnd {
        cases: sink.tally.cases,
        stopped_by_time_limit: outcome.stopped_by_time_limit,
        run_ms: outcome.run_ms,
    }));
    sink.write_loose()?;
    let tally = sink.into_tally();
    let written = writer.finish()?;
    let mut results = Results::build(
        topo,
        &header,
        &tally,
        outcome.stopped_by_time_limit,
        outcome.run_ms,
        require_expected,
    );
    results.history = Some(HistoryOut {
        file: history::store::FILE.into(),
        events: written.events,
        bytes: written.bytes,
        steps: tally.all_steps,
        bytes_per_step: if tally.all_steps > 0 {
            (written.bytes as f64 / tally.all_steps as f64 * 10.0).round() / 10.0
        } else {
            0.0
        },
    });
    report::write_report(
        run_dir.path(),
        run_dir.final_path(),
        topo,
        &header,
        &results,
        &tally,
    )?;
    cluster.save_logs(&run_dir.path().join("logs"))?;
    let dir = run_dir.commit()?;
    println!("{}", verdict_table(&results));
    for n in crate::report::terminal::verdict_notes(&results) {
        println!("{n}");
    }
    println!(
        "{} cases, {} steps ({} skipped) in {:.1}s; {:.0} steps/s; seed {}; history {} bytes ({:.0} bytes/step)",
        results.cases,
        results.steps,
        results.skipped_steps,
        results.timing.run_ms as f64 / 1000.0,
        results.timing.steps_per_sec,
        results.seed,
        written.bytes,
        results
            .history
            .as_ref()
            .map(|h| h.bytes_per_step)
            .unwrap_or(0.0),
    );
    for f in &tally.failures {
        println!(
            "  {}: {} case {} steps -> pgchaos reproduce {}/failures/{}/case.yaml",
            f.invariant,
            if f.unshrunk() { "unshrunk" } else { "minimal" },
            f.minimal().map(|m| m.len()).unwrap_or(0),
            dir.display(),
            f.invariant
        );
    }
    println!("report: {}", dir.join("report.md").display());
    println!("html: {}", dir.join("report.html").display());
    if results.pg_violated() {
        println!(
            "!!! a pg.* invariant was violated: PostgreSQL, the pooler or pgchaos is wrong. Read the report."
        );
    }
    let missed: Vec<&str> = results
        .invariants
        .iter()
        .filter(|i| i.not_reached())
        .map(|i| i.name.as_str())
        .collect();
    if results.passed() && missed.is_empty() {
        println!("verdicts match the topology's expect block: PASS");
    } else if results.passed() {
        println!(
            "verdicts match the topology's expect block but for expected violations not reached ({}): PASS (--require-expected fails them)",
            missed.join(", ")
        );
    } else {
        println!("verdicts differ from the topology's expect block: FAIL");
    }
    Ok((results, dir))
}

/// `--junit PATH` checked before the run: not a directory, and its directory exists (a typo
/// is reported now, not after the run).
fn junit_path_usable(p: &Path) -> Result<()> {
    if p.is_dir() {
        bail!("--junit {}: is a directory; give a file path", p.display());
    }
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "--junit {}: the directory {} does not exist",
            p.display(),
            parent.display()
        );
    }
    Ok(())
}
