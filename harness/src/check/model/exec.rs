//! One statement's effect on its backend ([`exec`]): what PostgreSQL answers and which keys
//! it releases.

use super::*;

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
        return (Some(in_failed_transaction(x, op, call)), released);
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
            end_transaction(x, op, &mut released);
            Some(Reply::Ok)
        }
        (Op::DiscardAll, _) => Some(discard_all(x, &mut released)),
        (op, _) if op.object().is_some() => Some(object_op(x, op, call)),
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

/// PostgreSQL's answer to `op` in a failed transaction (neither COMMIT nor ROLLBACK): an
/// error, and nothing done.
fn in_failed_transaction(x: &Backend, op: Op, call: Call) -> Reply {
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
        return Reply::error(kind.row().missing);
    }
    Reply::error(code::IN_FAILED_TRANSACTION)
}

/// A COMMIT or ROLLBACK (`op`) on backend `x`: the transaction's locks released (added to
/// `released`), its settings and objects kept or undone, its LISTENs and NOTIFYs applied on
/// commit only, and the backend idle.
fn end_transaction(x: &mut Backend, op: Op, released: &mut Vec<Key>) {
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
}

/// DISCARD ALL on backend `x`: refused inside a transaction; else every session lock
/// released (added to `released`), settings, objects and listening reset.
fn discard_all(x: &mut Backend, released: &mut Vec<Key>) -> Reply {
    if x.tx == Tx::Open {
        Reply::error(code::ACTIVE_TRANSACTION)
    } else {
        released.extend(x.session.keys().copied());
        x.session.clear();
        x.tainted.clear();
        x.settings.discard_all();
        x.objects.discard_all();
        // DISCARD ALL runs UNLISTEN *.
        x.listening = false;
        Reply::Ok
    }
}

/// An object op (`vocab::object`: create, use or drop) on backend `x`: its reply, a use's
/// being the label of the object's creator.
fn object_op(x: &mut Backend, op: Op, call: Call) -> Reply {
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
    match (r, role) {
        (Err(code), _) => Reply::error(code),
        (Ok(()), Role::Use) => Reply::Text {
            value: label_of(if call.carries(kind) {
                call.client
            } else {
                x.objects.get(at).map(|o| o.creator).unwrap_or(call.client)
            }),
        },
        (Ok(()), _) => Reply::Ok,
    }
}
