//! The sequential schedule's decisions, made from the op, the pooler's rules and the last
//! observation (never from the model, which belongs to the checker): whether a step can run
//! without waiting forever for a pooled server, what to wait for after it before observing,
//! and which keys the fresh contender probes at the boundary it crossed. Pure functions,
//! unit-tested on hand-made observations.

use crate::history::{AppPoolRow, Observation};
use crate::observe::Waits;
use crate::pooler::{PoolRules, ServerFate};
use crate::topology::Pin;
use crate::vocab::{BackendId, Key, Op, Reply};

/// What the runner knows of one logical client from its own replies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// Has a connection (through the pooler, or direct).
    pub connected: bool,
    /// The backend that served its last statement (the target of its terminate/cancel).
    pub last: Option<BackendId>,
    /// No other client's statement ran on `last` since (in a sequential schedule the server
    /// linked to a backend is linked to the client that ran on it last).
    pub latest_on_last: bool,
    /// Its linked server was terminated under it: its next statement fails at once.
    pub broken: bool,
}

/// Record that client `c` ran a statement on backend `b`.
pub fn served(slots: &mut [Slot], c: usize, b: BackendId) {
    for (i, s) in slots.iter_mut().enumerate() {
        if i == c {
            s.last = Some(b);
            s.latest_on_last = true;
        } else if s.last == Some(b) {
            s.latest_on_last = false;
        }
    }
}

/// Whether a client is linked to a server: it ran on that backend last, the backend is alive
/// and, behind a pooler, its server is `active` (linked) in `SHOW SERVERS`.
pub fn linked(rules: &PoolRules, slot: &Slot, obs: &Observation) -> bool {
    let Some(b) = slot.last.filter(|_| slot.connected && slot.latest_on_last) else {
        return false;
    };
    if rules.is_pooled() {
        obs.server_state(b.pid) == Some(crate::history::ServerState::Linked) && obs.alive(b)
    } else {
        obs.alive(b)
    }
}

/// `Some(reason)` when running `op` for client `c` now would wait forever for a pooled
/// server in a sequential schedule (every server linked to another client and the pool
/// full), so the step is skipped.
pub fn would_wait(
    rules: &PoolRules,
    slots: &[Slot],
    c: usize,
    op: Op,
    obs: &Observation,
) -> Option<String> {
    if !rules.is_pooled() || matches!(op, Op::Disconnect | Op::Reconnect) || op.is_fault() {
        return None;
    }
    let slot = &slots[c];
    if rules.links_at_connect && slot.connected {
        // It was handed its server when it connected.
        return None;
    }
    let needs_server = !slot.connected || !linked(rules, slot, obs);
    if !needs_server || slot.broken {
        return None;
    }
    // With one pooler its servers are the client role's backends; with replicas, the
    // servers the client's replica lists (each replica has its own pool).
    let (servers, linked) = if rules.replicas > 1 {
        let r = rules.replica_of(c) as u8;
        let mine = obs.servers.iter().filter(|s| s.replica == r);
        (
            mine.clone().count(),
            mine.filter(|s| s.state == crate::history::ServerState::Linked)
                .count(),
        )
    } else {
        (obs.backends.len(), obs.linked_servers())
    };
    let idle = servers.saturating_sub(linked);
    (idle == 0 && servers >= rules.pool_size).then(|| {
        format!(
            "pool exhausted: all {} servers are pinned by other clients, so C{} would wait for one forever in a sequential schedule",
            rules.pool_size,
            c + 1
        )
    })
}

/// `Some(reason)` when a fault of the servers would wait forever in a sequential schedule:
/// PgBouncer's PAUSE and safe shutdown (SIGINT) wait until every server is released, and a
/// client linked to one releases it only at its next steps.
pub fn fault_would_wait(
    rules: &PoolRules,
    slots: &[Slot],
    op: Op,
    obs: &Observation,
) -> Option<String> {
    if !crate::vocab::fault::meaning(op).is_some_and(|m| m.waits_for_release) {
        return None;
    }
    let linked: Vec<String> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| linked(rules, s, obs))
        .map(|(i, _)| format!("C{}", i + 1))
        .collect();
    (!linked.is_empty()).then(|| {
        format!(
            "{op} waits until every server is released, and {} keeps one linked until its next steps",
            linked.join(", ")
        )
    })
}

/// After a fault of the servers: the backends it ends (what the observation must no longer
/// show), the clients it breaks (their next statement fails), and the servers it marks to
/// close at release (`closing`), by [`crate::vocab::fault::meaning`] and the last look.
pub fn fault_waits(
    rules: &PoolRules,
    slots: &mut [Slot],
    op: Op,
    obs: &Observation,
    closing: &mut Vec<BackendId>,
) -> Waits {
    use crate::vocab::fault::{Breaks, Ends, meaning};
    let mut w = Waits::default();
    let Some(m) = meaning(op) else {
        return w;
    };
    let linked_to: Vec<Option<BackendId>> = slots
        .iter()
        .map(|s| s.last.filter(|_| linked(rules, s, obs)))
        .collect();
    let all: Vec<BackendId> = obs.backends.iter().map(|b| b.id).collect();
    w.gone = match m.ends {
        Ends::Nothing => vec![],
        Ends::All => all,
        Ends::IdleNowLinkedAtRelease => {
            let held: Vec<BackendId> = linked_to.iter().flatten().copied().collect();
            closing.extend(held.iter().copied());
            all.into_iter().filter(|b| !held.contains(b)).collect()
        }
    };
    for (slot, link) in slots.iter_mut().zip(&linked_to) {
        let breaks = match m.breaks {
            Breaks::Nothing => false,
            Breaks::AllClients => slot.connected,
            Breaks::OnEndedBackend => link.is_some_and(|b| w.gone.contains(&b)),
        };
        if breaks {
            slot.broken = true;
        }
    }
    w
}

/// A server a fault marked to close at release (`closing`) that this step may release is
/// closed instead: wait for it to be gone, unless it is still in a transaction (the runner
/// forgets it once an observation shows it gone).
pub fn close_at_release(w: &mut Waits, closing: &[BackendId]) {
    for list in [&mut w.released, &mut w.reset] {
        list.retain(|b| {
            if closing.contains(b) {
                w.closing.push(*b);
                false
            } else {
                true
            }
        });
    }
}

/// `Some(reason)` when a step would wait forever for an application-pool connection in a
/// sequential schedule: every connection is kept by a pinned client and this one keeps
/// none.
pub fn would_wait_for_app_pool(
    pool: &AppPoolRow,
    pin: Pin,
    holds: bool,
    c: usize,
    op: Op,
) -> Option<String> {
    let needs =
        !matches!(op, Op::Disconnect | Op::Reconnect) && !op.client_side() && !op.is_fault();
    (needs && pin == Pin::Session && !holds && pool.size >= pool.max_open && pool.idle == 0).then(|| {
        format!(
            "application pool exhausted: all {} connections are kept by other clients, so C{} would wait for one forever in a sequential schedule",
            pool.max_open,
            c + 1
        )
    })
}

/// What a client's disconnect does to its server, and the backend concerned.
pub fn disconnect_fate(
    rules: &PoolRules,
    slot: &Slot,
    obs: &Observation,
) -> (ServerFate, Option<BackendId>) {
    let is_linked = linked(rules, slot, obs);
    let b = slot.last.filter(|_| is_linked);
    let in_tx = b
        .and_then(|b| obs.backend(b))
        .is_some_and(|row| row.in_transaction());
    (rules.on_disconnect(is_linked, in_tx), b)
}

/// What to wait for after a disconnect.
pub fn disconnect_waits(fate: ServerFate, b: Option<BackendId>) -> Waits {
    let mut w = Waits::default();
    if let Some(b) = b {
        match fate {
            ServerFate::Closed => w.gone.push(b),
            ServerFate::Released { resets: true } => w.reset.push(b),
            ServerFate::Released { resets: false } => w.released.push(b),
            ServerFate::Untouched => {}
        }
    }
    w
}

/// What to wait for after a statement served by `served`: it has finished; where the pooler
/// releases a server whose transaction is over, it is back in the pool (after the reset
/// query, where one runs on release).
pub fn statement_waits(rules: &PoolRules, served: Option<BackendId>) -> Waits {
    let releases = rules.is_pooled() && !rules.stays_linked(false);
    let back = served.filter(|_| releases).into_iter().collect();
    let (released, reset) = if rules.resets_on_release() {
        (vec![], back)
    } else {
        (back, vec![])
    };
    Waits {
        quiet: served.into_iter().collect(),
        released,
        reset,
        gone: vec![],
        closing: vec![],
    }
}

/// The keys the fresh contender probes after a step: those of the backend whose ownership
/// changed at a boundary the step crossed, read from the observations before and after.
pub struct ProbeInput<'a> {
    pub op: Op,
    pub key: Option<Key>,
    pub reply: &'a Reply,
    /// The backend that ran the statement, or the fault's target.
    pub backend: Option<BackendId>,
    /// A disconnect closed this backend.
    pub closed: Option<BackendId>,
    pub before: &'a Observation,
    pub after: &'a Observation,
}

pub fn probe_keys(p: &ProbeInput) -> Vec<Key> {
    let mut keys: Vec<Key> = vec![];
    let mut add = |ks: Vec<Key>| {
        for k in ks {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    };
    let before_in_open_tx = p
        .backend
        .and_then(|b| p.before.backend(b))
        .is_some_and(|row| row.in_open_transaction());
    let released = |b: BackendId| -> Vec<Key> {
        let after = p.after.keys_of(b);
        p.before
            .keys_of(b)
            .into_iter()
            .filter(|k| !after.contains(k))
            .collect()
    };
    match (p.op, p.backend) {
        // The transaction's locks went; a ROLLBACK's session locks stayed.
        (Op::Commit, Some(b)) => add(released(b)),
        (Op::Rollback, Some(b)) => {
            add(p.before.keys_of(b));
            add(p.after.keys_of(b));
        }
        (Op::Unlock, Some(b)) => {
            // Still held after an unlock: the unlock left a count (stacking).
            if let Some(k) = p.key
                && p.after.keys_of(b).contains(&k)
            {
                add(vec![k]);
            }
        }
        (Op::Terminate | Op::Cancel, Some(t)) => add(p.before.keys_of(t)),
        _ => {}
    }
    // An error inside an open transaction aborted it: its transaction locks went.
    if p.reply.is_error()
        && before_in_open_tx
        && !matches!(p.op, Op::Commit | Op::Rollback)
        && let Some(b) = p.backend
    {
        add(released(b));
    }
    if let Some(b) = p.closed {
        add(p.before.keys_of(b));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{BackendRow, LockRow};
    use crate::pooler::PoolMode;
    use std::collections::BTreeMap;

    fn id(pid: i32) -> BackendId {
        BackendId {
            pid,
            start_us: pid as i64,
        }
    }
    fn row(pid: i32, state: &str, keys: &[i64]) -> BackendRow {
        BackendRow {
            id: id(pid),
            backend_start: String::new(),
            state: state.into(),
            query: String::new(),
            xact_start: None,
            wait_event_type: None,
            wait_event: None,
            blocked_by: vec![],
            locks: keys
                .iter()
                .map(|k| LockRow {
                    key: Key::Big(*k),
                    mode: "ExclusiveLock".into(),
                    granted: true,
                })
                .collect(),
        }
    }
    fn server(pid: i32, state: &str) -> crate::history::ServerRow {
        crate::pooler::pgbouncer::view::server(BTreeMap::from([
            ("remote_pid".to_string(), pid.to_string()),
            ("state".to_string(), state.to_string()),
        ]))
    }
    fn tx_rules(size: usize) -> PoolRules {
        PoolRules {
            mode: Some(PoolMode::Transaction),
            pool_size: size,
            reset_releases_locks: true,
            reset_clears_settings: true,
            reset_clears_role: true,
            reset_clears_objects: true,
            tracks_prepared: false,
            tracked_settings: vec![],
            reset_unlistens: true,
            reset_always: false,
            abort_on_disconnect: false,
            links_at_connect: false,
            closes_server_in_flight: false,
            restart_drains: false,
            login_failure_sticks: false,
            app_pin: None,
            replicas: 1,
        }
    }
    fn slot(last: i32) -> Slot {
        Slot {
            connected: true,
            last: Some(id(last)),
            latest_on_last: true,
            broken: false,
        }
    }

    #[test]
    fn a_step_that_would_wait_for_a_pooled_server_forever_is_skipped() {
        let rules = tx_rules(2);
        // C1 and C2 each hold a server inside a transaction; C3 needs one.
        let obs = Observation {
            backends: vec![
                row(1, "idle in transaction", &[]),
                row(2, "idle in transaction", &[]),
            ],
            servers: vec![server(1, "active"), server(2, "active")],
            ..Default::default()
        };
        let slots = [slot(1), slot(2), Slot::default()];
        assert!(would_wait(&rules, &slots, 2, Op::TryLock, &obs).is_some());
        assert!(
            would_wait(&rules, &slots, 0, Op::TryLock, &obs).is_none(),
            "C1 goes on in its own transaction"
        );
        assert!(would_wait(&rules, &slots, 2, Op::Disconnect, &obs).is_none());
        // A server back in the pool: C3 can have it.
        let mut freed = obs.clone();
        freed.servers[1] = server(2, "idle");
        assert!(would_wait(&rules, &slots, 2, Op::TryLock, &freed).is_none());
        // Direct: never.
        assert!(would_wait(&PoolRules::direct(), &slots, 2, Op::TryLock, &obs).is_none());
        // C3 ran on B2 before C2 took it into a transaction: B2's link is C2's, not C3's.
        let mut s3 = slots;
        served(&mut s3, 2, id(2));
        served(&mut s3, 1, id(2));
        assert!(!linked(&rules, &s3[2], &obs) && linked(&rules, &s3[1], &obs));
        assert!(would_wait(&rules, &s3, 2, Op::TryLock, &obs).is_some());
        // A broken client fails at once instead of waiting.
        let mut broken = slots;
        broken[2].broken = true;
        assert!(would_wait(&rules, &broken, 2, Op::TryLock, &obs).is_none());
    }

    #[test]
    fn a_client_handed_its_server_at_connect_never_waits_for_one() {
        // pgpool-II: every child is attached to a client; C3's child is one of them, though
        // no statement of C3's has named its backend yet.
        let rules = PoolRules {
            mode: Some(PoolMode::Session),
            links_at_connect: true,
            closes_server_in_flight: false,
            restart_drains: false,
            login_failure_sticks: false,
            ..tx_rules(2)
        };
        let obs = Observation {
            backends: vec![row(1, "idle", &[]), row(2, "idle", &[])],
            servers: vec![server(1, "active"), server(2, "active")],
            ..Default::default()
        };
        let fresh = Slot {
            connected: true,
            last: None,
            latest_on_last: false,
            broken: false,
        };
        let slots = [slot(1), fresh, Slot::default()];
        assert!(would_wait(&rules, &slots, 1, Op::TryLock, &obs).is_none());
        // Not connected: its connect waits for a child like any client's.
        assert!(would_wait(&rules, &slots, 2, Op::TryLock, &obs).is_some());
        let bouncer = PoolRules {
            links_at_connect: false,
            closes_server_in_flight: false,
            restart_drains: false,
            login_failure_sticks: false,
            ..rules
        };
        assert!(would_wait(&bouncer, &slots, 1, Op::TryLock, &obs).is_some());
    }

    #[test]
    fn a_disconnect_closes_a_server_left_in_a_transaction_and_releases_a_session_server() {
        let rules = tx_rules(2);
        let obs = Observation {
            backends: vec![row(1, "idle in transaction", &[7])],
            servers: vec![server(1, "active")],
            ..Default::default()
        };
        let (fate, b) = disconnect_fate(&rules, &slot(1), &obs);
        assert_eq!((fate, b), (ServerFate::Closed, Some(id(1))));
        assert_eq!(disconnect_waits(fate, b).gone, vec![id(1)]);
        let session = PoolRules {
            mode: Some(PoolMode::Session),
            ..tx_rules(4)
        };
        let idle = Observation {
            backends: vec![row(1, "idle", &[7])],
            servers: vec![server(1, "active")],
            ..Default::default()
        };
        let (fate, b) = disconnect_fate(&session, &slot(1), &idle);
        assert_eq!(fate, ServerFate::Released { resets: true });
        assert_eq!(disconnect_waits(fate, b).reset, vec![id(1)]);
        // Transaction mode outside a transaction: nothing is linked, nothing happens.
        let mut released = idle.clone();
        released.servers[0] = server(1, "idle");
        assert_eq!(
            disconnect_fate(&rules, &slot(1), &released).0,
            ServerFate::Untouched
        );
        // Direct: the session ends.
        let direct = Observation {
            backends: vec![row(1, "idle", &[])],
            ..Default::default()
        };
        assert_eq!(
            disconnect_fate(&PoolRules::direct(), &slot(1), &direct).0,
            ServerFate::Closed
        );
    }

    #[test]
    fn probes_follow_the_boundary_crossed() {
        let before = Observation {
            backends: vec![row(1, "idle in transaction", &[7, 8])],
            ..Default::default()
        };
        let after_commit = Observation {
            backends: vec![row(1, "idle", &[8])],
            ..Default::default()
        };
        let base = ProbeInput {
            op: Op::Commit,
            key: None,
            reply: &Reply::Ok,
            backend: Some(id(1)),
            closed: None,
            before: &before,
            after: &after_commit,
        };
        // A commit: the keys it released (7); 8 is a session lock that stays.
        assert_eq!(probe_keys(&base), vec![Key::Big(7)]);
        let rollback = ProbeInput {
            op: Op::Rollback,
            ..base
        };
        assert_eq!(probe_keys(&rollback), vec![Key::Big(7), Key::Big(8)]);
        // An unlock that leaves the key held (a count), and one that releases it.
        let unlock = ProbeInput {
            op: Op::Unlock,
            key: Some(Key::Big(8)),
            reply: &Reply::Bool { value: true },
            ..base
        };
        assert_eq!(probe_keys(&unlock), vec![Key::Big(8)]);
        let released = ProbeInput {
            key: Some(Key::Big(7)),
            ..unlock
        };
        assert!(probe_keys(&released).is_empty());
        // An error in an open transaction: the keys it released.
        let err = Reply::error("22012");
        let abort = ProbeInput {
            op: Op::FailStatement,
            key: None,
            reply: &err,
            ..base
        };
        assert_eq!(probe_keys(&abort), vec![Key::Big(7)]);
        // Plain lock ops probe nothing.
        let t = Reply::Bool { value: true };
        let lock = ProbeInput {
            op: Op::TryLock,
            key: Some(Key::Big(9)),
            reply: &t,
            ..base
        };
        assert!(probe_keys(&lock).is_empty());
        assert_eq!(
            statement_waits(&tx_rules(2), Some(id(1))),
            Waits {
                quiet: vec![id(1)],
                released: vec![id(1)],
                ..Default::default()
            }
        );
        let always = PoolRules {
            reset_always: true,
            ..tx_rules(2)
        };
        assert_eq!(statement_waits(&always, Some(id(1))).reset, vec![id(1)]);
        let session = PoolRules {
            mode: Some(PoolMode::Session),
            ..tx_rules(2)
        };
        assert!(statement_waits(&session, Some(id(1))).released.is_empty());
    }

    // -- faults of the servers --------------------------------------------------------------

    /// B1 in a transaction, linked to C1; B2 idle in the pool (C2 ran on it last); B3 idle,
    /// no client's.
    fn fault_scene() -> Observation {
        Observation {
            backends: vec![
                row(1, "idle in transaction", &[7]),
                row(2, "idle", &[8]),
                row(3, "idle", &[]),
            ],
            servers: vec![server(1, "active"), server(2, "idle"), server(3, "idle")],
            ..Default::default()
        }
    }

    /// C1 linked to B1, C2 last on B2 (released), C3 connected but never served, C4 not
    /// connected.
    fn fault_slots() -> [Slot; 4] {
        [
            slot(1),
            slot(2),
            Slot {
                connected: true,
                ..Slot::default()
            },
            Slot::default(),
        ]
    }

    #[test]
    fn pause_and_safe_restart_are_skipped_exactly_while_a_client_is_linked() {
        let rules = tx_rules(3);
        let obs = fault_scene();
        let slots = fault_slots();
        for op in [Op::PoolerPause, Op::PoolerRestart] {
            let why = fault_would_wait(&rules, &slots, op, &obs)
                .unwrap_or_else(|| panic!("{op}: C1 keeps B1 linked"));
            assert!(why.starts_with(&format!("{op} waits")), "{why}");
            assert!(why.contains("C1 keeps one linked"), "{why}");
            assert!(!why.contains("C2") && !why.contains("C3"), "{why}");
        }
        // Every other fault runs (and so does any other op).
        for op in Op::FAULTS
            .into_iter()
            .filter(|op| !matches!(op, Op::PoolerPause | Op::PoolerRestart))
            .chain([Op::Terminate, Op::TryLock, Op::Commit])
        {
            assert_eq!(fault_would_wait(&rules, &slots, op, &obs), None, "{op}");
        }
        // C1's server released: nothing linked, nothing to wait for.
        let mut released = obs.clone();
        released.servers[0] = server(1, "idle");
        released.backends[0] = row(1, "idle", &[7]);
        for op in [Op::PoolerPause, Op::PoolerRestart] {
            assert_eq!(
                fault_would_wait(&rules, &slots, op, &released),
                None,
                "{op}"
            );
        }
        // C1 disconnected, or another client ran on B1 after it: not C1's link.
        let mut gone = slots;
        gone[0].connected = false;
        assert_eq!(fault_would_wait(&rules, &gone, Op::PoolerPause, &obs), None);
        let mut moved = slots;
        served(&mut moved, 3, id(1));
        moved[3].connected = true;
        let why = fault_would_wait(&rules, &moved, Op::PoolerPause, &obs).unwrap();
        assert!(why.contains("C4 keeps") && !why.contains("C1"), "{why}");
        // Two linked clients are both named.
        let mut both = obs.clone();
        both.servers[1] = server(2, "active");
        let why = fault_would_wait(&rules, &slots, Op::PoolerRestart, &both).unwrap();
        assert!(why.contains("C1, C2 keeps one linked"), "{why}");
        // Session mode: a connected client keeps its server even between transactions.
        let session = PoolRules {
            mode: Some(PoolMode::Session),
            ..tx_rules(3)
        };
        let mut idle = released.clone();
        idle.servers[0] = server(1, "active");
        assert!(fault_would_wait(&session, &slots, Op::PoolerPause, &idle).is_some());
        assert!(fault_would_wait(&session, &slots, Op::PoolerReconnect, &idle).is_none());
    }

    #[test]
    fn fault_waits_end_break_and_mark_by_the_fault_meaning() {
        use crate::vocab::fault::{Breaks, Ends, meaning};
        let rules = tx_rules(3);
        let obs = fault_scene();
        let all = vec![id(1), id(2), id(3)];
        let broken = |slots: &[Slot]| -> Vec<usize> {
            (0..slots.len()).filter(|i| slots[*i].broken).collect()
        };

        // KILL (ends every backend, breaks every client connection).
        let mut slots = fault_slots();
        let mut closing = vec![];
        let w = fault_waits(&rules, &mut slots, Op::PoolerKill, &obs, &mut closing);
        assert_eq!(
            w,
            Waits {
                gone: all.clone(),
                ..Default::default()
            }
        );
        assert!(closing.is_empty());
        assert_eq!(broken(&slots), [0, 1, 2], "every connected client");

        // A PostgreSQL restart: every backend; only C1's connection, on an ended backend,
        // breaks (C2 is not linked: it gets a new server).
        for op in [Op::PgRestart, Op::PgCrash, Op::BackendKill, Op::LinkCut] {
            let mut slots = fault_slots();
            let w = fault_waits(&rules, &mut slots, op, &obs, &mut closing);
            assert_eq!(w.gone, all, "{op}");
            assert!(closing.is_empty(), "{op}");
            assert_eq!(broken(&slots), [0], "{op}");
        }

        // RECONNECT: the idle servers now, the linked one marked to close at release.
        for op in [Op::PoolerReconnect, Op::PoolerPause] {
            let mut slots = fault_slots();
            let mut closing = vec![id(9)];
            let w = fault_waits(&rules, &mut slots, op, &obs, &mut closing);
            assert_eq!(
                w,
                Waits {
                    gone: vec![id(2), id(3)],
                    ..Default::default()
                },
                "{op}"
            );
            assert_eq!(closing, [id(9), id(1)], "{op}: added to what was marked");
            assert!(broken(&slots).is_empty(), "{op}");
        }

        // Faults that end nothing wait for nothing and break nothing.
        for op in [
            Op::PoolerReload,
            Op::PoolerFreeze,
            Op::BackendFreeze,
            Op::LinkBlackhole,
            Op::LinkDelay,
            Op::Terminate,
            Op::Ping,
        ] {
            let mut slots = fault_slots();
            let mut closing = vec![];
            let w = fault_waits(&rules, &mut slots, op, &obs, &mut closing);
            assert_eq!(w, Waits::default(), "{op}");
            assert!(closing.is_empty() && broken(&slots).is_empty(), "{op}");
        }

        // Every fault, by its meaning.
        for op in Op::FAULTS {
            let m = meaning(op).unwrap();
            let mut slots = fault_slots();
            let mut closing = vec![];
            let w = fault_waits(&rules, &mut slots, op, &obs, &mut closing);
            let (gone, marked) = match m.ends {
                Ends::Nothing => (vec![], vec![]),
                Ends::All => (all.clone(), vec![]),
                Ends::IdleNowLinkedAtRelease => (vec![id(2), id(3)], vec![id(1)]),
            };
            assert_eq!((w.gone, closing), (gone, marked), "{op}");
            let want: &[usize] = match (m.breaks, m.ends) {
                (Breaks::Nothing, _) | (Breaks::OnEndedBackend, Ends::Nothing) => &[],
                (Breaks::OnEndedBackend, _) => &[0],
                (Breaks::AllClients, _) => &[0, 1, 2],
            };
            assert_eq!(broken(&slots), want, "{op}");
        }

        // Direct: every client on a live backend is on one that ended.
        let direct = Observation {
            backends: vec![row(1, "idle", &[7]), row(2, "idle", &[])],
            ..Default::default()
        };
        let mut slots = [slot(1), slot(2), Slot::default()];
        let w = fault_waits(
            &PoolRules::direct(),
            &mut slots,
            Op::PgRestart,
            &direct,
            &mut closing,
        );
        assert_eq!(w.gone, [id(1), id(2)]);
        assert_eq!(broken(&slots), [0, 1]);
    }

    #[test]
    fn a_server_marked_closing_is_awaited_gone_instead_of_released() {
        let closing = [id(1)];
        // Transaction mode: the statement releases B1, which closes instead.
        let mut w = statement_waits(&tx_rules(2), Some(id(1)));
        close_at_release(&mut w, &closing);
        assert_eq!(
            w,
            Waits {
                quiet: vec![id(1)],
                closing: vec![id(1)],
                ..Default::default()
            }
        );
        // Released through the reset query (server_reset_query_always): the same.
        let always = PoolRules {
            reset_always: true,
            ..tx_rules(2)
        };
        let mut w = statement_waits(&always, Some(id(1)));
        assert_eq!(w.reset, [id(1)]);
        close_at_release(&mut w, &closing);
        assert!(w.reset.is_empty() && w.released.is_empty());
        assert_eq!(w.closing, [id(1)]);
        // A server not marked is released as before.
        let mut w = statement_waits(&tx_rules(2), Some(id(2)));
        close_at_release(&mut w, &closing);
        assert_eq!((w.released, w.closing), (vec![id(2)], vec![]));
        // Session mode: a statement releases nothing; the client's disconnect does (reset).
        let session = PoolRules {
            mode: Some(PoolMode::Session),
            ..tx_rules(2)
        };
        let mut w = statement_waits(&session, Some(id(1)));
        close_at_release(&mut w, &closing);
        assert!(w.closing.is_empty());
        let mut w = disconnect_waits(ServerFate::Released { resets: true }, Some(id(1)));
        close_at_release(&mut w, &closing);
        assert_eq!((w.reset, w.closing), (vec![], vec![id(1)]));
        // A server the disconnect closes anyway stays awaited as gone.
        let mut w = disconnect_waits(ServerFate::Closed, Some(id(1)));
        close_at_release(&mut w, &closing);
        assert_eq!((w.gone, w.closing), (vec![id(1)], vec![]));
        // Several at once: only the marked ones move, in order.
        let mut w = Waits {
            released: vec![id(1), id(2), id(3)],
            reset: vec![id(4)],
            ..Default::default()
        };
        close_at_release(&mut w, &[id(3), id(4), id(1)]);
        assert_eq!(w.released, [id(2)]);
        assert!(w.reset.is_empty());
        assert_eq!(w.closing, [id(1), id(3), id(4)]);
    }
}
