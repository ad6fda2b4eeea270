//! Why a point cannot be placed in a state ([`Why`]), what it says, and which invariant it
//! breaks.

use super::*;

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
            Why::Notification { backend, payload } => notification(*backend, payload),
            Why::Probe {
                key,
                available,
                holders,
                after,
            } => probe(*key, *available, holders, *after),
        }
    }
}

/// A notification from `backend` (if known) that no listening backend explains, in words.
fn notification(backend: Option<BackendId>, payload: &str) -> String {
    match backend {
        Some(b) => format!(
            "{b} was not listening on {} when the NOTIFY of {payload:?} committed, or had passed it on already",
            crate::vocab::notify::CHANNEL
        ),
        None => format!(
            "no backend was listening on {} when the NOTIFY of {payload:?} committed",
            crate::vocab::notify::CHANNEL
        ),
    }
}

/// A contender's probe of `key` that disagreed with the model (`available`: what it found;
/// `holders`: who holds the key in the model), in words.
fn probe(key: Key, available: bool, holders: &[BackendId], after: Option<Op>) -> String {
    format!(
        "{}a fresh contender {} key {} (expected {}{})",
        after.map(|o| format!("after {o}: ")).unwrap_or_default(),
        if available {
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
    )
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
