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
pub mod waits;

pub use invariants::{ALL, Invariant, by_name, catalog};

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

/// Check an already folded case (`events` are the ones it was folded from).
pub fn check_view(cx: &CheckContext, view: &CaseView, events: &[Event]) -> CaseCheck {
    let marks = entries::build(events);
    let clients = view.start.clients.max(
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
    );
    let case = model::Case {
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
        after: if cx.client_time {
            vec![]
        } else {
            entries::server_order(&marks)
        },
        // An application pool may hand a client's next op another connection.
        retires: if cx.rules.app_pin.is_none() {
            entries::retired_by(&marks.entries)
        } else {
            vec![]
        },
        entries: marks.entries.clone(),
    };
    let mut search = Search::new(&case, case.initial(clients), cx.budget);
    let mut beliefs = beliefs::Beliefs::new(clients);
    let mut out = CaseCheck::default();
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
                Err(over) => out.unknown = Some(over.to_string()),
            }
        }
        let seen = if completes {
            completed_before += 1;
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
            eprintln!(
                "{:>12.3} {:?} {} -> {} states{}",
                *now as f64 / 1e6,
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
        for s in &seen {
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
        let mut lines = vec![];
        for inv in ALL.iter().filter(|i| i.info().tier == Tier::App) {
            if over && !inv.history_only() {
                continue;
            }
            lines.clear();
            inv.judge(&m, &mut lines);
            for d in lines.drain(..) {
                let name = inv.info().name;
                if said.insert((name, d.clone())) {
                    out.violations.push(Violation {
                        invariant: name.to_string(),
                        step: entry.step.unwrap_or(0),
                        detail: d,
                    });
                }
            }
        }
        if read_done {
            // A look judged the rollbacks before it.
            rollbacks.clear();
        }
    }
    progress(cx, view, events, &mut out);
    if cx.rules.app_pin.is_none() {
        notify::judge(entries, &marks.marks, &mut out);
    } else if entries
        .iter()
        .any(|e| matches!(&e.act, Act::Stmt(s) if s.op == Op::Listen))
    {
        // An application pool's connections do not collect notifications (`client`): what
        // arrived is not known.
        out.undecided.push(notify::NAME.into());
    }
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
            if part.postgres() {
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
                    if f.evidence_from_run || !shown(&f.evidence) {
                        f.evidence = Some((events.to_vec(), check.clone()));
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
    //! The checker on small hand-written histories (`tests/fixtures/histories/*.jsonl`): for
    //! every invariant, one history where it holds and one where it is violated, with the
    //! evidence text the violation must carry.
    use super::*;
    use crate::history::HistoryReader;
    use std::collections::BTreeSet;
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
            "double-grant",
            "pg.exclusion",
            "C2 try_lock 7 replied true on pid 102 (backend_start 2026-11-30 00:53:20.000002+00) at 0.012 ms: no order of the case's operations explains it: the model predicts false",
        ),
        (
            "replies-match-model",
            "pg.replies_match_model",
            "C1 unlock 7 replied true on pid 101 (backend_start 2026-11-30 00:53:20.000001+00) at 0.009 ms: no order of the case's operations explains it: the model predicts false",
        ),
        (
            "locks-match-model",
            "pg.locks_match_model",
            "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding nothing, the model 7",
        ),
        (
            "xact-released-at-end",
            "pg.xact_released_at_end",
            "after commit: a fresh contender could not take key 7 (expected available)",
        ),
        (
            "xact-sample",
            "pg.xact_released_at_end",
            "a look at pg_locks at 0.011 ms: no order of the case's operations explains it: pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding 7, the model nothing",
        ),
        (
            "session-survives-rollback",
            "pg.session_survives_rollback",
            "after rollback: a fresh contender could take key 7 (expected held",
        ),
        (
            "stacking",
            "pg.stacking",
            "after unlock: a fresh contender could take key 7 (expected held",
        ),
        (
            "terminate-releases",
            "pg.terminate_releases",
            "is still in pg_stat_activity after terminate ended it",
        ),
        (
            "cancel-keeps-session-locks",
            "pg.cancel_keeps_session_locks",
            "after cancel: a fresh contender could take key 7 (expected held",
        ),
        (
            "silent-drop",
            "pg.locks_match_model",
            "pid 101 (backend_start 2026-11-30 00:53:20.000001+00) is missing from pg_stat_activity, and nothing ended it",
        ),
        (
            "split-transaction",
            "pg.replies_match_model",
            "C1 try_lock 7 replied true on pid 102",
        ),
        (
            "grant-beside",
            "pg.exclusion",
            "key 7 granted to 2 backends at once",
        ),
        (
            "closed-keeps-the-end",
            "pg.locks_match_model",
            "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding nothing, the model 7",
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
            "exiting-partial",
            "pg.locks_match_model",
            "pg_locks shows pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holding 8",
        ),
        (
            "sample-parts",
            "pg.locks_match_model",
            "SHOW SERVERS lists pid 101 (backend_start 2026-11-30 00:53:20.000001+00), which pooler_kill dropped with every other server",
        ),
        (
            "reconnect-login",
            "pg.replies_match_model",
            "C1 try_lock 7 replied error 08P01",
        ),
        (
            "replica",
            "pg.replies_match_model",
            "C3 try_lock 7 replied false on pid 102 (backend_start 2026-11-30 00:53:20.000002+00)",
        ),
        (
            "handover",
            "pg.replies_match_model",
            "C2 unlock 7 replied true on pid 101 (backend_start 2026-11-30 00:53:20.000001+00)",
        ),
        (
            "reset-pending",
            "app.no_orphans",
            "backend pid 101 (backend_start 2026-11-30 00:53:20.000001+00) holds key 7, but no client believes it holds it",
        ),
        (
            "failed-lock-not-held",
            "app.failed_lock_not_held",
            "C2's lock call on 7 failed with 55P03 at 1010.000 ms, yet no order of what followed explains the servers without it granted",
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
            // Recorded on pgpool-II 4.3.5: three clients keep their connections on two
            // children (harness/tests/pgpool.rs); with three children it holds.
            "progress-open",
            "app.progress",
            "C3 open took 2.502 s, its bound is 0.500 s (it never completed: the client gave up). At the deadline: (sample at 733.168 ms) C3 open (0.506 s so far) waits for the pooler to accept it: its 2 client connections are served (slot 1946 on pid 1998",
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
            "show-matches",
            "pg.show_matches",
            "C2 show lock_timeout replied default on pid 101 (backend_start 2026-11-30 00:53:20.000001+00) at 0.008 ms: no order of the case's operations explains it: the model predicts 1100 on pid 101",
        ),
        (
            // A tracked setting lost on the way to C1's second server (`PoolRules::tracked_settings`).
            "settings-tracked",
            "pg.show_matches",
            "C1 show search_path replied default on pid 102 (backend_start 2026-11-30 00:53:20.000002+00)",
        ),
        (
            "settings-stay-put",
            "app.settings_stay_put",
            "C2 read lock_timeout = 1100 (the value C1 sets) on pid 101 (backend_start 2026-11-30 00:53:20.000001+00), but its own session has default",
        ),
        (
            "objects-match",
            "pg.objects_match",
            "C2 execute replied error 26000 on pid 101",
        ),
        (
            "prepared-statements-follow",
            "app.prepared_statements_follow",
            "C2 execute found the prepared statement of C1 on pid 101",
        ),
        (
            "prepared-protocol",
            "app.prepared_statements_follow",
            "C1 execute_protocol found no protocol-level prepared statement (26000), but its own session has its own protocol-level prepared statement",
        ),
        (
            "temp-state-follows",
            "app.temp_state_follows",
            "C1 read_temp found no temporary table (42P01) on pid 102",
        ),
        (
            "notification-matches",
            "pg.notification_matches",
            "was not listening on pgchaos when the NOTIFY of \"C2 s3\" committed",
        ),
        (
            "notifications-arrive",
            "app.notifications_arrive",
            "C1 listened (step 1) and stayed, but never received C2's notification \"C2 s1\" (step 2,",
        ),
        (
            // C2's first ping after C1 (a listener) left got the reply to PgBouncer's DISCARD
            // ALL: no identity row (docs/session-state.md, "Replies out of step").
            "replies-in-step",
            "app.replies_in_step",
            "C2 ping (step 3) at 0.010 ms got a reply to another statement: ping returns an identity row, but none came",
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

    /// The replica fixture's violation is the replica rule's: the same history with one
    /// pooler of the same two servers (every server anyone's) holds.
    #[test]
    fn a_server_of_another_replica_is_what_the_replica_history_violates() {
        let path = Path::new(FIXTURES).join("replica-violated.jsonl");
        let mut events: Vec<Event> = HistoryReader::open(&path)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let Body::Run(h) = &mut events[0].body else {
            panic!("a run header first")
        };
        assert_eq!((h.rules.replicas, h.rules.pool_size), (2, 1));
        h.rules.replicas = 1;
        h.rules.pool_size = 2;
        let ctx = CheckContext::of(h);
        let case = crate::history::view::cases(&events)[0].to_vec();
        let one = check_case(&ctx, &case).unwrap();
        assert!(one.violations.is_empty(), "{:?}", one.violations);
        let (_, two) = check_file("replica-violated");
        assert!(
            two.violations.iter().any(|v| v
                .detail
                .contains("is a server of pooler replica 2 and C3 connects to replica 1")),
            "{:?}",
            two.violations
        );
    }

    /// The settings fixtures turn on the reset rule: the default C2 reads after C1's SET is
    /// explained exactly when a reset that clears settings ran between them (session mode when
    /// C1 leaves; transaction mode only with `server_reset_query_always`).
    #[test]
    fn a_reset_that_clears_settings_is_what_explains_the_default() {
        let judged = |name: &str, edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
            let mut events = events_of(name);
            let Body::Run(h) = &mut events[0].body else {
                panic!("a run header first")
            };
            edit(&mut h.rules);
            let ctx = CheckContext::of(h);
            let case = crate::history::view::cases(&events)[0].to_vec();
            check_case(&ctx, &case).unwrap().violations
        };
        let shows = |v: &[Violation]| v.iter().any(|v| v.invariant == "pg.show_matches");
        // Session mode: DISCARD ALL at C1's disconnect; a reset that leaves settings alone
        // (`SELECT pg_advisory_unlock_all()`) cannot explain C2's default.
        assert!(!shows(&judged("settings-stay-put-holds", &|_| {})));
        assert!(shows(&judged("settings-stay-put-holds", &|r| {
            r.reset_clears_settings = false
        })));
        // Transaction mode: no reset between clients, unless at every release.
        assert!(shows(&judged("show-matches-violated", &|_| {})));
        assert!(!shows(&judged("show-matches-violated", &|r| {
            r.reset_always = true
        })));
        // Histories written before settings were modelled read as resets that clear none.
        let old: crate::pooler::PoolRules = serde_json::from_str(
            r#"{"mode":"session","pool_size":1,"reset_releases_locks":true,"reset_always":false}"#,
        )
        .unwrap();
        assert!(!old.reset_clears_settings);
    }

    /// The protocol-level fixture turns on the tracking rule: C1's Bind/Execute on a second
    /// server fails with 26000 unless the pooler carries its statement there
    /// (`PoolRules::tracks_prepared`); with tracking, it is the 26000 that no order explains.
    #[test]
    fn tracking_is_what_carries_a_protocol_statement() {
        let judged = |edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
            let mut events = events_of("prepared-protocol-violated");
            let Body::Run(h) = &mut events[0].body else {
                panic!("a run header first")
            };
            edit(&mut h.rules);
            let ctx = CheckContext::of(h);
            let case = crate::history::view::cases(&events)[0].to_vec();
            let v = check_case(&ctx, &case).unwrap().violations;
            v.into_iter().map(|v| v.invariant).collect::<BTreeSet<_>>()
        };
        let untracked = judged(&|_| {});
        assert!(
            !untracked.iter().any(|i| i.starts_with("pg.")),
            "{untracked:?}"
        );
        assert!(untracked.contains("app.prepared_statements_follow"));
        let tracked = judged(&|r| r.tracks_prepared = true);
        assert!(tracked.contains("pg.objects_match"), "{tracked:?}");
        // Histories written before objects were modelled read as no tracking.
        let old: crate::pooler::PoolRules = serde_json::from_str(
            r#"{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false}"#,
        )
        .unwrap();
        assert!(!old.tracks_prepared && !old.reset_clears_objects);
    }

    /// The tracked-settings fixture (transaction mode, two servers, `search_path` tracked):
    /// C2 reads the default on the server C1's SET left, and C1 reads its own value on a
    /// second server. Both are explained exactly when the pooler restores each client's
    /// tracked value at link (`PoolRules::tracked_settings`); without the rule both reads are
    /// replies no order explains, and a tracked `lock_timeout` changes nothing.
    #[test]
    fn tracking_is_what_makes_a_setting_follow_its_client() {
        let judged = |edit: &dyn Fn(&mut crate::pooler::PoolRules)| {
            let mut events = events_of("settings-tracked-holds");
            let Body::Run(h) = &mut events[0].body else {
                panic!("a run header first")
            };
            edit(&mut h.rules);
            let ctx = CheckContext::of(h);
            let case = crate::history::view::cases(&events)[0].to_vec();
            let v = check_case(&ctx, &case).unwrap();
            (
                v.violations
                    .iter()
                    .map(|v| v.invariant.clone())
                    .collect::<BTreeSet<_>>(),
                v.undecided.is_empty(),
            )
        };
        let (tracked, judged_all) = judged(&|_| {});
        assert!(tracked.is_empty(), "{tracked:?}");
        assert!(judged_all);
        let (untracked, _) = judged(&|r| r.tracked_settings.clear());
        assert!(untracked.contains("pg.show_matches"), "{untracked:?}");
        let (other, _) = judged(&|r| r.tracked_settings = vec![crate::vocab::Guc::LockTimeout]);
        assert!(other.contains("pg.show_matches"), "{other:?}");
        // Histories written before tracking was modelled track nothing.
        let old: crate::pooler::PoolRules = serde_json::from_str(
            r#"{"mode":"transaction","pool_size":2,"reset_releases_locks":true,"reset_always":false}"#,
        )
        .unwrap();
        assert!(old.tracked_settings.is_empty());
    }

    /// NOTIFY's commit lock: a `notify` that fails with 55P03 is explained only while another
    /// client's `notify` (or `commit`) overlaps it in real time, and then sends nothing; alone,
    /// PostgreSQL has no reason to refuse it (docs/session-state.md, "NOTIFY's commit lock").
    #[test]
    fn a_notify_times_out_on_the_commit_lock_only_beside_another() {
        let head =
            std::fs::read_to_string(Path::new(FIXTURES).join("notification-matches-holds.jsonl"))
                .unwrap();
        let head: Vec<&str> = head.lines().take(6).collect();
        let history = |c2_inv: u64, c2_done: u64| {
            let mut lines: Vec<String> = head.iter().map(|l| l.to_string()).collect();
            lines.push(r#"{"t":5010,"type":"invoke","p":"C1","step":0,"f":"notify"}"#.into());
            lines.push(format!(
                r#"{{"t":{c2_inv},"type":"invoke","p":"C2","step":1,"f":"notify"}}"#
            ));
            lines.push(r#"{"t":6010,"type":"ok","p":"C1","step":0,"f":"notify","value":{"kind":"ok"},"backend":[101,1796000000000001]}"#.into());
            lines.push(format!(r#"{{"t":{c2_done},"type":"fail","p":"C2","step":1,"f":"notify","value":{{"kind":"error","code":"55P03","message":"canceling statement due to lock timeout"}},"backend":[102,1796000000000002]}}"#));
            lines.push(r#"{"t":12010,"type":"obs","at":"end","backends":[{"id":[101,1796000000000001],"backend_start":"2026-11-30 00:53:20.000001+00","state":"idle","query":"/*pgchaos s0*/ SELECT"},{"id":[102,1796000000000002],"backend_start":"2026-11-30 00:53:20.000002+00","state":"idle","query":"/*pgchaos s0*/ SELECT"}]}"#.into());
            lines.push(r#"{"t":13010,"type":"probe","why":"end","key":7,"available":true}"#.into());
            lines
                .push(r#"{"t":14010,"type":"case_end","case":0,"steps_us":1,"reset_us":1}"#.into());
            lines.push(r#"{"t":15010,"type":"run_end","cases":1,"stopped_by_time_limit":false,"run_ms":1}"#.into());
            let events: Vec<Event> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
                .collect();
            let run = check_history(events.clone().into_iter().map(Ok)).unwrap();
            let case = crate::history::view::cases(&events)[0].to_vec();
            let verdict = check_case(&CheckContext::of(&run.header), &case).unwrap();
            verdict
                .violations
                .iter()
                .map(|v| v.invariant.clone())
                .collect::<Vec<String>>()
        };
        // C2's notify runs while C1's commits: the lock timeout is PostgreSQL's answer.
        let beside = history(5500, 6500);
        assert!(!beside.iter().any(|i| i.starts_with("pg.")), "{beside:?}");
        // C2's notify starts after C1's ended: nothing held the lock.
        let alone = history(7010, 8010);
        assert!(
            alone.iter().any(|i| i == "pg.replies_match_model"),
            "{alone:?}"
        );
    }

    /// Recorded on PostgreSQL 18.6 (direct, concurrent schedule, 2-core machine under load):
    /// C2's backend held 612001 and 4242424242 and exited at C2's disconnect; C3, waiting for
    /// 612001, was granted it, and its next statement, a try_lock of 4242424242, was refused:
    /// the exit had released one key and not yet the other (`LockReleaseAll` goes one lock
    /// partition at a time). No pg.* verdict. The same history with C2's second call on
    /// 612001, so that no backend ever held 4242424242, is still violated: the rule excuses a
    /// refusal only while an exiting backend holds the key.
    #[test]
    fn an_exit_releases_one_key_at_a_time() {
        // Read through the history's reader (observations are stored as deltas), then
        // written back as whole events, one per line, so that the edit below is textual.
        let text: String = events_of("exit-releases-one-key-at-a-time")
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        let pg = |text: &str| {
            let events: Vec<Event> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
                .collect();
            let run = check_history(events.clone().into_iter().map(Ok)).unwrap();
            let case = crate::history::view::cases(&events)[0].to_vec();
            let verdict = check_case(&CheckContext::of(&run.header), &case).unwrap();
            assert!(verdict.undecided.is_empty(), "{verdict:?}");
            verdict
                .violations
                .iter()
                .filter(|v| v.invariant.starts_with("pg."))
                .map(|v| format!("{}: {}", v.invariant, v.detail))
                .collect::<Vec<String>>()
        };
        assert_eq!(pg(&text), Vec::<String>::new());
        // C2's second call takes 612001 again (stacked) instead of 4242424242: its backend
        // never holds 4242424242, and C3's refusal has nothing to explain it.
        let other = r#""p":"C2","step":2,"f":"try_lock","key":4242424242"#;
        assert_eq!(text.matches(other).count(), 1, "{text}");
        let edited = text.replace(other, r#""p":"C2","step":2,"f":"try_lock","key":612001"#);
        let v = pg(&edited);
        assert!(
            v.iter()
                .any(|l| l
                    .starts_with("pg.replies_match_model: C3 try_lock 4242424242 replied false")),
            "{v:?}"
        );
    }

    /// `app.notifications_arrive` judges both ways, and says unknown where it cannot: a
    /// client that listened and stopped may or may not have heard.
    #[test]
    fn notifications_are_judged_both_ways_or_left_unknown() {
        let (_, v) = check_file("notifications-arrive-violated");
        let lines: Vec<&str> = v
            .violations
            .iter()
            .filter(|x| x.invariant == notify::NAME)
            .map(|x| x.detail.as_str())
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines.iter().any(|l| l.starts_with(
                "C2 received a notification it never listened for: \"C2 s1\" on pid 101"
            )),
            "{lines:?}"
        );
        assert!(!v.unknown_for(notify::NAME));
        let (_, holds) = check_file("notifications-arrive-holds");
        assert!(holds.undecided.is_empty(), "{holds:?}");
        // C1's LISTEN was rolled back: it does not listen at the end, having listened.
        let (run, rolled) = check_file("notification-matches-violated");
        assert!(!rolled.violates(notify::NAME));
        assert_eq!(rolled.undecided, [notify::NAME]);
        assert!(rolled.unknown_for(notify::NAME));
        assert_eq!(
            run.tally.unknown_indices.get(notify::NAME).map(Vec::len),
            Some(1)
        );
    }

    #[test]
    #[ignore]
    fn print_fixtures() {
        for (stem, inv, _) in TABLE {
            for v in ["holds", "violated"] {
                let (_, c) = check_file(&format!("{stem}-{v}"));
                eprintln!("== {stem}-{v} (want {inv}): unknown {:?}", c.unknown);
                for x in &c.violations {
                    eprintln!("   {} @{}: {}", x.invariant, x.step, x.detail);
                }
            }
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
            // Judged by a test of its own (its name says where).
            let own = ["exit-releases-one-key-at-a-time"]; // an_exit_releases_one_key_at_a_time
            assert!(
                TABLE.iter().any(|(s, _, _)| *s == stem) || own.contains(&stem.as_str()),
                "{name} is not checked"
            );
        }
    }

    fn transaction_mode() -> Topology {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../topologies/transaction-mode.yaml"
        );
        Topology::load(std::path::Path::new(path), &crate::catalog()).unwrap()
    }

    fn events_of(name: &str) -> Vec<Event> {
        let path = Path::new(FIXTURES).join(format!("{name}.jsonl"));
        HistoryReader::open(&path)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap()
    }

    fn results_of(events: Vec<Event>) -> crate::report::Results {
        let run = check_history(events.into_iter().map(Ok)).unwrap();
        crate::report::Results::build(&transaction_mode(), &run.header, &run.tally, false, 1, true)
    }

    /// A history with no case, or whose every step was skipped, judges nothing: its pg.*
    /// verdicts are unknown ("rests on nothing") and the run does not pass.
    #[test]
    fn a_history_that_judged_nothing_does_not_pass() {
        let full = events_of("stacking-holds");
        let no_cases: Vec<Event> = full
            .iter()
            .filter(|e| matches!(e.body, Body::Run(_) | Body::RunEnd(_)))
            .cloned()
            .collect();
        // Every step turned into a skip.
        let skipped: Vec<Event> = full
            .iter()
            .filter_map(|e| match &e.body {
                Body::Invoke(i) if i.step.is_some() => Some(Event {
                    t: e.t,
                    body: Body::Skip(crate::history::Skip {
                        p: i.p,
                        step: i.step.unwrap(),
                        f: i.f,
                        key: i.key,
                        ms: None,
                        guc: None,
                        when: Default::default(),
                        message: None,
                        reason: "skipped by the test".into(),
                    }),
                }),
                Body::Ok(c) | Body::Fail(c) | Body::Info(c) if c.step.is_some() => None,
                Body::Obs(_) | Body::Probe(_) => None,
                _ => Some(e.clone()),
            })
            .collect();
        for (what, events) in [("no case", no_cases), ("every step skipped", skipped)] {
            let r = results_of(events);
            assert!(!r.passed, "{what}: passed");
            let topo = transaction_mode();
            let mut unknown = 0;
            for i in r.invariants.iter().filter(|i| i.tier == Tier::Pg) {
                let inv = by_name(&i.name).unwrap();
                let note = i.note.as_deref().unwrap_or("");
                if topo.exercises(inv.needs()) {
                    assert_eq!(i.verdict, Verdict::Unknown, "{what}: {}", i.name);
                    assert!(
                        note.contains("rests on nothing"),
                        "{what}: {} {note}",
                        i.name
                    );
                    unknown += 1;
                } else {
                    // The workload cannot exercise it (session API: no transaction lock).
                    assert_eq!(i.verdict, Verdict::Holds, "{what}: {}", i.name);
                    assert!(note.contains("not exercised"), "{what}: {} {note}", i.name);
                }
            }
            assert!(unknown >= 6, "{what}: {unknown}");
            assert!(r.thinly_judged(), "{what}");
        }
        // The same history as recorded rests on something: judged, not thin.
        let r = results_of(full);
        assert_eq!(r.judged_cases, 1);
        assert!(!r.thinly_judged());
    }

    /// Every phase counts: a pg.* violation in a shrink or evidence replay fails the run even
    /// when every generated case is clean, and says where it was seen.
    #[test]
    fn a_pg_violation_in_a_replay_fails_the_run() {
        let clean = events_of("exclusion-holds");
        let mut bad = events_of("exclusion-violated");
        for e in bad.iter_mut() {
            if let Body::Case(c) = &mut e.body {
                c.phase = Phase::Shrink;
                c.invariant = Some("app.mutual_exclusion".into());
            }
        }
        let mut events: Vec<Event> = clean
            .iter()
            .filter(|e| !matches!(e.body, Body::RunEnd(_)))
            .cloned()
            .collect();
        events.extend(bad.into_iter().filter(|e| !matches!(e.body, Body::Run(_))));
        let run = check_history(events.into_iter().map(Ok)).unwrap();
        assert_eq!(run.tally.cases, 1);
        assert!(
            run.tally.violating_cases.is_empty(),
            "the generated case is clean"
        );
        assert_eq!(run.tally.replay_pg.len(), 1);
        assert_eq!(run.tally.replay_pg[0].2, "pg.exclusion");
        let r = crate::report::Results::build(
            &transaction_mode(),
            &run.header,
            &run.tally,
            false,
            1,
            true,
        );
        assert!(!r.passed);
        let ex = r
            .invariants
            .iter()
            .find(|i| i.name == "pg.exclusion")
            .unwrap();
        assert_eq!(ex.verdict, Verdict::Violated);
        assert!(
            ex.note
                .as_deref()
                .unwrap()
                .contains("shrink or evidence replay")
        );
        assert_eq!(r.replay_violations.len(), 1);
        assert_eq!(r.replay_violations[0].phase, "shrink");
    }
}
