//! Invariants and verdicts: compares each step's real reply and the observer's snapshot with
//! the model, and the logical clients' beliefs with what the servers hold. `pg.*` must always
//! hold; `app.*` say whether an application's assumptions survive this topology.

use crate::client::Reply;
use crate::key::Key;
use crate::model::{Model, StepCheck};
use crate::observer::Observation;
use crate::op::Op;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    /// 0-based step index in the case.
    pub step: usize,
    pub detail: String,
}

/// A contender probe after a step: which invariant asked, the key, what it got.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    pub invariant: String,
    pub key: Key,
    pub available: bool,
    pub expected_available: bool,
}

/// Everything about one executed step the checker needs.
pub struct StepFacts<'a> {
    pub step: usize,
    pub client: usize,
    pub op: Op,
    pub reply: &'a Reply,
    pub check: &'a StepCheck,
    pub obs: &'a Observation,
    pub probes: &'a [Probe],
}

/// Check one step; `model` is the state after the step (rollback bookkeeping is consumed).
pub fn check_step(model: &mut Model, f: &StepFacts) -> Vec<Violation> {
    let mut out = vec![];
    let mut v = |inv: &str, detail: String| {
        out.push(Violation {
            invariant: inv.to_string(),
            step: f.step,
            detail,
        })
    };
    let who = format!("C{}", f.client + 1);

    if let Some(expected) = &f.check.expected_reply
        && !expected.same_as(f.reply)
    {
        v(
            "pg.replies_match_model",
            format!(
                "{who} {}: PostgreSQL/pooler replied {}, the model predicted {expected}",
                f.op, f.reply
            ),
        );
    }
    for (inv, detail) in &f.check.violations {
        v(inv, detail.clone());
    }

    // pg.exclusion: no key granted to two backends at once.
    let observed = f.obs.held();
    let mut by_key: BTreeMap<Key, Vec<_>> = BTreeMap::new();
    for (b, k) in &observed {
        by_key.entry(*k).or_default().push(*b);
    }
    for (k, holders) in &by_key {
        if holders.len() > 1 {
            v(
                "pg.exclusion",
                format!(
                    "key {k} granted to {} backends at once: {holders:?}",
                    holders.len()
                ),
            );
        }
    }

    // pg.locks_match_model: the observed locks of every backend equal the model's.
    let expected = model.held();
    if expected != observed {
        let missing: Vec<_> = expected.difference(&observed).collect();
        let extra: Vec<_> = observed.difference(&expected).collect();
        v(
            "pg.locks_match_model",
            format!(
                "after {who} {}: model holds but pg_locks lacks {missing:?}; pg_locks has but model lacks {extra:?}",
                f.op
            ),
        );
    }
    for gone in &f.check.gone {
        if f.obs.alive(*gone) {
            let inv = if f.op == Op::Terminate {
                "pg.terminate_releases"
            } else {
                "pg.locks_match_model"
            };
            v(
                inv,
                format!("backend {gone} is still in pg_stat_activity after {}", f.op),
            );
        }
    }

    // Contender probes at boundaries.
    for p in f.probes {
        if p.available != p.expected_available {
            v(
                &p.invariant,
                format!(
                    "after {who} {}: a fresh contender {} key {} (expected {})",
                    f.op,
                    if p.available {
                        "could take"
                    } else {
                        "could not take"
                    },
                    p.key,
                    if p.expected_available {
                        "available"
                    } else {
                        "held"
                    }
                ),
            );
        }
    }

    // app.rollback_releases: nothing first taken in the rolled-back transaction remains.
    if matches!(f.op, Op::Commit | Op::Rollback) && !f.reply.is_error() {
        let (backend, taken) = model.take_rolled_back(f.client);
        if f.op == Op::Rollback
            && let Some(b) = backend
        {
            for k in taken {
                if observed.contains(&(b, k)) {
                    v(
                        "app.rollback_releases",
                        format!(
                            "{who} rolled back, but key {k}, taken in that transaction, is still held by its backend pid {}",
                            b.pid
                        ),
                    );
                }
            }
        }
    }

    // The application's beliefs against each other and against the servers.
    let mut believers: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, c) in model.clients.iter().enumerate() {
        for (k, bl) in &c.beliefs {
            if bl.stale {
                let dead: Vec<String> = bl
                    .backends
                    .iter()
                    .filter(|b| model.dead.contains(b))
                    .map(|b| format!("pid {}", b.pid))
                    .collect();
                v(
                    "app.no_stale_holder",
                    format!(
                        "C{} believes it holds {k}, but the backend that granted it ({}) was terminated",
                        i + 1,
                        dead.join(", ")
                    ),
                );
            }
            // A belief still granted by a live backend counts for exclusion.
            if bl.session + bl.xact > 0 && bl.backends.iter().any(|b| !model.dead.contains(b)) {
                believers.entry(*k).or_default().push(i);
            }
        }
    }
    for (k, cs) in &believers {
        if cs.len() > 1 {
            let names: Vec<String> = cs.iter().map(|c| format!("C{}", c + 1)).collect();
            let all = if names.len() == 2 { "both" } else { "all" };
            v(
                "app.mutual_exclusion",
                format!("{} {all} believe they hold key {k}", names.join(" and ")),
            );
        }
    }
    for (b, k) in &observed {
        let believed = model
            .clients
            .iter()
            .any(|c| c.beliefs.get(k).is_some_and(|bl| bl.backends.contains(b)));
        if !believed {
            v(
                "app.no_orphans",
                format!(
                    "backend pid {} holds key {k}, but no client believes it holds it",
                    b.pid
                ),
            );
        }
    }
    out
}
