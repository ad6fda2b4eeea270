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

/// Identity from a row: a 2-column identity row, or the first 2 columns of a 3-column
/// identity-and-result row.
fn parse_identity(row: &[Option<String>]) -> Option<Served> {
    if row.len() != 2 && row.len() != 3 {
        return None;
    }
    let backend_start = row[1].clone()?;
    Some(Served {
        backend: BackendId {
            pid: row[0].as_deref()?.parse().ok()?,
            start_us: parse_timestamptz(&backend_start)?,
        },
        backend_start,
    })
}

/// Microseconds since the Unix epoch of a `timestamptz` printed in ISO DateStyle:
/// `2026-11-30 11:20:11.710037+00` (fraction 0-6 digits, offset `+HH`, `+HH:MM` or
/// `+HH:MM:SS`). `None` for anything else (BC dates, infinity, other DateStyles).
pub fn parse_timestamptz(s: &str) -> Option<i64> {
    let (date, rest) = s.split_once(' ')?;
    let mut d = date.splitn(3, '-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || date.len() < 10 {
        return None;
    }
    let sign_at = rest.find(['+', '-'])?;
    let (time, offset) = rest.split_at(sign_at);
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac),
        None => (time, ""),
    };
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(6 - frac.len() as u32)
    };
    let mut t = hms.splitn(3, ':');
    let (hh, mm, ss): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    let negative = offset.starts_with('-');
    let mut o = offset[1..].splitn(3, ':');
    let mut off_secs = o.next()?.parse::<i64>().ok()? * 3600;
    if let Some(mm) = o.next() {
        off_secs += mm.parse::<i64>().ok()? * 60;
    }
    if let Some(ss) = o.next() {
        off_secs += ss.parse::<i64>().ok()?;
    }
    if negative {
        off_secs = -off_secs;
    }
    // Days from 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + hh * 3600 + mm * 60 + ss - off_secs;
    Some(secs * 1_000_000 + micros)
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
            3 => Some(vec![r[2].clone()]),
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
            Some("2025-11-30 09:00:00.123456+00".to_string()),
        ];
        let s = parse_identity(&row).unwrap();
        assert_eq!(
            s.backend,
            BackendId {
                pid: 7139,
                start_us: 1764493200123456
            }
        );
        assert_eq!(s.backend_start, "2025-11-30 09:00:00.123456+00");
        assert!(parse_identity(&row[..1]).is_none());
        let mut bad = row.clone();
        bad[1] = Some("Sun Nov 30 09:00:00.123456 2025 UTC".into());
        assert!(
            parse_identity(&bad).is_none(),
            "non-ISO DateStyle is refused"
        );
    }

    #[test]
    fn timestamptz_parses_fractions_offsets_and_calendar() {
        // Values checked with PostgreSQL: extract(epoch FROM '...'::timestamptz) * 1e6.
        let cases = [
            ("1970-01-01 00:00:00+00", 0),
            ("2025-11-30 09:00:00.123456+00", 1764493200123456),
            ("2025-11-30 09:00:00.12+00", 1764493200120000),
            ("2025-11-30 09:00:00+00", 1764493200000000),
            ("2025-11-30 14:30:00+05:30", 1764493200000000),
            ("2025-11-30 05:00:00-04", 1764493200000000),
            ("2024-02-29 23:59:59.999999+00", 1709251199999999),
            ("2000-03-01 00:00:00+00", 951868800000000),
            ("1900-03-01 00:00:00+00", -2203891200000000),
            ("2026-11-30 11:20:11.710037+00", 1796037611710037),
        ];
        for (text, us) in cases {
            assert_eq!(parse_timestamptz(text), Some(us), "{text}");
        }
        for bad in [
            "",
            "2025-11-30",
            "2025-13-01 00:00:00+00",
            "2025-11-30 09:00:00.1234567+00",
            "2025-11-30 09:00:00",
            "infinity",
        ] {
            assert_eq!(parse_timestamptz(bad), None, "{bad}");
        }
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
