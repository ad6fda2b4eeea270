//! The model as the search's [`Spec`]: a point's successors, a point forced where the model
//! rejects it, the moves servers make on their own, and the timers.

use super::*;

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
                self.fault(s, *op, *target, reply, point, (entry.inv, by))
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
                or,
                note,
                payload,
                ..
            } => self.notified(s, (*backend, *or), *note, payload),
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
                        self.fault(s, *op, *target, &ok, point, (entry.inv, by))
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
            out.extend(self.releasing_one(s, *id, x));
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
