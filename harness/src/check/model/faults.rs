//! The model's connections, signals and faults: connect, terminate, cancel, a backend's end,
//! and the fault kinds' meanings (`vocab::fault`).

use super::*;

impl<'e> Case<'e> {
    // ----- connections, signals, faults -----

    pub(super) fn connect(&self, s: &State, c: usize, reply: &Reply) -> Out {
        let mut s = s.clone();
        if reply.is_error() {
            s.client(c).conn = Conn::Down;
            s.clients[c].linked = None;
            return Ok(vec![s]);
        }
        if let Some((down, fault)) = s.down {
            let refused = match down {
                Down::Pooler | Down::Draining => self.pooled(),
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

    pub(super) fn terminate(&self, s: &State, target: BackendId, reply: &Reply, point: u8) -> Out {
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
    pub(super) fn end_backend(&self, s: &mut State, b: BackendId, cause: Cause) {
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

    pub(super) fn cancel(&self, s: &State, target: BackendId, reply: &Reply) -> Out {
        let signalled = *reply == (Reply::Bool { value: true });
        let mut s = found(s, Op::Cancel, target, signalled)?;
        if let Some(x) = s.backends.get_mut(&target)
            && let Some(b) = x.busy.as_mut()
        {
            b.cancelled = true;
        }
        Ok(vec![s])
    }

    pub(super) fn fault(
        &self,
        s: &State,
        op: Op,
        target: Option<BackendId>,
        reply: &Reply,
        point: u8,
        (sent, now): (u64, u64),
    ) -> Out {
        let Some(m) = meaning(op) else {
            return Ok(vec![s.clone()]);
        };
        let timed_out = reply.code() == Some(code::TIMEOUT);
        // A draining fault's first point is its drain; the rest as for any other.
        let point = match (self.drains(op), point) {
            (false, p) => p,
            (true, 0) => {
                // Its signal was sent after `sent`: a server handed out before (a client
                // waiting for one is handed it in the loop before the signal is read) may
                // run its statement during the drain.
                let mut s = s.clone();
                close_idle_mark_linked(&mut s, op, timed_out, sent);
                s.down = Some((Down::Draining, op));
                return Ok(vec![s]);
            }
            (true, p) => p - 1,
        };
        if point == 1 {
            let mut s = s.clone();
            if self.rules.login_failure_sticks
                && matches!(m.down, Some(Down::Postgres | Down::Paused))
            {
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
        let mut released: Vec<Key> = vec![];
        let mut ended: Vec<BackendId> = vec![];
        match m.ends {
            Ends::Nothing => {}
            Ends::IdleNowLinkedAtRelease => close_idle_mark_linked(&mut s, op, timed_out, now),
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
        if m.drops_logins && self.rules.login_failure_sticks {
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
}

/// Fault `op` ends every pooled backend not linked to a client now, and marks a linked or
/// busy one to close at its release (not where the fault's start timed out: it may not have
/// happened); a server handed out just before may be found linked after all
/// ([`State::idle_fault`]).
fn close_idle_mark_linked(s: &mut State, op: Op, timed_out: bool, now: u64) {
    let cause = Cause::Fault(op);
    let linked: BTreeSet<BackendId> = s.clients.iter().filter_map(|c| c.linked).collect();
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
