//! The model's statements: running a call at one or two points (the server it runs on:
//! `assign.rs`), and what an unknown, closed or ended statement may have done.

use super::*;

impl<'e> Case<'e> {
    // ----- statements -----

    pub(super) fn stmt(&self, s: &State, e: usize, st: &Stmt, point: u8, points: u8) -> Out {
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
            Conn::Down
                if st.reply.is_error() && st.served.is_none() && !st.reply.ran_a_statement() =>
            {
                // The connect before it failed (the reply is the refusal). An error only a
                // statement gives (a cancel's 57014 before the identity row of a BEGIN, say)
                // ran on a server the new connection was handed: it is judged below.
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

    pub(super) fn check_runnable(&self, s: &State, b: BackendId) -> Result<(), Why> {
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
    pub(super) fn call(&self, s: &State, e: usize, st: &Stmt) -> Call {
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
    pub(super) fn notify_contended(&self, e: usize, client: usize) -> bool {
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
    pub(super) fn stmt_once(&self, mut s: State, e: usize, st: &Stmt, b: BackendId) -> Out {
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
        let (_, released) = self.exec_checked(&mut s, e, st, b)?;
        if st.op == Op::Migrate && st.reply.is_error() {
            abort(s.backends.get_mut(&b).expect("assigned"));
        }
        self.touch(&mut s, e, b);
        self.after_statement(&mut s, e, st.client, b);
        Ok(wake_all(s, &released))
    }

    /// Run statement `e`'s call on backend `b` ([`exec`]) and hold PostgreSQL's answer, as
    /// the model predicts it, against the recorded reply. Returns whether the key was free
    /// to `b`, and the keys the call released.
    fn exec_checked(
        &self,
        s: &mut State,
        e: usize,
        st: &Stmt,
        b: BackendId,
    ) -> Result<(bool, Vec<Key>), Why> {
        let available = st.key.is_none_or(|k| s.available_to(b, k));
        let holders: Vec<BackendId> = st
            .key
            .map(|k| s.holders(k).into_iter().filter(|x| *x != b).collect())
            .unwrap_or_default();
        let call = self.call(s, e, st);
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
        Ok((available, released))
    }

    /// Timers: when the backend was last used, when its transaction began.
    pub(super) fn touch(&self, s: &mut State, e: usize, b: BackendId) {
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
    pub(super) fn after_statement(&self, s: &mut State, e: usize, c: usize, b: BackendId) {
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
    pub(super) fn restore_tracked(&self, s: &mut State, c: usize, b: BackendId) {
        if !self.pooled() || self.rules.tracked_settings.is_empty() {
            return;
        }
        let tracked = s.clients[c].tracked;
        if let Some(x) = s.backends.get_mut(&b) {
            tracked.restore(&self.rules.tracked_settings, &mut x.settings);
        }
    }

    /// A server went back to the pool.
    pub(super) fn released(&self, s: &mut State, b: BackendId) {
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
    pub(super) fn stmt_start(&self, mut s: State, e: usize, st: &Stmt, b: BackendId) -> Out {
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
        if st.op == Op::TryXactLock && matches!(st.reply, Reply::Bool { .. }) {
            return self.try_xact_start(s, e, st, b);
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

    /// The first point of an answered `pg_try_advisory_xact_lock`: its call. Granted, the
    /// lock is held to the end of the transaction, and outside a block that is the end of the
    /// statement, its second point ([`Case::stmt_end`]).
    fn try_xact_start(&self, mut s: State, e: usize, st: &Stmt, b: BackendId) -> Out {
        let outside = s.backends[&b].tx != Tx::Open;
        let (available, _) = self.exec_checked(&mut s, e, st, b)?;
        let x = s.backends.get_mut(&b).expect("assigned");
        if outside
            && available
            && let Some(k) = st.key
        {
            bump(&mut x.xact, k);
        }
        x.busy = Some(Busy {
            entry: e as u32,
            lock: None,
            waited: false,
            granted: available,
            cancelled: false,
        });
        s.client(st.client).linked = Some(b);
        Ok(vec![s])
    }

    /// The second point: the statement is answered.
    pub(super) fn stmt_end(&self, s: &State, e: usize, st: &Stmt) -> Out {
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
            (false, Reply::Bool { .. }) if st.op == Op::TryXactLock => {
                // Outside a block, the implicit transaction ends with the statement.
                if busy.granted
                    && x.tx != Tx::Open
                    && let Some(k) = st.key
                {
                    unbump(&mut x.xact, k);
                    released.push(k);
                }
                outs.push(s);
            }
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
            (false, Reply::Ok) if st.op.releases_all() => {
                // The keys it had not released yet between its points, and the rest of its
                // effect.
                released.extend(self.exec_checked(&mut s, e, st, b)?.1);
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

    /// Between the points of a statement that releases a scope's locks
    /// ([`Op::releases_all`]) running on backend `id`: it has released one more of them, any
    /// one (PostgreSQL's `LockReleaseAll` goes one lock partition at a time, waking each key's
    /// waiters as it goes). Nothing when it would release fewer than two.
    pub(super) fn releasing_one(&self, s: &State, id: BackendId, x: &Backend) -> Vec<State> {
        let Some(busy) = x.busy else {
            return vec![];
        };
        let e = busy.entry as usize;
        let Act::Stmt(st) = &self.entries[e].act else {
            return vec![];
        };
        if !st.op.releases_all() || self.points_of(&self.entries[e]) != 2 || !x.life.is_alive() {
            return vec![];
        }
        let mut done = x.clone();
        let (_, mut keys) = exec(&mut done, st, self.call(s, e, st), true);
        keys.sort();
        keys.dedup();
        if keys.len() < 2 {
            return vec![];
        }
        let mut out = vec![];
        for k in keys {
            let mut s2 = s.clone();
            let y = s2.backends.get_mut(&id).expect("listed");
            for (now, after) in [(&mut y.session, &done.session), (&mut y.xact, &done.xact)] {
                match after.get(&k) {
                    Some(n) => now.insert(k, *n),
                    None => now.remove(&k),
                };
            }
            if !done.tainted.contains(&k) {
                y.tainted.remove(&k);
            }
            out.extend(wake_all(s2, &[k]));
        }
        out
    }

    pub(super) fn statement_timeout(&self, st: &Stmt) -> bool {
        self.timer(Timer::CancelLongStatement)
            .zip(st.took)
            .is_some_and(|(t, took)| took >= t)
    }

    /// A statement whose outcome is unknown (no reply in time): whatever it may have done.
    /// (That it may have done nothing is the search's: an unknown operation's points may be
    /// skipped.)
    pub(super) fn stmt_unknown(
        &self,
        s: &State,
        e: usize,
        st: &Stmt,
        point: u8,
        points: u8,
    ) -> Out {
        let c = st.client;
        if points == 2 && point == 1 {
            return self.unknown_end(s, e);
        }
        let mut out = vec![];
        if self.entries[e].orphaned && self.pooled() && points == 1 {
            out.extend(self.orphan_run(s, st));
        }
        // A client whose connection was closed opens a new one with this statement: if that
        // connect succeeded, the statement may have run there (that it did not is the
        // search's: an unknown operation's points may be skipped).
        let mut opened;
        let s = match s.clients.get(c).map(|x| x.conn) {
            Some(Conn::Up) => s,
            Some(Conn::Down) if points == 1 || point == 0 => {
                opened = s.clone();
                opened.clients[c].conn = Conn::Up;
                opened.clients[c].linked = None;
                &opened
            }
            _ => {
                return if out.is_empty() {
                    Err(Why::EndUnexplained)
                } else {
                    Ok(out)
                };
            }
        };
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
    pub(super) fn closed(&self, s: &State, e: usize, st: &Stmt) -> Vec<State> {
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
    pub(super) fn client_leaves(&self, s: &State, c: usize, in_flight: bool) -> Vec<State> {
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
    pub(super) fn note_in_flight(&self, s: &State, c: usize) -> bool {
        s.clients
            .get(c)
            .and_then(|x| x.linked)
            .and_then(|b| s.backends.get(&b))
            .is_some_and(|x| !x.inbox.is_empty())
    }

    /// The pooler closed client `c` at a Bind of a statement it forgot
    /// ([`Client::proto_forgotten`]), and the server it had handed it for the Bind.
    pub(super) fn forgotten_closed(&self, s: &State, c: usize) -> Vec<State> {
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
    pub(super) fn orphan_run(&self, s: &State, st: &Stmt) -> Vec<State> {
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
    pub(super) fn unknown_end(&self, s: &State, e: usize) -> Out {
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
    pub(super) fn ended(&self, s: &State, _e: usize, st: &Stmt) -> Out {
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
            || (cl.linked.is_none() && matches!(s.down, Some((Down::Draining, _))))
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
    pub(super) fn client_gone(&self, s: &State, c: usize, cause: Cause) -> State {
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
}
