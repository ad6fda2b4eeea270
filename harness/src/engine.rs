//! The chaos loop, Jepsen's `core/run!`: generate cases from the run seed, run each on the
//! live topology (`run`), have the checker judge its recorded events (`check`), hand them to
//! the history writer, shrink the first failure of each invariant to a minimal case (every
//! candidate recorded and judged the same way), and replay that case once with full
//! evidence. [`ShrinkChoice`] can leave failures unshrunk (`--shrink-only`, `--shrink
//! once`): their failing case is kept as it ran (in the concurrent schedule it is its own
//! evidence). Progress and findings go out as [`RunEvent`]s; printing and files are the
//! reporters' business.
//!
//! May import `run`, `check`, `history`, `workload`, `topology`; `report` and `cli` import it.

use crate::check::{self, CaseCheck, CheckContext, FirstFailure, Tally};
use crate::history::{CaseView, Event, HistoryWriter, Phase, Recorder};
use crate::run::{CaseMeta, Runner};
use crate::topology::Schedule;
use crate::workload::{self, Step};
use anyhow::Result;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What the checker needs to judge a runner's cases: its pooling rules and bounds, the
/// topology's timeouts and search budget.
pub fn check_context(runner: &Runner<'_>) -> CheckContext {
    CheckContext {
        rules: runner.rules.clone(),
        bounds: runner.bounds(),
        timeouts: runner.cluster.topology.timeouts(),
        budget: runner.budget().into(),
        client_time: false,
    }
}

/// Options of one run, after CLI overrides.
pub struct RunOptions {
    pub cases: u32,
    pub seed: u64,
    /// For the generated cases (shrinking does not count against it).
    pub time_limit: Duration,
    /// For shrinking and evidence, over the run.
    pub shrink_time: Duration,
    pub max_shrink_runs: u32,
    /// Which failures to shrink (default: every one).
    pub shrink: ShrinkChoice,
}

/// Which of a run's failures are shrunk. A failure not shrunk keeps its failing case as it
/// ran: in the concurrent schedule that case is its own evidence (it recorded everything a
/// replay would); in the sequential one it is replayed once with evidence.
#[derive(Clone, Debug, Default)]
pub struct ShrinkChoice {
    /// `None`: every invariant. `Some(groups)`: only these, and of each group the first
    /// violated (one minimal case suffices for all of a group: `chaos --shrink-only
    /// 'a|b,c'`). `pg.*` invariants are always shrunk.
    pub only: Option<Vec<Vec<String>>>,
    /// Shrunk already (in an earlier seed's run, `chaos --seeds --shrink once`): not again.
    pub done: BTreeSet<String>,
}

impl ShrinkChoice {
    /// Whether to shrink `inv`, given what was shrunk already in this run.
    pub fn wants(&self, inv: &str, here: &BTreeSet<String>) -> bool {
        if self.done.contains(inv) {
            return false;
        }
        if inv.starts_with("pg.") {
            return true;
        }
        let Some(groups) = &self.only else {
            return true;
        };
        groups.iter().any(|g| {
            g.iter().any(|m| m == inv)
                && !g.iter().any(|m| self.done.contains(m) || here.contains(m))
        })
    }

    /// `a|b,c`: groups of invariant names (checked against the catalog).
    pub fn parse_only(s: &str) -> Result<Vec<Vec<String>>> {
        let known: Vec<&str> = check::catalog().iter().map(|i| i.name).collect();
        let mut groups = vec![];
        for g in s.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let mut names = vec![];
            for n in g.split('|').map(str::trim) {
                if !known.contains(&n) {
                    anyhow::bail!(
                        "--shrink-only: unknown invariant {n:?} (invariants: {})",
                        known.join(", ")
                    );
                }
                names.push(n.to_string());
            }
            groups.push(names);
        }
        if groups.is_empty() {
            anyhow::bail!("--shrink-only {s:?}: name at least one invariant");
        }
        Ok(groups)
    }
}

/// What a run tells its reporters as it goes.
pub enum RunEvent<'a> {
    /// A generated case is done.
    CaseDone {
        done: u32,
        total: u32,
        violated: usize,
    },
    /// A minimal case was shrunk and replayed with evidence.
    Minimal {
        failure: &'a FirstFailure,
        at: Duration,
    },
}

/// Where a run's events go: the checker's tally and the history file.
pub struct Sink<'w> {
    pub rec: Recorder,
    pub tally: Tally,
    pub writer: Option<&'w HistoryWriter>,
    cx: check::CheckContext,
}

impl<'w> Sink<'w> {
    pub fn new(t0: Instant, cx: check::CheckContext, writer: Option<&'w HistoryWriter>) -> Self {
        Sink {
            rec: Recorder::new(t0),
            tally: Tally::default(),
            writer,
            cx,
        }
    }

    /// Judge the case just recorded, add it up, and pass its events to the writer. Returns
    /// the verdict, the invariants it violates for the first time in the run, and the events
    /// (empty when a writer took them: they are not copied).
    pub fn case_done(&mut self) -> Result<(CaseCheck, Vec<String>, Vec<Event>)> {
        let events = self.rec.take();
        let view = CaseView::build(&events)?;
        let verdict = check::check_view(&self.cx, &view, &events);
        let fresh = self.tally.add(&view, &events, &verdict);
        drop(view);
        match self.writer {
            Some(w) => {
                w.write(events)?;
                Ok((verdict, fresh, vec![]))
            }
            None => Ok((verdict, fresh, events)),
        }
    }

    /// The tally, once the run is over (releases the writer).
    pub fn into_tally(self) -> Tally {
        self.tally
    }

    /// Write events that belong to no case (`run`, `run_end`).
    pub fn write_loose(&mut self) -> Result<()> {
        let events = self.rec.take();
        if let Some(w) = self.writer {
            w.write(events)?;
        }
        Ok(())
    }
}

/// Run one case and judge it.
pub async fn run_one(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    meta: CaseMeta,
    steps: &[Step],
    evidence: bool,
) -> Result<(CaseCheck, Vec<String>, Vec<Event>)> {
    match runner.schedule {
        Schedule::Sequential => {
            runner
                .run_case(&mut sink.rec, meta, steps, evidence)
                .await?
        }
        Schedule::Concurrent => {
            runner
                .run_case_concurrent(&mut sink.rec, meta, steps)
                .await?
        }
    }
    sink.case_done()
}

/// Shrink a failing case for one invariant ([`workload::shrink`]); each candidate is run on
/// a reset topology, recorded (phase `shrink`) and judged by the checker. In the concurrent
/// schedule a failure depends on timing, so a candidate is replayed up to
/// `run.shrink_replays` times and counts as failing once `run.shrink_quorum` of them fail
/// (it stops early either way). Returns the minimal steps and the number of runs.
pub async fn shrink(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    case: u32,
    seed: u64,
    invariant: &str,
    max_runs: u32,
    deadline: Option<Instant>,
) -> Result<(Vec<Step>, u32)> {
    let topo = &runner.cluster.topology;
    let (replays, quorum) = replays(runner);
    // Past the run's time limit, the remaining candidates are not run (they count as
    // passing, so the smallest failing case so far is the minimal one) and not counted.
    let skipped = std::cell::Cell::new(0u32);
    let (minimal, runs) = workload::shrink(
        &topo.workload,
        seed,
        max_runs,
        async |candidate: &[Step]| {
            if deadline.is_some_and(|d| Instant::now() > d) {
                skipped.set(skipped.get() + 1);
                return Ok(false);
            }
            let (mut failed, mut ran) = (0, 0);
            while ran < replays && failed < quorum && quorum - failed <= replays - ran {
                let meta = replay_meta(case, seed, Phase::Shrink, invariant);
                let (verdict, _, _) = run_one(runner, sink, meta, candidate, false).await?;
                ran += 1;
                failed += u32::from(verdict.violates(invariant));
            }
            Ok(failed >= quorum)
        },
    )
    .await?;
    Ok((minimal, runs - skipped.get()))
}

/// `(replays, quorum)` of a shrink candidate: one run decides in the sequential schedule;
/// concurrent, `run.shrink_replays` and `run.shrink_quorum`.
fn replays(runner: &Runner<'_>) -> (u32, u32) {
    let run = &runner.cluster.topology.run;
    match runner.schedule {
        Schedule::Sequential => (1, 1),
        Schedule::Concurrent => (run.shrink_replays.max(1), run.shrink_quorum),
    }
}

/// A shrink candidate's or an evidence replay's case metadata.
fn replay_meta(case: u32, seed: u64, phase: Phase, invariant: &str) -> CaseMeta {
    CaseMeta {
        case,
        seed: Some(seed),
        phase,
        invariant: Some(invariant.to_string()),
    }
}

/// Replay the minimal case with full evidence (phase `evidence`). In the concurrent
/// schedule, up to `run.shrink_replays` times until one replay shows the violation: the
/// report shows a replay that fails when there is one.
pub async fn evidence(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    case: u32,
    seed: u64,
    invariant: &str,
    minimal: &[Step],
) -> Result<()> {
    for _ in 0..replays(runner).0 {
        let meta = replay_meta(case, seed, Phase::Evidence, invariant);
        let (verdict, _, _) = run_one(runner, sink, meta, minimal, true).await?;
        if verdict.violates(invariant) {
            break;
        }
    }
    Ok(())
}

/// What a chaos run adds to the tally: whether the time limit cut it short, and its time.
pub struct RunOutcome {
    pub stopped_by_time_limit: bool,
    pub run_ms: u64,
}

pub async fn run(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    opts: &RunOptions,
    events: &mut dyn FnMut(RunEvent),
) -> Result<RunOutcome> {
    let topo = &runner.cluster.topology;
    let t0 = Instant::now();
    let mut stopped = false;
    // Time spent shrinking and replaying evidence: generated cases get the whole time limit,
    // so a run judges as many cases whatever its failures cost to shrink.
    let mut shrinking = Duration::ZERO;
    // Invariants shrunk so far in this run.
    let mut here = BTreeSet::new();
    for index in 0..opts.cases {
        if t0.elapsed().saturating_sub(shrinking) > opts.time_limit {
            stopped = true;
            break;
        }
        let seed = workload::case_seed(opts.seed, index);
        let steps = workload::case(&topo.workload, seed);
        let meta = CaseMeta {
            case: index,
            seed: Some(seed),
            phase: Phase::Run,
            invariant: None,
        };
        let (_, fresh, _) = run_one(runner, sink, meta, &steps, false).await?;
        for inv in fresh {
            let t_shrink = Instant::now();
            let max_runs = if opts.shrink.wants(&inv, &here) {
                here.insert(inv.clone());
                opts.max_shrink_runs
            } else {
                0
            };
            // Unshrunk in the concurrent schedule: the case as it ran is the evidence (it
            // recorded everything a replay would, and it is the run that failed).
            if max_runs > 0 || runner.schedule == Schedule::Sequential {
                let left = opts.shrink_time.saturating_sub(shrinking);
                let (minimal, _) = shrink(
                    runner,
                    sink,
                    index,
                    seed,
                    &inv,
                    max_runs,
                    Some(t_shrink + left),
                )
                .await?;
                evidence(runner, sink, index, seed, &inv, &minimal).await?;
            }
            shrinking += t_shrink.elapsed();
            if let Some(f) = sink.tally.failure(&inv) {
                events(RunEvent::Minimal {
                    failure: f,
                    at: t0.elapsed(),
                });
            }
        }
        events(RunEvent::CaseDone {
            done: sink.tally.cases,
            total: opts.cases,
            violated: sink.tally.violating_cases.len(),
        });
    }
    Ok(RunOutcome {
        stopped_by_time_limit: stopped,
        run_ms: t0.elapsed().as_millis() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrink_choice_takes_one_invariant_per_group_once() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let all = ShrinkChoice::default();
        assert!(all.wants("app.no_orphans", &set(&[])));
        let only = ShrinkChoice {
            only: Some(
                ShrinkChoice::parse_only("app.mutual_exclusion|app.applied_once, app.no_orphans")
                    .unwrap(),
            ),
            done: BTreeSet::new(),
        };
        assert!(only.wants("app.applied_once", &set(&[])));
        assert!(!only.wants("app.applied_once", &set(&["app.mutual_exclusion"])));
        assert!(
            !only.wants("app.unlock_reaches_owner", &set(&[])),
            "not listed"
        );
        assert!(only.wants("pg.exclusion", &set(&[])), "pg.* always");
        let later = ShrinkChoice {
            done: set(&["app.applied_once", "app.no_orphans"]),
            ..only.clone()
        };
        assert!(
            !later.wants("app.mutual_exclusion", &set(&[])),
            "group done earlier"
        );
        assert!(!later.wants("app.no_orphans", &set(&[])));
        let e = ShrinkChoice::parse_only("app.nope")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown invariant \"app.nope\""), "{e}");
        assert!(ShrinkChoice::parse_only(" , ").is_err());
    }
}
