//! `app.notifications_arrive`, from the history: what each client expects of `LISTEN` as if
//! its connection were its own backend, against the notifications it received.
//!
//! A client *listens* from the completion of its `LISTEN` (inside a transaction block: of
//! the `COMMIT` that committed it) until it invokes `UNLISTEN`, `DISCARD ALL`, a disconnect
//! or reconnect, or an op whose outcome is unknown; its connection ends with a reply saying
//! the server closed it. A `NOTIFY` is committed at its own statement outside a block, or at
//! the sender's `COMMIT` (not at a rollback, nor at the COMMIT of an aborted block).
//!
//! - A client that listened before a notification's commit began, and still listens at the
//!   case's end outside a transaction block (PostgreSQL holds notifications back while its
//!   listener is inside one), must have received it: the case's end waits for notifications
//!   on their way (`run::NOTIFY_SETTLE`).
//! - A client that never invoked `LISTEN` on its connection must receive none.
//! - Anything else (a client that listened and then stopped, one inside a block at the end,
//!   a commit of unknown outcome) is unknown for that pair, shown as the case's `undecided`.

use super::model::{Act, Entry, Stmt};
use super::search::Mark;
use super::{CaseCheck, Violation};
use crate::vocab::Op;
use crate::vocab::notify::Note;
use std::collections::BTreeSet;

pub const NAME: &str = "app.notifications_arrive";

/// One client's view of its own connection.
#[derive(Clone, Debug, Default)]
struct View {
    /// Listening since this time (ns), with the step of its `LISTEN`.
    listening: Option<(u64, usize)>,
    /// Inside a transaction block (its own replies say so), and whether it is aborted.
    block: bool,
    aborted: bool,
    /// A `LISTEN` (`true`) or `UNLISTEN` in the open block, with the `LISTEN`'s step.
    pending: Option<(bool, usize)>,
    /// `NOTIFY`s in the open block.
    notes: Vec<Note>,
    /// It invoked `LISTEN` on this connection.
    asked: bool,
    /// It invoked `LISTEN` at some time in the case.
    ever: bool,
    /// An op of unknown outcome left its listening unknown.
    unsure: bool,
}

impl View {
    fn new_connection(&mut self) {
        let ever = self.ever;
        *self = View {
            ever,
            ..View::default()
        };
    }

    /// At the invoke of its statement `st` (entry `e`): a LISTEN was asked for on this
    /// connection; an op of unknown outcome (it has no completion) leaves the client unsure
    /// from here on. Returns whether it is a COMMIT of unknown outcome with NOTIFYs in its
    /// block (notifications that may have been committed).
    fn invoked(&mut self, e: &Entry, st: &Stmt) -> bool {
        let mut maybe = false;
        if st.op == Op::Listen {
            self.asked = true;
            self.ever = true;
        }
        if e.unknown {
            self.unsure = true;
            self.listening = None;
            if st.op == Op::Commit && !self.notes.is_empty() {
                maybe = true;
            }
        }
        maybe
    }

    /// At the completion of its statement `st` (entry `e`): what its reply does to the
    /// connection, its block and its listening, with the notifications it committed added to
    /// `committed`.
    fn completed(&mut self, e: &Entry, st: &Stmt, committed: &mut Vec<Committed>) {
        if e.unknown {
            return;
        }
        if st.reply.ended_by_server() || st.reply.is_closed() {
            // Its connection is gone (what it received on it may still be written
            // after this: `asked` stays).
            let asked = self.asked;
            self.new_connection();
            self.asked = asked;
            return;
        }
        let done = e.done.unwrap_or(e.inv);
        let step = e.step.unwrap_or(0);
        if st.reply.is_error() {
            if self.block && st.op != Op::Commit && st.op != Op::Rollback {
                self.aborted = true;
            }
            return;
        }
        match st.op {
            Op::Begin => {
                self.block = true;
                self.aborted = false;
            }
            Op::Commit | Op::Rollback => self.end_block(st.op, e.inv, done, committed),
            Op::Listen | Op::Unlisten => {
                let on = st.op == Op::Listen;
                if self.block {
                    self.pending = Some((on, step));
                } else if !on {
                    self.listening = None;
                } else if self.listening.is_none() {
                    self.listening = Some((done, step));
                }
            }
            Op::DiscardAll => self.listening = None,
            Op::Notify => {
                let n = st.note.unwrap_or((st.client, step));
                if self.block {
                    self.notes.push(n);
                } else {
                    committed.push(Committed {
                        note: n,
                        from: e.inv,
                        to: done,
                    });
                }
            }
            _ => {}
        }
    }

    /// A COMMIT or ROLLBACK (`op`) that succeeded, invoked at `inv` and done at `done`: a
    /// commit applies the block's LISTEN or UNLISTEN and commits its NOTIFYs (added to
    /// `committed`); either way the block ends.
    fn end_block(&mut self, op: Op, inv: u64, done: u64, committed: &mut Vec<Committed>) {
        if op_commits(op, self.aborted) {
            match self.pending.take() {
                Some((true, s)) if self.listening.is_none() => {
                    self.listening = Some((done, s));
                }
                Some((false, _)) => self.listening = None,
                Some((true, _)) | None => {}
            }
            for n in self.notes.drain(..) {
                committed.push(Committed {
                    note: n,
                    from: inv,
                    to: done,
                });
            }
        }
        self.pending = None;
        self.notes.clear();
        self.block = false;
        self.aborted = false;
    }
}

/// A committed notification: who sent it, and its commit's interval.
struct Committed {
    note: Note,
    from: u64,
    to: u64,
}

/// Judge the case's notifications into `out` (violations, and `undecided` when some pair
/// could not be judged), reading the case's marks in real-time order.
pub fn judge(entries: &[Entry], marks: &[(Mark, u64)], out: &mut CaseCheck) {
    let clients = entries
        .iter()
        .filter_map(|e| match &e.act {
            Act::Stmt(s) => Some(s.client + 1),
            Act::Notified { client, .. } => Some(client + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if !entries
        .iter()
        .any(|e| matches!(&e.act, Act::Stmt(s) if s.op == Op::Listen || s.op == Op::Notify))
    {
        return;
    }
    let mut views = vec![View::default(); clients];
    let mut committed: Vec<Committed> = vec![];
    // Notifications that may have been committed (a COMMIT of unknown outcome).
    let mut maybe = false;
    let mut received: Vec<BTreeSet<Note>> = vec![BTreeSet::new(); clients];
    let mut violations: Vec<Violation> = vec![];
    for (mark, _) in marks {
        let (id, completes) = match *mark {
            Mark::Invoke(id) => (id, false),
            Mark::Complete(id) => (id, true),
        };
        let e = &entries[id];
        if !completes {
            // At its invoke: a LISTEN was asked for on this connection; an op of unknown
            // outcome (it has no completion) leaves the client unsure from here on.
            if let Act::Stmt(st) = &e.act
                && views[st.client].invoked(e, st)
            {
                maybe = true;
            }
            continue;
        }
        match &e.act {
            Act::Connect { client, .. }
            | Act::Disconnect { client }
            | Act::Reconnect { client, .. }
            | Act::Release { client } => {
                if let Some(v) = views.get_mut(*client) {
                    v.new_connection();
                }
            }
            Act::Notified {
                client,
                backend,
                note,
                payload,
                ..
            } => {
                let v = &views[*client];
                if let Some(n) = note {
                    received[*client].insert(*n);
                }
                if !v.asked {
                    let on = backend.map(|b| format!(" on {b}")).unwrap_or_default();
                    violations.push(Violation {
                        invariant: NAME.into(),
                        step: note.map(|n| n.1).unwrap_or(0),
                        detail: format!(
                            "C{} received a notification it never listened for: {payload:?}{on} (its connection sent no LISTEN)",
                            client + 1
                        ),
                    });
                }
            }
            Act::Stmt(st) => views[st.client].completed(e, st, &mut committed),
            _ => {}
        }
    }
    let mut undecided = maybe && views.iter().any(|v| v.ever);
    if judge_listeners(&views, &committed, &received, &mut violations) {
        undecided = true;
    }
    let violated = !violations.is_empty();
    out.violations.extend(violations);
    if undecided && !violated && !out.undecided.iter().any(|u| u == NAME) {
        out.undecided.push(NAME.into());
    }
}

/// Judges each client at the case's end against the `committed` notifications: one still
/// listening outside a block must have `received` every notification committed after it
/// began to listen (a violation added to `violations` otherwise). Returns whether some pair
/// of a client and a notification could not be judged.
fn judge_listeners(
    views: &[View],
    committed: &[Committed],
    received: &[BTreeSet<Note>],
    violations: &mut Vec<Violation>,
) -> bool {
    let mut undecided = false;
    for (c, v) in views.iter().enumerate() {
        // Still listening at the end, outside a block: every notification committed after
        // it began to listen has reached it.
        let stays = v.listening.filter(|_| !v.block && !v.unsure);
        for n in committed {
            match stays {
                Some((since, step)) if since <= n.from && !received[c].contains(&n.note) => {
                    violations.push(Violation {
                        invariant: NAME.into(),
                        step: n.note.1,
                        detail: format!(
                            "C{} listened (step {}) and stayed, but never received C{}'s notification {:?} (step {}, committed by {:.3} ms)",
                            c + 1,
                            step + 1,
                            n.note.0 + 1,
                            crate::vocab::notify::payload(n.note.0, n.note.1),
                            n.note.1 + 1,
                            n.to as f64 / 1e6
                        ),
                    });
                }
                // Expected, and received.
                Some((since, _)) if since <= n.from => {}
                // It began to listen while the NOTIFY committed.
                Some((since, _)) if since < n.to => undecided = true,
                Some(_) => {}
                // It listened at some point and did not stay: it may or may not have heard.
                None if v.ever => undecided = true,
                None => {}
            }
        }
    }
    undecided
}

/// A COMMIT of a block that is not aborted commits; a ROLLBACK never does.
fn op_commits(op: Op, aborted: bool) -> bool {
    op == Op::Commit && !aborted
}
