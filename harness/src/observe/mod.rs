//! What the servers say, from outside every logical client: `pg_locks JOIN pg_stat_activity`
//! on a direct superuser connection, the pooler's admin views (`SHOW SERVERS` / `SHOW CLIENTS`
//! / `SHOW POOLS`), the fresh contender's availability probe, the wait until the servers
//! have settled after a step ([`Waits`]: what to wait for is the runner's call, made from the
//! op), and the reset to the empty state between cases, verified.
//!
//! May import `vocab`, `sql`, `tls`, `launch` (connections), `client` (the bounded raw
//! query), `pooler` (its views) and `history` (the observation types it fills in).

use crate::client::{Raw, run_raw};
use crate::history::{BackendRow, LockRow, LookTime, Observation, ServerState};
use crate::launch::{Cluster, connect, timed};
use crate::pooler::Pooler;
use crate::pooler::view::Look;
use crate::sql;
use crate::vocab::backend::parse_timestamptz;
use crate::vocab::{BackendId, Key};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Statement};

/// What to wait for after a step before the observation counts (chosen by the runner from
/// the op; see `run::plan`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    /// Backends that must have finished their statement (a client gets an ErrorResponse
    /// before the backend aborts the transaction and releases its locks).
    pub quiet: Vec<BackendId>,
    /// Servers the pooler releases once their backend is idle: they must be back in the pool
    /// (not linked). A client can have its reply (an ErrorResponse) before the pooler has
    /// read the ReadyForQuery that releases the server.
    pub released: Vec<BackendId>,
    /// Servers released through the reset query: back in the pool with the reset done (read
    /// in order: the pooler first, PostgreSQL after it).
    pub reset: Vec<BackendId>,
    /// Identities that must have left both `pg_stat_activity` and the pooler's servers.
    pub gone: Vec<BackendId>,
    /// Servers a fault (RECONNECT) marked to close at release: gone, unless the statement
    /// left their backend in a transaction (then still linked, closed at a later release).
    pub closing: Vec<BackendId>,
}

impl Waits {
    /// Whether a reset query or an exit must be awaited: then the pooler is read first and
    /// PostgreSQL after it (pg_locks must be read after PgBouncer says the reset is done).
    fn ordered(&self) -> bool {
        !self.reset.is_empty() || !self.gone.is_empty() || !self.closing.is_empty()
    }
}

/// The observer's connections: direct to PostgreSQL (snapshot), a separate direct contender,
/// and the pooler's console when there is a pooler. A fault that restarts a server closes
/// them: [`Observer::reconnect`] opens them again.
struct Conns {
    pg: Client,
    /// The snapshot and probes as prepared statements (direct connections, so named
    /// statements are safe; planning once saves ~40% of a snapshot).
    snap: Statement,
    /// The concurrent sampler's statement (the snapshot plus wait events and blockers).
    sample_stmt: Statement,
    probe_big: Statement,
    probe_pair: Statement,
    contender: Client,
    contender_id: BackendId,
    contender_start: String,
    /// Each replica's console (none without a pooler).
    admin: Vec<Box<dyn crate::pooler::Console>>,
}

impl Conns {
    async fn open(
        direct: &tokio_postgres::Config,
        pooler: &dyn Pooler,
        consoles: &[crate::pooler::ConsoleAt],
        client_role: &str,
    ) -> Result<Conns> {
        let pg = connect(direct)
            .await
            .context("observer: connecting to PostgreSQL")?;
        let contender = connect(direct)
            .await
            .context("contender: connecting to PostgreSQL")?;
        let raw = run_raw(&contender, sql::IDENTITY).await;
        let row = raw
            .rows
            .first()
            .ok_or_else(|| anyhow!("contender identity query failed: {:?}", raw.error))?;
        let contender_start = row[1].clone().unwrap_or_default();
        let contender_id = BackendId {
            pid: row[0].as_deref().unwrap_or_default().parse()?,
            start_us: parse_timestamptz(&contender_start)
                .ok_or_else(|| anyhow!("contender backend_start {contender_start:?} is not ISO"))?,
        };
        let mut admin = Vec::new();
        for at in consoles {
            admin.push(
                pooler
                    .console(at)
                    .await
                    .context("observer: connecting to the pooler's admin console")?,
            );
        }
        let snap = timed(pg.prepare(&sql::snapshot(client_role))).await?;
        let sample_stmt = timed(pg.prepare(&sql::sample(client_role))).await?;
        let probe_big = timed(contender.prepare(sql::CONTENDER_PROBE_BIG)).await?;
        let probe_pair = timed(contender.prepare(sql::CONTENDER_PROBE_PAIR)).await?;
        Ok(Conns {
            pg,
            snap,
            sample_stmt,
            probe_big,
            probe_pair,
            contender,
            contender_id,
            contender_start,
            admin,
        })
    }

    fn closed(&self) -> bool {
        self.pg.is_closed()
            || self.contender.is_closed()
            || self.admin.iter().any(|a| a.is_closed())
    }
}

/// The observer: what the servers say, from outside every client.
pub struct Observer {
    conns: std::cell::RefCell<std::rc::Rc<Conns>>,
    /// Read `SHOW POOLS` too (evidence replays): it costs ~25 us a look on this kind of
    /// machine, and a sequential step's `SHOW SERVERS`/`SHOW CLIENTS` rows determine every
    /// count it gives (nothing waits in a sequential schedule).
    pools: std::cell::Cell<bool>,
    /// The pooler whose admin views a look reads (none: nothing to read).
    pooler: Arc<dyn Pooler>,
    /// The servers run on this host: their pids can be watched in /proc.
    local_processes: bool,
    /// A connection as a client would open one, straight to PostgreSQL (the "outside
    /// connection" of an overdue-op sample); it follows a failover.
    outside_config: std::cell::RefCell<tokio_postgres::Config>,
    /// The workload migrates (its tables are reset between cases).
    migrations: bool,
    /// The clients' role, and the database name their pool has on the pooler's console.
    client_role: String,
    pool_db: String,
    /// Looks read this database instead of the cluster's (`pgchaos run`'s round databases).
    database: Option<String>,
    /// A deployment pgchaos did not start (`launcher: external`): a case is reset only by
    /// terminating the backends the run opened (no console command), only their advisory
    /// locks must be gone, and a reset first checks that nothing else appeared
    /// (`launch::external::check_strangers`).
    foreign: bool,
    own: Option<crate::launch::owned::Ownership>,
    /// Console faults may run (other users on the pool's database stop the run).
    console_faults: bool,
}

impl Observer {
    pub async fn connect(cluster: &Cluster) -> Result<Observer> {
        Self::connect_in(cluster, None).await
    }

    /// An observer whose looks read database `db` (PostgreSQL's backends and locks there, the
    /// pooler's pool of that name) instead of the cluster's.
    pub async fn connect_to(cluster: &Cluster, db: &str) -> Result<Observer> {
        Self::connect_in(cluster, Some(db)).await
    }

    fn direct_in(cluster: &Cluster, db: Option<&str>) -> tokio_postgres::Config {
        let mut c = cluster.socket_config(cluster.observer_role());
        if let Some(db) = db {
            c.dbname(db);
        }
        c
    }

    async fn connect_in(cluster: &Cluster, db: Option<&str>) -> Result<Observer> {
        let conns = Conns::open(
            &Self::direct_in(cluster, db),
            cluster.pooler.as_ref(),
            &cluster.consoles_at(),
            cluster.client_role(),
        )
        .await?;
        Ok(Observer {
            conns: std::cell::RefCell::new(std::rc::Rc::new(conns)),
            pools: std::cell::Cell::new(false),
            pooler: cluster.pooler.clone(),
            local_processes: cluster.local,
            outside_config: std::cell::RefCell::new(cluster.socket_config(cluster.client_role())),
            migrations: cluster.topology.workload.uses(crate::vocab::Op::Migrate),
            client_role: cluster.client_role().to_string(),
            pool_db: db.unwrap_or(cluster.pool_database()).to_string(),
            database: db.map(str::to_string),
            foreign: cluster.external.is_some(),
            own: cluster.external.as_ref().and_then(|e| e.own.clone()),
            console_faults: !cluster.topology.faults.kinds.is_empty(),
        })
    }

    fn c(&self) -> std::rc::Rc<Conns> {
        self.conns.borrow().clone()
    }

    /// The fresh contender's identity (it changes when PostgreSQL restarts).
    pub fn contender_id(&self) -> BackendId {
        self.c().contender_id
    }

    pub fn contender_start(&self) -> String {
        self.c().contender_start.clone()
    }

    /// After a fault that restarted or reset a server: open the connections again if any
    /// closed, retrying while PostgreSQL recovers (bounded: 30 s). Returns whether it did.
    pub async fn reconnect(&self, cluster: &Cluster) -> Result<bool> {
        if !self.c().closed() {
            return Ok(false);
        }
        self.reopen(cluster).await?;
        Ok(true)
    }

    /// Open every connection again (a look failed though none reads as closed yet),
    /// retrying while PostgreSQL recovers (bounded: 30 s).
    pub async fn reopen(&self, cluster: &Cluster) -> Result<()> {
        *self.outside_config.borrow_mut() = cluster.socket_config(cluster.client_role());
        let at = cluster.consoles_at();
        let direct = Self::direct_in(cluster, self.database.as_deref());
        let pooler = cluster.pooler.clone();
        let role = cluster.client_role().to_string();
        let c = until_accepted("observer", || {
            Conns::open(&direct, pooler.as_ref(), &at, &role)
        })
        .await?;
        *self.conns.borrow_mut() = std::rc::Rc::new(c);
        Ok(())
    }

    /// The concurrent sampler's look: the pooler's views (SHOW POOLS included) and
    /// PostgreSQL's, with what each backend waits for and who blocks it. `outside`: also try
    /// a new connection as a client would (for an overdue op's evidence).
    pub async fn sample(&self, outside: bool) -> Result<Observation> {
        let conns = self.c();
        let pg = async {
            timed(conns.pg.query(&conns.sample_stmt, &[]))
                .await
                .context("sampler")
        };
        let (pool, rows) = tokio::join!(self.pooler_look(&conns, true), pg);
        let Look {
            servers,
            clients,
            pools,
        } = pool?;
        let mut obs = Observation {
            servers,
            clients,
            pools,
            ..Default::default()
        };
        fill_backends(&mut obs, rows?, true)?;
        if outside {
            obs.outside = Some(self.outside().await);
        }
        Ok(obs)
    }

    /// Try a new connection to PostgreSQL as the client role (closed at once): `connected`,
    /// or why it was refused.
    pub async fn outside(&self) -> String {
        let (config, tls) = crate::tls::prepare(&self.outside_config.borrow());
        match tokio::time::timeout(Duration::from_secs(2), config.connect(tls)).await {
            Ok(Ok(_)) => "connected".into(),
            Ok(Err(e)) => match e.as_db_error() {
                Some(d) => format!("refused {} {}", d.code().code(), d.message()),
                None => format!("failed: {e}"),
            },
            Err(_) => "no answer within 2 s".into(),
        }
    }

    /// How many times migration version 1 was recorded.
    pub async fn migrated(&self) -> Result<u32> {
        let rows = Self::raw_ok(&self.c().pg, &sql::migrations_count()).await?;
        Ok(rows
            .first()
            .and_then(|r| r[0].as_deref())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// Whether looks read `SHOW POOLS` as well.
    pub fn set_pools(&self, on: bool) {
        self.pools.set(on);
    }

    async fn raw_ok(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let Raw { rows, error } = run_raw(client, sql).await;
        match error {
            None => Ok(rows),
            Some((code, msg)) => bail!("observer query failed ({code}: {msg}): {sql}"),
        }
    }

    /// `pg_locks JOIN pg_stat_activity`, plus the pooler's views when there is a pooler.
    pub async fn snapshot(&self) -> Result<Observation> {
        self.look(false).await
    }

    /// `ordered`: read the pooler's views first and PostgreSQL's after them; otherwise both
    /// at once.
    async fn look(&self, ordered: bool) -> Result<Observation> {
        let conns = self.c();
        let pool = self.pooler_look(&conns, self.pools.get());
        let pg = async {
            timed(conns.pg.query(&conns.snap, &[]))
                .await
                .context("observer snapshot")
        };
        let (
            Look {
                servers,
                clients,
                pools,
            },
            rows,
        ) = if ordered {
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
            pools,
            app_pool: None,
            migrated: None,
            outside: None,
            server: None,
        };
        fill_backends(&mut obs, rows, false)?;
        Ok(obs)
    }

    /// The pooler's view of the harness database's connections (empty without a pooler).
    async fn pooler_look(&self, conns: &Conns, pools: bool) -> Result<Look> {
        let mut looks = futures_util::future::try_join_all(
            conns.admin.iter().map(|a| a.look(&self.pool_db, pools)),
        )
        .await?
        .into_iter();
        let mut out = looks.next().unwrap_or_default();
        for (k, l) in looks.enumerate() {
            out.merge(k as u8 + 1, l);
        }
        Ok(out)
    }

    /// Can a fresh backend (the contender, never a pooled one) take `key` right now?
    pub async fn probe(&self, key: Key) -> Result<bool> {
        let c = self.c();
        let row = match key {
            Key::Big(k) => timed(c.contender.query_one(&c.probe_big, &[&k])).await,
            Key::Pair(a, b) => timed(c.contender.query_one(&c.probe_pair, &[&a, &b])).await,
        }
        .context("contender probe")?;
        Ok(row.try_get(0)?)
    }

    /// Wait, bounded, until what happens after a reply has happened (see [`Waits`]) and no
    /// server is mid-login or mid-reset. `first`: a snapshot already taken after the reply,
    /// used if it is settled. Returns the settled snapshot.
    pub async fn settle(&self, first: Option<Observation>, waits: &Waits) -> Result<Observation> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let ordered = waits.ordered();
        // A snapshot taken without reading in order cannot vouch for a reset or an exit.
        let mut next = first.filter(|_| !ordered);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let obs = match next.take() {
                Some(obs) => obs,
                None => self.look(ordered).await?,
            };
            if settled(&obs, waits) {
                return Ok(obs);
            }
            if Instant::now() > deadline {
                bail!(
                    "the servers did not settle within 5 s (waiting for {:?} to finish, {:?} to be back in the pool, {:?} to be reset and {:?} to be gone); last snapshot: {}",
                    waits.quiet,
                    waits.released,
                    waits.reset,
                    waits.gone,
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
        let c = self.c();
        for admin in &c.admin {
            pids.extend(
                admin
                    .look(&self.pool_db, false)
                    .await?
                    .servers
                    .iter()
                    .filter_map(|s| s.pid),
            );
            if self.foreign {
                continue;
            }
            for cmd in self.pooler.reset_commands(&self.pool_db) {
                admin
                    .command(&cmd)
                    .await
                    .with_context(|| format!("pooler admin command {cmd}"))?;
            }
        }
        // A deployment's: what the run owns (the pooler's servers of its pool among them),
        // after checking that nothing it does not own appeared since the last case.
        let pooled: Option<Vec<i32>> =
            (!c.admin.is_empty()).then(|| pids.iter().copied().collect());
        let (terminate, count, held) = match &self.own {
            Some(own) => {
                let consoles: Vec<&dyn crate::pooler::Console> =
                    c.admin.iter().map(|a| a.as_ref()).collect();
                crate::launch::external::check_strangers(
                    &c.pg,
                    &consoles,
                    own,
                    &self.pool_db,
                    pooled.as_deref(),
                    self.console_faults,
                )
                .await?;
                let p = pooled.as_deref();
                (own.terminate_sql(p), own.count_sql(p), own.locks_sql(p))
            }
            None => (
                sql::terminate_role(&self.client_role),
                sql::role_backends(&self.client_role),
                sql::ALL_ADVISORY_LOCKS.to_string(),
            ),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let terminated = Self::raw_ok(&c.pg, &terminate).await?;
            pids.extend(
                terminated
                    .iter()
                    .filter_map(|r| r[0].as_deref()?.parse::<i32>().ok()),
            );
            let backends = Self::raw_ok(&c.pg, &count).await?;
            let locks = Self::raw_ok(&c.pg, &held).await?;
            let n = |rows: &Vec<Vec<Option<String>>>| {
                rows.first().and_then(|r| r[0].clone()).unwrap_or_default()
            };
            let pool_empty = self.pooler_look(&c, false).await?.servers.is_empty();
            let exiting: Vec<i32> = if self.local_processes {
                pids.iter()
                    .copied()
                    .filter(|p| process_running(*p))
                    .collect()
            } else {
                vec![]
            };
            if n(&backends) == "0" && n(&locks) == "0" && pool_empty && exiting.is_empty() {
                if self.migrations {
                    // Nobody is left to hold the migration's tables: start it afresh. In a
                    // deployment, as the clients' role (the tables are its own; the observer
                    // may not touch them).
                    if self.foreign {
                        let config = self.outside_config.borrow().clone();
                        let own = connect(&config).await.context(
                            "connecting as the clients' role to reset the migration's tables",
                        )?;
                        Self::raw_ok(&own, &sql::migrations_reset()).await?;
                    } else {
                        Self::raw_ok(&c.pg, &sql::migrations_reset()).await?;
                    }
                }
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

/// The backends (and their advisory locks) of a snapshot's or a sample's rows.
fn fill_backends(obs: &mut Observation, rows: Vec<tokio_postgres::Row>, waits: bool) -> Result<()> {
    use crate::sql::look_part as part;
    let mut locks: Vec<(i32, (u32, u32, i16), LockRow)> = vec![];
    let mut times: Vec<i64> = vec![];
    let mut clock = None;
    for r in rows {
        match r.try_get::<_, i32>(0)? {
            part::LO | part::MID | part::HI => {
                if let Some(c) = r.try_get::<_, Option<i64>>(15)? {
                    clock = Some(c);
                }
                times.push(r.try_get(16)?);
            }
            part::BACKEND => obs.backends.push(backend_row(&r, waits)?),
            part::LOCK => {
                let (c, o, sub): (u32, u32, i16) = (r.try_get(6)?, r.try_get(7)?, r.try_get(8)?);
                let key = Key::from_lock_row(c, o, sub)
                    .ok_or_else(|| anyhow!("unexpected objsubid {sub}"))?;
                let row = LockRow {
                    key,
                    mode: r.try_get::<_, Option<String>>(9)?.unwrap_or_default(),
                    granted: r.try_get::<_, Option<bool>>(10)?.unwrap_or(false),
                };
                locks.push((r.try_get(1)?, (c, o, sub), row));
            }
            p => bail!("observer look: unexpected part {p}"),
        }
    }
    // As the earlier join ordered them: backends by start and pid, each one's locks by
    // (classid, objid, objsubid). Locks of a pid not listed (another role's, or a backend
    // that began after pg_stat_activity was read) are left out, as the join left them.
    obs.backends.sort_by_key(|b| (b.id.start_us, b.id.pid));
    locks.sort_by_key(|(pid, at, _)| (*pid, *at));
    for b in &mut obs.backends {
        b.locks = locks
            .iter()
            .filter(|(pid, _, _)| *pid == b.id.pid)
            .map(|(_, _, l)| l.clone())
            .collect();
    }
    obs.server = match (clock, times.as_slice()) {
        (Some(clock), &[lo, mid, hi]) if lo <= mid && mid <= hi => {
            Some(LookTime { clock, lo, mid, hi })
        }
        // The wall clock stepped back under the look: its times order nothing.
        (Some(_), &[_, _, _]) => None,
        _ => bail!("observer look: expected three times and the clock, got {times:?}"),
    };
    Ok(())
}

/// One `pg_stat_activity` row of a look (`sql::look`).
fn backend_row(r: &tokio_postgres::Row, waits: bool) -> Result<BackendRow> {
    let (wait_event_type, wait_event, blocked_by) = if waits {
        let blockers: Option<String> = r.try_get(14)?;
        (
            r.try_get(12)?,
            r.try_get(13)?,
            blockers
                .map(|t| {
                    t.trim_matches(|c| c == '{' || c == '}')
                        .split(',')
                        .filter_map(|p| p.trim().parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
        )
    } else {
        (None, None, vec![])
    };
    Ok(BackendRow {
        id: BackendId {
            pid: r.try_get(1)?,
            start_us: r.try_get(2)?,
        },
        backend_start: r.try_get::<_, Option<String>>(3)?.unwrap_or_default(),
        state: r.try_get::<_, Option<String>>(4)?.unwrap_or_default(),
        query: r.try_get::<_, Option<String>>(5)?.unwrap_or_default(),
        xact_start: r.try_get(11)?,
        wait_event_type,
        wait_event,
        blocked_by,
        locks: vec![],
    })
}

/// Whether a local process is still running (a zombie has already released everything and
/// only waits for its parent to reap it).
pub fn process_running(pid: i32) -> bool {
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
pub async fn backoff(attempt: u32) {
    match attempt {
        0 | 1 => tokio::task::yield_now().await,
        n if n < 6 => std::thread::sleep(Duration::from_micros(50 << (n - 2))),
        _ => tokio::time::sleep(Duration::from_millis(1)).await,
    }
}

/// How long PostgreSQL (or the pooler) may take to accept connections again after a fault
/// restarted or reset it (crash recovery included).
pub const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// Open `open` again until it succeeds, with [`backoff`], within [`RECOVERY_BOUND`]; the last
/// error names `who`.
pub async fn until_accepted<T, F, Fut>(who: &str, mut open: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = Instant::now() + RECOVERY_BOUND;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match open().await {
            Ok(t) => return Ok(t),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!(
                    "{who}: the servers did not accept connections within {RECOVERY_BOUND:?} of a fault"
                )));
            }
            Err(_) => backoff(attempt.min(8)).await,
        }
    }
}

/// Whether a snapshot shows the state [`Observer::settle`] waits for.
pub fn settled(obs: &Observation, waits: &Waits) -> bool {
    // The pooler's view names a server by pid alone: a server row with `b`'s pid is `b`'s
    // unless PostgreSQL shows another backend (another backend_start) with that pid now (a
    // restarted server's, or a new primary container's, pids start over).
    let pid_reused = |b: &BackendId| obs.backends.iter().any(|r| r.id.pid == b.pid && r.id != *b);
    let no_server = |b: &BackendId| obs.server_of(b.pid).is_none() || pid_reused(b);
    let gone_ok = waits.gone.iter().all(|g| !obs.alive(*g) && no_server(g));
    // A released server is out of the `active` (linked) state and not mid-reset once its
    // backend is idle; a backend still in a transaction stays linked.
    let released_ok = waits.released.iter().chain(&waits.reset).all(|b| {
        obs.backend(*b).is_none_or(|row| row.in_transaction())
            || obs
                .server_state(b.pid)
                .is_none_or(|s| s == ServerState::Idle)
    });
    let closing_ok = waits.closing.iter().all(|b| {
        obs.backend(*b).is_some_and(|row| row.in_transaction()) || (!obs.alive(*b) && no_server(b))
    });
    let transient = obs.pooler_busy();
    let quiet_ok = waits
        .quiet
        .iter()
        .all(|q| obs.backend(*q).is_none_or(|b| b.state != "active"));
    gone_ok && closing_ok && released_ok && quiet_ok && !transient
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn id(pid: i32) -> BackendId {
        BackendId {
            pid,
            start_us: pid as i64,
        }
    }

    fn row(pid: i32, state: &str) -> BackendRow {
        BackendRow {
            id: id(pid),
            backend_start: String::new(),
            state: state.into(),
            query: String::new(),
            xact_start: None,
            wait_event_type: None,
            wait_event: None,
            blocked_by: vec![],
            locks: vec![],
        }
    }

    fn server(pid: i32, state: &str) -> crate::history::ServerRow {
        crate::pooler::pgbouncer::view::server(BTreeMap::from([
            ("remote_pid".to_string(), pid.to_string()),
            ("state".to_string(), state.to_string()),
        ]))
    }

    #[test]
    fn settling_waits_for_statements_resets_and_exits() {
        let none = Waits::default();
        let mut o = Observation {
            backends: vec![row(1, "active")],
            ..Default::default()
        };
        assert!(settled(&o, &none), "nothing to wait for");
        let quiet = Waits {
            quiet: vec![id(1)],
            ..Default::default()
        };
        assert!(!settled(&o, &quiet), "still running its statement");
        o.backends[0].state = "idle".into();
        assert!(settled(&o, &quiet));

        // Released: idle backend whose server is still linked, then mid-reset, then idle.
        let released = Waits {
            reset: vec![id(1)],
            ..Default::default()
        };
        o.servers = vec![server(1, "active")];
        assert!(!settled(&o, &released));
        o.servers = vec![server(1, "tested")];
        assert!(!settled(&o, &released), "the reset query is still running");
        o.servers = vec![server(1, "idle")];
        assert!(settled(&o, &released));
        // A backend still inside a transaction stays linked: nothing to wait for.
        o.backends[0].state = "idle in transaction".into();
        o.servers = vec![server(1, "active")];
        assert!(settled(&o, &released));

        // Gone: out of pg_stat_activity and out of SHOW SERVERS.
        let gone = Waits {
            gone: vec![id(1)],
            ..Default::default()
        };
        assert!(!settled(&o, &gone));
        o.backends.clear();
        assert!(!settled(&o, &gone), "the pooler still lists it");
        o.servers.clear();
        assert!(settled(&o, &gone));
        assert!(gone.ordered() && released.ordered() && !quiet.ordered());
        let plain = Waits {
            released: vec![id(1)],
            ..Default::default()
        };
        assert!(
            !plain.ordered(),
            "a release without a reset needs no ordered read"
        );
    }

    #[test]
    fn a_server_row_with_a_reused_pid_is_not_the_gone_backend() {
        // Backend (23, t1) ended with its container; the new primary's backend has pid 23
        // again, with another backend_start, and the pooler lists a server of pid 23.
        let old = BackendId {
            pid: 23,
            start_us: 1,
        };
        let gone = Waits {
            gone: vec![old],
            ..Default::default()
        };
        let mut newer = row(23, "idle");
        newer.id.start_us = 2;
        let mut o = Observation {
            backends: vec![newer],
            servers: vec![server(23, "idle")],
            ..Default::default()
        };
        assert!(settled(&o, &gone), "pid 23's server is the new backend's");
        // Without PostgreSQL's word that pid 23 is someone else's, the row is the old one's.
        o.backends.clear();
        assert!(!settled(&o, &gone));
    }

    #[test]
    fn a_missing_process_is_not_running() {
        assert!(process_running(std::process::id() as i32));
        assert!(!process_running(i32::MAX));
    }
}
