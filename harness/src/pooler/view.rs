//! What a pooler says of its connections, in words every pooler can fill in: its server
//! connections (to which backend, linked to a client, idle in the pool, busy logging in or
//! resetting, marked to close), its client connections (linked, idle, waiting for a server)
//! and its pools' counts. Each pooler turns its own admin views into these rows (PgBouncer:
//! `SHOW SERVERS` / `SHOW CLIENTS` / `SHOW POOLS`, in `pgbouncer/view.rs`) and keeps its own
//! row beside them (`raw`) as the evidence; observe, plan, check and report read only the
//! normalized words.
//!
//! Histories of format 1 hold only the raw rows: a row that is a plain map of strings is read
//! by the reader the pooler seam names for them ([`super::FORMAT_1_ROWS`], see [`Wire`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A row of a pooler's admin view as it printed it (selected columns).
pub type PoolerRow = BTreeMap<String, String>;

/// Where a server connection is in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Linked to a client: it serves that client's statements (PgBouncer `active`).
    Linked,
    /// In the pool, free for the next client that needs one (PgBouncer `idle`, `used`).
    Idle,
    /// Neither: logging in, or running the pooler's reset or check query (PgBouncer `login`,
    /// `new`, `tested`). The observer waits until no server is busy before a look counts.
    Busy,
    /// A state the words above do not cover (PgBouncer's cancel states): not linked, not
    /// free, not busy.
    Other,
}

/// One server connection of the pooler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire<ServerFields>")]
pub struct ServerRow {
    /// The pooler's handle for the connection, unique among its connections (PgBouncer
    /// `ptr`).
    pub id: String,
    /// The PostgreSQL backend pid at the other end, when the pooler knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub state: ServerState,
    /// The client connection it is linked to ([`ClientRow::id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Marked to be closed when it is released (PgBouncer `close_needed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closing: bool,
    /// Which replica of the pooler lists it (`replicas:`; 0 for the first or only one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replica: u8,
    /// The pooler's own row (the evidence).
    #[serde(default)]
    pub raw: PoolerRow,
}

/// Where a client connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientState {
    /// Connected; linked to a server when [`ClientRow::server`] says so.
    Active,
    /// Waiting for a server (the pool has none free).
    Waiting,
    /// Logging in, or anything else the pooler reports.
    Other,
}

/// One client connection of the pooler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire<ClientFields>")]
pub struct ClientRow {
    pub id: String,
    pub state: ClientState,
    /// The server it is linked to ([`ServerRow::id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How long it has waited for a server, when it waits (microseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_us: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replica: u8,
    #[serde(default)]
    pub raw: PoolerRow,
}

/// One pool's counts (the harness's database and role).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire<PoolFields>")]
pub struct PoolRow {
    /// Clients waiting for a server.
    pub clients_waiting: u32,
    /// Servers linked to clients.
    pub servers_linked: u32,
    /// Servers free in the pool.
    pub servers_idle: u32,
    /// The longest wait of a waiting client (microseconds).
    pub longest_wait_us: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replica: u8,
    #[serde(default)]
    pub raw: PoolerRow,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// What one look at a pooler's admin views gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Look {
    pub servers: Vec<ServerRow>,
    pub clients: Vec<ClientRow>,
    /// Empty unless asked for.
    pub pools: Vec<PoolRow>,
}

impl Look {
    /// Add replica `k`'s look: its rows marked with `k`, their handles prefixed `k:` (two
    /// replicas' handles may coincide).
    pub fn merge(&mut self, k: u8, other: Look) {
        let tag = |id: String| format!("{k}:{id}");
        self.servers.extend(other.servers.into_iter().map(|mut r| {
            r.replica = k;
            r.id = tag(r.id);
            r.client = r.client.map(tag);
            r
        }));
        self.clients.extend(other.clients.into_iter().map(|mut r| {
            r.replica = k;
            r.id = tag(r.id);
            r.server = r.server.map(tag);
            r
        }));
        self.pools.extend(other.pools.into_iter().map(|mut r| {
            r.replica = k;
            r
        }));
    }
}

/// A row on disk: the normalized fields (format 2), or a format-1 history's raw row.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Wire<T> {
    Fields(T),
    Raw(PoolerRow),
}

/// How one pooler's raw rows read in the common words: the reader of a format-1 history's
/// rows ([`super::FORMAT_1_ROWS`]).
pub struct RawRows {
    pub server: fn(PoolerRow) -> ServerRow,
    pub client: fn(PoolerRow) -> ClientRow,
    pub pool: fn(PoolerRow) -> PoolRow,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFields {
    id: String,
    #[serde(default)]
    pid: Option<i32>,
    state: ServerState,
    #[serde(default)]
    client: Option<String>,
    #[serde(default)]
    closing: bool,
    #[serde(default)]
    replica: u8,
    raw: PoolerRow,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFields {
    id: String,
    state: ClientState,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    waiting_us: Option<u64>,
    #[serde(default)]
    replica: u8,
    raw: PoolerRow,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFields {
    clients_waiting: u32,
    servers_linked: u32,
    servers_idle: u32,
    longest_wait_us: u64,
    #[serde(default)]
    replica: u8,
    raw: PoolerRow,
}

impl From<Wire<ServerFields>> for ServerRow {
    fn from(w: Wire<ServerFields>) -> ServerRow {
        match w {
            Wire::Fields(f) => ServerRow {
                id: f.id,
                pid: f.pid,
                state: f.state,
                client: f.client,
                closing: f.closing,
                replica: f.replica,
                raw: f.raw,
            },
            Wire::Raw(raw) => (super::FORMAT_1_ROWS.server)(raw),
        }
    }
}

impl From<Wire<ClientFields>> for ClientRow {
    fn from(w: Wire<ClientFields>) -> ClientRow {
        match w {
            Wire::Fields(f) => ClientRow {
                id: f.id,
                state: f.state,
                server: f.server,
                waiting_us: f.waiting_us,
                replica: f.replica,
                raw: f.raw,
            },
            Wire::Raw(raw) => (super::FORMAT_1_ROWS.client)(raw),
        }
    }
}

impl From<Wire<PoolFields>> for PoolRow {
    fn from(w: Wire<PoolFields>) -> PoolRow {
        match w {
            Wire::Fields(f) => PoolRow {
                clients_waiting: f.clients_waiting,
                servers_linked: f.servers_linked,
                servers_idle: f.servers_idle,
                longest_wait_us: f.longest_wait_us,
                replica: f.replica,
                raw: f.raw,
            },
            Wire::Raw(raw) => (super::FORMAT_1_ROWS.pool)(raw),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written_and_a_format_1_row_as_pgbouncer_s() {
        let row = ServerRow {
            id: "0x1".into(),
            pid: Some(7),
            state: ServerState::Linked,
            client: Some("0x2".into()),
            closing: true,
            replica: 1,
            raw: PoolerRow::from([("state".to_string(), "active".to_string())]),
        };
        let text = serde_json::to_string(&row).unwrap();
        assert_eq!(serde_json::from_str::<ServerRow>(&text).unwrap(), row);
        // Format 1: PgBouncer's columns only.
        let old: ServerRow = serde_json::from_str(
            r#"{"ptr":"0x9","state":"idle","remote_pid":"41","link":"","close_needed":"0"}"#,
        )
        .unwrap();
        assert_eq!(
            (old.id.as_str(), old.pid, old.state, old.client, old.closing),
            ("0x9", Some(41), ServerState::Idle, None, false)
        );
        assert_eq!(old.raw.get("remote_pid").map(String::as_str), Some("41"));
        let pool: PoolRow =
            serde_json::from_str(r#"{"cl_waiting":"3","sv_active":"2","sv_idle":"0","sv_used":"1","maxwait":"1","maxwait_us":"5"}"#)
                .unwrap();
        assert_eq!(
            (
                pool.clients_waiting,
                pool.servers_linked,
                pool.servers_idle,
                pool.longest_wait_us
            ),
            (3, 2, 1, 1_000_005)
        );
    }
}
