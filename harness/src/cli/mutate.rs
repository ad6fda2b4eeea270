//! `pgchaos mutate RUN`: measure the checker's power on a stored history, as Jepsen tests its
//! checkers. Each generated case is edited once per kind of edit (`check::mutate`), in a place
//! where the edit is certainly impossible, and judged again: the table gives, per kind, the
//! cases that could take the edit and the share the checker caught (a `pg.*` violation).
//! `--as TOPOLOGY` instead judges every case by another topology's pooling rules and counts
//! how many of the cases that difference affects (decided from the history alone) are
//! flagged. Exit 0; 1 when a share is below `--min` (percent).

use super::Exit;
use crate::check::mutate::{self, cases, measure, measure_as};
use crate::history::{Body, Event};
use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (with history.jsonl.gz), or a topology name meaning its latest run.
    run: String,
    #[arg(long, default_value = "reports")]
    reports: std::path::PathBuf,
    /// Judge by another topology's pooling rules instead of editing the history.
    #[arg(long = "as", value_name = "TOPOLOGY")]
    as_topology: Option<String>,
    /// Exit 1 when a kind's share caught (or flagged) is below this percentage.
    #[arg(long)]
    min: Option<f64>,
    /// Print every edit the checker did not catch (case, kind, where).
    #[arg(long)]
    misses: bool,
    /// Also write each edited case as a run directory of its own (DIR/<kind>/case-N/, with
    /// the run's topology.yaml), for another build's `analyze` to judge.
    #[arg(long, value_name = "DIR")]
    write: Option<std::path::PathBuf>,
    /// Judge by client time alone, ignoring the servers' times (as `analyze --client-time`).
    #[arg(long)]
    client_time: bool,
}

pub fn mutate(a: Args) -> Result<Exit> {
    let dir = super::analyze::run_dir(&a.run, &a.reports)?;
    let path = dir.join(crate::history::store::FILE);
    let (mut cx, header, cases) = cases(&path)?;
    cx.client_time = a.client_time;
    let schedule = cases
        .first()
        .and_then(|c| c[0].case_start())
        .map(|s| s.schedule.as_str())
        .unwrap_or("sequential");
    let mut low = false;
    if let Some(t) = &a.as_topology {
        let topo = super::load(t)?;
        let mut to = cx.clone();
        to.rules = crate::pooler::rules_for(&topo);
        to.timeouts = topo.timeouts();
        match measure_as(&cx, &to, &cases)? {
            None => println!(
                "{} ({schedule}) judged as {}: a difference of settings this does not measure",
                header.topology, topo.name
            ),
            Some(c) => {
                println!(
                    "{} ({schedule}) judged as {}: {} of {} affected cases flagged ({:.1}%)",
                    header.topology,
                    topo.name,
                    c.caught,
                    c.cases,
                    c.share()
                );
                low |= a.min.is_some_and(|m| c.cases > 0 && c.share() < m);
            }
        }
    } else {
        println!(
            "{} ({schedule}, {} generated cases): edits caught by the checker",
            header.topology,
            cases.len()
        );
        let head = Event {
            t: 0,
            body: Body::Run(Box::new(header.clone())),
        };
        let write = |kind: mutate::Kind, edited: &[Event]| -> Result<()> {
            let Some(root) = &a.write else {
                return Ok(());
            };
            let n = edited[0].case_start().map(|s| s.case).unwrap_or(0);
            let slug: String = format!("{kind:?}").to_lowercase();
            let d = root.join(slug).join(format!("case-{n}"));
            std::fs::create_dir_all(&d).with_context(|| format!("{}: creating", d.display()))?;
            std::fs::copy(dir.join("topology.yaml"), d.join("topology.yaml"))
                .with_context(|| format!("{}: copying the run's topology", d.display()))?;
            let w = crate::history::HistoryWriter::create(&d.join(crate::history::store::FILE))?;
            w.write(vec![head.clone()])?;
            w.write(edited.to_vec())?;
            w.finish()?;
            Ok(())
        };
        println!(
            "  (clear: the cases where no op of unknown place, such as DISCARD ALL, a timeout \
             or a fault of the servers, overlaps or follows the edited op or the op of its key \
             on its backend before it)"
        );
        for (kind, c) in measure(&cx, &cases, a.misses, write)? {
            println!(
                "  {:45} {:>4} of {:>4} cases  {:>5.1}%   clear {:>4} of {:>4}  {:>5.1}%",
                kind.name(),
                c.caught,
                c.cases,
                c.share(),
                c.clear_caught,
                c.clear,
                c.clear_share()
            );
            low |= a.min.is_some_and(|m| c.cases > 0 && c.share() < m);
        }
    }
    Ok(if low { Exit::Mismatch } else { Exit::Ok })
}
