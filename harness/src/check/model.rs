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
            Cause::Timeout(t) => write!(f, "{}", timer_name(*t)),
        }
    }
}

fn timer_name(t: Timer) -> &'static str {
    crate::vocab::timeout::TIMEOUTS
        .iter()
        .find(|x| x.effect == t)
        .map(|x| x.name)
        .unwrap_or("a timeout")
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
    /// The last RECONNECT or PAUSE, and the time by which it had happened: a server first
    /// heard of from an operation invoked before then may have existed then.
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
        note: Option<Note>,
        payload: &'e str,
    },
}

/// Which servers' views a read judges. A sequential look is read while nothing runs, so its
/// views agree; a concurrent sample asks PostgreSQL and PgBouncer at once on two connections,
/// and each answers at its own instant inside the sample's interval (seen here: PgBouncer's
/// `SHOW SERVERS` from before a KILL beside `pg_locks` from after it). Each is one atomic
/// read of its own server, so a sample is two reads with the same interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    All,
    Postgres,
    Pooler,
}

impl Part {
    /// It judges PostgreSQL's rows (`pg_locks`, `pg_stat_activity`).
    pub fn postgres(self) -> bool {
        self != Part::Pooler
    }
    /// It judges the pooler's rows (`SHOW SERVERS`).
    pub fn pooler(self) -> bool {
        self != Part::Postgres
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

/// Why a point cannot be placed in a state.
#[derive(Clone, Debug, PartialEq)]
pub enum Why {
    /// The reply differs from what PostgreSQL would answer on that backend. `holders`: other
    /// backends holding the key (a grant despite them breaks exclusion).
    Reply {
        predicted: Reply,
        backend: BackendId,
        holders: Vec<BackendId>,
    },
    /// The client's session or transaction is pinned to another backend.
    Pinned { pinned: BackendId, ran: BackendId },
    /// The backend is linked to another client (its session or open transaction).
    GivenLinked { ran: BackendId, owner: usize },
    /// The backend had ended.
    Ended { ran: BackendId, life: Life },
    /// The backend was running another statement.
    Busy { ran: BackendId },
    /// The pooler had not yet run its reset query on the server.
    ResetPending { ran: BackendId },
    /// A new direct connection reported a backend already seen.
    NotNew { ran: BackendId },
    /// The pooler would have needed more servers than its pool has.
    PoolFull { ran: BackendId, size: usize },
    /// A server of another replica of the pooler (each replica hands out its own servers).
    OtherReplica {
        ran: BackendId,
        replica: usize,
        client: usize,
        wanted: usize,
    },
    /// Served while a fault made that impossible.
    Unavailable { down: Down, fault: Op },
    /// The client's connection had been dropped, yet the statement was answered.
    Broken { cause: Cause },
    /// The connection was ended by the server, and nothing could have ended it.
    EndUnexplained,
    /// A lock call returned as granted, but the key was never free for it.
    NotGranted { key: Key, holders: Vec<BackendId> },
    /// A lock call timed out though the key was free when it asked.
    TimedOutFree { key: Key },
    /// A statement was cancelled (57014) with no cancel and no statement_timeout to do it.
    CancelUnexplained,
    /// A signal or a fault answered as if its target were (or were not) there.
    Target {
        op: Op,
        target: BackendId,
        visible: bool,
    },
    /// A connection was accepted while the pooler or PostgreSQL was down.
    Accepted { down: Down, fault: Op },
    /// A look showed other locks on a backend than the state holds.
    Rows {
        backend: BackendId,
        model: Vec<Key>,
        seen: Vec<Key>,
    },
    /// A look showed a backend waiting for another key than the state says.
    Waiting {
        backend: BackendId,
        model: Option<Key>,
        seen: Option<Key>,
    },
    /// A look showed a backend that had ended and left.
    StillThere { backend: BackendId, cause: Cause },
    /// A look lacked a backend that is alive.
    Missing { backend: BackendId },
    /// The pooler lists a server it dropped with all the others (a kill, crash or restart).
    Listed { backend: BackendId, fault: Op },
    /// A look showed one key held by several backends.
    Exclusion { key: Key, backends: Vec<BackendId> },
    /// The contender's probe disagreed: `available` is what it found.
    Probe {
        key: Key,
        available: bool,
        holders: Vec<BackendId>,
        after: Option<Op>,
    },
    /// A notification came from a backend that was not listening when its `NOTIFY`
    /// committed (or had already passed it on).
    Notification {
        backend: Option<BackendId>,
        payload: String,
    },
}

fn pids(bs: &[BackendId]) -> String {
    if bs.is_empty() {
        return "no backend".into();
    }
    bs.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

fn keys(ks: &[Key]) -> String {
    if ks.is_empty() {
        return "nothing".into();
    }
    ks.iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Why {
    /// The `pg.*` invariant a point that cannot be placed for this reason violates.
    pub fn invariant(&self) -> &'static str {
        match self {
            Why::Reply { predicted, .. } if self.grant_despite_holder() => {
                let _ = predicted;
                "pg.exclusion"
            }
            Why::NotGranted { .. } => "pg.exclusion",
            Why::Exclusion { .. } => "pg.exclusion",
            Why::Rows { .. } | Why::Waiting { .. } | Why::Missing { .. } | Why::Listed { .. } => {
                "pg.locks_match_model"
            }
            Why::StillThere {
                cause: Cause::Terminate,
                ..
            } => "pg.terminate_releases",
            Why::StillThere { .. } => "pg.locks_match_model",
            Why::Probe {
                available, after, ..
            } => probe_invariant(*available, *after),
            // A named object's reply that no order explains (its label, or the kind's
            // missing or duplicate error).
            Why::Reply { predicted, .. } if crate::vocab::object::predicts_object(predicted) => {
                "pg.objects_match"
            }
            // A setting read back that no order explains.
            Why::Reply {
                predicted: Reply::Text { .. },
                ..
            } => "pg.show_matches",
            Why::Notification { .. } => "pg.notification_matches",
            _ => "pg.replies_match_model",
        }
    }

    fn grant_despite_holder(&self) -> bool {
        matches!(self, Why::Reply { predicted, holders, .. }
            if !holders.is_empty() && matches!(predicted, Reply::Bool { value: false } | Reply::Error { .. }))
    }

    /// The model's side, in words.
    pub fn describe(&self) -> String {
        match self {
            Why::Reply {
                predicted,
                backend,
                holders,
            } => {
                if holders.is_empty() {
                    format!("the model predicts {predicted} on {backend}")
                } else {
                    format!(
                        "the model predicts {predicted} on {backend}: {} held the key",
                        pids(holders)
                    )
                }
            }
            Why::Pinned { pinned, ran } => {
                format!("the client is pinned to {pinned} but its statement ran on {ran}")
            }
            Why::GivenLinked { ran, owner } => {
                format!(
                    "{ran} is linked to C{} (its session or transaction)",
                    owner + 1
                )
            }
            Why::Ended { ran, life } => format!(
                "{ran} had ended ({})",
                life.cause().map(|c| c.to_string()).unwrap_or_default()
            ),
            Why::Busy { ran } => format!("{ran} was running another statement"),
            Why::ResetPending { ran } => {
                format!("the pooler had not yet run its reset query on {ran}")
            }
            Why::NotNew { ran } => {
                format!("a new direct connection cannot be the earlier backend {ran}")
            }
            Why::PoolFull { ran, size } => {
                format!("{ran} would be server {} of a pool of {size}", size + 1)
            }
            Why::OtherReplica {
                ran,
                replica,
                client,
                wanted,
            } => format!(
                "{ran} is a server of pooler replica {} and C{} connects to replica {}",
                replica + 1,
                client + 1,
                wanted + 1
            ),
            Why::Unavailable { down, fault } => {
                format!("it was served while {fault} made that impossible ({down:?})")
            }
            Why::Broken { cause } => format!(
                "the client's connection had been dropped ({cause}): the statement should have failed"
            ),
            Why::EndUnexplained => {
                "nothing (no fault, terminate or timeout) could have ended its connection".into()
            }
            Why::NotGranted { key, holders } => format!(
                "key {key} was never free for it: {} held it throughout",
                pids(holders)
            ),
            Why::TimedOutFree { key } => {
                format!("key {key} was free when it asked, so it would have been granted at once")
            }
            Why::CancelUnexplained => {
                "no cancel reached it and no statement_timeout applies".into()
            }
            Why::Target {
                op,
                target,
                visible,
            } => {
                if *visible {
                    format!("{op} found no {target}, but the model has it there")
                } else {
                    format!("{op} found {target}, but it had left")
                }
            }
            Why::Accepted { down, fault } => {
                format!("a connection was accepted while {fault} held ({down:?})")
            }
            Why::Rows {
                backend,
                model,
                seen,
            } => format!(
                "pg_locks shows {backend} holding {}, the model {}",
                keys(seen),
                keys(model)
            ),
            Why::Waiting {
                backend,
                model,
                seen,
            } => format!(
                "pg_locks shows {backend} waiting for {}, the model {}",
                seen.map(|k| k.to_string()).unwrap_or("nothing".into()),
                model.map(|k| k.to_string()).unwrap_or("nothing".into())
            ),
            Why::StillThere { backend, cause } => {
                format!("{backend} is still in pg_stat_activity after {cause} ended it")
            }
            Why::Missing { backend } => {
                format!("{backend} is missing from pg_stat_activity, and nothing ended it")
            }
            Why::Listed { backend, fault } => format!(
                "SHOW SERVERS lists {backend}, which {fault} dropped with every other server"
            ),
            Why::Exclusion { key, backends } => format!(
                "key {key} granted to {} backends at once: {}",
                backends.len(),
                pids(backends)
            ),
            Why::Notification { backend, payload } => match backend {
                Some(b) => format!(
                    "{b} was not listening on {} when the NOTIFY of {payload:?} committed, or had passed it on already",
                    crate::vocab::notify::CHANNEL
                ),
                None => format!(
                    "no backend was listening on {} when the NOTIFY of {payload:?} committed",
                    crate::vocab::notify::CHANNEL
                ),
            },
            Why::Probe {
                key,
                available,
                holders,
                after,
            } => format!(
                "{}a fresh contender {} key {} (expected {}{})",
                after.map(|o| format!("after {o}: ")).unwrap_or_default(),
                if *available {
                    "could take"
                } else {
                    "could not take"
                },
                key,
                if holders.is_empty() {
                    "available"
                } else {
                    "held"
                },
                if holders.is_empty() {
                    String::new()
                } else {
                    format!(" by {}", pids(holders))
                }
            ),
        }
    }
}

/// Which invariant a wrong probe answer breaks, by the boundary it probes: one row per op.
pub fn probe_invariant(available: bool, after: Option<Op>) -> &'static str {
    match (available, after) {
        // The model holds the key, the contender took it.
        (true, Some(Op::Rollback)) => "pg.session_survives_rollback",
        (true, Some(Op::Unlock)) => "pg.stacking",
        (true, Some(Op::Cancel)) => "pg.cancel_keeps_session_locks",
        // The model has it free, the contender could not take it.
        (false, Some(Op::Commit | Op::Rollback | Op::FailStatement)) => "pg.xact_released_at_end",
        (false, Some(Op::Terminate)) => "pg.terminate_releases",
        _ => "pg.locks_match_model",
    }
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
                if interrupted || (waits && answered) {
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
                    2
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
        backend: Option<BackendId>,
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
            .filter(|(id, x)| backend.is_none_or(|b| b == **id) && x.inbox.contains(&n))
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

    // ----- statements -----

    fn stmt(&self, s: &State, e: usize, st: &Stmt, point: u8, points: u8) -> Out {
        let entry = &self.entries[e];
        if entry.unknown {
            return self.stmt_unknown(s, e, st, point, points);
        }
        if st.reply.is_closed() {
            return Ok(self.closed(s, e, st));
        }
        if points == 2 && point == 1 {
            return self.stmt_end(s, e, st);
        }
        let c = st.client;
        let mut s = s.clone();
        match s.client(c).conn {
            Conn::Broken(cause) => {
                return if st.reply.ended_by_server() {
                    Ok(vec![self.client_gone(&s, c, Cause::Disconnect)])
                } else {
                    Err(Why::Broken { cause })
                };
            }
            Conn::Down if st.reply.is_error() && st.served.is_none() => {
                // The connect before it failed (the reply is the refusal).
                return Ok(vec![s]);
            }
            Conn::Down => {
                s.clients[c].conn = Conn::Up;
                s.clients[c].linked = None;
            }
            Conn::Up => {}
        }
        if st.reply.ended_by_server() {
            return self.ended(&s, e, st);
        }
        let linking = s.clients[c].linked.is_none();
        let cands = self.assign(&s, e, st)?;
        let mut out = vec![];
        let mut err = None;
        for (mut s2, b) in cands {
            if linking {
                self.restore_tracked(&mut s2, c, b);
            }
            let r = if points == 2 {
                self.stmt_start(s2, e, st, b)
            } else {
                self.stmt_once(s2, e, st, b)
            };
            match r {
                Ok(v) => out.extend(v),
                Err(w) => err = Some(w),
            }
        }
        // The client keeps the statement it prepared (a failed prepare leaves its last one).
        if st.op == Op::PrepareProtocol && *st.reply == Reply::Ok {
            for s2 in &mut out {
                s2.client(c).proto = Some(e as u32);
                s2.client(c).proto_forgotten = false;
            }
        }
        // A pooler that tracks the client's statements forgets them at its DISCARD ALL.
        if st.op == Op::DiscardAll && *st.reply == Reply::Ok && self.rules.tracks_prepared {
            for s2 in &mut out {
                let cl = s2.client(c);
                cl.proto_forgotten = cl.proto.is_some();
            }
        }
        if out.is_empty() {
            Err(err.unwrap_or(Why::EndUnexplained))
        } else {
            Ok(out)
        }
    }

    /// The backends statement `st` may run on, with the state after the pooler assigned it.
    fn assign(&self, s: &State, e: usize, st: &Stmt) -> Result<Vec<(State, BackendId)>, Why> {
        let c = st.client;
        let entry = &self.entries[e];
        if let Some(l) = s.clients[c].linked {
            if let Some(ran) = st.served
                && ran != l
            {
                return Err(Why::Pinned { pinned: l, ran });
            }
            if let Some((Down::Frozen, fault)) = s.down {
                return Err(Why::Unavailable {
                    down: Down::Frozen,
                    fault,
                });
            }
            return Ok(vec![(s.clone(), l)]);
        }
        // It needs a server (a pooled one, a direct connection's backend, a pool connection).
        if let Some((down, fault)) = s.down {
            let blocks = match down {
                Down::Pooler | Down::Paused => self.pooled(),
                // A frozen pooler or link stops pooled clients; a frozen PostgreSQL host (a
                // fault that needs no pooler) stops every client.
                Down::Frozen => self.pooled() || meaning(fault).is_some_and(|m| !m.needs_pooler),
                Down::Postgres => true,
            };
            if blocks {
                return Err(Why::Unavailable { down, fault });
            }
        }
        let Some(b) = st.served else {
            // No identity (DISCARD ALL's tag was overwritten, or an error before it): any
            // server the pooler could have handed out, a new one a look lists, or one the
            // model has not heard of.
            let mut out: Vec<(State, BackendId)> = s
                .backends
                .iter()
                .filter(|(id, x)| self.assignable(s, c, **id, x).is_ok())
                .map(|(id, _)| (s.clone(), *id))
                .collect();
            for b in self.listed.iter().filter(|b| !s.backends.contains_key(b)) {
                if let Ok(v) = self.new_server(s, entry, *b, c) {
                    out.extend(v);
                }
            }
            out.push((s.clone(), anonymous(e)));
            return Ok(out);
        };
        match s.backends.get(&b) {
            // PgBouncer hands a released server to a waiting client in one loop and the
            // client's query reaches PostgreSQL later: a RECONNECT or PAUSE between the two
            // found it linked, not idle (seen here: a statement invoked before a RECONNECT
            // answered on a server the model had closed as idle). It is closed at release.
            Some(x)
                if self.pooled()
                    && x.closed_idle
                    && matches!(s.idle_fault, Some((f, t))
                        if entry.inv < t && x.life == Life::Closing(Cause::Fault(f))) =>
            {
                let mut s2 = s.clone();
                let y = s2.backends.get_mut(&b).unwrap();
                y.closed_idle = false;
                y.pooled = true;
                y.close_at_release = y.life.cause();
                y.life = Life::Alive;
                let y = y.clone();
                self.assignable(&s2, c, b, &y)?;
                Ok(vec![(s2, b)])
            }
            Some(x) => {
                self.assignable(s, c, b, x)?;
                if !self.pooled() && self.rules.app_pin.is_none() {
                    return Err(Why::NotNew { ran: b });
                }
                Ok(vec![(s.clone(), b)])
            }
            None => self.new_server(s, entry, b, c),
        }
    }

    /// A server the model has not heard of, opened for `entry`'s statement by the replica of
    /// the pooler client `c` connects to.
    fn new_server(
        &self,
        s: &State,
        entry: &Entry,
        b: BackendId,
        c: usize,
    ) -> Result<Vec<(State, BackendId)>, Why> {
        let replica = self.rules.replica_of(c) as u8;
        {
            {
                let mut s2 = s.clone();
                if let Some(fault) = s2.login_failing {
                    return Err(Why::Unavailable {
                        down: Down::Postgres,
                        fault,
                    });
                }
                s2.backends.insert(
                    b,
                    Backend {
                        pooled: self.pooled(),
                        idle_since: if self.keeps_times() { entry.inv } else { 0 },
                        replica,
                        ..Default::default()
                    },
                );
                if self.pooled() {
                    // Servers marked to close at release (RECONNECT) do not count: PgBouncer
                    // opens a new one beside them (seen: a third server with a pool of 2).
                    let size = s2
                        .backends
                        .values()
                        .filter(|x| {
                            x.pooled
                                && x.replica == replica
                                && x.life.is_alive()
                                && x.close_at_release.is_none()
                        })
                        .count();
                    if size > self.rules.pool_size {
                        return Err(Why::PoolFull {
                            ran: b,
                            size: self.rules.pool_size,
                        });
                    }
                }
                let mut out = vec![];
                // A server logging in (or idle, unheard of) when a RECONNECT or PAUSE came is
                // closed when released.
                if self.pooled()
                    && let Some((fault, t)) = s.idle_fault
                    && entry.inv < t
                {
                    let mut marked = s2.clone();
                    marked.backends.get_mut(&b).unwrap().close_at_release =
                        Some(Cause::Fault(fault));
                    out.push((marked, b));
                }
                out.push((s2, b));
                Ok(out)
            }
        }
    }

    fn assignable(&self, s: &State, c: usize, b: BackendId, x: &Backend) -> Result<(), Why> {
        if !x.life.is_alive() {
            return Err(Why::Ended {
                ran: b,
                life: x.life,
            });
        }
        if let Some(owner) = s.linked_client(b).filter(|o| *o != c) {
            return Err(Why::GivenLinked { ran: b, owner });
        }
        if self.pooled() && usize::from(x.replica) != self.rules.replica_of(c) {
            return Err(Why::OtherReplica {
                ran: b,
                replica: x.replica.into(),
                client: c,
                wanted: self.rules.replica_of(c),
            });
        }
        if x.busy.is_some() {
            return Err(Why::Busy { ran: b });
        }
        if x.reset_pending {
            return Err(Why::ResetPending { ran: b });
        }
        if self.pooled() && !x.pooled {
            return Err(Why::Ended {
                ran: b,
                life: x.life,
            });
        }
        Ok(())
    }

    fn check_runnable(&self, s: &State, b: BackendId) -> Result<(), Why> {
        let Some(x) = s.backends.get(&b) else {
            return Ok(());
        };
        if !x.life.is_alive() {
            return Err(Why::Ended {
                ran: b,
                life: x.life,
            });
        }
        if x.busy.is_some() {
            return Err(Why::Busy { ran: b });
        }
        Ok(())
    }

    /// An object op's [`Call`] in state `s`.
    fn call(&self, s: &State, e: usize, st: &Stmt) -> Call {
        Call {
            client: st.client,
            current: s.clients.get(st.client).and_then(|c| c.proto),
            new: e as u32,
            tracks: self.rules.tracks_prepared,
            forgotten: s.clients.get(st.client).is_some_and(|c| c.proto_forgotten),
            notify_contended: st.reply.code() == Some(code::LOCK_NOT_AVAILABLE)
                && self.notify_contended(e, st.client),
        }
    }

    /// Whether another client's statement that can commit notifications (`notify`, or a
    /// `commit`, whose block may hold one) overlaps entry `e` in real time: its commit may
    /// hold the lock PostgreSQL serialises NOTIFY commits with while `e` commits its own.
    fn notify_contended(&self, e: usize, client: usize) -> bool {
        let me = &self.entries[e];
        let end = me.done.unwrap_or(u64::MAX);
        self.entries.iter().enumerate().any(|(i, o)| {
            i != e
                && matches!(&o.act, Act::Stmt(x) if x.client != client
                    && matches!(x.op, Op::Notify | Op::Commit))
                && o.inv <= end
                && o.done.unwrap_or(u64::MAX) >= me.inv
        })
    }

    /// A one-point statement on backend `b`.
    fn stmt_once(&self, mut s: State, e: usize, st: &Stmt, b: BackendId) -> Out {
        self.check_runnable(&s, b)?;
        if is_anonymous(b) {
            // A server the model has not heard of: it holds nothing and has no transaction;
            // a pooler that tracks settings restored the client's on it.
            let mut tmp = Backend::default();
            let tracked = &self.rules.tracked_settings;
            if self.pooled() {
                s.clients[st.client]
                    .tracked
                    .restore(tracked, &mut tmp.settings);
            }
            let (pred, _) = exec(&mut tmp, st, self.call(&s, e, st), true);
            if self.pooled() && tmp.tx == Tx::Idle {
                s.clients[st.client].tracked.learn(tracked, &tmp.settings);
            }
            if let Some(p) = pred
                && !p.same_as(st.reply)
            {
                return Err(Why::Reply {
                    predicted: p,
                    backend: b,
                    holders: vec![],
                });
            }
            return Ok(vec![s]);
        }
        let available = st.key.is_none_or(|k| s.available_to(b, k));
        let holders: Vec<BackendId> = st
            .key
            .map(|k| s.holders(k).into_iter().filter(|x| *x != b).collect())
            .unwrap_or_default();
        let call = self.call(&s, e, st);
        let x = s.backends.get_mut(&b).expect("assigned");
        let (pred, released) = exec(x, st, call, available);
        if let Some(p) = pred
            && !p.same_as(st.reply)
        {
            return Err(Why::Reply {
                predicted: p,
                backend: b,
                holders,
            });
        }
        if st.op == Op::Migrate && st.reply.is_error() {
            abort(x);
        }
        self.touch(&mut s, e, b);
        self.after_statement(&mut s, e, st.client, b);
        Ok(wake_all(s, &released))
    }

    /// Timers: when the backend was last used, when its transaction began.
    fn touch(&self, s: &mut State, e: usize, b: BackendId) {
        if !self.keeps_times() {
            return;
        }
        let inv = self.entries[e].inv;
        if let Some(x) = s.backends.get_mut(&b) {
            x.idle_since = inv;
            if x.tx == Tx::Idle {
                x.tx_since = inv;
            }
        }
    }

    /// The pooler, after a statement: keep the server linked, or release it.
    fn after_statement(&self, s: &mut State, e: usize, c: usize, b: BackendId) {
        let in_tx = s.backends.get(&b).is_some_and(|x| x.tx != Tx::Idle);
        if self.keeps_times() {
            s.client(c).idle_since = self.entries[e].inv;
        }
        if self.rules.stays_linked(in_tx) {
            s.client(c).linked = Some(b);
        } else {
            s.client(c).linked = None;
            if let Some(x) = s.backends.get(&b) {
                let settings = x.settings.clone();
                s.clients[c]
                    .tracked
                    .learn(&self.rules.tracked_settings, &settings);
            }
            self.released(s, b);
        }
    }

    /// The pooler links client `c` to server `b`: it restores the settings it tracks to the
    /// client's values (`PoolRules::tracked_settings`).
    fn restore_tracked(&self, s: &mut State, c: usize, b: BackendId) {
        if !self.pooled() || self.rules.tracked_settings.is_empty() {
            return;
        }
        let tracked = s.clients[c].tracked;
        if let Some(x) = s.backends.get_mut(&b) {
            tracked.restore(&self.rules.tracked_settings, &mut x.settings);
        }
    }

    /// A server went back to the pool.
    fn released(&self, s: &mut State, b: BackendId) {
        let resets = self.rules.resets_on_release() && self.rules.reset_does_something();
        let Some(x) = s.backends.get_mut(&b) else {
            return;
        };
        if let Some(cause) = x.close_at_release {
            close(x, cause);
        } else if resets {
            x.reset_pending = true;
        }
    }

    /// The first point of a two-point statement: it starts on `b` (a lock call is granted or
    /// waits).
    fn stmt_start(&self, mut s: State, e: usize, st: &Stmt, b: BackendId) -> Out {
        self.check_runnable(&s, b)?;
        if is_anonymous(b) && st.reply.code() == Some(code::QUERY_CANCELED) {
            // Cancelled before it reported its identity, on a server the model has not heard
            // of: nothing it did is known, nothing of it is left.
            return Ok(vec![s]);
        }
        if is_anonymous(b) {
            return Err(Why::Ended {
                ran: b,
                life: Life::Gone(Cause::Disconnect),
            });
        }
        let lock = if st.op.waits_for_lock() {
            st.key.map(|k| (k, st.op == Op::Lock))
        } else {
            None
        };
        let holders: Vec<BackendId> = st
            .key
            .map(|k| s.holders(k).into_iter().filter(|x| *x != b).collect())
            .unwrap_or_default();
        let x = s.backends.get_mut(&b).expect("assigned");
        if x.tx == Tx::Aborted && lock.is_some() {
            return Err(Why::Reply {
                predicted: Reply::error(code::IN_FAILED_TRANSACTION),
                backend: b,
                holders,
            });
        }
        let mut busy = Busy {
            entry: e as u32,
            lock,
            waited: false,
            granted: false,
            cancelled: false,
        };
        // A cancel may have ended the statement before it reached its lock call (the identity
        // runs first): nothing asked.
        let mut out = vec![];
        if lock.is_some() && st.reply.code() == Some(code::QUERY_CANCELED) {
            let mut early = s.clone();
            let y = early.backends.get_mut(&b).expect("assigned");
            y.busy = Some(Busy { lock: None, ..busy });
            early.client(st.client).linked = Some(b);
            out.push(early);
        }
        let x = s.backends.get_mut(&b).expect("assigned");
        if let Some((k, session)) = lock {
            if holders.is_empty() {
                busy.granted = true;
                bump(if session { &mut x.session } else { &mut x.xact }, k);
            } else {
                busy.waited = true;
            }
        }
        x.busy = Some(busy);
        s.client(st.client).linked = Some(b);
        out.push(s);
        Ok(out)
    }

    /// The second point: the statement is answered.
    fn stmt_end(&self, s: &State, e: usize, st: &Stmt) -> Out {
        let Some((&b, _)) = s
            .backends
            .iter()
            .find(|(_, x)| x.busy.is_some_and(|y| y.entry == e as u32))
        else {
            if st.served.is_none() && st.reply.code() == Some(code::QUERY_CANCELED) {
                // Started on a server the model has not heard of (above).
                return Ok(vec![s.clone()]);
            }
            let ran = st.served.unwrap_or(anonymous(e));
            return Err(Why::Ended {
                ran,
                life: s.backends.get(&ran).map(|x| x.life).unwrap_or_default(),
            });
        };
        let mut s = s.clone();
        let x = s.backends.get_mut(&b).unwrap();
        let busy = x.busy.take().unwrap();
        let mut released = vec![];
        let mut outs: Vec<State> = Vec::new();
        match (st.op.waits_for_lock(), st.reply) {
            (true, Reply::Ok) => {
                if !busy.granted {
                    let k = busy.lock.map(|l| l.0).unwrap_or(Key::Big(0));
                    let holders = s.holders(k).into_iter().filter(|y| *y != b).collect();
                    return Err(Why::NotGranted { key: k, holders });
                }
                if let Some((k, false)) = busy.lock
                    && x.tx != Tx::Open
                {
                    // A transaction lock outside a transaction ends with its statement.
                    unbump(&mut x.xact, k);
                    released.push(k);
                }
                outs.push(s);
            }
            (true, r)
                if r.code() == Some(code::LOCK_NOT_AVAILABLE)
                    || r.code() == Some(code::QUERY_CANCELED) =>
            {
                let cancelled = r.code() == Some(code::QUERY_CANCELED);
                if !cancelled && !busy.waited {
                    return Err(Why::TimedOutFree {
                        key: busy.lock.map(|l| l.0).unwrap_or(Key::Big(0)),
                    });
                }
                if cancelled && !(busy.cancelled || self.statement_timeout(st)) {
                    return Err(Why::CancelUnexplained);
                }
                if busy.granted
                    && let Some((k, session)) = busy.lock
                {
                    if session {
                        // Granted as the error was raised: a session lock survives it.
                        x.tainted.insert(k);
                        s.granted_failed.insert(e as u32);
                    } else {
                        unbump(&mut x.xact, k);
                        released.push(k);
                    }
                }
                let x = s.backends.get_mut(&b).unwrap();
                released.extend(abort(x));
                outs.push(s);
            }
            (_, r) if r.code() == Some(code::QUERY_CANCELED) => {
                if !(busy.cancelled || self.statement_timeout(st)) {
                    return Err(Why::CancelUnexplained);
                }
                // The cancel may have landed before or after the statement did its work.
                let mut ran = s.clone();
                let available = st.key.is_none_or(|k| ran.available_to(b, k));
                let call = self.call(&ran, e, st);
                let rx = ran.backends.get_mut(&b).unwrap();
                let (_, mut rel) = exec(rx, st, call, available);
                if st.op.acquires()
                    && available
                    && let Some(k) = st.key
                    && st.op == Op::TryLock
                {
                    rx.tainted.insert(k);
                    ran.granted_failed.insert(e as u32);
                }
                let rx = ran.backends.get_mut(&b).unwrap();
                rel.extend(abort(rx));
                let x = s.backends.get_mut(&b).unwrap();
                released.extend(abort(x));
                self.touch(&mut ran, e, b);
                self.after_statement(&mut ran, e, st.client, b);
                outs.extend(wake_all(ran, &rel));
                outs.push(s);
            }
            _ => {
                return Err(Why::Reply {
                    predicted: Reply::Ok,
                    backend: b,
                    holders: vec![],
                });
            }
        }
        // The last state is the statement's own outcome; any before it are already finished.
        let mut s = outs.pop().expect("an outcome");
        self.touch(&mut s, e, b);
        self.after_statement(&mut s, e, st.client, b);
        let mut res = wake_all(s, &released);
        res.extend(outs);
        Ok(res)
    }

    fn statement_timeout(&self, st: &Stmt) -> bool {
        self.timer(Timer::CancelLongStatement)
            .zip(st.took)
            .is_some_and(|(t, took)| took >= t)
    }

    /// A statement whose outcome is unknown (no reply in time): whatever it may have done.
    /// (That it may have done nothing is the search's: an unknown operation's points may be
    /// skipped.)
    fn stmt_unknown(&self, s: &State, e: usize, st: &Stmt, point: u8, points: u8) -> Out {
        let c = st.client;
        if points == 2 && point == 1 {
            return self.unknown_end(s, e);
        }
        let mut out = vec![];
        if self.entries[e].orphaned && self.pooled() && points == 1 {
            out.extend(self.orphan_run(s, st));
        }
        if !matches!(s.clients.get(c).map(|x| x.conn), Some(Conn::Up)) {
            return if out.is_empty() {
                Err(Why::EndUnexplained)
            } else {
                Ok(out)
            };
        }
        let mut err = Why::EndUnexplained;
        for (s2, b) in self.assign(s, e, st)? {
            if is_anonymous(b) {
                continue;
            }
            if let Err(w) = self.check_runnable(&s2, b) {
                err = w;
                continue;
            }
            if points == 2 {
                match self.stmt_start(s2, e, st, b) {
                    Ok(v) => out.extend(v),
                    Err(w) => err = w,
                }
                continue;
            }
            let mut s3 = s2;
            let available = st.key.is_none_or(|k| s3.available_to(b, k));
            let call = self.call(&s3, e, st);
            let x = s3.backends.get_mut(&b).expect("assigned");
            let (_, rel) = exec(x, st, call, available);
            self.touch(&mut s3, e, b);
            self.after_statement(&mut s3, e, c, b);
            out.extend(wake_all(s3, &rel));
        }
        if out.is_empty() { Err(err) } else { Ok(out) }
    }

    /// The connection went away under a statement. Either it never ran, or it ran (on its
    /// linked server, one the pooler could hand out, or a new one a look lists) before the
    /// connection went: a server that outlives its client keeps what it took (seen: a lock
    /// granted under `link_blackhole`, shown by a look, its reply lost at `link_cut`).
    fn closed(&self, s: &State, e: usize, st: &Stmt) -> Vec<State> {
        let c = st.client;
        // A reply out of step: the rest of it may still be in flight when the client leaves.
        let in_flight = st.reply.is_out_of_step();
        let mut out = self.client_leaves(s, c, in_flight);
        if st.op == Op::ExecuteProtocol && s.clients.get(c).is_some_and(|x| x.proto_forgotten) {
            out.extend(self.forgotten_closed(s, c));
        }
        if s.clients.get(c).map(|x| x.conn) != Some(Conn::Up) {
            return out;
        }
        for (s2, b) in self.assign(s, e, st).unwrap_or_default() {
            if is_anonymous(b) || self.check_runnable(&s2, b).is_err() {
                continue;
            }
            let mut s3 = s2;
            let available = st.key.is_none_or(|k| s3.available_to(b, k));
            if st.op.waits_for_lock() && !available {
                // It waits on: a backend blocked on a lock does not read its socket, and is
                // granted when the holder goes (seen: a lock call closed by a pooler KILL,
                // then granted on its server as the killed holder exited).
                for s4 in self.stmt_start(s3, e, st, b).unwrap_or_default() {
                    out.push(self.client_gone(&s4, c, Cause::Disconnect));
                }
                continue;
            }
            let call = self.call(&s3, e, st);
            let x = s3.backends.get_mut(&b).expect("assigned");
            let (_, rel) = exec(x, st, call, available);
            self.touch(&mut s3, e, b);
            self.after_statement(&mut s3, e, c, b);
            for s4 in wake_all(s3, &rel) {
                out.extend(self.client_leaves(&s4, c, in_flight));
            }
        }
        out
    }

    /// Client `c` leaves ([`Case::client_gone`]); when a reply may be in flight on its server
    /// (`in_flight`) and the pooler then closes the server instead of resetting it
    /// ([`PoolRules::closes_server_in_flight`]), that too.
    fn client_leaves(&self, s: &State, c: usize, in_flight: bool) -> Vec<State> {
        let mut out = vec![self.client_gone(s, c, Cause::Disconnect)];
        if !in_flight || !self.rules.closes_server_in_flight {
            return out;
        }
        if let Some(b) = s.clients.get(c).and_then(|x| x.linked)
            && s.backends.get(&b).is_some_and(|x| x.life.is_alive())
        {
            let mut s2 = s.clone();
            close(s2.backends.get_mut(&b).expect("linked"), Cause::Disconnect);
            s2.clients[c].linked = None;
            out.push(self.client_gone(&s2, c, Cause::Disconnect));
        }
        out
    }

    /// A notification may be in flight to client `c` on its linked server: one was delivered
    /// there that no client has received.
    fn note_in_flight(&self, s: &State, c: usize) -> bool {
        s.clients
            .get(c)
            .and_then(|x| x.linked)
            .and_then(|b| s.backends.get(&b))
            .is_some_and(|x| !x.inbox.is_empty())
    }

    /// The pooler closed client `c` at a Bind of a statement it forgot
    /// ([`Client::proto_forgotten`]), and the server it had handed it for the Bind.
    fn forgotten_closed(&self, s: &State, c: usize) -> Vec<State> {
        let mut out = vec![];
        for (b, x) in &s.backends {
            if self.assignable(s, c, *b, x).is_ok() {
                let mut s2 = s.clone();
                close(s2.backends.get_mut(b).unwrap(), Cause::Disconnect);
                out.push(self.client_gone(&s2, c, Cause::Disconnect));
            }
        }
        out
    }

    /// An unknown statement run on the connection its client left behind: any server free
    /// for it, which the pooler then closes (the client gone while the server was not ready)
    /// or takes back. (On a server the model has not heard of, it changes nothing known.)
    fn orphan_run(&self, s: &State, st: &Stmt) -> Vec<State> {
        let mut out = vec![];
        let nobody = usize::MAX;
        for (b, x) in &s.backends {
            if self.assignable(s, nobody, *b, x).is_err() || s.down.is_some() {
                continue;
            }
            let mut ran = s.clone();
            let available = st.key.is_none_or(|k| ran.available_to(*b, k));
            // (A statement it prepares there is none its client will execute.)
            let call = Call {
                new: u32::MAX,
                ..self.call(&ran, 0, st)
            };
            let y = ran.backends.get_mut(b).expect("known");
            let (_, rel) = exec(y, st, call, available);
            // Closed with the client gone ...
            let mut closed = ran.clone();
            if let Some(z) = closed.backends.get_mut(b) {
                close(z, Cause::Disconnect);
            }
            out.extend(wake_all(closed, &rel));
            // ... or taken back, if the statement left no transaction open.
            if ran.backends[b].tx == Tx::Idle {
                self.released(&mut ran, *b);
                out.extend(wake_all(ran, &rel));
            }
        }
        out
    }

    /// An unknown lock call answered one way or another: granted, or given up (a lock it was
    /// granted as it gave up stays, at session scope).
    fn unknown_end(&self, s: &State, e: usize) -> Out {
        let Some((&b, x)) = s
            .backends
            .iter()
            .find(|(_, x)| x.busy.is_some_and(|y| y.entry == e as u32))
        else {
            return Err(Why::EndUnexplained);
        };
        let busy = x.busy.unwrap();
        let client = s.linked_client(b);
        let mut out = vec![];
        let mut finish = |mut s2: State, rel: Vec<Key>| {
            if let Some(c) = client {
                self.after_statement(&mut s2, e, c, b);
            }
            out.extend(wake_all(s2, &rel));
        };
        // Answered: granted (a transaction lock outside a transaction ends with it).
        if busy.granted {
            let mut s2 = s.clone();
            let y = s2.backends.get_mut(&b).unwrap();
            y.busy = None;
            let mut rel = vec![];
            if let Some((k, false)) = busy.lock
                && y.tx != Tx::Open
            {
                unbump(&mut y.xact, k);
                rel.push(k);
            }
            finish(s2, rel);
        }
        // Given up (cancelled): the error aborts a transaction; a session lock granted in
        // that instant stays.
        let mut s2 = s.clone();
        let y = s2.backends.get_mut(&b).unwrap();
        y.busy = None;
        let mut rel = vec![];
        if busy.granted
            && let Some((k, session)) = busy.lock
        {
            if session {
                y.tainted.insert(k);
                s2.granted_failed.insert(e as u32);
            } else {
                unbump(&mut y.xact, k);
                rel.push(k);
            }
        }
        let y = s2.backends.get_mut(&b).unwrap();
        rel.extend(abort(y));
        finish(s2, rel);
        Ok(out)
    }

    /// The server ended the client's connection under the statement (57P01, 57P02, 57P03,
    /// PgBouncer's 08P01, a timeout's FATAL): something must have ended it.
    fn ended(&self, s: &State, _e: usize, st: &Stmt) -> Out {
        let c = st.client;
        let cl = s.clients[c];
        let dead = |b: BackendId| s.backends.get(&b).is_some_and(|x| !x.life.is_alive());
        let long = |t: Timer| {
            self.timer(t)
                .zip(st.took)
                .is_some_and(|(t, took)| took >= t)
        };
        let explained = cl.linked.is_some_and(dead)
            || st.served.is_some_and(dead)
            || (cl.linked.is_none() && s.login_failing.is_some())
            || matches!(s.down, Some((Down::Pooler | Down::Postgres, _)))
            || long(Timer::EndLongStatement)
            || long(Timer::EndLongWait);
        // The pooler closes a client that executes a statement it forgot, and the server it
        // had handed it for the Bind (seen: that backend gone from pg_stat_activity).
        let forgot = st.op == Op::ExecuteProtocol && cl.proto_forgotten;
        let mut outs = vec![];
        if explained {
            outs.push(self.client_gone(s, c, Cause::Disconnect));
        }
        if forgot {
            outs.extend(self.forgotten_closed(s, c));
        }
        // PgBouncer's query_timeout closes the server the statement ran on as well (the
        // backend goes on until its statement ends, holding its locks).
        if self.pooled() && long(Timer::EndLongStatement) {
            for (b, x) in &s.backends {
                let mine = s.linked_client(*b).is_none_or(|o| o == c);
                if x.life.is_alive() && x.pooled && mine {
                    let mut s2 = s.clone();
                    close(
                        s2.backends.get_mut(b).unwrap(),
                        Cause::Timeout(Timer::EndLongStatement),
                    );
                    outs.push(self.client_gone(&s2, c, Cause::Disconnect));
                }
            }
        }
        // An unlinked pooled client handed a server whose backend had ended (the pooler had
        // not noticed yet): the pooler closes that server.
        if self.pooled() && cl.linked.is_none() {
            let replica = self.rules.replica_of(c) as u8;
            for (b, x) in &s.backends {
                if x.pooled && x.replica == replica && !x.life.is_alive() {
                    let mut s2 = s.clone();
                    s2.backends.get_mut(b).unwrap().pooled = false;
                    outs.push(self.client_gone(&s2, c, Cause::Disconnect));
                }
            }
        }
        if outs.is_empty() {
            Err(Why::EndUnexplained)
        } else {
            Ok(outs)
        }
    }

    /// The client's connection ends (it closed it, or it was closed): its linked server's fate
    /// by the pooler's rules.
    fn client_gone(&self, s: &State, c: usize, cause: Cause) -> State {
        let mut s = s.clone();
        let linked = s.client(c).linked;
        s.clients[c].new_connection(Conn::Down);
        if let Some(b) = linked
            && let Some(x) = s.backends.get(&b)
        {
            let in_tx = x.tx != Tx::Idle || x.busy.is_some();
            // With `abort_on_disconnect` the reset's ABORT ends an idle or failed transaction;
            // a statement still running has nobody to answer to: its server is closed.
            let fate = if x.busy.is_some() && self.rules.abort_on_disconnect {
                ServerFate::Closed
            } else {
                self.rules.on_disconnect(true, in_tx)
            };
            match fate {
                ServerFate::Closed => {
                    if let Some(x) = s.backends.get_mut(&b)
                        && x.life.is_alive()
                    {
                        close(x, cause);
                    }
                }
                ServerFate::Released { .. } => {
                    let resets = self.rules.reset_does_something();
                    if let Some(x) = s.backends.get_mut(&b) {
                        if let Some(c2) = x.close_at_release {
                            close(x, c2);
                        } else if resets || x.tx != Tx::Idle {
                            // The reset: ABORT of a transaction left open, then the rest.
                            x.reset_pending = true;
                        }
                    }
                }
                ServerFate::Untouched => {}
            }
        }
        s
    }

    // ----- connections, signals, faults -----

    fn connect(&self, s: &State, c: usize, reply: &Reply) -> Out {
        let mut s = s.clone();
        if reply.is_error() {
            s.client(c).conn = Conn::Down;
            s.clients[c].linked = None;
            return Ok(vec![s]);
        }
        if let Some((down, fault)) = s.down {
            let refused = match down {
                Down::Pooler => self.pooled(),
                Down::Postgres => !self.pooled(),
                Down::Paused | Down::Frozen => false,
            };
            if refused {
                return Err(Why::Accepted { down, fault });
            }
        }
        s.client(c).new_connection(Conn::Up);
        Ok(vec![s])
    }

    fn terminate(&self, s: &State, target: BackendId, reply: &Reply, point: u8) -> Out {
        let signalled = *reply == (Reply::Bool { value: true });
        if point == 1 {
            // Confirmed gone (the nemesis waits until the identity has left).
            let mut s = s.clone();
            let mut released = vec![];
            if let Some(x) = s.backends.get_mut(&target) {
                match x.life {
                    Life::Closing(c) | Life::Exiting(c) => {
                        released = exit(x, c);
                        x.life = Life::Gone(c);
                        x.releasing.clear();
                    }
                    Life::Gone(_) => {}
                    Life::Alive => {
                        return Err(Why::Target {
                            op: Op::Terminate,
                            target,
                            visible: true,
                        });
                    }
                }
            }
            return Ok(wake_all(s, &released));
        }
        let mut s = found(s, Op::Terminate, target, signalled)?;
        if signalled {
            self.end_backend(&mut s, target, Cause::Terminate);
        }
        Ok(vec![s])
    }

    /// PostgreSQL ends backend `b`: it is signalled and will exit (its FATAL can reach the
    /// client before its locks are released: measured, docs/ground-truth-model.md), a direct
    /// client on it is broken. The pooler learns of it later.
    fn end_backend(&self, s: &mut State, b: BackendId, cause: Cause) {
        let Some(x) = s.backends.get_mut(&b) else {
            return;
        };
        if !x.life.is_alive() {
            return;
        }
        x.life = Life::Closing(cause);
        if !self.pooled()
            && let Some(c) = s.linked_client(b)
            && s.clients[c].conn == Conn::Up
        {
            s.clients[c].conn = Conn::Broken(cause);
        }
    }

    fn cancel(&self, s: &State, target: BackendId, reply: &Reply) -> Out {
        let signalled = *reply == (Reply::Bool { value: true });
        let mut s = found(s, Op::Cancel, target, signalled)?;
        if let Some(x) = s.backends.get_mut(&target)
            && let Some(b) = x.busy.as_mut()
        {
            b.cancelled = true;
        }
        Ok(vec![s])
    }

    fn fault(
        &self,
        s: &State,
        op: Op,
        target: Option<BackendId>,
        reply: &Reply,
        point: u8,
        now: u64,
    ) -> Out {
        let Some(m) = meaning(op) else {
            return Ok(vec![s.clone()]);
        };
        if point == 1 {
            let mut s = s.clone();
            if self.pooled() && matches!(m.down, Some(Down::Postgres | Down::Paused)) {
                s.login_failing = Some(op);
            }
            if m.by == By::Postgres {
                // The postmaster starts again only once every backend it ended has exited.
                for x in s.backends.values_mut() {
                    if let Life::Closing(c) | Life::Exiting(c) = x.life
                        && c == Cause::Fault(op)
                    {
                        exit(x, c);
                        x.life = Life::Gone(c);
                        x.releasing.clear();
                    }
                }
            }
            s.down = None;
            return Ok(vec![s]);
        }
        let mut s = s.clone();
        if op.targets_backend()
            && let Some(t) = target
        {
            let gone = *reply == (Reply::Bool { value: false });
            s = found(&s, op, t, !gone)?;
            if gone {
                return Ok(vec![s]);
            }
        }
        let cause = Cause::Fault(op);
        let timed_out = reply.code() == Some(code::TIMEOUT);
        let mut released: Vec<Key> = vec![];
        let mut ended: Vec<BackendId> = vec![];
        match m.ends {
            Ends::Nothing => {}
            Ends::IdleNowLinkedAtRelease => {
                let linked: BTreeSet<BackendId> =
                    s.clients.iter().filter_map(|c| c.linked).collect();
                for (id, x) in s.backends.iter_mut() {
                    if !x.life.is_alive() || !x.pooled {
                        continue;
                    }
                    if linked.contains(id) || x.busy.is_some() {
                        if !timed_out {
                            x.close_at_release = Some(cause);
                        }
                    } else {
                        close(x, cause);
                        x.closed_idle = true;
                    }
                }
                s.idle_fault = Some((op, now));
            }
            Ends::All => {
                let ids: Vec<BackendId> = s.backends.keys().copied().collect();
                for id in ids {
                    let x = s.backends.get_mut(&id).unwrap();
                    if !x.life.holds() {
                        continue;
                    }
                    ended.push(id);
                    match m.by {
                        By::Pooler => close(x, cause),
                        By::Link => {
                            if x.pooled {
                                x.life = Life::Closing(cause);
                            }
                        }
                        // The postmaster ends every backend at once; nothing reads the servers
                        // until it is back.
                        By::Postgres | By::Nobody => released.extend(exit(x, cause)),
                    }
                }
            }
        }
        match m.breaks {
            Breaks::Nothing => {}
            Breaks::AllClients => {
                for c in s.clients.iter_mut() {
                    if c.conn == Conn::Up {
                        c.conn = Conn::Broken(cause);
                    }
                    c.linked = None;
                }
            }
            Breaks::OnEndedBackend => {
                for c in s.clients.iter_mut() {
                    if c.conn == Conn::Up
                        && let Some(l) = c.linked
                        && ended.contains(&l)
                    {
                        c.conn = Conn::Broken(cause);
                        c.linked = None;
                    }
                }
            }
        }
        if let Some(d) = m.down {
            s.down = Some((d, op));
        }
        let mut out = wake_all(s, &released);
        if m.drops_logins && self.pooled() {
            let failing: Vec<State> = out
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    s.login_failing = Some(op);
                    s
                })
                .collect();
            out.extend(failing);
        }
        Ok(out)
    }

    // ----- looks -----

    fn read(&self, s: &State, obs: &Observation, part: Part) -> Result<(), Why> {
        if part.postgres() {
            self.read_postgres(s, obs)?;
        }
        if part.pooler() {
            self.read_pooler(s, obs)?;
        }
        Ok(())
    }

    fn read_postgres(&self, s: &State, obs: &Observation) -> Result<(), Why> {
        let mut seen: BTreeSet<BackendId> = BTreeSet::new();
        for row in &obs.backends {
            seen.insert(row.id);
            let granted: Vec<Key> = row
                .locks
                .iter()
                .filter(|l| l.granted)
                .map(|l| l.key)
                .collect();
            let waiting = row.locks.iter().find(|l| !l.granted).map(|l| l.key);
            match s.backends.get(&row.id) {
                None => {
                    if !granted.is_empty() {
                        return Err(Why::Rows {
                            backend: row.id,
                            model: vec![],
                            seen: granted,
                        });
                    }
                    if waiting.is_some() {
                        return Err(Why::Waiting {
                            backend: row.id,
                            model: None,
                            seen: waiting,
                        });
                    }
                }
                Some(x) => match x.life {
                    Life::Alive | Life::Closing(_) => {
                        let model: Vec<Key> = x.keys().into_iter().collect();
                        let mut g = granted.clone();
                        g.sort();
                        g.dedup();
                        if model != g {
                            return Err(Why::Rows {
                                backend: row.id,
                                model,
                                seen: g,
                            });
                        }
                        if x.waiting() != waiting {
                            return Err(Why::Waiting {
                                backend: row.id,
                                model: x.waiting(),
                                seen: waiting,
                            });
                        }
                    }
                    Life::Exiting(_) => {
                        if !granted.iter().all(|k| x.releasing.contains(k)) {
                            return Err(Why::Rows {
                                backend: row.id,
                                model: vec![],
                                seen: granted,
                            });
                        }
                    }
                    Life::Gone(cause) => {
                        return Err(Why::StillThere {
                            backend: row.id,
                            cause,
                        });
                    }
                },
            }
        }
        for (id, x) in &s.backends {
            if x.life.holds() && !seen.contains(id) {
                return Err(Why::Missing { backend: *id });
            }
        }
        Ok(())
    }

    fn read_pooler(&self, s: &State, obs: &Observation) -> Result<(), Why> {
        // The pooler's own list: a server it dropped when it was killed, crashed or restarted
        // cannot be in it (the observer's console connection is the process's since).
        for row in &obs.servers {
            let Some(pid) = row.pid else {
                continue;
            };
            let mut same = s.backends.iter().filter(|(id, _)| id.pid == pid);
            if let (Some((id, x)), None) = (same.next(), same.next())
                && let Some(Cause::Fault(op)) = x.life.cause()
                && meaning(op).is_some_and(|m| m.by == By::Pooler && m.ends == Ends::All)
            {
                return Err(Why::Listed {
                    backend: *id,
                    fault: op,
                });
            }
        }
        Ok(())
    }
}

/// A signal (terminate, cancel, a backend fault) looked for `target` by identity in
/// `pg_stat_activity` and `found` it or not: that must agree with the state (a backend
/// exiting may be there or not; not found, it is gone).
fn found(s: &State, op: Op, target: BackendId, found: bool) -> Result<State, Why> {
    let mut s = s.clone();
    let Some(x) = s.backends.get_mut(&target) else {
        return Ok(s);
    };
    let surely_there = x.life.holds();
    let surely_gone = matches!(x.life, Life::Gone(_));
    if (found && surely_gone) || (!found && surely_there) {
        return Err(Why::Target {
            op,
            target,
            visible: surely_there,
        });
    }
    if let (false, Life::Exiting(c)) = (found, x.life) {
        x.life = Life::Gone(c);
        x.releasing.clear();
    }
    Ok(s)
}

/// A look that shows one key held by two backends is wrong in every state.
pub fn exclusion(obs: &Observation) -> Option<Why> {
    let mut by_key: BTreeMap<Key, Vec<BackendId>> = BTreeMap::new();
    for (b, k) in obs.held() {
        by_key.entry(k).or_default().push(b);
    }
    by_key
        .into_iter()
        .find(|(_, v)| v.len() > 1)
        .map(|(key, backends)| Why::Exclusion { key, backends })
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

/// What an object op (`vocab::object`) needs besides its backend: its client, the client's
/// current protocol-level statement ([`Client::proto`]), the one a `prepare_protocol` makes
/// (its entry), and whether the pooler carries protocol-level statements with the client
/// (`PoolRules::tracks_prepared`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call {
    pub client: usize,
    pub current: Option<u32>,
    pub new: u32,
    pub tracks: bool,
    /// The pooler forgot the client's statements ([`Client::proto_forgotten`]).
    pub forgotten: bool,
    /// It failed with 55P03 while another client's notifications may have been committing
    /// (`Case::notify_contended`).
    pub notify_contended: bool,
}

impl Call {
    /// The pooler prepares the client's statement of this kind on whatever server it is
    /// handed (it has one).
    pub fn carries(&self, kind: crate::vocab::object::Kind) -> bool {
        self.tracks
            && kind.row().carry == Carry::Tracked
            && self.current.is_some()
            && !self.forgotten
    }
}

/// PostgreSQL's answer to a one-point statement on backend `x` (`available`: no other
/// backend holds the key), with its effect applied. `None`: the model does not predict the
/// reply (a migration's: `app.applied_once` judges it). Returns the keys released.
pub fn exec(x: &mut Backend, st: &Stmt, call: Call, available: bool) -> (Option<Reply>, Vec<Key>) {
    let (op, key, setting) = (st.op, st.key, st.setting);
    let mut released = vec![];
    if x.tx == Tx::Aborted && !matches!(op, Op::Commit | Op::Rollback) {
        // A Bind looks its statement up before it looks at the transaction
        // (`exec_bind_message`): a protocol-level statement the server lacks is 26000 even
        // in a failed transaction (docs/session-state.md, section 10).
        if let Some((kind, Role::Use)) = op.object()
            && kind.per_client()
            && !call.carries(kind)
            && x.objects
                .use_(slot(kind, call.client), call.current.unwrap_or(0))
                .is_err()
        {
            return (Some(Reply::error(kind.row().missing)), released);
        }
        return (Some(Reply::error(code::IN_FAILED_TRANSACTION)), released);
    }
    // PostgreSQL serialises the commit of notifications with a heavyweight lock
    // (`PreCommit_Notify`: `LockSharedObject(DatabaseRelationId, 0, 0, AccessExclusiveLock)`,
    // held to the end of the commit), under the session's `lock_timeout`: a statement that
    // commits notifications fails with 55P03 while another backend commits its own, and its
    // transaction is rolled back (confirmed by hand: docs/session-state.md, "NOTIFY's commit
    // lock").
    let commits_notes = (op == Op::Notify && x.tx != Tx::Open)
        || (op == Op::Commit && x.tx == Tx::Open && !x.notify_at_commit.is_empty());
    if call.notify_contended && commits_notes {
        if op == Op::Commit {
            let rollback = Stmt {
                op: Op::Rollback,
                ..st.clone()
            };
            released.extend(exec(x, &rollback, call, available).1);
        }
        return (Some(Reply::error(code::LOCK_NOT_AVAILABLE)), released);
    }
    let reply = match (op, key) {
        (Op::TryLock, Some(k)) => {
            if available {
                bump(&mut x.session, k);
            }
            Some(Reply::Bool { value: available })
        }
        (Op::Lock, Some(k)) => {
            if available {
                bump(&mut x.session, k);
                Some(Reply::Ok)
            } else {
                Some(Reply::error(code::LOCK_NOT_AVAILABLE))
            }
        }
        (Op::Unlock, Some(k)) => {
            let had = x.session.get(&k).copied().unwrap_or(0) > 0;
            if had && unbump(&mut x.session, k) {
                x.tainted.remove(&k);
                released.push(k);
            }
            Some(Reply::Bool { value: had })
        }
        (Op::UnlockAll, _) => {
            released.extend(x.session.keys().copied());
            x.session.clear();
            x.tainted.clear();
            Some(Reply::Ok)
        }
        (Op::XactLock, Some(k)) => {
            if available {
                if x.tx == Tx::Open {
                    bump(&mut x.xact, k);
                }
                Some(Reply::Ok)
            } else {
                Some(Reply::error(code::LOCK_NOT_AVAILABLE))
            }
        }
        (Op::TryXactLock, Some(k)) => {
            if available && x.tx == Tx::Open {
                bump(&mut x.xact, k);
            }
            Some(Reply::Bool { value: available })
        }
        (Op::Begin, _) => {
            x.tx = Tx::Open;
            x.settings.begin();
            x.objects.begin();
            Some(Reply::Ok)
        }
        (Op::Commit | Op::Rollback, _) => {
            released.extend(x.xact.keys().copied());
            x.xact.clear();
            // COMMIT of an aborted transaction rolls it back.
            let committed = op == Op::Commit && x.tx == Tx::Open;
            x.settings.end(committed);
            x.objects.end(committed);
            // LISTEN and UNLISTEN take effect, and NOTIFYs are sent, at commit only.
            let listen = x.listen_at_commit.take();
            let notes = std::mem::take(&mut x.notify_at_commit);
            if committed {
                if let Some(l) = listen {
                    x.listening = l;
                }
                x.outbox.extend(notes);
            }
            x.tx = Tx::Idle;
            Some(Reply::Ok)
        }
        (Op::DiscardAll, _) => {
            if x.tx == Tx::Open {
                Some(Reply::error(code::ACTIVE_TRANSACTION))
            } else {
                released.extend(x.session.keys().copied());
                x.session.clear();
                x.tainted.clear();
                x.settings.discard_all();
                x.objects.discard_all();
                // DISCARD ALL runs UNLISTEN *.
                x.listening = false;
                Some(Reply::Ok)
            }
        }
        (op, _) if op.object().is_some() => {
            let (kind, role) = op.object().expect("an object op");
            let at = slot(kind, call.client);
            let r = match role {
                Role::Create => x.objects.create(
                    at,
                    Obj {
                        creator: call.client,
                        nth: call.new,
                    },
                ),
                Role::Use if call.carries(kind) => Ok(()),
                Role::Use => x.objects.use_(at, call.current.unwrap_or(0)).map(|o| {
                    debug_assert!(o.creator == call.client || !kind.per_client());
                    let _ = o;
                }),
                Role::Drop => x.objects.drop(at),
            };
            Some(match (r, role) {
                (Err(code), _) => Reply::error(code),
                (Ok(()), Role::Use) => Reply::Text {
                    value: label_of(if call.carries(kind) {
                        call.client
                    } else {
                        x.objects.get(at).map(|o| o.creator).unwrap_or(call.client)
                    }),
                },
                (Ok(()), _) => Reply::Ok,
            })
        }
        (Op::Listen | Op::Unlisten, _) => {
            let on = op == Op::Listen;
            if x.tx == Tx::Open {
                x.listen_at_commit = Some(on);
            } else {
                x.listening = on;
            }
            Some(Reply::Ok)
        }
        (Op::Notify, _) => {
            let n = st.note.expect("notify names its sender");
            if x.tx == Tx::Open {
                x.notify_at_commit.push(n);
            } else {
                x.outbox.push(n);
            }
            Some(Reply::Ok)
        }
        (Op::Set, _) => {
            let (g, v) = setting.expect("set names a setting");
            x.settings.set(g, v);
            Some(Reply::Ok)
        }
        (Op::SetLocal, _) => {
            let (g, v) = setting.expect("set_local names a setting");
            x.settings.set_local(g, v);
            Some(Reply::Ok)
        }
        (Op::Reset, _) => {
            let (g, _) = setting.expect("reset names a setting");
            x.settings.reset(g);
            Some(Reply::Ok)
        }
        (Op::Show, _) => {
            let (g, _) = setting.expect("show names a setting");
            Some(Reply::Text {
                value: x.settings.shown(g),
            })
        }
        (Op::FailStatement, _) => Some(Reply::error(code::DIVISION_BY_ZERO)),
        (Op::Ping | Op::PgSleep, _) => Some(Reply::Ok),
        (Op::Migrate, _) => None,
        // An op the model has no row for: not judged.
        _ => None,
    };
    if reply.as_ref().is_some_and(Reply::is_error) {
        released.extend(abort(x));
    }
    (reply, released)
}

impl<'e> Spec for Case<'e> {
    type State = State;
    type Why = Why;

    fn points(&self, e: usize) -> u8 {
        self.points_of(&self.entries[e])
    }

    fn timed(&self) -> bool {
        self.keeps_times()
    }

    fn after(&self, e: usize) -> &[usize] {
        self.after.get(e).map(Vec::as_slice).unwrap_or(&[])
    }

    fn retires(&self, e: usize) -> &[usize] {
        self.retires.get(e).map(Vec::as_slice).unwrap_or(&[])
    }

    fn step(&self, s: &State, e: usize, point: u8, now: u64) -> Out {
        let entry = &self.entries[e];
        match &entry.act {
            Act::Stmt(st) => self.stmt(s, e, st, point, self.points_of(entry)),
            Act::Connect { client, reply } => self.connect(s, *client, reply),
            Act::Disconnect { client } => {
                Ok(self.client_leaves(s, *client, self.note_in_flight(s, *client)))
            }
            Act::Reconnect { client, reply } => {
                if point == 0 {
                    Ok(self.client_leaves(s, *client, self.note_in_flight(s, *client)))
                } else {
                    self.connect(s, *client, reply)
                }
            }
            Act::Release { client } => {
                let mut s = s.clone();
                s.client(*client).new_connection(Conn::Down);
                Ok(vec![s])
            }
            Act::Terminate { target, reply } => self.terminate(s, *target, reply, point),
            Act::Cancel { target, reply } => self.cancel(s, *target, reply),
            Act::Fault { op, target, reply } => {
                // The latest its effect can have happened: its completion.
                let by = entry.done.unwrap_or(now);
                self.fault(s, *op, *target, reply, point, by)
            }
            Act::Read { obs, part } => {
                if part.postgres()
                    && let Some(w) = exclusion(obs)
                {
                    return Err(w);
                }
                self.read(s, obs, *part).map(|()| vec![s.clone()])
            }
            Act::Notified {
                backend,
                note,
                payload,
                ..
            } => self.notified(s, *backend, *note, payload),
            Act::Probe {
                key,
                available,
                after,
            } => {
                let holders = s.holders(*key);
                // A backend still exiting may not have released it yet.
                let releasing = s
                    .backends
                    .values()
                    .any(|x| matches!(x.life, Life::Exiting(_)) && x.releasing.contains(key));
                if holders.is_empty() == *available || (!*available && releasing) {
                    Ok(vec![s.clone()])
                } else {
                    Err(Why::Probe {
                        key: *key,
                        available: *available,
                        holders,
                        after: after.map(|a| a.0),
                    })
                }
            }
        }
    }

    fn force(&self, s: &State, e: usize, point: u8, now: u64) -> Vec<State> {
        let entry = &self.entries[e];
        match &entry.act {
            Act::Read { .. } | Act::Probe { .. } => vec![s.clone()],
            Act::Stmt(st) => {
                // As if its reply were unknown; if even that cannot be, nothing happens.
                let v = self
                    .stmt_unknown(s, e, st, point, self.points_of(entry))
                    .unwrap_or_default();
                let mut v = v;
                // Its client's view stands: a definite end of the connection still ends it.
                if st.reply.ended_by_server() || st.reply.is_closed() {
                    v = vec![self.client_gone(s, st.client, Cause::Disconnect)];
                }
                if v.is_empty() { vec![s.clone()] } else { v }
            }
            _ => {
                // A signal or fault whose reply the model rejects: apply its effect as if the
                // target were there, else nothing.
                match &entry.act {
                    Act::Terminate { target, .. } => {
                        let mut s2 = s.clone();
                        self.end_backend(&mut s2, *target, Cause::Terminate);
                        let mut released = vec![];
                        if let Some(x) = s2.backends.get_mut(target)
                            && let Some(c) = x.life.cause()
                        {
                            released = exit(x, c);
                            x.life = Life::Gone(c);
                            x.releasing.clear();
                        }
                        wake_all(s2, &released)
                    }
                    Act::Fault { op, target, .. } => {
                        let ok = Reply::Ok;
                        let by = entry.done.unwrap_or(now);
                        self.fault(s, *op, *target, &ok, point, by)
                            .unwrap_or_else(|_| vec![s.clone()])
                    }
                    _ => self
                        .step(s, e, point, now)
                        .unwrap_or_else(|_| vec![s.clone()]),
                }
            }
        }
    }

    fn internal(&self, s: &State, now: u64) -> Vec<State> {
        let mut out = vec![];
        if s.login_failing.is_some() {
            // The pooler retries its login, and it succeeds.
            let mut s2 = s.clone();
            s2.login_failing = None;
            out.push(s2);
        }
        for (id, x) in &s.backends {
            if let Life::Closing(c) = x.life {
                // A closed backend exits, releasing its locks.
                let mut s2 = s.clone();
                let rel = exit(s2.backends.get_mut(id).unwrap(), c);
                out.extend(wake_all(s2, &rel));
                // Or it has released one of them so far: PostgreSQL's exit releases a
                // backend's locks one lock partition at a time (`LockReleaseAll`), waking each
                // key's waiter as it goes, so a waiter granted one key can run its next
                // statement and be refused another key the exiting backend still holds
                // (seen on a loaded 2-core machine, docs/checker.md, "Exits release one
                // key at a time").
                let keys = x.keys();
                if keys.len() > 1 {
                    for k in keys {
                        let mut s2 = s.clone();
                        release_one(s2.backends.get_mut(id).unwrap(), k);
                        out.extend(wake_all(s2, &[k]));
                    }
                }
            }
            if x.reset_pending && x.life.is_alive() {
                let mut s2 = s.clone();
                let y = s2.backends.get_mut(id).unwrap();
                let mut rel: Vec<Key> = vec![];
                if y.tx != Tx::Idle {
                    // Released inside a transaction (`abort_on_disconnect`): ABORT first
                    // (its transaction's settings undone with it).
                    rel.extend(y.xact.keys().copied());
                    y.xact.clear();
                    y.tx = Tx::Idle;
                    y.settings.end(false);
                    y.objects.end(false);
                }
                if self.rules.reset_releases_locks {
                    rel.extend(y.session.keys().copied());
                    y.session.clear();
                    y.tainted.clear();
                }
                // RESET ALL keeps the role; DISCARD ALL and RESET ROLE reset it.
                let (all, role) = (
                    self.rules.reset_clears_settings,
                    self.rules.reset_clears_role,
                );
                y.settings
                    .reset_where(|g| if g.row().reset_all_clears { all } else { role });
                if self.rules.reset_clears_objects {
                    y.objects.discard_all();
                }
                if self.rules.reset_unlistens {
                    y.listening = false;
                }
                y.reset_pending = false;
                out.extend(wake_all(s2, &rel));
            }
            if x.life.is_alive() && x.busy.is_none() {
                self.timers(s, *id, x, now, &mut out);
            }
        }
        if self.timer(Timer::CloseIdleClient).is_some() {
            let t = self.timer(Timer::CloseIdleClient).unwrap();
            for (c, cl) in s.clients.iter().enumerate() {
                let in_tx = cl
                    .linked
                    .and_then(|b| s.backends.get(&b))
                    .is_some_and(|x| x.tx != Tx::Idle);
                if cl.conn == Conn::Up && !in_tx && now >= cl.idle_since.saturating_add(t) {
                    let mut s2 = self.client_gone(s, c, Cause::Timeout(Timer::CloseIdleClient));
                    s2.clients[c].conn = Conn::Broken(Cause::Timeout(Timer::CloseIdleClient));
                    out.push(s2);
                }
            }
        }
        out
    }
}

impl<'e> Case<'e> {
    /// Timeouts that may have run out on an idle backend `x` by `now`.
    fn timers(&self, s: &State, id: BackendId, x: &Backend, now: u64, out: &mut Vec<State>) {
        let past = |t: Timer, since: u64| {
            self.timer(t)
                .is_some_and(|t| now >= since.saturating_add(t))
        };
        let linked = s.linked_client(id);
        let in_tx = x.tx != Tx::Idle;
        let pool = |t: Timer, out: &mut Vec<State>| {
            let mut s2 = s.clone();
            close(s2.backends.get_mut(&id).unwrap(), Cause::Timeout(t));
            out.push(s2);
        };
        if self.pooled() && x.pooled && linked.is_none() {
            if past(Timer::RetireOld, self.case_start) {
                pool(Timer::RetireOld, out);
            }
            if past(Timer::RetireIdle, x.idle_since) {
                pool(Timer::RetireIdle, out);
            }
        }
        if self.pooled()
            && let Some(c) = linked
            && in_tx
        {
            for (t, since) in [
                (Timer::CloseIdleInTransaction, x.idle_since),
                (Timer::CloseLongTransaction, x.tx_since),
                // query_timeout fires on a client idle in a transaction too (measured).
                (Timer::EndLongStatement, x.idle_since),
            ] {
                if past(t, since) {
                    let mut s2 = s.clone();
                    close(s2.backends.get_mut(&id).unwrap(), Cause::Timeout(t));
                    s2.clients[c].linked = None;
                    s2.clients[c].conn = Conn::Broken(Cause::Timeout(t));
                    out.push(s2);
                }
            }
        }
        for (t, applies, since) in [
            (Timer::EndIdleInTransaction, in_tx, x.idle_since),
            (Timer::EndIdleSession, !in_tx, x.idle_since),
            (Timer::EndLongTransaction, in_tx, x.tx_since),
        ] {
            if applies && past(t, since) {
                let mut s2 = s.clone();
                self.end_backend(&mut s2, id, Cause::Timeout(t));
                out.push(s2);
            }
        }
    }
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
