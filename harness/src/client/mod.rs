//! One logical client through the pooler (or direct): its connection, and the exact reply
//! and serving backend of each op it runs. Also the bounded simple-query call every
//! harness connection uses ([`run_raw`]).
//!
//! With an application pool (`app_pool` in the topology), each op takes a connection from a
//! real client-side pool (deadpool-postgres: maintained, built on tokio-postgres like the
//! rest of the harness, and its `Fast` recycling returns a connection as it is, as Go's
//! `database/sql` does), or keeps one (`pin: session`).
//!
//! May import `vocab`, `sql`, `topology` (the pin), `history` (the pool's row), `tls` and
//! `launch` (its `connect` and `IO_TIMEOUT`).

use crate::history::AppPoolRow;
use crate::launch::IO_TIMEOUT;
use crate::sql;
use crate::topology::Pin;
use crate::vocab::backend::parse_timestamptz;
use crate::vocab::reply::code;
use crate::vocab::{BackendId, Guc, Key, Op, Reply, ServerTime};
use futures_util::{StreamExt, pin_mut};
use std::time::Duration;
use tokio_postgres::{Client, Config, SimpleQueryMessage};

/// Raw result of one simple query message: the rows of each statement, then an error if one
/// ended it.
#[derive(Debug, Default)]
pub struct Raw {
    pub rows: Vec<Vec<Option<String>>>,
    pub error: Option<(String, String)>,
}

/// Run one simple-query message, keeping the rows that arrived before an error, bounded by
/// [`IO_TIMEOUT`].
pub async fn run_raw(client: &Client, sql: &str) -> Raw {
    run_raw_within(client, sql, IO_TIMEOUT).await
}

/// [`run_raw`] with its own bound: on timeout a cancel is sent (bounded too) and the reply
/// is `timeout`.
pub async fn run_raw_within(client: &Client, sql: &str, bound: Duration) -> Raw {
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
    match tokio::time::timeout(bound, work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => raw.error = Some(classify(client, &e)),
        Err(_) => {
            // The cancel is bounded too: a paused pooler would not answer it either.
            let cancel = client.cancel_token();
            let _ =
                tokio::time::timeout(IO_TIMEOUT, cancel.cancel_query(crate::tls::cancel())).await;
            raw.error = Some((code::TIMEOUT.into(), format!("no reply within {bound:?}")));
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

/// Identity from a row: a 2-column identity row, or the first 2 columns of a 3- or 4-column
/// row (the identity with its step echoed, and the op's result).
pub fn parse_identity(row: &[Option<String>]) -> Option<BackendId> {
    if !(2..=sql::IDENTITY_RESULT_COLS).contains(&row.len()) {
        return None;
    }
    Some(BackendId {
        pid: row[0].as_deref()?.parse().ok()?,
        start_us: parse_timestamptz(row[1].as_deref()?)?,
    })
}

/// The step an identity row echoes (`sql::echo`: its third column), if it is one.
pub fn echoed_step(row: &[Option<String>]) -> Option<usize> {
    if row.len() != sql::IDENTITY_COLS && row.len() != sql::IDENTITY_RESULT_COLS {
        return None;
    }
    parse_identity(row)?;
    row[2].as_deref()?.parse().ok()
}

/// The server's time of op `op` from the rows of its reply (`sql::echo`): the identity row's
/// clock and time, and the time after the call where the op's rows carry one (beside the
/// result, or after a waiting lock call's result). `None` without an identity row.
pub fn server_time(op: Op, rows: &[Vec<Option<String>>]) -> Option<ServerTime> {
    let ts = |r: &[Option<String>], i: usize| r.get(i)?.as_deref().and_then(parse_timestamptz);
    let id = rows.iter().find(|r| echoed_step(r).is_some())?;
    let clock = ts(id, 3)?;
    let at = ts(id, 4)?;
    let after = if id.len() == sql::IDENTITY_RESULT_COLS {
        ts(id, 6)
    } else {
        rows.iter().find(|r| r.len() == 2).and_then(|r| ts(r, 1))
    };
    Some(if sql::identity_after(op) {
        ServerTime {
            clock,
            lo: None,
            hi: Some(at),
        }
    } else {
        ServerTime {
            clock,
            lo: Some(at),
            hi: after,
        }
    })
}

/// Whether the reply to op `op` of step `step` answers that statement: the identity row
/// echoes `step`, and the rows have the op's shape ([`sql::shape`]): no identity row where one
/// is always due (the op did not fail), or a row where none is, is a reply to another
/// statement. `Ok`: the backend the identity row names (none for an error before it);
/// `Err`: why the reply is out of step, in words.
pub fn in_step(op: Op, step: usize, raw: &Raw) -> Result<Option<BackendId>, String> {
    use sql::Shape;
    let shape = sql::shape(op);
    let rows = &raw.rows;
    match shape {
        Shape::Other => return Ok(rows.iter().find_map(|r| parse_identity(r))),
        Shape::NoRow => {
            return match rows.first() {
                None => Ok(None),
                Some(r) => Err(format!(
                    "{op} returns no row, but {} came, the first {r:?}",
                    rows.len()
                )),
            };
        }
        _ => {}
    }
    let mut echo: Option<(BackendId, usize)> = None;
    let mut results = 0;
    for r in rows {
        if let Some(s) = echoed_step(r) {
            if s != step {
                let b = parse_identity(r).expect("echoed");
                return Err(format!(
                    "the identity row echoes step {s}, but the op sent step {step} (the row names {b})"
                ));
            }
            if echo.is_some() {
                return Err(format!("a second identity row for step {step}: {r:?}"));
            }
            let cols = if shape == Shape::IdentityWithResult {
                sql::IDENTITY_RESULT_COLS
            } else {
                sql::IDENTITY_COLS
            };
            if r.len() != cols {
                return Err(format!(
                    "{op}'s identity row has {cols} columns, this one {}: {r:?}",
                    r.len()
                ));
            }
            echo = Some((parse_identity(r).expect("echoed"), s));
        } else if (r.len() == 1 || (r.len() == 2 && op.waits_for_lock()))
            && shape == Shape::IdentityThenResult
            && echo.is_some()
        {
            results += 1;
            if results > 1 {
                return Err(format!("{op} returns one result row, another came: {r:?}"));
            }
        } else {
            return Err(format!("a row {op} does not return: {r:?}"));
        }
    }
    if raw.error.is_none() {
        if echo.is_none() {
            return Err(format!(
                "{op} returns an identity row, but none came ({} row(s), no error)",
                rows.len()
            ));
        }
        if shape == Shape::IdentityThenResult && results == 0 {
            return Err(format!(
                "{op} returns a result row after the identity, none came"
            ));
        }
    }
    Ok(echo.map(|(b, _)| b))
}

/// An application-side pool every logical client's ops go through (deadpool-postgres,
/// recycling without a reset, like Go's `database/sql`).
#[derive(Clone)]
pub struct AppPool {
    pub pool: deadpool_postgres::Pool,
    pub pin: Pin,
    pub max_open: u32,
}

impl AppPool {
    /// A pool of at most `max_open` connections made from `config`.
    pub fn new(config: Config, max_open: u32, pin: Pin) -> anyhow::Result<AppPool> {
        let (config, tls) = crate::tls::prepare(&config);
        let manager = deadpool_postgres::Manager::from_config(
            config,
            tls,
            deadpool_postgres::ManagerConfig {
                // Like database/sql: a connection goes back as it is, nothing is reset.
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(max_open as usize)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()?;
        Ok(AppPool {
            pool,
            pin,
            max_open,
        })
    }

    /// The pool's state, for observations.
    pub fn row(&self) -> AppPoolRow {
        let s = self.pool.status();
        AppPoolRow {
            max_open: self.max_open,
            size: s.size as u32,
            idle: s.available as u32,
            waiting: s.waiting as u32,
        }
    }
}

/// A notification a logical client received, and the backend its connection was on when it
/// arrived (the one serving its op then, else its last op's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub backend: Option<BackendId>,
    pub heard: crate::launch::Heard,
    /// It arrived during the client's last op (from the backend serving it).
    pub during: bool,
}

/// A logical client: what an application holds, one connection at a time (its own, or one
/// from the application pool).
pub struct LogicalClient {
    pub index: usize,
    conn: Option<Client>,
    /// Notifications its own connection receives (an application pool's connections keep
    /// none: they are not collected).
    heard: Option<tokio::sync::mpsc::UnboundedReceiver<crate::launch::Heard>>,
    /// The backend of its last op on this connection.
    last: Option<BackendId>,
    /// Collected, not yet taken ([`LogicalClient::take_received`]).
    received: Vec<Received>,
    pool: Option<AppPool>,
    /// The pooled connection this client keeps (`pin: session`).
    held: Option<deadpool_postgres::Object>,
    /// Its protocol-level prepared statements on this connection, the latest last (kept, so
    /// that none is closed under the case: dropping one sends Close).
    statements: Vec<tokio_postgres::Statement>,
    /// The server's time of its last op ([`LogicalClient::take_time`]).
    time: Option<ServerTime>,
}

/// Where an op's connection came from, for the duration of the op.
enum Lease<'a> {
    Own(&'a Client),
    Pooled(Box<deadpool_postgres::Object>),
    Held(&'a deadpool_postgres::Object),
}

impl Lease<'_> {
    fn client(&self) -> &Client {
        match self {
            Lease::Own(c) => c,
            Lease::Pooled(o) => o,
            Lease::Held(o) => o,
        }
    }
}

fn closed(message: &str) -> Reply {
    Reply::Error {
        code: code::CLOSED.into(),
        message: message.into(),
    }
}

impl LogicalClient {
    pub fn new(index: usize) -> Self {
        LogicalClient {
            index,
            conn: None,
            heard: None,
            last: None,
            received: vec![],
            pool: None,
            held: None,
            statements: vec![],
            time: None,
        }
    }

    /// A client whose ops go through an application pool.
    pub fn pooled(index: usize, pool: AppPool) -> Self {
        LogicalClient {
            index,
            conn: None,
            heard: None,
            last: None,
            received: vec![],
            pool: Some(pool),
            held: None,
            statements: vec![],
            time: None,
        }
    }

    /// `C1`, `C2`, ... (1-based, as reports print them).
    pub fn name(&self) -> String {
        format!("C{}", self.index + 1)
    }

    /// Open the client's own connection (an application pool opens its connections when an
    /// op needs one).
    pub async fn connect(&mut self, config: &Config) -> anyhow::Result<()> {
        if self.pool.is_none() {
            self.collect(self.last);
            let (conn, heard) = crate::launch::connect_heard(config).await?;
            self.conn = Some(conn);
            self.heard = Some(heard);
            self.last = None;
        }
        Ok(())
    }

    /// Open the client's own connection within `bound`, as an op: `Ok`, or the refusal's
    /// SQLSTATE (53300 too many clients), `closed`, or `timeout` when the pooler accepted no
    /// connection in time (pgpool-II with every child serving a client: the connect waits in
    /// the kernel's accept queue, docs/pgpool.md §3). An application pool opens its
    /// connections when an op needs one: `Ok` at once.
    pub async fn open_within(&mut self, config: &Config, bound: Duration) -> Reply {
        if self.pool.is_some() {
            return Reply::Ok;
        }
        self.collect(self.last);
        match crate::launch::connect_heard_within(config, bound).await {
            Ok((conn, heard)) => {
                self.conn = Some(conn);
                self.heard = Some(heard);
                self.last = None;
                Reply::Ok
            }
            Err(e) => connect_reply(&e),
        }
    }

    /// Keep the notifications that have arrived, as received on `backend` (`during`: during
    /// the client's op).
    fn collect_as(&mut self, backend: Option<BackendId>, during: bool) {
        let Some(rx) = self.heard.as_mut() else {
            return;
        };
        while let Ok(heard) = rx.try_recv() {
            self.received.push(Received {
                backend,
                heard,
                during,
            });
        }
    }

    /// What arrived while the client was idle came from the backend its connection was on.
    fn collect(&mut self, backend: Option<BackendId>) {
        self.collect_as(backend, false)
    }

    /// The runner found the backend that served the client's last op by its tag (it
    /// reported no identity in-band: `DISCARD ALL`): what arrived during that op came from
    /// it, and the connection is on it.
    pub fn served_by(&mut self, b: BackendId) {
        for r in self
            .received
            .iter_mut()
            .filter(|r| r.during && r.backend.is_none())
        {
            r.backend = Some(b);
        }
        if self.heard.is_some() {
            self.last = Some(b);
        }
    }

    /// The notifications received since the last call (those that arrived while the client
    /// was idle are its last op's backend's).
    pub fn take_received(&mut self) -> Vec<Received> {
        self.collect(self.last);
        std::mem::take(&mut self.received)
    }

    /// Close the connection (sends Terminate; behind a pooler the server may stay). A pinned
    /// application-pool connection goes back to the pool as it is.
    pub fn disconnect(&mut self) {
        self.collect(self.last);
        self.conn = None;
        self.heard = None;
        self.last = None;
        self.held = None;
        self.statements.clear();
    }

    /// Give a pinned application-pool connection back to the pool as it is, locks and all
    /// (Go's `Conn.Close`, a replica finishing its script). Its own connection stays.
    pub fn release_pin(&mut self) {
        self.held = None;
    }

    /// Whether this client keeps a pooled connection now (`pin: session`).
    pub fn holds_pooled(&self) -> bool {
        self.held.is_some()
    }

    /// The application pool, if the client uses one.
    pub fn app_pool(&self) -> Option<&AppPool> {
        self.pool.as_ref()
    }

    /// No connection to run on: never opened, or closed by a `disconnect`. A connection the
    /// server closed under the client stays until an op hears of it (`closed`), as in the
    /// sequential schedule and as an application sees it.
    pub fn needs_connect(&self) -> bool {
        self.pool.is_none() && self.conn.is_none()
    }

    /// A connection for one op: its own, its pinned pooled one, or any from the pool
    /// (waiting for one if all are in use). `None`: the connection is gone.
    async fn lease(&mut self) -> Result<Lease<'_>, Reply> {
        if let Some(pool) = &self.pool {
            let pin = pool.pin;
            let need = pin == Pin::None || self.held.is_none();
            if need {
                let obj = pool
                    .pool
                    .get()
                    .await
                    .map_err(|e| pool_error(&e.to_string()))?;
                if pin == Pin::None {
                    return Ok(Lease::Pooled(Box::new(obj)));
                }
                self.held = Some(obj);
            }
            return Ok(Lease::Held(self.held.as_ref().expect("held")));
        }
        match self.conn.as_ref() {
            Some(c) => Ok(Lease::Own(c)),
            None => Err(closed("not connected")),
        }
    }

    /// Cancel whatever its connection is running (the case's time bound passed).
    pub async fn cancel(&self) {
        let token = match (&self.conn, &self.held) {
            (Some(c), _) => c.cancel_token(),
            (None, Some(o)) => o.cancel_token(),
            (None, None) => return,
        };
        let _ = tokio::time::timeout(IO_TIMEOUT, token.cancel_query(crate::tls::cancel())).await;
    }

    /// The connection was found closed: forget it (a closed pooled one is dropped by the
    /// pool when it comes back).
    fn lost(&mut self) {
        self.collect(self.last);
        self.conn = None;
        self.heard = None;
        self.last = None;
        self.held = None;
        self.statements.clear();
    }

    /// The server's time of the last op [`LogicalClient::run`] ran, if its reply carried one
    /// (`sql::echo`): taken once.
    pub fn take_time(&mut self) -> Option<ServerTime> {
        self.time.take()
    }

    /// The server's time of a step the nemesis ran for this client (a `terminate` or `cancel`
    /// the workload names as its step), taken by [`LogicalClient::take_time`] as an op's.
    pub fn note_time(&mut self, time: Option<ServerTime>) {
        self.time = time;
    }

    /// Run a SQL op within `bound` (getting a connection included). Returns the reply and
    /// the backend that reported itself.
    pub async fn run(
        &mut self,
        op: Op,
        key: Option<Key>,
        ms: Option<u64>,
        guc: Option<Guc>,
        step: usize,
        bound: Duration,
    ) -> (Reply, Option<BackendId>) {
        self.time = None;
        if op == Op::Migrate {
            return self.migrate(ms.unwrap_or(0), step, bound).await;
        }
        // What arrived while it was idle came from the backend its connection was on.
        self.collect(self.last);
        if matches!(op, Op::PrepareProtocol | Op::ExecuteProtocol) {
            return self.protocol(op, step, bound).await;
        }
        let Some(sql) = sql::op_sql_full(op, key, ms, guc, self.index, step) else {
            return (
                Reply::Error {
                    code: code::HARNESS.into(),
                    message: format!("{op} is not a client statement"),
                },
                None,
            );
        };
        let t0 = tokio::time::Instant::now();
        let lease = match tokio::time::timeout(bound, self.lease()).await {
            Ok(Ok(l)) => l,
            Ok(Err(reply)) => return (reply, None),
            Err(_) => return (pool_timeout(bound), None),
        };
        let left = bound.saturating_sub(t0.elapsed());
        let raw = run_raw_within(lease.client(), &sql, left).await;
        let checked = if raw.error.as_ref().is_some_and(|(c, _)| c == code::CLOSED) {
            Ok(raw.rows.iter().find_map(|r| parse_identity(r)))
        } else {
            in_step(op, step, &raw)
        };
        if let Err(why) = checked {
            // The reply answers another statement: the connection is out of step with its
            // statements and unusable. Closed, not given back to an application pool.
            match lease {
                Lease::Pooled(o) => drop(deadpool_postgres::Object::take(*o)),
                Lease::Own(_) | Lease::Held(_) => drop(lease),
            }
            if let Some(o) = self.held.take() {
                drop(deadpool_postgres::Object::take(o));
            }
            // What arrived on it came from a backend no reply names.
            if self.pool.is_none() {
                self.collect_as(None, true);
            }
            let on = self
                .last
                .map(|b| format!("; its connection was last served by {b}"))
                .unwrap_or_default();
            self.lost();
            return (
                Reply::Error {
                    code: code::OUT_OF_STEP.into(),
                    message: format!("{why}{on}"),
                },
                None,
            );
        }
        drop(lease);
        let served = checked.unwrap_or_default();
        // What arrived during the op came from the backend serving it (PgBouncer passes a
        // server's messages only to the client linked to it).
        if self.pool.is_none() {
            self.collect_as(served, true);
            // Unknown (no identity in-band) until the runner finds it (`served_by`).
            self.last = served;
        }
        self.time = served.and_then(|_| server_time(op, &raw.rows));
        let result: Option<Vec<Option<String>>> = raw.rows.iter().find_map(|r| match r.len() {
            1 | 2 => Some(vec![r[0].clone()]),
            sql::IDENTITY_RESULT_COLS => Some(vec![r[5].clone()]),
            _ => None,
        });
        let reply = match raw.error {
            Some((code, message)) => {
                if code == code::CLOSED {
                    self.lost();
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
                Op::Show | Op::Execute | Op::ReadTemp | Op::Fetch => {
                    match result.as_ref().and_then(|r| r[0].clone()) {
                        Some(value) => Reply::Text { value },
                        None => Reply::Error {
                            code: code::HARNESS.into(),
                            message: format!("no value for {op}"),
                        },
                    }
                }
                _ => Reply::Ok,
            },
        };
        (reply, served)
    }

    /// `prepare_protocol`: a named Parse of a statement that selects the identity and the
    /// client's label (tokio-postgres names it `s<n>`, unique in the process); its backend
    /// is found by the tag in its text. `execute_protocol`: Bind/Execute of the latest one,
    /// which reports its backend in-band (a 26000 reports none); with none, nothing is sent
    /// ([`code::NO_STATEMENT`]).
    async fn protocol(
        &mut self,
        op: Op,
        step: usize,
        bound: Duration,
    ) -> (Reply, Option<BackendId>) {
        let t0 = tokio::time::Instant::now();
        let latest = self.statements.last().cloned();
        let text = sql::op_sql_full(Op::PrepareProtocol, None, None, None, self.index, step)
            .expect("prepare_protocol has SQL");
        if op == Op::ExecuteProtocol && latest.is_none() {
            return (
                Reply::Error {
                    code: code::NO_STATEMENT.into(),
                    message: "no protocol-level statement prepared on this connection".into(),
                },
                None,
            );
        }
        let lease = match tokio::time::timeout(bound, self.lease()).await {
            Ok(Ok(l)) => l,
            Ok(Err(reply)) => return (reply, None),
            Err(_) => return (pool_timeout(bound), None),
        };
        let left = bound.saturating_sub(t0.elapsed());
        let client = lease.client();
        enum Done {
            Prepared(tokio_postgres::Statement),
            Rows(Vec<tokio_postgres::Row>),
        }
        let work = async {
            match &latest {
                Some(stmt) if op == Op::ExecuteProtocol => {
                    client.query(stmt, &[]).await.map(Done::Rows)
                }
                _ => client.prepare(&text).await.map(Done::Prepared),
            }
        };
        let res = tokio::time::timeout(left, work).await;
        let res = match res {
            Ok(r) => r,
            Err(_) => {
                let cancel = client.cancel_token();
                let _ = tokio::time::timeout(IO_TIMEOUT, cancel.cancel_query(crate::tls::cancel()))
                    .await;
                drop(lease);
                return (
                    Reply::Error {
                        code: code::TIMEOUT.into(),
                        message: format!("no reply within {left:?}"),
                    },
                    None,
                );
            }
        };
        let out = match res {
            Ok(Done::Prepared(stmt)) => Ok((Reply::Ok, None, Some(stmt))),
            Ok(Done::Rows(rows)) => {
                let row: Option<Vec<Option<String>>> = rows
                    .first()
                    .map(|r| (0..r.len()).map(|i| r.get(i)).collect());
                match row
                    .as_deref()
                    .and_then(|r| Some((parse_identity(r)?, r[2].clone()?)))
                {
                    Some((b, label)) => Ok((Reply::Text { value: label }, Some(b), None)),
                    None => Ok((
                        Reply::Error {
                            code: code::HARNESS.into(),
                            message: format!("unexpected row {row:?} for {op}"),
                        },
                        None,
                        None,
                    )),
                }
            }
            Err(e) => Err(classify(client, &e)),
        };
        drop(lease);
        match out {
            Ok((reply, served, stmt)) => {
                self.statements.extend(stmt);
                (reply, served)
            }
            Err((code, message)) => {
                if code == code::CLOSED {
                    self.lost();
                }
                (Reply::Error { code, message }, None)
            }
        }
    }

    /// `migrate`: read the version record; if version 1 is not there, work for `ms`, then
    /// apply it. Replies whether this call applied it (a second application fails with
    /// 42P07 when the first one's table exists).
    async fn migrate(
        &mut self,
        ms: u64,
        step: usize,
        bound: Duration,
    ) -> (Reply, Option<BackendId>) {
        let t0 = tokio::time::Instant::now();
        let replica = self.name();
        let lease = match tokio::time::timeout(bound, self.lease()).await {
            Ok(Ok(l)) => l,
            Ok(Err(reply)) => return (reply, None),
            Err(_) => return (pool_timeout(bound), None),
        };
        let left = bound.saturating_sub(t0.elapsed());
        let raw = run_raw_within(lease.client(), &sql::migrate_check(step), left).await;
        let mut served = raw.rows.iter().find_map(|r| parse_identity(r));
        if let Some((code, message)) = raw.error {
            drop(lease);
            if code == code::CLOSED {
                self.lost();
            }
            return (Reply::Error { code, message }, served);
        }
        let applied = raw
            .rows
            .iter()
            .find(|r| r.len() == 1)
            .and_then(|r| r[0].as_deref())
            .is_some_and(|n| n != "0");
        if applied {
            return (Reply::Bool { value: false }, served);
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let left = bound.saturating_sub(t0.elapsed());
        let raw = run_raw_within(lease.client(), &sql::migrate_apply(step, &replica), left).await;
        drop(lease);
        served = raw.rows.iter().find_map(|r| parse_identity(r)).or(served);
        match raw.error {
            Some((code, message)) => {
                if code == code::CLOSED {
                    self.lost();
                }
                (Reply::Error { code, message }, served)
            }
            None => (Reply::Bool { value: true }, served),
        }
    }
}

/// A connect that failed, as a reply: `timeout` when it did not complete within its bound,
/// the refusal's SQLSTATE (e.g. 53300, too many clients), or `closed`.
pub fn connect_reply(e: &anyhow::Error) -> Reply {
    if let Some(t) = e
        .chain()
        .find_map(|c| c.downcast_ref::<crate::launch::ConnectTimedOut>())
    {
        return Reply::Error {
            code: code::TIMEOUT.into(),
            message: format!("no connection within {:?}: the pooler accepted none", t.0),
        };
    }
    refused_reply(e)
}

/// A refused connection as a reply: its SQLSTATE (e.g. 53300, too many clients), or
/// `closed` (a connect that timed out among them: [`connect_reply`] tells that apart).
pub fn refused_reply(e: &anyhow::Error) -> Reply {
    let db = e
        .chain()
        .find_map(|c| c.downcast_ref::<tokio_postgres::Error>())
        .and_then(|pg| {
            pg.as_db_error()
                .map(|d| (d.code().code().to_string(), d.message().to_string()))
        });
    match db {
        Some((code, message)) => Reply::Error { code, message },
        None => Reply::Error {
            code: code::CLOSED.into(),
            message: format!("{e:#}"),
        },
    }
}

/// The reply of a step whose client could not open its connection: nothing was sent.
pub fn not_connected(open: &Reply) -> Reply {
    Reply::Error {
        code: code::NOT_CONNECTED.into(),
        message: format!("nothing sent: the client's connection did not open ({open})"),
    }
}

fn pool_error(message: &str) -> Reply {
    Reply::Error {
        code: code::CLOSED.into(),
        message: format!("the application pool could not give a connection: {message}"),
    }
}

fn pool_timeout(bound: Duration) -> Reply {
    Reply::Error {
        code: code::TIMEOUT.into(),
        message: format!("no connection within {bound:?}"),
    }
}

#[cfg(test)]
mod tests;
