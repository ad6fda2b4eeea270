//! The checker: verdicts from a history alone. [`check_case`] replays one case's events
//! through the pure [`model`] and asks every invariant in [`invariants::ALL`] about every
//! step; [`Tally`] adds cases up into a run's verdicts the same way whether the cases arrive
//! live from the engine or are read back from `history.jsonl.gz` by `pgchaos analyze`. No
//! I/O, no live cluster.
//!
//! May import `vocab`, `pooler` (the rules), `topology` (expectations) and `history`.

pub mod concurrent;
pub mod invariants;
pub mod model;
pub mod waits;

pub use invariants::{ALL, Invariant, JudgedProbe, StepFacts, by_name, catalog};

use crate::history::{Body, Bounds, CaseView, Event, Phase, RunEnd, RunHeader};
use crate::pooler::PoolRules;
use crate::topology::{Schedule, Topology};
use crate::vocab::{Op, Reply, Tier, Verdict};
use crate::workload::Step;
use anyhow::{Result, bail};
use model::{Model, ProbeReason};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One violation: which invariant, at which step, with the evidence in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    /// 0-based step index in the case.
    pub step: usize,
    pub detail: String,
}

/// The checker's verdict on one case.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseCheck {
    pub violations: Vec<Violation>,
    /// The model's prediction for each executed step: `(step, reply)`.
    pub expected: Vec<(usize, Reply)>,
}

impl CaseCheck {
    pub fn violates(&self, invariant: &str) -> bool {
        self.violations.iter().any(|v| v.invariant == invariant)
    }

    /// Violated invariant names, in first-seen order, without repeats.
    pub fn violated(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for v in &self.violations {
            if !out.contains(&v.invariant) {
                out.push(v.invariant.clone());
            }
        }
        out
    }

    pub fn at_step(&self, step: usize) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(move |v| v.step == step)
    }

    /// The model's prediction for a step.
    pub fn expected_at(&self, step: usize) -> Option<&Reply> {
        self.expected
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, r)| r)
    }
}

/// What the checker needs beside a case's events: the pooling rules the run used and the
/// bounds ops are judged by (both recorded in the history's `run` event).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckContext {
    pub rules: PoolRules,
    pub bounds: Bounds,
}

impl CheckContext {
    pub fn of(header: &RunHeader) -> CheckContext {
        CheckContext {
            rules: header.rules.clone(),
            bounds: header.bounds,
        }
    }
}

/// Check one case from its events (a `case` event to its `case_end`), by its schedule.
pub fn check_case(cx: &CheckContext, events: &[Event]) -> Result<CaseCheck> {
    let view = CaseView::build(events)?;
    Ok(check_view(cx, &view, events))
}

/// Check an already folded case (`events` are the ones it was folded from).
pub fn check_view(cx: &CheckContext, view: &CaseView, events: &[Event]) -> CaseCheck {
    match view.start.schedule {
        Schedule::Sequential => check_sequential(cx, view),
        Schedule::Concurrent => concurrent::check(cx, view, events),
    }
}

/// Push what every invariant finds in one step.
fn judge_step(facts: &StepFacts, out: &mut CaseCheck) {
    let mut details = vec![];
    for inv in ALL {
        details.clear();
        inv.check(facts, &mut details);
        for d in details.drain(..) {
            out.violations.push(Violation {
                invariant: inv.info().name.to_string(),
                step: facts.step,
                detail: d,
            });
        }
    }
}

/// The model's effect of one recorded op (its client's view: connect, disconnect,
/// statements; faults by their target). `None`: nothing to apply (a fault without target).
fn apply_op(
    model: &mut Model,
    s: &crate::history::StepView,
    op: Op,
    reply: &Reply,
) -> Option<model::Effect> {
    let c = s.client;
    Some(match op {
        Op::Disconnect => model.disconnect(c),
        Op::Reconnect => {
            let mut e = model.disconnect(c);
            if !reply.is_error() {
                model.connected(c);
            } else if model.lenient && model.beside.terminate && reply.ended_by_server() {
                // Concurrent: a fault of the servers beside it (the pooler restarting,
                // PostgreSQL shutting down) refused the new connection.
                e.expected_reply = Some(reply.clone());
            }
            e
        }
        Op::Terminate => model.terminate(s.target()?, reply),
        Op::Cancel => model.cancel(s.target()?, reply),
        op if op.is_server_fault() => model.server_fault(op, s.target(), reply),
        // Client-side only: nothing happens on the server.
        Op::Sleep => model::Effect {
            expected_reply: Some(Reply::Ok),
            ..Default::default()
        },
        Op::Raise => model::Effect {
            expected_reply: Some(Reply::error(crate::vocab::reply::code::RAISED)),
            ..Default::default()
        },
        _ => model.apply(c, op, s.key, s.done.and_then(|d| d.backend), reply),
    })
}

/// A `migrate` that applied the migration (or tried to again and found its table: 42P07).
fn applied(op: Op, reply: &Reply) -> bool {
    op == Op::Migrate
        && (matches!(reply, Reply::Bool { value: true }) || reply.code() == Some("42P07"))
}

fn check_sequential(cx: &CheckContext, view: &CaseView) -> CaseCheck {
    let mut model = Model::new(cx.rules.clone(), view.start.clients);
    for c in &view.opened {
        model.connected(*c);
    }
    let mut out = CaseCheck::default();
    let mut migrations: Vec<(usize, usize)> = vec![];
    for s in &view.steps {
        let (Some(op), Some(done)) = (s.op, s.done) else {
            continue; // skipped, or cut short
        };
        let c = s.client;
        if s.opened {
            model.connected(c);
        }
        let reply = &done.value;
        let Some(effect) = apply_op(&mut model, s, op, reply) else {
            continue;
        };
        if let Some(e) = &effect.expected_reply {
            out.expected.push((s.index, e.clone()));
        }
        if applied(op, reply) {
            migrations.push((c, s.index));
        }
        let rolled_back = if matches!(op, Op::Commit | Op::Rollback) && !reply.is_error() {
            let (backend, taken) = model.take_rolled_back(c);
            backend.filter(|_| op == Op::Rollback).map(|b| (b, taken))
        } else {
            None
        };
        let probes: Vec<JudgedProbe> = s
            .probes
            .iter()
            .map(|(key, available)| JudgedProbe {
                key: *key,
                available: *available,
                expected_available: !model.key_held(*key),
                reasons: effect
                    .probes
                    .iter()
                    .filter(|(_, k)| k == key)
                    .map(|(r, _)| *r)
                    .collect::<Vec<ProbeReason>>(),
            })
            .collect();
        let empty = crate::history::Observation::default();
        let facts = StepFacts {
            step: s.index,
            client: c,
            op,
            reply,
            effect: &effect,
            obs: Some(s.obs_after.unwrap_or(&empty)),
            probes: &probes,
            model: &model,
            rolled_back,
            took_ns: s.t_invoke.zip(s.t_done).map(|(i, d)| d.saturating_sub(i)),
            bound_ns: cx.bounds.of(op, s.ms),
            stuck: None,
            overlaps: &[],
            migrations: &migrations,
        };
        judge_step(&facts, &mut out);
    }
    out
}

/// The first violating case of an invariant, and what shrinking made of it.
#[derive(Clone, Debug)]
pub struct FirstFailure {
    pub invariant: String,
    pub case_index: u32,
    pub case_seed: Option<u64>,
    pub original: Vec<Step>,
    /// Shrink candidates run for this invariant.
    pub shrink_runs: u32,
    /// Time from the first shrink candidate to the end of the evidence replay (ns).
    pub shrink_ns: u64,
    shrink_started: Option<u64>,
    /// Evidence replays of the minimal case (more than one only in the concurrent schedule,
    /// when the first did not show the violation).
    pub evidence_runs: u32,
    /// The minimal case replayed with full evidence, and the checker's verdict on it.
    pub evidence: Option<(Vec<Event>, CaseCheck)>,
}

impl FirstFailure {
    pub fn minimal(&self) -> Option<Vec<Step>> {
        let (events, _) = self.evidence.as_ref()?;
        CaseView::build(events).ok().map(|v| v.steps())
    }
}

/// A run's cases added up: violating cases per invariant, the first failure of each with
/// its shrinking and evidence, step counts and time. Only what the verdict table needs is
/// kept, so memory stays flat however long the run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Generated cases.
    pub cases: u32,
    /// Executed (not skipped) steps of generated cases.
    pub steps: u64,
    pub skipped_steps: u64,
    /// Executed steps of every case, shrinking and evidence included.
    pub all_steps: u64,
    pub steps_us: u64,
    pub reset_us: u64,
    pub violating_cases: BTreeMap<String, u32>,
    pub failures: Vec<FirstFailure>,
    /// Nanoseconds from the run's start to the first violating case's end.
    pub first_violation_ns: Option<u64>,
    /// ... and to the end of the first evidence replay (the first minimal case).
    pub first_minimal_ns: Option<u64>,
}

impl Tally {
    /// Add one case. Returns the invariants this case violates for the first time in the run
    /// (generated cases only: those are the ones to shrink).
    pub fn add(&mut self, view: &CaseView, events: &[Event], check: &CaseCheck) -> Vec<String> {
        let executed = view.steps.iter().filter(|s| s.ran()).count() as u64;
        let skipped = view.steps.iter().filter(|s| s.skip.is_some()).count() as u64;
        let end_t = events.last().map(|e| e.t).unwrap_or(0);
        let start_t = events.first().map(|e| e.t).unwrap_or(0);
        self.all_steps += executed;
        let mut fresh = vec![];
        match view.start.phase {
            Phase::Run => {
                self.cases += 1;
                self.steps += executed;
                self.skipped_steps += skipped;
                if let Some(end) = &view.end {
                    self.steps_us += end.steps_us;
                    self.reset_us += end.reset_us;
                }
                for inv in check.violated() {
                    self.first_violation_ns.get_or_insert(end_t);
                    *self.violating_cases.entry(inv.clone()).or_default() += 1;
                    if !self.failures.iter().any(|f| f.invariant == inv) {
                        self.failures.push(FirstFailure {
                            invariant: inv.clone(),
                            case_index: view.start.case,
                            case_seed: view.start.seed,
                            original: view.steps(),
                            shrink_runs: 0,
                            shrink_ns: 0,
                            shrink_started: None,
                            evidence_runs: 0,
                            evidence: None,
                        });
                        fresh.push(inv);
                    }
                }
            }
            Phase::Shrink => {
                if let Some(f) = self.failure_mut(view) {
                    f.shrink_runs += 1;
                    f.shrink_started.get_or_insert(start_t);
                }
            }
            Phase::Evidence => {
                let first_minimal = &mut self.first_minimal_ns;
                if let Some(f) = self
                    .failures
                    .iter_mut()
                    .find(|f| Some(&f.invariant) == view.start.invariant.as_ref())
                {
                    f.shrink_ns = end_t.saturating_sub(f.shrink_started.unwrap_or(start_t));
                    f.evidence_runs += 1;
                    // A replay that shows the violation is kept over one that does not (a
                    // concurrent case may need several).
                    let shown = |e: &Option<(Vec<Event>, CaseCheck)>| {
                        e.as_ref().is_some_and(|(_, c)| c.violates(&f.invariant))
                    };
                    if !shown(&f.evidence) {
                        f.evidence = Some((events.to_vec(), check.clone()));
                    }
                    first_minimal.get_or_insert(end_t);
                }
            }
            Phase::Replay => {}
        }
        fresh
    }

    fn failure_mut(&mut self, view: &CaseView) -> Option<&mut FirstFailure> {
        let inv = view.start.invariant.as_ref()?;
        self.failures.iter_mut().find(|f| &f.invariant == inv)
    }

    /// One row per invariant, in catalog order.
    pub fn verdicts(&self, topology: &Topology) -> Vec<InvariantVerdict> {
        catalog()
            .iter()
            .map(|i| {
                let n = self.violating_cases.get(i.name).copied().unwrap_or(0);
                InvariantVerdict {
                    name: i.name.to_string(),
                    tier: i.tier,
                    verdict: if n > 0 {
                        Verdict::Violated
                    } else {
                        Verdict::Holds
                    },
                    expected: topology.expected(i.name),
                    violating_cases: n,
                }
            })
            .collect()
    }

    pub fn failure(&self, invariant: &str) -> Option<&FirstFailure> {
        self.failures.iter().find(|f| f.invariant == invariant)
    }
}

/// One row of the verdict table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantVerdict {
    pub name: String,
    pub tier: Tier,
    pub verdict: Verdict,
    pub expected: Verdict,
    pub violating_cases: u32,
}

/// A whole history checked: what `pgchaos analyze` computes.
pub struct RunCheck {
    pub header: RunHeader,
    pub tally: Tally,
    /// The `run_end` event (absent: the run was cut short).
    pub run_end: Option<RunEnd>,
    /// Nanoseconds from the run's start to its last event.
    pub run_ns: u64,
    pub events: u64,
}

/// Check every case of a history, in order. `events` is the history as read back.
pub fn check_history(events: impl Iterator<Item = Result<Event>>) -> Result<RunCheck> {
    let mut header: Option<RunHeader> = None;
    let mut tally = Tally::default();
    let mut case: Vec<Event> = vec![];
    let mut run_end = None;
    let mut last_t = 0;
    let mut count = 0;
    for ev in events {
        let ev = ev?;
        last_t = ev.t;
        count += 1;
        match &ev.body {
            Body::Run(h) => header = Some((**h).clone()),
            Body::RunEnd(e) => run_end = Some(e.clone()),
            Body::Case(_) => {
                case.clear();
                case.push(ev);
            }
            Body::CaseEnd(_) => {
                case.push(ev);
                let Some(h) = &header else {
                    bail!("the history has a case before its `run` event");
                };
                let view = CaseView::build(&case)?;
                let check = check_view(&CheckContext::of(h), &view, &case);
                tally.add(&view, &case, &check);
                case.clear();
            }
            _ => case.push(ev),
        }
    }
    let Some(header) = header else {
        bail!("the history has no `run` event (empty or cut short)");
    };
    Ok(RunCheck {
        header,
        tally,
        run_end,
        run_ns: last_t,
        events: count,
    })
}

#[cfg(test)]
mod tests {
    //! The checker on small hand-written histories (`tests/fixtures/histories/*.jsonl`): for
    //! every invariant, one history where it holds and one where it is violated, with the
    //! evidence text the violation must carry.
    use super::*;
    use crate::history::HistoryReader;
    use std::path::Path;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/histories");

    fn check_file(name: &str) -> (RunCheck, CaseCheck) {
        let path = Path::new(FIXTURES).join(format!("{name}.jsonl"));
        let run = check_history(HistoryReader::open(&path).unwrap()).unwrap();
        let events: Vec<Event> = HistoryReader::open(&path)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let case = crate::history::view::cases(&events)[0].to_vec();
        let verdict = check_case(&CheckContext::of(&run.header), &case).unwrap();
        (run, verdict)
    }

    /// `(fixture stem, invariant, what the violation says)`.
    const TABLE: &[(&str, &str, &str)] = &[
        (
            "exclusion",
            "pg.exclusion",
            "key 7 granted to 2 backends at once: pid 101",
        ),
        (
            "replies-match-model",
            "pg.replies_match_model",
            "C2 try_lock: PostgreSQL/pooler replied true, the model predicted false",
        ),
        (
            "locks-match-model",
            "pg.locks_match_model",
            "after C1 try_lock: model holds but pg_locks lacks",
        ),
        (
            "xact-released-at-end",
            "pg.xact_released_at_end",
            "after C1 commit: a fresh contender could not take key 7 (expected available)",
        ),
        (
            "session-survives-rollback",
            "pg.session_survives_rollback",
            "after C1 rollback: a fresh contender could take key 7 (expected held)",
        ),
        (
            "stacking",
            "pg.stacking",
            "after C1 unlock: a fresh contender could take key 7 (expected held)",
        ),
        (
            "terminate-releases",
            "pg.terminate_releases",
            "is still in pg_stat_activity after terminate",
        ),
        (
            "cancel-keeps-session-locks",
            "pg.cancel_keeps_session_locks",
            "after C1 cancel: a fresh contender could take key 7 (expected held)",
        ),
        (
            "mutual-exclusion",
            "app.mutual_exclusion",
            "C1 and C2 both believe they hold key 7",
        ),
        (
            "no-orphans",
            "app.no_orphans",
            "backend pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holds key 7, but no client believes it holds it",
        ),
        (
            "failed-lock-not-held",
            "app.failed_lock_not_held",
            "C2's pg_advisory_lock(7) on pid 102 (backend_start 2026-11-30 00:53:20.000102+00) failed with 55P03 at 1010.000 ms, yet pg_locks shows pid 102",
        ),
        (
            "unlock-reaches-owner",
            "app.unlock_reaches_owner",
            "C1 unlocked 7, which it took on pid 101 (backend_start 2026-11-30 00:53:20.000001+00), but the unlock ran on pid 102",
        ),
        (
            "rollback-releases",
            "app.rollback_releases",
            "C1 rolled back, but key 7, taken in that transaction, is still held by its backend pid 101",
        ),
        (
            "progress",
            "app.progress",
            "C2 ping took 4.080 s, its bound is 2.000 s (it never completed: the client gave up). At the deadline: (sample at 2100.000 ms) C2 ping (2.080 s so far) waits for a connection from the application pool (1/1 open, 0 idle, 1 waiting), its connections held by C1; a new connection to PostgreSQL as a client: refused 53300",
        ),
        (
            "applied-once",
            "app.applied_once",
            "migration version 1 applied 2 times: C1 (step 1), C2 (step 2) (C2 replied error 42P07)",
        ),
        (
            "no-stale-holder",
            "app.no_stale_holder",
            "C1 believes it holds 7, but the backend that granted it (pid 101 (backend_start 2026-11-30 00:53:20.000001+00)) was terminated",
        ),
        (
            "no-lost-lock",
            "app.no_lost_lock",
            "C1 believes it holds 7, but pooler_reconnect closed the backend that granted it (pid 101 (backend_start 2026-11-30 00:53:20.000001+00))",
        ),
    ];

    #[test]
    fn every_invariant_has_a_history_where_it_holds_and_one_where_it_is_violated() {
        let covered: Vec<&str> = TABLE.iter().map(|(_, i, _)| *i).collect();
        for i in catalog() {
            assert!(covered.contains(&i.name), "no fixture for {}", i.name);
        }
        for (stem, inv, detail) in TABLE {
            let (_, holds) = check_file(&format!("{stem}-holds"));
            let wrong: Vec<&Violation> = holds
                .violations
                .iter()
                .filter(|v| v.invariant == *inv || v.invariant.starts_with("pg."))
                .collect();
            assert!(wrong.is_empty(), "{stem}-holds: {wrong:?}");
            let (run, violated) = check_file(&format!("{stem}-violated"));
            let found: Vec<&Violation> = violated
                .violations
                .iter()
                .filter(|v| v.invariant == *inv)
                .collect();
            assert!(
                !found.is_empty(),
                "{stem}-violated does not violate {inv}: {violated:?}"
            );
            assert!(
                found.iter().any(|v| v.detail.contains(detail)),
                "{stem}-violated: {inv} evidence {:?} lacks {detail:?}",
                found.iter().map(|v| &v.detail).collect::<Vec<_>>()
            );
            // The run-level tally agrees with the case.
            assert_eq!(run.tally.violating_cases.get(*inv), Some(&1), "{stem}");
        }
    }

    #[test]
    fn every_fixture_is_in_the_table() {
        for e in std::fs::read_dir(FIXTURES).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let stem = name
                .trim_end_matches(".jsonl")
                .trim_end_matches("-holds")
                .trim_end_matches("-violated")
                .to_string();
            assert!(
                TABLE.iter().any(|(s, _, _)| *s == stem),
                "{name} is not checked"
            );
        }
    }
}
