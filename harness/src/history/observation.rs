//! What the servers said at one moment, as recorded: `pg_locks JOIN pg_stat_activity` rows
//! of the client role, and the pooler's view of its connections (`crate::pooler::view`: its
//! server and client connections and pools in common words, each with the pooler's own row).

pub use crate::pooler::view::{ClientRow, PoolRow, PoolerRow, ServerRow, ServerState};
use crate::vocab::{BackendId, Key};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One advisory lock row of `pg_locks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRow {
    pub key: Key,
    pub mode: String,
    pub granted: bool,
}

/// One backend of the client role, from `pg_stat_activity`, with its advisory locks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendRow {
    pub id: BackendId,
    /// `backend_start` as PostgreSQL prints it (for people; `id` carries it in microseconds).
    pub backend_start: String,
    pub state: String,
    /// The first 32 characters of its last query (carries the step tag).
    pub query: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xact_start: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<LockRow>,
    /// Concurrent samples: what it waits for (`Lock` / `advisory`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_event: Option<String>,
    /// Concurrent samples: `pg_blocking_pids()` of a backend waiting on a lock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<i32>,
}

impl BackendRow {
    /// Inside a transaction block (open or aborted).
    pub fn in_transaction(&self) -> bool {
        self.state.starts_with("idle in transaction")
    }

    /// Inside an open (not aborted) transaction block.
    pub fn in_open_transaction(&self) -> bool {
        self.state == "idle in transaction"
    }
}

/// A snapshot of the servers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendRow>,
    /// The pooler's server connections of the harness database.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerRow>,
    /// The pooler's client connections of the harness database.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<ClientRow>,
    /// The pooler's pools of the harness database (when read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolRow>,
    /// The application-side pool, when the topology has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pool: Option<AppPoolRow>,
    /// At a case's end: how many times migration version 1 was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated: Option<u32>,
    /// When an op was overdue: what a new connection to PostgreSQL as the client role got
    /// (`connected`, or the refusal, e.g. `53300 too many clients already`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<String>,
    /// When PostgreSQL read `backends` (absent in histories recorded before 2026-12-07).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<LookTime>,
}

/// When a look read PostgreSQL, by PostgreSQL's own clock (`clock_timestamp()`, Unix
/// microseconds): the look's statement reads `pg_stat_activity` (which backends are listed,
/// their state and query) between `lo` and `mid`, and `pg_locks` (their locks) between `mid`
/// and `hi` (`sql::look`: one `UNION ALL`, whose parts PostgreSQL runs in order). Two reads,
/// each consistent in itself: a backend may exit, or a lock be granted, between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookTime {
    /// `pg_postmaster_start_time()` in Unix microseconds: which clock (as in
    /// [`crate::vocab::ServerTime::clock`]).
    pub clock: i64,
    pub lo: i64,
    pub mid: i64,
    pub hi: i64,
}

impl LookTime {
    /// When `pg_stat_activity` was read.
    pub fn activity(&self) -> crate::vocab::ServerTime {
        crate::vocab::ServerTime {
            clock: self.clock,
            lo: Some(self.lo),
            hi: Some(self.mid),
        }
    }
    /// When `pg_locks` was read.
    pub fn locks(&self) -> crate::vocab::ServerTime {
        crate::vocab::ServerTime {
            clock: self.clock,
            lo: Some(self.mid),
            hi: Some(self.hi),
        }
    }
}

/// The application-side pool's state (deadpool's status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppPoolRow {
    pub max_open: u32,
    /// Connections open.
    pub size: u32,
    /// Of those, idle in the pool.
    pub idle: u32,
    /// Callers waiting for a connection.
    pub waiting: u32,
}

impl Observation {
    /// Granted advisory locks as `(backend, key)`.
    pub fn held(&self) -> BTreeSet<(BackendId, Key)> {
        self.backends
            .iter()
            .flat_map(|b| {
                b.locks
                    .iter()
                    .filter(|l| l.granted)
                    .map(move |l| (b.id, l.key))
            })
            .collect()
    }

    /// Keys this backend holds (granted).
    pub fn keys_of(&self, id: BackendId) -> Vec<Key> {
        self.backend(id)
            .map(|b| {
                b.locks
                    .iter()
                    .filter(|l| l.granted)
                    .map(|l| l.key)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn backend(&self, id: BackendId) -> Option<&BackendRow> {
        self.backends.iter().find(|b| b.id == id)
    }

    pub fn alive(&self, id: BackendId) -> bool {
        self.backend(id).is_some()
    }

    /// The backend whose last query starts with `tag`.
    pub fn ran(&self, tag: &str) -> Option<BackendId> {
        self.backends
            .iter()
            .find(|b| b.query.starts_with(tag))
            .map(|b| b.id)
    }

    /// The pooler's server connection to a backend pid.
    pub fn server_of(&self, pid: i32) -> Option<&ServerRow> {
        self.servers.iter().find(|s| s.pid == Some(pid))
    }

    /// Where the pooler's server connection to a backend pid is in the pool.
    pub fn server_state(&self, pid: i32) -> Option<ServerState> {
        self.server_of(pid).map(|s| s.state)
    }

    /// Servers linked to a client.
    pub fn linked_servers(&self) -> usize {
        self.servers
            .iter()
            .filter(|s| s.state == ServerState::Linked)
            .count()
    }

    /// A server connection is logging in or resetting.
    pub fn pooler_busy(&self) -> bool {
        self.servers.iter().any(|s| s.state == ServerState::Busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn row(pid: i32, state: &str, keys: &[i64]) -> BackendRow {
        BackendRow {
            id: BackendId {
                pid,
                start_us: pid as i64 * 10,
            },
            backend_start: String::new(),
            state: state.into(),
            query: format!("/*pgchaos s{pid}*/ SELECT"),
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

    #[test]
    fn held_keys_and_lookups() {
        let mut o = Observation {
            backends: vec![row(1, "idle", &[7, 8]), row(2, "idle in transaction", &[])],
            ..Default::default()
        };
        o.backends[0].locks.push(LockRow {
            key: Key::Big(9),
            mode: "ExclusiveLock".into(),
            granted: false,
        });
        let b1 = o.backends[0].id;
        assert_eq!(o.held().len(), 2, "a waiting row is not held");
        assert_eq!(o.keys_of(b1), vec![Key::Big(7), Key::Big(8)]);
        assert_eq!(o.ran("/*pgchaos s2*/"), Some(o.backends[1].id));
        assert!(o.backends[1].in_open_transaction() && o.backends[1].in_transaction());
        assert!(!o.backends[0].in_transaction());
        o.servers
            .push(crate::pooler::pgbouncer::view::server(BTreeMap::from([
                ("remote_pid".to_string(), "2".to_string()),
                ("state".to_string(), "active".to_string()),
            ])));
        assert_eq!(o.server_state(2), Some(ServerState::Linked));
        assert_eq!(o.server_state(1), None);
        assert_eq!(o.linked_servers(), 1);
    }
}
