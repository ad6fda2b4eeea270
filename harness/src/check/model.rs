//! What should happen: a pure reference model of PostgreSQL advisory locks, of the pooler's
//! server assignment and reset rules ([`PoolRules`]), and of what each logical client
//! believes it holds. Keyed by backend identity `(pid, backend_start)`, learned from what
//! each op reports; the model never guesses which backend a pooler hands out, it only checks
//! that the one reported is possible (linked when it must be, alive, not someone else's).
//! Driven by the checker from a history; it performs no I/O.

use crate::pooler::{PoolRules, ServerFate};
use crate::vocab::reply::code;
use crate::vocab::{BackendId, Key, Op, Reply};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Tx {
    #[default]
    Idle,
    Open,
    Aborted,
}

/// One PostgreSQL backend's advisory locks (with their stacking counts) and transaction state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendModel {
    pub session: BTreeMap<Key, u32>,
    pub xact: BTreeMap<Key, u32>,
    pub tx: Tx,
}

impl BackendModel {
    pub fn holds(&self, k: Key) -> bool {
        self.session.get(&k).copied().unwrap_or(0) > 0
            || self.xact.get(&k).copied().unwrap_or(0) > 0
    }
    pub fn keys(&self) -> BTreeSet<Key> {
        self.session
            .keys()
            .chain(self.xact.keys())
            .copied()
            .collect()
    }
}

/// What a client believes it holds on one key, by the lock API's own rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    pub session: u32,
    pub xact: u32,
    /// The backends that granted it (in transaction mode one key can be granted to a
    /// client on several backends in turn).
    pub backends: BTreeSet<BackendId>,
    /// That backend has been terminated and the client has not yet heard of it.
    pub stale: bool,
    /// A fault of the servers (not `terminate`) ended that backend: the fault.
    pub lost_to: Option<Op>,
}

#[derive(Clone, Debug, Default)]
pub struct ClientModel {
    pub connected: bool,
    /// Its server was closed under it; its next statement fails with `closed`.
    pub broken: bool,
    /// The backend this client is pinned to (direct and session mode: for the connection;
    /// transaction mode: for the open transaction).
    pub linked: Option<BackendId>,
    /// Concurrent schedule: when `linked` was set (the completion time of the op).
    pub linked_at: u64,
    /// The backend that served it last (target of its terminate/cancel steps).
    pub last: Option<BackendId>,
    pub beliefs: BTreeMap<Key, Belief>,
    /// The application's view: inside BEGIN .. COMMIT/ROLLBACK.
    pub in_tx: bool,
    pub tx_backend: Option<BackendId>,
    /// Keys first locked inside the current transaction.
    pub tx_taken: BTreeSet<Key>,
}

/// Why a key must be probed by the fresh contender after a step, and so which invariant a
/// wrong answer breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeReason {
    /// The transaction ended (commit, rollback, an error that aborted it).
    XactReleasedAtEnd,
    /// A ROLLBACK: session locks stay.
    SessionSurvivesRollback,
    /// An unlock that left a count.
    Stacking,
    /// The backend was terminated.
    TerminateReleases,
    /// The backend's query was cancelled.
    CancelKeepsSessionLocks,
    /// A server was closed (a client left it mid-transaction, or a direct session ended).
    ServerClosed,
}

/// Concurrent: how long after the model learnt of a backend's end a signal may still find
/// its process exiting.
const EXITING_NS: u64 = 1_000_000_000;

/// A fact the model noticed while applying a step that some invariant judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A client pinned to one backend had its statement run on another.
    PinnedElsewhere {
        client: usize,
        pinned: BackendId,
        ran: BackendId,
    },
    /// A statement ran on a backend that had been terminated.
    RanOnTerminated { client: usize, ran: BackendId },
    /// Concurrent, pooled: the client's server died under its open transaction and the
    /// pooler routed its next statement to another server instead of closing it.
    RerouteAfterServerDeath { client: usize },
    /// A client was given a backend pinned to another client.
    GivenPinned {
        client: usize,
        ran: BackendId,
        owner: usize,
    },
    /// A client's unlock ran on a backend that never granted it that key.
    UnlockMissedOwner {
        client: usize,
        key: Key,
        granted_on: Vec<BackendId>,
        ran: BackendId,
    },
    /// Concurrent: a lock was refused though no other backend held it, took it, or could
    /// have taken it during the call.
    ImplausibleRefusal {
        client: usize,
        key: Key,
        ran: BackendId,
    },
    /// Concurrent: an unlock returned true for a key the backend holds only because a lock
    /// call on it failed (lock_timeout or a cancel) in the instant PostgreSQL granted it.
    FailedLockHeld {
        key: Key,
        backend: BackendId,
        failed: Interrupted,
        unlocked_by: usize,
    },
    /// Concurrent: a lock was granted to `backend` while `other` held it and no op that
    /// could have released it was running.
    DoubleGrant {
        key: Key,
        backend: BackendId,
        other: BackendId,
    },
}

/// The model's verdict on one executed step.
#[derive(Clone, Debug, Default)]
pub struct Effect {
    pub expected_reply: Option<Reply>,
    pub notes: Vec<Note>,
    /// Keys a fresh contender should probe after the step, and why.
    pub probes: Vec<(ProbeReason, Key)>,
    /// Identities that left (the observation after the step must not show them).
    pub gone: Vec<BackendId>,
}

/// Concurrent schedule: a session lock call that failed with `lock_timeout` (55P03) or a
/// cancel (57014) while it waited. PostgreSQL may have granted the lock in the same instant:
/// `LockErrorCleanup` (proc.c) keeps a lock granted while the error was being raised, and a
/// session lock survives the abort. Whether it did is settled by the backend's next unlock
/// of the key (true: it did), its reset or exit, or the case's last look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interrupted {
    pub client: usize,
    pub code: String,
    /// When the failed call completed.
    pub at_ns: u64,
    /// How many such calls on this backend and key are unsettled.
    pub count: u32,
}

/// Concurrent schedule: what ran beside the op being applied (invoked before it completed,
/// completed after it was invoked). Each makes plausible a reply that the order of
/// completions alone would not explain.
#[derive(Clone, Copy, Debug, Default)]
pub struct Beside {
    /// A `cancel`: a 57014 may be its doing.
    pub cancel: bool,
    /// A `terminate`: a `closed` connection or a 57P01 may be its doing.
    pub terminate: bool,
    /// A terminate, disconnect or reconnect: a backend the model thinks alive may be gone.
    pub close: bool,
    /// A statement that changes locks or transaction state on the same backend (or on one
    /// the history cannot name): the two may have run in either order.
    pub on_backend: bool,
}

#[derive(Clone, Debug)]
pub struct Model {
    /// Concurrent schedule: whether a lock is free for a backend depends on an order the
    /// history does not fix, so the reply decides (the checker judges its plausibility).
    pub lenient: bool,
    /// Concurrent schedule: the completion time of the op being applied, and its invoke
    /// time (ops that overlap in time may have run in either order).
    pub clock: u64,
    pub invoked_at: u64,
    /// Concurrent, transaction pooling: a statement that changes session state (DISCARD
    /// ALL) ran on a server the history cannot name, so the model's locks may be wrong.
    pub uncertain: bool,
    /// Concurrent: the backends such a DISCARD ALL may have reset (live, not linked to a
    /// client's transaction then): their session locks may be gone.
    pub maybe_discarded: BTreeSet<BackendId>,
    /// Concurrent: failed session lock calls that may have been granted, by (backend, key).
    pub interrupted: BTreeMap<(BackendId, Key), Interrupted>,
    /// Concurrent: what ran beside the op being applied (set by the checker).
    pub beside: Beside,
    /// Concurrent: unlocks that returned true before the grant they released was seen
    /// (the grant completed later but ran first); the grant pays the debt.
    pub owed: BTreeMap<(BackendId, Key), u32>,
    /// Concurrent: session locks a release not yet seen (completed later, ran first) took.
    pub taken_early: BTreeMap<(BackendId, Key), u32>,
    /// Concurrent: backends whose transaction state an order the history cannot fix left
    /// unsure; a reply on them that disagrees is explained by the other order if it can be.
    pub unsure: BTreeSet<BackendId>,
    /// Concurrent: when a reset query at release last cleared each key (`clock`). The
    /// pooler runs it after giving the client its answer, so for a moment the key is still
    /// held.
    pub reset_released: BTreeMap<Key, u64>,
    pub rules: PoolRules,
    pub backends: BTreeMap<BackendId, BackendModel>,
    /// Backends that ended, with when the model learnt it (`clock`).
    pub dead: BTreeMap<BackendId, u64>,
    /// Backends a fault (RECONNECT) marked to close when the pooler next releases them.
    pub closing: BTreeMap<BackendId, Op>,
    /// Concurrent: backends a RECONNECT or PAUSE may have closed (which servers were idle at
    /// that instant the history cannot say), with the fault: settled by their next
    /// statement (alive) or the case's last look (gone: lost to the fault).
    pub maybe_gone: BTreeMap<BackendId, Op>,
    /// Concurrent: when the model first heard of each backend (`clock`), so a fault that
    /// ends every backend ends only those that existed before it began.
    pub born: BTreeMap<BackendId, u64>,
    /// Concurrent: the last RECONNECT or PAUSE (its completion `clock`): a backend first
    /// heard of by a statement invoked before then (a server mid-login at the fault) may be
    /// closed at its release as well.
    pub last_idle_fault: Option<(u64, Op)>,
    pub clients: Vec<ClientModel>,
}

impl Model {
    pub fn new(rules: PoolRules, clients: usize) -> Model {
        Model {
            lenient: false,
            clock: 0,
            invoked_at: 0,
            uncertain: false,
            maybe_discarded: BTreeSet::new(),
            interrupted: BTreeMap::new(),
            beside: Beside::default(),
            owed: BTreeMap::new(),
            reset_released: BTreeMap::new(),
            taken_early: BTreeMap::new(),
            unsure: BTreeSet::new(),
            rules,
            backends: BTreeMap::new(),
            dead: BTreeMap::new(),
            closing: BTreeMap::new(),
            maybe_gone: BTreeMap::new(),
            born: BTreeMap::new(),
            last_idle_fault: None,
            clients: vec![ClientModel::default(); clients],
        }
    }

    /// Every `(backend, key)` the model says is granted.
    pub fn held(&self) -> BTreeSet<(BackendId, Key)> {
        self.backends
            .iter()
            .flat_map(|(b, m)| {
                m.keys()
                    .into_iter()
                    .filter(|k| m.holds(*k))
                    .map(move |k| (*b, k))
            })
            .collect()
    }

    pub fn key_held(&self, k: Key) -> bool {
        self.backends.values().any(|m| m.holds(k))
    }

    /// The backends other than `b` surely holding `k` (leaving out session locks a DISCARD
    /// ALL the history cannot place may have released).
    pub fn holders_other_than(&self, b: BackendId, k: Key) -> Vec<BackendId> {
        self.backends
            .iter()
            .filter(|(id, m)| **id != b && m.holds(k))
            .filter(|(id, m)| !self.maybe_reset(id) || m.xact.contains_key(&k))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `b`'s session locks may be gone without the history saying so: a DISCARD ALL
    /// it cannot place, or a fault that may have closed it.
    fn maybe_reset(&self, b: &BackendId) -> bool {
        self.maybe_discarded.contains(b) || self.maybe_gone.contains_key(b)
    }

    /// Whether a backend other than `b` holds `k`, or may hold it after a failed lock call.
    pub fn maybe_held_by_other(&self, b: BackendId, k: Key) -> bool {
        self.held_by_other(b, k) || self.interrupted.keys().any(|(x, y)| *x != b && *y == k)
    }

    /// Whether `k` is held, or may be held after a failed lock call.
    pub fn key_maybe_held(&self, k: Key) -> bool {
        self.key_held(k) || self.interrupted.keys().any(|(_, y)| *y == k)
    }

    /// Failed lock calls a look at the servers can settle: `(b, k)` held there while the
    /// model does not hold it.
    pub fn interrupted_unsettled(&self, b: BackendId, k: Key) -> Option<&Interrupted> {
        self.interrupted
            .get(&(b, k))
            .filter(|_| !self.backends.get(&b).is_some_and(|m| m.holds(k)))
    }

    /// A reset, unlock-all or exit settles what was unsettled on `b`.
    fn forget_unsettled(&mut self, b: BackendId) {
        self.interrupted.retain(|(x, _), _| *x != b);
        self.taken_early.retain(|(x, _), _| *x != b);
    }

    pub fn held_by_other(&self, b: BackendId, k: Key) -> bool {
        self.backends.iter().any(|(id, m)| *id != b && m.holds(k))
    }

    fn client(&mut self, c: usize) -> &mut ClientModel {
        if self.clients.len() <= c {
            self.clients.resize(c + 1, ClientModel::default());
        }
        &mut self.clients[c]
    }

    /// The client (re)connected.
    pub fn connected(&mut self, client: usize) {
        let c = self.client(client);
        c.connected = true;
        c.broken = false;
    }

    /// Run a statement-level op on backend `b` by PostgreSQL's rules. `refused`: in a lenient
    /// model, whether the lock call was refused (its reply says).
    /// `cancelled`: a cancel landed on the statement while it ran (its reply says so).
    fn exec(
        &mut self,
        b: BackendId,
        op: Op,
        key: Option<Key>,
        refused: Option<bool>,
        cancelled: bool,
    ) -> Reply {
        let other = match (self.lenient, refused) {
            (true, Some(r)) => r,
            _ => key.is_some_and(|k| self.held_by_other(b, k)),
        };
        let m = self.backends.entry(b).or_default();
        if m.tx == Tx::Aborted && !matches!(op, Op::Commit | Op::Rollback) {
            return Reply::error(code::IN_FAILED_TRANSACTION);
        }
        if cancelled {
            // The statement ended with the cancel and changed nothing (a lock granted in the
            // same instant is kept in `interrupted` by the caller).
            if m.tx == Tx::Open {
                m.tx = Tx::Aborted;
                m.xact.clear();
            }
            return Reply::error(code::QUERY_CANCELED);
        }
        let bump = |map: &mut BTreeMap<Key, u32>, k: Key| *map.entry(k).or_insert(0) += 1;
        // A session grant an earlier-seen unlock already released (concurrent).
        let owed = &mut self.owed;
        let mut grant_session = |m: &mut BackendModel, k: Key| match owed.get_mut(&(b, k)) {
            Some(n) if *n > 0 => *n -= 1,
            _ => bump(&mut m.session, k),
        };
        let reply = match (op, key) {
            (Op::TryLock, Some(k)) => {
                if !other {
                    grant_session(m, k);
                }
                Reply::Bool { value: !other }
            }
            (Op::Lock, Some(k)) => {
                if other {
                    Reply::error(code::LOCK_NOT_AVAILABLE)
                } else {
                    grant_session(m, k);
                    Reply::Ok
                }
            }
            (Op::Unlock, Some(k)) => match m.session.get_mut(&k) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    if *n == 0 {
                        m.session.remove(&k);
                    }
                    Reply::Bool { value: true }
                }
                _ => Reply::Bool { value: false },
            },
            (Op::UnlockAll, _) => {
                m.session.clear();
                Reply::Ok
            }
            (Op::XactLock, Some(k)) => {
                if other {
                    Reply::error(code::LOCK_NOT_AVAILABLE)
                } else {
                    if m.tx == Tx::Open {
                        bump(&mut m.xact, k);
                    }
                    Reply::Ok
                }
            }
            (Op::TryXactLock, Some(k)) => {
                if !other && m.tx == Tx::Open {
                    bump(&mut m.xact, k);
                }
                Reply::Bool { value: !other }
            }
            (Op::Begin, _) => {
                m.tx = Tx::Open;
                Reply::Ok
            }
            (Op::Commit | Op::Rollback, _) => {
                m.xact.clear();
                m.tx = Tx::Idle;
                Reply::Ok
            }
            (Op::DiscardAll, _) => {
                if m.tx == Tx::Open {
                    Reply::error(code::ACTIVE_TRANSACTION)
                } else {
                    m.session.clear();
                    Reply::Ok
                }
            }
            (Op::FailStatement, _) => Reply::error(code::DIVISION_BY_ZERO),
            (Op::Ping | Op::PgSleep, _) => Reply::Ok,
            (op, key) => unreachable!("exec({op}, {key:?})"),
        };
        if reply.is_error() && m.tx == Tx::Open {
            // The error aborts the transaction at once: AbortTransaction releases its
            // transaction-scoped locks now, not at the later ROLLBACK (observed on 18.6).
            m.tx = Tx::Aborted;
            m.xact.clear();
        }
        reply
    }

    /// The backend exits: all its locks are released; clients pinned to it are broken;
    /// beliefs granted by it become stale.
    fn backend_gone(&mut self, b: BackendId) {
        self.backends.remove(&b);
        self.closing.remove(&b);
        self.maybe_gone.remove(&b);
        self.forget_unsettled(b);
        self.owed.retain(|(x, _), _| *x != b);
        self.dead.entry(b).or_insert(self.clock);
        for c in &mut self.clients {
            if c.linked == Some(b) {
                c.linked = None;
                c.broken = true;
            }
            for belief in c.beliefs.values_mut() {
                if belief.backends.contains(&b) {
                    belief.stale = true;
                }
            }
        }
    }

    /// The pooler releases the client's server back to the pool, running the reset query
    /// first when the rules say so.
    fn release(&mut self, client: usize, b: BackendId) {
        self.clients[client].linked = None;
        if self.rules.resets_on_release()
            && self.rules.reset_releases_locks
            && let Some(m) = self.backends.get_mut(&b)
        {
            for k in m.session.keys() {
                self.reset_released.insert(*k, self.clock);
            }
            m.session.clear();
            self.forget_unsettled(b);
        }
    }

    fn forget_beliefs(&mut self, client: usize) {
        let c = &mut self.clients[client];
        c.beliefs.clear();
        c.in_tx = false;
        c.tx_backend = None;
        c.tx_taken.clear();
    }

    /// The client closes its connection.
    pub fn disconnect(&mut self, client: usize) -> Effect {
        self.client(client);
        let mut effect = Effect {
            expected_reply: Some(Reply::Ok),
            ..Default::default()
        };
        if let Some(b) = self.clients[client].linked {
            let in_tx = self.backends.get(&b).is_some_and(|m| m.tx != Tx::Idle);
            match self.rules.on_disconnect(true, in_tx) {
                ServerFate::Closed => self.close_backend(b, &mut effect),
                ServerFate::Released { .. } if self.closing.contains_key(&b) => {
                    self.closing.remove(&b);
                    self.close_backend(b, &mut effect);
                }
                ServerFate::Released { .. } => {
                    if self.rules.reset_releases_locks
                        && let Some(m) = self.backends.get_mut(&b)
                    {
                        m.session.clear();
                        self.forget_unsettled(b);
                    }
                }
                ServerFate::Untouched => {}
            }
        }
        let c = &mut self.clients[client];
        c.linked = None;
        c.connected = false;
        c.broken = false;
        self.forget_beliefs(client);
        effect
    }

    fn close_backend(&mut self, b: BackendId, effect: &mut Effect) {
        let keys: Vec<Key> = self
            .backends
            .get(&b)
            .map(|m| m.keys().into_iter().collect())
            .unwrap_or_default();
        self.backend_gone(b);
        effect.gone.push(b);
        for k in keys {
            effect.probes.push((ProbeReason::ServerClosed, k));
        }
    }

    /// Concurrent: whether `target` answers a signal as the reply says, by an order the
    /// history does not fix. `pg_terminate_backend` and `pg_cancel_backend` reply by whether
    /// the process still exists: one the model knows ended within the last second may still
    /// be exiting (true); one the model thinks alive may have been ended by a racing
    /// terminate or close not yet applied (false, and then it is gone).
    fn signal_target_alive(&mut self, target: BackendId, reply: &Reply) -> bool {
        let alive = self.backends.contains_key(&target);
        if !self.lenient {
            return alive;
        }
        match reply {
            Reply::Bool { value: true } if !alive => self
                .dead
                .get(&target)
                .is_some_and(|t| self.invoked_at < t.saturating_add(EXITING_NS)),
            Reply::Bool { value: false }
                if alive && (self.beside.close || self.maybe_gone.contains_key(&target)) =>
            {
                self.backend_gone(target);
                false
            }
            _ => alive,
        }
    }

    /// `pg_terminate_backend` of `target` from the admin side; `reply`: what it returned.
    pub fn terminate(&mut self, target: BackendId, reply: &Reply) -> Effect {
        let exiting = !self.backends.contains_key(&target);
        let alive = self.signal_target_alive(target, reply);
        if alive && exiting {
            // Still exiting: answered true, nothing more happens.
            return Effect {
                expected_reply: Some(Reply::Bool { value: true }),
                ..Default::default()
            };
        }
        let mut effect = Effect {
            expected_reply: Some(Reply::Bool { value: alive }),
            ..Default::default()
        };
        if alive {
            let keys: Vec<Key> = self.backends[&target].keys().into_iter().collect();
            self.backend_gone(target);
            effect.gone.push(target);
            for k in keys {
                effect.probes.push((ProbeReason::TerminateReleases, k));
            }
        }
        effect
    }

    /// `pg_cancel_backend` of `target`: an idle backend ignores it; nothing is released.
    pub fn cancel(&mut self, target: BackendId, reply: &Reply) -> Effect {
        let alive = self.signal_target_alive(target, reply);
        let mut effect = Effect {
            expected_reply: Some(Reply::Bool { value: alive }),
            ..Default::default()
        };
        if let Some(m) = self.backends.get(&target) {
            for k in m.session.keys() {
                effect
                    .probes
                    .push((ProbeReason::CancelKeepsSessionLocks, *k));
            }
        }
        effect
    }

    /// A fault of the servers ended backend `b`: as [`Model::backend_gone`], and the beliefs
    /// it granted are lost to `fault` (app.no_lost_lock, not app.no_stale_holder).
    fn backend_lost(&mut self, b: BackendId, fault: Op, effect: &mut Effect) {
        for c in &mut self.clients {
            for belief in c.beliefs.values_mut() {
                if belief.backends.contains(&b) && !belief.stale {
                    belief.lost_to = Some(fault);
                }
            }
        }
        self.closing.remove(&b);
        self.close_backend(b, effect);
    }

    /// A fault of the servers (`vocab::fault` says what each ends and breaks). `target`: the
    /// backend of `backend_kill` / `backend_freeze`; `reply`: what the nemesis reported
    /// (`false`: the target was already gone, nothing happened).
    pub fn server_fault(&mut self, op: Op, target: Option<BackendId>, reply: &Reply) -> Effect {
        use crate::vocab::fault::{Breaks, Ends, meaning};
        let Some(m) = meaning(op) else {
            return Effect::default();
        };
        let mut effect = Effect {
            expected_reply: Some(Reply::Ok),
            ..Default::default()
        };
        // Concurrent: PAUSE waits for every server to be released, and a client idle in a
        // transaction can hold one past the nemesis's bound (the sequential schedule does not
        // start it while a client is linked).
        if self.lenient && op == Op::PoolerPause && reply.code() == Some(code::TIMEOUT) {
            effect.expected_reply = Some(reply.clone());
        }
        if op.targets_backend() {
            // Concurrent: a backend the model knows ended a moment ago may still be exiting
            // (still in pg_stat_activity, its process still there): the signal found it.
            let exiting = self.lenient
                && *reply == Reply::Ok
                && target.is_some_and(|t| {
                    self.dead
                        .get(&t)
                        .is_some_and(|d| self.invoked_at < d.saturating_add(EXITING_NS))
                });
            if exiting {
                return effect;
            }
            let alive = target.is_some_and(|t| self.backends.contains_key(&t));
            // The target ended before the signal (concurrent: perhaps by a fault beside it).
            if !alive || (self.lenient && *reply == (Reply::Bool { value: false })) {
                effect.expected_reply = Some(Reply::Bool { value: false });
                return effect;
            }
        }
        let linked: BTreeSet<BackendId> = self.clients.iter().filter_map(|c| c.linked).collect();
        let ending: Vec<BackendId> = match m.ends {
            Ends::Nothing => vec![],
            Ends::All if self.lenient => {
                // Concurrent: a backend first heard of while the fault ran may be a new one
                // (a client served by the restarted pooler or server): it may be gone.
                let mut old = vec![];
                for b in self.backends.keys() {
                    if self.born.get(b).is_some_and(|t| *t >= self.invoked_at) {
                        self.maybe_gone.insert(*b, op);
                    } else {
                        old.push(*b);
                    }
                }
                old
            }
            Ends::All => self.backends.keys().copied().collect(),
            Ends::IdleNowLinkedAtRelease if self.lenient => {
                // Concurrent: which servers were idle at the fault's instant is not in the
                // history, nor exactly when a linked one is released (PgBouncer closes it
                // then). Every one may be gone from now on, its session locks with it: a
                // statement it serves later says it was alive; the last look settles it.
                let _ = reply;
                self.last_idle_fault = Some((self.clock, op));
                for b in self.backends.keys() {
                    self.maybe_gone.insert(*b, op);
                }
                vec![]
            }
            Ends::IdleNowLinkedAtRelease => {
                // A PAUSE that timed out was RESUMEd before the linked servers were released:
                // only the idle ones were closed.
                if !reply.is_error() {
                    self.closing.extend(linked.iter().map(|b| (*b, op)));
                }
                self.backends
                    .keys()
                    .filter(|b| !linked.contains(b))
                    .copied()
                    .collect()
            }
        };
        for b in ending {
            self.backend_lost(b, op, &mut effect);
        }
        if m.breaks == Breaks::AllClients {
            for c in &mut self.clients {
                if c.connected {
                    c.broken = true;
                    c.linked = None;
                }
            }
        }
        effect
    }

    /// Concurrent, at the case's last look: a backend a fault may have closed and that is not
    /// there is gone, and what it granted was lost to that fault.
    pub fn settle_maybe_gone(&mut self, alive: impl Fn(BackendId) -> bool) {
        let maybe: Vec<(BackendId, Op)> = self.maybe_gone.iter().map(|(b, o)| (*b, *o)).collect();
        for (b, fault) in maybe {
            if !alive(b) && self.backends.contains_key(&b) {
                let mut effect = Effect::default();
                self.backend_lost(b, fault, &mut effect);
            }
        }
        self.maybe_gone.clear();
    }

    /// Apply a SQL op the client ran. `served` is the backend that reported itself (in-band,
    /// or from the observer's tag); `reply` is what the client got.
    pub fn apply(
        &mut self,
        client: usize,
        op: Op,
        key: Option<Key>,
        served: Option<BackendId>,
        reply: &Reply,
    ) -> Effect {
        self.client(client);
        let mut effect = Effect::default();
        if let Some(b) = served
            && !self.born.contains_key(&b)
        {
            self.born.insert(b, self.clock);
            if let Some((t, fault)) = self.last_idle_fault
                && self.invoked_at < t
            {
                self.maybe_gone.insert(b, fault);
            }
        }
        // Concurrent schedule, through a pooler: a statement that reaches the pooler before
        // it has read its server's death is routed to another server (measured: PgBouncer
        // 1.24.1, transaction mode, the next statement right after pg_terminate_backend of
        // the client's server in an open transaction). The client's transaction is gone with
        // its server; its statements now run outside it. The reply decides which happened.
        if self.clients[client].broken
            && self.lenient
            && self.rules.mode.is_some()
            && served.is_some()
            && !reply.is_closed()
            && !matches!(reply, Reply::Error { .. })
        {
            let c = &mut self.clients[client];
            c.broken = false;
            c.in_tx = false;
            c.tx_backend = None;
            c.tx_taken.clear();
            effect.notes.push(Note::RerouteAfterServerDeath { client });
        }
        // Concurrent: a terminate that ran beside this statement may have ended its server
        // under it (the model may not have applied that terminate yet): the statement fails
        // with 57P01 or the connection is found closed.
        if self.lenient && self.beside.terminate && reply.ended_by_server() {
            effect.expected_reply = Some(reply.clone());
            let c = &mut self.clients[client];
            c.broken = false;
            c.connected = false;
            c.linked = None;
            self.forget_beliefs(client);
            return effect;
        }
        // A client whose server was closed under it hears of it now (concurrent: or reads
        // the backend's own 57P01 first, which the pooler passes on).
        if self.clients[client].broken {
            effect.expected_reply = Some(if reply.ended_by_server() {
                reply.clone()
            } else {
                Reply::error(code::CLOSED)
            });
            let c = &mut self.clients[client];
            c.broken = false;
            c.connected = false;
            self.forget_beliefs(client);
            return effect;
        }
        let pinned = self.clients[client].linked;
        let backend = match (pinned, served) {
            (Some(p), Some(s)) if p != s => {
                effect.notes.push(Note::PinnedElsewhere {
                    client,
                    pinned: p,
                    ran: s,
                });
                Some(s)
            }
            (Some(p), _) => Some(p),
            (None, Some(s)) => {
                // Concurrent: a statement invoked before the model learnt of its server's
                // end may have run just before it.
                let ran_before_end =
                    self.lenient && self.dead.get(&s).is_some_and(|t| self.invoked_at < *t);
                if self.dead.contains_key(&s) && !ran_before_end {
                    effect.notes.push(Note::RanOnTerminated { client, ran: s });
                }
                // A statement invoked before the owner's link was made may have run before it.
                if let Some(owner) = self.clients.iter().position(|c| {
                    c.linked == Some(s) && !(self.lenient && self.invoked_at < c.linked_at)
                }) {
                    effect.notes.push(Note::GivenPinned {
                        client,
                        ran: s,
                        owner,
                    });
                }
                Some(s)
            }
            (None, None) => None,
        };
        let Some(b) = backend else {
            if self.lenient && op == Op::DiscardAll && !reply.is_error() {
                self.uncertain = true;
                let linked: BTreeSet<BackendId> =
                    self.clients.iter().filter_map(|c| c.linked).collect();
                self.maybe_discarded
                    .extend(self.backends.keys().filter(|b| !linked.contains(b)));
            }
            // No backend known (the reset query overwrote the tag, or the connection failed).
            if reply.ended_by_server() {
                self.clients[client].connected = false;
                self.forget_beliefs(client);
            }
            return effect;
        };
        if op == Op::Migrate {
            // Whether this call applies the migration depends on the other replicas (the
            // checker counts applications); a failure aborts an open transaction.
            self.clients[client].last = Some(b);
            let m = self.backends.entry(b).or_default();
            if m.tx == Tx::Aborted {
                effect.expected_reply = Some(Reply::error(code::IN_FAILED_TRANSACTION));
            } else if reply.is_error() && m.tx == Tx::Open {
                m.tx = Tx::Aborted;
                m.xact.clear();
            }
            let stays = self.rules.stays_linked(self.backends[&b].tx != Tx::Idle);
            if stays {
                self.clients[client].linked = Some(b);
                self.clients[client].linked_at = self.clock;
            } else {
                self.release(client, b);
            }
            return effect;
        }
        let before = self.backends.get(&b).cloned().unwrap_or_default();
        let refused = match (op, reply) {
            (Op::TryLock | Op::TryXactLock, Reply::Bool { value }) => Some(!value),
            (Op::Lock | Op::XactLock, Reply::Ok) => Some(false),
            (Op::Lock | Op::XactLock, r) if r.code() == Some(code::LOCK_NOT_AVAILABLE) => {
                Some(true)
            }
            _ => None,
        };
        // Concurrent schedule: a statement invoked before another client's transaction was
        // linked to this server, and answered after it, ran before that transaction began
        // (the pooler gave the server to the transaction after this statement released it).
        let ran_before_link =
            self.lenient
                && self.clients.iter().enumerate().any(|(d, c)| {
                    d != client && c.linked == Some(b) && self.invoked_at < c.linked_at
                });
        if ran_before_link {
            // Or after it ended, if that end was seen later: unsure either way.
            self.unsure.insert(b);
        }
        let saved_tx = if ran_before_link {
            self.backends.get_mut(&b).map(|m| std::mem::take(&mut m.tx))
        } else {
            None
        };
        // Concurrent: a cancel from the nemesis that ran beside this statement may have
        // landed on it.
        let cancelled = self.lenient
            && self.beside.cancel
            && reply.code() == Some(code::QUERY_CANCELED)
            && !matches!(op, Op::Begin | Op::Commit | Op::Rollback | Op::DiscardAll);
        // An unlock settles an earlier failed lock call on this backend: true when the model
        // holds nothing means PostgreSQL granted it after all.
        if op == Op::Unlock
            && let Some(k) = key
            && let Some(mut failed) = self.interrupted_unsettled(b, k).cloned()
        {
            self.interrupted.remove(&(b, k));
            if reply == &(Reply::Bool { value: true }) {
                *self
                    .backends
                    .entry(b)
                    .or_default()
                    .session
                    .entry(k)
                    .or_insert(0) += 1;
                effect.notes.push(Note::FailedLockHeld {
                    key: k,
                    backend: b,
                    failed: failed.clone(),
                    unlocked_by: client,
                });
                failed.count -= 1;
                if failed.count > 0 {
                    self.interrupted.insert((b, k), failed);
                }
            }
        }
        let pre = self.backends.get(&b).cloned().unwrap_or_default();
        let mut expected = self.exec(b, op, key, refused, cancelled);
        if self.lenient
            && (self.beside.on_backend || self.maybe_reset(&b) || self.unsure.contains(&b))
            && !expected.same_as(reply)
        {
            expected = self.other_order(
                client,
                b,
                (op, key, refused, cancelled),
                pre,
                reply,
                expected,
            );
        }
        if self.dead.contains_key(&b) {
            // It ran just before its backend's end (above): its effects went with it.
            self.backends.remove(&b);
        }
        if self.lenient
            && op == Op::Lock
            && let Some(k) = key
            && matches!(
                reply.code(),
                Some(code::LOCK_NOT_AVAILABLE | code::QUERY_CANCELED)
            )
            && expected.same_as(reply)
        {
            let e = self.interrupted.entry((b, k)).or_insert(Interrupted {
                client,
                code: reply.code().unwrap_or_default().to_string(),
                at_ns: self.clock,
                count: 0,
            });
            e.count += 1;
        }
        if matches!(op, Op::UnlockAll | Op::DiscardAll) && !expected.is_error() {
            self.forget_unsettled(b);
        }
        let after = self.backends.get(&b).cloned().unwrap_or_default();
        if let (Some(tx), Some(m)) = (saved_tx, self.backends.get_mut(&b)) {
            m.tx = tx;
        }
        effect.expected_reply = Some(expected);
        self.clients[client].last = Some(b);

        // Boundary probes: what a fresh contender must see for the keys this step touched.
        if before.tx == Tx::Open && after.tx == Tx::Aborted {
            for k in before.xact.keys() {
                effect.probes.push((ProbeReason::XactReleasedAtEnd, *k));
            }
        }
        match op {
            Op::Commit | Op::Rollback => {
                for k in before.xact.keys() {
                    effect.probes.push((ProbeReason::XactReleasedAtEnd, *k));
                }
                if op == Op::Rollback {
                    for k in after.session.keys() {
                        effect
                            .probes
                            .push((ProbeReason::SessionSurvivesRollback, *k));
                    }
                }
            }
            Op::Unlock => {
                if let Some(k) = key
                    && before.session.get(&k).copied().unwrap_or(0) > 1
                {
                    effect.probes.push((ProbeReason::Stacking, k));
                }
            }
            _ => {}
        }

        // The pooler: pin or release the server.
        let released = !self.rules.stays_linked(after.tx != Tx::Idle);
        if released {
            self.release(client, b);
        } else {
            self.clients[client].linked = Some(b);
            self.clients[client].linked_at = self.clock;
        }

        self.believe(client, op, key, b, reply, &mut effect);
        // A server RECONNECT marked is closed instead of going back to the pool.
        if released && let Some(fault) = self.closing.get(&b).copied() {
            self.backend_lost(b, fault, &mut effect);
        }
        effect
    }

    /// Concurrent: another statement ran on backend `b` beside this one, and the reply
    /// disagrees with the order the completions give. Try the states the other order would
    /// leave: the statement ran outside another client's transaction on `b` (before it
    /// began or after it ended), or an unlock ran before or after another client's lock or
    /// unlock of the key (its count is what the reply says). The first state that explains
    /// the reply is kept; none does: the first answer stands (and is judged).
    fn other_order(
        &mut self,
        client: usize,
        b: BackendId,
        (op, key, refused, cancelled): (Op, Option<Key>, Option<bool>, bool),
        pre: BackendModel,
        reply: &Reply,
        first: Reply,
    ) -> Reply {
        let post = self.backends.get(&b).cloned().unwrap_or_default();
        let others_tx = pre.tx != Tx::Idle
            && (self.unsure.contains(&b)
                || self
                    .clients
                    .iter()
                    .enumerate()
                    .any(|(d, c)| d != client && c.linked == Some(b)));
        let count = match (op, key, reply) {
            (Op::Unlock, Some(k), Reply::Bool { value }) => Some((k, *value)),
            _ => None,
        };
        for (outside, recount) in [(true, false), (false, true), (true, true)] {
            if (outside && !others_tx) || (recount && count.is_none()) {
                continue;
            }
            let mut alt = pre.clone();
            if outside {
                alt.tx = Tx::Idle;
            }
            // What the other order leaves to settle later: a grant seen later pays an
            // unlock that came first (owed); a release seen later finds its lock gone.
            let mut settle = None;
            if let (true, Some((k, held))) = (recount, count) {
                let n = alt.session.get(&k).copied().unwrap_or(0);
                if held && n == 0 {
                    alt.session.insert(k, 1);
                    settle = Some((k, true));
                } else if !held && n > 0 {
                    alt.session.remove(&k);
                    settle = Some((k, false));
                }
            }
            self.backends.insert(b, alt);
            let r = self.exec(b, op, key, refused, cancelled);
            if r.same_as(reply) {
                if outside && let Some(m) = self.backends.get_mut(&b) {
                    m.tx = pre.tx;
                }
                match settle {
                    Some((k, true)) => match self.taken_early.get_mut(&(b, k)) {
                        Some(n) if *n > 0 => *n -= 1,
                        _ => *self.owed.entry((b, k)).or_insert(0) += 1,
                    },
                    Some((k, false)) => {
                        let n = pre.session.get(&k).copied().unwrap_or(0);
                        *self.taken_early.entry((b, k)).or_insert(0) += n;
                    }
                    None => {}
                }
                return r;
            }
        }
        self.backends.insert(b, post);
        first
    }

    /// The application's view, updated from the reply it actually got.
    fn believe(
        &mut self,
        client: usize,
        op: Op,
        key: Option<Key>,
        b: BackendId,
        reply: &Reply,
        effect: &mut Effect,
    ) {
        let granted = matches!(reply, Reply::Bool { value: true })
            || (matches!(op, Op::Lock | Op::XactLock) && matches!(reply, Reply::Ok));
        let c = &mut self.clients[client];
        if let Reply::Error { code, .. } = reply {
            if code == code::CLOSED {
                c.connected = false;
                self.forget_beliefs(client);
                return;
            }
            // An error inside a transaction ends it for the application: nothing more can
            // run in it, and its transaction locks are gone (it knows from the error).
            if c.in_tx {
                c.beliefs.retain(|_, bl| {
                    bl.xact = 0;
                    bl.session > 0
                });
            }
        }
        match op {
            Op::TryLock | Op::Lock if granted => grant(c, key, b, true),
            Op::TryXactLock | Op::XactLock if granted && c.in_tx => grant(c, key, b, false),
            Op::Unlock if !reply.is_error() => {
                let k = key.expect("unlock has a key");
                if let Some(belief) = c.beliefs.get_mut(&k)
                    && belief.session > 0
                {
                    // A stale belief (its backend was terminated) cannot reach its owner: that
                    // hazard is app.no_stale_holder's, kept apart from pooled routing.
                    if !belief.stale && !belief.backends.contains(&b) {
                        effect.notes.push(Note::UnlockMissedOwner {
                            client,
                            key: k,
                            granted_on: belief.backends.iter().copied().collect(),
                            ran: b,
                        });
                    }
                    belief.session -= 1;
                    if belief.session == 0 && belief.xact == 0 {
                        c.beliefs.remove(&k);
                    }
                }
            }
            Op::UnlockAll | Op::DiscardAll if !reply.is_error() => {
                c.beliefs.retain(|_, bl| {
                    bl.session = 0;
                    bl.xact > 0
                });
            }
            Op::Begin if !reply.is_error() && !c.in_tx => {
                c.in_tx = true;
                c.tx_backend = Some(b);
                c.tx_taken.clear();
            }
            Op::Commit | Op::Rollback if !reply.is_error() => {
                c.in_tx = false;
                c.beliefs.retain(|_, bl| {
                    bl.xact = 0;
                    bl.session > 0
                });
            }
            _ => {}
        }
    }

    /// After a commit or rollback by `client`: the keys first taken in that transaction, on
    /// its backend (then forgotten).
    pub fn take_rolled_back(&mut self, client: usize) -> (Option<BackendId>, BTreeSet<Key>) {
        let c = self.client(client);
        (c.tx_backend.take(), std::mem::take(&mut c.tx_taken))
    }
}

/// The client was granted `key` on backend `b` (session or transaction scope).
fn grant(c: &mut ClientModel, key: Option<Key>, b: BackendId, session: bool) {
    let k = key.expect("lock op has a key");
    let fresh = !c.beliefs.contains_key(&k);
    let belief = c.beliefs.entry(k).or_insert(Belief {
        session: 0,
        xact: 0,
        backends: BTreeSet::new(),
        stale: false,
        lost_to: None,
    });
    belief.backends.insert(b);
    if session {
        belief.session += 1;
    } else {
        belief.xact += 1;
    }
    if c.in_tx && fresh {
        c.tx_taken.insert(k);
    }
}

#[cfg(test)]
mod tests {
    //! The model against facts known independently of it: the replies PostgreSQL 18.6 and
    //! PgBouncer gave in the ground-truth transcripts (`shared/NOTES.md`, the seed articles,
    //! `tests/ground_truth.rs`). Each step feeds the *real* reply and asserts the model
    //! predicted exactly that; a model that drifts from PostgreSQL fails here.
    use super::*;
    use crate::topology::PoolMode;

    const K: Key = Key::Big(4242424242);
    fn b(n: i32) -> BackendId {
        BackendId {
            pid: n,
            start_us: 1000 + n as i64,
        }
    }
    fn rules(mode: Option<PoolMode>, always: bool) -> PoolRules {
        PoolRules {
            mode,
            pool_size: 2,
            reset_releases_locks: true,
            reset_always: always,
            app_pin: None,
        }
    }
    fn model(mode: Option<PoolMode>) -> Model {
        Model::new(rules(mode, false), 3)
    }
    const T: Reply = Reply::Bool { value: true };
    const F: Reply = Reply::Bool { value: false };

    /// Apply a step with the reply the real server gave; assert the model predicted it.
    #[track_caller]
    fn real(
        m: &mut Model,
        c: usize,
        op: Op,
        key: Option<Key>,
        on: BackendId,
        got: Reply,
    ) -> Effect {
        let e = m.apply(c, op, key, Some(on), &got);
        let predicted = e.expected_reply.clone().expect("a prediction");
        assert!(
            predicted.same_as(&got),
            "C{} {op} on {on}: PostgreSQL replied {got}, the model predicted {predicted}",
            c + 1
        );
        e
    }

    #[test]
    fn session_locks_stack_and_survive_rollback() {
        // Seed 000 experiment 4 and seed 002's rollback protocol.
        let mut m = model(Some(PoolMode::Session));
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        let rb = real(&mut m, 0, Op::Rollback, None, b(1), Reply::Ok);
        assert!(
            rb.probes
                .contains(&(ProbeReason::SessionSurvivesRollback, K))
        );
        assert_eq!(m.backends[&b(1)].session[&K], 2);
        let un = real(&mut m, 0, Op::Unlock, Some(K), b(1), T);
        assert!(un.probes.contains(&(ProbeReason::Stacking, K)));
        assert!(m.key_held(K), "one unlock of two leaves it held");
        real(&mut m, 0, Op::Unlock, Some(K), b(1), T);
        assert!(!m.key_held(K));
        real(&mut m, 0, Op::Unlock, Some(K), b(1), F);
    }

    #[test]
    fn a_reply_the_model_did_not_predict_is_reported() {
        let mut m = model(None);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        // Had PostgreSQL granted B2 the key B1 holds, the prediction says false.
        let e = m.apply(1, Op::TryLock, Some(K), Some(b(2)), &T);
        assert!(!e.expected_reply.unwrap().same_as(&T));
    }

    #[test]
    fn xact_locks_end_with_the_transaction_and_are_released_at_once_outside_one() {
        let mut m = model(Some(PoolMode::Session));
        // Autocommit: pg_try_advisory_xact_lock returns true and holds nothing afterwards.
        real(&mut m, 0, Op::TryXactLock, Some(K), b(1), T);
        assert!(!m.key_held(K));
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        real(&mut m, 0, Op::XactLock, Some(K), b(1), Reply::Ok);
        assert!(m.key_held(K) && m.clients[0].beliefs.contains_key(&K));
        // Seed 000 experiment 3: a second caller while the transaction is open.
        real(&mut m, 1, Op::TryXactLock, Some(K), b(2), F);
        real(
            &mut m,
            1,
            Op::XactLock,
            Some(K),
            b(2),
            Reply::error(code::LOCK_NOT_AVAILABLE),
        );
        let c = real(&mut m, 0, Op::Commit, None, b(1), Reply::Ok);
        assert!(c.probes.contains(&(ProbeReason::XactReleasedAtEnd, K)));
        assert!(!m.key_held(K) && m.clients[0].beliefs.is_empty());
        real(&mut m, 1, Op::TryXactLock, Some(K), b(2), T);
    }

    #[test]
    fn errors_abort_open_transactions_until_rollback() {
        let mut m = model(Some(PoolMode::Session));
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        // DISCARD ALL cannot run inside a transaction block (25001), which aborts it.
        real(
            &mut m,
            0,
            Op::DiscardAll,
            None,
            b(1),
            Reply::error(code::ACTIVE_TRANSACTION),
        );
        real(
            &mut m,
            0,
            Op::TryLock,
            Some(K),
            b(1),
            Reply::error(code::IN_FAILED_TRANSACTION),
        );
        real(
            &mut m,
            0,
            Op::Begin,
            None,
            b(1),
            Reply::error(code::IN_FAILED_TRANSACTION),
        );
        real(&mut m, 0, Op::Rollback, None, b(1), Reply::Ok);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        // The abort releases transaction locks at once (observed on 18.6), not at ROLLBACK.
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        real(&mut m, 0, Op::TryXactLock, Some(Key::Big(9)), b(1), T);
        let e = real(
            &mut m,
            0,
            Op::FailStatement,
            None,
            b(1),
            Reply::error(code::DIVISION_BY_ZERO),
        );
        assert!(
            e.probes
                .contains(&(ProbeReason::XactReleasedAtEnd, Key::Big(9)))
        );
        assert!(!m.key_held(Key::Big(9)) && m.key_held(K));
        assert!(!m.clients[0].beliefs.contains_key(&Key::Big(9)));
        real(&mut m, 0, Op::Rollback, None, b(1), Reply::Ok);
        real(
            &mut m,
            0,
            Op::FailStatement,
            None,
            b(1),
            Reply::error(code::DIVISION_BY_ZERO),
        );
        assert_eq!(m.backends[&b(1)].tx, Tx::Idle, "autocommit aborts nothing");
    }

    #[test]
    fn transaction_mode_hands_the_lock_to_the_next_client_on_the_same_backend() {
        // NOTES.md's transcript: C1 on 7139 -> t; C2 handed 7139 -> t (re-entry); C2's
        // unlock -> t and 7139 still holds it (count 2).
        let mut m = model(Some(PoolMode::Transaction));
        real(&mut m, 0, Op::TryLock, Some(K), b(7139), T);
        assert_eq!(
            m.clients[0].linked, None,
            "released after the autocommit statement"
        );
        real(&mut m, 1, Op::TryLock, Some(K), b(7139), T);
        assert!(m.clients[0].beliefs[&K].backends.contains(&b(7139)));
        assert!(m.clients[1].beliefs[&K].backends.contains(&b(7139)));
        real(&mut m, 1, Op::Unlock, Some(K), b(7139), T);
        assert!(m.key_held(K), "7139 still holds it");
        // C1's unlock lands on another backend: false, and it did not reach the owner.
        let un = real(&mut m, 0, Op::Unlock, Some(K), b(2), F);
        assert!(matches!(
            un.notes[..],
            [Note::UnlockMissedOwner { client: 0, .. }]
        ));
    }

    #[test]
    fn a_transaction_pins_its_backend_and_a_move_is_noted() {
        let mut m = model(Some(PoolMode::Transaction));
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        assert_eq!(m.clients[0].linked, Some(b(1)));
        let e = m.apply(0, Op::TryLock, Some(K), Some(b(2)), &T);
        assert!(matches!(e.notes[..], [Note::PinnedElsewhere { .. }]));
        // Another client handed the backend pinned to C1's transaction.
        let mut m = model(Some(PoolMode::Transaction));
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        let e = m.apply(1, Op::TryLock, Some(K), Some(b(1)), &T);
        assert!(
            e.notes
                .iter()
                .any(|n| matches!(n, Note::GivenPinned { owner: 0, .. })),
            "{e:?}"
        );
    }

    #[test]
    fn session_mode_resets_on_disconnect_and_transaction_mode_does_not() {
        // NOTES.md: session mode runs DISCARD ALL when the client leaves; transaction mode
        // leaves the lock on the pooled server.
        let mut s = model(Some(PoolMode::Session));
        real(&mut s, 0, Op::TryLock, Some(K), b(1), T);
        s.disconnect(0);
        assert!(!s.key_held(K));
        let mut t = model(Some(PoolMode::Transaction));
        real(&mut t, 0, Op::TryLock, Some(K), b(1), T);
        t.disconnect(0);
        assert!(t.key_held(K), "orphaned on the pooled server");
        // Leaving mid-transaction closes the server.
        real(&mut t, 1, Op::Begin, None, b(2), Reply::Ok);
        real(&mut t, 1, Op::TryXactLock, Some(Key::Big(7)), b(2), T);
        let d = t.disconnect(1);
        assert_eq!(d.gone, vec![b(2)]);
        assert!(!t.key_held(Key::Big(7)));
        // Session mode without a releasing reset query keeps the lock (an orphan).
        let mut n = Model::new(
            PoolRules {
                reset_releases_locks: false,
                ..rules(Some(PoolMode::Session), false)
            },
            2,
        );
        real(&mut n, 0, Op::TryLock, Some(K), b(1), T);
        n.disconnect(0);
        assert!(n.key_held(K));
    }

    #[test]
    fn terminate_releases_everything_and_leaves_stale_beliefs() {
        let mut m = model(Some(PoolMode::Transaction));
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        let e = m.terminate(b(1), &T);
        assert!(e.expected_reply.unwrap().same_as(&T));
        assert!(e.probes.contains(&(ProbeReason::TerminateReleases, K)));
        assert!(!m.key_held(K));
        assert!(m.clients[0].beliefs[&K].stale, "C1 has not heard of it");
        assert!(m.terminate(b(1), &F).expected_reply.unwrap().same_as(&F));
        // Session mode: the pinned client is broken and hears of it at its next statement.
        let mut s = model(Some(PoolMode::Session));
        real(&mut s, 0, Op::TryLock, Some(K), b(1), T);
        s.terminate(b(1), &T);
        real(
            &mut s,
            0,
            Op::TryLock,
            Some(K),
            b(1),
            Reply::error(code::CLOSED),
        );
        assert!(s.clients[0].beliefs.is_empty());
    }

    #[test]
    fn cancel_keeps_session_locks() {
        let mut m = model(Some(PoolMode::Session));
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        let c = m.cancel(b(1), &T);
        assert!(
            c.probes
                .contains(&(ProbeReason::CancelKeepsSessionLocks, K))
        );
        assert!(m.key_held(K));
    }

    #[test]
    fn reset_always_clears_session_locks_at_every_release() {
        // NOTES.md: with server_reset_query_always the lock is gone before the next statement.
        let mut m = Model::new(rules(Some(PoolMode::Transaction), true), 2);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        assert!(!m.key_held(K));
        assert!(
            m.clients[0].beliefs.contains_key(&K),
            "the app still believes it"
        );
        real(&mut m, 1, Op::TryLock, Some(K), b(1), T);
    }

    /// Concurrent schedule, the orders the history cannot fix (measured on PgBouncer 1.24.1
    /// in transaction mode, see `tests/cli.rs` and README "Concurrent schedule").
    #[test]
    fn concurrent_statement_answered_after_a_begin_ran_before_it() {
        let mut m = model(Some(PoolMode::Transaction));
        m.lenient = true;
        m.connected(0);
        m.connected(1);
        // C2's BEGIN completes at t=20 on B1; C1's try_lock, invoked at t=10, completes on
        // B1 at t=21: it ran before the BEGIN, outside C2's transaction.
        (m.clock, m.invoked_at) = (20, 15);
        real(&mut m, 1, Op::Begin, None, b(1), Reply::Ok);
        (m.clock, m.invoked_at) = (21, 10);
        let e = real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        assert!(e.notes.is_empty(), "{:?}", e.notes);
        assert_eq!(
            m.clients[0].linked, None,
            "an autocommit statement is not linked"
        );
        assert_eq!(m.clients[1].linked, Some(b(1)), "C2 keeps its transaction");
        // Invoked after the link was made: the pooler gave a pinned server away.
        (m.clock, m.invoked_at) = (30, 25);
        let e = m.apply(0, Op::TryLock, Some(K), Some(b(1)), &T);
        assert!(
            e.notes
                .iter()
                .any(|n| matches!(n, Note::GivenPinned { owner: 1, .. })),
            "{:?}",
            e.notes
        );
    }

    #[test]
    fn concurrent_reroute_after_server_death_and_unknown_discard() {
        let mut m = model(Some(PoolMode::Transaction));
        m.connected(0);
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        m.terminate(b(1), &T);
        // Sequential: the next statement hears of the closed server.
        let mut seq = m.clone();
        let e = seq.apply(0, Op::TryLock, Some(K), Some(b(2)), &T);
        assert_eq!(e.expected_reply, Some(Reply::error(code::CLOSED)));
        // Concurrent: the pooler may route it to another server; the transaction is gone.
        m.lenient = true;
        let e = real(&mut m, 0, Op::TryLock, Some(K), b(2), T);
        assert!(
            e.notes
                .iter()
                .any(|n| matches!(n, Note::RerouteAfterServerDeath { client: 0 }))
        );
        assert!(!m.clients[0].in_tx);
        assert!(!m.uncertain);
        // A DISCARD ALL whose server is unknown leaves the model's locks uncertain.
        m.apply(0, Op::DiscardAll, None, None, &Reply::Ok);
        assert!(m.uncertain);
    }

    /// A blocking lock that fails with lock_timeout while the holder lets go may have been
    /// granted anyway (LockErrorCleanup): the model keeps it as unsettled, and the next
    /// unlock on that backend settles it either way.
    #[test]
    fn concurrent_failed_lock_may_be_held_until_settled() {
        let timeout = Reply::error(code::LOCK_NOT_AVAILABLE);
        for unlock_reply in [T, F] {
            let mut m = model(None);
            m.lenient = true;
            for c in 0..2 {
                m.connected(c);
            }
            real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
            // C2 waits; C1 unlocks; C2's wait ends with 55P03 (the reply decides).
            real(&mut m, 0, Op::Unlock, Some(K), b(1), T);
            real(&mut m, 1, Op::Lock, Some(K), b(2), timeout.clone());
            assert!(!m.key_held(K), "the reply said refused");
            assert!(m.key_maybe_held(K) && m.maybe_held_by_other(b(1), K));
            assert!(m.interrupted_unsettled(b(2), K).is_some());
            let e = real(&mut m, 1, Op::Unlock, Some(K), b(2), unlock_reply.clone());
            assert!(m.interrupted.is_empty(), "settled");
            assert!(!m.key_held(K));
            let noted = e
                .notes
                .iter()
                .any(|n| matches!(n, Note::FailedLockHeld { backend, .. } if *backend == b(2)));
            assert_eq!(noted, unlock_reply == T, "{:?}", e.notes);
        }
        // The sequential model never keeps one: there the 55P03 is the model's own prediction.
        let mut m = model(None);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 1, Op::Lock, Some(K), b(2), timeout);
        assert!(m.interrupted.is_empty());
    }

    /// Two statements on one backend whose completions were seen in the other order than
    /// they ran: the reply decides, and what that order owes is settled later.
    #[test]
    fn concurrent_racing_statements_on_one_backend_settle_by_the_replies() {
        let mut m = model(Some(PoolMode::Transaction));
        m.lenient = true;
        for c in 0..2 {
            m.connected(c);
        }
        // C2's unlock is seen before C1's grant, but ran after it.
        m.beside.on_backend = true;
        real(&mut m, 1, Op::Unlock, Some(K), b(1), T);
        assert_eq!(m.owed.get(&(b(1), K)), Some(&1));
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        assert!(!m.key_held(K), "the grant paid the unlock");
        assert_eq!(m.owed.get(&(b(1), K)), Some(&0));
        // Without a statement beside it, the same reply is judged.
        m.beside.on_backend = false;
        let e = m.apply(1, Op::Unlock, Some(K), Some(b(1)), &T);
        assert_eq!(e.expected_reply, Some(F));
        // A release seen later took the lock first: the earlier-seen unlock found it gone.
        let mut m = model(Some(PoolMode::Transaction));
        m.lenient = true;
        for c in 0..2 {
            m.connected(c);
        }
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        m.beside.on_backend = true;
        real(&mut m, 0, Op::Unlock, Some(K), b(1), F);
        real(&mut m, 1, Op::Unlock, Some(K), b(1), T);
        assert!(m.owed.values().all(|n| *n == 0) && !m.key_held(K));
    }

    #[test]
    fn concurrent_cancel_only_when_one_ran_and_unlock_all_settles() {
        let cancelled = Reply::error(code::QUERY_CANCELED);
        let mut m = model(None);
        m.lenient = true;
        m.connected(0);
        // No cancel ran beside it: a 57014 is not what the model predicts.
        let e = m.apply(0, Op::Lock, Some(K), Some(b(1)), &cancelled);
        assert_eq!(e.expected_reply, Some(Reply::Ok));
        let mut m = model(None);
        m.lenient = true;
        m.connected(0);
        m.beside.cancel = true;
        real(&mut m, 0, Op::Lock, Some(K), b(1), cancelled.clone());
        assert!(m.interrupted_unsettled(b(1), K).is_some());
        real(&mut m, 0, Op::UnlockAll, None, b(1), Reply::Ok);
        assert!(m.interrupted.is_empty(), "unlock_all settles it");
        // A cancelled statement inside a transaction aborts it.
        real(&mut m, 0, Op::Begin, None, b(1), Reply::Ok);
        real(&mut m, 0, Op::PgSleep, None, b(1), cancelled);
        real(
            &mut m,
            0,
            Op::Ping,
            None,
            b(1),
            Reply::error(code::IN_FAILED_TRANSACTION),
        );
    }

    // -- faults of the servers (`server_fault`, `vocab::fault::meaning`) ---------------------

    const OK: Reply = Reply::Ok;
    const K7: Key = Key::Big(7);

    /// A model whose clients have all opened their connections.
    fn connected_model(mode: Option<PoolMode>, clients: usize) -> Model {
        let mut m = Model::new(rules(mode, false), clients);
        for c in 0..clients {
            m.connected(c);
        }
        m
    }

    fn sorted(mut v: Vec<BackendId>) -> Vec<BackendId> {
        v.sort();
        v
    }

    #[test]
    fn reconnect_ends_an_idle_backend_and_the_lock_is_lost_to_it() {
        let mut m = connected_model(Some(PoolMode::Transaction), 2);
        // Autocommit: C1's lock stays on B1, released to the pool.
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        assert_eq!(m.clients[0].linked, None);
        let e = m.server_fault(Op::PoolerReconnect, None, &OK);
        assert_eq!(e.expected_reply, Some(OK));
        assert_eq!(e.gone, vec![b(1)]);
        assert!(e.probes.contains(&(ProbeReason::ServerClosed, K)), "{e:?}");
        assert!(!m.key_held(K) && !m.backends.contains_key(&b(1)));
        assert!(m.dead.contains_key(&b(1)));
        assert!(m.closing.is_empty(), "nothing was linked");
        let belief = &m.clients[0].beliefs[&K];
        assert!(belief.stale, "C1 has not heard of it");
        assert_eq!(belief.lost_to, Some(Op::PoolerReconnect));
        // Not linked: the connection to the pooler survives, the next statement gets a new
        // server and the key is free.
        assert!(!m.clients[0].broken);
        real(&mut m, 1, Op::TryLock, Some(K), b(2), T);
        // A terminate's loss is not a fault's: lost_to stays empty (app.no_stale_holder).
        let mut t = connected_model(Some(PoolMode::Transaction), 1);
        real(&mut t, 0, Op::TryLock, Some(K), b(1), T);
        t.terminate(b(1), &T);
        let belief = &t.clients[0].beliefs[&K];
        assert!(belief.stale && belief.lost_to.is_none());
        // A fault does not relabel a belief already lost to a terminate: C1 (not linked, so
        // not told) takes K again on B2, and a restart then ends B2 too.
        real(&mut t, 0, Op::TryLock, Some(K), b(2), T);
        assert_eq!(t.clients[0].beliefs[&K].session, 2);
        let e = t.server_fault(Op::PgRestart, None, &OK);
        assert_eq!(e.gone, vec![b(2)]);
        let belief = &t.clients[0].beliefs[&K];
        assert!(belief.stale && belief.lost_to.is_none(), "{belief:?}");
    }

    #[test]
    fn reconnect_closes_a_linked_backend_when_its_transaction_releases_it() {
        let mut m = connected_model(Some(PoolMode::Transaction), 3);
        // C1 in an open transaction on B1 (a session lock taken inside it); C2's lock on B2,
        // idle in the pool.
        real(&mut m, 0, Op::Begin, None, b(1), OK);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 1, Op::TryLock, Some(K7), b(2), T);
        assert_eq!(m.clients[0].linked, Some(b(1)));
        let e = m.server_fault(Op::PoolerReconnect, None, &OK);
        assert_eq!(e.gone, vec![b(2)], "only the idle server now");
        assert_eq!(m.closing, BTreeMap::from([(b(1), Op::PoolerReconnect)]));
        assert!(m.key_held(K) && !m.key_held(K7));
        assert_eq!(m.clients[0].linked, Some(b(1)));
        assert!(!m.clients[0].broken && !m.clients[1].broken);
        assert_eq!(m.clients[0].beliefs[&K].lost_to, None);
        assert!(!m.clients[0].beliefs[&K].stale);
        assert_eq!(m.clients[1].beliefs[&K7].lost_to, Some(Op::PoolerReconnect));
        // Inside the transaction the server stays linked: not closed yet.
        let e = real(&mut m, 0, Op::Ping, None, b(1), OK);
        assert!(e.gone.is_empty(), "{e:?}");
        assert!(m.closing.contains_key(&b(1)) && m.backends.contains_key(&b(1)));
        // The COMMIT releases it: closed instead of going back to the pool.
        let e = real(&mut m, 0, Op::Commit, None, b(1), OK);
        assert_eq!(e.gone, vec![b(1)]);
        assert!(e.probes.contains(&(ProbeReason::ServerClosed, K)), "{e:?}");
        assert!(m.closing.is_empty());
        assert!(!m.key_held(K) && m.dead.contains_key(&b(1)));
        assert_eq!(m.clients[0].linked, None);
        let belief = &m.clients[0].beliefs[&K];
        assert!(belief.stale);
        assert_eq!(belief.lost_to, Some(Op::PoolerReconnect));
        // A later statement reported on B1 ran on a backend that had ended.
        let e = m.apply(2, Op::Ping, None, Some(b(1)), &OK);
        assert!(
            e.notes.contains(&Note::RanOnTerminated {
                client: 2,
                ran: b(1)
            }),
            "{:?}",
            e.notes
        );
        // A ROLLBACK releases it the same way; so does an aborted transaction's ROLLBACK.
        let mut r = connected_model(Some(PoolMode::Transaction), 1);
        real(&mut r, 0, Op::Begin, None, b(3), OK);
        r.server_fault(Op::PoolerReconnect, None, &OK);
        real(
            &mut r,
            0,
            Op::FailStatement,
            None,
            b(3),
            Reply::error(code::DIVISION_BY_ZERO),
        );
        assert!(r.backends.contains_key(&b(3)), "aborted, still linked");
        let e = real(&mut r, 0, Op::Rollback, None, b(3), OK);
        assert_eq!(e.gone, vec![b(3)]);
    }

    #[test]
    fn pause_marks_linked_servers_unless_it_timed_out() {
        for (reply, marked) in [(OK, true), (Reply::error(code::TIMEOUT), false)] {
            let mut m = connected_model(Some(PoolMode::Transaction), 2);
            real(&mut m, 0, Op::Begin, None, b(1), OK);
            real(&mut m, 1, Op::Ping, None, b(2), OK);
            let e = m.server_fault(Op::PoolerPause, None, &reply);
            assert_eq!(e.gone, vec![b(2)], "{reply}: the idle server is closed");
            assert_eq!(m.closing.contains_key(&b(1)), marked, "{reply}");
            assert!(m.backends.contains_key(&b(1)));
        }
    }

    #[test]
    fn a_server_pause_marked_is_lost_to_pause_at_release() {
        let mut m = connected_model(Some(PoolMode::Transaction), 1);
        real(&mut m, 0, Op::Begin, None, b(1), OK);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        m.server_fault(Op::PoolerPause, None, &OK);
        assert!(m.closing.contains_key(&b(1)));
        let e = real(&mut m, 0, Op::Commit, None, b(1), OK);
        assert_eq!(e.gone, vec![b(1)]);
        // app.no_lost_lock names the fault: PAUSE closed it, not RECONNECT.
        assert_eq!(m.clients[0].beliefs[&K].lost_to, Some(Op::PoolerPause));
    }

    #[test]
    fn pooler_kill_crash_and_restart_break_every_connected_client() {
        for op in [Op::PoolerKill, Op::PoolerCrash, Op::PoolerRestart] {
            let mut m = Model::new(rules(Some(PoolMode::Transaction), false), 4);
            for c in 0..3 {
                m.connected(c);
            }
            // C1: a lock on B1, released; C2: in a transaction on B2; C3: connected, nothing
            // run; C4: never connected.
            real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
            real(&mut m, 1, Op::Begin, None, b(2), OK);
            let e = m.server_fault(op, None, &OK);
            assert_eq!(e.expected_reply, Some(OK), "{op}");
            assert_eq!(sorted(e.gone), vec![b(1), b(2)], "{op}");
            assert!(m.backends.is_empty() && m.held().is_empty(), "{op}");
            for c in 0..3 {
                assert!(m.clients[c].broken, "{op}: C{}", c + 1);
                assert_eq!(m.clients[c].linked, None, "{op}: C{}", c + 1);
            }
            assert!(!m.clients[3].broken, "{op}: C4 had no connection");
            assert_eq!(m.clients[0].beliefs[&K].lost_to, Some(op));
            // C1's next statement finds its connection closed, whatever the pooler did next.
            let e = m.apply(0, Op::TryLock, Some(K), Some(b(3)), &T);
            assert_eq!(e.expected_reply, Some(Reply::error(code::CLOSED)), "{op}");
            assert!(!m.clients[0].connected && m.clients[0].beliefs.is_empty());
            assert!(!m.clients[0].broken, "heard of it");
            // PgBouncer's fatal 08P01, or the server's 57P01, read first: accepted.
            real(
                &mut m,
                1,
                Op::Ping,
                None,
                b(3),
                Reply::error(code::PROTOCOL_VIOLATION),
            );
            real(
                &mut m,
                2,
                Op::Ping,
                None,
                b(3),
                Reply::error(code::ADMIN_SHUTDOWN),
            );
            assert!(!m.clients[1].connected && !m.clients[1].in_tx, "{op}");
            // Reconnected, C1 runs on a new server; the key is free.
            m.connected(0);
            real(&mut m, 0, Op::TryLock, Some(K), b(3), T);
            // C4 was not broken: its first statement runs.
            real(&mut m, 3, Op::TryLock, Some(K7), b(4), T);
        }
    }

    #[test]
    fn postgres_faults_end_every_backend_and_break_only_clients_on_them() {
        for (op, target) in [
            (Op::PgRestart, None),
            (Op::PgCrash, None),
            (Op::BackendKill, Some(b(1))),
            (Op::Promote, None),
            (Op::LinkCut, None),
        ] {
            let mut m = connected_model(Some(PoolMode::Transaction), 3);
            real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
            real(&mut m, 1, Op::Begin, None, b(2), OK);
            real(&mut m, 1, Op::TryXactLock, Some(K7), b(2), T);
            let e = m.server_fault(op, target, &OK);
            assert_eq!(e.expected_reply, Some(OK), "{op}");
            assert_eq!(sorted(e.gone), vec![b(1), b(2)], "{op}");
            assert!(e.probes.contains(&(ProbeReason::ServerClosed, K)), "{op}");
            assert!(e.probes.contains(&(ProbeReason::ServerClosed, K7)), "{op}");
            assert!(m.backends.is_empty(), "{op}");
            assert_eq!(m.clients[0].beliefs[&K].lost_to, Some(op), "{op}");
            // C1 was not linked: its connection to the pooler lives on.
            assert!(!m.clients[0].broken && !m.clients[2].broken, "{op}");
            real(&mut m, 0, Op::TryLock, Some(K), b(3), T);
            // C2's server ended under its transaction: its next statement fails.
            assert!(m.clients[1].broken, "{op}");
            let e = m.apply(1, Op::Commit, None, Some(b(3)), &OK);
            assert_eq!(e.expected_reply, Some(Reply::error(code::CLOSED)), "{op}");
        }
        // Direct: every client is on its own backend, and every one is broken.
        let mut d = connected_model(None, 2);
        real(&mut d, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut d, 1, Op::Ping, None, b(2), OK);
        let e = d.server_fault(Op::PgRestart, None, &OK);
        assert_eq!(sorted(e.gone), vec![b(1), b(2)]);
        assert!(d.clients.iter().all(|c| c.broken && c.linked.is_none()));
        real(
            &mut d,
            1,
            Op::Ping,
            None,
            b(2),
            Reply::error(code::ADMIN_SHUTDOWN),
        );
    }

    #[test]
    fn faults_that_end_nothing_change_nothing() {
        let mut m = connected_model(Some(PoolMode::Transaction), 3);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 1, Op::Begin, None, b(2), OK);
        real(&mut m, 1, Op::TryXactLock, Some(K7), b(2), T);
        type View = (
            BTreeMap<BackendId, BackendModel>,
            BTreeMap<BackendId, Op>,
            Vec<BackendId>,
            Vec<(bool, bool, Option<BackendId>, BTreeMap<Key, Belief>)>,
        );
        let view = |m: &Model| -> View {
            (
                m.backends.clone(),
                m.closing.clone(),
                m.dead.keys().copied().collect(),
                m.clients
                    .iter()
                    .map(|c| (c.connected, c.broken, c.linked, c.beliefs.clone()))
                    .collect(),
            )
        };
        let before = view(&m);
        for (op, target) in [
            (Op::PoolerReload, None),
            (Op::PoolerFreeze, None),
            (Op::BackendFreeze, Some(b(2))),
            (Op::LinkBlackhole, None),
            (Op::LinkDelay, None),
        ] {
            let e = m.server_fault(op, target, &OK);
            assert_eq!(e.expected_reply, Some(OK), "{op}");
            assert!(
                e.gone.is_empty() && e.probes.is_empty() && e.notes.is_empty(),
                "{op}"
            );
            assert!(view(&m) == before, "{op} changed the model");
        }
        // C2's transaction goes on.
        real(&mut m, 1, Op::Commit, None, b(2), OK);
        // Not a fault of the servers: no effect, no prediction.
        let e = m.server_fault(Op::Terminate, Some(b(1)), &T);
        assert!(e.expected_reply.is_none() && e.gone.is_empty());
        assert!(m.key_held(K));
    }

    #[test]
    fn a_fault_aimed_at_a_gone_backend_expects_false_and_does_nothing() {
        let mut m = connected_model(Some(PoolMode::Transaction), 2);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 1, Op::TryLock, Some(K7), b(2), T);
        m.terminate(b(2), &T);
        for op in [Op::BackendKill, Op::BackendFreeze] {
            // Unknown, already terminated, or no target at all.
            for target in [Some(b(9)), Some(b(2)), None] {
                let e = m.server_fault(op, target, &F);
                assert_eq!(e.expected_reply, Some(F), "{op} {target:?}");
                assert!(e.gone.is_empty(), "{op} {target:?}");
                assert!(m.key_held(K), "{op} {target:?}: B1 lives");
                assert!(m.backends.contains_key(&b(1)));
            }
        }
        // Concurrent: a live target the nemesis found gone (a fault beside it ended it).
        m.lenient = true;
        let e = m.server_fault(Op::BackendKill, Some(b(1)), &F);
        assert_eq!(e.expected_reply, Some(F));
        assert!(e.gone.is_empty() && m.key_held(K));
        // Sequential: a live target is killed, with every other backend.
        m.lenient = false;
        let e = m.server_fault(Op::BackendKill, Some(b(1)), &OK);
        assert_eq!(e.expected_reply, Some(OK));
        assert_eq!(e.gone, vec![b(1)]);
    }

    #[test]
    fn session_mode_reconnect_closes_a_linked_server_at_disconnect() {
        let mut m = connected_model(Some(PoolMode::Session), 2);
        real(&mut m, 0, Op::TryLock, Some(K), b(1), T);
        real(&mut m, 1, Op::Ping, None, b(2), OK);
        // C2 leaves: B2 is reset and back in the pool, idle.
        assert!(m.disconnect(1).gone.is_empty());
        assert_eq!(m.clients[0].linked, Some(b(1)));
        let e = m.server_fault(Op::PoolerReconnect, None, &OK);
        assert_eq!(e.gone, vec![b(2)]);
        assert_eq!(m.closing, BTreeMap::from([(b(1), Op::PoolerReconnect)]));
        // Session mode: every statement keeps the server, so it stays open...
        let e = real(&mut m, 0, Op::TryLock, Some(K7), b(1), T);
        assert!(e.gone.is_empty() && m.key_held(K) && m.key_held(K7));
        assert!(!m.clients[0].broken);
        // ...until the client leaves: closed instead of reset and pooled.
        let d = m.disconnect(0);
        assert_eq!(d.gone, vec![b(1)]);
        assert!(d.probes.contains(&(ProbeReason::ServerClosed, K)), "{d:?}");
        assert!(d.probes.contains(&(ProbeReason::ServerClosed, K7)), "{d:?}");
        assert!(m.closing.is_empty() && m.held().is_empty());
        assert!(m.dead.contains_key(&b(1)));
        // Without the fault the same disconnect resets and pools the server.
        let mut n = connected_model(Some(PoolMode::Session), 1);
        real(&mut n, 0, Op::TryLock, Some(K), b(1), T);
        assert!(n.disconnect(0).gone.is_empty());
        assert!(n.backends.contains_key(&b(1)) && !n.key_held(K));
    }
}
