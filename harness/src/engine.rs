//! A chaos run: generate cases from the run seed, run each on the live topology, count
//! violations per invariant, shrink the first failure of each invariant to a minimal case,
//! replay that case once with full evidence, and return the results (no printing, no files:
//! that is `report`'s job).

use crate::runner::{CaseRun, Runner};
use crate::topology::{INVARIANTS, Tier, Verdict};
use crate::workload::{self, Step};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The first failure of an invariant, shrunk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failure {
    pub invariant: String,
    /// Seed of the original failing case (regenerates it: `reproduce --seed`).
    pub case_seed: u64,
    pub case_index: u32,
    pub original: Vec<Step>,
    pub minimal: Vec<Step>,
    pub shrink_runs: u32,
    pub shrink_ms: u64,
    /// The minimal case replayed once with contender probes and snapshots around every step.
    pub evidence: CaseRun,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InvariantResult {
    pub name: String,
    pub tier: String,
    pub verdict: Verdict,
    pub expected: Verdict,
    pub violating_cases: u32,
}

/// Everything a chaos run found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunOutcome {
    pub run_seed: u64,
    pub cases: u32,
    /// Steps executed (not counting skipped ones).
    pub steps: u64,
    pub skipped_steps: u64,
    pub invariants: Vec<InvariantResult>,
    pub failures: Vec<Failure>,
    pub run_ms: u64,
    pub steps_ms: u64,
    pub reset_ms: u64,
    pub shrink_ms: u64,
    pub time_to_first_violation_ms: Option<u64>,
    /// Time from the topology being ready to the first minimal case being shrunk.
    pub time_to_first_minimal_ms: Option<u64>,
    pub stopped_by_time_limit: bool,
    /// The full step history of every case, in order (for `history.jsonl`).
    #[serde(skip)]
    pub history: Vec<(u32, u64, CaseRun)>,
}

impl RunOutcome {
    pub fn passed(&self) -> bool {
        self.invariants.iter().all(|i| i.verdict == i.expected)
    }
}

/// Told of each minimal failure as soon as it is shrunk, with the time since the run began.
pub type OnFailure = Box<dyn Fn(&Failure, Duration) + Send>;

/// Options of one run, after CLI overrides.
pub struct RunOptions {
    pub cases: u32,
    pub seed: u64,
    pub time_limit: Duration,
    pub max_shrink_runs: u32,
    /// Called after each case with (cases done, total, violations so far).
    pub progress: Box<dyn Fn(u32, u32, usize) + Send>,
    /// Called as soon as a failure is shrunk, with the time since the run started.
    pub on_failure: OnFailure,
}

/// Shrink a failing case for one invariant with proptest's value tree; each candidate is
/// re-run on a reset topology. Returns the minimal steps and the number of runs.
pub async fn shrink(
    runner: &Runner<'_>,
    seed: u64,
    invariant: &str,
    max_runs: u32,
) -> Result<(Vec<Step>, u32)> {
    let w = &runner.cluster.topology.workload;
    let mut tree = workload::case_tree(w, seed);
    let mut best = tree.current();
    let mut runs = 0;
    let mut moved = tree.simplify();
    while moved && runs < max_runs {
        runs += 1;
        let candidate = tree.current();
        if runner
            .run_case(&candidate, false)
            .await?
            .violates(invariant)
        {
            best = candidate;
            moved = tree.simplify();
        } else {
            moved = tree.complicate();
        }
    }
    // A last greedy pass: drop single steps proptest kept (it removes from the ends first).
    let mut i = 0;
    while i < best.len() && runs < max_runs {
        let mut candidate = best.clone();
        candidate.remove(i);
        runs += 1;
        if !candidate.is_empty()
            && runner
                .run_case(&candidate, false)
                .await?
                .violates(invariant)
        {
            best = candidate;
        } else {
            i += 1;
        }
    }
    // Name clients in order of first appearance (C1, C2, ...): clients are symmetric, so
    // this only makes the case easier to read; kept if it still fails.
    let relabelled = relabel_clients(&best);
    if relabelled != best && runs < max_runs {
        runs += 1;
        if runner
            .run_case(&relabelled, false)
            .await?
            .violates(invariant)
        {
            best = relabelled;
        }
    }
    Ok((best, runs))
}

/// The same case with clients renumbered in order of first appearance.
pub fn relabel_clients(steps: &[Step]) -> Vec<Step> {
    let mut order: Vec<usize> = vec![];
    for s in steps {
        if !order.contains(&s.client) {
            order.push(s.client);
        }
    }
    steps
        .iter()
        .map(|s| Step {
            client: order.iter().position(|c| *c == s.client).expect("seen"),
            ..s.clone()
        })
        .collect()
}

pub async fn run(runner: &Runner<'_>, opts: RunOptions) -> Result<RunOutcome> {
    let topo = &runner.cluster.topology;
    let t0 = Instant::now();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut failures: Vec<Failure> = vec![];
    let mut out = RunOutcome {
        run_seed: opts.seed,
        cases: 0,
        steps: 0,
        skipped_steps: 0,
        invariants: vec![],
        failures: vec![],
        run_ms: 0,
        steps_ms: 0,
        reset_ms: 0,
        shrink_ms: 0,
        time_to_first_violation_ms: None,
        time_to_first_minimal_ms: None,
        stopped_by_time_limit: false,
        history: vec![],
    };
    let mut steps_us = 0u64;
    let mut reset_us = 0u64;
    for index in 0..opts.cases {
        if t0.elapsed() > opts.time_limit {
            out.stopped_by_time_limit = true;
            break;
        }
        let seed = workload::case_seed(opts.seed, index);
        let steps = workload::case_tree(&topo.workload, seed).current();
        let run = runner.run_case(&steps, false).await?;
        out.cases += 1;
        // `steps` counts executed steps only: a skipped step costs nothing and must not
        // flatter the throughput.
        let skipped = run
            .steps
            .iter()
            .filter(|s| matches!(s.reply, crate::client::Reply::Skipped { .. }))
            .count() as u64;
        out.steps += run.steps.len() as u64 - skipped;
        out.skipped_steps += skipped;
        steps_us += run.steps_us;
        reset_us += run.reset_us;
        for inv in run.violated() {
            if out.time_to_first_violation_ms.is_none() {
                out.time_to_first_violation_ms = Some(t0.elapsed().as_millis() as u64);
            }
            *counts.entry(inv.clone()).or_default() += 1;
            if !failures.iter().any(|f| f.invariant == inv) {
                let ts = Instant::now();
                let (minimal, shrink_runs) =
                    shrink(runner, seed, &inv, opts.max_shrink_runs).await?;
                let evidence = runner.run_case(&minimal, true).await?;
                let shrink_ms = ts.elapsed().as_millis() as u64;
                out.shrink_ms += shrink_ms;
                if out.time_to_first_minimal_ms.is_none() {
                    out.time_to_first_minimal_ms = Some(t0.elapsed().as_millis() as u64);
                }
                let failure = Failure {
                    invariant: inv.clone(),
                    case_seed: seed,
                    case_index: index,
                    original: steps.clone(),
                    minimal,
                    shrink_runs,
                    shrink_ms,
                    evidence,
                };
                (opts.on_failure)(&failure, t0.elapsed());
                failures.push(failure);
            }
        }
        out.history.push((index, seed, run));
        (opts.progress)(out.cases, opts.cases, counts.len());
    }
    out.invariants = INVARIANTS
        .iter()
        .map(|(name, tier, _)| {
            let n = counts.get(*name).copied().unwrap_or(0);
            InvariantResult {
                name: name.to_string(),
                tier: match tier {
                    Tier::Pg => "pg".into(),
                    Tier::App => "app".into(),
                },
                verdict: if n > 0 {
                    Verdict::Violated
                } else {
                    Verdict::Holds
                },
                expected: topo.expected(name),
                violating_cases: n,
            }
        })
        .collect();
    out.failures = failures;
    out.run_ms = t0.elapsed().as_millis() as u64;
    out.steps_ms = steps_us / 1000;
    out.reset_ms = reset_us / 1000;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Op;

    #[test]
    fn clients_are_renumbered_in_order_of_first_appearance() {
        let s = |client, op| Step {
            client,
            op,
            key: None,
        };
        let case = vec![s(2, Op::Begin), s(0, Op::Begin), s(2, Op::Commit)];
        let r = relabel_clients(&case);
        assert_eq!(
            r.iter().map(|s| s.client).collect::<Vec<_>>(),
            vec![0, 1, 0]
        );
        assert_eq!(
            r.iter().map(|s| s.op).collect::<Vec<_>>(),
            vec![Op::Begin, Op::Begin, Op::Commit]
        );
    }
}
