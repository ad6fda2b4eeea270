//! One logical client through the pooler (or direct): its connection, and the exact reply
//! and serving backend of each op it runs. Also the bounded simple-query call every
//! harness connection uses ([`run_raw`]).
//!
//! May import `vocab`, `sql` and the launcher's `connect`.

use crate::launch::IO_TIMEOUT;
use crate::sql;
use crate::vocab::backend::parse_timestamptz;
use crate::vocab::reply::code;
use crate::vocab::{BackendId, Key, Op, Reply};
use futures_util::{StreamExt, pin_mut};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

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
            raw.error = Some((
                code::TIMEOUT.into(),
                format!("no reply within {IO_TIMEOUT:?}"),
            ));
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
        return (code::CLOSED.into(), message);
    }
    let sqlstate = e
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| code::CLOSED.into());
    (sqlstate, message)
}

/// Identity from a row: a 2-column identity row, or the first 2 columns of a 3-column
/// identity-and-result row.
pub fn parse_identity(row: &[Option<String>]) -> Option<BackendId> {
    if row.len() != 2 && row.len() != 3 {
        return None;
    }
    Some(BackendId {
        pid: row[0].as_deref()?.parse().ok()?,
        start_us: parse_timestamptz(row[1].as_deref()?)?,
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

    /// Has a connection that is not known to be closed.
    pub fn is_connected(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.is_closed())
    }

    /// Run a SQL op. Returns the reply and the backend that reported itself.
    pub async fn run(
        &mut self,
        op: Op,
        key: Option<Key>,
        step: usize,
    ) -> (Reply, Option<BackendId>) {
        let Some(sql) = sql::op_sql(op, key, step) else {
            return (
                Reply::Error {
                    code: code::HARNESS.into(),
                    message: format!("{op} is not a client statement"),
                },
                None,
            );
        };
        let Some(client) = self.conn.as_ref() else {
            return (
                Reply::Error {
                    code: code::CLOSED.into(),
                    message: "not connected".into(),
                },
                None,
            );
        };
        let raw = run_raw(client, &sql).await;
        let served = raw.rows.iter().find_map(|r| parse_identity(r));
        let result: Option<Vec<Option<String>>> = raw.rows.iter().find_map(|r| match r.len() {
            1 => Some(vec![r[0].clone()]),
            3 => Some(vec![r[2].clone()]),
            _ => None,
        });
        let reply = match raw.error {
            Some((code, message)) => {
                if code == code::CLOSED {
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
                            code: code::HARNESS.into(),
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
            Some("2025-11-30 09:00:00.123456+00".to_string()),
        ];
        assert_eq!(
            parse_identity(&row),
            Some(BackendId {
                pid: 7139,
                start_us: 1764493200123456
            })
        );
        let mut with_result = row.clone();
        with_result.push(Some("t".into()));
        assert!(parse_identity(&with_result).is_some());
        assert!(parse_identity(&row[..1]).is_none());
        let mut bad = row.clone();
        bad[1] = Some("Sun Nov 30 09:00:00.123456 2025 UTC".into());
        assert!(
            parse_identity(&bad).is_none(),
            "non-ISO DateStyle is refused"
        );
    }
}
