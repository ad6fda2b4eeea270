//! The model's looks: a snapshot of PostgreSQL (`pg_locks` joined with `pg_stat_activity`)
//! or of the pooler, judged against a state.

use super::*;

impl<'e> Case<'e> {
    // ----- looks -----

    pub(super) fn read(&self, s: &State, obs: &Observation, part: Part) -> Result<(), Why> {
        if part.postgres() {
            self.read_postgres(s, obs, part.activity(), part.locks())?;
        }
        if part.pooler() {
            self.read_pooler(s, obs)?;
        }
        Ok(())
    }

    /// PostgreSQL's rows: which backends are listed (`activity`: none the model has gone, every
    /// one it has holding its locks), and their locks (`locks`: as the model has them).
    pub(super) fn read_postgres(
        &self,
        s: &State,
        obs: &Observation,
        activity: bool,
        locks: bool,
    ) -> Result<(), Why> {
        let mut seen: BTreeSet<BackendId> = BTreeSet::new();
        for row in &obs.backends {
            seen.insert(row.id);
            let x = s.backends.get(&row.id);
            if activity && let Some(Life::Gone(cause)) = x.map(|x| x.life) {
                return Err(Why::StillThere {
                    backend: row.id,
                    cause,
                });
            }
            if locks {
                row_locks(x, row)?;
            }
        }
        if activity {
            for (id, x) in &s.backends {
                if x.life.holds() && !seen.contains(id) {
                    return Err(Why::Missing { backend: *id });
                }
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
            // PostgreSQL's pids repeat (a restarted host starts them again): the look's
            // pg_stat_activity naming another backend with this pid says which one it is.
            let another =
                |id: &BackendId| obs.backends.iter().any(|r| r.id.pid == pid && r.id != *id);
            if let (Some((id, x)), None) = (same.next(), same.next())
                && !another(id)
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

/// One listed backend's locks against the model's backend `x` (none: one it has not heard of).
fn row_locks(x: Option<&Backend>, row: &crate::history::BackendRow) -> Result<(), Why> {
    let granted: Vec<Key> = row
        .locks
        .iter()
        .filter(|l| l.granted)
        .map(|l| l.key)
        .collect();
    let waiting = row.locks.iter().find(|l| !l.granted).map(|l| l.key);
    let rows = |model: Vec<Key>, seen: Vec<Key>| Why::Rows {
        backend: row.id,
        model,
        seen,
    };
    let waits = |model: Option<Key>| Why::Waiting {
        backend: row.id,
        model,
        seen: waiting,
    };
    match x.map(|x| (x, x.life)) {
        // Not heard of yet, or gone by the time pg_locks was read (listed before): no locks.
        None | Some((_, Life::Gone(_))) => {
            if !granted.is_empty() {
                return Err(rows(vec![], granted));
            }
            if waiting.is_some() {
                return Err(waits(None));
            }
        }
        Some((x, Life::Alive | Life::Closing(_))) => {
            let model: Vec<Key> = x.keys().into_iter().collect();
            let mut g = granted.clone();
            g.sort();
            g.dedup();
            if model != g {
                return Err(rows(model, g));
            }
            if x.waiting() != waiting {
                return Err(waits(x.waiting()));
            }
        }
        Some((x, Life::Exiting(_))) => {
            if !granted.iter().all(|k| x.releasing.contains(k)) {
                return Err(rows(vec![], granted));
            }
        }
    }
    Ok(())
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
