//! Every invariant, each a value behind [`Invariant`], listed once in [`ALL`]. An invariant
//! reads the facts of one step ([`StepFacts`]: what ran, what the server replied, what the
//! model predicted and noticed, what the observer and the contender saw) and says what it
//! finds wrong. `pg.*` must always hold; `app.*` say whether an application's assumptions
//! survive the topology.

use super::model::{Effect, Model, Note, ProbeReason};
use crate::history::Observation;
use crate::vocab::{BackendId, InvariantInfo, Key, Op, Reply, Tier};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// One invariant: what it is called and means, and how it judges a step; in the
/// concurrent schedule also a sample of the servers, and the case's end state.
pub trait Invariant: Sync {
    fn info(&self) -> InvariantInfo;
    /// Push one line of evidence per violation found in this step.
    fn check(&self, f: &StepFacts, out: &mut Vec<String>);
    /// A concurrent sample (taken while ops were running).
    fn check_sample(&self, _s: &SampleFacts, _out: &mut Vec<String>) {}
    /// The end of a concurrent case, every op done and the servers quiet.
    fn check_end(&self, _e: &EndFacts, _out: &mut Vec<String>) {}
}

/// Two clients' beliefs on one key overlapping in time (concurrent schedule): `client` was
/// granted `key` by `backend` while `other` still believed it held it since `since`.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub key: Key,
    pub other: usize,
    pub other_since_ns: u64,
    pub other_backends: Vec<BackendId>,
    pub at_ns: u64,
    pub backend: BackendId,
}

/// A concurrent sample, with what the history says of that moment.
pub struct SampleFacts<'a> {
    pub t_ns: u64,
    pub obs: &'a Observation,
    /// Backends whose terminate had completed (confirmed gone) before the sample started.
    pub terminated_before: &'a [BackendId],
}

/// The end of a concurrent case.
pub struct EndFacts<'a> {
    pub obs: &'a Observation,
    /// The contender's probe of every key, judged against the model's end state.
    pub probes: &'a [JudgedProbe],
    pub model: &'a Model,
}

/// A contender probe after a step, with what the model expects of it.
#[derive(Clone, Debug)]
pub struct JudgedProbe {
    pub key: Key,
    pub available: bool,
    pub expected_available: bool,
    /// Why the model wanted this key probed (none: the runner probed it on its own rule, and a
    /// disagreement is a plain lock mismatch).
    pub reasons: Vec<ProbeReason>,
}

impl JudgedProbe {
    /// `{when}: a fresh contender could take key K (expected held)`.
    fn describe(&self, when: &str) -> String {
        format!(
            "{when}: a fresh contender {} key {} (expected {})",
            if self.available {
                "could take"
            } else {
                "could not take"
            },
            self.key,
            if self.expected_available {
                "available"
            } else {
                "held"
            }
        )
    }
}

/// Everything about one executed step that the invariants read.
pub struct StepFacts<'a> {
    pub step: usize,
    pub client: usize,
    pub op: Op,
    pub reply: &'a Reply,
    pub effect: &'a Effect,
    /// The observation after the step settled (sequential schedule; `None` in the
    /// concurrent one, where samples and the end state are judged apart).
    pub obs: Option<&'a Observation>,
    pub probes: &'a [JudgedProbe],
    /// The model after the step.
    pub model: &'a Model,
    /// After a successful ROLLBACK: the client's backend and the keys first taken in the
    /// transaction it rolled back.
    pub rolled_back: Option<(BackendId, BTreeSet<Key>)>,
    /// How long the op took (invoke to completion) and its bound, in nanoseconds.
    pub took_ns: Option<u64>,
    pub bound_ns: u64,
    /// When the op missed its bound: the wait-for graph at the deadline, in words.
    pub stuck: Option<String>,
    /// Concurrent schedule: beliefs this grant overlapped (interval semantics).
    pub overlaps: &'a [Overlap],
    /// `migrate` applications so far in the case: `(client, step)`.
    pub migrations: &'a [(usize, usize)],
}

impl StepFacts<'_> {
    fn who(&self) -> String {
        format!("C{}", self.client + 1)
    }

    /// Probes that disagree with the model, for one reason (`None`: no reason given).
    fn wrong_probes(&self, reason: Option<ProbeReason>) -> impl Iterator<Item = &JudgedProbe> {
        self.probes.iter().filter(move |p| {
            p.available != p.expected_available
                && match reason {
                    Some(r) => p.reasons.contains(&r),
                    None => p.reasons.is_empty() || p.reasons.contains(&ProbeReason::ServerClosed),
                }
        })
    }

    fn probe_line(&self, p: &JudgedProbe) -> String {
        p.describe(&format!("after {} {}", self.who(), self.op))
    }
}

fn exclusion(obs: &Observation, out: &mut Vec<String>) {
    let mut by_key: BTreeMap<Key, Vec<BackendId>> = BTreeMap::new();
    for (b, k) in obs.held() {
        by_key.entry(k).or_default().push(b);
    }
    for (k, holders) in by_key {
        if holders.len() > 1 {
            out.push(format!(
                "key {k} granted to {} backends at once: {}",
                holders.len(),
                pids(&holders)
            ));
        }
    }
}

fn pids(bs: &[BackendId]) -> String {
    bs.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

macro_rules! invariant {
    ($ty:ident, $name:literal, $tier:ident, $meaning:literal) => {
        pub struct $ty;
        impl $ty {
            pub const INFO: InvariantInfo = InvariantInfo {
                name: $name,
                tier: Tier::$tier,
                meaning: $meaning,
            };
        }
    };
}

invariant!(
    Exclusion,
    "pg.exclusion",
    Pg,
    "no advisory key is ever held by two backends at once"
);
impl Invariant for Exclusion {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if let Some(obs) = f.obs {
            exclusion(obs, out);
        }
        for n in &f.effect.notes {
            if let Note::DoubleGrant {
                key,
                backend,
                other,
            } = n
            {
                out.push(format!(
                    "{} {}: key {key} granted to {} while {} held it and nothing could have released it",
                    f.who(),
                    f.op,
                    pids(&[*backend]),
                    pids(&[*other])
                ));
            }
        }
    }
    fn check_sample(&self, s: &SampleFacts, out: &mut Vec<String>) {
        exclusion(s.obs, out);
    }
}

invariant!(
    RepliesMatchModel,
    "pg.replies_match_model",
    Pg,
    "every lock, try-lock and unlock reply equals what the per-backend model of PostgreSQL predicts"
);
impl Invariant for RepliesMatchModel {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check_end(&self, e: &EndFacts, out: &mut Vec<String>) {
        // Concurrent: an unlock that returned true on a backend holding nothing, taken as
        // running after a grant seen later; no such grant came.
        for ((b, k), n) in &e.model.owed {
            if *n > 0 {
                out.push(format!(
                    "pg_advisory_unlock({k}) returned true on {b} {n} time(s) more than any grant on that backend explains"
                ));
            }
        }
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if let Some(expected) = &f.effect.expected_reply
            && !expected.same_as(f.reply)
        {
            out.push(format!(
                "{} {}: PostgreSQL/pooler replied {}, the model predicted {expected}",
                f.who(),
                f.op,
                f.reply
            ));
        }
        for n in &f.effect.notes {
            match n {
                Note::PinnedElsewhere {
                    client,
                    pinned,
                    ran,
                } => out.push(format!(
                    "C{} is pinned to {pinned} but its statement ran on {ran}",
                    client + 1
                )),
                Note::RanOnTerminated { ran, .. } => {
                    out.push(format!("statement ran on {ran}, which was terminated"))
                }
                Note::GivenPinned { client, ran, owner } => out.push(format!(
                    "C{} was given {ran}, which is pinned to C{}",
                    client + 1,
                    owner + 1
                )),
                Note::ImplausibleRefusal { client, key, ran } => out.push(format!(
                    "C{} was refused key {key} on {ran}, but no other backend held it, took it or could have taken it during the call",
                    client + 1
                )),
                Note::UnlockMissedOwner { .. }
                | Note::FailedLockHeld { .. }
                | Note::DoubleGrant { .. }
                | Note::RerouteAfterServerDeath { .. } => {}
            }
        }
    }
}

invariant!(
    LocksMatchModel,
    "pg.locks_match_model",
    Pg,
    "after every step the advisory rows of pg_locks equal the model's locks, backend by backend"
);
impl Invariant for LocksMatchModel {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        let Some(obs) = f.obs else {
            return;
        };
        locks_match(obs, f.model, &format!("after {} {}", f.who(), f.op), out);
        if f.op != Op::Terminate {
            for gone in &f.effect.gone {
                if obs.alive(*gone) {
                    out.push(format!(
                        "backend {gone} is still in pg_stat_activity after {}",
                        f.op
                    ));
                }
            }
        }
        for p in f.wrong_probes(None) {
            out.push(f.probe_line(p));
        }
    }
    fn check_end(&self, e: &EndFacts, out: &mut Vec<String>) {
        // Concurrent, transaction pooling: a DISCARD ALL ran on a server the history cannot
        // name, so the model cannot say which locks remain; not judged (documented).
        if e.model.uncertain {
            return;
        }
        locks_match(e.obs, e.model, "at the end of the case", out);
        for p in e.probes {
            if p.available != p.expected_available {
                out.push(p.describe("at the end of the case"));
            }
        }
    }
}

/// What a look at the servers shows held, less (concurrent schedule) the locks of backends
/// the model knows are gone: a backend whose connection was closed or terminated a moment
/// ago can still be exiting when the look is taken, and its locks go with it.
/// Locks a failed lock call may have left (`app.failed_lock_not_held` judges those) are left
/// out too.
fn held_by_live(obs: &Observation, model: &Model) -> std::collections::BTreeSet<(BackendId, Key)> {
    let mut held = obs.held();
    if model.lenient {
        held.retain(|(b, k)| {
            !model.dead.contains_key(b) && model.interrupted_unsettled(*b, *k).is_none()
        });
    }
    held
}

fn locks_match(obs: &Observation, model: &Model, when: &str, out: &mut Vec<String>) {
    let observed = held_by_live(obs, model);
    let expected = model.held();
    if expected != observed {
        let missing: Vec<_> = expected.difference(&observed).collect();
        let extra: Vec<_> = observed.difference(&expected).collect();
        out.push(format!(
            "{when}: model holds but pg_locks lacks {missing:?}; pg_locks has but model lacks {extra:?}"
        ));
    }
}

macro_rules! probe_invariant {
    ($ty:ident, $reason:ident) => {
        impl Invariant for $ty {
            fn info(&self) -> InvariantInfo {
                Self::INFO
            }
            fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
                for p in f.wrong_probes(Some(ProbeReason::$reason)) {
                    out.push(f.probe_line(p));
                }
            }
        }
    };
}

invariant!(
    XactReleasedAtEnd,
    "pg.xact_released_at_end",
    Pg,
    "transaction-level locks are released when their transaction commits or rolls back, not before"
);
probe_invariant!(XactReleasedAtEnd, XactReleasedAtEnd);

invariant!(
    SessionSurvivesRollback,
    "pg.session_survives_rollback",
    Pg,
    "a session-level lock taken inside a transaction survives that transaction's rollback"
);
probe_invariant!(SessionSurvivesRollback, SessionSurvivesRollback);

invariant!(
    Stacking,
    "pg.stacking",
    Pg,
    "a key locked n times by one backend needs n unlocks; unlocking a key not held returns false"
);
probe_invariant!(Stacking, Stacking);

invariant!(
    TerminateReleases,
    "pg.terminate_releases",
    Pg,
    "pg_terminate_backend releases every lock the terminated backend held"
);
impl Invariant for TerminateReleases {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if f.op == Op::Terminate
            && let Some(obs) = f.obs
        {
            for gone in &f.effect.gone {
                if obs.alive(*gone) {
                    out.push(format!(
                        "backend {gone} is still in pg_stat_activity after terminate"
                    ));
                }
            }
        }
        for p in f.wrong_probes(Some(ProbeReason::TerminateReleases)) {
            out.push(f.probe_line(p));
        }
    }
    fn check_sample(&self, s: &SampleFacts, out: &mut Vec<String>) {
        for gone in s.terminated_before {
            if let Some(b) = s.obs.backend(*gone) {
                out.push(format!(
                    "backend {gone} was terminated (confirmed gone), yet a later sample shows it ({}{})",
                    b.state,
                    if b.locks.is_empty() { String::new() } else { ", holding locks".into() }
                ));
            }
        }
    }
}

invariant!(
    CancelKeepsSessionLocks,
    "pg.cancel_keeps_session_locks",
    Pg,
    "pg_cancel_backend aborts the running statement but the backend keeps its session locks"
);
probe_invariant!(CancelKeepsSessionLocks, CancelKeepsSessionLocks);

invariant!(
    MutualExclusion,
    "app.mutual_exclusion",
    App,
    "no two clients believe they hold the same key at the same time"
);
impl Invariant for MutualExclusion {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if f.obs.is_none() {
            // Concurrent: beliefs are intervals, from the ok of the acquire to the invoke of
            // the release; the checker found the overlaps.
            for o in f.overlaps {
                out.push(format!(
                    "C{} and C{} both believe they hold key {}: C{} since {:.3} ms (granted by {}), C{} from {:.3} ms (granted by {})",
                    o.other + 1,
                    f.client + 1,
                    o.key,
                    o.other + 1,
                    o.other_since_ns as f64 / 1e6,
                    pids(&o.other_backends),
                    f.client + 1,
                    o.at_ns as f64 / 1e6,
                    pids(&[o.backend])
                ));
            }
            return;
        }
        let mut believers: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
        for (i, c) in f.model.clients.iter().enumerate() {
            for (k, bl) in &c.beliefs {
                // A belief still granted by a live backend counts for exclusion.
                if bl.session + bl.xact > 0
                    && bl.backends.iter().any(|b| !f.model.dead.contains_key(b))
                {
                    believers.entry(*k).or_default().push(i);
                }
            }
        }
        for (k, cs) in believers {
            if cs.len() > 1 {
                let names: Vec<String> = cs.iter().map(|c| format!("C{}", c + 1)).collect();
                let all = if names.len() == 2 { "both" } else { "all" };
                out.push(format!(
                    "{} {all} believe they hold key {k}",
                    names.join(" and ")
                ));
            }
        }
    }
}

invariant!(
    NoOrphans,
    "app.no_orphans",
    App,
    "once a client has disconnected, no backend still holds a lock that client took"
);
impl Invariant for NoOrphans {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if let Some(obs) = f.obs {
            orphans(obs, f.model, out);
        }
    }
    fn check_end(&self, e: &EndFacts, out: &mut Vec<String>) {
        orphans(e.obs, e.model, out);
    }
}

fn orphans(obs: &Observation, model: &Model, out: &mut Vec<String>) {
    for (b, k) in held_by_live(obs, model) {
        let believed = model
            .clients
            .iter()
            .any(|c| c.beliefs.get(&k).is_some_and(|bl| bl.backends.contains(&b)));
        if !believed {
            out.push(format!(
                "backend {b} holds key {k}, but no client believes it holds it"
            ));
        }
    }
}

invariant!(
    FailedLockNotHeld,
    "app.failed_lock_not_held",
    App,
    "a lock call that failed (lock_timeout, a cancel) left no lock on its backend: PostgreSQL can grant it in the instant the error is raised, and a session lock survives the error (concurrent schedule)"
);
impl Invariant for FailedLockNotHeld {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        for n in &f.effect.notes {
            if let Note::FailedLockHeld {
                key,
                backend,
                failed,
                unlocked_by,
            } = n
            {
                out.push(format!(
                    "C{}'s pg_advisory_lock({key}) on {backend} failed with {} at {:.3} ms, yet C{}'s pg_advisory_unlock({key}) on that backend returned true: the lock was granted as the error was raised",
                    failed.client + 1,
                    failed.code,
                    failed.at_ns as f64 / 1e6,
                    unlocked_by + 1,
                ));
            }
        }
    }
    fn check_end(&self, e: &EndFacts, out: &mut Vec<String>) {
        for (b, k) in e.obs.held() {
            if e.model.dead.contains_key(&b) {
                continue;
            }
            if let Some(failed) = e.model.interrupted_unsettled(b, k) {
                out.push(format!(
                    "C{}'s pg_advisory_lock({k}) on {b} failed with {} at {:.3} ms, yet pg_locks shows {b} holding {k} at the end of the case, and no client believes it holds it",
                    failed.client + 1,
                    failed.code,
                    failed.at_ns as f64 / 1e6,
                ));
            }
        }
    }
}

invariant!(
    UnlockReachesOwner,
    "app.unlock_reaches_owner",
    App,
    "a client's unlock runs on the backend that holds the client's lock and releases it"
);
impl Invariant for UnlockReachesOwner {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        for n in &f.effect.notes {
            if let Note::UnlockMissedOwner {
                client,
                key,
                granted_on,
                ran,
            } = n
            {
                out.push(format!(
                    "C{} unlocked {key}, which it took on {}, but the unlock ran on {ran}",
                    client + 1,
                    pids(granted_on),
                ));
            }
        }
    }
}

invariant!(
    RollbackReleases,
    "app.rollback_releases",
    App,
    "every lock a client took inside a transaction is gone once that transaction rolls back"
);
impl Invariant for RollbackReleases {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if let Some((b, keys)) = &f.rolled_back {
            // Sequential: what pg_locks shows after the step; concurrent: the model's state
            // (pg.locks_match_model vouches for it at the case's end).
            let held = match f.obs {
                Some(obs) => obs.held(),
                None => f.model.held(),
            };
            for k in keys {
                if held.contains(&(*b, *k)) {
                    out.push(format!(
                        "{} rolled back, but key {k}, taken in that transaction, is still held by its backend {b}",
                        f.who(),
                    ));
                }
            }
        }
    }
}

invariant!(
    NoStaleHolder,
    "app.no_stale_holder",
    App,
    "no client still believes it holds a key on a backend that was terminated (a fencing hazard, reported apart from pooled inheritance)"
);
impl Invariant for NoStaleHolder {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        for (c, k, dead, _) in stale_beliefs(f.model).filter(|s| s.3.is_none()) {
            out.push(format!(
                "C{} believes it holds {k}, but the backend that granted it ({}) was terminated",
                c + 1,
                pids(&dead)
            ));
        }
    }
}

/// Beliefs whose granting backend ended before their client heard of it: the client, the
/// key, the ended backends that granted it, and the fault of the servers that ended them
/// (`None`: a `terminate`).
fn stale_beliefs(m: &Model) -> impl Iterator<Item = (usize, Key, Vec<BackendId>, Option<Op>)> {
    m.clients.iter().enumerate().flat_map(move |(i, c)| {
        c.beliefs
            .iter()
            .filter(|(_, bl)| bl.stale)
            .map(move |(k, bl)| {
                let dead = bl
                    .backends
                    .iter()
                    .filter(|b| m.dead.contains_key(b))
                    .copied()
                    .collect();
                (i, *k, dead, bl.lost_to)
            })
    })
}

invariant!(
    NoLostLock,
    "app.no_lost_lock",
    App,
    "no client believes it holds a key that no live backend holds for it after a fault of the servers (RECONNECT, PAUSE, KILL, a restart, a crash) closed the backend that granted it"
);
impl Invariant for NoLostLock {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        for (c, k, dead, fault) in stale_beliefs(f.model) {
            if let Some(fault) = fault {
                out.push(format!(
                    "C{} believes it holds {k}, but {fault} closed the backend that granted it ({})",
                    c + 1,
                    pids(&dead)
                ));
            }
        }
    }
}

invariant!(
    Progress,
    "app.progress",
    App,
    "every op completes or fails within its bound (lock_timeout for a lock wait, plus run.op_deadline to get a connection or a pooled server)"
);
impl Invariant for Progress {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        let Some(took) = f.took_ns else {
            return;
        };
        // A fault of the servers is the nemesis's, held and healed on purpose: liveness is
        // judged on the clients' ops around it.
        if took > f.bound_ns && !f.op.is_server_fault() {
            let mut line = format!(
                "{} {} took {:.3} s, its bound is {:.3} s",
                f.who(),
                f.op,
                took as f64 / 1e9,
                f.bound_ns as f64 / 1e9
            );
            if f.reply.code() == Some(crate::vocab::reply::code::TIMEOUT) {
                line.push_str(" (it never completed: the client gave up)");
            }
            if let Some(graph) = &f.stuck {
                line.push_str(". At the deadline: ");
                line.push_str(graph);
            }
            out.push(line);
        }
    }
}

invariant!(
    AppliedOnce,
    "app.applied_once",
    App,
    "a migration run under the lock is applied once, however many replicas race for it"
);
impl Invariant for AppliedOnce {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn check(&self, f: &StepFacts, out: &mut Vec<String>) {
        if f.op == Op::Migrate
            && f.migrations.len() > 1
            && f.migrations
                .last()
                .is_some_and(|(c, s)| *c == f.client && *s == f.step)
        {
            let who: Vec<String> = f
                .migrations
                .iter()
                .map(|(c, s)| format!("C{} (step {})", c + 1, s + 1))
                .collect();
            out.push(format!(
                "migration version 1 applied {} times: {} ({} replied {})",
                f.migrations.len(),
                who.join(", "),
                f.who(),
                f.reply
            ));
        }
    }
}

/// Every invariant, in report order: `pg.*` first, then `app.*`.
pub static ALL: &[&dyn Invariant] = &[
    &Exclusion,
    &RepliesMatchModel,
    &LocksMatchModel,
    &XactReleasedAtEnd,
    &SessionSurvivesRollback,
    &Stacking,
    &TerminateReleases,
    &CancelKeepsSessionLocks,
    &MutualExclusion,
    &NoOrphans,
    &FailedLockNotHeld,
    &UnlockReachesOwner,
    &RollbackReleases,
    &NoStaleHolder,
    &NoLostLock,
    &Progress,
    &AppliedOnce,
];

static CATALOG: LazyLock<Vec<InvariantInfo>> =
    LazyLock::new(|| ALL.iter().map(|i| i.info()).collect());

/// What the rest of the harness may know of the invariants: name, tier, meaning.
pub fn catalog() -> &'static [InvariantInfo] {
    &CATALOG
}

/// The invariant of this name.
pub fn by_name(name: &str) -> Option<&'static dyn Invariant> {
    ALL.iter().copied().find(|i| i.info().name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_well_formed() {
        let names: BTreeSet<&str> = catalog().iter().map(|i| i.name).collect();
        assert_eq!(names.len(), ALL.len(), "names are unique");
        assert_eq!(ALL.len(), 17);
        let mut seen_app = false;
        for i in catalog() {
            assert!(i.name.starts_with(&format!("{}.", i.tier)), "{}", i.name);
            assert!(!i.meaning.is_empty() && !i.meaning.ends_with('.'));
            // pg.* first, then app.*.
            seen_app |= i.tier == Tier::App;
            assert!(
                !(seen_app && i.tier == Tier::Pg),
                "{} after an app.*",
                i.name
            );
        }
        assert_eq!(by_name("app.no_orphans").unwrap().info().tier, Tier::App);
        assert!(by_name("nope").is_none());
    }

    fn backend(pid: i32, keys: &[i64]) -> crate::history::BackendRow {
        crate::history::BackendRow {
            id: BackendId {
                pid,
                start_us: 1000 + pid as i64,
            },
            backend_start: String::new(),
            state: "idle".into(),
            query: String::new(),
            xact_start: None,
            locks: keys
                .iter()
                .map(|k| crate::history::LockRow {
                    key: Key::Big(*k),
                    mode: "ExclusiveLock".into(),
                    granted: true,
                })
                .collect(),
            wait_event_type: None,
            wait_event: None,
            blocked_by: vec![],
        }
    }

    /// The end of a concurrent case: a backend known closed but still exiting, and one left
    /// holding a lock its failed call was granted. Neither is a pg.* mismatch or an orphan;
    /// the second is `app.failed_lock_not_held`, with the failed call as evidence.
    #[test]
    fn the_last_look_leaves_out_exiting_backends_and_judges_failed_locks_apart() {
        use crate::check::model::Interrupted;
        let obs = Observation {
            backends: vec![backend(1, &[]), backend(2, &[7]), backend(3, &[8])],
            ..Default::default()
        };
        let (b2, b3) = (obs.backends[1].id, obs.backends[2].id);
        let rules = crate::pooler::PoolRules {
            mode: None,
            pool_size: usize::MAX,
            reset_releases_locks: true,
            reset_always: false,
            app_pin: None,
        };
        let mut model = Model::new(rules, 2);
        // Sequential: every row counts.
        assert_eq!(held_by_live(&obs, &model).len(), 2);
        let mut out = vec![];
        locks_match(&obs, &model, "at the end", &mut out);
        orphans(&obs, &model, &mut out);
        assert_eq!(out.len(), 3, "{out:?}");
        // Concurrent: b3 is exiting, b2's lock came from a failed call.
        model.lenient = true;
        model.dead.insert(b3, 0);
        model.interrupted.insert(
            (b2, Key::Big(7)),
            Interrupted {
                client: 1,
                code: "55P03".into(),
                at_ns: 2_500_000,
                count: 1,
            },
        );
        assert!(held_by_live(&obs, &model).is_empty());
        out.clear();
        locks_match(&obs, &model, "at the end", &mut out);
        orphans(&obs, &model, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let end = EndFacts {
            obs: &obs,
            probes: &[],
            model: &model,
        };
        FailedLockNotHeld.check_end(&end, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("C2's pg_advisory_lock(7)") && out[0].contains("55P03"));
        assert!(out[0].contains(&b2.to_string()), "{}", out[0]);
        // An unlock taken as running after a grant seen later, when no grant came.
        out.clear();
        RepliesMatchModel.check_end(&end, &mut out);
        assert!(out.is_empty(), "{out:?}");
        model.owed.insert((b2, Key::Big(9)), 1);
        let end = EndFacts {
            obs: &obs,
            probes: &[],
            model: &model,
        };
        RepliesMatchModel.check_end(&end, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].contains("pg_advisory_unlock(9) returned true"),
            "{}",
            out[0]
        );
    }
}
