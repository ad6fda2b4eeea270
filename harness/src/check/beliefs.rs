//! What each logical client believes it holds, from its own replies, in real time: the
//! application's view, which no order of the servers' work changes. A client believes it holds
//! a key from the completion of the call that granted it to the invoke of the call that gives
//! it up (Jepsen's mutex semantics): an unlock (one count), `pg_advisory_unlock_all`, `DISCARD
//! ALL`, the end of its transaction for a transaction lock (commit, rollback, an error inside
//! it), its disconnect, or the completion of a statement that found its connection gone.
//!
//! A second, wider view ([`Beliefs::may_hold`]) counts a grant from the invoke of its call to
//! the completion of its release: what the servers may show while a reply is on its way, which
//! is what `app.no_orphans` needs to call a lock nobody's.

use super::model::{Act, Entry};
use crate::vocab::object::{Kind, Obj, Role, SessionObjects, label_of, slot};
use crate::vocab::reply::code;
use crate::vocab::setting::SessionSettings;
use crate::vocab::{BackendId, Guc, Key, Op, Reply};
use std::collections::{BTreeMap, BTreeSet};

/// A client's belief in one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Belief {
    pub session: u32,
    pub xact: u32,
    /// The backends that granted it (behind transaction pooling, one key can be granted to a
    /// client on several backends in turn). `None` in the wide view: a call whose outcome is
    /// unknown may have been granted anywhere.
    pub backends: BTreeSet<Option<BackendId>>,
    /// When it began (ns).
    pub since: u64,
}

impl Belief {
    pub fn live(&self) -> bool {
        self.session + self.xact > 0
    }
    pub fn granted_by(&self) -> Vec<BackendId> {
        self.backends.iter().flatten().copied().collect()
    }
}

#[derive(Clone, Debug, Default)]
struct View {
    beliefs: BTreeMap<Key, Belief>,
    in_tx: bool,
    tx_backend: Option<BackendId>,
    /// Keys first locked inside the current transaction (session scope).
    tx_taken: BTreeSet<Key>,
}

impl View {
    fn grant(&mut self, k: Key, b: Option<BackendId>, session: bool, at: u64) {
        let fresh = !self.beliefs.get(&k).is_some_and(Belief::live);
        let bl = self.beliefs.entry(k).or_default();
        if fresh {
            *bl = Belief {
                since: at,
                ..Default::default()
            };
        }
        bl.backends.insert(b);
        if session {
            bl.session += 1;
        } else {
            bl.xact += 1;
        }
        if self.in_tx && fresh && session {
            self.tx_taken.insert(k);
        }
    }
    fn unlock(&mut self, k: Key) {
        if let Some(bl) = self.beliefs.get_mut(&k)
            && bl.session > 0
        {
            bl.session -= 1;
            if !bl.live() {
                self.beliefs.remove(&k);
            }
        }
    }
    fn drop_session(&mut self) {
        self.beliefs.retain(|_, bl| {
            bl.session = 0;
            bl.live()
        });
    }
    fn drop_xact(&mut self) {
        self.beliefs.retain(|_, bl| {
            bl.xact = 0;
            bl.live()
        });
    }
    fn drop_all(&mut self) {
        self.beliefs.clear();
        self.in_tx = false;
        self.tx_backend = None;
        self.tx_taken.clear();
    }
}

/// Something the application saw happen, for the invariants that judge it.
#[derive(Clone, Debug)]
pub enum Seen {
    /// A lock call granted `key` to `client` on `backend` (at its completion).
    Granted {
        client: usize,
        key: Key,
        backend: BackendId,
    },
    /// An unlock returned: what the client believed at its invoke (the backends that granted
    /// the key, if it believed it held it), and where it ran.
    Unlocked {
        client: usize,
        key: Key,
        believed: Option<Vec<BackendId>>,
        ran: Option<BackendId>,
    },
    /// A ROLLBACK returned: the keys first taken in that transaction, on its backend.
    RolledBack {
        client: usize,
        backend: Option<BackendId>,
        taken: Vec<Key>,
    },
    /// An op on a named object (`vocab::object`) replied: what the client expects from its
    /// own session (`None`: it cannot know: an op of unknown outcome came before, or its
    /// transaction had failed), and what it got, where.
    Object {
        client: usize,
        op: Op,
        kind: Kind,
        expected: Option<Reply>,
        got: Reply,
        backend: Option<BackendId>,
    },
    /// A `show` read a setting: what the client expects from its own session (`None`: it
    /// cannot know, an op of unknown outcome came before), and what it read, where.
    Shown {
        client: usize,
        guc: Guc,
        expected: Option<String>,
        shown: String,
        backend: Option<BackendId>,
    },
}

/// The settings a client expects its session to have, from its own ops and replies, as if
/// its connection were its own backend (what an application assumes).
#[derive(Clone, Debug, Default)]
struct Expect {
    settings: SessionSettings,
    /// Its transaction failed: it ends as a rollback.
    aborted: bool,
    /// Settings an op of unknown outcome may have changed.
    unsure: BTreeSet<Guc>,
    /// Its named objects, as its own session would have them.
    objects: SessionObjects,
    /// Its protocol-level statements prepared so far (the latest is the one it executes).
    proto: u32,
    /// Objects an op of unknown outcome may have changed.
    unsure_objects: BTreeSet<Kind>,
}

impl Expect {
    /// The client's op `op` completed with `reply` (`unknown`: no reply in time).
    fn complete(
        &mut self,
        c: usize,
        op: Op,
        setting: Option<(Guc, u64)>,
        reply: &Reply,
        unknown: bool,
    ) {
        if ends_connection(reply) || matches!(op, Op::Disconnect | Op::Reconnect | Op::Release) {
            // A new connection, a new session.
            *self = Expect::default();
            return;
        }
        if unknown {
            self.unsure.extend(Guc::ALL);
            self.unsure_objects.extend(Kind::ALL);
            return;
        }
        if reply.is_error() {
            if reply.code() != Some(code::RAISED) && self.settings.at_begin.is_some() {
                self.aborted = true;
            }
            return;
        }
        match (op, setting) {
            (Op::Begin, _) => {
                self.settings.begin();
                self.objects.begin();
                self.aborted = false;
            }
            (Op::Commit | Op::Rollback, _) => {
                self.settings.end(op == Op::Commit && !self.aborted);
                self.objects.end(op == Op::Commit && !self.aborted);
                self.aborted = false;
            }
            (Op::DiscardAll, _) => {
                self.settings.discard_all();
                self.unsure.clear();
                self.objects.discard_all();
                self.unsure_objects.clear();
            }
            (Op::Set, Some((g, v))) => {
                self.settings.set(g, v);
                if self.settings.at_begin.is_none() {
                    self.unsure.remove(&g);
                }
            }
            (Op::SetLocal, Some((g, v))) => self.settings.set_local(g, v),
            (Op::Reset, Some((g, _))) => {
                self.settings.reset(g);
                if self.settings.at_begin.is_none() {
                    self.unsure.remove(&g);
                }
            }
            (op, _) => {
                if let Some((kind, role)) = op.object() {
                    let at = slot(kind, c);
                    match role {
                        Role::Create => {
                            if kind.per_client() {
                                self.proto += 1;
                            }
                            let nth = if kind.per_client() { self.proto } else { 0 };
                            let _ = self.objects.create(at, Obj { creator: c, nth });
                        }
                        Role::Drop => {
                            let _ = self.objects.drop(at);
                        }
                        Role::Use => {}
                    }
                }
            }
        }
    }

    /// What the client expects an object op to reply, from its own session: `None` when it
    /// cannot know.
    fn expects(&self, c: usize, op: Op) -> Option<Reply> {
        let (kind, role) = op.object()?;
        if self.aborted || self.unsure_objects.contains(&kind) {
            return None;
        }
        let at = slot(kind, c);
        Some(match role {
            Role::Create if kind.per_client() => Reply::Ok,
            Role::Create => match self.objects.get(at) {
                Some(_) => Reply::error(kind.row().duplicate),
                None => Reply::Ok,
            },
            Role::Use => match self.objects.use_(at, self.proto) {
                Ok(o) => Reply::Text {
                    value: label_of(o.creator),
                },
                Err(code) => Reply::error(code),
            },
            Role::Drop => match self.objects.get(at) {
                Some(_) => Reply::Ok,
                None => Reply::error(kind.row().missing),
            },
        })
    }
}

/// Every client's beliefs, fed mark by mark.
#[derive(Clone, Debug, Default)]
pub struct Beliefs {
    narrow: Vec<View>,
    wide: Vec<View>,
    /// An unlock's belief at its invoke, by entry.
    unlocks: BTreeMap<usize, Option<Vec<BackendId>>>,
    /// Beliefs that have ended (either view): the key, the backends, and when it ended.
    past: Vec<(Key, BTreeSet<Option<BackendId>>, u64)>,
    /// The settings each client expects.
    expect: Vec<Expect>,
}

/// The beliefs of `before` that `after` no longer has, ended at `t`.
fn ended(
    before: &View,
    after: &View,
    t: u64,
    out: &mut Vec<(Key, BTreeSet<Option<BackendId>>, u64)>,
) {
    for (k, bl) in &before.beliefs {
        if bl.live() && !after.beliefs.get(k).is_some_and(Belief::live) {
            out.push((*k, bl.backends.clone(), t));
        }
    }
}

fn granted(op: Op, reply: &Reply) -> bool {
    matches!(reply, Reply::Bool { value: true })
        || (op.waits_for_lock() && matches!(reply, Reply::Ok))
}

/// The connection is gone after this reply: the client forgets what it held.
fn ends_connection(reply: &Reply) -> bool {
    reply.ended_by_server() || reply.is_closed()
}

impl Beliefs {
    pub fn new(clients: usize) -> Self {
        Beliefs {
            narrow: vec![View::default(); clients],
            wide: vec![View::default(); clients],
            unlocks: BTreeMap::new(),
            past: vec![],
            expect: vec![Expect::default(); clients],
        }
    }

    fn view(v: &mut Vec<View>, c: usize) -> &mut View {
        if v.len() <= c {
            v.resize(c + 1, View::default());
        }
        &mut v[c]
    }

    /// What `client` believes it holds now.
    pub fn of(&self, client: usize) -> impl Iterator<Item = (&Key, &Belief)> {
        self.narrow
            .get(client)
            .into_iter()
            .flat_map(|v| v.beliefs.iter())
    }

    /// Every live belief: `(client, key, belief)`.
    pub fn all(&self) -> impl Iterator<Item = (usize, &Key, &Belief)> {
        self.narrow
            .iter()
            .enumerate()
            .flat_map(|(c, v)| v.beliefs.iter().map(move |(k, b)| (c, k, b)))
    }

    /// Whether some client may hold `k` on `b` in the wide view (a grant on its way, a
    /// release not yet answered), or believes it does, now or at any moment since `since`
    /// (a look's interval began then).
    pub fn may_hold(&self, k: Key, b: BackendId, since: u64) -> bool {
        let on = |bs: &BTreeSet<Option<BackendId>>| bs.contains(&Some(b)) || bs.contains(&None);
        let has = |v: &View| {
            v.beliefs
                .get(&k)
                .is_some_and(|bl| bl.live() && on(&bl.backends))
        };
        self.wide.iter().any(has)
            || self.narrow.iter().any(has)
            || self
                .past
                .iter()
                .any(|(pk, bs, end)| *pk == k && *end >= since && on(bs))
    }

    /// An operation was invoked.
    pub fn invoke(&mut self, e: usize, entry: &Entry) {
        let Some((c, op, key, reply, served)) = client_op(entry) else {
            return;
        };
        if entry.unknown {
            // No completion will say what it did: any setting may have changed.
            if self.expect.len() <= c {
                self.expect.resize(c + 1, Expect::default());
            }
            self.expect[c].unsure.extend(Guc::ALL);
            self.expect[c].unsure_objects.extend(Kind::ALL);
        }
        let before = Self::view(&mut self.narrow, c).clone();
        self.invoke_narrow(e, entry, c, op, key, reply);
        ended(&before, &self.narrow[c], entry.inv, &mut self.past);
        self.invoke_wide(entry, c, op, key, reply, served);
    }

    fn invoke_narrow(
        &mut self,
        e: usize,
        _entry: &Entry,
        c: usize,
        op: Op,
        key: Option<Key>,
        reply: &Reply,
    ) {
        let n = Self::view(&mut self.narrow, c);
        match op {
            Op::Disconnect | Op::Reconnect | Op::Release => n.drop_all(),
            _ if ends_connection(reply) => {}
            Op::Unlock if !reply.is_error() => {
                let k = key.expect("unlock has a key");
                let believed = n
                    .beliefs
                    .get(&k)
                    .filter(|bl| bl.session > 0)
                    .map(Belief::granted_by);
                self.unlocks.insert(e, believed);
                n.unlock(k);
            }
            Op::UnlockAll if !reply.is_error() => n.drop_session(),
            Op::DiscardAll if !reply.is_error() => n.drop_session(),
            Op::Commit | Op::Rollback if !reply.is_error() => {
                n.drop_xact();
                n.in_tx = false;
            }
            _ if reply.is_error() && n.in_tx => n.drop_xact(),
            _ => {}
        }
    }

    fn invoke_wide(
        &mut self,
        entry: &Entry,
        c: usize,
        op: Op,
        key: Option<Key>,
        reply: &Reply,
        served: Option<BackendId>,
    ) {
        // The wide view counts a grant from its invoke (an unknown outcome may be one). A
        // waiting transaction-lock call that failed (lock_timeout, a cancel) may have been
        // granted in the instant its error was raised, and held the lock until its
        // transaction aborted with the error: a look during the call may see it (found as
        // app.no_orphans on transaction-mode-xact, concurrent, seed 2, case 31, 2026-12-07).
        // Its completion drops it (the error ends the statement and its transaction). A
        // session lock that survives its failed call is app.failed_lock_not_held's.
        let failed_wait = op == Op::XactLock
            && matches!(
                reply.code(),
                Some(code::LOCK_NOT_AVAILABLE) | Some(code::QUERY_CANCELED)
            );
        if op.acquires() && (granted(op, reply) || entry.unknown || failed_wait) {
            let w = Self::view(&mut self.wide, c);
            let session = matches!(op, Op::TryLock | Op::Lock);
            // A transaction lock outside a block too: it is held until its statement ends
            // (`complete_views` drops it then).
            let b = if entry.unknown { None } else { served };
            w.grant(key.expect("lock op has a key"), b, session, entry.inv);
        }
    }

    /// An operation completed at `t`: what the application saw.
    pub fn complete(&mut self, e: usize, entry: &Entry, t: u64) -> Vec<Seen> {
        let Some((c, ..)) = client_op(entry) else {
            return vec![];
        };
        let (n0, w0) = (
            Self::view(&mut self.narrow, c).clone(),
            Self::view(&mut self.wide, c).clone(),
        );
        let mut seen = self.complete_views(e, entry, t);
        ended(&n0, &self.narrow[c], t, &mut self.past);
        ended(&w0, &self.wide[c], t, &mut self.past);
        seen.extend(self.complete_settings(entry));
        seen
    }

    /// What a client expects of its settings, and a `show` judged against it.
    fn complete_settings(&mut self, entry: &Entry) -> Option<Seen> {
        let (c, op, _, reply, served) = client_op(entry)?;
        let setting = match &entry.act {
            Act::Stmt(st) => st.setting,
            _ => None,
        };
        if self.expect.len() <= c {
            self.expect.resize(c + 1, Expect::default());
        }
        let x = &mut self.expect[c];
        let mut seen = None;
        if let (Op::Show, Some((g, _)), Reply::Text { value }, false) =
            (op, setting, reply, entry.unknown)
        {
            seen = Some(Seen::Shown {
                client: c,
                guc: g,
                expected: (!x.unsure.contains(&g)).then(|| x.settings.shown(g)),
                shown: value.clone(),
                backend: served,
            });
        }
        if !entry.unknown
            && let Some((kind, _)) = op.object()
        {
            seen = Some(Seen::Object {
                client: c,
                op,
                kind,
                expected: x.expects(c, op),
                got: reply.clone(),
                backend: served,
            });
        }
        x.complete(c, op, setting, reply, entry.unknown);
        seen
    }

    fn complete_views(&mut self, e: usize, entry: &Entry, t: u64) -> Vec<Seen> {
        let mut seen = vec![];
        let Some((c, op, key, reply, served)) = client_op(entry) else {
            return seen;
        };
        let unlocked = self.unlocks.remove(&e);
        let n = Self::view(&mut self.narrow, c);
        let w = Self::view(&mut self.wide, c);
        if ends_connection(reply) {
            n.drop_all();
            w.drop_all();
            return seen;
        }
        match op {
            Op::Disconnect | Op::Reconnect | Op::Release => w.drop_all(),
            Op::Unlock if !reply.is_error() => {
                let k = key.expect("unlock has a key");
                w.unlock(k);
                seen.push(Seen::Unlocked {
                    client: c,
                    key: k,
                    believed: unlocked.flatten(),
                    ran: served,
                });
            }
            Op::UnlockAll | Op::DiscardAll if !reply.is_error() => w.drop_session(),
            Op::Commit | Op::Rollback if !reply.is_error() => {
                w.drop_xact();
                w.in_tx = false;
                if op == Op::Rollback {
                    seen.push(Seen::RolledBack {
                        client: c,
                        backend: served.or(n.tx_backend),
                        taken: std::mem::take(&mut n.tx_taken).into_iter().collect(),
                    });
                }
                n.tx_taken.clear();
                n.tx_backend = None;
            }
            Op::Begin if !reply.is_error() => {
                if !n.in_tx {
                    n.in_tx = true;
                    n.tx_backend = served;
                    n.tx_taken.clear();
                }
                w.in_tx = true;
            }
            _ if reply.is_error() && w.in_tx => w.drop_xact(),
            _ => {}
        }
        // A transaction lock taken outside a block ended with its statement.
        if op.acquires() && !matches!(op, Op::TryLock | Op::Lock) && !w.in_tx {
            w.drop_xact();
        }
        if op.acquires() && granted(op, reply) {
            let k = key.expect("lock op has a key");
            let session = matches!(op, Op::TryLock | Op::Lock);
            if (session || n.in_tx)
                && let Some(b) = served
            {
                n.grant(k, Some(b), session, t);
                seen.push(Seen::Granted {
                    client: c,
                    key: k,
                    backend: b,
                });
            }
        }
        // A failed call in a transaction ends it for the application.
        if reply.is_error() && reply.code() != Some(code::RAISED) && n.in_tx {
            n.drop_xact();
        }
        seen
    }
}

/// A client's op as the client saw it: `(client, op, key, reply, served)`.
type ClientOp<'a> = (usize, Op, Option<Key>, &'a Reply, Option<BackendId>);

fn client_op<'a>(entry: &'a Entry) -> Option<ClientOp<'a>> {
    static OK: Reply = Reply::Ok;
    match &entry.act {
        Act::Stmt(s) => Some((s.client, s.op, s.key, s.reply, s.served)),
        Act::Disconnect { client } => Some((*client, Op::Disconnect, None, &OK, None)),
        Act::Reconnect { client, .. } => Some((*client, Op::Reconnect, None, &OK, None)),
        Act::Release { client } => Some((*client, Op::Release, None, &OK, None)),
        _ => None,
    }
}
