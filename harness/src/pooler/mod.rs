//! The pooler seam: everything a pooler is, one folder per pooler (`pgbouncer/`, `pgpool/`),
//! registered by one line in [`KINDS`]; "none" ([`NoPooler`]) is clients straight to
//! PostgreSQL. A pooler owns its topology section (read through `topology::Section`, which
//! keeps every error positioned), its provisioning, its config files and how its process
//! starts, its admin console ([`Console`]: commands, its view of the connections in the
//! common words of [`view`], its running settings and version), the faults done on that console
//! ([`ConsoleFault`]), its container recipe, the import of its own config file, and the
//! pooling rules the model and the runner predict with ([`PoolRules`]: when a server is linked
//! to a client, when it is released, what the reset does, what a client's disconnect does).
//! The rest of the harness names no pooler: it asks the [`Pooler`] a topology's section built
//! (`for_topology`). docs/poolers.md says how to add one.
//!
//! May import `vocab`, `topology` (the section reader), `tls` (its console's connection),
//! `safe_fs` (its console's files) and `provision` (its machinery); the launcher, observer,
//! nemesis, runner, model and reports ask it.

pub mod import;
pub mod pgbouncer;
pub mod pgpool;
pub mod view;

use crate::topology::{PoolerSection, Topology};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How a pooler hands out servers (PgBouncer's `pool_mode`): for a whole client session,
/// for a transaction, or for a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    Session,
    Transaction,
    Statement,
}

impl PoolMode {
    pub const ALL: [PoolMode; 3] = [
        PoolMode::Session,
        PoolMode::Transaction,
        PoolMode::Statement,
    ];

    /// The `pgbouncer.ini` / YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }

    pub fn from_name(s: &str) -> Option<PoolMode> {
        PoolMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind of pooler, before any topology names it: its topology section (whose parse builds
/// the rest, [`Pooler`]) and the import of its own configuration file.
pub trait Kind: Sync {
    /// Its topology section.
    fn section(&self) -> &'static dyn PoolerSection;
    /// Its name as people write it (`PgBouncer`).
    fn display_name(&self) -> &'static str;
    /// What its configuration file is called (`pgbouncer.ini`), for messages.
    fn file_kind(&self) -> &'static str;
    /// Whether `src` is its configuration file.
    fn recognises(&self, src: &str) -> bool;
    /// A topology's text from its configuration file `src` (read from `path`).
    fn import(
        &self,
        src: &str,
        path: &std::path::Path,
        origin: &Origin,
    ) -> anyhow::Result<Imported>;
}

/// Every pooler pgchaos knows. Adding a pooler is its folder and one line here.
pub const KINDS: &[&dyn Kind] = &[&pgbouncer::PGBOUNCER, &pgpool::PGPOOL];

/// Whose raw rows a history of format 1 holds: PgBouncer's, the one pooler of that format.
pub const FORMAT_1_ROWS: view::RawRows = pgbouncer::view::ROWS;

/// A pooler's name as people write it (`pgbouncer` -> `PgBouncer`); an unknown name as it
/// is.
pub fn display_name(name: &str) -> String {
    KINDS
        .iter()
        .find(|k| k.section().key() == name)
        .map_or_else(|| name.to_string(), |k| k.display_name().to_string())
}

/// Their topology sections (what `Topology::parse` is handed).
pub static SECTIONS: std::sync::LazyLock<Vec<&'static dyn PoolerSection>> =
    std::sync::LazyLock::new(|| KINDS.iter().map(|k| k.section()).collect());

/// Where an imported configuration comes from, and what the topology declares.
pub struct Origin<'a> {
    /// The file, as shown in the topology's header comment.
    pub ini: &'a std::path::Path,
    /// When it was imported (a timestamp for the header comment).
    pub when: &'a str,
    /// The topology's name.
    pub name: &'a str,
    /// The pooler release to declare (`None`: the pooler's default).
    pub version: Option<&'a str>,
    /// The database and user under test, and the keys the user lets the import drop.
    pub select: Select<'a>,
}

/// `pgchaos import --database NAME --user NAME --drop KEY,...`: which of the file's pools is
/// the one under test, and the semantic keys the user acknowledges are not modelled.
#[derive(Clone, Copy, Debug, Default)]
pub struct Select<'a> {
    pub database: Option<&'a str>,
    pub user: Option<&'a str>,
    pub drop: &'a [String],
}

/// An imported topology.
pub struct Imported {
    pub yaml: String,
    /// One line on what was taken and dropped, for the terminal.
    pub summary: String,
    /// Every dropped key with its reason (`listen_addr = "*": pgchaos listens on loopback
    /// only`), printed on stderr.
    pub dropped: Vec<String>,
}

/// A boxed future (the pooler trait is object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Every admin command is bounded by this (as every connect and query of the harness).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One admin console command (simple query protocol: consoles refuse the extended one),
/// bounded by [`ADMIN_TIMEOUT`].
pub async fn admin_query(
    admin: &tokio_postgres::Client,
    sql: &str,
) -> anyhow::Result<Vec<tokio_postgres::SimpleQueryMessage>> {
    match tokio::time::timeout(ADMIN_TIMEOUT, admin.simple_query(sql)).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("{sql} timed out after {ADMIN_TIMEOUT:?}"),
    }
}

/// What one kind of pooler provides to the rest of the harness.
pub trait Pooler: Send + Sync {
    /// `none`, `pgbouncer`.
    fn name(&self) -> &'static str;
    /// The rules the model and the runner use.
    fn rules(&self) -> PoolRules;
    /// Obtain the pooler's executable for `spec` (its declared version, its `binary`),
    /// provisioning what is missing.
    fn provision(
        &self,
        spec: &crate::topology::PoolerSpec,
        opts: &crate::provision::Options,
    ) -> anyhow::Result<crate::provision::PoolerBinary> {
        let _ = opts;
        anyhow::bail!("pgchaos cannot provision {} {}", self.name(), spec.version)
    }
    /// Files the launcher writes into the run directory before starting the pooler
    /// (`None` when there is no pooler process).
    fn config_files(&self, cx: &ConfigContext) -> Option<Vec<ConfigFile>>;
    /// The database on its client port that is its admin console, when it has one a
    /// person can reach with psql (PgBouncer's `pgbouncer`): `up` prints its DSN.
    fn admin_database(&self) -> Option<&'static str>;
    /// Admin commands that drop every client and server of `db` and accept new ones again
    /// (the reset between cases).
    fn reset_commands(&self, db: &str) -> Vec<String>;
    /// The pooler's name as people write it (`PgBouncer`).
    fn display_name(&self) -> &'static str {
        "no pooler"
    }
    /// Its admin console listens on a port of its own (pgpool-II's PCP): the launcher picks
    /// one ([`ConfigContext::admin_port`], [`ConsoleAt::admin_port`]).
    fn needs_admin_port(&self) -> bool {
        false
    }
    /// Its log file in the run directory.
    fn log_file(&self) -> &'static str {
        "pooler.log"
    }
    /// The arguments its executable is started with, given its main config file.
    fn command_args(&self, main_config: &std::path::Path) -> Vec<std::ffi::OsString> {
        vec![main_config.as_os_str().to_os_string()]
    }
    /// Open its admin console at `at` (`None` from [`Pooler::has_console`]: none).
    fn console<'a>(&'a self, at: &'a ConsoleAt) -> BoxFuture<'a, anyhow::Result<Box<dyn Console>>> {
        let _ = at;
        Box::pin(async { anyhow::bail!("this pooler has no admin console") })
    }
    /// Whether it has an admin console (every pooler does; "none" does not).
    fn has_console(&self) -> bool {
        false
    }
    /// Admin commands that make it read its config files again (after the launcher
    /// rewrote them, e.g. to repoint it at a new primary).
    fn reload_commands(&self) -> Vec<String> {
        Vec::new()
    }
    /// How a fault of the servers that the pooler's admin console performs is done (`None`:
    /// not one of its console's).
    fn console_fault(&self, op: crate::vocab::Op, db: &str) -> Option<ConsoleFault> {
        let _ = (op, db);
        None
    }
    /// How it runs in a container of its own (`launcher: docker`, `pgchaos compose`);
    /// `None`: it cannot yet.
    fn container(&self) -> Option<ContainerRecipe> {
        None
    }
    /// Where its running settings are read, for messages (PgBouncer: `SHOW CONFIG`).
    fn settings_source(&self) -> &'static str {
        "its admin console"
    }
    /// The settings the harness relies on, with the values the topology declares (or the
    /// pooler's defaults the model assumes where it declares none).
    fn expected_config(&self) -> Vec<ExpectedSetting> {
        Vec::new()
    }
    /// Compare the running settings ([`Console::settings`]) with
    /// [`Pooler::expected_config`], in the pooler's own units and formats: one entry per
    /// setting that differs.
    fn config_differences(&self, _running: &[(String, String)]) -> Vec<ConfigDifference> {
        Vec::new()
    }
}

/// Where the harness reaches a pooler's admin console: its Unix socket directory (native)
/// or loopback TCP with the run's password (containers), its client port and, for a pooler
/// whose console listens apart (pgpool-II's PCP), that port.
#[derive(Clone)]
pub struct ConsoleAt {
    pub unix_dir: Option<std::path::PathBuf>,
    /// The TCP host when there is no Unix directory (`None`: loopback).
    pub host: Option<String>,
    /// Read only this user's connections (a deployment's pool database may be shared by
    /// other roles; `None`: the harness's own cluster, where the clients are the only users).
    pub pool_user: Option<String>,
    pub port: u16,
    pub admin_port: Option<u16>,
    pub user: String,
    pub password: Option<String>,
    /// The pooler runs in a container of this host's engine (`launcher: docker`); `None`:
    /// a local process (native) or a deployment's.
    pub container: Option<InContainer>,
}

/// A pooler in a container, as its console reaches it beyond the published ports.
#[derive(Clone, Debug)]
pub struct InContainer {
    /// The engine's id of the pooler's container (`docker exec` reaches its processes).
    pub pooler: String,
    /// The id of PostgreSQL's container at launch: the backend pids a pooler's view names are
    /// that container's own.
    pub postgres: String,
    /// The pooler's executable as provisioned on this host (its admin tools, beside it, run
    /// here against the published ports).
    pub executable: std::path::PathBuf,
    /// A private directory of the run on this host, for files the console needs (a password
    /// file).
    pub dir: std::path::PathBuf,
}

/// The password is never printed.
impl std::fmt::Debug for ConsoleAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleAt")
            .field("unix_dir", &self.unix_dir)
            .field("host", &self.host)
            .field("pool_user", &self.pool_user)
            .field("port", &self.port)
            .field("admin_port", &self.admin_port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("container", &self.container)
            .finish()
    }
}

impl ConsoleAt {
    /// A libpq-style connection to `db` on the client port (consoles that are databases).
    pub fn pg_config(&self, db: &str) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        match &self.unix_dir {
            Some(d) => {
                c.host_path(d);
            }
            None => {
                c.host(self.host.as_deref().unwrap_or("127.0.0.1"));
                if let Some(pw) = &self.password {
                    c.password(pw);
                }
            }
        }
        c.port(self.port)
            .user(&self.user)
            .dbname(db)
            .connect_timeout(ADMIN_TIMEOUT)
            .application_name("pgchaos");
        c
    }
}

/// An open admin console: what the observer, the nemesis and the launcher ask of a pooler
/// beyond its clients' connections. Every call is bounded by [`ADMIN_TIMEOUT`].
pub trait Console {
    /// One admin command (a console fault, the reset between cases, a reload).
    fn command<'a>(&'a self, cmd: &'a str) -> BoxFuture<'a, anyhow::Result<()>>;
    /// The pooler's view of `db`'s connections in the common words of [`view`] (`pools`:
    /// its pools' counts too).
    fn look<'a>(&'a self, db: &'a str, pools: bool) -> BoxFuture<'a, anyhow::Result<view::Look>>;
    /// The settings it runs with, `(name, value)` in its own formats (compared by
    /// [`Pooler::config_differences`]).
    fn settings(&self) -> BoxFuture<'_, anyhow::Result<Vec<(String, String)>>>;
    /// The version that runs (also the launcher's readiness probe).
    fn version(&self) -> BoxFuture<'_, anyhow::Result<String>>;
    /// The connection has closed (a fault restarted the pooler): open another.
    fn is_closed(&self) -> bool;
    /// Sessions on the pooler a run with tag `tag` did not open ([`Strangers`]), for
    /// `launcher: external`; `None` when this pooler's console cannot list its clients.
    fn strangers<'a>(
        &'a self,
        db: &'a str,
        role: &'a str,
        tag: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<Strangers>>> {
        let _ = (db, role, tag);
        Box::pin(async { Ok(None) })
    }
}

/// What a pooler's console shows that a run did not open, one line each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strangers {
    /// Clients of the clients' role whose `application_name` is not the run's tag.
    pub same_role: Vec<String>,
    /// Clients and pools of other users on the run's pool database (a console fault on that
    /// database would act on them).
    pub other_users: Vec<String>,
}

/// Connect a libpq-style connection with a bound on the whole startup.
pub async fn connect_pg(config: &tokio_postgres::Config) -> anyhow::Result<tokio_postgres::Client> {
    crate::tls::connect_within(config, ADMIN_TIMEOUT).await
}

/// A pooler's image and container: what the image carries and where, and what the
/// container is given. The image is built from the provisioned executable (and what the
/// pooler carries with it: [`ContainerRecipe::files`]), the libraries they link and this
/// entrypoint, as PostgreSQL's is (`container::images`).
#[derive(Clone, Debug)]
pub struct ContainerRecipe {
    /// The image repository (`pgchaos/pgbouncer`); the tag is the version that ran.
    pub repo: &'static str,
    /// What the image carries, given the provisioned executable: the pooler's binary first.
    pub files: fn(&std::path::Path) -> anyhow::Result<ImageFiles>,
    /// The server user inside the image, and its home.
    pub user: &'static str,
    pub home: &'static str,
    /// The entrypoint script (`/bin/sh`, the machine's dash): it writes what holds secrets
    /// from the environment (`POSTGRES_PASSWORD`, `CHAOS_PASSWORD`) and runs the pooler on
    /// the main config file, given as its argument or found in `config_dir`.
    pub entrypoint: &'static str,
    /// Where the config files are mounted in the container (read-only, nothing secret).
    pub config_dir: &'static str,
    /// The port it listens on inside the container.
    pub port: u16,
    /// The port its admin console listens on inside the container, when that is a port of
    /// its own ([`Pooler::needs_admin_port`]); published on loopback as the client port is.
    pub admin_port: Option<u16>,
}

/// The files a pooler's image carries: `(path in the image without a leading /, file on this
/// host)`, the pooler's binary first (its SHA-256 labels the image). Every ELF file among
/// them gets the shared libraries `ldd` resolves for it, `ldd` run with `library_path` as
/// `LD_LIBRARY_PATH`; libraries under `provided` are not copied again (the files place them
/// where the image's `LD_LIBRARY_PATH` finds them).
#[derive(Clone, Debug, Default)]
pub struct ImageFiles {
    pub files: Vec<(String, std::path::PathBuf)>,
    pub library_path: Option<String>,
    pub provided: Vec<std::path::PathBuf>,
}

impl ImageFiles {
    /// Just the executable, at `dst`.
    pub fn executable(dst: &str, exe: &std::path::Path) -> ImageFiles {
        ImageFiles {
            files: vec![(dst.to_string(), exe.to_path_buf())],
            ..ImageFiles::default()
        }
    }
}

/// A fault done on the pooler's admin console: `start`'s commands, then (when the fault
/// holds) `heal`'s after `faults.hold`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleFault {
    pub start: Vec<String>,
    /// Run after the hold, whatever became of `start` (so the pooler is never left in the
    /// fault); `None`: the fault does not hold.
    pub heal: Option<Vec<String>>,
}

/// A setting the harness relies on, and the value it expects the pooler to run with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedSetting {
    pub key: String,
    pub value: String,
    /// The topology key that declares it (`pgbouncer.pool_mode`,
    /// `pgbouncer.settings.server_lifetime`); `None`: not declared, so the model assumes the
    /// pooler's default, `value`.
    pub declared_by: Option<String>,
}

/// A setting the pooler runs with another value than the topology declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigDifference {
    /// The pooler, as people name it (`PgBouncer`).
    pub pooler: &'static str,
    pub expected: ExpectedSetting,
    /// What the admin console reports; `None`: it lists no such setting.
    pub running: Option<String>,
    /// Why two texts that look alike differ (e.g. a leading 0 read as octal).
    pub note: Option<String>,
}

impl std::fmt::Display for ConfigDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = &self.expected;
        match &e.declared_by {
            Some(by) => write!(f, "{}: declared {:?} ({by})", e.key, e.value)?,
            None => write!(
                f,
                "{}: not declared, so the model assumes the default {:?}",
                e.key, e.value
            )?,
        }
        match &self.running {
            Some(v) => write!(f, ", {} reports {v:?}", self.pooler)?,
            None => write!(f, ", {} lists no such setting", self.pooler)?,
        }
        if let Some(n) = &self.note {
            write!(f, " ({n})")?;
        }
        Ok(())
    }
}

/// Where the launcher puts things, for config rendering.
pub struct ConfigContext<'a> {
    pub topology_name: &'a str,
    /// The private run directory (Unix sockets live here).
    pub run_dir: &'a std::path::Path,
    pub pg_port: u16,
    /// Reach PostgreSQL over TCP on this loopback host (the link proxy) instead of its
    /// Unix socket.
    pub pg_host: Option<&'a str>,
    /// The address the pooler listens on: loopback natively, every interface inside a
    /// container (whose port is published on the host's loopback only).
    pub listen_addr: &'a str,
    pub listen_port: u16,
    /// The second port it listens on, for its admin console ([`Pooler::needs_admin_port`]).
    pub admin_port: Option<u16>,
    /// The streaming standby's port (`postgres.standby`), reached as the primary is (its Unix
    /// socket directory, or `pg_host`); `None` without one, or once it has been promoted.
    pub standby_port: Option<u16>,
    pub database: &'a str,
    pub superuser: &'a str,
    /// `(role, password)` for every role that may log in over TCP.
    pub passwords: &'a [(String, String)],
}

/// One file the pooler needs.
pub struct ConfigFile {
    pub name: &'static str,
    pub text: String,
    /// The launcher starts the pooler with this file as its argument.
    pub is_main: bool,
}

/// The pooling rules of a whole topology: its pooler's, with the application pool in front.
pub fn rules_for(t: &Topology) -> PoolRules {
    let mut r = for_topology(t).rules();
    r.app_pin = t.app_pool.map(|p| p.pin);
    r.replicas = t.pooler.as_ref().map_or(1, |p| p.replicas as usize);
    r
}

/// The pooler for a topology (built by its section's configuration).
pub fn for_topology(t: &Topology) -> std::sync::Arc<dyn Pooler> {
    match &t.pooler {
        Some(spec) => *spec
            .config
            .build(&t.name)
            .downcast::<std::sync::Arc<dyn Pooler>>()
            .expect("a pooler configuration builds an Arc<dyn Pooler>"),
        None => std::sync::Arc::new(NoPooler),
    }
}

/// Clients straight to PostgreSQL: a connection is a backend.
pub struct NoPooler;

impl Pooler for NoPooler {
    fn name(&self) -> &'static str {
        "none"
    }
    fn rules(&self) -> PoolRules {
        PoolRules::direct()
    }
    fn config_files(&self, _: &ConfigContext) -> Option<Vec<ConfigFile>> {
        None
    }
    fn admin_database(&self) -> Option<&'static str> {
        None
    }
    fn reset_commands(&self, _: &str) -> Vec<String> {
        vec![]
    }
}

/// How a pooler (or its absence) assigns, releases and resets servers: the pure facts the
/// model predicts with and the runner plans its waits with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRules {
    /// `None`: clients connect straight to PostgreSQL.
    pub mode: Option<PoolMode>,
    /// Servers per (user, database) pair (`usize::MAX` without a pooler).
    pub pool_size: usize,
    /// The reset query releases session advisory locks (`DISCARD ALL` or
    /// `pg_advisory_unlock_all()`); an empty or other reset query releases nothing.
    pub reset_releases_locks: bool,
    /// The reset query resets the session's settings (`DISCARD ALL`, `RESET ALL`). Histories
    /// written before settings were modelled lack it (they have no `set`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_clears_settings: bool,
    /// The reset query resets the role (`DISCARD ALL`, `RESET ROLE`, `RESET SESSION
    /// AUTHORIZATION`; `RESET ALL` keeps it). Histories written before the role was modelled
    /// lack it (they never set it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_clears_role: bool,
    /// The reset query drops the session's named objects (`vocab::object`: prepared
    /// statements, temporary tables, held cursors): `DISCARD ALL`. Histories written before
    /// objects were modelled lack it (they have no object op).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_clears_objects: bool,
    /// The pooler tracks protocol-level prepared statements per client and prepares them on
    /// whatever server it hands the client (PgBouncer's `max_prepared_statements` > 0): the
    /// kinds whose row says `Carry::Tracked` follow the client.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tracks_prepared: bool,
    /// Settings the pooler tracks per client and restores on whatever server it links the
    /// client to (PgBouncer's `track_extra_parameters`, for the settings PostgreSQL reports:
    /// `vocab::setting`'s `reported` column): they follow the client, not the server.
    /// Histories written before it lack it (nothing tracked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked_settings: Vec<crate::vocab::Guc>,
    /// The reset query ends the session's `LISTEN`s (`DISCARD ALL`, `UNLISTEN *`). Histories
    /// written before notifications were modelled lack it (they have no `listen`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_unlistens: bool,
    /// `server_reset_query_always`: the reset also runs at every release in transaction and
    /// statement mode.
    pub reset_always: bool,
    /// A client that leaves cleanly inside a transaction gets its transaction aborted and its
    /// server released as after any disconnect (pgpool-II's `reset_query_list` starts with
    /// `ABORT`); otherwise (PgBouncer) that server is closed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_disconnect: bool,
    /// A client is handed its server when it connects, and keeps it until it leaves
    /// (pgpool-II: a child accepts the connection with its cached backend); otherwise
    /// (PgBouncer) at its first statement. A connected client never waits for a server; a
    /// connecting one may.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub links_at_connect: bool,
    /// The pooler may close, rather than reset and release, a server its client leaves while
    /// a reply is in flight on it: a notification for a client that listened, or the rest of
    /// a reply that came out of step (`vocab::reply::code::OUT_OF_STEP`). PgBouncer 1.24.1:
    /// `client disconnect before everything was sent to the server` (docs/session-state.md,
    /// "Replies out of step"). Histories written before it lack it (never closed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closes_server_in_flight: bool,
    /// A restart of the pooler (`pooler_restart`: SIGINT, then a start) drains first: no new
    /// connection or server, linked servers served until released, then the exit
    /// (`vocab::fault::Meaning::drains`). PgBouncer: its safe shutdown; pgpool-II: SIGINT is
    /// its fast shutdown. Histories written before it lack it (a restart was one instant).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_drains: bool,
    /// After a server login failed (PostgreSQL down or restarting, the link cut, PAUSE, a
    /// RECONNECT that dropped a login), the pooler answers a client that needs a new server
    /// with an error until it tries again: PgBouncer's `08P01 server login has been failing`
    /// for `server_login_retry` (docs/faults.md). Histories written before it lack it and are
    /// judged as they were: every pooler so.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub login_failure_sticks: bool,
    /// An application-side pool in front (direct topologies): `none` hands out any
    /// connection per op, `session` keeps one per client; a client's disconnect gives its
    /// connection back as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pin: Option<crate::topology::Pin>,
    /// Replicas of the pooler side by side, each with its own pool of `pool_size` servers
    /// (a server belongs to the replica that opened it); client `c` connects to replica
    /// `c % replicas`. 1 without a pooler.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub replicas: usize,
}

/// Whether a (lowercased) reset query resets the role: `DISCARD ALL`, `RESET ROLE`, `RESET
/// SESSION AUTHORIZATION`, `SET SESSION AUTHORIZATION DEFAULT` (checked by hand:
/// docs/session-state.md, "SET ROLE and search_path"); `RESET ALL` does not.
pub fn reset_clears_role(q: &str) -> bool {
    ["discard all", "reset role", "session authorization"]
        .iter()
        .any(|s| q.contains(s))
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// What a client's disconnect does to the server linked to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerFate {
    /// The backend exits (direct: the session ends; any pooler: a server left in a
    /// transaction is closed).
    Closed,
    /// The server goes back to the pool; `resets`: after the reset query.
    Released { resets: bool },
    /// Nothing changes on the server (none was linked).
    Untouched,
}

impl PoolRules {
    pub fn direct() -> PoolRules {
        PoolRules {
            mode: None,
            pool_size: usize::MAX,
            reset_releases_locks: false,
            reset_clears_settings: false,
            reset_clears_role: false,
            reset_clears_objects: false,
            tracks_prepared: false,
            tracked_settings: vec![],
            reset_unlistens: false,
            reset_always: false,
            abort_on_disconnect: false,
            links_at_connect: false,
            closes_server_in_flight: false,
            restart_drains: false,
            login_failure_sticks: false,
            app_pin: None,
            replicas: 1,
        }
    }

    /// The reset query changes something the model keeps (locks, settings): the server must
    /// be reset before it is handed out again.
    pub fn reset_does_something(&self) -> bool {
        self.reset_releases_locks
            || self.reset_clears_settings
            || self.reset_clears_role
            || self.reset_clears_objects
            || self.reset_unlistens
    }

    pub fn is_pooled(&self) -> bool {
        self.mode.is_some()
    }

    /// The replica of the pooler client `c` connects to.
    pub fn replica_of(&self, c: usize) -> usize {
        c % self.replicas.max(1)
    }

    /// A server stays linked to its client after a statement that leaves the transaction
    /// idle (`in_tx == false`) or open. Direct and session mode: always; transaction mode:
    /// only inside a transaction; statement mode: never.
    pub fn stays_linked(&self, in_tx: bool) -> bool {
        if self.app_pin == Some(crate::topology::Pin::None) {
            return false;
        }
        match self.mode {
            None | Some(PoolMode::Session) => true,
            Some(PoolMode::Transaction) => in_tx,
            Some(PoolMode::Statement) => false,
        }
    }

    /// The reset query runs when a server is released after a statement (transaction and
    /// statement mode with `server_reset_query_always`).
    pub fn resets_on_release(&self) -> bool {
        matches!(self.mode, Some(PoolMode::Transaction | PoolMode::Statement)) && self.reset_always
    }

    /// What a client's disconnect does to its linked server, given whether that server's
    /// backend is inside a transaction.
    pub fn on_disconnect(&self, linked: bool, in_tx: bool) -> ServerFate {
        if !linked || self.app_pin.is_some() {
            // An application pool takes the connection back as it is.
            return ServerFate::Untouched;
        }
        match self.mode {
            None => ServerFate::Closed,
            Some(_) if in_tx && !self.abort_on_disconnect => ServerFate::Closed,
            Some(PoolMode::Session) => ServerFate::Released { resets: true },
            Some(_) => ServerFate::Untouched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(mode: PoolMode, always: bool) -> PoolRules {
        PoolRules {
            mode: Some(mode),
            pool_size: 2,
            reset_releases_locks: true,
            reset_clears_settings: true,
            reset_clears_role: true,
            reset_clears_objects: true,
            tracks_prepared: false,
            tracked_settings: vec![],
            reset_unlistens: true,
            reset_always: always,
            abort_on_disconnect: false,
            links_at_connect: false,
            closes_server_in_flight: false,
            restart_drains: false,
            login_failure_sticks: false,
            app_pin: None,
            replicas: 1,
        }
    }

    #[test]
    fn linking_follows_the_pool_mode() {
        let d = PoolRules::direct();
        assert!(d.stays_linked(false) && d.stays_linked(true));
        let s = rules(PoolMode::Session, false);
        assert!(s.stays_linked(false));
        let t = rules(PoolMode::Transaction, false);
        assert!(!t.stays_linked(false) && t.stays_linked(true));
        assert!(!rules(PoolMode::Statement, false).stays_linked(true));
    }

    #[test]
    fn resets_run_on_release_only_when_always_or_in_session_mode() {
        assert!(!rules(PoolMode::Transaction, false).resets_on_release());
        assert!(rules(PoolMode::Transaction, true).resets_on_release());
        assert!(!rules(PoolMode::Session, true).resets_on_release());
        assert_eq!(
            rules(PoolMode::Session, false).on_disconnect(true, false),
            ServerFate::Released { resets: true }
        );
    }

    #[test]
    fn a_disconnect_mid_transaction_closes_the_server() {
        for mode in PoolMode::ALL {
            assert_eq!(
                rules(mode, false).on_disconnect(true, true),
                ServerFate::Closed
            );
        }
        assert_eq!(
            PoolRules::direct().on_disconnect(true, false),
            ServerFate::Closed
        );
        assert_eq!(
            rules(PoolMode::Transaction, false).on_disconnect(true, false),
            ServerFate::Untouched
        );
        assert_eq!(
            PoolRules::direct().on_disconnect(false, false),
            ServerFate::Untouched
        );
    }

    #[test]
    fn an_application_pool_keeps_nothing_linked_unless_pinned_and_closes_nothing() {
        use crate::topology::Pin;
        let none = PoolRules {
            app_pin: Some(Pin::None),
            ..PoolRules::direct()
        };
        assert!(!none.stays_linked(true), "another op, another connection");
        let pinned = PoolRules {
            app_pin: Some(Pin::Session),
            ..PoolRules::direct()
        };
        assert!(pinned.stays_linked(false));
        assert_eq!(pinned.on_disconnect(true, true), ServerFate::Untouched);
    }
}
