//! The model's looks: a snapshot of PostgreSQL (`pg_locks` joined with `pg_stat_activity`)
//! or of the pooler, judged against a state.

use super::*;

impl<'e> Case<'e> {
    // ----- looks -----

    pub(super) fn read(&self, s: &State, obs: &Observation, part: Part) -> Result<(), Why> {
        if part.postgres() {
            self.read_postgres(s, obs)?;
        }
        if part.pooler() {
            self.read_pooler(s, obs)?;
        }
        Ok(())
    }

    pub(super) fn read_postgres(&self, s: &State, obs: &Observation) -> Result<(), Why> {
        let mut seen: BTreeSet<BackendId> = BTreeSet::new();
        for row in &obs.backends {
            seen.insert(row.id);
            let granted: Vec<Key> = row
                .locks
                .iter()
                .filter(|l| l.granted)
                .map(|l| l.key)
                .collect();
            let waiting = row.locks.iter().find(|l| !l.granted).map(|l| l.key);
            match s.backends.get(&row.id) {
                None => {
                    if !granted.is_empty() {
                        return Err(Why::Rows {
                            backend: row.id,
                            model: vec![],
                            seen: granted,
                        });
                    }
                    if waiting.is_some() {
                        return Err(Why::Waiting {
                            backend: row.id,
                            model: None,
                            seen: waiting,
                        });
                    }
                }
                Some(x) => match x.life {
                    Life::Alive | Life::Closing(_) => {
                        let model: Vec<Key> = x.keys().into_iter().collect();
                        let mut g = granted.clone();
                        g.sort();
                        g.dedup();
                        if model != g {
                            return Err(Why::Rows {
                                backend: row.id,
                                model,
                                seen: g,
                            });
                        }
                        if x.waiting() != waiting {
                            return Err(Why::Waiting {
                                backend: row.id,
                                model: x.waiting(),
                                seen: waiting,
                            });
                        }
                    }
                    Life::Exiting(_) => {
                        if !granted.iter().all(|k| x.releasing.contains(k)) {
                            return Err(Why::Rows {
                                backend: row.id,
                                model: vec![],
                                seen: granted,
                            });
                        }
                    }
                    Life::Gone(cause) => {
                        return Err(Why::StillThere {
                            backend: row.id,
                            cause,
                        });
                    }
                },
            }
        }
        for (id, x) in &s.backends {
            if x.life.holds() && !seen.contains(id) {
                return Err(Why::Missing { backend: *id });
            }
        }
        Ok(())
    }

    pub(super) fn read_pooler(&self, s: &State, obs: &Observation) -> Result<(), Why> {
        // The pooler's own list: a server it dropped when it was killed, crashed or restarted
        // cannot be in it (the observer's console connection is the process's since).
        for row in &obs.servers {
            let Some(pid) = row.pid else {
                continue;
            };
            let mut same = s.backends.iter().filter(|(id, _)| id.pid == pid);
            if let (Some((id, x)), None) = (same.next(), same.next())
                && let Some(Cause::Fault(op)) = x.life.cause()
                && meaning(op).is_some_and(|m| m.by == By::Pooler && m.ends == Ends::All)
            {
                return Err(Why::Listed {
                    backend: *id,
                    fault: op,
                });
            }
        }
        Ok(())
    }
}

/// A look that shows one key held by two backends is wrong in every state.
pub fn exclusion(obs: &Observation) -> Option<Why> {
    let mut by_key: BTreeMap<Key, Vec<BackendId>> = BTreeMap::new();
    for (b, k) in obs.held() {
        by_key.entry(k).or_default().push(b);
    }
    by_key
        .into_iter()
        .find(|(_, v)| v.len() > 1)
        .map(|(key, backends)| Why::Exclusion { key, backends })
}
