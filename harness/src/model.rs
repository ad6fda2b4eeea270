//! What should happen: a pure reference model of PostgreSQL advisory locks, of the pooler's
//! server assignment and reset rules, and of what each logical client believes it holds.
//! Keyed by backend identity `(pid, backend_start)`, learned from what each op reports;
//! the model never guesses which backend a pooler hands out, it only checks that the one
//! reported is possible (linked when it must be, alive, not someone else's).

use crate::client::{BackendId, Reply};
use crate::key::Key;
use crate::op::Op;
use crate::topology::{PoolMode, Topology};
use std::collections::{BTreeMap, BTreeSet};

/// SQLSTATEs the model predicts.
pub mod code {
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    pub const ACTIVE_TRANSACTION: &str = "25001";
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// Not a SQLSTATE: the client's connection is gone.
    pub const CLOSED: &str = "closed";
}

/// How the pooler (or its absence) behaves, from the topology.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// `None`: clients connect straight to PostgreSQL.
    pub mode: Option<PoolMode>,
    pub pool_size: usize,
    /// The reset query releases session advisory locks (`DISCARD ALL` or
    /// `pg_advisory_unlock_all()`); an empty or other reset query releases nothing.
    pub reset_releases_locks: bool,
    pub reset_always: bool,
}

impl PoolSpec {
    pub fn from_topology(t: &Topology) -> PoolSpec {
        match &t.pgbouncer {
            None => PoolSpec {
                mode: None,
                pool_size: usize::MAX,
                reset_releases_locks: false,
                reset_always: false,
            },
            Some(b) => {
                let q = b.server_reset_query.to_ascii_lowercase();
                PoolSpec {
                    mode: Some(b.pool_mode),
                    pool_size: b.default_pool_size as usize,
                    reset_releases_locks: q.contains("discard all")
                        || q.contains("pg_advisory_unlock_all"),
                    reset_always: b.server_reset_query_always,
                }
            }
        }
    }
}

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
}

#[derive(Clone, Debug, Default)]
pub struct ClientModel {
    pub connected: bool,
    /// Its server was closed under it; its next statement fails with `closed`.
    pub broken: bool,
    /// The backend this client is pinned to (direct and session mode: for the connection;
    /// transaction mode: for the open transaction).
    pub linked: Option<BackendId>,
    /// The backend that served it last (target of its terminate/cancel steps).
    pub last: Option<BackendId>,
    pub beliefs: BTreeMap<Key, Belief>,
    /// The application's view: inside BEGIN .. COMMIT/ROLLBACK.
    pub in_tx: bool,
    pub tx_backend: Option<BackendId>,
    /// Keys first locked inside the current transaction.
    pub tx_taken: BTreeSet<Key>,
}

/// What the runner should do with a step before running it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Run it. `connect` first when the client has no connection; `target` for terminate/cancel.
    Run {
        connect: bool,
        target: Option<BackendId>,
    },
    /// Do not run it: a sequential schedule cannot (the reason says why).
    Skip(String),
}

/// The model's verdict on one executed step.
#[derive(Clone, Debug, Default)]
pub struct StepCheck {
    pub expected_reply: Option<Reply>,
    /// `pg.*` or `app.*` violations found while applying the step.
    pub violations: Vec<(&'static str, String)>,
    /// Keys the contender should probe after the step, with the invariant each probe tests.
    pub probes: Vec<(&'static str, Key)>,
    /// Identities that left (the runner waits for them to be gone before observing).
    pub gone: Vec<BackendId>,
    /// Servers the pooler is releasing (session-mode disconnect: after its reset query).
    pub idle: Vec<BackendId>,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub spec: PoolSpec,
    pub backends: BTreeMap<BackendId, BackendModel>,
    pub dead: BTreeSet<BackendId>,
    pub clients: Vec<ClientModel>,
}

impl Model {
    pub fn new(spec: PoolSpec, clients: usize) -> Model {
        Model {
            spec,
            backends: BTreeMap::new(),
            dead: BTreeSet::new(),
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

    fn held_by_other(&self, b: BackendId, k: Key) -> bool {
        self.backends.iter().any(|(id, m)| *id != b && m.holds(k))
    }

    fn linked_count(&self) -> usize {
        self.clients.iter().filter(|c| c.linked.is_some()).count()
    }

    /// Decide whether and how to run a step. `server_count` is the number of client-role
    /// backends the observer saw last (the pool's real size).
    pub fn plan(&self, client: usize, op: Op, server_count: usize) -> Plan {
        let c = &self.clients[client];
        match op {
            Op::Terminate | Op::Cancel => match c.last {
                Some(t) => Plan::Run {
                    connect: false,
                    target: Some(t),
                },
                None => Plan::Skip(format!(
                    "C{} has not been served by a backend yet",
                    client + 1
                )),
            },
            Op::Disconnect => Plan::Run {
                connect: false,
                target: None,
            },
            Op::Reconnect => Plan::Run {
                connect: true,
                target: None,
            },
            _ => {
                let connect = !c.connected;
                let needs_server = self.spec.mode.is_some() && (c.linked.is_none() || connect);
                if needs_server && !c.broken {
                    let idle = server_count.saturating_sub(self.linked_count());
                    if idle == 0 && server_count >= self.spec.pool_size {
                        return Plan::Skip(format!(
                            "pool exhausted: all {} servers are pinned by other clients, so C{} would wait for one forever in a sequential schedule",
                            self.spec.pool_size,
                            client + 1
                        ));
                    }
                }
                Plan::Run {
                    connect,
                    target: None,
                }
            }
        }
    }

    /// The client (re)connected.
    pub fn connected(&mut self, client: usize) {
        let c = &mut self.clients[client];
        c.connected = true;
        c.broken = false;
    }

    /// Run a statement-level op on backend `b` by PostgreSQL's rules.
    fn exec(&mut self, b: BackendId, op: Op, key: Option<Key>) -> Reply {
        let other = key.is_some_and(|k| self.held_by_other(b, k));
        let m = self.backends.entry(b).or_default();
        if m.tx == Tx::Aborted && !matches!(op, Op::Commit | Op::Rollback) {
            return Reply::error(code::IN_FAILED_TRANSACTION);
        }
        let bump = |map: &mut BTreeMap<Key, u32>, k: Key| *map.entry(k).or_insert(0) += 1;
        let reply = match (op, key) {
            (Op::TryLock, Some(k)) => {
                if !other {
                    bump(&mut m.session, k);
                }
                Reply::Bool { value: !other }
            }
            (Op::Lock, Some(k)) => {
                if other {
                    Reply::error(code::LOCK_NOT_AVAILABLE)
                } else {
                    bump(&mut m.session, k);
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
        self.dead.insert(b);
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
    /// first when `server_reset_query_always` is set (after the client has its reply: the
    /// runner waits for the server to be idle again before observing).
    fn release(&mut self, client: usize, b: BackendId, check: &mut StepCheck) {
        self.clients[client].linked = None;
        if self.spec.reset_always {
            check.idle.push(b);
            if self.spec.reset_releases_locks
                && let Some(m) = self.backends.get_mut(&b)
            {
                m.session.clear();
            }
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
    pub fn disconnect(&mut self, client: usize) -> StepCheck {
        let mut check = StepCheck {
            expected_reply: Some(Reply::Ok),
            ..Default::default()
        };
        let c = &self.clients[client];
        if let Some(b) = c.linked {
            let in_tx = self.backends.get(&b).is_some_and(|m| m.tx != Tx::Idle);
            match self.spec.mode {
                // Direct: the session ends. Any pooler: a server left mid-transaction is closed.
                None => self.close_backend(b, &mut check),
                Some(_) if in_tx => self.close_backend(b, &mut check),
                Some(PoolMode::Session) => {
                    check.idle.push(b);
                    if self.spec.reset_releases_locks
                        && let Some(m) = self.backends.get_mut(&b)
                    {
                        m.session.clear();
                    }
                }
                Some(_) => {}
            }
        }
        let c = &mut self.clients[client];
        c.linked = None;
        c.connected = false;
        c.broken = false;
        self.forget_beliefs(client);
        check
    }

    fn close_backend(&mut self, b: BackendId, check: &mut StepCheck) {
        let keys: Vec<Key> = self
            .backends
            .get(&b)
            .map(|m| m.keys().into_iter().collect())
            .unwrap_or_default();
        self.backend_gone(b);
        check.gone.push(b);
        for k in keys {
            check.probes.push(("pg.locks_match_model", k));
        }
    }

    /// `pg_terminate_backend` of `target` from the admin side; `reply` is what it returned.
    pub fn terminate(&mut self, target: BackendId, reply: &Reply) -> StepCheck {
        let alive = self.backends.contains_key(&target);
        let mut check = StepCheck {
            expected_reply: Some(Reply::Bool { value: alive }),
            ..Default::default()
        };
        let _ = reply;
        if alive {
            let keys: Vec<Key> = self.backends[&target].keys().into_iter().collect();
            self.backend_gone(target);
            check.gone.push(target);
            for k in keys {
                check.probes.push(("pg.terminate_releases", k));
            }
        }
        check
    }

    /// `pg_cancel_backend` of `target`: an idle backend ignores it; nothing is released.
    pub fn cancel(&mut self, target: BackendId) -> StepCheck {
        let alive = self.backends.contains_key(&target);
        let mut check = StepCheck {
            expected_reply: Some(Reply::Bool { value: alive }),
            ..Default::default()
        };
        if let Some(m) = self.backends.get(&target) {
            for k in m.session.keys() {
                check.probes.push(("pg.cancel_keeps_session_locks", *k));
            }
        }
        check
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
    ) -> StepCheck {
        let mut check = StepCheck::default();
        // A client whose server was closed under it hears of it now.
        if self.clients[client].broken {
            check.expected_reply = Some(Reply::error(code::CLOSED));
            let c = &mut self.clients[client];
            c.broken = false;
            c.connected = false;
            self.forget_beliefs(client);
            return check;
        }
        let pinned = self.clients[client].linked;
        let backend = match (pinned, served) {
            (Some(p), Some(s)) if p != s => {
                check.violations.push((
                    "pg.replies_match_model",
                    format!(
                        "C{} is pinned to {p} but its statement ran on {s}",
                        client + 1
                    ),
                ));
                Some(s)
            }
            (Some(p), _) => Some(p),
            (None, Some(s)) => {
                if self.dead.contains(&s) {
                    check.violations.push((
                        "pg.replies_match_model",
                        format!("statement ran on {s}, which was terminated"),
                    ));
                }
                if let Some(other) = self.clients.iter().position(|c| c.linked == Some(s)) {
                    check.violations.push((
                        "pg.replies_match_model",
                        format!(
                            "C{} was given {s}, which is pinned to C{}",
                            client + 1,
                            other + 1
                        ),
                    ));
                }
                Some(s)
            }
            (None, None) => None,
        };
        let Some(b) = backend else {
            // No backend known (the reset query overwrote the tag, or the connection failed).
            if reply.is_closed() {
                self.clients[client].connected = false;
                self.forget_beliefs(client);
            }
            return check;
        };
        let before = self.backends.get(&b).cloned().unwrap_or_default();
        let expected = self.exec(b, op, key);
        let after = self.backends.get(&b).cloned().unwrap_or_default();
        check.expected_reply = Some(expected);
        self.clients[client].last = Some(b);

        // Boundary probes: what a fresh contender must see for the keys this step touched.
        if before.tx == Tx::Open && after.tx == Tx::Aborted {
            for k in before.xact.keys() {
                check.probes.push(("pg.xact_released_at_end", *k));
            }
        }
        match op {
            Op::Commit | Op::Rollback => {
                for k in before.xact.keys() {
                    check.probes.push(("pg.xact_released_at_end", *k));
                }
                if op == Op::Rollback {
                    for k in after.session.keys() {
                        check.probes.push(("pg.session_survives_rollback", *k));
                    }
                }
            }
            Op::Unlock => {
                if let Some(k) = key
                    && before.session.get(&k).copied().unwrap_or(0) > 1
                {
                    check.probes.push(("pg.stacking", k));
                }
            }
            _ => {}
        }

        // The pooler: pin or release the server.
        let tx = after.tx;
        match self.spec.mode {
            None | Some(PoolMode::Session) => self.clients[client].linked = Some(b),
            Some(PoolMode::Transaction) => {
                if tx == Tx::Idle {
                    self.release(client, b, &mut check);
                } else {
                    self.clients[client].linked = Some(b);
                }
            }
            Some(PoolMode::Statement) => self.release(client, b, &mut check),
        }

        self.believe(client, op, key, b, reply, &mut check);
        check
    }

    /// The application's view, updated from the reply it actually got.
    fn believe(
        &mut self,
        client: usize,
        op: Op,
        key: Option<Key>,
        b: BackendId,
        reply: &Reply,
        check: &mut StepCheck,
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
                        let took: Vec<String> = belief
                            .backends
                            .iter()
                            .map(|x| format!("pid {}", x.pid))
                            .collect();
                        check.violations.push((
                            "app.unlock_reaches_owner",
                            format!(
                                "C{} unlocked {k}, which it took on {}, but the unlock ran on pid {}",
                                client + 1,
                                took.join(" and "),
                                b.pid
                            ),
                        ));
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

    /// After a rollback by `client`: the keys first taken in that transaction, on its backend.
    /// Consumed by the checker (then cleared).
    pub fn take_rolled_back(&mut self, client: usize) -> (Option<BackendId>, BTreeSet<Key>) {
        let c = &mut self.clients[client];
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
    use super::*;

    const K: Key = Key::Big(4242424242);
    fn b(n: i32) -> BackendId {
        BackendId {
            pid: n,
            start_us: 1000 + n as i64,
        }
    }
    fn tx_mode() -> Model {
        Model::new(
            PoolSpec {
                mode: Some(PoolMode::Transaction),
                pool_size: 2,
                reset_releases_locks: true,
                reset_always: false,
            },
            3,
        )
    }
    fn session_mode() -> Model {
        Model::new(
            PoolSpec {
                mode: Some(PoolMode::Session),
                pool_size: 4,
                reset_releases_locks: true,
                reset_always: false,
            },
            3,
        )
    }
    fn t() -> Reply {
        Reply::Bool { value: true }
    }
    fn f() -> Reply {
        Reply::Bool { value: false }
    }
    /// Apply with the model's own prediction as the reply (what a faithful server returns).
    fn run(m: &mut Model, c: usize, op: Op, key: Option<Key>, served: BackendId) -> StepCheck {
        let mut probe = m.clone();
        let expected = probe
            .apply(c, op, key, Some(served), &Reply::Ok)
            .expected_reply
            .unwrap();
        let check = m.apply(c, op, key, Some(served), &expected);
        assert!(check.expected_reply.as_ref().unwrap().same_as(&expected));
        check
    }

    #[test]
    fn session_locks_stack_and_survive_rollback() {
        let mut m = session_mode();
        run(&mut m, 0, Op::Begin, None, b(1));
        assert!(
            run(&mut m, 0, Op::TryLock, Some(K), b(1))
                .expected_reply
                .unwrap()
                .same_as(&t())
        );
        run(&mut m, 0, Op::TryLock, Some(K), b(1));
        let rb = run(&mut m, 0, Op::Rollback, None, b(1));
        assert!(rb.probes.contains(&("pg.session_survives_rollback", K)));
        assert_eq!(m.backends[&b(1)].session[&K], 2);
        let un = run(&mut m, 0, Op::Unlock, Some(K), b(1));
        assert!(un.probes.contains(&("pg.stacking", K)));
        assert!(m.key_held(K));
        run(&mut m, 0, Op::Unlock, Some(K), b(1));
        assert!(!m.key_held(K));
        assert!(
            run(&mut m, 0, Op::Unlock, Some(K), b(1))
                .expected_reply
                .unwrap()
                .same_as(&f())
        );
    }

    #[test]
    fn xact_locks_end_with_the_transaction_and_are_released_at_once_outside_one() {
        let mut m = session_mode();
        run(&mut m, 0, Op::TryXactLock, Some(K), b(1));
        assert!(
            !m.key_held(K),
            "autocommit xact lock is released at statement end"
        );
        run(&mut m, 0, Op::Begin, None, b(1));
        run(&mut m, 0, Op::XactLock, Some(K), b(1));
        assert!(m.key_held(K));
        assert!(m.clients[0].beliefs.contains_key(&K));
        // Another backend cannot have it; the blocking form times out.
        let other = run(&mut m, 1, Op::XactLock, Some(K), b(2));
        assert!(
            other
                .expected_reply
                .unwrap()
                .same_as(&Reply::error(code::LOCK_NOT_AVAILABLE))
        );
        let c = run(&mut m, 0, Op::Commit, None, b(1));
        assert!(c.probes.contains(&("pg.xact_released_at_end", K)));
        assert!(!m.key_held(K));
        assert!(m.clients[0].beliefs.is_empty());
    }

    #[test]
    fn errors_abort_open_transactions_until_rollback() {
        let mut m = session_mode();
        run(&mut m, 0, Op::Begin, None, b(1));
        let e = run(&mut m, 0, Op::DiscardAll, None, b(1));
        assert!(
            e.expected_reply
                .unwrap()
                .same_as(&Reply::error(code::ACTIVE_TRANSACTION))
        );
        let e = run(&mut m, 0, Op::TryLock, Some(K), b(1));
        assert!(
            e.expected_reply
                .unwrap()
                .same_as(&Reply::error(code::IN_FAILED_TRANSACTION))
        );
        let e = run(&mut m, 0, Op::Begin, None, b(1));
        assert!(
            e.expected_reply
                .unwrap()
                .same_as(&Reply::error(code::IN_FAILED_TRANSACTION))
        );
        assert!(
            run(&mut m, 0, Op::Rollback, None, b(1))
                .expected_reply
                .unwrap()
                .same_as(&Reply::Ok)
        );
        assert!(
            run(&mut m, 0, Op::TryLock, Some(K), b(1))
                .expected_reply
                .unwrap()
                .same_as(&t())
        );
        // The abort released transaction locks already.
        run(&mut m, 0, Op::Begin, None, b(1));
        run(&mut m, 0, Op::TryXactLock, Some(Key::Big(9)), b(1));
        assert!(m.key_held(Key::Big(9)));
        let e = run(&mut m, 0, Op::FailStatement, None, b(1));
        assert!(e.probes.contains(&("pg.xact_released_at_end", Key::Big(9))));
        assert!(
            !m.key_held(Key::Big(9)),
            "xact locks are released when the error aborts"
        );
        assert!(m.key_held(K), "session locks are not");
        assert!(!m.clients[0].beliefs.contains_key(&Key::Big(9)));
        run(&mut m, 0, Op::Rollback, None, b(1));
        // A failing statement outside a transaction aborts nothing.
        run(&mut m, 0, Op::FailStatement, None, b(1));
        assert_eq!(m.backends[&b(1)].tx, Tx::Idle);
    }

    #[test]
    fn transaction_mode_hands_the_lock_to_the_next_client_on_the_same_backend() {
        let mut m = tx_mode();
        run(&mut m, 0, Op::TryLock, Some(K), b(1));
        assert_eq!(
            m.clients[0].linked, None,
            "released after the autocommit statement"
        );
        // C2 is handed B1 and re-enters: PostgreSQL grants it.
        let c2 = run(&mut m, 1, Op::TryLock, Some(K), b(1));
        assert!(c2.expected_reply.unwrap().same_as(&t()));
        assert!(m.clients[0].beliefs[&K].backends.contains(&b(1)));
        assert!(m.clients[1].beliefs[&K].backends.contains(&b(1)));
        // C1's unlock lands on B2: false, and the app's unlock did not reach the owner.
        let un = run(&mut m, 0, Op::Unlock, Some(K), b(2));
        assert!(un.expected_reply.unwrap().same_as(&f()));
        assert!(
            un.violations
                .iter()
                .any(|(n, _)| *n == "app.unlock_reaches_owner")
        );
        assert_eq!(m.backends[&b(1)].session[&K], 2);
    }

    #[test]
    fn a_transaction_pins_its_backend_and_a_move_is_a_violation() {
        let mut m = tx_mode();
        run(&mut m, 0, Op::Begin, None, b(1));
        assert_eq!(m.clients[0].linked, Some(b(1)));
        let check = m.apply(0, Op::TryLock, Some(K), Some(b(2)), &t());
        assert!(
            check
                .violations
                .iter()
                .any(|(n, _)| *n == "pg.replies_match_model")
        );
    }

    #[test]
    fn plan_skips_what_would_wait_for_a_pooled_server_forever() {
        let mut m = tx_mode();
        m.connected(0);
        m.connected(1);
        m.connected(2);
        run(&mut m, 0, Op::Begin, None, b(1));
        run(&mut m, 1, Op::Begin, None, b(2));
        assert!(matches!(m.plan(2, Op::TryLock, 2), Plan::Skip(_)));
        // C1 can go on in its own transaction.
        assert!(matches!(m.plan(0, Op::TryLock, 2), Plan::Run { .. }));
        run(&mut m, 1, Op::Commit, None, b(2));
        assert!(matches!(m.plan(2, Op::TryLock, 2), Plan::Run { .. }));
        assert!(
            matches!(m.plan(2, Op::Terminate, 2), Plan::Skip(_)),
            "nothing served C3 yet"
        );
    }

    #[test]
    fn session_mode_resets_on_disconnect_and_transaction_mode_does_not() {
        let mut s = session_mode();
        run(&mut s, 0, Op::TryLock, Some(K), b(1));
        s.disconnect(0);
        assert!(!s.key_held(K), "DISCARD ALL on release");
        let mut t_ = tx_mode();
        run(&mut t_, 0, Op::TryLock, Some(K), b(1));
        t_.disconnect(0);
        assert!(t_.key_held(K), "orphaned on the pooled server");
        // Leaving mid-transaction closes the server.
        run(&mut t_, 1, Op::Begin, None, b(2));
        run(&mut t_, 1, Op::TryXactLock, Some(Key::Big(7)), b(2));
        let d = t_.disconnect(1);
        assert_eq!(d.gone, vec![b(2)]);
        assert!(!t_.key_held(Key::Big(7)));
    }

    #[test]
    fn terminate_releases_everything_and_leaves_stale_beliefs() {
        let mut m = tx_mode();
        run(&mut m, 0, Op::TryLock, Some(K), b(1));
        let check = m.terminate(b(1), &t());
        assert!(check.expected_reply.unwrap().same_as(&t()));
        assert!(check.probes.contains(&("pg.terminate_releases", K)));
        assert!(!m.key_held(K));
        assert!(m.clients[0].beliefs[&K].stale, "C1 has not heard of it");
        assert!(
            m.terminate(b(1), &f())
                .expected_reply
                .unwrap()
                .same_as(&f())
        );
        // In session mode the pinned client is broken and hears of it at its next statement.
        let mut s = session_mode();
        run(&mut s, 0, Op::TryLock, Some(K), b(1));
        s.terminate(b(1), &t());
        let next = s.apply(0, Op::TryLock, Some(K), None, &Reply::error(code::CLOSED));
        assert!(
            next.expected_reply
                .unwrap()
                .same_as(&Reply::error(code::CLOSED))
        );
        assert!(s.clients[0].beliefs.is_empty());
    }

    #[test]
    fn cancel_keeps_session_locks() {
        let mut m = session_mode();
        run(&mut m, 0, Op::TryLock, Some(K), b(1));
        let c = m.cancel(b(1));
        assert!(c.probes.contains(&("pg.cancel_keeps_session_locks", K)));
        assert!(m.key_held(K));
    }

    #[test]
    fn reset_always_clears_session_locks_at_every_release() {
        let mut m = tx_mode();
        m.spec.reset_always = true;
        run(&mut m, 0, Op::TryLock, Some(K), b(1));
        assert!(!m.key_held(K));
        assert!(
            m.clients[0].beliefs.contains_key(&K),
            "the app still believes it holds it"
        );
    }
}
