//! `pgchaos reproduce`: replay a case file on a fresh topology `--times N`, comparing every
//! step with the recorded one (reply, and serving backend symbolically), or regenerate a
//! case from its seed (`--seed`), shrink it as a chaos run would, and replay the result.

use super::{Exit, cpu_for, load, with_schedule};
use crate::check::CaseCheck;
use crate::engine::{self, Sink, run_one};
use crate::history::{CaseView, Phase, symbol};
use crate::launch::{self, LaunchOptions};
use crate::report::casefile::{CaseFile, CaseStep, observed};
use crate::report::topo_label;
use crate::run::{CaseMeta, Runner};
use crate::topology::Topology;
use crate::workload::{self, Step};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
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
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
    /// Start the servers with this launcher instead of the topology's (`native`, `docker`, `external`).
    #[arg(long, value_parser = super::parse_launcher)]
    launcher: Option<crate::topology::LauncherKind>,
    /// Pin the harness and its servers to one CPU: `auto` (the one it runs on), `off`,
    /// or a CPU number. Default: PGCHAOS_CPU, else auto.
    #[arg(long)]
    cpu: Option<String>,
    /// Run cases `sequential` or `concurrent`, whatever the topology's `run.schedule` says.
    #[arg(long)]
    schedule: Option<String>,
}

fn meta(phase: Phase, seed: Option<u64>) -> CaseMeta {
    CaseMeta {
        case: 0,
        seed,
        phase,
        invariant: None,
    }
}

pub async fn reproduce(a: Args) -> Result<Exit> {
    let (topo, case) = match a.seed {
        Some(seed) => regenerated(&a, seed)?,
        None => recorded(&a)?,
    };
    let cpu = cpu_for(&topo, a.cpu.as_deref())?;
    let cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            cpu,
            launcher: a.launcher,
        },
    )
    .await?;
    let runner = Runner::new(&cluster).await?;
    let mut sink = Sink::new(Instant::now(), crate::engine::check_context(&runner), None);
    let mut steps = case.steps();
    let mut chosen: Option<String> = None;
    if let Some(seed) = a.seed {
        // Regenerated: find what it violates and shrink it, as the chaos run would.
        (chosen, steps) =
            shrink_regenerated(&runner, &mut sink, &topo, seed, a.invariant.as_ref(), steps)
                .await?;
    }
    let times = a.times.max(1);
    // A concurrent replay's replies depend on timing: it is judged by its verdicts alone,
    // and reproduces when each wanted invariant is violated in at least the share of
    // replays the shrinker demanded (`shrink_quorum` of `shrink_replays`).
    let concurrent = topo.run.schedule == crate::topology::Schedule::Concurrent;
    let mut rate: BTreeMap<String, u32> = Default::default();
    let mut same_all = 0;
    for attempt in 1..=times {
        let (verdict, _, events) = run_one(
            &runner,
            &mut sink,
            meta(Phase::Replay, a.seed),
            &steps,
            true,
        )
        .await?;
        let view = CaseView::build(&events)?;
        println!("replay {attempt}/{times}:");
        let mut same = compare_steps(&view, &case, &verdict, concurrent, a.seed.is_some());
        let violated = verdict.violated();
        let mut want: Vec<String> = case.expect_violated.clone();
        want.extend(case.invariant.iter().cloned());
        want.extend(chosen.iter().cloned());
        for w in &want {
            *rate.entry(w.clone()).or_default() += u32::from(violated.contains(w));
        }
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
    if concurrent {
        return Ok(concurrent_verdict(&topo, &rate, times));
    }
    println!("reproduced {same_all}/{times} times");
    Ok(if same_all == times {
        Exit::Ok
    } else {
        Exit::Mismatch
    })
}

/// `--seed`: the topology (with `--schedule`) and the case its workload generates from the
/// seed, nothing recorded to compare with.
fn regenerated(a: &Args, seed: u64) -> Result<(Topology, CaseFile)> {
    let topo = with_schedule(load(&a.target)?, a.schedule.as_deref())?;
    let steps = workload::case(&topo.workload, seed);
    let case = CaseFile {
        topology: topo_label(&topo),
        description: Some(format!("regenerated from case seed {seed}")),
        invariant: None,
        expect_violated: vec![],
        case_seed: Some(seed),
        versions: None,
        schedule: None,
        steps: steps
            .into_iter()
            .map(|s| CaseStep {
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
    Ok((topo, case))
}

/// A case file and its topology, in the schedule the case ran in unless `--schedule` says
/// otherwise.
fn recorded(a: &Args) -> Result<(Topology, CaseFile)> {
    let case = CaseFile::load(Path::new(&a.target))?;
    // Recorded relative to the workspace root; else the copy in the case's run
    // directory (`<run>/failures/<invariant>/case.yaml` beside `<run>/topology.yaml`:
    // a matrix's composed topologies move with their matrix); else the name under
    // topologies/.
    let copy = Path::new(&a.target)
        .ancestors()
        .nth(3)
        .map(|run| run.join("topology.yaml"))
        .filter(|p| p.is_file());
    let topo = if Path::new(&case.topology).exists() {
        load(&case.topology)?
    } else if let Some(copy) = copy {
        load(&copy.display().to_string())?
    } else {
        let stem = Path::new(&case.topology)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        load(stem).with_context(|| format!("{}: topology {}", a.target, case.topology))?
    };
    // The schedule the case ran in, unless --schedule says otherwise.
    let flag = a
        .schedule
        .clone()
        .or(case.schedule.map(|s| s.as_str().to_string()));
    Ok((with_schedule(topo, flag.as_deref())?, case))
}

/// A regenerated case run once to find what it violates, then shrunk for `wanted` (else
/// the first invariant it violates) as the chaos run would. Returns that invariant, if
/// any, and the steps to replay.
async fn shrink_regenerated(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    topo: &Topology,
    seed: u64,
    wanted: Option<&String>,
    mut steps: Vec<Step>,
) -> Result<(Option<String>, Vec<Step>)> {
    let (first, _, _) =
        run_one(runner, sink, meta(Phase::Replay, Some(seed)), &steps, false).await?;
    let violated = first.violated();
    let list = if violated.is_empty() {
        "nothing".to_string()
    } else {
        violated.join(", ")
    };
    println!("case seed {seed}: {} steps, violates: {list}", steps.len());
    let chosen = match wanted {
        Some(i) if !violated.contains(i) => {
            bail!("case seed {seed}: does not violate {i} (it violates: {list})")
        }
        Some(i) => Some(i.clone()),
        None => violated.first().cloned(),
    };
    if let Some(inv) = &chosen {
        let deadline = std::time::Instant::now() + topo.run.time_limit;
        let (min, runs) = engine::shrink(
            runner,
            sink,
            0,
            seed,
            inv,
            topo.run.max_shrink_runs,
            Some(deadline),
        )
        .await?;
        println!("shrunk for {inv} to {} steps in {runs} runs", min.len());
        steps = min;
    }
    Ok((chosen, steps))
}

/// Print each replayed step beside the recorded one (reply, serving backend, the
/// invariants flagged at it). Returns whether every step was the same as recorded (a
/// regenerated case, `seeded`, has nothing to differ from; a concurrent one is not compared).
fn compare_steps(
    view: &CaseView,
    case: &CaseFile,
    verdict: &CaseCheck,
    concurrent: bool,
    seeded: bool,
) -> bool {
    let order = view.backend_order();
    let mut same = true;
    for (s, rec) in view.steps.iter().zip(&case.steps) {
        let backend = s.backend().map(|b| symbol(&order, b));
        let got = observed(s).unwrap_or_default();
        let step_same = concurrent
            || rec.observed.as_ref().is_none_or(|o| *o == got)
                && (rec.backend.is_none() || rec.backend == backend);
        same &= step_same || seeded;
        let flagged: Vec<&str> = verdict
            .at_step(s.index)
            .map(|v| v.invariant.as_str())
            .collect();
        println!(
            "  {:>2}. {:<28} {:<22} {:<4} {}{}",
            s.index + 1,
            s.label(),
            got,
            backend.clone().unwrap_or_default(),
            if rec.observed.is_some() && !concurrent {
                if step_same { "same" } else { "DIFFERENT" }
            } else {
                ""
            },
            if flagged.is_empty() {
                String::new()
            } else {
                format!("  [{}]", flagged.join(", "))
            }
        );
        if let (false, Some(o)) = (step_same, &rec.observed) {
            println!(
                "      recorded: {o} on {}",
                rec.backend.clone().unwrap_or_default()
            );
        }
        for v in verdict.at_step(s.index) {
            println!("      {}: {}", v.invariant, v.detail);
        }
    }
    same
}

/// A concurrent replay's verdict: each wanted invariant's rate of violation against the
/// shrinker's bar (`shrink_quorum` of `shrink_replays`), printed.
fn concurrent_verdict(topo: &Topology, rate: &BTreeMap<String, u32>, times: u32) -> Exit {
    let (q, r) = (topo.run.shrink_quorum, topo.run.shrink_replays.max(1));
    let mut ok = true;
    for (inv, k) in rate {
        let enough = u64::from(*k) * u64::from(r) >= u64::from(q) * u64::from(times);
        ok &= enough;
        println!(
            "{inv}: violated in {k}/{times} replays ({}; the shrinker's bar is {q}/{r})",
            if enough {
                "reproduces"
            } else {
                "below the bar"
            }
        );
    }
    println!("concurrent schedule: replies vary with timing; judged by verdicts only");
    if ok { Exit::Ok } else { Exit::Mismatch }
}
