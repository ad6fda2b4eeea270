//! The on-disk encoding of observations: most steps change one or two rows of an
//! observation, so the writer stores only what changed since the previous observation of
//! the file, and the reader puts the whole observation back. In memory (and for the checker)
//! an observation is always whole.
//!
//! A delta names, per table that changed, the order of its rows by key (backends by
//! `(pid, backend_start)`, pooler connections by the pooler's handle) and the rows that are new or
//! different; an unchanged table is absent; `SHOW POOLS` is written whole when it changed.

use super::observation::{BackendRow, ClientRow, Observation, PoolRow, ServerRow};
use crate::vocab::BackendId;
use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

/// One table's change: the keys in order, and the rows that are new or changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableDelta<K, R> {
    pub order: Vec<K>,
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<R>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObsDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<TableDelta<BackendId, BackendRow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<TableDelta<String, ServerRow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<TableDelta<String, ClientRow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<PoolRow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pool: Option<Option<super::observation::AppPoolRow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated: Option<Option<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Option<super::observation::LookTime>>,
}

fn server_id(r: &ServerRow) -> String {
    r.id.clone()
}

fn client_id(r: &ClientRow) -> String {
    r.id.clone()
}

fn table<K: PartialEq + Clone, R: PartialEq + Clone>(
    prev: &[R],
    next: &[R],
    key: impl Fn(&R) -> K,
) -> Option<TableDelta<K, R>> {
    if prev == next {
        return None;
    }
    let rows = next
        .iter()
        .filter(|r| !prev.iter().any(|p| key(p) == key(r) && p == *r))
        .cloned()
        .collect();
    Some(TableDelta {
        order: next.iter().map(&key).collect(),
        rows,
    })
}

fn apply<K: PartialEq + std::fmt::Debug, R: Clone>(
    prev: &[R],
    d: &TableDelta<K, R>,
    key: impl Fn(&R) -> K,
) -> Result<Vec<R>> {
    d.order
        .iter()
        .map(|k| {
            d.rows
                .iter()
                .find(|r| key(r) == *k)
                .or_else(|| prev.iter().find(|r| key(r) == *k))
                .cloned()
                .ok_or_else(|| {
                    anyhow!(
                        "a delta names row {k:?}, which neither it nor the previous observation has"
                    )
                })
        })
        .collect()
}

impl ObsDelta {
    /// What changed from `prev` to `next` (`None` when nothing did).
    pub fn between(prev: &Observation, next: &Observation) -> Option<ObsDelta> {
        let d = ObsDelta {
            backends: table(&prev.backends, &next.backends, |b| b.id),
            servers: table(&prev.servers, &next.servers, server_id),
            clients: table(&prev.clients, &next.clients, client_id),
            pools: (prev.pools != next.pools).then(|| next.pools.clone()),
            app_pool: (prev.app_pool != next.app_pool).then_some(next.app_pool),
            migrated: (prev.migrated != next.migrated).then_some(next.migrated),
            outside: (prev.outside != next.outside).then(|| next.outside.clone()),
            server: (prev.server != next.server).then_some(next.server),
        };
        (d != ObsDelta::default()).then_some(d)
    }

    /// `prev` with this delta applied.
    pub fn apply(&self, prev: &Observation) -> Result<Observation> {
        Ok(Observation {
            backends: match &self.backends {
                Some(d) => apply(&prev.backends, d, |b| b.id)?,
                None => prev.backends.clone(),
            },
            servers: match &self.servers {
                Some(d) => apply(&prev.servers, d, server_id)?,
                None => prev.servers.clone(),
            },
            clients: match &self.clients {
                Some(d) => apply(&prev.clients, d, client_id)?,
                None => prev.clients.clone(),
            },
            pools: self.pools.clone().unwrap_or_else(|| prev.pools.clone()),
            app_pool: self.app_pool.unwrap_or(prev.app_pool),
            migrated: self.migrated.unwrap_or(prev.migrated),
            outside: self.outside.clone().unwrap_or_else(|| prev.outside.clone()),
            server: self.server.unwrap_or(prev.server),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::observation::LockRow;
    use crate::vocab::Key;
    use std::collections::BTreeMap;

    fn row(pid: i32, state: &str, keys: &[i64]) -> BackendRow {
        BackendRow {
            id: BackendId {
                pid,
                start_us: pid as i64,
            },
            backend_start: "x".into(),
            state: state.into(),
            query: format!("q{pid}"),
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
    fn raw(p: &str, state: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("ptr".to_string(), p.to_string()),
            ("state".to_string(), state.to_string()),
        ])
    }
    fn conn(p: &str, state: &str) -> ServerRow {
        crate::pooler::pgbouncer::view::server(raw(p, state))
    }
    fn client(p: &str, state: &str) -> ClientRow {
        crate::pooler::pgbouncer::view::client(raw(p, state))
    }
    fn pool(waiting: &str) -> PoolRow {
        crate::pooler::pgbouncer::view::pool(BTreeMap::from([(
            "cl_waiting".to_string(),
            waiting.to_string(),
        )]))
    }

    #[test]
    fn deltas_carry_only_changed_rows_and_restore_the_whole() {
        let a = Observation {
            backends: vec![row(1, "idle", &[7]), row(2, "idle", &[])],
            servers: vec![conn("0x1", "idle"), conn("0x2", "idle")],
            clients: vec![client("0xa", "active")],
            pools: vec![pool("1")],
            ..Default::default()
        };
        assert_eq!(ObsDelta::between(&a, &a), None);
        // One backend changes, one server goes, a new one comes, order changes.
        let b = Observation {
            backends: vec![row(2, "active", &[8]), row(1, "idle", &[7])],
            servers: vec![conn("0x3", "active"), conn("0x1", "idle")],
            clients: a.clients.clone(),
            pools: vec![pool("2")],
            migrated: Some(1),
            ..Default::default()
        };
        let d = ObsDelta::between(&a, &b).unwrap();
        assert_eq!(
            d.backends.as_ref().unwrap().rows.len(),
            1,
            "only the changed row"
        );
        assert_eq!(
            d.servers.as_ref().unwrap().rows.len(),
            1,
            "only the new row"
        );
        assert!(d.clients.is_none(), "an unchanged table is absent");
        assert_eq!(d.apply(&a).unwrap(), b);
        // Round trip through JSON.
        let j = serde_json::to_string(&d).unwrap();
        let back: ObsDelta = serde_json::from_str(&j).unwrap();
        assert_eq!(back.apply(&a).unwrap(), b);
        // A delta against the wrong predecessor is refused, not guessed.
        assert!(d.apply(&Observation::default()).is_err());
    }
}
