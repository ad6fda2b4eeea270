//! `pgchaos chaos TOPOLOGY`: launch, run the chaos loop with the history streaming into the
//! report directory, write the report, print the verdict table.

use super::{Exit, cpu_for, load, parse_duration, with_schedule};
use crate::engine::{self, RunOptions, Sink};
use crate::history::{self, Body, HistoryWriter, RunEnd};
use crate::launch::{self, LaunchOptions};
use crate::report::results::HistoryOut;
use crate::report::terminal::{Progress, verdict_table};
use crate::report::{self, Results, RunDir, junit};
use crate::run::Runner;
use crate::workload;
use anyhow::{Context, Result, anyhow, bail};
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
    /// Start the servers with this launcher instead of the topology's (`native`, `docker`).
    #[arg(long, value_parser = super::parse_launcher)]
    launcher: Option<crate::topology::LauncherKind>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Pin the harness and its servers to one CPU: `auto` (the one it runs on), `off`,
    /// or a CPU number. Default: PGCHAOS_CPU, else auto.
    #[arg(long)]
    cpu: Option<String>,
    /// Cap on shrink replays (the topology's `run.max_shrink_runs`; 0: no shrinking, the
    /// failing case itself is replayed with evidence).
    #[arg(long)]
    max_shrink_runs: Option<u32>,
    /// Run cases `sequential` or `concurrent`, whatever the topology's `run.schedule` says.
    #[arg(long)]
    schedule: Option<String>,
    /// Also write the verdicts as JUnit XML to this file (a test case per invariant, failed
    /// when its verdict differs from `expect`), once the report directory is in place.
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
}

pub async fn chaos(a: Args) -> Result<Exit> {
    let topo = with_schedule(load(&a.topology)?, a.schedule.as_deref())?;
    let seed = match a.seed.as_deref().map(str::trim) {
        None => topo.run.seed.unwrap_or_else(workload::random_seed),
        Some("random") => workload::random_seed(),
        Some(s) => s
            .parse()
            .map_err(|_| anyhow!("--seed {s:?}: expected a non-negative integer or `random`"))?,
    };
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
    let cpu = cpu_for(&topo, a.cpu.as_deref())?;
    if let Some(p) = &a.junit {
        junit_path_usable(p)?;
    }
    // The report directory first: a bad --out fails before anything starts.
    let run_dir = RunDir::create(&a.out, &topo.name, seed)?;
    let cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            cpu,
            launcher: a.launcher,
        },
    )
    .await?;
    let label = report::topo_label(&topo);
    eprintln!(
        "pgchaos: {} ready in {} ms; seed {seed}; {cases} cases; {}; versions PG {} {} {}{}",
        topo.name,
        cluster.ready_ms,
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
    );
    let runner = Runner::new(&cluster).await?;
    let topo_copy = run_dir.path().join("topology.yaml");
    std::fs::write(&topo_copy, &topo.text)
        .with_context(|| format!("{}: writing", topo_copy.display()))?;
    // The writer thread stays on the run's CPU: measured, a writer on the other vCPU slowed
    // the pinned one (reset 270 -> 500 ms per 64 cases), compressing here costs ~1%.
    let writer = HistoryWriter::create(&run_dir.path().join(history::store::FILE))?;
    let header = runner.header(seed, &label);
    let mut sink = Sink::new(Instant::now(), runner.check_context(), Some(&writer));
    sink.rec.emit(Body::Run(Box::new(header.clone())));
    sink.write_loose()?;
    let progress = Progress::new(cases, a.quiet, &label);
    let outcome = engine::run(
        &runner,
        &mut sink,
        &RunOptions {
            cases,
            seed,
            time_limit,
            shrink_time,
            max_shrink_runs: a.max_shrink_runs.unwrap_or(topo.run.max_shrink_runs),
        },
        &mut |e| progress.event(e),
    )
    .await?;
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
        &topo,
        &header,
        &tally,
        outcome.stopped_by_time_limit,
        outcome.run_ms,
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
        &topo,
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
            "  {}: minimal case {} steps -> pgchaos reproduce {}/failures/{}/case.yaml",
            f.invariant,
            f.minimal().map(|m| m.len()).unwrap_or(0),
            dir.display(),
            f.invariant
        );
    }
    println!("report: {}", dir.join("report.md").display());
    println!("html: {}", dir.join("report.html").display());
    if let Some(p) = &a.junit {
        let xml = junit::junit_xml(
            &format!("pgchaos.{}", results.topology),
            &junit::from_results(&results, &dir),
        );
        std::fs::write(p, xml).with_context(|| {
            format!(
                "--junit {}: cannot write the JUnit XML (the run's report is in {})",
                p.display(),
                dir.display()
            )
        })?;
        println!("junit: {}", p.display());
    }
    if results.pg_violated() {
        println!(
            "!!! a pg.* invariant was violated: PostgreSQL, the pooler or pgchaos is wrong. Read the report."
        );
    }
    if results.passed() {
        println!("verdicts match the topology's expect block: PASS");
        Ok(Exit::Ok)
    } else {
        println!("verdicts differ from the topology's expect block: FAIL");
        Ok(Exit::Mismatch)
    }
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
