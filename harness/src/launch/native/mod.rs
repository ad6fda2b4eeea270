//! The native launcher: PostgreSQL (from a per-version initdb template) and the pooler as
//! local processes on free loopback ports, as an unprivileged user when the harness runs as
//! root, torn down whatever way the harness ends.
//!
//! Nobody else gets in: PostgreSQL and PgBouncer listen on 127.0.0.1 only; their Unix
//! sockets live in the private run directory (mode 0700) and are trusted; TCP needs the
//! run's random password (SCRAM), which `up` prints and which is written to
//! `credentials.txt` (mode 0600) in the run directory.
//!
//! Nothing outlives the harness, in layers: every server is started in its own process group
//! with a parent-death signal (SIGKILL), so even a SIGKILLed harness takes them down; a
//! [reaper](super::reaper) then removes the run directory and the postmaster's System V
//! segment; dynamic shared memory lives in the run directory (`dynamic_shared_memory_type =
//! mmap`), not in `/dev/shm`; `Drop` and [`Servers::shutdown`] stop everything on every
//! normal, error and panic path; the CLI turns Ctrl-C, SIGTERM and SIGHUP into an orderly
//! shutdown.
//!
//! With `postgres.standby: true` a streaming standby runs beside the primary: a
//! `pg_basebackup -R -X stream` copy of it in `<run_dir>/standby`, started like the primary (its
//! own free loopback port, its socket in the run directory, same user, process group, reaper
//! and logs). [`super::Failover::promote`] fences the primary, promotes the standby and repoints the
//! pooler to it.

mod failover;

use super::process::{
    READY_TIMEOUT, Server, bundled_library_path, copy_log, log_tail, spawn_server,
    unprivileged_user,
};
use super::reaper::Reaper;
use super::runtime::{self, write_private};
use super::template::{
    PG_HBA, SPEED_SETTINGS, client_role_sql, ensure_template, pg_hba_replication, random_password,
};
use super::{
    BackendSignals, BoxFuture, CLIENT_ROLE, Cluster, Control, DB, Failover, IO_TIMEOUT, Launcher,
    Processes, SUPERUSER, Servers, Versions, Which, connect, free_port, simple_first, timed,
};
use crate::pooler::{self, ConfigContext, Pooler};
use crate::provision::{PgBinaries, PoolerBinary};
use crate::safe_fs;
use crate::sql;
use crate::topology::Topology;
use anyhow::{Context, Result, anyhow, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_postgres::{Config, NoTls};

/// glibc malloc settings for PostgreSQL: `pg_stat_get_activity` and `pg_lock_status` allocate
/// their per-call copies of the status arrays in chunks over glibc's default mmap threshold,
/// so every call maps, faults in and unmaps fresh pages (~40 us each on this kind of VM). With
/// a higher threshold the heap keeps and reuses that memory. Allocator only: no SQL-visible
/// behaviour changes.
pub const PG_MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=33554432";
/// Bound on `pg_basebackup` copying the primary into the standby's data directory.
const BASEBACKUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on promoting the standby (`pg_promote` waits up to this, less a margin).
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);
/// The standby's data directory and log, in the run directory (the primary's are `data` and
/// `postgres.log`).
pub const STANDBY_DIR: &str = "standby";
pub const STANDBY_LOG: &str = "postgres-standby.log";

/// Launches servers as local processes from provisioned binaries.
pub struct NativeLauncher {
    pg: PgBinaries,
    bouncer: Option<PoolerBinary>,
}

impl NativeLauncher {
    pub fn new(pg: PgBinaries, bouncer: Option<PoolerBinary>) -> NativeLauncher {
        NativeLauncher { pg, bouncer }
    }
}

impl Launcher for NativeLauncher {
    fn name(&self) -> &'static str {
        "native"
    }

    fn launch<'a>(&'a self, topology: &'a Topology) -> BoxFuture<'a, Result<Cluster>> {
        Box::pin(launch(topology, &self.pg, self.bouncer.as_ref()))
    }
}

/// One of the run's PostgreSQL servers: the primary, or the streaming standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Primary,
    Standby,
}

/// What [`NativeServers::wait_ready`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The primary answers.
    Primary,
    /// The standby answers, in recovery.
    Standby,
    /// The pooler's admin console answers.
    Pooler,
}

/// A replica of the pooler beyond the first.
struct Replica {
    server: Server,
    port: u16,
    dir: PathBuf,
}

/// The local processes of one run, and what is needed to restart them.
struct NativeServers {
    topology: Topology,
    pooler: std::sync::Arc<dyn Pooler>,
    run_dir: PathBuf,
    os_user: Option<(u32, u32)>,
    pg_bin: PathBuf,
    pooler_bin: Option<PathBuf>,
    /// The current primary: its port, data directory and log (the standby's after a promote).
    pg_port: u16,
    pg_data: PathBuf,
    pg_log: PathBuf,
    pooler_port: Option<u16>,
    /// The pooler's second port (its admin console's, pgpool-II's PCP), when it has one.
    pooler_admin_port: Option<u16>,
    passwords: Vec<(String, String)>,
    pg: Option<Server>,
    /// The streaming standby and its port, until it is promoted; its data directory and
    /// log (after a promote, a new standby is made in the fenced primary's directory).
    standby: Option<Server>,
    standby_port: Option<u16>,
    standby_data: PathBuf,
    standby_log: PathBuf,
    /// Standbys made so far (each gets its own log).
    standbys_made: u32,
    /// The link proxy between PgBouncer and PostgreSQL (topologies with link faults).
    link: Option<super::proxy::Proxy>,
    /// Logs of primaries a promote fenced (kept for `save_logs`).
    fenced_logs: Vec<PathBuf>,
    pooler_proc: Option<Server>,
    /// Replicas of the pooler beyond the first (`replicas:`), each in a directory of its own
    /// (its files, socket and log).
    replicas: Vec<Replica>,
    reaper: Option<Reaper>,
    keep_run_dir: bool,
}

/// Start the topology's servers and wait until they answer.
async fn launch(
    topology: &Topology,
    pg: &PgBinaries,
    bouncer: Option<&PoolerBinary>,
) -> Result<Cluster> {
    let t0 = Instant::now();
    let os_user = unprivileged_user()?;
    if let Some((uid, _)) = os_user {
        runtime::remove_legacy_dsm(uid);
    }
    let template = ensure_template(&pg.bin_dir, &pg.version, os_user).await?;
    let run_dir = runtime::make_run_dir(os_user)?;
    let keep_run_dir = std::env::var_os("PGCHAOS_KEEP_RUN_DIR").is_some();
    let mut servers = NativeServers {
        topology: topology.clone(),
        pooler: pooler::for_topology(topology),
        run_dir: run_dir.clone(),
        os_user,
        pg_bin: pg.bin_dir.clone(),
        pooler_bin: bouncer.map(|b| b.path.clone()),
        pg_port: 0,
        pg_data: run_dir.join("data"),
        pg_log: run_dir.join("postgres.log"),
        pooler_port: None,
        pooler_admin_port: None,
        passwords: vec![
            (SUPERUSER.to_string(), random_password()),
            (CLIENT_ROLE.to_string(), random_password()),
        ],
        pg: None,
        standby: None,
        standby_port: None,
        standby_data: run_dir.join(STANDBY_DIR),
        standby_log: run_dir.join(STANDBY_LOG),
        standbys_made: 0,
        link: None,
        fenced_logs: Vec::new(),
        pooler_proc: None,
        replicas: Vec::new(),
        reaper: None,
        keep_run_dir,
    };
    // From here on, `servers` removes the run directory on every exit path; the reaper does
    // so even if this process is killed.
    servers.reaper = Some(Reaper::spawn_for(
        &run_dir,
        keep_run_dir,
        runtime::server_uid(os_user),
    )?);
    let data = run_dir.join("data");
    // The template's tree, copied below the run directory without following anything
    // planted there, owned by the server user.
    let to = safe_fs::Dir::open(&run_dir)?.mkdir("data".as_ref(), 0o700, os_user)?;
    safe_fs::Dir::open(&template)?.copy_tree(&to, 0o700, 0o600, os_user)?;
    let mut hba = PG_HBA.to_string();
    if topology.postgres.standby {
        hba.push_str(&pg_hba_replication());
    }
    write_private(&run_dir, &data.join("pg_hba.conf"), &hba, os_user)?;
    servers.start_postgres(None).await?;
    servers.configure_postgres().await?;
    if topology.postgres.standby {
        // After the roles, passwords and migration table exist: the copy carries them.
        servers.start_standby().await?;
    }
    if topology.pooler.is_some() {
        if topology
            .faults
            .kinds
            .keys()
            .any(|op| crate::vocab::fault::needs_link(*op))
        {
            // PgBouncer reaches PostgreSQL through the link proxy the nemesis faults.
            servers.link = Some(super::proxy::Proxy::start(0, servers.pg_port).await?);
        }
        servers.start_pooler(None).await?;
        servers.verify_pooler_config("at launch").await?;
        let replicas = topology.pooler.as_ref().map_or(1, |p| p.replicas) as usize;
        for k in 1..replicas {
            servers.start_replica(k).await?;
            let (dir, port) = (
                servers.replicas[k - 1].dir.clone(),
                servers.replicas[k - 1].port,
            );
            super::verify_pooler_config(
                servers.pooler.as_ref(),
                &servers.replica_console_at(&dir, port),
                &topology.name,
                &format!("at launch (replica {})", k + 1),
                Some(&dir.join(servers.pooler.log_file())),
            )
            .await?;
        }
    }
    let mut versions = Versions {
        postgres_declared: topology.postgres.version.clone(),
        pooler_name: topology.pooler.as_ref().map(|p| p.kind.to_string()),
        pooler_declared: topology.pooler.as_ref().map(|p| p.version.clone()),
        version_drift: bouncer.and_then(|b| b.drift.clone()).into_iter().collect(),
        pooler_built_from: bouncer.and_then(|b| b.built_from.clone()),
        pooler_tarball_sha256: bouncer.and_then(|b| b.tarball_sha256.clone()),
        ..Default::default()
    };
    servers.read_versions(&mut versions).await?;
    servers.write_credentials()?;
    Ok(Cluster {
        topology: topology.clone(),
        pooler: pooler::for_topology(topology),
        launcher: "native",
        pg_bin_dir: pg.bin_dir.clone(),
        run_dir,
        pg_port: servers.pg_port,
        primary_port: std::sync::atomic::AtomicU16::new(servers.pg_port),
        pooler_port: servers.pooler_port,
        pooler_admin_port: servers.pooler_admin_port,
        pooler_container: None,
        pooler_replicas: servers
            .replicas
            .iter()
            .map(|r| (r.port, r.dir.clone()))
            .collect(),
        versions,
        ready_ms: t0.elapsed().as_millis(),
        pinned_cpu: None,
        passwords: servers.passwords.clone(),
        local: servers.local(),
        unix_sockets: true,
        servers: tokio::sync::Mutex::new(Box::new(servers)),
        external: None,
    })
}

impl NativeServers {
    fn config(&self, unix: bool, port: u16, user: &str, db: &str) -> Config {
        let mut c = Config::new();
        if unix {
            c.host_path(&self.run_dir);
        } else {
            c.host("127.0.0.1");
        }
        c.port(port)
            .user(user)
            .dbname(db)
            .connect_timeout(IO_TIMEOUT)
            .application_name("pgchaos");
        c
    }

    /// Start the primary on `fixed_port` (a restart keeps its port, so the pooler's config
    /// stays right), or on a free one, retrying with another if it was taken meanwhile.
    async fn start_postgres(&mut self, fixed_port: Option<u16>) -> Result<()> {
        self.start_node(Node::Primary, fixed_port).await
    }

    /// The `postgres` command line of one node: its data directory and port; the socket in
    /// the run directory; the harness's settings, then the topology's.
    fn postgres_command(&self, data: &Path, port: u16) -> Command {
        let mut cmd = Command::new(self.pg_bin.join("postgres"));
        cmd.env("GLIBC_TUNABLES", PG_MALLOC_TUNABLES);
        // Resolve every shared-library symbol once in the postmaster, not lazily again in
        // each forked backend (~3% of a backend's start-up here).
        cmd.env("LD_BIND_NOW", "1");
        if let Some(path) = bundled_library_path(&self.pg_bin) {
            cmd.env("LD_LIBRARY_PATH", path);
        }
        cmd.arg("-D")
            .arg(data)
            .args(["-c", &format!("port={port}")])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                &format!("unix_socket_directories={}", self.run_dir.display()),
            ])
            .args(["-c", "unix_socket_permissions=0700"])
            // Dynamic shared memory as files in the data directory (removed with the
            // run directory), not as /dev/shm/PostgreSQL.* segments a killed run leaves.
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        for (k, v) in SPEED_SETTINGS {
            cmd.args(["-c", &format!("{k}={v}")]);
        }
        for (k, v) in &self.topology.postgres.settings {
            cmd.args(["-c", &format!("{k}={v}")]);
        }
        cmd
    }

    /// Start one PostgreSQL node (the primary, or the standby from its copy) on `fixed_port`
    /// or on a free one, retrying with another if it was taken meanwhile, and wait until it
    /// answers (the standby: in recovery).
    async fn start_node(&mut self, node: Node, fixed_port: Option<u16>) -> Result<()> {
        let (data, log, name, target) = match node {
            Node::Primary => (
                self.pg_data.clone(),
                self.pg_log.clone(),
                "postgres",
                Target::Primary,
            ),
            Node::Standby => (
                self.standby_data.clone(),
                self.standby_log.clone(),
                "the postgres standby",
                Target::Standby,
            ),
        };
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = match fixed_port {
                Some(p) => p,
                None => free_port()?,
            };
            let cmd = self.postgres_command(&data, port);
            let child = spawn_server(cmd, &self.run_dir, &log, self.os_user)
                .with_context(|| format!("starting {}", self.pg_bin.join("postgres").display()))?;
            let server = Server {
                which: Which::Postgres,
                child,
                log: log.clone(),
            };
            if let Some(r) = self.reaper.as_mut() {
                r.watch(server.pid());
            }
            match node {
                Node::Primary => {
                    self.pg = Some(server);
                    self.pg_port = port;
                }
                Node::Standby => {
                    self.standby = Some(server);
                    self.standby_port = Some(port);
                }
            }
            match self.wait_ready(target).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let log = log_tail(&log, 15);
                    self.stop_node(node);
                    let port_taken = log.contains("could not bind") || log.contains("in use");
                    last_err = Some(anyhow!(
                        "{name} did not become ready on 127.0.0.1:{port}: {e}\n  last lines of its log:\n{log}"
                    ));
                    if !port_taken || fixed_port.is_some() {
                        break;
                    }
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// Per-run settings of the client role and the run's passwords, over the private socket.
    async fn configure_postgres(&self) -> Result<()> {
        let admin = connect(&self.config(true, self.pg_port, SUPERUSER, DB)).await?;
        let mut sql = client_role_sql(&self.topology);
        for (role, pw) in &self.passwords {
            sql.push_str("; ");
            sql.push_str(&sql::set_password(role, pw));
        }
        // The migration record `migrate` writes, owned by the client role.
        sql.push_str(&format!(
            "; SET ROLE {CLIENT_ROLE}; {}; RESET ROLE",
            sql::migrations_setup()
        ));
        timed(admin.batch_execute(&sql))
            .await
            .context("configuring the client role and passwords")?;
        // With synchronous_commit off, a crash fault (immediate shutdown, a killed backend)
        // moments later would lose this configuration: the role's lock_timeout with it.
        timed(admin.batch_execute("CHECKPOINT"))
            .await
            .context("checkpoint after configuring the client role")?;
        Ok(())
    }

    async fn start_pooler(&mut self, fixed_port: Option<u16>) -> Result<()> {
        let bin = self.pooler_bin.clone().ok_or_else(|| {
            anyhow!(
                "topology has a {} section but no binary was provisioned",
                self.pooler.name()
            )
        })?;
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = match fixed_port {
                Some(p) => p,
                None => free_port()?,
            };
            if self.pooler.needs_admin_port()
                && (fixed_port.is_none() || self.pooler_admin_port.is_none())
            {
                self.pooler_admin_port = Some(free_port()?);
            }
            let main = self.write_pooler_config(port)?;
            let log = self.run_dir.join(self.pooler.log_file());
            let mut cmd = Command::new(&bin);
            cmd.args(self.pooler.command_args(&main));
            let child = spawn_server(cmd, &self.run_dir, &log, self.os_user)
                .with_context(|| format!("starting {}", bin.display()))?;
            let server = Server {
                which: Which::Pooler,
                child,
                log,
            };
            if let Some(r) = self.reaper.as_mut() {
                r.watch(server.pid());
            }
            self.pooler_proc = Some(server);
            self.pooler_port = Some(port);
            match self.wait_ready(Target::Pooler).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let log = self
                        .pooler_proc
                        .as_ref()
                        .map(|s| s.log_tail(15))
                        .unwrap_or_default();
                    self.stop(Which::Pooler);
                    let port_taken = log.contains("Address already in use");
                    last_err = Some(anyhow!(
                        "{} did not become ready on 127.0.0.1:{port}: {e}\n  last lines of its log:\n{log}",
                        self.pooler.name()
                    ));
                    if !port_taken || fixed_port.is_some() {
                        break;
                    }
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// The pooler's config files for the current primary, the main one's path returned.
    fn write_pooler_config(&self, listen_port: u16) -> Result<PathBuf> {
        self.write_pooler_config_in(&self.run_dir.clone(), listen_port)
    }

    /// The same in `dir` (a replica's directory: its files and its socket there, PostgreSQL's
    /// socket in the run directory).
    fn write_pooler_config_in(&self, dir: &Path, listen_port: u16) -> Result<PathBuf> {
        let run_dir = self.run_dir.to_string_lossy().to_string();
        let cx = ConfigContext {
            topology_name: &self.topology.name,
            run_dir: dir,
            pg_port: self.link.as_ref().map_or(self.pg_port, |l| l.port()),
            pg_host: match &self.link {
                Some(_) => Some("127.0.0.1"),
                None if dir != self.run_dir => Some(&run_dir),
                None => None,
            },
            listen_addr: "127.0.0.1",
            listen_port,
            admin_port: self.pooler_admin_port,
            standby_port: self.standby_port,
            database: DB,
            superuser: SUPERUSER,
            passwords: &self.passwords,
        };
        let files = self.pooler.config_files(&cx).unwrap_or_default();
        let mut main = None;
        for f in &files {
            let path = dir.join(f.name);
            write_private(&self.run_dir, &path, &f.text, self.os_user)?;
            if f.is_main {
                main = Some(path);
            }
        }
        main.ok_or_else(|| anyhow!("the pooler has no main config file"))
    }

    /// Where the pooler's admin console is (its Unix socket in the run directory).
    fn console_at(&self) -> Option<crate::pooler::ConsoleAt> {
        if !self.pooler.has_console() {
            return None;
        }
        Some(crate::pooler::ConsoleAt {
            unix_dir: Some(self.run_dir.clone()),
            host: None,
            pool_user: None,
            port: self.pooler_port?,
            admin_port: self.pooler_admin_port,
            user: SUPERUSER.to_string(),
            password: self
                .passwords
                .iter()
                .find(|(r, _)| r == SUPERUSER)
                .map(|(_, p)| p.clone()),
            container: None,
        })
    }

    /// Start replica `k` (k >= 1) of the pooler in `<run dir>/pooler-<k>`, on a free port.
    async fn start_replica(&mut self, k: usize) -> Result<()> {
        let bin = self.pooler_bin.clone().ok_or_else(|| {
            anyhow!(
                "topology has a {} section but no binary was provisioned",
                self.pooler.name()
            )
        })?;
        let dir = self.run_dir.join(format!("pooler-{k}"));
        safe_fs::make_dir(&self.run_dir, &dir, self.os_user)?;
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = free_port()?;
            let main = self.write_pooler_config_in(&dir, port)?;
            let log = dir.join(self.pooler.log_file());
            let mut cmd = Command::new(&bin);
            cmd.args(self.pooler.command_args(&main));
            let child = spawn_server(cmd, &self.run_dir, &log, self.os_user)
                .with_context(|| format!("starting {} (replica {})", bin.display(), k + 1))?;
            let mut server = Server {
                which: Which::Pooler,
                child,
                log,
            };
            if let Some(r) = self.reaper.as_mut() {
                r.watch(server.pid());
            }
            let at = self.replica_console_at(&dir, port);
            let ready = async {
                let deadline = Instant::now() + READY_TIMEOUT;
                loop {
                    if let Some(status) = server.exited() {
                        bail!("it exited during startup ({status})");
                    }
                    let probe = async {
                        let c = self.pooler.console(&at).await?;
                        c.version().await
                    };
                    let last = match tokio::time::timeout(Duration::from_secs(1), probe).await {
                        Ok(Ok(_)) => return Ok(()),
                        Ok(Err(e)) => format!("{e:#}"),
                        Err(_) => "its console did not answer within 1 s".into(),
                    };
                    if Instant::now() > deadline {
                        bail!("not ready within {READY_TIMEOUT:?} (last: {last})");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            match ready.await {
                Ok(()) => {
                    self.replicas.push(Replica { server, port, dir });
                    return Ok(());
                }
                Err(e) => {
                    let tail = server.log_tail(15);
                    server.stop();
                    let port_taken = tail.contains("Address already in use");
                    last_err = Some(anyhow!(
                        "{} replica {} did not become ready on 127.0.0.1:{port}: {e}\n  last lines of its log:\n{tail}",
                        self.pooler.name(),
                        k + 1
                    ));
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// A replica's console (its socket in its own directory).
    fn replica_console_at(&self, dir: &Path, port: u16) -> crate::pooler::ConsoleAt {
        crate::pooler::ConsoleAt {
            unix_dir: Some(dir.to_path_buf()),
            host: None,
            pool_user: None,
            port,
            admin_port: None,
            user: SUPERUSER.to_string(),
            password: None,
            container: None,
        }
    }

    async fn wait_ready(&mut self, target: Target) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let config = match target {
            Target::Primary => self.config(true, self.pg_port, SUPERUSER, DB),
            Target::Standby => self.config(true, self.standby_port.unwrap_or(0), SUPERUSER, DB),
            Target::Pooler => self.config(true, 0, SUPERUSER, DB),
        };
        let console = self.console_at();
        let mut last: String;
        loop {
            let server = match target {
                Target::Primary => self.pg.as_mut(),
                Target::Standby => self.standby.as_mut(),
                Target::Pooler => self.pooler_proc.as_mut(),
            }
            .expect("server started");
            if let Some(status) = server.exited() {
                bail!("it exited during startup ({status})");
            }
            if target == Target::Pooler {
                // Its console answers its version once it accepts clients.
                let at = console
                    .as_ref()
                    .ok_or_else(|| anyhow!("the pooler has no admin console to wait for"))?;
                let probe = async {
                    let c = self.pooler.console(at).await?;
                    c.version().await
                };
                match tokio::time::timeout(Duration::from_secs(1), probe).await {
                    Ok(Ok(_)) => return Ok(()),
                    Ok(Err(e)) => last = format!("{e:#}"),
                    Err(_) => last = "its console did not answer within 1 s".into(),
                }
            } else {
                let attempt =
                    tokio::time::timeout(Duration::from_secs(1), config.connect(NoTls)).await;
                match attempt {
                    Ok(Ok((client, conn))) => {
                        tokio::spawn(conn);
                        let probe = match target {
                            Target::Standby => "SELECT pg_is_in_recovery()",
                            _ => "SELECT 1",
                        };
                        match simple_first(&client, probe).await {
                            Ok(v) if target != Target::Standby || v == "t" => return Ok(()),
                            Ok(v) => last = format!("it answers, but pg_is_in_recovery() is {v}"),
                            Err(e) => last = format!("{probe}: {e:#}"),
                        }
                    }
                    Ok(Err(e)) => last = format!("connect: {e}"),
                    Err(_) => last = "connect timed out".into(),
                }
            }
            if Instant::now() > deadline {
                bail!("not ready within {READY_TIMEOUT:?} (last: {last})");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The pooler runs what the topology declares (see [`super::verify_pooler_config`]).
    async fn verify_pooler_config(&self, when: &str) -> Result<()> {
        let Some(at) = self.console_at() else {
            return Ok(());
        };
        super::verify_pooler_config(
            self.pooler.as_ref(),
            &at,
            &self.topology.name,
            when,
            Some(&self.run_dir.join(self.pooler.log_file())),
        )
        .await
    }

    async fn read_versions(&self, v: &mut Versions) -> Result<()> {
        let pg = self.config(true, self.pg_port, SUPERUSER, DB);
        super::read_versions(&pg, self.pooler.as_ref(), self.console_at().as_ref(), v).await
    }

    /// The run's DSNs with their passwords, for people and tools (mode 0600).
    fn write_credentials(&self) -> Result<()> {
        let ports: Vec<u16> = std::iter::once(self.pg_port)
            .chain(self.pooler_port)
            .chain(self.replicas.iter().map(|r| r.port))
            .collect();
        let text = super::credentials(
            "this run's logins over loopback TCP (the Unix sockets here need none)",
            &ports,
            &self.passwords,
        );
        write_private(
            &self.run_dir,
            &self.run_dir.join("credentials.txt"),
            &text,
            None,
        )
    }

    fn server_mut(&mut self, which: Which) -> Option<&mut Server> {
        match which {
            Which::Postgres => self.pg.as_mut(),
            Which::Pooler => self.pooler_proc.as_mut(),
        }
    }

    fn stop(&mut self, which: Which) {
        let taken = match which {
            Which::Postgres => self.pg.take(),
            Which::Pooler => self.pooler_proc.take(),
        };
        self.stop_server(taken);
    }

    fn stop_node(&mut self, node: Node) {
        let taken = match node {
            Node::Primary => self.pg.take(),
            Node::Standby => self.standby.take(),
        };
        self.stop_server(taken);
    }

    /// Stop a server taken out of `self`; the reaper forgets it once it is gone.
    fn stop_server(&mut self, taken: Option<Server>) {
        if let Some(mut s) = taken {
            s.stop();
            if let Some(r) = self.reaper.as_mut()
                && s.exited().is_some()
            {
                r.forget(s.pid());
            }
        }
    }
}

impl Servers for NativeServers {
    fn processes(&mut self) -> Option<&mut dyn Processes> {
        Some(self)
    }

    fn backends(&mut self) -> Option<&mut dyn BackendSignals> {
        Some(self)
    }

    fn failover(&mut self) -> Option<&mut dyn Failover> {
        Some(self)
    }

    fn pids(&self) -> (Option<i32>, Option<i32>) {
        (
            self.pg.as_ref().map(Server::pid),
            self.pooler_proc.as_ref().map(Server::pid),
        )
    }

    fn local(&self) -> bool {
        true
    }

    fn check_alive(&mut self) -> Result<()> {
        let servers = [
            ("Postgres", self.pg.as_mut()),
            ("Postgres standby", self.standby.as_mut()),
            (self.pooler.display_name(), self.pooler_proc.as_mut()),
        ];
        for (name, server) in servers {
            let Some(server) = server else { continue };
            if let Some(status) = server.exited() {
                bail!(
                    "{name} (pid {}) died: {status}\n  last lines of its log:\n{}",
                    server.pid(),
                    server.log_tail(15)
                );
            }
        }
        for (k, r) in self.replicas.iter_mut().enumerate() {
            if let Some(status) = r.server.exited() {
                bail!(
                    "{} replica {} (pid {}) died: {status}\n  last lines of its log:\n{}",
                    self.pooler.display_name(),
                    k + 2,
                    r.server.pid(),
                    r.server.log_tail(15)
                );
            }
        }
        Ok(())
    }

    fn save_logs(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).with_context(|| format!("{}: creating", dir.display()))?;
        let running = [
            self.pg.as_ref(),
            self.standby.as_ref(),
            self.pooler_proc.as_ref(),
        ];
        let logs = running
            .into_iter()
            .flatten()
            .map(|s| &s.log)
            .chain(&self.fenced_logs);
        for log in logs {
            if let Some(name) = log.file_name() {
                copy_log(log, &dir.join(name));
            }
        }
        for (k, r) in self.replicas.iter().enumerate() {
            let name = format!("replica-{}-{}", k + 2, self.pooler.log_file());
            copy_log(&r.server.log, &dir.join(name));
        }
        Ok(())
    }

    fn link(&self) -> Option<&super::proxy::Proxy> {
        self.link.as_ref()
    }

    fn shutdown(&mut self) {
        for r in std::mem::take(&mut self.replicas) {
            self.stop_server(Some(r.server));
        }
        self.stop(Which::Pooler);
        if let Some(l) = self.link.take() {
            l.shutdown();
        }
        // Each postmaster with the directory it runs from: after a promotion the primary runs
        // from `standby` and the fenced (often SIGKILLed) old primary's `data` has none, so a
        // directory is never paired with a pid by its name.
        let postmasters = [
            (self.pg_data.clone(), self.pg.as_ref().map(Server::pid)),
            (
                self.standby_data.clone(),
                self.standby.as_ref().map(Server::pid),
            ),
        ];
        self.stop_node(Node::Standby);
        self.stop(Which::Postgres);
        if !self.keep_run_dir && self.run_dir.exists() {
            let uid = runtime::server_uid(self.os_user);
            for data in runtime::DATA_DIRS.map(|d| self.run_dir.join(d)) {
                // A directory no running server uses (a fenced primary's) is cleared as the
                // reaper clears it: only a segment its dead postmaster created, as the
                // servers' user, with nothing attached (`remove_sysv_segment`).
                let pid = postmasters
                    .iter()
                    .find(|(d, _)| *d == data)
                    .and_then(|(_, p)| *p);
                runtime::remove_sysv_segment(&data, uid, pid);
            }
            let _ = fs::remove_dir_all(&self.run_dir);
        }
        if let Some(mut r) = self.reaper.take() {
            r.finish();
        }
    }
}

impl Processes for NativeServers {
    fn control(&mut self, which: Which, what: Control) -> Result<()> {
        if let Control::Stop = what {
            if self.server_mut(which).is_none() {
                bail!("{which:?} is not running in this topology");
            }
            self.stop(which);
            return Ok(());
        }
        let server = self
            .server_mut(which)
            .ok_or_else(|| anyhow!("{which:?} is not running in this topology"))?;
        match what {
            Control::Stop => unreachable!("handled above"),
            Control::Kill => {
                server.signal(libc::SIGKILL, true);
                server.wait_exit(Duration::from_secs(5));
            }
            Control::Pause => server.signal(libc::SIGSTOP, false),
            Control::Resume => server.signal(libc::SIGCONT, false),
            Control::Interrupt => {
                server.signal(libc::SIGINT, false);
                if !server.wait_exit(Duration::from_secs(5)) {
                    server.signal(libc::SIGKILL, true);
                    server.wait_exit(Duration::from_secs(5));
                }
            }
        }
        Ok(())
    }

    fn restart(&mut self, which: Which) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.stop(which);
            match which {
                Which::Postgres => {
                    let port = Some(self.pg_port);
                    self.start_postgres(port).await
                }
                Which::Pooler => {
                    let port = self.pooler_port;
                    self.start_pooler(port).await
                }
            }
        })
    }
}

impl BackendSignals for NativeServers {
    fn signal_backend(&mut self, pid: i32, sig: i32) -> Result<bool> {
        // SAFETY: a plain syscall on a pid of the run's postmaster.
        Ok(unsafe { libc::kill(pid, sig) == 0 })
    }
}

impl Drop for NativeServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
