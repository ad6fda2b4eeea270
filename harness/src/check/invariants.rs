//! Every invariant, listed once in [`ALL`], each a value behind [`Invariant`].
//!
//! `pg.*` invariants are what the search judges: each names the kind of operation no order
//! of the history can explain ([`super::model::Why::invariant`] says which), so they have no
//! code here beyond their name, meaning and what exercises them. `app.*` invariants judge
//! what the application believes ([`super::beliefs`]) against what the servers certainly did:
//! a fact holds *certainly* when it holds in every state the search still allows at that
//! moment. Each judges one [`Moment`] (a mark of the history) and says what it finds wrong.

use super::beliefs::{Beliefs, Seen};
use super::model::{Act, Cause, Entry, Life, State};
use crate::history::{Bounds, Observation};
use crate::vocab::reply::code;
use crate::vocab::{BackendId, InvariantInfo, Key, Op, Reply, Tier};
use std::collections::BTreeSet;
use std::sync::LazyLock;

/// What one invariant needs of a workload to be exercised at all: one op of each group (a
/// run whose workload has them and that never judged one says its verdict rests on nothing).
pub type Needs = &'static [&'static [Op]];

const ACQUIRES: &[Op] = &[Op::TryLock, Op::Lock, Op::XactLock, Op::TryXactLock];
const SESSION_ACQUIRES: &[Op] = &[Op::TryLock, Op::Lock];
const SHOWS: &[Op] = &[Op::Show];
const SETS: &[Op] = &[Op::Set, Op::SetLocal];
const OBJECT_USES: &[Op] = &[Op::Execute, Op::ExecuteProtocol, Op::ReadTemp, Op::Fetch];
const PREPARES: &[Op] = &[Op::Prepare, Op::PrepareProtocol];
const EXECUTES: &[Op] = &[Op::Execute, Op::ExecuteProtocol];
const TEMP_CREATES: &[Op] = &[Op::CreateTemp, Op::DeclareHold];
const TEMP_USES: &[Op] = &[Op::ReadTemp, Op::Fetch];
const LISTENS: &[Op] = &[Op::Listen];
const NOTIFIES: &[Op] = &[Op::Notify];
const STATEMENTS: &[Op] = &Op::STATEMENTS;

/// One moment of a case: a mark, with what the application saw there and every state the
/// servers may be in.
pub struct Moment<'a, 'e> {
    pub t: u64,
    pub entry: &'a Entry<'e>,
    /// The mark completes the entry (else it invokes it).
    pub completes: bool,
    pub seen: &'a [Seen],
    pub beliefs: &'a Beliefs,
    pub states: &'a [&'a State],
    pub bounds: &'a Bounds,
    /// Migrations applied so far in the case: `(client, step)`.
    pub migrations: &'a [(usize, usize)],
    /// ROLLBACKs completed since the last look: `(client, backend, keys first taken in the
    /// transaction)`.
    pub rollbacks: &'a [(usize, BackendId, Vec<Key>)],
    /// Per entry: the failed lock call's client, key, code and completion time.
    pub failed_calls: &'a dyn Fn(u32) -> Option<(usize, Key, String, u64)>,
    /// The wait-for graph at an op's deadline, in words.
    pub graph: &'a dyn Fn(u64) -> String,
}

impl Moment<'_, '_> {
    /// `Some(causes)` when `b` is not alive in any state (the causes the states give).
    pub fn ended(&self, b: BackendId) -> Option<BTreeSet<Cause>> {
        let mut causes = BTreeSet::new();
        for s in self.states {
            match s.backends.get(&b).map(|x| x.life) {
                Some(Life::Alive) | None => return None,
                Some(l) => {
                    causes.extend(l.cause());
                }
            }
        }
        (!self.states.is_empty()).then_some(causes)
    }

    /// `b` holds `k` in every state.
    pub fn surely_holds(&self, b: BackendId, k: Key) -> bool {
        !self.states.is_empty()
            && self
                .states
                .iter()
                .all(|s| s.backends.get(&b).is_some_and(|x| x.holds(k)))
    }

    /// `(b, k)` may be a lock a failed call was granted.
    pub fn maybe_tainted(&self, b: BackendId, k: Key) -> bool {
        self.states
            .iter()
            .any(|s| s.backends.get(&b).is_some_and(|x| x.tainted.contains(&k)))
    }
}

/// One invariant.
pub trait Invariant: Sync {
    fn info(&self) -> InvariantInfo;
    /// What a workload needs for this invariant to be exercised.
    fn needs(&self) -> Needs;
    /// Judged from the history alone (not from the search's states): never unknown.
    fn history_only(&self) -> bool {
        false
    }
    /// `app.*`: push one line of evidence per violation found at this moment. (`pg.*`
    /// invariants are the search's.)
    fn judge(&self, _m: &Moment, _out: &mut Vec<String>) {}
}

fn pids(bs: &[BackendId]) -> String {
    bs.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

macro_rules! invariant {
    ($ty:ident, $name:literal, $tier:ident, $needs:expr, $meaning:literal) => {
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

/// A `pg.*` invariant: judged by the search, exercised by `needs`.
macro_rules! pg_invariant {
    ($ty:ident, $name:literal, $needs:expr, $meaning:literal) => {
        invariant!($ty, $name, Pg, $needs, $meaning);
        impl Invariant for $ty {
            fn info(&self) -> InvariantInfo {
                Self::INFO
            }
            fn needs(&self) -> Needs {
                $needs
            }
        }
    };
}

pg_invariant!(
    Exclusion,
    "pg.exclusion",
    &[ACQUIRES],
    "no advisory key is ever held by two backends at once: no look shows it, and no order explains a grant while another backend holds the key"
);
pg_invariant!(
    RepliesMatchModel,
    "pg.replies_match_model",
    &[STATEMENTS],
    "every reply is one PostgreSQL and the pooler could give in some order of the case's operations: a client pinned to a backend is served by it, alive, and nobody else's"
);
pg_invariant!(
    LocksMatchModel,
    "pg.locks_match_model",
    &[STATEMENTS],
    "every look at pg_locks and pg_stat_activity (after a step, a concurrent sample, the end of a case) shows the locks and backends of some state the operations before it can lead to"
);
pg_invariant!(
    XactReleasedAtEnd,
    "pg.xact_released_at_end",
    &[
        &[Op::XactLock, Op::TryXactLock],
        &[Op::Commit, Op::Rollback]
    ],
    "transaction-level locks are released when their transaction commits or rolls back, not before"
);
pg_invariant!(
    SessionSurvivesRollback,
    "pg.session_survives_rollback",
    &[SESSION_ACQUIRES, &[Op::Rollback]],
    "a session-level lock taken inside a transaction survives that transaction's rollback"
);
pg_invariant!(
    Stacking,
    "pg.stacking",
    &[SESSION_ACQUIRES, &[Op::Unlock]],
    "a key locked n times by one backend needs n unlocks; unlocking a key not held returns false"
);
pg_invariant!(
    TerminateReleases,
    "pg.terminate_releases",
    &[ACQUIRES, &[Op::Terminate]],
    "pg_terminate_backend releases every lock the terminated backend held, and the backend leaves pg_stat_activity"
);
pg_invariant!(
    CancelKeepsSessionLocks,
    "pg.cancel_keeps_session_locks",
    &[SESSION_ACQUIRES, &[Op::Cancel]],
    "pg_cancel_backend aborts the running statement but the backend keeps its session locks"
);

pg_invariant!(
    ShowMatches,
    "pg.show_matches",
    &[SHOWS],
    "every setting read back (show) is the value some order of the case's operations leaves on the backend that served it: what its sessions SET (SET LOCAL until its transaction ends, a rolled-back SET undone), or the default after a reset that clears settings (DISCARD ALL, RESET ALL)"
);

pg_invariant!(
    ObjectsMatch,
    "pg.objects_match",
    &[OBJECT_USES],
    "every use of a named object (execute, execute_protocol, read_temp, fetch) replies what some order of the case's operations leaves on the backend that served it: the label of the client whose object is there, or the kind's error (26000, 42P01, 34000) when none is; a protocol-level statement follows its client when the pooler tracks prepared statements"
);

pg_invariant!(
    NotificationMatches,
    "pg.notification_matches",
    &[LISTENS, NOTIFIES],
    "every notification a client receives comes from a backend that was listening on the channel when the NOTIFY committed (LISTEN and UNLISTEN take effect at commit; DISCARD ALL unlistens), once"
);

invariant!(
    MutualExclusion,
    "app.mutual_exclusion",
    App,
    &[ACQUIRES],
    "no two clients believe they hold the same key at the same time (beliefs granted by a backend that has not certainly ended)"
);
impl Invariant for MutualExclusion {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[ACQUIRES]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        for s in m.seen {
            let Seen::Granted {
                client,
                key,
                backend,
            } = s
            else {
                continue;
            };
            for (d, k, bl) in m.beliefs.all() {
                if d == *client || k != key || !bl.live() {
                    continue;
                }
                let by = bl.granted_by();
                if by.iter().all(|b| m.ended(*b).is_some()) {
                    continue;
                }
                out.push(format!(
                    "C{} and C{} both believe they hold key {key}: C{} since {:.3} ms (granted by {}), C{} from {:.3} ms (granted by {backend})",
                    d + 1,
                    client + 1,
                    d + 1,
                    bl.since as f64 / 1e6,
                    pids(&by),
                    client + 1,
                    m.t as f64 / 1e6,
                ));
            }
        }
    }
}

invariant!(
    NoOrphans,
    "app.no_orphans",
    App,
    &[ACQUIRES],
    "no lock is held by a backend unless some client believes it holds that key on that backend"
);
impl Invariant for NoOrphans {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[ACQUIRES]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        let (true, Act::Read { obs, part }) = (m.completes, &m.entry.act) else {
            return;
        };
        if !part.postgres() {
            return;
        }
        for (b, k) in orphans(obs, m) {
            out.push(format!(
                "backend {b} holds key {k}, but no client believes it holds it"
            ));
        }
    }
}

fn orphans(obs: &Observation, m: &Moment) -> Vec<(BackendId, Key)> {
    obs.held()
        .into_iter()
        .filter(|(b, k)| {
            // A backend on its way out, or a lock a failed call may have been granted, is
            // judged by app.no_lost_lock / app.failed_lock_not_held. A server the pooler
            // has yet to reset (its client just left) is about to drop its locks: a look
            // between the release and the reset sees them for a moment.
            let alive_everywhere = m.states.iter().all(|s| {
                s.backends
                    .get(b)
                    .is_some_and(|x| x.life == Life::Alive && !x.reset_pending)
            });
            alive_everywhere && !m.maybe_tainted(*b, *k) && !m.beliefs.may_hold(*k, *b, m.entry.inv)
        })
        .collect()
}

invariant!(
    FailedLockNotHeld,
    "app.failed_lock_not_held",
    App,
    &[&[Op::Lock]],
    "a lock call that failed (lock_timeout, a cancel) left no lock on its backend: PostgreSQL can grant it in the instant the error is raised, and a session lock survives the error"
);
impl Invariant for FailedLockNotHeld {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[&[Op::Lock]]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        let Some(first) = m.states.first() else {
            return;
        };
        for f in &first.granted_failed {
            if m.states.iter().all(|s| s.granted_failed.contains(f))
                && let Some((c, k, code, at)) = (m.failed_calls)(*f)
            {
                out.push(format!(
                    "C{}'s lock call on {k} failed with {code} at {:.3} ms, yet no order of what followed explains the servers without it granted: the lock was granted as the error was raised",
                    c + 1,
                    at as f64 / 1e6
                ));
            }
        }
    }
}

invariant!(
    UnlockReachesOwner,
    "app.unlock_reaches_owner",
    App,
    &[ACQUIRES, &[Op::Unlock]],
    "a client's unlock runs on the backend that holds the client's lock and releases it"
);
impl Invariant for UnlockReachesOwner {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[ACQUIRES, &[Op::Unlock]]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        for s in m.seen {
            let Seen::Unlocked {
                client,
                key,
                believed: Some(by),
                ran: Some(ran),
            } = s
            else {
                continue;
            };
            // A belief whose backend ended is app.no_stale_holder's.
            if by.contains(ran) || by.iter().any(|b| m.ended(*b).is_some()) {
                continue;
            }
            out.push(format!(
                "C{} unlocked {key}, which it took on {}, but the unlock ran on {ran}",
                client + 1,
                pids(by)
            ));
        }
    }
}

invariant!(
    RollbackReleases,
    "app.rollback_releases",
    App,
    &[SESSION_ACQUIRES, &[Op::Rollback]],
    "every lock a client took inside a transaction is gone once that transaction rolls back"
);
impl Invariant for RollbackReleases {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[SESSION_ACQUIRES, &[Op::Rollback]]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        let line = |c: usize, k: &Key, b: &BackendId| {
            format!(
                "C{} rolled back, but key {k}, taken in that transaction, is still held by its backend {b}",
                c + 1
            )
        };
        // Certain in every state the search allows right after the ROLLBACK ...
        for s in m.seen {
            let Seen::RolledBack {
                client,
                backend: Some(b),
                taken,
            } = s
            else {
                continue;
            };
            for k in taken {
                if m.surely_holds(*b, *k) {
                    out.push(line(*client, k, b));
                }
            }
        }
        // ... or shown by the first look after it.
        if let (true, Act::Read { obs, part }) = (m.completes, &m.entry.act)
            && part.postgres()
        {
            let held = obs.held();
            for (c, b, taken) in m.rollbacks {
                for k in taken {
                    if held.contains(&(*b, *k)) {
                        out.push(line(*c, k, b));
                    }
                }
            }
        }
    }
}

/// Beliefs whose granting backend has certainly ended: `(client, key, backend, causes)`.
fn stale(m: &Moment) -> Vec<(usize, Key, BackendId, BTreeSet<Cause>)> {
    let mut out = vec![];
    for (c, k, bl) in m.beliefs.all() {
        if !bl.live() {
            continue;
        }
        for b in bl.granted_by() {
            if let Some(causes) = m.ended(b) {
                out.push((c, *k, b, causes));
            }
        }
    }
    out
}

invariant!(
    NoStaleHolder,
    "app.no_stale_holder",
    App,
    &[ACQUIRES, &[Op::Terminate]],
    "no client still believes it holds a key on a backend that was terminated (a fencing hazard, reported apart from pooled inheritance)"
);
impl Invariant for NoStaleHolder {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[ACQUIRES, &[Op::Terminate]]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        for (c, k, b, causes) in stale(m) {
            if !causes.iter().any(|x| x.is_loss()) {
                out.push(format!(
                    "C{} believes it holds {k}, but the backend that granted it ({b}) was terminated",
                    c + 1
                ));
            }
        }
    }
}

invariant!(
    NoLostLock,
    "app.no_lost_lock",
    App,
    &[ACQUIRES],
    "no client believes it holds a key that no live backend holds for it after a fault of the servers (RECONNECT, PAUSE, KILL, a restart, a crash) or a timeout closed the backend that granted it"
);
impl Invariant for NoLostLock {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[ACQUIRES]
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        for (c, k, b, causes) in stale(m) {
            let lost: Vec<String> = causes
                .iter()
                .filter(|x| x.is_loss())
                .map(|x| x.to_string())
                .collect();
            if !lost.is_empty() {
                out.push(format!(
                    "C{} believes it holds {k}, but {} closed the backend that granted it ({b})",
                    c + 1,
                    lost.join(" or ")
                ));
            }
        }
    }
}

invariant!(
    Progress,
    "app.progress",
    App,
    &[STATEMENTS],
    "every op completes or fails within its bound (lock_timeout for a lock wait, plus run.op_deadline to get a connection or a pooled server)"
);
impl Invariant for Progress {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[STATEMENTS]
    }
    fn history_only(&self) -> bool {
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        // Judged by the checker at each completion and for ops that never completed; see
        // `progress_line`.
        let _ = (m, out);
    }
}

/// `app.progress`'s line for an op that took `took` against its bound.
pub fn progress_line(
    who: usize,
    op: Op,
    reply: Option<&Reply>,
    took: u64,
    bound: u64,
    graph: Option<String>,
) -> String {
    let mut line = format!(
        "C{} {} took {:.3} s, its bound is {:.3} s",
        who + 1,
        op,
        took as f64 / 1e9,
        bound as f64 / 1e9
    );
    if reply.and_then(Reply::code) == Some(code::TIMEOUT) {
        line.push_str(" (it never completed: the client gave up)");
    }
    if let Some(g) = graph {
        line.push_str(". At the deadline: ");
        line.push_str(&g);
    }
    line
}

invariant!(
    AppliedOnce,
    "app.applied_once",
    App,
    &[&[Op::Migrate]],
    "a migration run under the lock is applied once, however many replicas race for it"
);
impl Invariant for AppliedOnce {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[&[Op::Migrate]]
    }
    fn history_only(&self) -> bool {
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        let (true, Act::Stmt(st)) = (m.completes, &m.entry.act) else {
            return;
        };
        if st.op == Op::Migrate
            && m.migrations.len() > 1
            && m.migrations
                .last()
                .is_some_and(|(c, s)| *c == st.client && Some(*s) == m.entry.step)
        {
            let who: Vec<String> = m
                .migrations
                .iter()
                .map(|(c, s)| format!("C{} (step {})", c + 1, s + 1))
                .collect();
            out.push(format!(
                "migration version 1 applied {} times: {} (C{} replied {})",
                m.migrations.len(),
                who.join(", "),
                st.client + 1,
                st.reply
            ));
        }
    }
}

invariant!(
    SettingsStayPut,
    "app.settings_stay_put",
    App,
    &[SETS, SHOWS],
    "a client reads back the settings it set on its connection (SET, SET LOCAL inside its transaction) and none that another client set"
);
impl Invariant for SettingsStayPut {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[SETS, SHOWS]
    }
    fn history_only(&self) -> bool {
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        for s in m.seen {
            let Seen::Shown {
                client,
                guc,
                expected: Some(expected),
                shown,
                backend,
            } = s
            else {
                continue;
            };
            if expected == shown {
                continue;
            }
            let whose = guc
                .setter_of_text(shown)
                .filter(|c| c != client)
                .map(|c| format!(" (the value C{} sets)", c + 1))
                .unwrap_or_default();
            let on = backend.map(|b| format!(" on {b}")).unwrap_or_default();
            out.push(format!(
                "C{} read {guc} = {shown}{whose}{on}, but its own session has {expected}",
                client + 1
            ));
        }
    }
}

/// Judge what a client's object ops replied against its own session, for the kinds whose
/// row names `name` (`vocab::object::KindRow::follows`).
fn judge_objects(name: &str, m: &Moment, out: &mut Vec<String>) {
    for s in m.seen {
        let Seen::Object {
            client,
            op,
            kind,
            expected: Some(expected),
            got,
            backend,
        } = s
        else {
            continue;
        };
        if kind.row().follows != name {
            continue;
        }
        // Only replies that say whether the object was there are judged (not a failed
        // transaction's 25P02, a lost connection, a timeout).
        let row = kind.row();
        let telling = match got {
            Reply::Ok | Reply::Text { .. } => true,
            Reply::Error { code, .. } => *code == row.missing || *code == row.duplicate,
            Reply::Bool { .. } => false,
        };
        if !telling || got.same_as(expected) {
            continue;
        }
        let whose = |r: &Reply| match r {
            Reply::Text { value } => {
                let who = crate::vocab::object::client_of(value);
                if who == Some(*client) {
                    format!("its own {kind}")
                } else {
                    format!("the {kind} of {value}")
                }
            }
            Reply::Error { code, .. } if *code == row.missing => format!("no {kind} ({code})"),
            Reply::Error { code, .. } if *code == row.duplicate => {
                format!("a {kind} already there ({code})")
            }
            Reply::Ok => "ok".into(),
            other => other.to_string(),
        };
        let on = backend.map(|b| format!(" on {b}")).unwrap_or_default();
        out.push(format!(
            "C{} {op} found {}{on}, but its own session has {}",
            client + 1,
            whose(got),
            whose(expected)
        ));
    }
}

invariant!(
    PreparedStatementsFollow,
    "app.prepared_statements_follow",
    App,
    &[PREPARES, EXECUTES],
    "a client's prepared statement (SQL PREPARE, or protocol-level) is there when it executes it, and it finds none that another client prepared: each prepare, execute and deallocate replies as on the client's own session"
);
impl Invariant for PreparedStatementsFollow {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[PREPARES, EXECUTES]
    }
    fn history_only(&self) -> bool {
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        judge_objects(Self::INFO.name, m, out);
    }
}

invariant!(
    TempStateFollows,
    "app.temp_state_follows",
    App,
    &[TEMP_CREATES, TEMP_USES],
    "a client's temporary table and WITH HOLD cursor are there when it reads them, and it finds none that another client made: each create_temp, read_temp, declare_hold and fetch replies as on the client's own session"
);
impl Invariant for TempStateFollows {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[TEMP_CREATES, TEMP_USES]
    }
    fn history_only(&self) -> bool {
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        judge_objects(Self::INFO.name, m, out);
    }
}

invariant!(
    NotificationsArrive,
    "app.notifications_arrive",
    App,
    &[LISTENS, NOTIFIES],
    "a client that listened on its connection and stayed receives every notification committed on the channel since, and a client that never listened on its connection receives none"
);
impl Invariant for NotificationsArrive {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[LISTENS, NOTIFIES]
    }
    fn history_only(&self) -> bool {
        // Judged from the history (`check::notify`), with its own unknowns: a client that
        // stopped listening, or sat in a transaction, after a notification was committed.
        true
    }
}

invariant!(
    RepliesInStep,
    "app.replies_in_step",
    App,
    &[STATEMENTS],
    "every reply a client gets answers the statement it sent: the identity row each statement returns echoes that statement's step, and the reply has that statement's shape"
);
impl Invariant for RepliesInStep {
    fn info(&self) -> InvariantInfo {
        Self::INFO
    }
    fn needs(&self) -> Needs {
        &[STATEMENTS]
    }
    fn history_only(&self) -> bool {
        // The reply alone says it: the client compared the echoed step with the one it sent.
        true
    }
    fn judge(&self, m: &Moment, out: &mut Vec<String>) {
        let (true, Act::Stmt(st)) = (m.completes, &m.entry.act) else {
            return;
        };
        let Reply::Error { code, message } = st.reply else {
            return;
        };
        if code != code::OUT_OF_STEP {
            return;
        }
        let step = m.entry.step.map(|s| format!(" (step {})", s + 1));
        out.push(format!(
            "C{} {}{} at {:.3} ms got a reply to another statement: {message}; the client closed the connection",
            st.client + 1,
            st.op,
            step.unwrap_or_default(),
            m.t as f64 / 1e6,
        ));
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
    &ShowMatches,
    &ObjectsMatch,
    &NotificationMatches,
    &MutualExclusion,
    &NoOrphans,
    &FailedLockNotHeld,
    &UnlockReachesOwner,
    &RollbackReleases,
    &NoStaleHolder,
    &NoLostLock,
    &Progress,
    &AppliedOnce,
    &SettingsStayPut,
    &PreparedStatementsFollow,
    &TempStateFollows,
    &NotificationsArrive,
    &RepliesInStep,
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
        assert_eq!(ALL.len(), 25);
        let mut seen_app = false;
        for i in catalog() {
            assert!(i.name.starts_with(&format!("{}.", i.tier)), "{}", i.name);
            assert!(!i.meaning.is_empty() && !i.meaning.ends_with('.'));
            seen_app |= i.tier == Tier::App;
            assert!(
                !(seen_app && i.tier == Tier::Pg),
                "{} after an app.*",
                i.name
            );
        }
        for inv in ALL {
            assert!(!inv.needs().is_empty(), "{}", inv.info().name);
        }
        assert_eq!(by_name("app.no_orphans").unwrap().info().tier, Tier::App);
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn every_reason_the_model_gives_names_a_pg_invariant_of_the_catalog() {
        use super::super::model::Why;
        let b = BackendId {
            pid: 1,
            start_us: 1,
        };
        let k = Key::Big(7);
        let whys = [
            Why::Reply {
                predicted: Reply::Bool { value: false },
                backend: b,
                holders: vec![b],
            },
            Why::Reply {
                predicted: Reply::Bool { value: true },
                backend: b,
                holders: vec![],
            },
            Why::Rows {
                backend: b,
                model: vec![],
                seen: vec![k],
            },
            Why::StillThere {
                backend: b,
                cause: Cause::Terminate,
            },
            Why::Probe {
                key: k,
                available: true,
                holders: vec![b],
                after: Some(Op::Rollback),
            },
            Why::Probe {
                key: k,
                available: false,
                holders: vec![],
                after: Some(Op::Commit),
            },
            Why::Probe {
                key: k,
                available: true,
                holders: vec![b],
                after: Some(Op::Unlock),
            },
            Why::Probe {
                key: k,
                available: true,
                holders: vec![b],
                after: Some(Op::Cancel),
            },
            Why::Exclusion {
                key: k,
                backends: vec![b, b],
            },
            Why::Reply {
                predicted: Reply::Text {
                    value: "default".into(),
                },
                backend: b,
                holders: vec![],
            },
            Why::Notification {
                backend: Some(b),
                payload: "C1 s2".into(),
            },
        ];
        let expected = [
            "pg.exclusion",
            "pg.replies_match_model",
            "pg.locks_match_model",
            "pg.terminate_releases",
            "pg.session_survives_rollback",
            "pg.xact_released_at_end",
            "pg.stacking",
            "pg.cancel_keeps_session_locks",
            "pg.exclusion",
            "pg.show_matches",
            "pg.notification_matches",
        ];
        for (w, name) in whys.iter().zip(expected) {
            assert_eq!(w.invariant(), name, "{w:?}");
            let inv = by_name(w.invariant()).expect("in the catalog");
            assert_eq!(inv.info().tier, Tier::Pg);
            assert!(!w.describe().is_empty());
        }
    }
}
