//! The checker: verdicts from a history alone, one mechanism for both schedules.
//! [`check_case`] turns a case's events into operations with intervals ([`entries`]) and
//! runs the linearization search ([`search`]) over the model ([`model`]): every reply, every
//! look at `pg_locks` and every contender probe must be explained by some order of the
//! case's operations that respects real time; what no order explains is a `pg.*` violation,
//! named by what could not be placed, with the states the search had reached. Alongside,
//! each client's beliefs ([`beliefs`]) are judged against what the servers certainly did
//! (`app.*`, [`invariants`]). A search past its budget makes the case unknown, never "holds".
//! [`Tally`] adds cases up into a run's verdicts the same way live and in `pgchaos analyze`.
//! No I/O, no live cluster.
//!
//! May import `vocab`, `pooler` (the rules), `topology` (expectations) and `history`.

pub mod beliefs;
pub mod entries;
pub mod invariants;
pub mod model;
pub mod mutate;
pub mod notify;
pub mod search;
mod tally;
pub mod waits;

pub use invariants::{ALL, Invariant, by_name, catalog};
pub use tally::{
    FirstFailure, InvariantVerdict, RunCheck, Tally, check_history, check_history_as,
    check_history_with,
};

use crate::history::{Body, Bounds, CaseView, Event, Phase, RunEnd, RunHeader};
use crate::pooler::PoolRules;
use crate::topology::{Schedule, Topology};
use crate::vocab::step::Step;
use crate::vocab::timeout::Timeouts;
use crate::vocab::{BackendId, Op, Reply, Tier, Verdict};
use anyhow::{Result, bail};
use invariants::Moment;
use model::{Act, Entry, State, Why};
use search::{Budget, Mark, Search};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// One violation: which invariant, at which step, with the evidence in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    /// 0-based step index in the case.
    pub step: usize,
    pub detail: String,
}

/// A `pg.*` violation explained as Knossos explains one: the operation no order can place,
/// what the model said of it, how much of the case was explained before it, and the states
/// the search had reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    pub invariant: String,
    pub step: Option<usize>,
    /// The operation, in words.
    pub op: String,
    /// When it completed (ns since the run started).
    pub at_ns: u64,
    /// What the model said, per kind of state.
    pub reasons: Vec<String>,
    /// Operations, looks and probes completed before it, all explained.
    pub explained_before: usize,
    /// How many states the search had reached, and a few of them in words.
    pub states_reached: usize,
    pub states: Vec<String>,
}

/// What one case's verdict rests on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    /// Operations of clients and the nemesis placed with their recorded outcome, by op.
    pub by_op: BTreeMap<Op, u32>,
    /// Looks at pg_locks and contender probes placed.
    pub reads: u32,
    pub probes: u32,
}

impl Judged {
    pub fn ops(&self) -> u32 {
        self.by_op.values().sum()
    }
    pub fn add(&mut self, o: &Judged) {
        for (op, n) in &o.by_op {
            *self.by_op.entry(*op).or_default() += n;
        }
        self.reads += o.reads;
        self.probes += o.probes;
    }
    /// Nothing at all was judged.
    pub fn is_empty(&self) -> bool {
        self.ops() == 0 && self.reads == 0 && self.probes == 0
    }
}

/// The checker's verdict on one case.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseCheck {
    pub violations: Vec<Violation>,
    /// What the model expected of each executed step: `(step, reply)` (the recorded reply
    /// where some order explains it, else the model's prediction).
    pub expected: Vec<(usize, Reply)>,
    /// The search ran out of budget (why): every invariant it judges is unknown in this case
    /// unless violated before then.
    pub unknown: Option<String>,
    /// Invariants judged from the history that could not be judged in this case (a pair of
    /// a notification and a client that listened, then stopped: `check::notify`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
    pub judged: Judged,
    pub explanations: Vec<Explanation>,
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

    /// Whether `invariant` is unknown in this case (not violated, and the search it rests on
    /// ran out of budget).
    pub fn unknown_for(&self, invariant: &str) -> bool {
        !self.violates(invariant)
            && ((self.unknown.is_some() && by_name(invariant).is_some_and(|i| !i.history_only()))
                || self.undecided.iter().any(|u| u == invariant))
    }
}

/// What the checker needs beside a case's events: the pooling rules and timeouts the run
/// used and the bounds ops are judged by (all recorded in the history's `run` event), and the
/// search's budget.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckContext {
    pub rules: PoolRules,
    pub bounds: Bounds,
    pub timeouts: Timeouts,
    pub budget: Budget,
    /// Judge by client time alone: the servers' times in the history are ignored
    /// (`analyze --client-time`, to measure what they add on the same history).
    pub client_time: bool,
}

impl CheckContext {
    pub fn of(header: &RunHeader) -> CheckContext {
        CheckContext {
            rules: header.rules.clone(),
            bounds: header.bounds,
            timeouts: header.timeouts.clone(),
            budget: header.budget.into(),
            client_time: false,
        }
    }
}

/// Check one case from its events (a `case` event to its `case_end`).
pub fn check_case(cx: &CheckContext, events: &[Event]) -> Result<CaseCheck> {
    let view = CaseView::build(events)?;
    Ok(check_view(cx, &view, events))
}

/// A `migrate` that applied the migration (or tried to again and found its table: 42P07).
fn applied(op: Op, reply: &Reply) -> bool {
    op == Op::Migrate
        && (matches!(reply, Reply::Bool { value: true }) || reply.code() == Some("42P07"))
}

/// How many clients a case has: as many as it started with, or more if its entries name more.
fn clients_of(view: &CaseView, marks: &entries::Marks<'_>) -> usize {
    view.start.clients.max(
        marks
            .entries
            .iter()
            .filter_map(|e| match &e.act {
                Act::Stmt(s) => Some(s.client + 1),
                Act::Connect { client, .. }
                | Act::Disconnect { client }
                | Act::Reconnect { client, .. }
                | Act::Release { client } => Some(client + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0),
    )
}

/// The model the search runs over for a case's entries: the run's rules and timeouts, the
/// backends its looks list, and the orders the servers' clock and the connections give.
fn model_case<'e>(cx: &CheckContext, marks: &entries::Marks<'e>) -> model::Case<'e> {
    model::Case {
        rules: cx.rules.clone(),
        timeouts: cx.timeouts.clone(),
        case_start: marks.start,
        listed: marks
            .entries
            .iter()
            .filter_map(|e| match &e.act {
                Act::Read { obs, part } if part.postgres() => Some(obs),
                _ => None,
            })
            .flat_map(|o| o.backends.iter().map(|r| r.id))
            .collect(),
        after: entries::server_order(marks, !cx.client_time),
        // An application pool may hand a client's next op another connection.
        retires: if cx.rules.app_pin.is_none() {
            entries::retired_by(&marks.entries)
        } else {
            vec![]
        },
        entries: marks.entries.clone(),
    }
}

/// Records what no order of the case explains at `entry`: its violation, for a statement
/// the model's prediction as its step's expected reply, and the explanation `x`.
fn record_failure(
    entry: &Entry,
    f: &search::Failure<State, Why>,
    x: Explanation,
    out: &mut CaseCheck,
) {
    out.violations.push(Violation {
        invariant: x.invariant.clone(),
        step: entry.step.unwrap_or(0),
        detail: x.detail(),
    });
    if let (Act::Stmt(_), Some(step), Some(Why::Reply { predicted, .. })) =
        (&entry.act, entry.step, f.why.first())
    {
        out.expected.push((step, predicted.clone()));
    }
    out.explanations.push(x);
}

/// Notes the backend a completed entry touched last (a statement it served, a signal aimed
/// at it), and with which op.
fn note_last_on(entry: &Entry, last_on: &mut BTreeMap<BackendId, Op>) {
    match &entry.act {
        Act::Stmt(st) => {
            if let Some(b) = st.served {
                last_on.insert(b, st.op);
            }
        }
        Act::Terminate { target, .. } => {
            last_on.insert(*target, Op::Terminate);
        }
        Act::Cancel { target, .. } => {
            last_on.insert(*target, Op::Cancel);
        }
        _ => {}
    }
}

/// Prints one mark of the search (`PGCHAOS_TRACE_CASE`): the entry, and the states reached
/// (in words when there are three or fewer).
fn trace_mark(now: u64, mark: &Mark, entry: &Entry, states: &[&State]) {
    eprintln!(
        "{:>12.3} {:?} {} -> {} states{}",
        now as f64 / 1e6,
        mark,
        label(entry),
        states.len(),
        if states.len() <= 3 {
            format!(
                ": {}",
                states
                    .iter()
                    .map(|s| describe_state(s))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        } else {
            String::new()
        }
    );
}

/// Adds the ROLLBACKs the application saw that first took keys in their transaction, on a
/// known backend: `(client, backend, keys)`.
fn note_rollbacks(
    seen: &[beliefs::Seen],
    rollbacks: &mut Vec<(usize, BackendId, Vec<crate::vocab::Key>)>,
) {
    for s in seen {
        if let beliefs::Seen::RolledBack {
            client,
            backend: Some(b),
            taken,
        } = s
            && !taken.is_empty()
        {
            rollbacks.push((*client, *b, taken.clone()));
        }
    }
}

/// Judges the application's invariants at moment `m` (with the search `over`, only those
/// judged from the history alone), adding each violation not `said` before.
fn judge_app(
    m: &Moment,
    over: bool,
    said: &mut HashSet<(&'static str, String)>,
    out: &mut CaseCheck,
) {
    let mut lines = vec![];
    for inv in ALL.iter().filter(|i| i.info().tier == Tier::App) {
        if over && !inv.history_only() {
            continue;
        }
        lines.clear();
        inv.judge(m, &mut lines);
        for d in lines.drain(..) {
            let name = inv.info().name;
            if said.insert((name, d.clone())) {
                out.violations.push(Violation {
                    invariant: name.to_string(),
                    step: m.entry.step.unwrap_or(0),
                    detail: d,
                });
            }
        }
    }
}

/// Judges the notifications of a case (`check::notify`), or leaves them undecided where an
/// application pool collected none of them.
fn judge_notifications(
    cx: &CheckContext,
    entries: &[Entry],
    marks: &[(Mark, u64)],
    out: &mut CaseCheck,
) {
    if cx.rules.app_pin.is_none() {
        notify::judge(entries, marks, out);
    } else if entries
        .iter()
        .any(|e| matches!(&e.act, Act::Stmt(s) if s.op == Op::Listen))
    {
        // An application pool's connections do not collect notifications (`client`): what
        // arrived is not known.
        out.undecided.push(notify::NAME.into());
    }
}

/// Check an already folded case (`events` are the ones it was folded from).
pub fn check_view(cx: &CheckContext, view: &CaseView, events: &[Event]) -> CaseCheck {
    let marks = entries::build(events);
    let clients = clients_of(view, &marks);
    let case = model_case(cx, &marks);
    let mut search = Search::new(&case, case.initial(clients), cx.budget);
    let mut beliefs = beliefs::Beliefs::new(clients);
    let mut out = CaseCheck::default();
    if !cx.client_time {
        at_once(&marks, &mut out);
        before_its_backend(&marks, &mut out);
    }
    let mut said: HashSet<(&'static str, String)> = HashSet::new();
    let mut migrations: Vec<(usize, usize)> = vec![];
    let mut rollbacks: Vec<(usize, BackendId, Vec<crate::vocab::Key>)> = vec![];
    let mut forced: BTreeSet<usize> = BTreeSet::new();
    let mut completed_before = 0usize;
    // The last operation that touched each backend (a statement it served, a signal aimed at
    // it), for naming what a wrong look contradicts.
    let mut last_on: BTreeMap<BackendId, Op> = BTreeMap::new();
    let entries = &case.entries;
    let failed_calls = |f: u32| -> Option<(usize, crate::vocab::Key, String, u64)> {
        let e = entries.get(f as usize)?;
        let Act::Stmt(st) = &e.act else { return None };
        let at = marks.completed[f as usize].map(|(t, _)| t).unwrap_or(e.inv);
        Some((
            st.client,
            st.key?,
            st.reply.code().unwrap_or("unknown").to_string(),
            at,
        ))
    };
    let graph = |t: u64| progress_graph(t, view, events);
    // PGCHAOS_TRACE_CASE=run:3 (phase:case) prints the search mark by mark, for debugging the
    // model.
    let trace = std::env::var("PGCHAOS_TRACE_CASE")
        .ok()
        .is_some_and(|v| v == format!("{:?}:{}", view.start.phase, view.start.case).to_lowercase());
    for (mark, now) in &marks.marks {
        let (e, completes) = match *mark {
            Mark::Invoke(e) => (e, false),
            Mark::Complete(e) => (e, true),
        };
        let entry = &entries[e];
        if search.over().is_none() {
            match search.mark(*mark, *now) {
                Ok(None) => {}
                Ok(Some(f)) => {
                    forced.insert(e);
                    let x = explain(entry, &f, *now, completed_before, &last_on);
                    record_failure(entry, &f, x, &mut out);
                }
                Err(over) => out.unknown = Some(over.to_string()),
            }
        }
        let seen = if completes {
            completed_before += 1;
            note_last_on(entry, &mut last_on);
            if !forced.contains(&e) && search.over().is_none() {
                count_judged(entry, &mut out.judged);
                if let (Act::Stmt(st), Some(step)) = (&entry.act, entry.step)
                    && out.expected_at(step).is_none()
                {
                    out.expected.push((step, st.reply.clone()));
                }
            }
            if let Act::Stmt(st) = &entry.act
                && applied(st.op, st.reply)
            {
                migrations.push((st.client, entry.step.unwrap_or(0)));
            }
            beliefs.complete(e, entry, *now)
        } else {
            beliefs.invoke(e, entry);
            vec![]
        };
        let over = search.over().is_some();
        let states: Vec<&State> = if over {
            vec![]
        } else {
            search.states().collect()
        };
        if trace {
            trace_mark(*now, mark, entry, &states);
        }
        note_rollbacks(&seen, &mut rollbacks);
        let read_done = completes && matches!(entry.act, Act::Read { part, .. } if part.postgres());
        let m = Moment {
            t: *now,
            entry,
            completes,
            seen: &seen,
            beliefs: &beliefs,
            states: &states,
            bounds: &cx.bounds,
            migrations: &migrations,
            rollbacks: &rollbacks,
            failed_calls: &failed_calls,
            graph: &graph,
        };
        judge_app(&m, over, &mut said, &mut out);
        if read_done {
            // A look judged the rollbacks before it.
            rollbacks.clear();
        }
    }
    progress(cx, view, events, &mut out);
    judge_notifications(cx, entries, &marks.marks, &mut out);
    out.violations.sort_by_key(|v| v.step);
    out
}

fn count_judged(entry: &Entry, j: &mut Judged) {
    match &entry.act {
        Act::Stmt(st) => *j.by_op.entry(st.op).or_default() += 1,
        Act::Terminate { .. } => *j.by_op.entry(Op::Terminate).or_default() += 1,
        Act::Cancel { .. } => *j.by_op.entry(Op::Cancel).or_default() += 1,
        Act::Fault { op, .. } => *j.by_op.entry(*op).or_default() += 1,
        Act::Disconnect { .. } => *j.by_op.entry(Op::Disconnect).or_default() += 1,
        Act::Reconnect { .. } => *j.by_op.entry(Op::Reconnect).or_default() += 1,
        Act::Read { part, .. } => {
            // A sample's two PostgreSQL reads are one look.
            if part.activity() {
                j.reads += 1
            }
        }
        Act::Probe { .. } => j.probes += 1,
        Act::Notified { .. } => {}
        Act::Connect { .. } | Act::Release { .. } => {}
    }
}

/// The operation of an entry, in words.
fn label(e: &Entry) -> String {
    match &e.act {
        Act::Stmt(s) => {
            let mut l = format!("C{} {}", s.client + 1, s.op);
            if let Some(k) = s.key {
                l.push_str(&format!(" {k}"));
            }
            if let Some((g, v)) = s.setting {
                l.push_str(&format!(" {g}"));
                if s.op.sets() {
                    l.push_str(&format!(" = {v}ms"));
                }
            }
            l.push_str(&format!(" replied {}", s.reply));
            if let Some(b) = s.served {
                l.push_str(&format!(" on {b}"));
            }
            l
        }
        Act::Connect { client, reply } => format!("C{} connect replied {reply}", client + 1),
        Act::Disconnect { client } => format!("C{} disconnect", client + 1),
        Act::Reconnect { client, reply } => format!("C{} reconnect replied {reply}", client + 1),
        Act::Release { client } => format!("C{} release", client + 1),
        Act::Terminate { target, reply } => format!("terminate of {target} replied {reply}"),
        Act::Cancel { target, reply } => format!("cancel of {target} replied {reply}"),
        Act::Fault { op, target, reply } => match target {
            Some(t) => format!("{op} of {t} replied {reply}"),
            None => format!("{op} replied {reply}"),
        },
        Act::Read { part, .. } => match (e.step, part) {
            (_, model::Part::Pooler) => "a look at SHOW SERVERS".to_string(),
            (_, model::Part::Activity) => "a look at pg_stat_activity".to_string(),
            (Some(s), _) => format!("the look at pg_locks after step {}", s + 1),
            (None, _) => "a look at pg_locks".to_string(),
        },
        Act::Probe {
            key,
            available,
            after,
        } => format!(
            "the contender's probe of key {key}{} ({})",
            after
                .map(|(op, _)| format!(" after {op}"))
                .unwrap_or_default(),
            if *available { "available" } else { "taken" }
        ),
        Act::Notified {
            client,
            backend,
            payload,
            ..
        } => format!(
            "C{} received notification {payload:?}{}",
            client + 1,
            backend.map(|b| format!(" from {b}")).unwrap_or_default()
        ),
    }
}

/// The order in which reasons name an invariant when states disagree: the specific before
/// the general.
const RANK: &[&str] = &[
    "pg.exclusion",
    "pg.terminate_releases",
    "pg.xact_released_at_end",
    "pg.session_survives_rollback",
    "pg.stacking",
    "pg.cancel_keeps_session_locks",
    "pg.show_matches",
    "pg.objects_match",
    "pg.notification_matches",
    "pg.locks_match_model",
    "pg.replies_match_model",
];

impl Explanation {
    /// One line for the verdict table's evidence.
    pub fn detail(&self) -> String {
        format!(
            "{} at {:.3} ms: no order of the case's operations explains it: {}. {} operations, looks and probes before it were explained; the search had reached {} state{}{}",
            self.op,
            self.at_ns as f64 / 1e6,
            self.reasons.join("; or "),
            self.explained_before,
            self.states_reached,
            if self.states_reached == 1 { "" } else { "s" },
            self.states
                .first()
                .map(|s| format!(", e.g. {s}"))
                .unwrap_or_default()
        )
    }
}

/// The invariant a wrong look breaks: what the last operation on that backend should have
/// left there (a commit releases transaction locks, a rollback keeps session locks, ...), by
/// the same table as the contender's probes; else the plain mismatch.
fn read_invariant(w: &Why, last_on: &BTreeMap<BackendId, Op>) -> &'static str {
    match w {
        Why::Rows {
            backend,
            model,
            seen,
        } => {
            let extra = seen.iter().any(|k| !model.contains(k));
            let after = last_on.get(backend).copied();
            // Held in the look but free in the model reads like a probe that could not take
            // the key; the other way round, like one that could.
            model::probe_invariant(!extra, after)
        }
        w => w.invariant(),
    }
}

fn explain(
    entry: &Entry,
    f: &search::Failure<State, Why>,
    now: u64,
    before: usize,
    last_on: &BTreeMap<BackendId, Op>,
) -> Explanation {
    let mut whys = f.why.clone();
    let name = |w: &Why| read_invariant(w, last_on);
    whys.sort_by_key(|w| {
        RANK.iter()
            .position(|r| *r == name(w))
            .unwrap_or(RANK.len())
    });
    let invariant = whys
        .first()
        .map(name)
        .unwrap_or(match &entry.act {
            Act::Read { .. } => "pg.locks_match_model",
            _ => "pg.replies_match_model",
        })
        .to_string();
    let mut reasons: Vec<String> = whys.iter().take(3).map(Why::describe).collect();
    if reasons.is_empty() {
        reasons.push("no state the search reached allows it".into());
    }
    Explanation {
        invariant,
        step: entry.step,
        op: label(entry),
        // A look is dated by when it began (its end is only bounded by the next event).
        at_ns: match entry.act {
            Act::Read { .. } | Act::Probe { .. } => entry.inv,
            _ => now,
        },
        reasons,
        explained_before: before,
        states_reached: f.reached,
        states: f.states.iter().take(2).map(describe_state).collect(),
    }
}

/// A state in words: each backend that holds, waits or is ending.
pub fn describe_state(s: &State) -> String {
    let mut parts = vec![];
    for (id, x) in &s.backends {
        let mut bits = vec![];
        for (k, n) in &x.session {
            bits.push(format!("{k} (session x{n})"));
        }
        for (k, n) in &x.xact {
            bits.push(format!("{k} (transaction x{n})"));
        }
        let mut p = format!("{id}");
        if !bits.is_empty() {
            p.push_str(&format!(" holds {}", bits.join(", ")));
        }
        if let Some(k) = x.waiting() {
            p.push_str(&format!(" waits for {k}"));
        }
        match x.tx {
            model::Tx::Idle => {}
            model::Tx::Open => p.push_str(", in a transaction"),
            model::Tx::Aborted => p.push_str(", in an aborted transaction"),
        }
        match x.life {
            model::Life::Alive => {}
            model::Life::Closing(c) => p.push_str(&format!(", closed by {c}")),
            model::Life::Exiting(c) => p.push_str(&format!(", exiting ({c})")),
            model::Life::Gone(c) => p.push_str(&format!(", gone ({c})")),
        }
        if bits.is_empty() && x.life == model::Life::Alive && x.tx == model::Tx::Idle {
            p.push_str(" idle");
        }
        parts.push(p);
    }
    if parts.is_empty() {
        "no backend known".into()
    } else {
        format!("{{{}}}", parts.join("; "))
    }
}

/// `app.progress`, from the history alone: every op within its bound; the wait-for graph at
/// the deadline of one that was not.
fn progress(cx: &CheckContext, view: &CaseView, events: &[Event], out: &mut CaseCheck) {
    for s in &view.steps {
        // The connect before the step, an op of its own where connecting links a server
        // (pgpool-II: it waits for a free child), bounded as any op.
        if let Some(t_open) = s.t_open {
            let bound = cx.bounds.of(Op::Open, None);
            let took = s.t_opened.map(|d| d.saturating_sub(t_open));
            if took.is_none_or(|t| t > bound) {
                let graph = (view.start.schedule == Schedule::Concurrent)
                    .then(|| progress_graph(t_open + bound, view, events));
                let line = match took {
                    Some(t) => invariants::progress_line(
                        s.client,
                        Op::Open,
                        s.open_done.map(|c| &c.value),
                        t,
                        bound,
                        graph,
                    ),
                    None => format!(
                        "C{} open never completed (invoked at {:.3} ms)",
                        s.client + 1,
                        t_open as f64 / 1e6
                    ),
                };
                out.violations.push(Violation {
                    invariant: "app.progress".into(),
                    step: s.index,
                    detail: line,
                });
            }
        }
        let (Some(op), Some(t_inv)) = (s.op, s.t_invoke) else {
            continue;
        };
        if op.is_server_fault() {
            // A fault of the servers is held and healed on purpose.
            continue;
        }
        let bound = cx.bounds.of(op, s.ms);
        let line = match s.t_done {
            Some(d) => {
                let took = d.saturating_sub(t_inv);
                if took <= bound {
                    continue;
                }
                let graph = (view.start.schedule == Schedule::Concurrent)
                    .then(|| progress_graph(t_inv + bound, view, events));
                invariants::progress_line(
                    s.client,
                    op,
                    s.done.map(|c| &c.value),
                    took,
                    bound,
                    graph,
                )
            }
            None => format!(
                "C{} {} never completed (invoked at {:.3} ms)",
                s.client + 1,
                op,
                t_inv as f64 / 1e6
            ),
        };
        out.violations.push(Violation {
            invariant: "app.progress".into(),
            step: s.index,
            detail: line,
        });
    }
}

/// Two statements one backend ran at once by the server's clock
/// ([`entries::at_once_on_a_backend`]): a reply names a backend it cannot have come from.
fn at_once(marks: &entries::Marks<'_>, out: &mut CaseCheck) {
    for (a, z, b) in entries::at_once_on_a_backend(marks) {
        let base = a.lo.min(z.lo);
        let (ea, ez) = (&marks.entries[a.entry], &marks.entries[z.entry]);
        out.violations.push(Violation {
            invariant: "pg.replies_match_model".into(),
            step: ez.step.or(ea.step).unwrap_or(0),
            detail: format!(
                "{} and {} both ran on {b} at once by the server's clock ({} to {} us and {} to \
                 {} us after the earlier's call began): a backend runs one statement at a time",
                label(ea),
                label(ez),
                a.lo - base,
                a.hi - base,
                z.lo - base,
                z.hi - base
            ),
        });
    }
}

/// pg.replies_match_model for a statement the server ran before the backend its reply names
/// had started ([`entries::before_its_backend`]).
fn before_its_backend(marks: &entries::Marks<'_>, out: &mut CaseCheck) {
    for (e, t, b) in entries::before_its_backend(marks) {
        let entry = &marks.entries[e];
        out.violations.push(Violation {
            invariant: "pg.replies_match_model".into(),
            step: entry.step.unwrap_or(0),
            detail: format!(
                "{} ran {} us before {b} started, by the server's clock, yet names it: a \
                 backend runs statements only once it has started",
                label(entry),
                b.start_us - t
            ),
        });
    }
}

/// The wait-for graph in words at the sample nearest `deadline`: what was running then.
fn progress_graph(deadline: u64, view: &CaseView, events: &[Event]) -> String {
    let mut sample = None;
    for e in events {
        if let Body::Obs(o) = &e.body
            && o.at == crate::history::At::Sample
        {
            sample = Some((e.t, &o.obs));
            if e.t >= deadline {
                break;
            }
        }
    }
    let Some((t, obs)) = sample else {
        return format!(
            "no sample of the servers near {:.3} ms (sampling off?)",
            deadline as f64 / 1e6
        );
    };
    let mut running = vec![];
    for s in &view.steps {
        // A connect still waiting (pgpool-II: for a free child).
        if let Some(to) = s.t_open
            && to <= t
            && s.t_opened.unwrap_or(u64::MAX) > t
        {
            running.push(waits::Running {
                client: s.client,
                step: s.index,
                op: Op::Open,
                key: None,
                for_ns: t - to,
            });
        }
        let (Some(ti), Some(op)) = (s.t_invoke, s.op) else {
            continue;
        };
        let done = s.t_done.unwrap_or(u64::MAX);
        if ti <= t && done > t {
            running.push(waits::Running {
                client: s.client,
                step: s.index,
                op,
                key: s.key,
                for_ns: t - ti,
            });
        }
    }
    // Every backend a client ran on last, up to the sample, is that client's connection.
    let mut owners: BTreeMap<BackendId, usize> = BTreeMap::new();
    for e in events {
        if e.t > t {
            continue;
        }
        if let Some(c) = e.completion()
            && let (Some(b), crate::history::Process::Client(client)) = (c.backend, c.p)
        {
            owners.insert(b, client);
        }
    }
    format!(
        "(sample at {:.3} ms) {}",
        t as f64 / 1e6,
        waits::describe(obs, &running, &owners)
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_release;
#[cfg(test)]
mod tests_unknown;
