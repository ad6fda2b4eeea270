//! How it runs: the launcher seam and the cluster handle. A [`Launcher`] turns a topology
//! into a running [`Cluster`]: endpoints (Unix sockets in a private run directory, loopback
//! TCP behind a per-run password), the versions that actually ran, and process control for
//! the nemesis and for teardown. Three launchers: `native` (servers as local processes, the
//! default), `docker` (the servers in containers of the images built here) and `external` (a
//! deployment pgchaos did not start, named by DSNs). Nothing outside this module starts a
//! server.
//!
//! Files: `template.rs` (the cluster every launcher makes: roles, database, settings),
//! `native/` (local processes, the initdb template, teardown; `failover.rs` the standby), `docker.rs` (containers of
//! `container`'s images, on testcontainers-modules), `compose.rs` (compose files that start
//! those containers for a person), `external.rs` (the refusals that keep a run inside what
//! it owns), `proxy.rs` (the loopback link proxy of the link faults), `runtime.rs` (the
//! per-user runtime directory and what dead runs left there), `reaper.rs` (the watcher that
//! cleans up after a harness killed with SIGKILL), `cpu.rs` (pinning a sequential run).
//! May import `vocab`, `topology`, `tls`, `safe_fs`, `provision`, `pooler`, `container`, `sql`.

pub mod capability;
pub mod compose;
pub mod cpu;
pub mod docker;
pub mod external;
pub mod native;
pub mod owned;
pub mod process;
pub mod proxy;
pub mod reaper;
pub mod runtime;
pub mod template;

use crate::pooler::PoolMode;
use crate::pooler::Pooler;
use crate::provision;
use crate::tls;
use crate::topology::Topology;
pub use crate::vocab::Versions;
use anyhow::{Context, Result, anyhow, bail};
pub use capability::Capability;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;
pub use template::{CLIENT_ROLE, DB, SUPERUSER};
use tokio_postgres::{Client, Config};

/// Every connect and query the harness makes is bounded by this.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A boxed future (the launcher traits are object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Which server a control acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    Postgres,
    Pooler,
}

/// Process-level controls (faults the nemesis can schedule, and teardown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Orderly stop.
    Stop,
    /// SIGKILL to the server's process group.
    Kill,
    /// SIGSTOP: the process hangs without closing its sockets.
    Pause,
    /// SIGCONT.
    Resume,
    /// SIGINT to the server's process, waited for (PostgreSQL: fast shutdown; PgBouncer:
    /// safe shutdown); SIGKILL after 5 s.
    Interrupt,
}

/// A running cluster's servers, as its launcher provides them: the core every launcher has,
/// and an accessor for each optional [`Capability`], `None` where the launcher does not offer
/// it ([`capability::offers`]; a topology that needs one its launcher lacks is refused before
/// it runs, [`capability::refusal`]).
pub trait Servers: Send {
    /// OS process ids (postmaster, pooler), where the launcher has them.
    fn pids(&self) -> (Option<i32>, Option<i32>);
    /// The servers are processes on this host (their pids can be watched in /proc).
    fn local(&self) -> bool;
    /// Err, with the server's log tail, when a server has died.
    fn check_alive(&mut self) -> Result<()>;
    /// Copy the servers' logs into `dir`.
    fn save_logs(&self, dir: &Path) -> Result<()>;
    /// Stop everything and remove what the run created. Idempotent.
    fn shutdown(&mut self);
    /// [`Capability::Processes`].
    fn processes(&mut self) -> Option<&mut dyn Processes> {
        None
    }
    /// [`Capability::BackendSignals`].
    fn backends(&mut self) -> Option<&mut dyn BackendSignals> {
        None
    }
    /// [`Capability::Failover`].
    fn failover(&mut self) -> Option<&mut dyn Failover> {
        None
    }
    /// [`Capability::Partitions`].
    fn partitions(&mut self) -> Option<&mut dyn Partitions> {
        None
    }
    /// [`Capability::Links`]: the link proxy between the pooler and PostgreSQL, when the
    /// topology faults that link.
    fn link(&self) -> Option<&proxy::Proxy> {
        None
    }
}

/// Process control of the servers ([`Capability::Processes`]).
pub trait Processes: Send {
    fn control(&mut self, which: Which, what: Control) -> Result<()>;
    /// Stop and start one server again on the same port.
    fn restart(&mut self, which: Which) -> BoxFuture<'_, Result<()>>;
}

/// Signals to one PostgreSQL backend ([`Capability::BackendSignals`]).
pub trait BackendSignals: Send {
    /// Send `sig` to the backend by the pid PostgreSQL reports for it; false when it is not
    /// there.
    fn signal_backend(&mut self, pid: i32, sig: i32) -> Result<bool>;
}

/// Fail over to the standby ([`Capability::Failover`], `postgres.standby: true`).
pub trait Failover: Send {
    /// The port of the current primary PostgreSQL (after [`Failover::promote`], the new
    /// primary's).
    fn primary_port(&self) -> u16;
    /// Fence the primary (immediate stop; it is gone before anything else happens), promote
    /// the standby and wait until it is out of recovery, and, with a pooler, repoint the
    /// pooler to it and confirm that a client connection through the pooler reaches it.
    /// Afterwards [`Servers::pids`] and [`Processes`] of [`Which::Postgres`] act on the new
    /// primary, and the old primary stays stopped. Once only: there is no standby any more.
    fn promote(&mut self) -> BoxFuture<'_, Result<()>>;
    /// After a promote: make a new streaming standby of the new primary (in the fenced
    /// primary's place), so the next failover has one. A no-op while a standby runs.
    fn rebuild_standby(&mut self) -> BoxFuture<'_, Result<()>>;
}

/// Cut a host off ([`Capability::Partitions`]).
pub trait Partitions: Send {
    /// Cut PgBouncer's host off from `peer` (every packet dropped both ways), or heal the
    /// cut (`None`).
    fn partition(&mut self, peer: Option<crate::vocab::fault::Peer>) -> Result<()>;
}

/// Turns a topology into a running cluster.
pub trait Launcher {
    /// `native`, ...
    fn name(&self) -> &'static str;
    fn launch<'a>(&'a self, topology: &'a Topology) -> BoxFuture<'a, Result<Cluster>>;
}

/// A running topology: the handle the runner, the observer and the nemesis use.
pub struct Cluster {
    pub topology: Topology,
    pub pooler: std::sync::Arc<dyn Pooler>,
    /// The launcher that started it.
    pub launcher: &'static str,
    /// PostgreSQL's binaries (`pgbench` for `pgchaos bench`).
    pub pg_bin_dir: PathBuf,
    /// The private run directory: Unix sockets, data, logs, credentials.
    pub run_dir: PathBuf,
    /// PostgreSQL's port at launch; after a failover the primary's is [`Cluster::pg_port_now`].
    pub pg_port: u16,
    /// The current primary's port (changes when the `promote` fault fails over).
    pub primary_port: std::sync::atomic::AtomicU16,
    pub pooler_port: Option<u16>,
    /// A second port of the pooler's, for its admin console (pgpool-II's PCP).
    pub pooler_admin_port: Option<u16>,
    /// The pooler's container, as its console reaches it (`launcher: docker`).
    pub pooler_container: Option<crate::pooler::InContainer>,
    /// Replicas of the pooler beyond the first (`replicas:`): each one's port and the
    /// directory of its Unix socket (clients are spread over all: client `c` uses replica
    /// `c % replicas`).
    pub pooler_replicas: Vec<(u16, PathBuf)>,
    pub versions: Versions,
    pub ready_ms: u128,
    /// The CPU the harness and these servers were pinned to (see [`cpu`]), if any.
    pub pinned_cpu: Option<usize>,
    /// `(role, password)`: the run's random passwords for TCP logins.
    pub passwords: Vec<(String, String)>,
    /// Behind a lock: the nemesis controls them while the runner and observer share the
    /// cluster (a current-thread runtime; the lock is held across a restart's await).
    pub servers: tokio::sync::Mutex<Box<dyn Servers>>,
    /// Whether the servers run on this host (their pids can be watched in /proc).
    pub local: bool,
    /// The harness reaches the servers over Unix sockets in the run directory (native);
    /// otherwise over loopback TCP with the run's passwords (containers).
    pub unix_sockets: bool,
    /// `launcher: external`: the deployment's endpoints and roles (every connection is made
    /// from them instead of the run's own ports and roles).
    pub external: Option<external::Endpoints>,
}

impl Cluster {
    /// A logical client's connection: through the pooler, or direct for a pooler-less
    /// topology, over the Unix socket in the private run directory (the TCP listener, on
    /// loopback, is for people and tools; a socket costs less per connect and round trip).
    pub fn client_config(&self) -> Config {
        if let Some(e) = &self.external {
            return e.pooler.clone();
        }
        let port = self.pooler_port.unwrap_or(self.pg_port_now());
        self.config(true, port, CLIENT_ROLE, DB, "pgchaos")
    }

    /// Logical client `c`'s connection: through the replica of the pooler it uses.
    pub fn client_config_for(&self, c: usize) -> Config {
        if self.external.is_some() {
            return self.client_config();
        }
        let n = 1 + self.pooler_replicas.len();
        match c % n {
            0 => self.client_config(),
            k => {
                let (port, dir) = &self.pooler_replicas[k - 1];
                if !self.unix_sockets {
                    return self.config(false, *port, CLIENT_ROLE, DB, "pgchaos");
                }
                let mut cfg = Config::new();
                cfg.host_path(dir)
                    .port(*port)
                    .user(CLIENT_ROLE)
                    .dbname(DB)
                    .connect_timeout(IO_TIMEOUT)
                    .application_name("pgchaos");
                cfg
            }
        }
    }

    /// Every replica's admin console (the first's is [`Cluster::console_at`]).
    pub fn consoles_at(&self) -> Vec<crate::pooler::ConsoleAt> {
        let Some(first) = self.console_at() else {
            return Vec::new();
        };
        let mut out = vec![first.clone()];
        for (port, dir) in &self.pooler_replicas {
            out.push(crate::pooler::ConsoleAt {
                unix_dir: self.unix_sockets.then(|| dir.clone()),
                host: None,
                pool_user: None,
                port: *port,
                ..first.clone()
            });
        }
        out
    }

    /// A direct PostgreSQL connection over TCP on loopback (what `up` prints) as `user`,
    /// with the run's password.
    pub fn direct_config(&self, user: &str) -> Config {
        if let Some(e) = &self.external {
            return self.external_direct(e, user);
        }
        self.config(false, self.pg_port_now(), user, DB, "pgchaos")
    }

    /// A direct connection over PostgreSQL's Unix socket in the private run directory (the
    /// observer's, contender's and nemesis's path).
    pub fn socket_config(&self, user: &str) -> Config {
        if let Some(e) = &self.external {
            return self.external_direct(e, user);
        }
        self.config(true, self.pg_port_now(), user, DB, "pgchaos-observer")
    }

    /// A deployment's PostgreSQL as `user`: the observer's role, or the clients' (the
    /// contender's outside connection).
    fn external_direct(&self, e: &external::Endpoints, user: &str) -> Config {
        if user == e.client_role {
            e.client_direct()
        } else {
            e.postgres.clone()
        }
    }

    /// The role the logical clients log in as.
    pub fn client_role(&self) -> &str {
        self.external
            .as_ref()
            .map_or(CLIENT_ROLE, |e| &e.client_role)
    }

    /// The role of the observer, the contender and the nemesis (the cluster's superuser
    /// when the harness started it).
    pub fn observer_role(&self) -> &str {
        self.external
            .as_ref()
            .map_or(SUPERUSER, |e| &e.observer_role)
    }

    /// The database name the clients give the pooler (its pool's name on the console).
    pub fn pool_database(&self) -> &str {
        self.external.as_ref().map_or(DB, |e| &e.pooler_database)
    }

    /// Where the pooler's admin console is (its Unix socket natively, loopback TCP with
    /// the superuser's password in containers, the admin DSN of a deployment).
    pub fn console_at(&self) -> Option<crate::pooler::ConsoleAt> {
        if !self.pooler.has_console() {
            return None;
        }
        if let Some(e) = &self.external {
            return e.console_at();
        }
        Some(crate::pooler::ConsoleAt {
            unix_dir: self.unix_sockets.then(|| self.run_dir.clone()),
            host: None,
            pool_user: None,
            port: self.pooler_port?,
            admin_port: self.pooler_admin_port,
            user: SUPERUSER.to_string(),
            password: self.password(SUPERUSER).map(str::to_string),
            container: self.pooler_container.clone(),
        })
    }

    /// Open the pooler's admin console.
    pub async fn console(&self) -> Result<Box<dyn crate::pooler::Console>> {
        let at = self
            .console_at()
            .ok_or_else(|| anyhow!("this topology has no pooler with an admin console"))?;
        self.pooler.console(&at).await.with_context(|| {
            format!(
                "connecting to {}'s admin console",
                self.pooler.display_name()
            )
        })
    }

    fn config(&self, unix: bool, port: u16, user: &str, db: &str, app: &str) -> Config {
        let mut c = Config::new();
        if unix && self.unix_sockets {
            c.host_path(&self.run_dir);
        } else {
            c.host("127.0.0.1");
            if let Some(pw) = self.password(user) {
                c.password(pw);
            }
        }
        c.port(port)
            .user(user)
            .dbname(db)
            .connect_timeout(IO_TIMEOUT)
            .application_name(app);
        c
    }

    /// The run's password for a role (TCP logins need it).
    pub fn password(&self, role: &str) -> Option<&str> {
        self.passwords
            .iter()
            .find(|(r, _)| r == role)
            .map(|(_, p)| p.as_str())
    }

    fn dsn(&self, port: u16, user: &str, db: &str) -> String {
        format!(
            "postgresql://{user}:{}@127.0.0.1:{port}/{db}?sslmode=disable",
            self.password(user).unwrap_or_default()
        )
    }

    /// The clients' DSN over TCP (through the pooler when there is one).
    pub fn client_dsn(&self) -> String {
        self.dsn(
            self.pooler_port.unwrap_or(self.pg_port_now()),
            CLIENT_ROLE,
            DB,
        )
    }
    /// The DSN of each replica of the pooler beyond the first.
    pub fn replica_dsns(&self) -> Vec<String> {
        self.pooler_replicas
            .iter()
            .map(|(port, _)| self.dsn(*port, CLIENT_ROLE, DB))
            .collect()
    }
    pub fn direct_dsn(&self) -> String {
        self.dsn(self.pg_port_now(), SUPERUSER, DB)
    }
    pub fn admin_dsn(&self) -> Option<String> {
        let db = self.pooler.admin_database()?;
        Some(self.dsn(self.pooler_port?, SUPERUSER, db))
    }

    /// The current primary's port.
    pub fn pg_port_now(&self) -> u16 {
        self.primary_port.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fail over to the standby and make a new one (see [`Failover::promote`]); direct
    /// connections go to the new primary afterwards.
    pub async fn promote(&self) -> Result<()> {
        let mut s = self.servers.lock().await;
        let f = s
            .failover()
            .ok_or_else(|| self.lacks(Capability::Failover))?;
        f.promote().await?;
        self.primary_port
            .store(f.primary_port(), std::sync::atomic::Ordering::Relaxed);
        f.rebuild_standby().await
    }

    /// The error of a capability the launcher does not offer: unreachable for a topology
    /// that passed [`capability::refusal`].
    fn lacks(&self, c: Capability) -> anyhow::Error {
        anyhow!("launcher {} does not offer {c:?}", self.launcher)
    }

    /// Read the pooler's running settings on its admin console and compare them with what
    /// the topology declares (see [`verify_pooler_config`]); `when` names the moment ("after
    /// pooler_reload"). Ok without a pooler.
    pub async fn verify_pooler_config(&self, when: &str) -> Result<()> {
        for (k, at) in self.consoles_at().iter().enumerate() {
            let log = match k {
                0 => self.run_dir.join(self.pooler.log_file()),
                k => self.pooler_replicas[k - 1].1.join(self.pooler.log_file()),
            };
            verify_pooler_config(
                self.pooler.as_ref(),
                at,
                &self.topology.name,
                when,
                Some(&log),
            )
            .await?;
        }
        Ok(())
    }

    pub fn pool_mode(&self) -> Option<PoolMode> {
        self.pooler.rules().mode
    }

    /// OS process ids (postmaster, pooler); `(None, None)` while a fault holds the servers.
    pub fn pids(&self) -> (Option<i32>, Option<i32>) {
        self.servers
            .try_lock()
            .map(|s| s.pids())
            .unwrap_or((None, None))
    }

    /// See [`Processes::control`].
    pub async fn control(&self, which: Which, what: Control) -> Result<()> {
        let mut s = self.servers.lock().await;
        let p = s
            .processes()
            .ok_or_else(|| self.lacks(Capability::Processes))?;
        p.control(which, what)
    }

    /// Cut or heal (see [`Partitions::partition`]).
    pub async fn partition(&self, peer: Option<crate::vocab::fault::Peer>) -> Result<()> {
        let mut s = self.servers.lock().await;
        let p = s
            .partitions()
            .ok_or_else(|| self.lacks(Capability::Partitions))?;
        p.partition(peer)
    }

    /// Signal one backend (see [`BackendSignals::signal_backend`]).
    pub async fn signal_backend(&self, pid: i32, sig: i32) -> Result<bool> {
        let mut s = self.servers.lock().await;
        let b = s
            .backends()
            .ok_or_else(|| self.lacks(Capability::BackendSignals))?;
        b.signal_backend(pid, sig)
    }

    /// See [`Processes::restart`].
    pub async fn restart(&self, which: Which) -> Result<()> {
        let mut s = self.servers.lock().await;
        let p = s
            .processes()
            .ok_or_else(|| self.lacks(Capability::Processes))?;
        p.restart(which).await
    }

    /// Err when a server has died (Ok while a fault holds the servers: it restarts them).
    pub fn check_alive(&self) -> Result<()> {
        match self.servers.try_lock() {
            Ok(mut s) => s.check_alive(),
            Err(_) => Ok(()),
        }
    }

    pub fn save_logs(&self, dir: &Path) -> Result<()> {
        match self.servers.try_lock() {
            Ok(s) => s.save_logs(dir),
            Err(_) => bail!("the servers' logs cannot be read while a fault holds them"),
        }
    }

    pub fn shutdown(&mut self) {
        self.servers.get_mut().shutdown();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.servers.get_mut().shutdown();
    }
}

/// The topology's fault kinds that `pred` picks, comma-separated (`None` when none is):
/// what a launcher names when it refuses a topology.
pub fn faults_named(t: &Topology, pred: impl Fn(crate::vocab::Op) -> bool) -> Option<String> {
    let named: Vec<String> = t
        .faults
        .kinds
        .keys()
        .filter(|op| pred(**op))
        .map(|op| op.to_string())
        .collect();
    (!named.is_empty()).then(|| named.join(", "))
}

/// How to launch.
#[derive(Clone, Copy, Debug)]
pub struct LaunchOptions {
    /// Refuse a server whose version differs from the declared one.
    pub strict_versions: bool,
    /// Where a sequential run executes (see [`cpu`]).
    pub cpu: cpu::CpuChoice,
    /// Overrides the topology's `launcher:` (`--launcher`).
    pub launcher: Option<crate::topology::LauncherKind>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            strict_versions: false,
            cpu: cpu::CpuChoice::Off,
            launcher: None,
        }
    }
}

/// The binaries a topology needs, provisioning what is missing: PostgreSQL's, and its
/// pooler's (obtained by the pooler).
pub fn binaries(
    t: &Topology,
    strict: bool,
) -> Result<(provision::PgBinaries, Option<provision::PoolerBinary>)> {
    let opts = provision::Options::from_env(strict);
    let pg = provision::postgres(&t.postgres.version, t.postgres.bin_dir.as_deref(), &opts)?;
    let pooler = match &t.pooler {
        Some(spec) => Some(crate::pooler::for_topology(t).provision(spec, &opts)?),
        None => None,
    };
    Ok((pg, pooler))
}

/// Obtain the binaries a topology needs (provisioning what is missing), place the harness
/// thread per `opts.cpu` (after provisioning: a build uses every CPU; before the servers
/// start, so they inherit it), and launch with the topology's launcher (or `opts.launcher`).
pub async fn launch(topology: &Topology, opts: LaunchOptions) -> Result<Cluster> {
    let kind = opts.launcher.unwrap_or(topology.launcher);
    if let Some(why) = capability::refusal(topology, kind) {
        bail!("{why}");
    }
    if kind == crate::topology::LauncherKind::External {
        // Nothing to provision: the deployment runs its own servers.
        return external::ExternalLauncher.launch(topology).await;
    }
    let (pg, bouncer) = binaries(topology, opts.strict_versions)?;
    let launcher: Box<dyn Launcher> = match kind {
        crate::topology::LauncherKind::Native => Box::new(native::NativeLauncher::new(pg, bouncer)),
        crate::topology::LauncherKind::Docker => Box::new(docker::DockerLauncher::new(pg, bouncer)),
        crate::topology::LauncherKind::External => unreachable!("launched above"),
    };
    let pinned = match kind {
        crate::topology::LauncherKind::Native => cpu::pin(opts.cpu)?,
        // The servers run in the engine's containers, or are not ours.
        crate::topology::LauncherKind::Docker | crate::topology::LauncherKind::External => None,
    };
    let mut cluster = launcher.launch(topology).await?;
    cluster.pinned_cpu = pinned;
    Ok(cluster)
}

/// Connect with a timeout around the whole startup (TCP connect timeout alone does not
/// cover a hung server).
/// A notification a connection received (`LISTEN`/`NOTIFY`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heard {
    pub channel: String,
    pub payload: String,
    /// The notifying backend's pid.
    pub pid: i32,
}

/// [`connect`], keeping the notifications the connection receives: its task drives the
/// connection by `poll_message` (the `Future` of a tokio-postgres connection drops them) and
/// sends each on the channel returned. The task ends with the connection.
pub async fn connect_heard(
    config: &Config,
) -> Result<(Client, tokio::sync::mpsc::UnboundedReceiver<Heard>)> {
    connect_heard_within(config, IO_TIMEOUT).await
}

/// [`connect_heard`] bounded by `bound` instead of [`IO_TIMEOUT`]. A connect that does not
/// complete in time fails with [`ConnectTimedOut`] (a pooler that accepts no more clients:
/// pgpool-II's clients beyond `num_init_children` wait in the kernel's accept queue).
pub async fn connect_heard_within(
    config: &Config,
    bound: Duration,
) -> Result<(Client, tokio::sync::mpsc::UnboundedReceiver<Heard>)> {
    let (config, tls) = tls::prepare(config);
    let (client, mut conn) = tokio::time::timeout(bound, config.connect(tls))
        .await
        .map_err(|_| anyhow::Error::new(ConnectTimedOut(bound)))??;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(Heard {
                    channel: n.channel().to_string(),
                    payload: n.payload().to_string(),
                    pid: n.process_id(),
                });
            }
        }
    });
    Ok((client, rx))
}

/// A connect that did not complete within its bound.
#[derive(Debug)]
pub struct ConnectTimedOut(pub Duration);

impl std::fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connect timed out after {:?}", self.0)
    }
}

impl std::error::Error for ConnectTimedOut {}

pub async fn connect(config: &Config) -> Result<Client> {
    tls::connect_within(config, IO_TIMEOUT).await
}

/// The pooler runs what was declared: read its running settings on its admin console at `at`
/// ([`crate::pooler::Console::settings`], PgBouncer's `SHOW CONFIG`) and compare every setting
/// the harness relies on ([`Pooler::expected_config`]) with them. An error names each setting
/// that differs, the declared value and the one the pooler reports, then the last lines of
/// `log` (a RELOAD of a file PgBouncer cannot parse answers OK, logs why, and leaves the
/// settings after the bad line at their defaults). `when`: "at launch", "after ...".
pub async fn verify_pooler_config(
    pooler: &dyn Pooler,
    at: &crate::pooler::ConsoleAt,
    topology: &str,
    when: &str,
    log: Option<&Path>,
) -> Result<()> {
    if pooler.expected_config().is_empty() {
        return Ok(());
    }
    let console = pooler.console(at).await.with_context(|| {
        format!("connecting to the pooler's admin console {when} to read its settings")
    })?;
    let running = console
        .settings()
        .await
        .with_context(|| format!("reading the pooler's settings {when}"))?;
    if running.is_empty() {
        bail!("the pooler's admin console {when} listed no settings");
    }
    let differences = pooler.config_differences(&running);
    if differences.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "{when}, {} does not run what topology {topology} declares ({}):",
        differences[0].pooler,
        pooler.settings_source()
    );
    for d in &differences {
        msg.push_str(&format!("\n  {d}"));
    }
    if let Some(log) = log.filter(|l| l.exists()) {
        msg.push_str(&format!(
            "\n  last lines of its log:\n{}",
            process::log_tail(log, 15)
        ));
    }
    Err(anyhow!(msg))
}

/// The versions that ran: PostgreSQL's `version()` on `pg`, the pooler's as its console
/// at `at` reads it (when there is one).
pub async fn read_versions(
    pg: &Config,
    pooler: &dyn Pooler,
    at: Option<&crate::pooler::ConsoleAt>,
    v: &mut Versions,
) -> Result<()> {
    let pg = connect(pg).await?;
    let full = simple_first(&pg, crate::sql::VERSION).await?;
    let mut ran = None;
    if let Some(at) = at {
        ran = Some(pooler.console(at).await?.version().await?);
    }
    v.ran(&full, ran.as_deref())
}

/// `credentials.txt`: every role's DSN over loopback TCP on each port (PostgreSQL's, then
/// the pooler's), under a one-line `header`.
pub fn credentials(header: &str, ports: &[u16], passwords: &[(String, String)]) -> String {
    let mut text = format!("# pgchaos: {header}\n");
    for port in ports {
        for (role, pw) in passwords {
            text.push_str(&format!(
                "postgresql://{role}:{pw}@127.0.0.1:{port}/{DB}?sslmode=disable\n"
            ));
        }
    }
    text
}

/// A port free on loopback now (the server binds it moments later).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    Ok(l.local_addr()?.port())
}

/// Bound any future by [`IO_TIMEOUT`].
pub async fn timed<T, E: Into<anyhow::Error>>(
    f: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> Result<T> {
    match tokio::time::timeout(IO_TIMEOUT, f).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => bail!("query timed out after {IO_TIMEOUT:?}"),
    }
}

/// First column of the first row of a simple query.
pub async fn simple_first(client: &Client, sql: &str) -> Result<String> {
    for msg in timed(client.simple_query(sql)).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = msg {
            return Ok(row.get(0).unwrap_or_default().to_string());
        }
    }
    bail!("{sql:?} returned no row")
}
