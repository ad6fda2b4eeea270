//! The pooler's hand in the model: the servers a statement may run on (linked, handed out,
//! new), and whether one can be handed to a client.

use super::*;

impl<'e> Case<'e> {
    /// The backends statement `st` may run on, with the state after the pooler assigned it.
    pub(super) fn assign(
        &self,
        s: &State,
        e: usize,
        st: &Stmt,
    ) -> Result<Vec<(State, BackendId)>, Why> {
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
                // A statement sent before the drain's signal may have been handed its server
                // before PgBouncer read the signal: it runs, and the server closes at release.
                Down::Draining => {
                    self.pooled()
                        && !s
                            .idle_fault
                            .is_some_and(|(f, t)| f == fault && entry.inv < t)
                }
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
    pub(super) fn new_server(
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

    pub(super) fn assignable(
        &self,
        s: &State,
        c: usize,
        b: BackendId,
        x: &Backend,
    ) -> Result<(), Why> {
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
}
