//! What may happen: a pure, nondeterministic model of PostgreSQL advisory locks, of backends
//! and their transactions, of the pooler's assignment, release, reset and close rules
//! ([`PoolRules`]), of faults ([`crate::vocab::fault`]) and timeouts
//! ([`crate::vocab::timeout`]), as one small step function: [`Case::step`] takes a state and
//! one point of a recorded operation and returns every state it may lead to, or why it
//! cannot happen there. Moves the servers make on their own (a closed backend finishing its
//! exit, the pooler's reset query after it answered, a server retired by `server_lifetime`)
//! are [`Case::internal`]. The search ([`super::search`]) decides the order; the model never
//! looks at time except through those timers, and never guesses which backend a pooler hands
//! out: it checks that the one each operation reports is possible.
//!
//! Identity is `(pid, backend_start)`. The model knows a backend from the first operation it
//! served; a backend it has not heard of holds nothing.

mod assign;
mod exec;
mod faults;
mod looks;
mod spec;
mod statements;
mod why;

pub use exec::{Call, exec};
pub use looks::exclusion;
pub use why::{Why, probe_invariant};

use super::search::Spec;
use crate::history::Observation;
use crate::pooler::{PoolRules, ServerFate};
use crate::vocab::fault::{Breaks, By, Down, Ends, meaning};
use crate::vocab::notify::Note;
use crate::vocab::object::{Carry, Obj, Role, SessionObjects, label_of, slot};
use crate::vocab::reply::code;
use crate::vocab::setting::SessionSettings;
use crate::vocab::timeout::{Effect as Timer, Timeouts};
use crate::vocab::{BackendId, Guc, Key, Op, Reply};
use std::collections::{BTreeMap, BTreeSet};

/// Why a backend ended (what a client that believed it held a lock there lost it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// `pg_terminate_backend`.
    Terminate,
    /// A client's connection ended (a direct session, or a pooled client leaving mid-transaction).
    Disconnect,
    /// A fault of the servers.
    Fault(Op),
    /// A timeout setting ran out.
    Timeout(Timer),
}

impl Cause {
    /// A lock lost to this is `app.no_lost_lock`'s (a fault or a timer), not
    /// `app.no_stale_holder`'s.
    pub fn is_loss(self) -> bool {
        matches!(self, Cause::Fault(_) | Cause::Timeout(_))
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Terminate => f.write_str("terminate"),
            Cause::Disconnect => f.write_str("a client's disconnect"),
            Cause::Fault(op) => write!(f, "{op}"),
            Cause::Timeout(t) => f.write_str(t.describe()),
        }
    }
}

/// Where a backend is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Life {
    #[default]
    Alive,
    /// Its connection was closed (by the pooler, or the client): it will exit, and holds its
    /// locks until it does.
    Closing(Cause),
    /// Exiting or exited: its locks are released; it may still be listed in
    /// `pg_stat_activity` (a look may show it, without locks, or not).
    Exiting(Cause),
    /// Gone from `pg_stat_activity`.
    Gone(Cause),
}

impl Life {
    pub fn is_alive(self) -> bool {
        self == Life::Alive
    }
    /// Holds its locks (alive, or closed and not yet exited).
    pub fn holds(self) -> bool {
        matches!(self, Life::Alive | Life::Closing(_))
    }
    pub fn cause(self) -> Option<Cause> {
        match self {
            Life::Alive => None,
            Life::Closing(c) | Life::Exiting(c) | Life::Gone(c) => Some(c),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tx {
    #[default]
    Idle,
    Open,
    Aborted,
}

/// A statement with two points (a lock call that may wait; one a cancel interrupted) between
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Busy {
    pub entry: u32,
    /// A lock call's key and scope (`true`: session).
    pub lock: Option<(Key, bool)>,
    /// It found the key held and waited.
    pub waited: bool,
    /// Granted (at once, or when the holder released it).
    pub granted: bool,
    /// A cancel reached it.
    pub cancelled: bool,
}

/// One PostgreSQL backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Backend {
    pub life: Life,
    pub session: BTreeMap<Key, u32>,
    pub xact: BTreeMap<Key, u32>,
    pub tx: Tx,
    pub busy: Option<Busy>,
    /// The pooler runs its reset query on it before handing it out again.
    pub reset_pending: bool,
    /// A fault (RECONNECT, PAUSE) marked it to be closed when released.
    pub close_at_release: Option<Cause>,
    /// The pooler still holds a server connection to it (for a backend that has ended: the
    /// pooler may not have noticed, and may hand it to a client, who then gets an error).
    pub pooled: bool,
    /// Session locks a failed lock call was granted (not yet released).
    pub tainted: BTreeSet<Key>,
    /// Lower bounds (ns) of when it became idle and when its transaction began; kept only
    /// when a timeout reads them.
    pub idle_since: u64,
    pub tx_since: u64,
    /// Exiting: the keys it held when it began to exit. PostgreSQL releases them one lock
    /// partition at a time (`LockReleaseAll`), and a look (which reads every partition at
    /// once) between two of them sees some still granted: any subset of these, until the
    /// backend is gone (seen here: an exiting transaction-mode server listed holding one of
    /// its two transaction locks).
    pub releasing: BTreeSet<Key>,
    /// Closed by a RECONNECT or PAUSE because it was idle: unless PgBouncer had already
    /// handed it to a client whose statement had not reached PostgreSQL yet (see `serve`).
    pub closed_idle: bool,
    /// The replica of the pooler that opened it (`PoolRules::replicas`): only that replica's
    /// clients can be handed it.
    pub replica: u8,
    /// Its session's settings (`SET`, `SET LOCAL`): they stay with the backend, whoever the
    /// pooler hands it to next, until a reset that clears them (`DISCARD ALL`, `RESET ALL`).
    pub settings: SessionSettings,
    /// Its session's named objects (`vocab::object`): they stay with the backend, whoever
    /// the pooler hands it to next, until the session ends or a `DISCARD ALL`.
    pub objects: SessionObjects,
    /// It listens on the workload's channel (`LISTEN`; `UNLISTEN` and `DISCARD ALL` end it):
    /// it stays with the backend, whoever the pooler hands it to next, until a reset that
    /// unlistens (`PoolRules::reset_unlistens`).
    pub listening: bool,
    /// A `LISTEN` (`true`) or `UNLISTEN` in its open transaction block: takes effect at
    /// COMMIT, not at ROLLBACK.
    pub listen_at_commit: Option<bool>,
    /// `NOTIFY`s of its open transaction block: sent at COMMIT.
    pub notify_at_commit: Vec<Note>,
    /// `NOTIFY`s committed, to be delivered to every backend listening now.
    pub outbox: Vec<Note>,
    /// Notifications delivered to it (it listened when their `NOTIFY` committed) that no
    /// client has received from it yet.
    pub inbox: BTreeSet<Note>,
}

impl Backend {
    pub fn count(&self, k: Key) -> u32 {
        self.session.get(&k).copied().unwrap_or(0) + self.xact.get(&k).copied().unwrap_or(0)
    }
    pub fn holds(&self, k: Key) -> bool {
        self.life.holds() && self.count(k) > 0
    }
    /// Keys held, at either scope.
    pub fn keys(&self) -> BTreeSet<Key> {
        if !self.life.holds() {
            return BTreeSet::new();
        }
        self.session
            .keys()
            .chain(self.xact.keys())
            .copied()
            .collect()
    }
    /// The key it waits for.
    pub fn waiting(&self) -> Option<Key> {
        self.busy
            .filter(|b| b.waited && !b.granted)
            .and_then(|b| b.lock)
            .map(|(k, _)| k)
    }
}

/// A logical client's connection as the pooler sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Conn {
    #[default]
    Down,
    Up,
    /// Dropped under it: its next statement fails.
    Broken(Cause),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Client {
    pub conn: Conn,
    /// The backend its session (direct, session mode) or open transaction is pinned to.
    pub linked: Option<BackendId>,
    pub idle_since: u64,
    /// Its current protocol-level prepared statement on this connection: the entry of the
    /// `prepare_protocol` that made it (the client executes only its latest).
    pub proto: Option<u32>,
    /// The pooler forgot the client's tracked protocol-level statements: its own `DISCARD
    /// ALL` (PgBouncer 1.24 with `max_prepared_statements`: a Bind of one of them then closes
    /// the client with 08P01 `prepared statement did not exist`; docs/session-state.md).
    pub proto_forgotten: bool,
    /// The values the pooler keeps for this connection of the settings it tracks
    /// (`PoolRules::tracked_settings`), restored on each server it is linked to.
    pub tracked: crate::vocab::setting::Tracked,
}

impl Client {
    /// A new connection (or none): what the pooler kept for the last one is gone.
    fn new_connection(&mut self, conn: Conn) {
        self.conn = conn;
        self.linked = None;
        self.proto = None;
        self.proto_forgotten = false;
        self.tracked = Default::default();
    }
}

/// One possible state of the servers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    pub backends: BTreeMap<BackendId, Backend>,
    pub clients: Vec<Client>,
    /// A fault's span in progress: what is unavailable, and the fault.
    pub down: Option<(Down, Op)>,
    /// The last RECONNECT, PAUSE or drain, and the time by which it had happened (a drain:
    /// its signal's invoke): a server first heard of from an operation invoked before then
    /// may have existed then.
    pub idle_fault: Option<(Op, u64)>,
    /// Failed lock calls (entries) that were granted all the same.
    pub granted_failed: BTreeSet<u32>,
    /// The pooler's server logins failed while this fault held (PostgreSQL or the link down,
    /// PAUSE): it answers clients that need a server with `08P01 server login has been
    /// failing` until it retries (`server_login_retry`; measured, docs/faults.md).
    pub login_failing: Option<Op>,
}

impl State {
    /// The backends holding `k`.
    pub fn holders(&self, k: Key) -> Vec<BackendId> {
        self.backends
            .iter()
            .filter(|(_, b)| b.holds(k))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Every `(backend, key)` held.
    pub fn held(&self) -> BTreeSet<(BackendId, Key)> {
        self.backends
            .iter()
            .flat_map(|(id, b)| b.keys().into_iter().map(move |k| (*id, k)))
            .collect()
    }

    fn available_to(&self, b: BackendId, k: Key) -> bool {
        self.backends.iter().all(|(id, x)| *id == b || !x.holds(k))
    }

    fn linked_client(&self, b: BackendId) -> Option<usize> {
        self.clients.iter().position(|c| c.linked == Some(b))
    }

    fn client(&mut self, c: usize) -> &mut Client {
        if self.clients.len() <= c {
            self.clients.resize(c + 1, Client::default());
        }
        &mut self.clients[c]
    }
}

/// One client statement as recorded.
#[derive(Clone, Debug)]
pub struct Stmt<'e> {
    pub client: usize,
    pub op: Op,
    pub key: Option<Key>,
    /// `set`, `set_local`, `show`: the setting, and the value a set sets.
    pub setting: Option<(Guc, u64)>,
    /// `notify`: who sends it (the client and the step, as its payload says).
    pub note: Option<Note>,
    pub reply: &'e Reply,
    /// The backend that reported itself (in-band, or found by its tag).
    pub served: Option<BackendId>,
    /// Invoke to completion, when it completed.
    pub took: Option<u64>,
}

/// What a recorded operation is, for the model.
#[derive(Clone, Debug)]
pub enum Act<'e> {
    Stmt(Stmt<'e>),
    /// A client opens its connection.
    Connect {
        client: usize,
        reply: &'e Reply,
    },
    Disconnect {
        client: usize,
    },
    /// Disconnect, then connect.
    Reconnect {
        client: usize,
        reply: &'e Reply,
    },
    /// A pinned application-pool connection goes back to the pool as it is.
    Release {
        client: usize,
    },
    Terminate {
        target: BackendId,
        reply: &'e Reply,
    },
    Cancel {
        target: BackendId,
        reply: &'e Reply,
    },
    Fault {
        op: Op,
        target: Option<BackendId>,
        reply: &'e Reply,
    },
    /// A look at `pg_locks JOIN pg_stat_activity` and the pooler's views, or one of them.
    Read {
        obs: &'e Observation,
        part: Part,
    },
    /// The fresh contender tried a key. `after`: the step whose boundary it probes.
    Probe {
        key: Key,
        available: bool,
        after: Option<(Op, &'e Reply)>,
    },
    /// A client received a notification from `backend` (its connection's), sent by `note`
    /// (`None`: a payload or channel that is not the workload's).
    Notified {
        client: usize,
        backend: Option<BackendId>,
        /// The backend of the client's statement before the one `backend` served, on the
        /// same connection: a notification that reached the connection as that statement
        /// ended may be taken by the client only after the next one (the connection's
        /// messages and its notifications come through two channels).
        or: Option<BackendId>,
        note: Option<Note>,
        payload: &'e str,
    },
}

/// Which servers' views a read judges. A sequential look is read while nothing runs, so its
/// views agree; a concurrent sample asks PostgreSQL and PgBouncer at once on two connections,
/// and each answers at its own instant inside the sample's interval (seen here: PgBouncer's
/// `SHOW SERVERS` from before a KILL beside `pg_locks` from after it). PostgreSQL's answer is
/// itself two reads, `pg_stat_activity` and then `pg_locks` (`sql::look`; the earlier join read
/// them in the same order, docs/checker.md, "A look is two reads"), each consistent in itself:
/// seen here, a backend listed by the first whose locks the second shows released by its exit,
/// beside a lock granted after the first read. So a sample is three reads with one interval,
/// PostgreSQL's two in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every view at one instant (a sequential look).
    All,
    /// PostgreSQL's two reads at one instant.
    Postgres,
    /// `pg_stat_activity`: which backends are listed.
    Activity,
    /// `pg_locks`: the listed backends' locks, read after [`Part::Activity`].
    Locks,
    /// The pooler's views.
    Pooler,
}

impl Part {
    /// It judges PostgreSQL's rows (`pg_locks`, `pg_stat_activity`).
    pub fn postgres(self) -> bool {
        self != Part::Pooler
    }
    /// It judges which backends `pg_stat_activity` lists.
    pub fn activity(self) -> bool {
        matches!(self, Part::All | Part::Postgres | Part::Activity)
    }
    /// It judges the listed backends' locks (`pg_locks`).
    pub fn locks(self) -> bool {
        matches!(self, Part::All | Part::Postgres | Part::Locks)
    }
    /// It judges the pooler's rows (`SHOW SERVERS`).
    pub fn pooler(self) -> bool {
        matches!(self, Part::All | Part::Pooler)
    }
}

/// One recorded operation with its interval.
#[derive(Clone, Debug)]
pub struct Entry<'e> {
    pub act: Act<'e>,
    /// The case step it belongs to.
    pub step: Option<usize>,
    /// Invoke time (ns since the run started).
    pub inv: u64,
    /// Completion time, when it completed.
    pub done: Option<u64>,
    /// Its outcome is unknown (no reply in time): it may take effect at any point after its
    /// invoke, or never.
    pub unknown: bool,
    /// Unknown, and its client's connection was closed after it was invoked: it may yet run
    /// on the connection left behind (the pooler hands that connection a server, and closes
    /// the server when it finds the client gone).
    pub orphaned: bool,
}

/// A case's operations and the rules they are judged by: the [`Spec`] the search runs.
pub struct Case<'e> {
    pub rules: PoolRules,
    pub timeouts: Timeouts,
    /// When the case began (every backend of a case is born after it).
    pub case_start: u64,
    pub entries: Vec<Entry<'e>>,
    /// Every backend some look of the case lists. A statement that got no identity back (a
    /// timeout, an error before it) may have run on one of them that no reply names, and
    /// taken a lock there the looks then show (seen: a try_lock that timed out waiting for
    /// a pooled server and was granted on the server a terminate made room for).
    pub listed: BTreeSet<BackendId>,
    /// Per entry: the entries the servers' clock puts before it (`entries::server_order`;
    /// empty when judged by client time alone).
    pub after: Vec<Vec<usize>>,
    /// Per entry: the unknown statements its reply shows over (`entries::retired_by`).
    pub retires: Vec<Vec<usize>>,
}

type Out = Result<Vec<State>, Why>;

impl<'e> Case<'e> {
    pub fn initial(&self, clients: usize) -> State {
        State {
            clients: vec![Client::default(); clients],
            ..Default::default()
        }
    }

    fn pooled(&self) -> bool {
        self.rules.is_pooled()
    }

    fn timer(&self, t: Timer) -> Option<u64> {
        self.timeouts
            .get(&t)
            .copied()
            .filter(|ms| *ms > 0)
            .map(|ms| ms * 1_000_000)
    }

    /// Whether idle and transaction times are kept (a timeout reads them).
    fn keeps_times(&self) -> bool {
        !self.timeouts.values().all(|v| *v == 0)
    }

    /// Whether fault `op` drains the pooler before its effect, as this pooler does
    /// ([`Meaning::drains`](crate::vocab::fault::Meaning::drains)): then it has a point more.
    pub(super) fn drains(&self, op: Op) -> bool {
        self.rules.restart_drains && meaning(op).is_some_and(|m| m.drains)
    }

    /// How many points an entry has.
    pub fn points_of(&self, e: &Entry) -> u8 {
        match &e.act {
            Act::Stmt(s) => {
                let waits = s.op.waits_for_lock();
                if e.unknown {
                    return if waits { 2 } else { 1 };
                }
                let interrupted = s.reply.code() == Some(code::QUERY_CANCELED);
                let answered = matches!(s.reply, Reply::Ok)
                    || s.reply.code() == Some(code::LOCK_NOT_AVAILABLE);
                // A transaction lock taken outside a block is held from its call to the end
                // of its statement (the implicit transaction's commit), after the identity row
                // was sent: a look or another backend's call can meet it in between.
                let held_for_statement =
                    s.op == Op::TryXactLock && matches!(s.reply, Reply::Bool { .. });
                // A statement that releases a scope's locks does so one lock partition at a
                // time: a look between its two points may see some of them still held
                // (`Case::releasing_one`).
                let releases_all =
                    s.op.releases_all() && matches!(s.reply, Reply::Ok) && s.served.is_some();
                if interrupted || (waits && answered) || held_for_statement || releases_all {
                    2
                } else {
                    1
                }
            }
            Act::Reconnect { .. } => 2,
            Act::Terminate { reply, .. } if **reply == (Reply::Bool { value: true }) => 2,
            Act::Fault { op, reply, .. } => {
                let target_gone = **reply == (Reply::Bool { value: false });
                if !target_gone && meaning(*op).is_some_and(|m| m.down.is_some()) {
                    2 + self.drains(*op) as u8
                } else {
                    1
                }
            }
            _ => 1,
        }
    }

    // ----- notifications -----

    /// A client received notification `note` from `backend`: it was delivered there (the
    /// backend listened when its NOTIFY committed), and is passed on once.
    fn notified(
        &self,
        s: &State,
        (backend, or): (Option<BackendId>, Option<BackendId>),
        note: Option<Note>,
        payload: &str,
    ) -> Out {
        let why = || Why::Notification {
            backend,
            payload: payload.to_string(),
        };
        let Some(n) = note else { return Err(why()) };
        let from: Vec<BackendId> = s
            .backends
            .iter()
            .filter(|(id, x)| {
                (backend.is_none_or(|b| b == **id) || or == Some(**id)) && x.inbox.contains(&n)
            })
            .map(|(id, _)| *id)
            .collect();
        if from.is_empty() {
            return Err(why());
        }
        Ok(from
            .into_iter()
            .map(|b| {
                let mut s2 = s.clone();
                s2.backends.get_mut(&b).unwrap().inbox.remove(&n);
                s2
            })
            .collect())
    }
}

/// A placeholder for a backend the history cannot name (negative pid, by entry).
fn anonymous(e: usize) -> BackendId {
    BackendId {
        pid: -1 - e as i32,
        start_us: 0,
    }
}

fn is_anonymous(b: BackendId) -> bool {
    b.pid < 0
}

fn bump(m: &mut BTreeMap<Key, u32>, k: Key) {
    *m.entry(k).or_insert(0) += 1;
}

/// One fewer; true when it reached zero.
fn unbump(m: &mut BTreeMap<Key, u32>, k: Key) -> bool {
    match m.get_mut(&k) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            m.remove(&k);
            true
        }
        None => false,
    }
}

/// An error inside a transaction aborts it: its transaction locks go at once (observed on
/// 18.6). Returns the keys released.
fn abort(x: &mut Backend) -> Vec<Key> {
    if x.tx == Tx::Open {
        x.tx = Tx::Aborted;
        let ks: Vec<Key> = x.xact.keys().copied().collect();
        x.xact.clear();
        return ks;
    }
    vec![]
}

/// The pooler closes its connection to `x`.
fn close(x: &mut Backend, cause: Cause) {
    if x.life.is_alive() {
        x.life = Life::Closing(cause);
    }
    x.pooled = false;
    x.close_at_release = None;
}

/// An exiting backend has released key `k` (at every scope) and still holds the others.
fn release_one(x: &mut Backend, k: Key) {
    x.session.remove(&k);
    x.xact.remove(&k);
    x.tainted.remove(&k);
}

/// The backend exits: every lock is released. Returns the keys released.
fn exit(x: &mut Backend, cause: Cause) -> Vec<Key> {
    let ks: Vec<Key> = x.keys().into_iter().collect();
    x.releasing = ks.iter().copied().collect();
    x.closed_idle = false;
    x.session.clear();
    x.xact.clear();
    x.tainted.clear();
    x.tx = Tx::Idle;
    x.busy = None;
    x.reset_pending = false;
    x.close_at_release = None;
    x.life = Life::Exiting(cause);
    ks
}

/// After keys were released: each key now free goes to one of the backends waiting for it
/// (PostgreSQL grants a waiter as the holder releases: a successor per waiter).
/// Committed `NOTIFY`s reach every backend listening at that moment (the sender's own too).
fn deliver(s: &mut State) {
    let notes: Vec<Note> = s
        .backends
        .values_mut()
        .flat_map(|x| std::mem::take(&mut x.outbox))
        .collect();
    if notes.is_empty() {
        return;
    }
    for x in s.backends.values_mut() {
        if x.listening && x.life.is_alive() {
            x.inbox.extend(notes.iter().copied());
        }
    }
}

fn wake_all(mut s: State, released: &[Key]) -> Vec<State> {
    deliver(&mut s);
    let mut states = vec![s];
    let mut ks: Vec<Key> = released.to_vec();
    ks.sort();
    ks.dedup();
    for k in ks {
        states = states.into_iter().flat_map(|s| wake(s, k)).collect();
    }
    states
}

fn wake(s: State, k: Key) -> Vec<State> {
    if !s.holders(k).is_empty() {
        return vec![s];
    }
    let waiters: Vec<BackendId> = s
        .backends
        .iter()
        // A closing backend is still in PostgreSQL's queue: blocked on a lock, it does not
        // read the close (`client_connection_check_interval` is 0) until it is granted.
        .filter(|(_, x)| x.life.holds() && x.waiting() == Some(k))
        .map(|(id, _)| *id)
        .collect();
    if waiters.is_empty() {
        return vec![s];
    }
    waiters
        .into_iter()
        .map(|w| {
            let mut s2 = s.clone();
            let x = s2.backends.get_mut(&w).unwrap();
            let busy = x.busy.as_mut().unwrap();
            busy.granted = true;
            let session = busy.lock.is_some_and(|l| l.1);
            bump(if session { &mut x.session } else { &mut x.xact }, k);
            s2
        })
        .collect()
}

#[cfg(test)]
mod abort_on_disconnect_tests {
    use super::*;
    use crate::pooler::PoolMode;

    /// A session-mode pooler without a releasing reset, and a client that leaves inside a
    /// transaction holding a session lock (1) and a transaction lock (2).
    fn leave_in_tx(abort_on_disconnect: bool) -> (Case<'static>, State) {
        let case = Case {
            rules: PoolRules {
                mode: Some(PoolMode::Session),
                pool_size: 1,
                reset_releases_locks: false,
                abort_on_disconnect,
                ..PoolRules::direct()
            },
            timeouts: Timeouts::new(),
            case_start: 0,
            entries: vec![],
            listed: BTreeSet::new(),
            after: vec![],
            retires: vec![],
        };
        let b = BackendId {
            pid: 7,
            start_us: 1,
        };
        let mut s = case.initial(1);
        s.backends.insert(
            b,
            Backend {
                pooled: true,
                tx: Tx::Open,
                session: BTreeMap::from([(Key::Big(1), 1)]),
                xact: BTreeMap::from([(Key::Big(2), 1)]),
                ..Default::default()
            },
        );
        s.clients[0].conn = Conn::Up;
        s.clients[0].linked = Some(b);
        let gone = case.client_gone(&s, 0, Cause::Disconnect);
        (case, gone)
    }

    #[test]
    fn a_pooler_that_aborts_keeps_the_server_and_its_session_locks() {
        let (case, gone) = leave_in_tx(true);
        let b = BackendId {
            pid: 7,
            start_us: 1,
        };
        let x = &gone.backends[&b];
        assert!(
            x.life.is_alive() && x.reset_pending,
            "released, reset pending: {x:?}"
        );
        let after: Vec<State> = case
            .internal(&gone, 0)
            .into_iter()
            .filter(|s| !s.backends[&b].reset_pending)
            .collect();
        assert_eq!(after.len(), 1);
        let y = &after[0].backends[&b];
        assert_eq!(y.tx, Tx::Idle, "ABORT ended the transaction");
        assert!(y.xact.is_empty(), "and released its transaction lock");
        assert_eq!(
            y.count(Key::Big(1)),
            1,
            "the session lock stays for the next client"
        );
        // PgBouncer's rule: the server is closed, and everything goes with its backend.
        let (_, closed) = leave_in_tx(false);
        assert_eq!(closed.backends[&b].life, Life::Closing(Cause::Disconnect));
    }

    /// A client leaving with a notification delivered to its server and not yet received
    /// may find the server closed by a pooler that closes servers with a reply in flight
    /// (PgBouncer 1.24.1), else reset and released; with nothing in flight, only the reset.
    #[test]
    fn a_server_left_with_a_reply_in_flight_may_be_closed() {
        let b = BackendId {
            pid: 7,
            start_us: 1,
        };
        let case = |closes: bool| Case {
            rules: PoolRules {
                mode: Some(PoolMode::Session),
                pool_size: 1,
                reset_releases_locks: true,
                closes_server_in_flight: closes,
                ..PoolRules::direct()
            },
            timeouts: Timeouts::new(),
            case_start: 0,
            entries: vec![],
            listed: BTreeSet::new(),
            after: vec![],
            retires: vec![],
        };
        let mut s = case(true).initial(1);
        s.backends.insert(
            b,
            Backend {
                pooled: true,
                listening: true,
                ..Default::default()
            },
        );
        s.clients[0].conn = Conn::Up;
        s.clients[0].linked = Some(b);
        let lives = |c: &Case, s: &State| -> Vec<Life> {
            c.client_leaves(s, 0, c.note_in_flight(s, 0))
                .iter()
                .map(|x| x.backends[&b].life)
                .collect()
        };
        assert_eq!(lives(&case(true), &s), [Life::Alive], "nothing in flight");
        s.backends.get_mut(&b).unwrap().inbox.insert((1, 3));
        assert_eq!(
            lives(&case(true), &s),
            [Life::Alive, Life::Closing(Cause::Disconnect)]
        );
        assert_eq!(
            lives(&case(false), &s),
            [Life::Alive],
            "a pooler that resets"
        );
    }
}
