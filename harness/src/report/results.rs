//! `results.json` as a type: what a run (or `analyze`) found, serialised once and read back
//! by `compare` and the tests. Built from the checker's [`Tally`], the run's header and the
//! topology's expectations only, so `chaos` and `analyze` produce the same table.

use crate::check::{InvariantVerdict, Tally};
use crate::history::RunHeader;
use crate::topology::Topology;
use crate::vocab::{Tier, Verdict};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub topology: String,
    pub topology_file: String,
    /// `none` or `pgbouncer`.
    #[serde(default)]
    pub pooler: String,
    pub pool_mode: Option<String>,
    /// The launcher that started the servers (`native`, `docker`).
    #[serde(default)]
    pub launcher: String,
    pub versions: VersionsOut,
    pub version_drift: Vec<String>,
    pub cpu: CpuOut,
    pub seed: u64,
    pub cases: u32,
    /// Executed steps of generated cases (skipped ones are not counted).
    pub steps: u64,
    pub skipped_steps: u64,
    pub stopped_by_time_limit: bool,
    /// How cases ran (`sequential`, `concurrent`).
    #[serde(default)]
    pub schedule: String,
    /// Generated cases in which something was judged and the search kept to its budget.
    #[serde(default)]
    pub judged_cases: u32,
    /// What the verdicts rest on: operations judged by op, looks and probes.
    #[serde(default)]
    pub judged: crate::check::Judged,
    /// Why searches ran out of budget (the first few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_why: Vec<String>,
    /// `pg.*` violations seen in shrink and evidence replays (they fail the run too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay_violations: Vec<ReplayViolation>,
    /// `--require-expected`: an expected violation the run did not reach fails it (without
    /// it, such an invariant is reported as not reached and the run may still pass).
    #[serde(default)]
    pub require_expected: bool,
    pub passed: bool,
    pub invariants: Vec<InvariantResult>,
    pub timing: Timing,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryOut>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionsOut {
    pub postgres: String,
    pub postgres_declared: String,
    pub postgres_full: String,
    #[serde(alias = "pgbouncer")]
    pub pooler: Option<String>,
    #[serde(alias = "pgbouncer_declared")]
    pub pooler_declared: Option<String>,
    /// Where the pooler's binary was built from (its cache entry's record): provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler_built_from: Option<String>,
    /// The SHA-256 of the source tarball the pooler's binary was built from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler_tarball_sha256: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuOut {
    pub pinned: Option<usize>,
    pub online: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvariantResult {
    pub name: String,
    pub tier: Tier,
    pub verdict: Verdict,
    pub expected: Verdict,
    pub violating_cases: u32,
    /// Cases in which the search ran out of budget and this invariant was not violated.
    #[serde(default)]
    pub unknown_cases: u32,
    /// How many operations that exercise it were judged.
    #[serde(default)]
    pub exercised: u64,
    /// What the verdict rests on, when it is not plain ("rests on nothing", "unknown in 3 of
    /// 64 cases", "not exercised by this workload").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The indices of the violating generated cases, and of the unknown ones.
    #[serde(default)]
    pub violating: Vec<u32>,
    #[serde(default)]
    pub unknown: Vec<u32>,
    pub first_failure: Option<FailureOut>,
    /// The share of cases (percent) that violated it in the runs its expectation comes from
    /// (`violated ~5%` in the topology), when the file gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_rate: Option<f64>,
}

impl InvariantResult {
    /// Expected violated, and no case violated it: a shorter or luckier run than the one the
    /// expectation came from.
    pub fn not_reached(&self) -> bool {
        self.expected == Verdict::Violated && self.verdict == Verdict::Holds
    }

    /// It fails the run: its verdict is not the expected one, unless it is an expected
    /// violation not reached and the run does not require those.
    pub fn fails(&self, require_expected: bool) -> bool {
        !self.verdict.meets(self.expected) && (require_expected || !self.not_reached())
    }

    /// `not reached in 32 cases (expected at about 5% of cases: 32 cases miss it 19% of
    /// the time)`.
    pub fn not_reached_note(&self, cases: u32) -> String {
        match self.expected_rate {
            Some(r) => format!(
                "not reached in {cases} cases (expected at about {r}% of cases: {cases} cases miss it {:.0}% of the time)",
                (1.0 - r / 100.0).powi(cases as i32) * 100.0
            ),
            None => format!(
                "not reached in {cases} cases (the topology gives no rate: `violated ~R%` in its expect block)"
            ),
        }
    }
}

/// A `pg.*` violation seen while shrinking or replaying the evidence of a failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayViolation {
    pub phase: String,
    pub case: u32,
    pub invariant: String,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureOut {
    pub case_file: String,
    pub case_seed: Option<u64>,
    pub case_index: u32,
    pub minimal_steps: usize,
    pub original_steps: usize,
    pub shrink_runs: u32,
    /// Not shrunk: the case file is the failing case as it ran (`--max-shrink-runs 0` in
    /// the concurrent schedule, or `chaos --seeds --shrink once` after an earlier seed's
    /// run shrank this invariant).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unshrunk: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub topology_ready_ms: u64,
    pub run_ms: u64,
    pub steps_ms: u64,
    pub reset_ms: u64,
    /// Executed steps per second of step time (ops, observation, probes, settling).
    pub steps_per_sec: f64,
    /// Executed steps per second of the whole run (resets and shrinking included).
    pub overall_steps_per_sec: f64,
    pub time_to_first_violation_ms: Option<u64>,
    pub time_to_first_minimal_ms: Option<u64>,
    pub shrink_ms: u64,
}

/// The history file's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryOut {
    pub file: String,
    pub events: u64,
    pub bytes: u64,
    /// Executed steps of every case (generated, shrinking, evidence).
    pub steps: u64,
    pub bytes_per_step: f64,
}

fn per_sec(n: u64, ms: u64) -> f64 {
    if ms == 0 {
        return 0.0;
    }
    (n as f64 * 1000.0 / ms as f64 * 10.0).round() / 10.0
}

impl Results {
    /// A run's results, from its header, the checker's tally and the topology's `expect`.
    pub fn build(
        topology: &Topology,
        header: &RunHeader,
        tally: &Tally,
        stopped_by_time_limit: bool,
        run_ms: u64,
        require_expected: bool,
    ) -> Results {
        let v = &header.versions;
        let verdicts: Vec<InvariantVerdict> = tally.verdicts(topology);
        let invariants: Vec<InvariantResult> = verdicts
            .into_iter()
            .map(|i| {
                let first_failure = tally.failure(&i.name).map(|f| FailureOut {
                    case_file: format!("failures/{}/case.yaml", f.invariant),
                    case_seed: f.case_seed,
                    case_index: f.case_index,
                    minimal_steps: f.minimal().map(|m| m.len()).unwrap_or(0),
                    original_steps: f.original.len(),
                    shrink_runs: f.shrink_runs,
                    unshrunk: f.unshrunk(),
                });
                let expected_rate = topology.expected_rate_in(&i.name, tally.schedule);
                InvariantResult {
                    expected_rate,
                    name: i.name,
                    tier: i.tier,
                    verdict: i.verdict,
                    expected: i.expected,
                    violating_cases: i.violating_cases,
                    unknown_cases: i.unknown_cases,
                    exercised: i.exercised,
                    note: i.note,
                    violating: i.violating,
                    unknown: i.unknown,
                    first_failure,
                }
            })
            .collect();
        let steps_ms = tally.steps_us / 1000;
        Results {
            topology: topology.name.clone(),
            topology_file: header.topology_file.clone(),
            pooler: header.pooler.clone(),
            pool_mode: header.rules.mode.map(|m| m.as_str().to_string()),
            launcher: header.launcher.clone(),
            versions: VersionsOut {
                postgres: v.postgres.clone(),
                postgres_declared: v.postgres_declared.clone(),
                postgres_full: v.postgres_full.clone(),
                pooler: v.pooler.clone(),
                pooler_declared: v.pooler_declared.clone(),
                pooler_built_from: v.pooler_built_from.clone(),
                pooler_tarball_sha256: v.pooler_tarball_sha256.clone(),
            },
            version_drift: v.version_drift.clone(),
            cpu: CpuOut {
                pinned: header.cpu_pinned,
                online: header.cpu_online,
            },
            seed: header.seed,
            cases: tally.cases,
            steps: tally.steps,
            skipped_steps: tally.skipped_steps,
            stopped_by_time_limit,
            schedule: tally.schedule.as_str().to_string(),
            judged_cases: tally.judged_cases,
            judged: tally.judged.clone(),
            unknown_why: tally.unknown_why.clone(),
            replay_violations: tally
                .replay_pg
                .iter()
                .map(|(phase, case, inv, detail)| ReplayViolation {
                    phase: format!("{phase:?}").to_lowercase(),
                    case: *case,
                    invariant: inv.clone(),
                    detail: detail.clone(),
                })
                .collect(),
            require_expected,
            passed: invariants.iter().all(|i| !i.fails(require_expected))
                && tally.replay_pg.is_empty(),
            invariants,
            timing: Timing {
                topology_ready_ms: header.ready_ms,
                run_ms,
                steps_ms,
                reset_ms: tally.reset_us / 1000,
                steps_per_sec: per_sec(tally.steps, steps_ms),
                overall_steps_per_sec: per_sec(tally.steps, run_ms),
                time_to_first_violation_ms: tally.first_violation_ns.map(|n| n / 1_000_000),
                time_to_first_minimal_ms: tally.first_minimal_ns.map(|n| n / 1_000_000),
                shrink_ms: tally.failures.iter().map(|f| f.shrink_ns / 1_000_000).sum(),
            },
            history: None,
        }
    }

    pub fn passed(&self) -> bool {
        self.passed
    }

    /// Any `pg.*` invariant violated (in a generated case or a replay): PostgreSQL, the
    /// pooler or pgchaos is wrong.
    pub fn pg_violated(&self) -> bool {
        self.invariants
            .iter()
            .any(|i| i.tier == Tier::Pg && i.verdict == Verdict::Violated)
    }

    /// Less than half of the generated cases were judged (or there were none).
    pub fn thinly_judged(&self) -> bool {
        self.cases == 0 || self.judged_cases * 2 < self.cases
    }

    /// `results.json` of a run directory.
    pub fn load(dir: &Path) -> Result<Results> {
        let path = dir.join("results.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{}: not a results file", path.display()))
    }

    /// The verdict columns only (what `analyze` must reproduce).
    pub fn verdicts(&self) -> Vec<(String, Verdict, u32, Option<usize>)> {
        self.invariants
            .iter()
            .map(|i| {
                (
                    i.name.clone(),
                    i.verdict,
                    i.violating_cases,
                    i.first_failure.as_ref().map(|f| f.minimal_steps),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(verdict: Verdict, expected: Verdict, rate: Option<f64>) -> InvariantResult {
        InvariantResult {
            name: "app.rollback_releases".into(),
            tier: Tier::App,
            verdict,
            expected,
            violating_cases: 0,
            unknown_cases: 0,
            exercised: 10,
            note: None,
            violating: vec![],
            unknown: vec![],
            first_failure: None,
            expected_rate: rate,
        }
    }

    /// An expected violation no case reached fails a run only when it requires it; an
    /// unexpected violation, or an unknown verdict, fails it either way.
    #[test]
    fn an_expected_violation_not_reached_fails_only_when_required() {
        let short = inv(Verdict::Holds, Verdict::Violated, Some(5.0));
        assert!(short.not_reached());
        assert!(!short.fails(false));
        assert!(short.fails(true));
        assert_eq!(
            short.not_reached_note(32),
            "not reached in 32 cases (expected at about 5% of cases: 32 cases miss it 19% of the time)"
        );
        assert!(
            inv(Verdict::Holds, Verdict::Violated, None)
                .not_reached_note(8)
                .contains("gives no rate")
        );
        for (v, e) in [
            (Verdict::Violated, Verdict::Holds),
            (Verdict::Unknown, Verdict::Violated),
            (Verdict::Unknown, Verdict::Holds),
        ] {
            let i = inv(v, e, None);
            assert!(!i.not_reached());
            assert!(i.fails(false) && i.fails(true), "{v} expected {e}");
        }
        assert!(!inv(Verdict::Violated, Verdict::Violated, None).fails(true));
        assert!(!inv(Verdict::Holds, Verdict::Either, None).fails(true));
    }
}
