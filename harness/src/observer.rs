//! What the servers say, from outside every logical client: `pg_locks JOIN pg_stat_activity`
//! on a direct superuser connection, `SHOW SERVERS` / `SHOW CLIENTS` on PgBouncer's admin
//! console, the fresh contender's availability probe, and the admin actions (terminate,
//! cancel, reset between cases) with their confirmations.

use crate::client::{BackendId, Raw, Reply, run_raw};
use crate::key::Key;
use crate::launch::{CLIENT_ROLE, Cluster, DB, SUPERUSER, connect};
use crate::sql;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, SimpleQueryMessage, Statement};

/// One advisory lock row of `pg_locks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRow {
    pub key: Key,
    pub mode: String,
    pub granted: bool,
}

/// One backend of the client role, from `pg_stat_activity`, with its advisory locks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackendRow {
    pub id: BackendId,
    pub backend_start: String,
    pub state: String,
    pub query: String,
    pub xact_start: Option<String>,
    pub locks: Vec<LockRow>,
}

/// A snapshot of the servers after a step.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Observation {
    pub backends: Vec<BackendRow>,
    /// `SHOW SERVERS` rows of the harness database (selected columns).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub servers: Vec<BTreeMap<String, String>>,
    /// `SHOW CLIENTS` rows of the harness database (selected columns).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub clients: Vec<BTreeMap<String, String>>,
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

    pub fn alive(&self, id: BackendId) -> bool {
        self.backends.iter().any(|b| b.id == id)
    }

    /// The backend whose last query carries this step's tag.
    pub fn ran_step(&self, step: usize) -> Option<BackendId> {
        let tag = sql::tag(step);
        self.backends
            .iter()
            .find(|b| b.query.starts_with(&tag))
            .map(|b| b.id)
    }

    pub fn backend_start(&self, id: BackendId) -> Option<&str> {
        self.backends
            .iter()
            .find(|b| b.id == id)
            .map(|b| b.backend_start.as_str())
    }
}

const SERVER_COLUMNS: &[&str] = &[
    "type",
    "user",
    "database",
    "state",
    "local_port",
    "connect_time",
    "request_time",
    "ptr",
    "link",
    "remote_pid",
    "close_needed",
];

/// The observer's connections: direct to PostgreSQL (snapshot, admin actions), a separate
/// direct contender, and PgBouncer's console when there is a pooler.
pub struct Observer {
    pg: Client,
    /// The snapshot and probes as prepared statements (direct connections, so named
    /// statements are safe; planning once saves ~40% of a snapshot).
    snap: Statement,
    probe_big: Statement,
    probe_pair: Statement,
    contender: Client,
    pub contender_id: BackendId,
    pub contender_start: String,
    admin: Option<Client>,
    /// The servers run on this host (the native launcher): their pids can be watched in /proc.
    local_processes: bool,
}

impl Observer {
    pub async fn connect(cluster: &Cluster) -> Result<Observer> {
        let pg = connect(&cluster.socket_config(SUPERUSER)).await?;
        let contender = connect(&cluster.socket_config(SUPERUSER)).await?;
        let raw = run_raw(&contender, sql::IDENTITY).await;
        let row = raw
            .rows
            .first()
            .ok_or_else(|| anyhow!("contender identity query failed: {:?}", raw.error))?;
        let contender_start = row[1].clone().unwrap_or_default();
        let contender_id = BackendId {
            pid: row[0].as_deref().unwrap_or_default().parse()?,
            start_us: crate::client::parse_timestamptz(&contender_start)
                .ok_or_else(|| anyhow!("contender backend_start {contender_start:?} is not ISO"))?,
        };
        let admin = match cluster.bouncer_port {
            Some(_) => Some(connect(&cluster.admin_config()).await?),
            None => None,
        };
        let snap = crate::launch::timed(pg.prepare(&sql::snapshot(CLIENT_ROLE))).await?;
        let probe_big = crate::launch::timed(contender.prepare(sql::CONTENDER_PROBE_BIG)).await?;
        let probe_pair = crate::launch::timed(contender.prepare(sql::CONTENDER_PROBE_PAIR)).await?;
        Ok(Observer {
            snap,
            probe_big,
            probe_pair,
            pg,
            contender,
            contender_id,
            contender_start,
            admin,
            local_processes: cluster.pids().0.is_some(),
        })
    }

    async fn raw_ok(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let Raw { rows, error } = run_raw(client, sql).await;
        match error {
            None => Ok(rows),
            Some((code, msg)) => bail!("observer query failed ({code}: {msg}): {sql}"),
        }
    }

    /// `pg_locks JOIN pg_stat_activity`, plus the pooler's view when there is one.
    pub async fn snapshot(&self) -> Result<Observation> {
        self.look(false).await
    }

    /// `ordered`: read the pooler's view first and PostgreSQL's after it (when waiting for
    /// the pooler to finish a reset, pg_locks must be read after PgBouncer says it is
    /// done); otherwise both at once.
    async fn look(&self, ordered: bool) -> Result<Observation> {
        let pool = async {
            match &self.admin {
                // Pipelined on the console connection: one round trip's wait for both.
                Some(a) => {
                    let (s, c) =
                        tokio::join!(show(a, sql::SHOW_SERVERS), show(a, sql::SHOW_CLIENTS));
                    Ok::<_, anyhow::Error>((s?, c?))
                }
                None => Ok((vec![], vec![])),
            }
        };
        let pg = async {
            crate::launch::timed(self.pg.query(&self.snap, &[]))
                .await
                .context("observer snapshot")
        };
        let ((servers, clients), rows) = if ordered {
            let pool = pool.await?;
            (pool, pg.await?)
        } else {
            let (pool, rows) = tokio::join!(pool, pg);
            (pool?, rows?)
        };
        let mut obs = Observation {
            backends: vec![],
            servers,
            clients,
        };
        for r in rows {
            let id = BackendId {
                pid: r.try_get(0)?,
                start_us: r.try_get(1)?,
            };
            if obs.backends.last().map(|b| b.id) != Some(id) {
                obs.backends.push(BackendRow {
                    id,
                    backend_start: r.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
                    state: r.try_get::<_, Option<String>>(3)?.unwrap_or_default(),
                    query: r.try_get::<_, Option<String>>(4)?.unwrap_or_default(),
                    xact_start: r.try_get(10)?,
                    locks: vec![],
                });
            }
            let (c, o, sub): (Option<u32>, Option<u32>, Option<i16>) =
                (r.try_get(5)?, r.try_get(6)?, r.try_get(7)?);
            if let (Some(c), Some(o), Some(sub)) = (c, o, sub) {
                let key = Key::from_lock_row(c, o, sub)
                    .ok_or_else(|| anyhow!("unexpected objsubid {sub}"))?;
                obs.backends
                    .last_mut()
                    .expect("pushed")
                    .locks
                    .push(LockRow {
                        key,
                        mode: r.try_get::<_, Option<String>>(8)?.unwrap_or_default(),
                        granted: r.try_get::<_, Option<bool>>(9)?.unwrap_or(false),
                    });
            }
        }
        Ok(obs)
    }

    /// Can a fresh backend (the contender, never a pooled one) take `key` right now?
    pub async fn probe(&self, key: Key) -> Result<bool> {
        let row = match key {
            Key::Big(k) => {
                crate::launch::timed(self.contender.query_one(&self.probe_big, &[&k])).await
            }
            Key::Pair(a, b) => {
                crate::launch::timed(self.contender.query_one(&self.probe_pair, &[&a, &b])).await
            }
        }
        .context("contender probe")?;
        Ok(row.try_get(0)?)
    }

    /// `pg_terminate_backend` of exactly this identity, confirmed by its leaving
    /// `pg_stat_activity` within a bounded wait (with local servers, after its process has
    /// exited).
    pub async fn terminate(&self, id: BackendId) -> Result<Reply> {
        let rows = Self::raw_ok(&self.pg, &sql::terminate(id.pid, id.start_us)).await?;
        let Some(row) = rows.first() else {
            return Ok(Reply::Bool { value: false });
        };
        let signalled = row[0].as_deref() == Some("t");
        let deadline = Instant::now() + Duration::from_secs(5);
        if self.local_processes {
            // Watch the process itself first: a /proc read costs no query, so the poll does
            // not take the CPU from the backend it waits for. The query below confirms.
            let mut polls = 0u32;
            while process_running(id.pid) {
                if Instant::now() > deadline {
                    bail!("backend {id} still running 5 s after pg_terminate_backend");
                }
                polls += 1;
                // 50 us steps for the first few milliseconds (an exit takes 1-3 ms here),
                // then the runtime's timer, so a stuck exit does not block the thread.
                if polls <= 60 {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let present =
                Self::raw_ok(&self.pg, &sql::backend_present(id.pid, id.start_us)).await?;
            if present.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!("backend {id} still present 5 s after pg_terminate_backend");
            }
            backoff(attempt).await;
        }
        Ok(Reply::Bool { value: signalled })
    }

    /// `pg_cancel_backend` of exactly this identity.
    pub async fn cancel(&self, id: BackendId) -> Result<Reply> {
        let rows = Self::raw_ok(&self.pg, &sql::cancel(id.pid, id.start_us)).await?;
        Ok(Reply::Bool {
            value: rows.first().and_then(|r| r[0].as_deref()) == Some("t"),
        })
    }

    /// Wait until what happens after a reply has happened: the backends in `quiet` finished
    /// their statement (a client gets an ErrorResponse before the backend aborts the
    /// transaction and releases its locks), the servers in `idle` are back in the pool
    /// (reset query done), the identities in `gone` have left both `pg_stat_activity` and
    /// `SHOW SERVERS`, and no server is mid-login or mid-reset. `first`: a snapshot already
    /// taken after the reply, used if it is settled. Returns the settled snapshot.
    pub async fn settle(
        &self,
        first: Option<Observation>,
        quiet: &[BackendId],
        idle: &[BackendId],
        gone: &[BackendId],
    ) -> Result<Observation> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let ordered = !idle.is_empty() || !gone.is_empty();
        // A snapshot taken without waiting in order cannot vouch for a reset or an exit.
        let mut next = first.filter(|_| !ordered);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let obs = match next.take() {
                Some(obs) => obs,
                None => self.look(ordered).await?,
            };
            if settled(&obs, quiet, idle, gone) {
                return Ok(obs);
            }
            if Instant::now() > deadline {
                bail!(
                    "the servers did not settle within 5 s (waiting for {quiet:?} to finish, {idle:?} to be idle and {gone:?} to be gone); last snapshot: {}",
                    serde_json::to_string(&obs).unwrap_or_default()
                );
            }
            backoff(attempt).await;
        }
    }

    /// Bring the topology to the known empty state between cases: no client-role backends,
    /// no pooled connections, no advisory locks. Verified, not assumed. With local servers
    /// the reset also waits for the terminated backends' processes to finish exiting (a
    /// backend leaves `pg_stat_activity` before it has released its memory), so no dying
    /// process competes with the next case's steps for the CPU.
    pub async fn reset(&self) -> Result<()> {
        let mut pids: BTreeSet<i32> = BTreeSet::new();
        if let Some(admin) = &self.admin {
            pids.extend(
                show(admin, sql::SHOW_SERVERS)
                    .await?
                    .iter()
                    .filter_map(|s| s.get("remote_pid")?.parse::<i32>().ok())
                    .filter(|p| *p > 0),
            );
            crate::launch::timed(admin.simple_query(&sql::pooler_kill(DB)))
                .await
                .context("PgBouncer KILL")?;
            crate::launch::timed(admin.simple_query(&sql::pooler_resume(DB)))
                .await
                .context("PgBouncer RESUME")?;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let terminated = Self::raw_ok(&self.pg, &sql::terminate_role(CLIENT_ROLE)).await?;
            pids.extend(
                terminated
                    .iter()
                    .filter_map(|r| r[0].as_deref()?.parse::<i32>().ok()),
            );
            let backends = Self::raw_ok(&self.pg, &sql::role_backends(CLIENT_ROLE)).await?;
            let locks = Self::raw_ok(&self.pg, sql::ALL_ADVISORY_LOCKS).await?;
            let n = |rows: &Vec<Vec<Option<String>>>| {
                rows.first().and_then(|r| r[0].clone()).unwrap_or_default()
            };
            let pool_empty = match &self.admin {
                Some(a) => show(a, sql::SHOW_SERVERS).await?.is_empty(),
                None => true,
            };
            let exiting: Vec<i32> = if self.local_processes {
                pids.iter()
                    .copied()
                    .filter(|p| process_running(*p))
                    .collect()
            } else {
                vec![]
            };
            if n(&backends) == "0" && n(&locks) == "0" && pool_empty && exiting.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "reset did not reach the empty state within 5 s: {} client backends, {} advisory locks, pool empty: {pool_empty}, backend processes still exiting: {exiting:?}",
                    n(&backends),
                    n(&locks)
                );
            }
            backoff(attempt).await;
        }
    }
}

/// Whether a local process is still running (a zombie has already released everything and
/// only waits for its parent to reap it).
fn process_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The pause before a bounded wait's next look: none after the first (a look is itself a
/// round trip, ~0.1 ms), then 50 us doubling up to 1 ms. Sub-millisecond pauses sleep the
/// thread: tokio's timer rounds every sleep up to a whole millisecond, which was most of the
/// cost of waiting for a backend to finish an error or exit. Nothing else runs meanwhile
/// (the schedule is sequential), so the short block is harmless.
async fn backoff(attempt: u32) {
    match attempt {
        0 | 1 => tokio::task::yield_now().await,
        n if n < 6 => std::thread::sleep(Duration::from_micros(50 << (n - 2))),
        _ => tokio::time::sleep(Duration::from_millis(1)).await,
    }
}

/// Whether a snapshot shows the state [`Observer::settle`] waits for.
fn settled(obs: &Observation, quiet: &[BackendId], idle: &[BackendId], gone: &[BackendId]) -> bool {
    let state = |s: &BTreeMap<String, String>| s.get("state").cloned().unwrap_or_default();
    let server = |pid: i32| {
        let pid = pid.to_string();
        obs.servers
            .iter()
            .find(|s| s.get("remote_pid") == Some(&pid))
    };
    let gone_ok = gone
        .iter()
        .all(|g| !obs.alive(*g) && server(g.pid).is_none());
    let idle_ok = idle
        .iter()
        .all(|b| server(b.pid).is_none_or(|s| matches!(state(s).as_str(), "idle" | "used")));
    let transient = obs
        .servers
        .iter()
        .any(|s| matches!(state(s).as_str(), "tested" | "login" | "new"));
    let quiet_ok = quiet.iter().all(|q| {
        obs.backends
            .iter()
            .find(|b| b.id == *q)
            .is_none_or(|b| b.state != "active")
    });
    gone_ok && idle_ok && quiet_ok && !transient
}

/// A `SHOW` command on the admin console, rows of the harness database only, selected columns.
async fn show(admin: &Client, cmd: &str) -> Result<Vec<BTreeMap<String, String>>> {
    let msgs = crate::launch::timed(admin.simple_query(cmd))
        .await
        .with_context(|| format!("PgBouncer {cmd}"))?;
    let mut out = vec![];
    for m in msgs {
        if let SimpleQueryMessage::Row(row) = m {
            let mut map = BTreeMap::new();
            for (i, col) in row.columns().iter().enumerate() {
                if SERVER_COLUMNS.contains(&col.name()) {
                    map.insert(col.name().to_string(), row.get(i).unwrap_or("").to_string());
                }
            }
            if map.get("database").map(String::as_str) == Some(DB) {
                out.push(map);
            }
        }
    }
    Ok(out)
}
