//! How it runs: the native launcher. Starts PostgreSQL (from a per-version initdb template)
//! and PgBouncer on free loopback ports, as an unprivileged user when run as root, and tears
//! them down whatever way the harness ends.
//!
//! Orphan protection, in layers: every server is started in its own process group with a
//! parent-death signal (SIGKILL), so even a SIGKILLed harness takes them down; `Drop` and
//! [`Cluster::shutdown`] stop them on every normal, error and panic path; Ctrl-C is turned
//! into an orderly shutdown by the CLI.

use crate::provision::{BouncerBinary, PgBinaries};
use crate::topology::{PoolMode, Topology};
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, NoTls};

/// The database and role the harness's logical clients use (through the pooler).
pub const DB: &str = "chaos";
pub const CLIENT_ROLE: &str = "chaos";
/// The superuser of the cluster: observer, contender, admin console.
pub const SUPERUSER: &str = "postgres";
/// The unprivileged OS user servers run as when the harness runs as root.
pub const OS_USER: &str = "pgchaos";

/// Every connect and query the launcher makes is bounded by this.
/// glibc malloc settings for PostgreSQL: `pg_stat_get_activity` and `pg_lock_status` allocate
/// their per-call copies of the status arrays in chunks over glibc's default mmap threshold,
/// so every call maps, faults in and unmaps fresh pages (~40 us each on this kind of VM). With
/// a higher threshold the heap keeps and reuses that memory. Allocator only: no SQL-visible
/// behaviour changes.
pub const PG_MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=33554432";
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Which server a control hook acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    Postgres,
    Pgbouncer,
}

/// Process-level faults and controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Orderly stop (SIGINT to postgres: fast shutdown; SIGINT to pgbouncer).
    Stop,
    /// SIGKILL to the server's process group (for PostgreSQL: the postmaster; its backends,
    /// each in a session of its own, exit when they notice it died).
    Kill,
    /// SIGSTOP: the process hangs without closing its sockets.
    Pause,
    /// SIGCONT.
    Resume,
}

/// The versions that actually ran, beside the declared ones.
#[derive(Clone, Debug, Serialize)]
pub struct Versions {
    pub postgres: String,
    pub postgres_declared: String,
    pub postgres_full: String,
    pub pgbouncer: Option<String>,
    pub pgbouncer_declared: Option<String>,
    pub version_drift: Vec<String>,
}

struct Server {
    which: Which,
    child: Child,
    log: PathBuf,
}

impl Server {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32, group: bool) {
        let pid = self.pid();
        // SAFETY: plain syscalls on a pid we own; errors (already gone) are harmless.
        unsafe {
            if group {
                libc::kill(-pid, sig);
            } else {
                libc::kill(pid, sig);
            }
        }
    }

    /// Exit status if the process has ended.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn wait_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Stop the server: a polite signal, then SIGKILL to its process group. (PostgreSQL
    /// backends call setsid(), so the group holds the postmaster only; backends exit as soon
    /// as they notice the postmaster is gone.)
    fn stop(&mut self) {
        if self.exited().is_some() {
            self.signal(libc::SIGKILL, true); // stragglers in the group
            return;
        }
        self.signal(libc::SIGCONT, true); // a paused server cannot exit
        let polite = match self.which {
            Which::Postgres => libc::SIGQUIT, // immediate shutdown: the data dir is disposable
            Which::Pgbouncer => libc::SIGINT,
        };
        self.signal(polite, false);
        if !self.wait_exit(Duration::from_secs(5)) {
            self.signal(libc::SIGKILL, true);
            self.wait_exit(Duration::from_secs(5));
        }
        self.signal(libc::SIGKILL, true);
    }

    fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

/// Last `lines` lines of a log file, indented, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running topology: the handle the chaos engine drives.
pub struct Cluster {
    pub topology: Topology,
    pub run_dir: PathBuf,
    pub pg_port: u16,
    pub bouncer_port: Option<u16>,
    pub versions: Versions,
    pub ready_ms: u128,
    /// The CPU the harness and these servers were pinned to (see [`crate::cpu`]), if any.
    pub pinned_cpu: Option<usize>,
    pg_bin: PathBuf,
    bouncer_bin: Option<PathBuf>,
    pg: Option<Server>,
    bouncer: Option<Server>,
    keep_run_dir: bool,
}

impl Cluster {
    /// Start the topology's servers and wait until both answer.
    pub async fn launch(
        topology: &Topology,
        pg: &PgBinaries,
        bouncer: Option<&BouncerBinary>,
    ) -> Result<Cluster> {
        let t0 = Instant::now();
        let os_user = unprivileged_user()?;
        let template = ensure_template(&pg.bin_dir, &pg.version, os_user).await?;
        let run_dir = make_run_dir(os_user)?;
        let data = run_dir.join("data");
        copy_dir(&template, &data)?;
        let mut cluster = Cluster {
            topology: topology.clone(),
            run_dir: run_dir.clone(),
            pg_port: 0,
            bouncer_port: None,
            versions: Versions {
                postgres: String::new(),
                postgres_declared: pg.version.clone(),
                postgres_full: String::new(),
                pgbouncer: None,
                pgbouncer_declared: bouncer.map(|b| b.declared.clone()),
                version_drift: bouncer.and_then(|b| b.drift.clone()).into_iter().collect(),
            },
            ready_ms: 0,
            pinned_cpu: None,
            pg_bin: pg.bin_dir.clone(),
            bouncer_bin: bouncer.map(|b| b.path.clone()),
            pg: None,
            bouncer: None,
            keep_run_dir: std::env::var_os("PGCHAOS_KEEP_RUN_DIR").is_some(),
        };
        cluster.start_postgres(os_user, None).await?;
        cluster.configure_postgres().await?;
        if topology.pgbouncer.is_some() {
            cluster.start_pgbouncer(os_user, None).await?;
        }
        cluster.read_versions().await?;
        cluster.ready_ms = t0.elapsed().as_millis();
        Ok(cluster)
    }

    /// Start PostgreSQL on `port` (a restart keeps its port, so the pooler's config stays
    /// right), or on a free one, retrying with another if it was taken meanwhile.
    async fn start_postgres(
        &mut self,
        os_user: Option<(u32, u32)>,
        fixed_port: Option<u16>,
    ) -> Result<()> {
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = match fixed_port {
                Some(p) => p,
                None => free_port()?,
            };
            let log = self.run_dir.join("postgres.log");
            let mut cmd = Command::new(self.pg_bin.join("postgres"));
            cmd.env("GLIBC_TUNABLES", PG_MALLOC_TUNABLES);
            // Resolve every shared-library symbol once in the postmaster, not lazily again in
            // each forked backend (~3% of a backend's start-up here).
            cmd.env("LD_BIND_NOW", "1");
            cmd.arg("-D")
                .arg(self.run_dir.join("data"))
                .args(["-c", &format!("port={port}")])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .args([
                    "-c",
                    &format!("unix_socket_directories={}", self.run_dir.display()),
                ])
                .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off"]);
            for (k, v) in &self.topology.postgres.settings {
                cmd.args(["-c", &format!("{k}={v}")]);
            }
            let child = spawn_server(cmd, &log, os_user)
                .with_context(|| format!("starting {}", self.pg_bin.join("postgres").display()))?;
            self.pg = Some(Server {
                which: Which::Postgres,
                child,
                log,
            });
            self.pg_port = port;
            match self.wait_ready(Which::Postgres).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let log = self.pg.as_ref().map(|s| s.log_tail(15)).unwrap_or_default();
                    if let Some(mut s) = self.pg.take() {
                        s.stop();
                    }
                    let port_taken = log.contains("could not bind") || log.contains("in use");
                    last_err = Some(anyhow!(
                        "postgres did not become ready on 127.0.0.1:{port}: {e}\n  last lines of its log:\n{log}"
                    ));
                    if !port_taken || fixed_port.is_some() {
                        break;
                    }
                }
            }
        }
        Err(last_err.unwrap())
    }

    /// Per-run role settings that cannot go through PgBouncer as startup options. DateStyle
    /// is pinned to ISO because ops report `backend_start` as text the harness parses; the
    /// clients' application_name is the role's default, so PgBouncer need not `SET` it on
    /// every new server connection (one round trip less per backend).
    async fn configure_postgres(&self) -> Result<()> {
        let admin = connect(&self.direct_config(SUPERUSER)).await?;
        let lock_timeout = self.topology.workload.lock_timeout_ms;
        let sql = format!(
            "ALTER ROLE {CLIENT_ROLE} SET lock_timeout = '{lock_timeout}ms'; \
             ALTER ROLE {CLIENT_ROLE} SET statement_timeout = '10s'; \
             ALTER ROLE {CLIENT_ROLE} SET idle_in_transaction_session_timeout = '0'; \
             ALTER ROLE {CLIENT_ROLE} SET DateStyle = 'ISO, MDY'; \
             ALTER ROLE {CLIENT_ROLE} SET application_name = 'pgchaos'"
        );
        timed(admin.batch_execute(&sql)).await?;
        Ok(())
    }

    async fn start_pgbouncer(
        &mut self,
        os_user: Option<(u32, u32)>,
        fixed_port: Option<u16>,
    ) -> Result<()> {
        let bin = self.bouncer_bin.clone().ok_or_else(|| {
            anyhow!("topology has a pgbouncer section but no binary was provisioned")
        })?;
        let mut last_err = None;
        for _attempt in 0..3 {
            let port = match fixed_port {
                Some(p) => p,
                None => free_port()?,
            };
            let ini = self.render_pgbouncer_ini(port);
            let ini_path = self.run_dir.join("pgbouncer.ini");
            write_file(&ini_path, &ini, os_user)?;
            write_file(
                &self.run_dir.join("userlist.txt"),
                &format!("\"{CLIENT_ROLE}\" \"\"\n\"{SUPERUSER}\" \"\"\n"),
                os_user,
            )?;
            let log = self.run_dir.join("pgbouncer.log");
            let mut cmd = Command::new(&bin);
            cmd.arg(&ini_path);
            let child = spawn_server(cmd, &log, os_user)
                .with_context(|| format!("starting {}", bin.display()))?;
            self.bouncer = Some(Server {
                which: Which::Pgbouncer,
                child,
                log,
            });
            self.bouncer_port = Some(port);
            match self.wait_ready(Which::Pgbouncer).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let log = self
                        .bouncer
                        .as_ref()
                        .map(|s| s.log_tail(15))
                        .unwrap_or_default();
                    if let Some(mut s) = self.bouncer.take() {
                        s.stop();
                    }
                    let port_taken = log.contains("Address already in use");
                    last_err = Some(anyhow!(
                        "pgbouncer did not become ready on 127.0.0.1:{port}: {e}\n  last lines of its log:\n{log}"
                    ));
                    if !port_taken || fixed_port.is_some() {
                        break;
                    }
                }
            }
        }
        Err(last_err.unwrap())
    }

    /// `pgbouncer.ini` for this run: the topology's pool settings on top of the harness's
    /// fixed ones (loopback only, trust auth from an auth file, admin console for the superuser).
    pub fn render_pgbouncer_ini(&self, port: u16) -> String {
        let b = self
            .topology
            .pgbouncer
            .as_ref()
            .expect("pgbouncer topology");
        let mut ini = format!(
            "; generated by pgchaos for topology {name}\n\
             [databases]\n\
             {DB} = host={sock} port={pg_port} dbname={DB}\n\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir = {sock}\n\
             auth_type = trust\n\
             auth_file = {auth}\n\
             admin_users = {SUPERUSER}\n\
             pool_mode = {mode}\n\
             default_pool_size = {size}\n\
             max_client_conn = {maxc}\n\
             server_reset_query = {reset}\n\
             server_reset_query_always = {always}\n\
             ignore_startup_parameters = extra_float_digits\n",
            name = self.topology.name,
            pg_port = self.pg_port,
            sock = self.run_dir.display(),
            auth = self.run_dir.join("userlist.txt").display(),
            mode = b.pool_mode.as_str(),
            size = b.default_pool_size,
            maxc = b.max_client_conn,
            reset = b.server_reset_query,
            always = u8::from(b.server_reset_query_always),
        );
        for (k, v) in &b.settings {
            ini.push_str(&format!("{k} = {v}\n"));
        }
        ini
    }

    async fn wait_ready(&mut self, which: Which) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let config = match which {
            Which::Postgres => self.direct_config(SUPERUSER),
            Which::Pgbouncer => self.admin_config(),
        };
        loop {
            let server = match which {
                Which::Postgres => self.pg.as_mut(),
                Which::Pgbouncer => self.bouncer.as_mut(),
            }
            .expect("server started");
            if let Some(status) = server.exited() {
                bail!("it exited during startup ({status})");
            }
            let attempt = tokio::time::timeout(Duration::from_secs(1), config.connect(NoTls)).await;
            if let Ok(Ok((client, conn))) = attempt {
                tokio::spawn(conn);
                let probe = match which {
                    Which::Postgres => "SELECT 1",
                    Which::Pgbouncer => "SHOW VERSION",
                };
                if timed(client.simple_query(probe)).await.is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("no answer within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn read_versions(&mut self) -> Result<()> {
        let pg = connect(&self.direct_config(SUPERUSER)).await?;
        let full = simple_first(&pg, "SELECT version()").await?;
        self.versions.postgres = parse_pg_version(&full)
            .ok_or_else(|| anyhow!("cannot read the PostgreSQL version from {full:?}"))?;
        self.versions.postgres_full = full;
        if self.versions.postgres != self.versions.postgres_declared {
            self.versions.version_drift.push(format!(
                "postgres declared {}, ran {}",
                self.versions.postgres_declared, self.versions.postgres
            ));
        }
        if self.bouncer.is_some() {
            let admin = connect(&self.admin_config()).await?;
            let v = simple_first(&admin, "SHOW VERSION").await?;
            let v = v.trim_start_matches("PgBouncer").trim().to_string();
            if let Some(declared) = &self.versions.pgbouncer_declared
                && &v != declared
                && !self
                    .versions
                    .version_drift
                    .iter()
                    .any(|d| d.contains("pgbouncer"))
            {
                self.versions
                    .version_drift
                    .push(format!("pgbouncer declared {declared}, ran {v}"));
            }
            self.versions.pgbouncer = Some(v);
        }
        Ok(())
    }

    /// A logical client's connection: through the pooler, or direct for a pooler-less
    /// topology, over the Unix socket in the private run directory (the TCP listener, on
    /// loopback, is for people and tools; a socket costs less per connect and round trip).
    pub fn client_config(&self) -> Config {
        let port = self.bouncer_port.unwrap_or(self.pg_port);
        self.config(true, port, CLIENT_ROLE, DB, "pgchaos")
    }

    /// A direct PostgreSQL connection over TCP on loopback (what `up` prints) as `user`.
    pub fn direct_config(&self, user: &str) -> Config {
        self.config(false, self.pg_port, user, DB, "pgchaos")
    }

    /// A direct connection over PostgreSQL's Unix socket in the private run directory (the
    /// observer's and contender's path).
    pub fn socket_config(&self, user: &str) -> Config {
        self.config(true, self.pg_port, user, DB, "pgchaos-observer")
    }

    /// PgBouncer's admin console (simple query protocol only), over its Unix socket.
    pub fn admin_config(&self) -> Config {
        self.config(
            true,
            self.bouncer_port.unwrap_or(0),
            SUPERUSER,
            "pgbouncer",
            "pgchaos",
        )
    }

    /// Over loopback TCP, or over the Unix socket in the private run directory.
    fn config(&self, unix: bool, port: u16, user: &str, db: &str, app: &str) -> Config {
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
            .application_name(app);
        c
    }

    pub fn client_dsn(&self) -> String {
        dsn(self.bouncer_port.unwrap_or(self.pg_port), CLIENT_ROLE, DB)
    }
    pub fn direct_dsn(&self) -> String {
        dsn(self.pg_port, SUPERUSER, DB)
    }
    pub fn admin_dsn(&self) -> Option<String> {
        self.bouncer_port.map(|p| dsn(p, SUPERUSER, "pgbouncer"))
    }

    pub fn pool_mode(&self) -> Option<PoolMode> {
        self.topology.pgbouncer.as_ref().map(|b| b.pool_mode)
    }

    /// OS process ids of the servers (postmaster, pgbouncer).
    pub fn pids(&self) -> (Option<i32>, Option<i32>) {
        (
            self.pg.as_ref().map(Server::pid),
            self.bouncer.as_ref().map(Server::pid),
        )
    }

    /// Apply a process-level control to one server.
    pub fn control(&mut self, which: Which, what: Control) -> Result<()> {
        let server = match which {
            Which::Postgres => self.pg.as_mut(),
            Which::Pgbouncer => self.bouncer.as_mut(),
        }
        .ok_or_else(|| anyhow!("{which:?} is not running in this topology"))?;
        match what {
            Control::Stop => server.stop(),
            Control::Kill => {
                server.signal(libc::SIGKILL, true);
                server.wait_exit(Duration::from_secs(5));
            }
            Control::Pause => server.signal(libc::SIGSTOP, false),
            Control::Resume => server.signal(libc::SIGCONT, false),
        }
        Ok(())
    }

    /// Stop and start one server again on the same port.
    pub async fn restart(&mut self, which: Which) -> Result<()> {
        let os_user = unprivileged_user()?;
        match which {
            Which::Postgres => {
                if let Some(mut s) = self.pg.take() {
                    s.stop();
                }
                let port = Some(self.pg_port);
                self.start_postgres(os_user, port).await
            }
            Which::Pgbouncer => {
                if let Some(mut s) = self.bouncer.take() {
                    s.stop();
                }
                let port = self.bouncer_port;
                self.start_pgbouncer(os_user, port).await
            }
        }
    }

    /// Err with the server's log tail when a server has died.
    pub fn check_alive(&mut self) -> Result<()> {
        for server in [self.pg.as_mut(), self.bouncer.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(status) = server.exited() {
                bail!(
                    "{:?} (pid {}) died: {status}\n  last lines of its log:\n{}",
                    server.which,
                    server.pid(),
                    server.log_tail(15)
                );
            }
        }
        Ok(())
    }

    /// Copy the servers' logs into `dir` (for a report).
    pub fn save_logs(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir)?;
        for s in [self.pg.as_ref(), self.bouncer.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Some(name) = s.log.file_name() {
                let _ = fs::copy(&s.log, dir.join(name));
            }
        }
        Ok(())
    }

    /// Stop both servers and remove the run directory. Idempotent.
    pub fn shutdown(&mut self) {
        if let Some(mut b) = self.bouncer.take() {
            b.stop();
        }
        if let Some(mut p) = self.pg.take() {
            p.stop();
        }
        if !self.keep_run_dir && self.run_dir.exists() {
            let _ = fs::remove_dir_all(&self.run_dir);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn dsn(port: u16, user: &str, db: &str) -> String {
    format!("postgresql://{user}@127.0.0.1:{port}/{db}?sslmode=disable")
}

/// Connect with a timeout around the whole startup (TCP connect timeout alone does not
/// cover a hung server).
pub async fn connect(config: &Config) -> Result<Client> {
    let (client, conn) = tokio::time::timeout(IO_TIMEOUT, config.connect(NoTls))
        .await
        .map_err(|_| anyhow!("connect timed out after {IO_TIMEOUT:?}"))??;
    tokio::spawn(conn);
    Ok(client)
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

/// "PostgreSQL 18.6 on x86_64-..." -> "18.6"
pub fn parse_pg_version(full: &str) -> Option<String> {
    let v = full
        .strip_prefix("PostgreSQL ")?
        .split_whitespace()
        .next()?;
    Some(v.trim_end_matches(',').to_string())
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    Ok(l.local_addr()?.port())
}

/// `(uid, gid)` to run servers as, when we are root (postgres refuses to run as root).
fn unprivileged_user() -> Result<Option<(u32, u32)>> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let lookup = || -> Option<(u32, u32)> {
        let out = Command::new("id").arg("-u").arg(OS_USER).output().ok()?;
        let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        let out = Command::new("id").arg("-g").arg(OS_USER).output().ok()?;
        let gid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        Some((uid, gid))
    };
    if let Some(ids) = lookup() {
        return Ok(Some(ids));
    }
    let status = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .args(["--user-group", OS_USER])
        .status()
        .context("running useradd to create the unprivileged server user")?;
    if !status.success() && lookup().is_none() {
        bail!(
            "postgres refuses to run as root, and creating user {OS_USER:?} failed ({status}); \
             create it with: useradd --system --user-group {OS_USER}"
        );
    }
    lookup()
        .map(Some)
        .ok_or_else(|| anyhow!("user {OS_USER} missing after useradd"))
}

fn chown(path: &Path, os_user: Option<(u32, u32)>) -> Result<()> {
    if let Some((uid, gid)) = os_user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .with_context(|| format!("chown {}", path.display()))?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str, os_user: Option<(u32, u32)>) -> Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    chown(path, os_user)
}

/// Where run directories go: `$PGCHAOS_RUN_DIR`, else `/dev/shm/pgchaos` (memory: copying the
/// 46 MB template takes 0.1 s there against about 1 s on this machine's disk), else the
/// temporary directory.
fn run_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGCHAOS_RUN_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && fs::metadata(shm).is_ok_and(|m| !m.permissions().readonly()) {
        return shm.join("pgchaos");
    }
    std::env::temp_dir().join("pgchaos")
}

fn make_run_dir(os_user: Option<(u32, u32)>) -> Result<PathBuf> {
    let base = run_base();
    fs::create_dir_all(&base)?;
    fs::set_permissions(&base, fs::Permissions::from_mode(0o1777))?;
    remove_dead_run_dirs(&base);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let dir = base.join(format!("run-{}-{nanos}", std::process::id()));
    fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
    chown(&dir, os_user)?;
    Ok(dir)
}

/// Run directories of harnesses that died without teardown (SIGKILL): `run-<pid>-<nanos>`
/// whose pid is gone. Their servers died with them (parent-death signal); the files remain.
fn remove_dead_run_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = name
            .strip_prefix("run-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .context("running cp -a")?;
    if !status.success() {
        bail!(
            "copying the template {} to {} failed",
            from.display(),
            to.display()
        );
    }
    Ok(())
}

/// Spawn a server in its own process group, dying with the harness (PR_SET_PDEATHSIG).
/// The harness must spawn servers from a thread that lives as long as the cluster (the
/// death signal follows the spawning thread): the CLI and tests do so from their main task.
fn spawn_server(mut cmd: Command, log: &Path, os_user: Option<(u32, u32)>) -> Result<Child> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    chown(log, os_user)?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    if let Some((uid, gid)) = os_user {
        cmd.uid(uid).gid(gid);
        cmd.env("HOME", "/tmp");
    }
    // SAFETY: async-signal-safe calls only (prctl, getppid, _exit) between fork and exec.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    Ok(cmd.spawn()?)
}

/// initdb once per PostgreSQL version into a cached template (role and database created),
/// under a lock; a half-made template is never used.
async fn ensure_template(
    bin: &Path,
    version: &str,
    os_user: Option<(u32, u32)>,
) -> Result<PathBuf> {
    let root = crate::provision::Options::from_env(false)
        .cache_dir
        .join("templates");
    fs::create_dir_all(&root)?;
    let dir = root.join(format!("postgres-{version}-v1"));
    if dir.join(".complete").exists() {
        return Ok(dir.join("data"));
    }
    let lock = fs::File::create(root.join(format!(".lock-{version}")))?;
    // SAFETY: flock on a file descriptor we own.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::flock(lock.as_raw_fd(), libc::LOCK_EX);
    }
    if dir.join(".complete").exists() {
        return Ok(dir.join("data"));
    }
    let tmp = root.join(format!(".tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755))?;
    chown(&tmp, os_user)?;
    let data = tmp.join("data");
    let log = tmp.join("initdb.log");
    let mut cmd = Command::new(bin.join("initdb"));
    cmd.arg("-D").arg(&data).args([
        "-U",
        SUPERUSER,
        "--auth=trust",
        "--no-sync",
        "-E",
        "UTF8",
        "--locale=C",
    ]);
    let mut child = spawn_server(cmd, &log, os_user)?;
    let status = child.wait()?;
    if !status.success() {
        let tail = log_tail(&log, 15);
        let _ = fs::remove_dir_all(&tmp);
        bail!("initdb failed ({status}):\n{tail}");
    }
    // Start once to create the harness role and database.
    let port = free_port()?;
    let mut cmd = Command::new(bin.join("postgres"));
    cmd.arg("-D")
        .arg(&data)
        .args([
            "-c",
            &format!("port={port}"),
            "-c",
            "listen_addresses=127.0.0.1",
        ])
        .args(["-c", &format!("unix_socket_directories={}", tmp.display())]);
    let child = spawn_server(cmd, &tmp.join("template-postgres.log"), os_user)?;
    let mut server = Server {
        which: Which::Postgres,
        child,
        log: tmp.join("template-postgres.log"),
    };
    let mut config = Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(SUPERUSER)
        .dbname("postgres")
        .connect_timeout(IO_TIMEOUT);
    let deadline = Instant::now() + READY_TIMEOUT;
    let client = loop {
        if let Ok(c) = connect(&config).await {
            break c;
        }
        if server.exited().is_some() || Instant::now() > deadline {
            let tail = server.log_tail(15);
            server.stop();
            bail!("template postgres did not start:\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut r = timed(client.batch_execute(&format!("CREATE ROLE {CLIENT_ROLE} LOGIN"))).await;
    if r.is_ok() {
        r = timed(client.batch_execute(&format!("CREATE DATABASE {DB} OWNER {CLIENT_ROLE}"))).await;
    }
    drop(client);
    // Fast, clean shutdown so the template needs no recovery.
    server.signal(libc::SIGINT, false);
    server.wait_exit(Duration::from_secs(20));
    server.stop();
    r.context("creating the harness role and database in the template")?;
    fs::File::create(tmp.join(".complete"))?;
    let _ = fs::remove_dir_all(&dir); // an incomplete leftover (no marker)
    fs::rename(&tmp, &dir)?;
    Ok(dir.join("data"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_version_parsing() {
        assert_eq!(
            parse_pg_version("PostgreSQL 18.6 on x86_64-pc-linux-gnu, compiled by gcc").as_deref(),
            Some("18.6")
        );
        assert_eq!(
            parse_pg_version("PostgreSQL 19beta1, compiled").as_deref(),
            Some("19beta1")
        );
        assert_eq!(parse_pg_version("Postgres 18"), None);
    }
}
