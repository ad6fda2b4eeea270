//! `pgchaos analyze RUN_DIR`: re-check a stored history with the current checker, against
//! the topology the run recorded (`topology.yaml` in the run directory), or `--as` another
//! topology's declared rules and expectations ("would this history pass under my config?"),
//! and print and write the verdict table (into `RUN_DIR/analysis/`, or `--out`). Exit codes
//! as `chaos`.

use super::Exit;
use crate::check;
use crate::history::HistoryReader;
use crate::report::terminal::verdict_table;
use crate::report::{self, Results};
use crate::topology::Topology;
use anyhow::{Context, Result, anyhow};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (with history.jsonl.gz and topology.yaml), or a topology name meaning
    /// its latest run.
    run: String,
    /// Where to write the analysis (default: RUN_DIR/analysis).
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, default_value = "reports")]
    reports: PathBuf,
    /// Judge the history by another topology's pooling rules, timeouts and expectations (a
    /// topology name or file): a transaction-mode history as if session mode had been declared.
    #[arg(long = "as", value_name = "TOPOLOGY")]
    as_topology: Option<String>,
    /// The search's budget per case: states held at once (default: the run's).
    #[arg(long)]
    search_states: Option<usize>,
    /// ... the model's work per case (default: the run's; what decides, on any machine).
    #[arg(long)]
    search_work: Option<u64>,
    /// ... and wall-clock time per case, a safety net, e.g. 30s (default: the run's).
    #[arg(long)]
    search_time: Option<String>,
    /// Print the violations found (every pg.* one, the first hundred app.* ones): phase, case,
    /// step, invariant and evidence.
    #[arg(long)]
    list: bool,
    /// Judge by client time alone, ignoring the servers' times a history of format 3 carries
    /// (what they add to the checker's power, measured on the same history).
    #[arg(long)]
    client_time: bool,
    /// An expected violation no case reached fails the analysis (the run's own choice, in
    /// its results.json, is kept either way).
    #[arg(long)]
    require_expected: bool,
}

pub fn analyze(a: Args) -> Result<Exit> {
    let dir = run_dir(&a.run, &a.reports)?;
    let topo_path = dir.join("topology.yaml");
    let text = std::fs::read_to_string(&topo_path)
        .with_context(|| format!("{}: cannot read the run's topology", topo_path.display()))?;
    let recorded =
        Topology::parse(&text, &topo_path, &crate::catalog()).map_err(|e| anyhow!("{e}"))?;
    let topo = match &a.as_topology {
        Some(t) => super::load(t)?,
        None => recorded,
    };
    let search_time = match &a.search_time {
        Some(s) => Some(
            crate::topology::parse_duration(s)
                .ok_or_else(|| anyhow!("--search-time {s}: not a duration (e.g. 2s, 500ms)"))?,
        ),
        None => None,
    };
    let as_rules = a
        .as_topology
        .as_ref()
        .map(|_| (crate::pooler::rules_for(&topo), topo.timeouts()));
    let list = a.list;
    let mut listed = 0u32;
    let checked = check::check_history_with(
        HistoryReader::open(&dir)?,
        |h| {
            let mut cx = check::CheckContext::of(h);
            if let Some((rules, timeouts)) = &as_rules {
                cx.rules = rules.clone();
                cx.timeouts = timeouts.clone();
            }
            if let Some(n) = a.search_states {
                cx.budget.max_states = n;
            }
            if let Some(n) = a.search_work {
                cx.budget.max_work = n;
            }
            if let Some(t) = search_time {
                cx.budget.max_time = t;
            }
            cx.client_time = a.client_time;
            cx
        },
        |view, check| {
            if list {
                // Every pg.* violation; app.* ones up to a hundred.
                for v in &check.violations {
                    if !v.invariant.starts_with("pg.") {
                        if listed >= 100 {
                            continue;
                        }
                        listed += 1;
                    }
                    println!(
                        "{:?} case {} step {}: {}: {}",
                        view.start.phase,
                        view.start.case,
                        v.step + 1,
                        v.invariant,
                        v.detail
                    );
                }
                if let Some(u) = &check.unknown {
                    println!(
                        "{:?} case {}: unknown ({u})",
                        view.start.phase, view.start.case
                    );
                }
            }
        },
    )?;
    let run_ms = checked
        .run_end
        .as_ref()
        .map(|e| e.run_ms)
        .unwrap_or(checked.run_ns / 1_000_000);
    let stopped = checked
        .run_end
        .as_ref()
        .is_some_and(|e| e.stopped_by_time_limit);
    let require_expected =
        a.require_expected || Results::load(&dir).is_ok_and(|r| r.require_expected);
    let results = Results::build(
        &topo,
        &checked.header,
        &checked.tally,
        stopped,
        run_ms,
        require_expected,
    );
    let out = a.out.unwrap_or_else(|| dir.join("analysis"));
    let tmp = out.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("{}: creating", tmp.display()))?;
    let written =
        report::write_report(&tmp, &dir, &topo, &checked.header, &results, &checked.tally);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(&out);
    std::fs::rename(&tmp, &out)
        .with_context(|| format!("moving {} to {}", tmp.display(), out.display()))?;
    println!("{}", verdict_table(&results));
    for n in crate::report::terminal::verdict_notes(&results) {
        println!("{n}");
    }
    if let Some(t) = &a.as_topology {
        println!(
            "judged as {t}: its pooling rules, timeouts and expectations, not the ones the run declared"
        );
    }
    if checked.run_end.is_none() {
        println!("note: the history ends without a `run_end` event: the run was cut short");
    }
    println!(
        "analysed {} cases ({} events of phase run, shrink and evidence) from {}; written to {}",
        results.cases,
        checked.events,
        dir.display(),
        out.display()
    );
    if results.pg_violated() {
        println!(
            "!!! a pg.* invariant was violated: read {}/report.md",
            out.display()
        );
    }
    Ok(if results.passed() {
        Exit::Ok
    } else {
        Exit::Mismatch
    })
}

/// A run directory, or a topology name meaning `reports/<name>/latest`.
pub fn run_dir(arg: &str, reports: &Path) -> Result<PathBuf> {
    let p = PathBuf::from(arg);
    if p.join(crate::history::store::FILE).is_file() {
        return Ok(p);
    }
    let latest = reports.join(arg).join("latest");
    if latest.join(crate::history::store::FILE).is_file() {
        return Ok(latest);
    }
    Err(anyhow!(
        "{arg}: not a run directory with a history ({} missing), nor a topology with a run under {}",
        p.join(crate::history::store::FILE).display(),
        reports.display()
    ))
}
