//! Checking a concurrent case. Events are taken in time order; the model is applied at each
//! op's completion. Within one backend statements run one at a time, so the model's
//! per-backend facts (counts, transaction states, which unlock can succeed) are checked as
//! in the sequential schedule; whether a lock was free for a backend depends on an order the
//! history does not fix, so the reply decides, and only impossible answers are reported (a
//! refusal when nobody held, took or could have taken the key during the call; a grant while
//! another backend held it and nothing could have released it). An `info` outcome is never
//! turned into a `pg.*` violation: after one, the end state is not compared.
//!
//! Beliefs are intervals, as Jepsen checks a mutex: a client believes it holds a key from
//! the `ok` of its acquire to the `invoke` of its release (or disconnect, unlock_all,
//! DISCARD ALL, the end of the transaction, ...). Samples are checked for `pg.exclusion`
//! and for terminated backends still visible; the end state (every op done, servers quiet)
//! for `pg.locks_match_model` and `app.no_orphans`. An op that misses its bound is
//! `app.progress`, with the wait-for graph at its deadline.

use super::invariants::{EndFacts, JudgedProbe, Overlap, SampleFacts, StepFacts};
use super::model::{Beside, Model, Note};
use super::{ALL, CaseCheck, CheckContext, Violation, applied, apply_op, judge_step};
use crate::history::{At, Body, CaseView, Event, Observation, ProbeWhy, StepView};
use crate::vocab::{BackendId, Key, Op, Outcome, Reply};
use std::collections::{BTreeMap, BTreeSet};

/// Ops that can end a client's belief in a key (so while one is running, the belief may
/// already be over).
fn may_release(op: Op) -> bool {
    matches!(
        op,
        Op::Unlock
            | Op::UnlockAll
            | Op::DiscardAll
            | Op::Commit
            | Op::Rollback
            | Op::FailStatement
            | Op::Disconnect
            | Op::Reconnect
            | Op::Terminate
    ) || ends_backends(op)
}

/// A fault of the servers that ends backends or breaks client connections.
fn ends_backends(op: Op) -> bool {
    use crate::vocab::fault::{Breaks, Ends, meaning};
    meaning(op).is_some_and(|m| m.ends != Ends::Nothing || m.breaks != Breaks::Nothing)
}

/// What ran beside step `i` (invoked at `t_inv`, completed at `t_done` on `backend`): the
/// other steps invoked before it completed and completed after it was invoked (or never).
fn beside(
    steps: &BTreeMap<usize, &StepView>,
    i: usize,
    t_inv: u64,
    t_done: u64,
    backend: Option<BackendId>,
) -> Beside {
    let mut b = Beside::default();
    for o in steps.values() {
        let Some(op) = o.op else { continue };
        let overlaps = o.t_invoke.is_some_and(|t| t < t_done) && o.t_done.is_none_or(|d| d > t_inv);
        if o.index == i || !overlaps {
            continue;
        }
        b.cancel |= op == Op::Cancel;
        b.terminate |= op == Op::Terminate || ends_backends(op);
        b.close |=
            matches!(op, Op::Terminate | Op::Disconnect | Op::Reconnect) || ends_backends(op);
        // The same backend, or one the history cannot name.
        b.on_backend |= backend.is_some()
            && changes_backend(op)
            && o.done
                .as_ref()
                .and_then(|d| d.backend)
                .is_none_or(|x| Some(x) == backend);
    }
    b
}

/// How long after a reset query at release was due the key may still be held.
const RESET_NS: u64 = 50_000_000;

/// Statements that change a backend's locks or transaction state.
fn changes_backend(op: Op) -> bool {
    matches!(
        op,
        Op::TryLock
            | Op::Lock
            | Op::Unlock
            | Op::UnlockAll
            | Op::XactLock
            | Op::TryXactLock
            | Op::Begin
            | Op::Commit
            | Op::Rollback
            | Op::DiscardAll
            | Op::FailStatement
    )
}

pub fn check(cx: &CheckContext, view: &CaseView, events: &[Event]) -> CaseCheck {
    let mut evs: Vec<&Event> = events.iter().collect();
    evs.sort_by_key(|e| e.t);
    let steps: BTreeMap<usize, &StepView> = view.steps.iter().map(|s| (s.index, s)).collect();
    let mut model = Model::new(cx.rules.clone(), view.start.clients);
    model.lenient = true;
    for c in &view.opened {
        model.connected(*c);
    }
    let mut out = CaseCheck::default();
    // Ops invoked and not yet completed: step -> invoke time.
    let mut running: BTreeMap<usize, u64> = BTreeMap::new();
    // A lock call's facts at its invoke: was the key held by anyone then?
    let mut held_at_invoke: BTreeMap<usize, bool> = BTreeMap::new();
    // Grants completed, per key: times.
    let mut grants: BTreeMap<Key, Vec<(u64, BackendId)>> = BTreeMap::new();
    let mut since: BTreeMap<(usize, Key), u64> = BTreeMap::new();
    let mut migrations: Vec<(usize, usize)> = vec![];
    let mut samples: Vec<(u64, &Observation)> = vec![];
    let mut terminated: Vec<(u64, BackendId)> = vec![];
    let mut unknown = false;
    let mut end: Option<&Observation> = None;
    let mut end_probes: Vec<(Key, bool)> = vec![];
    // Which client each backend is the connection of (from what ran on it).
    let mut owner: BTreeMap<BackendId, usize> = BTreeMap::new();
    let mut details = vec![];

    for ev in &evs {
        match &ev.body {
            Body::Invoke(inv) if inv.f == Op::Release => {
                // A replica's pinned pool connection went back to the pool: the client and
                // its beliefs end there; its locks stay on the backend.
                if let crate::history::Process::Client(c) = inv.p {
                    model.disconnect(c);
                    since.retain(|(d, _), _| *d != c);
                }
            }
            Body::Invoke(inv) => {
                let Some(i) = inv.step else { continue };
                if inv.f == Op::Open {
                    continue;
                }
                running.insert(i, ev.t);
                if let Some(k) = inv.key {
                    held_at_invoke.insert(i, model.key_maybe_held(k));
                }
            }
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) => {
                let Some(i) = c.step else { continue };
                let Some(s) = steps.get(&i) else { continue };
                if c.f == Op::Open {
                    if !c.value.is_error() {
                        model.connected(s.client);
                    }
                    continue;
                }
                let t_inv = running.remove(&i).unwrap_or(ev.t);
                let op = c.f;
                let took = ev.t.saturating_sub(t_inv);
                let bound = cx.bounds.of(op, s.ms);
                let outcome = c.value.outcome();
                let stuck = (took > bound).then(|| {
                    graph_at(
                        t_inv + bound,
                        &samples_after(&evs, t_inv + bound),
                        &evs,
                        &steps,
                        &owner,
                    )
                });
                // A fault of the servers that timed out (a PAUSE a held server kept waiting)
                // is applied all the same: the model knows what it may have done.
                if outcome == Outcome::Info && !c.value.is_closed() && !op.is_server_fault() {
                    // Unknown: the op may or may not have taken effect. Judge only its time.
                    unknown = true;
                    let facts = StepFacts {
                        step: i,
                        client: s.client,
                        op,
                        reply: &c.value,
                        effect: &Default::default(),
                        obs: None,
                        probes: &[],
                        model: &model,
                        rolled_back: None,
                        took_ns: Some(took),
                        bound_ns: bound,
                        stuck,
                        overlaps: &[],
                        migrations: &migrations,
                    };
                    judge_only(&facts, &["app.progress"], &mut out);
                    continue;
                }
                if c.value.is_closed() {
                    unknown = true;
                }
                let before: Vec<(usize, Key)> = since.keys().copied().collect();
                model.clock = ev.t;
                model.invoked_at = t_inv;
                model.beside = beside(&steps, i, t_inv, ev.t, c.backend);
                let Some(mut effect) = apply_op(&mut model, s, op, &c.value) else {
                    continue;
                };
                if let Some(b) = c.backend {
                    owner.insert(b, s.client);
                }
                // Plausibility of a lock call's outcome, and interval overlaps of a grant.
                let mut overlaps = vec![];
                if let (Some(k), Some(b)) = (s.key, c.backend)
                    && matches!(op, Op::TryLock | Op::Lock | Op::TryXactLock | Op::XactLock)
                {
                    let granted = matches!(c.value, Reply::Bool { value: true })
                        || (op.waits_for_lock() && c.value == Reply::Ok);
                    let others_running = running
                        .keys()
                        .filter(|j| **j != i)
                        .filter_map(|j| steps.get(j))
                        .any(|o| o.op.is_some_and(may_release) || o.key == Some(k));
                    if granted {
                        grants.entry(k).or_default().push((ev.t, b));
                        for other in model.holders_other_than(b, k) {
                            if !others_running {
                                effect.notes.push(Note::DoubleGrant {
                                    key: k,
                                    backend: b,
                                    other,
                                });
                            }
                        }
                        // Beliefs of other clients still live at this grant.
                        for (d, cm) in model.clients.iter().enumerate() {
                            if d == s.client {
                                continue;
                            }
                            let Some(bl) = cm.beliefs.get(&k) else {
                                continue;
                            };
                            if bl.session + bl.xact == 0
                                || bl.backends.iter().all(|x| model.dead.contains_key(x))
                            {
                                continue;
                            }
                            let releasing = running
                                .iter()
                                .filter_map(|(j, t)| steps.get(j).map(|o| (o, *t)))
                                .any(|(o, t)| {
                                    o.client == d && t < ev.t && o.op.is_some_and(may_release)
                                });
                            if !releasing {
                                overlaps.push(Overlap {
                                    key: k,
                                    other: d,
                                    other_since_ns: since.get(&(d, k)).copied().unwrap_or(0),
                                    other_backends: bl.backends.iter().copied().collect(),
                                    at_ns: ev.t,
                                    backend: b,
                                });
                            }
                        }
                    } else if c.value.is_error() && c.value.code() != Some("55P03") {
                        // Not a refusal: an error (aborted transaction, ...): judged by the model.
                    } else {
                        let held_then = held_at_invoke.get(&i).copied().unwrap_or(false);
                        let held_now = model.maybe_held_by_other(b, k);
                        let taken_meanwhile = grants
                            .get(&k)
                            .is_some_and(|g| g.iter().any(|(t, x)| *t >= t_inv && *x != b));
                        // A reset query at release clears a key a moment after the pooler
                        // answered the grant (seen: a lock invoked 1 µs after such a grant
                        // on another server waited and failed with 55P03).
                        let resetting = model
                            .reset_released
                            .get(&k)
                            .is_some_and(|t| t.saturating_add(RESET_NS) >= t_inv);
                        if !(held_then
                            || held_now
                            || taken_meanwhile
                            || others_running
                            || resetting)
                        {
                            effect.notes.push(Note::ImplausibleRefusal {
                                client: s.client,
                                key: k,
                                ran: b,
                            });
                        }
                    }
                }
                if let Some(e) = &effect.expected_reply {
                    out.expected.push((i, e.clone()));
                }
                if applied(op, &c.value) {
                    migrations.push((s.client, i));
                }
                if op == Op::Terminate
                    && c.value == (Reply::Bool { value: true })
                    && let Some(t) = s.target()
                {
                    terminated.push((ev.t, t));
                }
                let rolled_back = if matches!(op, Op::Commit | Op::Rollback) && !c.value.is_error()
                {
                    let (backend, taken) = model.take_rolled_back(s.client);
                    backend.filter(|_| op == Op::Rollback).map(|b| (b, taken))
                } else {
                    None
                };
                // Belief intervals: when each (client, key) belief began.
                for (d, cm) in model.clients.iter().enumerate() {
                    for k in cm.beliefs.keys() {
                        since.entry((d, *k)).or_insert(ev.t);
                    }
                }
                for key in before {
                    let still = model
                        .clients
                        .get(key.0)
                        .is_some_and(|cm| cm.beliefs.contains_key(&key.1));
                    if !still {
                        since.remove(&key);
                    }
                }
                let facts = StepFacts {
                    step: i,
                    client: s.client,
                    op,
                    reply: &c.value,
                    effect: &effect,
                    obs: None,
                    probes: &[],
                    model: &model,
                    rolled_back,
                    took_ns: Some(took),
                    bound_ns: bound,
                    stuck,
                    overlaps: &overlaps,
                    migrations: &migrations,
                };
                judge_step(&facts, &mut out);
            }
            Body::Obs(o) => match o.at {
                At::Sample => {
                    samples.push((ev.t, &o.obs));
                    let dead: Vec<BackendId> = terminated
                        .iter()
                        .filter(|(t, _)| *t < ev.t)
                        .map(|(_, b)| *b)
                        .collect();
                    let sf = SampleFacts {
                        t_ns: ev.t,
                        obs: &o.obs,
                        terminated_before: &dead,
                    };
                    for inv in ALL {
                        details.clear();
                        inv.check_sample(&sf, &mut details);
                        push(&mut out, inv.info().name, usize::MAX, &mut details);
                    }
                }
                At::End => end = Some(&o.obs),
                At::Before | At::After => {}
            },
            Body::Probe(p) if p.why == ProbeWhy::End => end_probes.push((p.key, p.available)),
            _ => {}
        }
    }
    // Ops never completed (a case cut short without an `info`): stuck by definition.
    for (i, t_inv) in &running {
        if let Some(s) = steps.get(i) {
            let op = s.op.unwrap_or(Op::Ping);
            out.violations.push(Violation {
                invariant: "app.progress".into(),
                step: *i,
                detail: format!(
                    "C{} {} never completed (invoked at {:.3} ms)",
                    s.client + 1,
                    op,
                    *t_inv as f64 / 1e6
                ),
            });
        }
    }
    if let Some(obs) = end {
        model.settle_maybe_gone(|b| obs.alive(b));
    }
    if let (Some(obs), false) = (end, unknown) {
        // Keys still held by a backend that is exiting (closed or terminated a moment ago),
        // or left on a live one by a failed lock call, may or may not be free: their probes
        // are not judged.
        let unjudged: BTreeSet<Key> = obs
            .held()
            .into_iter()
            .filter(|(b, k)| {
                model.dead.contains_key(b) || model.interrupted_unsettled(*b, *k).is_some()
            })
            .map(|(_, k)| k)
            .collect();
        let probes: Vec<JudgedProbe> = end_probes
            .iter()
            .map(|(k, a)| JudgedProbe {
                key: *k,
                available: *a,
                expected_available: if unjudged.contains(k) {
                    *a
                } else {
                    !model.key_held(*k)
                },
                reasons: vec![],
            })
            .collect();
        let ef = EndFacts {
            obs,
            probes: &probes,
            model: &model,
        };
        let last = view.steps.len().saturating_sub(1);
        for inv in ALL {
            details.clear();
            inv.check_end(&ef, &mut details);
            push(&mut out, inv.info().name, last, &mut details);
        }
    }
    out.violations
        .sort_by_key(|v| (v.step == usize::MAX, v.step));
    for v in &mut out.violations {
        if v.step == usize::MAX {
            v.step = 0;
        }
    }
    out
}

fn push(out: &mut CaseCheck, name: &str, step: usize, details: &mut Vec<String>) {
    for d in details.drain(..) {
        out.violations.push(Violation {
            invariant: name.to_string(),
            step,
            detail: d,
        });
    }
}

/// Only the named invariants judge these facts (an op whose outcome is unknown).
fn judge_only(facts: &StepFacts, names: &[&str], out: &mut CaseCheck) {
    let mut details = vec![];
    for inv in ALL.iter().filter(|i| names.contains(&i.info().name)) {
        inv.check(facts, &mut details);
        push(out, inv.info().name, facts.step, &mut details);
    }
}

/// The first sample taken at or after `t` (else the last one before it).
fn samples_after<'e>(evs: &[&'e Event], t: u64) -> Option<(u64, &'e Observation)> {
    let mut last = None;
    for e in evs {
        if let Body::Obs(o) = &e.body
            && o.at == At::Sample
        {
            if e.t >= t {
                return Some((e.t, &o.obs));
            }
            last = Some((e.t, &o.obs));
        }
    }
    last
}

/// The wait-for graph in words at the sample nearest an op's deadline: what was running
/// then (invoked before the sample and completed after it).
fn graph_at(
    deadline: u64,
    sample: &Option<(u64, &Observation)>,
    evs: &[&Event],
    steps: &BTreeMap<usize, &StepView>,
    owner: &BTreeMap<BackendId, usize>,
) -> String {
    let Some((t, obs)) = sample else {
        return format!(
            "no sample of the servers near {:.3} ms (sampling off?)",
            deadline as f64 / 1e6
        );
    };
    let mut running = vec![];
    for s in steps.values() {
        let (Some(ti), Some(op)) = (s.t_invoke, s.op) else {
            continue;
        };
        let done = s.t_done.unwrap_or(u64::MAX);
        if ti <= *t && done > *t {
            running.push(super::waits::Running {
                client: s.client,
                step: s.index,
                op,
                key: s.key,
                for_ns: t - ti,
            });
        }
    }
    // Every backend a client ran on last, up to the sample, is that client's connection.
    let mut owners = owner.clone();
    for e in evs {
        if e.t > *t {
            break;
        }
        if let Some(c) = e.completion()
            && let (Some(b), Some(i)) = (c.backend, c.step)
            && let Some(s) = steps.get(&i)
        {
            owners.insert(b, s.client);
        }
    }
    format!(
        "(sample at {:.3} ms) {}",
        *t as f64 / 1e6,
        super::waits::describe(obs, &running, &owners)
    )
}
