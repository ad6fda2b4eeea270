//! A run's verdicts: each case's checks tallied per invariant ([`Tally`]), the first
//! failure of each and what shrinking made of it, and the whole history checked at once
//! ([`check_history`]).

use super::*;

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
    /// The minimal case replayed with full evidence, and the checker's verdict on it. In the
    /// concurrent schedule, until an evidence replay replaces it, the failing case as it ran
    /// (every concurrent case records what an evidence replay would): a failure that is not
    /// shrunk (`--max-shrink-runs 0`, or `chaos --seeds --shrink once` after an earlier seed)
    /// is its own evidence.
    pub evidence: Option<(Vec<Event>, CaseCheck)>,
    /// `evidence` is the generated case itself, not a replay.
    evidence_from_run: bool,
}

impl FirstFailure {
    /// The evidence is the generated case as it ran: it was not shrunk nor replayed.
    pub fn unshrunk(&self) -> bool {
        self.evidence_from_run
    }

    pub fn minimal(&self) -> Option<Vec<Step>> {
        let (events, _) = self.evidence.as_ref()?;
        CaseView::build(events).ok().map(|v| v.steps())
    }
}

/// A run's cases added up: violating and unknown cases per invariant (by index), the first
/// failure of each with its shrinking and evidence, what the verdicts rest on, step counts and
/// time. Only what the verdict table needs is kept, so memory stays flat however long the run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// The schedule of the run's cases.
    pub schedule: Schedule,
    /// Generated cases.
    pub cases: u32,
    /// Executed (not skipped) steps of generated cases.
    pub steps: u64,
    pub skipped_steps: u64,
    /// Executed steps of every case, shrinking and evidence included.
    pub all_steps: u64,
    pub steps_us: u64,
    pub reset_us: u64,
    /// Generated cases violating each invariant.
    pub violating_cases: BTreeMap<String, u32>,
    /// Their indices.
    pub violating_indices: BTreeMap<String, Vec<u32>>,
    /// Generated cases where an invariant is unknown (the search ran out of budget), by index.
    pub unknown_indices: BTreeMap<String, Vec<u32>>,
    /// Why searches ran out (the first few).
    pub unknown_why: Vec<String>,
    /// Generated cases in which something was judged and the search kept to its budget.
    pub judged_cases: u32,
    /// What was judged, over generated cases.
    pub judged: Judged,
    /// `pg.*` violations in shrink and evidence replays: `(phase, case, invariant, detail)`.
    pub replay_pg: Vec<(Phase, u32, String, String)>,
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
        self.schedule = view.start.schedule;
        let mut fresh = vec![];
        if view.start.phase != Phase::Run {
            // Every phase counts: a pg.* violation in a replay fails the run.
            for v in check
                .violations
                .iter()
                .filter(|v| v.invariant.starts_with("pg."))
            {
                if self.replay_pg.len() < 64 {
                    self.replay_pg.push((
                        view.start.phase,
                        view.start.case,
                        v.invariant.clone(),
                        v.detail.clone(),
                    ));
                }
            }
        }
        match view.start.phase {
            Phase::Run => {
                let index = view.start.case;
                self.cases += 1;
                self.steps += executed;
                self.skipped_steps += skipped;
                if let Some(end) = &view.end {
                    self.steps_us += end.steps_us;
                    self.reset_us += end.reset_us;
                }
                self.judged.add(&check.judged);
                if check.unknown.is_none() && !check.judged.is_empty() {
                    self.judged_cases += 1;
                }
                if let Some(why) = &check.unknown
                    && self.unknown_why.len() < 8
                {
                    self.unknown_why.push(format!("case {index}: {why}"));
                }
                if check.unknown.is_some() || !check.undecided.is_empty() {
                    for i in ALL {
                        let name = i.info().name;
                        if check.unknown_for(name) {
                            self.unknown_indices
                                .entry(name.to_string())
                                .or_default()
                                .push(index);
                        }
                    }
                }
                for inv in check.violated() {
                    self.first_violation_ns.get_or_insert(end_t);
                    *self.violating_cases.entry(inv.clone()).or_default() += 1;
                    self.violating_indices
                        .entry(inv.clone())
                        .or_default()
                        .push(index);
                    if !self.failures.iter().any(|f| f.invariant == inv) {
                        let own = (view.start.schedule == Schedule::Concurrent)
                            .then(|| (events.to_vec(), check.clone()));
                        self.failures.push(FirstFailure {
                            evidence_from_run: own.is_some(),
                            evidence: own,
                            invariant: inv.clone(),
                            case_index: view.start.case,
                            case_seed: view.start.seed,
                            original: view.steps(),
                            shrink_runs: 0,
                            shrink_ns: 0,
                            shrink_started: None,
                            evidence_runs: 0,
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
                    // The case as it ran is kept over a replay of the same steps that does
                    // not show it (its violation and evidence are the run's own); a replay of
                    // a smaller case replaces it.
                    let replay = Some((events.to_vec(), check.clone()));
                    let same_steps = f.minimal() == Some(view.steps());
                    let keep_run =
                        f.evidence_from_run && same_steps && shown(&f.evidence) && !shown(&replay);
                    if !keep_run && (f.evidence_from_run || !shown(&f.evidence)) {
                        f.evidence = replay;
                        f.evidence_from_run = false;
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

    /// How many times the ops that exercise an invariant were judged.
    pub fn exercised(&self, inv: &dyn Invariant) -> u64 {
        let last = inv.needs().last().copied().unwrap_or(&[]);
        last.iter()
            .map(|op| u64::from(self.judged.by_op.get(op).copied().unwrap_or(0)))
            .sum()
    }

    /// One row per invariant, in catalog order, judged against `topology`'s expectations for
    /// the run's schedule.
    pub fn verdicts(&self, topology: &Topology) -> Vec<InvariantVerdict> {
        ALL.iter()
            .map(|inv| {
                let i = inv.info();
                let n = self.violating_cases.get(i.name).copied().unwrap_or(0);
                let unknown: Vec<u32> = self
                    .unknown_indices
                    .get(i.name)
                    .cloned()
                    .unwrap_or_default();
                let in_replays = self.replay_pg.iter().filter(|r| r.2 == i.name).count() as u32;
                let applicable = topology.exercises(inv.needs());
                let exercised = self.exercised(*inv);
                let judged_cases = self.judged_cases;
                let mut notes = vec![];
                let verdict = if n > 0 || in_replays > 0 {
                    if in_replays > 0 {
                        notes.push(format!(
                            "violated in {in_replays} shrink or evidence replay(s)"
                        ));
                    }
                    Verdict::Violated
                } else if applicable && (exercised == 0 || judged_cases == 0) {
                    notes.push(if self.cases == 0 {
                        "rests on nothing: no case ran".to_string()
                    } else {
                        format!(
                            "rests on nothing: the workload runs {}, but no case judged one",
                            ops_list(inv.needs().last().copied().unwrap_or(&[]))
                        )
                    });
                    Verdict::Unknown
                } else if self.cases > 0 && unknown.len() as u32 >= self.cases {
                    Verdict::Unknown
                } else {
                    if !applicable {
                        notes.push("not exercised by this workload".to_string());
                    }
                    Verdict::Holds
                };
                if !unknown.is_empty() && verdict != Verdict::Violated {
                    notes.push(format!(
                        "unknown in {} of {} cases",
                        unknown.len(),
                        self.cases
                    ));
                }
                InvariantVerdict {
                    name: i.name.to_string(),
                    tier: i.tier,
                    verdict,
                    expected: topology.expected_in(i.name, self.schedule),
                    violating_cases: n,
                    unknown_cases: unknown.len() as u32,
                    exercised,
                    note: (!notes.is_empty()).then(|| notes.join("; ")),
                    violating: self
                        .violating_indices
                        .get(i.name)
                        .cloned()
                        .unwrap_or_default(),
                    unknown,
                }
            })
            .collect()
    }

    pub fn failure(&self, invariant: &str) -> Option<&FirstFailure> {
        self.failures.iter().find(|f| f.invariant == invariant)
    }

    /// Less than half of the generated cases were judged (or there were none).
    pub fn thinly_judged(&self) -> bool {
        self.cases == 0 || self.judged_cases * 2 < self.cases
    }
}

fn ops_list(ops: &[Op]) -> String {
    ops.iter()
        .map(|o| o.name())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// One row of the verdict table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantVerdict {
    pub name: String,
    pub tier: Tier,
    pub verdict: Verdict,
    pub expected: Verdict,
    pub violating_cases: u32,
    pub unknown_cases: u32,
    /// How many operations that exercise it were judged.
    pub exercised: u64,
    /// What the verdict rests on, when it is not plain.
    pub note: Option<String>,
    /// The violating and unknown generated cases, by index.
    pub violating: Vec<u32>,
    pub unknown: Vec<u32>,
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
    check_history_as(events, CheckContext::of)
}

/// [`check_history`] with the rules of `cx(header)` (`analyze --as`: another topology's
/// declared rules; another budget).
pub fn check_history_as(
    events: impl Iterator<Item = Result<Event>>,
    cx: impl Fn(&RunHeader) -> CheckContext,
) -> Result<RunCheck> {
    check_history_with(events, cx, |_, _| {})
}

/// [`check_history_as`], calling `each` with every case and its verdict.
pub fn check_history_with(
    events: impl Iterator<Item = Result<Event>>,
    cx: impl Fn(&RunHeader) -> CheckContext,
    mut each: impl FnMut(&CaseView, &CaseCheck),
) -> Result<RunCheck> {
    let mut header: Option<RunHeader> = None;
    let mut tally = Tally::default();
    let mut case: Vec<Event> = vec![];
    let mut run_end = None;
    let mut context: Option<CheckContext> = None;
    let mut last_t = 0;
    let mut count = 0;
    for ev in events {
        let ev = ev?;
        last_t = ev.t;
        count += 1;
        match &ev.body {
            Body::Run(h) => {
                context = Some(cx(h));
                header = Some((**h).clone());
            }
            Body::RunEnd(e) => run_end = Some(e.clone()),
            Body::Case(_) => {
                case.clear();
                case.push(ev);
            }
            Body::CaseEnd(_) => {
                case.push(ev);
                let Some(cx) = &context else {
                    bail!("the history has a case before its `run` event");
                };
                let view = CaseView::build(&case)?;
                let check = check_view(cx, &view, &case);
                each(&view, &check);
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
    use super::super::tests_release::commit_with_a_look_text;
    use super::*;

    /// A concurrent case that violated an invariant as it ran, then evidence replays of the
    /// same steps: one that does not show it leaves the run's own case as the evidence (its
    /// violation and rows); one that shows it replaces it. (Seen: a run's report showed a
    /// replay without the violation, and no row of it, for transaction-mode-host-faults,
    /// concurrent, seed 5, 2026-12-07.)
    #[test]
    fn a_replay_that_does_not_show_it_keeps_the_runs_own_evidence() {
        const INV: &str = "pg.locks_match_model";
        let lines = |t: u64| -> Vec<String> {
            commit_with_a_look_text(t)
                .lines()
                .map(str::to_string)
                .collect()
        };
        let replay = |t: u64| -> Vec<String> {
            let mut v = lines(t);
            v[1] = v[1].replace(
                r#""phase":"run""#,
                &format!(r#""phase":"evidence","invariant":"{INV}""#),
            );
            v[1..v.len() - 1].to_vec()
        };
        let run = lines(4801);
        let history = |replays: &[u64]| -> Vec<Event> {
            let mut v: Vec<String> = run[..run.len() - 1].to_vec();
            for t in replays {
                v.extend(replay(*t));
            }
            v.push(run[run.len() - 1].clone());
            v.iter().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        let failure = |replays: &[u64]| {
            let events = history(replays);
            let run = super::super::check_history(events.into_iter().map(Ok)).unwrap();
            let f = run
                .tally
                .failures
                .iter()
                .find(|f| f.invariant == INV)
                .cloned();
            f.expect("the run's case violates it")
        };
        // As it ran: 4801 (before the COMMIT, one key alone) violates it; 5501 (during) not.
        let f = failure(&[5501]);
        assert_eq!(f.evidence_runs, 1);
        assert!(f.unshrunk(), "the run's own case is kept");
        assert!(f.evidence.as_ref().unwrap().1.violates(INV));
        let f = failure(&[5501, 4801]);
        assert_eq!(f.evidence_runs, 2);
        assert!(!f.unshrunk(), "a replay that shows it replaces it");
        assert!(f.evidence.as_ref().unwrap().1.violates(INV));
    }
}
