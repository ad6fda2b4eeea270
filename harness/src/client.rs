//! One logical client through the pooler (or direct): its connection, and the exact reply
//! and serving backend of each op it runs.

use crate::key::Key;
use crate::launch::IO_TIMEOUT;
use crate::op::Op;
use crate::sql;
use futures_util::{StreamExt, pin_mut};
use serde::{Deserialize, Serialize};
use std::fmt;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

/// A PostgreSQL backend's identity: a pid alone can be reused, `(pid, backend_start)` cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BackendId {
    pub pid: i32,
    /// `backend_start` in microseconds since the Unix epoch.
    pub start_us: i64,
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} started {}", self.pid, self.start_us)
    }
}

/// What an op returned, at the level the model predicts (error messages are kept for
/// people but not compared).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Bool {
        value: bool,
    },
    Ok,
    /// `code` is the SQLSTATE, or `closed` (connection gone), or `timeout`.
    Error {
        code: String,
        message: String,
    },
    /// Not executed; `reason` says why (e.g. the pool has no server free and a sequential
    /// schedule would wait forever; no backend to terminate yet).
    Skipped {
        reason: String,
    },
}

impl Reply {
    pub fn error(code: &str) -> Reply {
        Reply::Error {
            code: code.into(),
            message: String::new(),
        }
    }

    /// Equal as the model sees it: kind, boolean value, error code.
    pub fn same_as(&self, other: &Reply) -> bool {
        match (self, other) {
            (Reply::Bool { value: a }, Reply::Bool { value: b }) => a == b,
            (Reply::Ok, Reply::Ok) => true,
            (Reply::Error { code: a, .. }, Reply::Error { code: b, .. }) => a == b,
            (Reply::Skipped { .. }, Reply::Skipped { .. }) => true,
            _ => false,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error { .. })
    }

    /// The connection was gone (`closed`).
    pub fn is_closed(&self) -> bool {
        matches!(self, Reply::Error { code, .. } if code == "closed")
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Bool { value } => write!(f, "{value}"),
            Reply::Ok => write!(f, "ok"),
            Reply::Error { code, .. } => write!(f, "error {code}"),
            Reply::Skipped { reason } => write!(f, "skipped ({reason})"),
        }
    }
}

/// The backend that served an op, as the op itself reported it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Served {
    pub backend: BackendId,
    pub backend_start: String,
}

/// Raw result of one simple query message: the rows of each statement, then an error if one
/// ended it.
#[derive(Debug, Default)]
pub struct Raw {
    pub rows: Vec<Vec<Option<String>>>,
    pub error: Option<(String, String)>,
}

/// Run one simple-query message, keeping the rows that arrived before an error.
pub async fn run_raw(client: &Client, sql: &str) -> Raw {
    let mut raw = Raw::default();
    let work = async {
        let stream = match client.simple_query_raw(sql).await {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        pin_mut!(stream);
        while let Some(msg) = stream.next().await {
            match msg? {
                SimpleQueryMessage::Row(row) => raw.rows.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                ),
                _ => continue,
            }
        }
        Ok(())
    };
    match tokio::time::timeout(IO_TIMEOUT, work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => raw.error = Some(classify(client, &e)),
        Err(_) => {
            // The cancel is bounded too: a paused pooler would not answer it either.
            let cancel = client.cancel_token();
            let _ = tokio::time::timeout(IO_TIMEOUT, cancel.cancel_query(NoTls)).await;
            raw.error = Some(("timeout".into(), format!("no reply within {IO_TIMEOUT:?}")));
        }
    }
    raw
}

/// `(code, message)`: the SQLSTATE, or `closed` when the connection is gone.
fn classify(client: &Client, e: &tokio_postgres::Error) -> (String, String) {
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string());
    if client.is_closed() || e.is_closed() || e.as_db_error().is_none() {
        return ("closed".into(), message);
    }
    let code = e
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| "closed".into());
    (code, message)
}

/// Identity from a row: a 3-column identity row, or the first 3 columns of a 4-column
/// identity-and-result row.
fn parse_identity(row: &[Option<String>]) -> Option<Served> {
    if row.len() != 3 && row.len() != 4 {
        return None;
    }
    Some(Served {
        backend: BackendId {
            pid: row[0].as_deref()?.parse().ok()?,
            start_us: row[1].as_deref()?.parse().ok()?,
        },
        backend_start: row[2].clone()?,
    })
}

/// A logical client: what an application holds, one connection at a time.
pub struct LogicalClient {
    pub index: usize,
    conn: Option<Client>,
}

impl LogicalClient {
    pub fn new(index: usize) -> Self {
        LogicalClient { index, conn: None }
    }

    /// `C1`, `C2`, ... (1-based, as reports print them).
    pub fn name(&self) -> String {
        format!("C{}", self.index + 1)
    }

    pub async fn connect(&mut self, config: &Config) -> anyhow::Result<()> {
        self.conn = Some(crate::launch::connect(config).await?);
        Ok(())
    }

    /// Close the connection (sends Terminate; behind a pooler the server may stay).
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    /// Run a SQL op. Returns the reply and the backend that reported itself.
    pub async fn run(&mut self, op: Op, key: Option<Key>, step: usize) -> (Reply, Option<Served>) {
        let Some(sql) = sql::op_sql(op, key, step) else {
            return (
                Reply::Skipped {
                    reason: format!("{op} is not a client statement"),
                },
                None,
            );
        };
        let Some(client) = self.conn.as_ref() else {
            return (
                Reply::Error {
                    code: "closed".into(),
                    message: "not connected".into(),
                },
                None,
            );
        };
        let raw = run_raw(client, &sql).await;
        let served = raw.rows.iter().find_map(|r| parse_identity(r));
        let result: Option<Vec<Option<String>>> = raw.rows.iter().find_map(|r| match r.len() {
            1 => Some(vec![r[0].clone()]),
            4 => Some(vec![r[3].clone()]),
            _ => None,
        });
        let reply = match raw.error {
            Some((code, message)) => {
                if code == "closed" {
                    self.conn = None;
                }
                Reply::Error { code, message }
            }
            None => match op {
                Op::TryLock | Op::Unlock | Op::TryXactLock => {
                    match result.as_ref().and_then(|r| r[0].as_deref()) {
                        Some("t") => Reply::Bool { value: true },
                        Some("f") => Reply::Bool { value: false },
                        other => Reply::Error {
                            code: "harness".into(),
                            message: format!("unexpected result {other:?} for {op}"),
                        },
                    }
                }
                _ => Reply::Ok,
            },
        };
        (reply, served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_rows_parse() {
        let row = vec![
            Some("7139".to_string()),
            Some("1764500000123456".to_string()),
            Some("2025-11-30 09:00:00.123456+00".to_string()),
        ];
        let s = parse_identity(&row).unwrap();
        assert_eq!(
            s.backend,
            BackendId {
                pid: 7139,
                start_us: 1764500000123456
            }
        );
        assert!(parse_identity(&row[..1]).is_none());
    }

    #[test]
    fn replies_compare_by_kind_value_and_code() {
        assert!(Reply::Bool { value: true }.same_as(&Reply::Bool { value: true }));
        assert!(!Reply::Bool { value: true }.same_as(&Reply::Bool { value: false }));
        let a = Reply::Error {
            code: "55P03".into(),
            message: "x".into(),
        };
        assert!(a.same_as(&Reply::error("55P03")));
        assert!(!a.same_as(&Reply::error("25P02")));
        assert!(!a.same_as(&Reply::Ok));
    }
}
