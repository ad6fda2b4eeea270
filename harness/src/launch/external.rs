//! `launcher: external`: a deployment the harness did not start (staging: a team's own
//! PgBouncer in front of its PostgreSQL), named by the topology's `external:` DSNs. Nothing is
//! started, provisioned or configured; the launch checks that the run can stay inside what it
//! owns, and refuses otherwise:
//!
//! - the clients' role (the pooler DSN's user) is one the team made for pgchaos: not a
//!   superuser, no CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS, a member of no predefined
//!   `pg_*` role; the observer (the PostgreSQL DSN's user) is another role;
//! - no other role holds an advisory lock in the database (the evidence: pid, backend_start,
//!   role, key of each), since a case's reset and its verdicts assume every lock is the
//!   clients';
//! - the topology's faults are console faults of its pooler, with an admin DSN to perform
//!   them (no process, host, link or standby kind: pgchaos controls no process there);
//! - the pooler's running settings, when an admin DSN lets them be read, are the ones the
//!   topology declares (its pooling rules are what the model judges by). Without an admin
//!   DSN they are taken as declared, and the report's versions say the pooler's is unknown.
//!
//! A case is reset only by terminating the clients' role's backends (never a console
//! command: RECONNECT or PAUSE act on every user's pool); the run ends the same way, so no
//! lock of pgchaos's outlives it. The observer's role needs `pg_read_all_stats` (another
//! role's `backend_start`) and `pg_signal_backend` (to terminate the clients' backends), and
//! `pg_read_all_data` when the workload migrates (the observer reads the migration's tables);
//! the launch refuses, with the GRANT to run, when it lacks one.

use super::{BoxFuture, Cluster, Control, Launcher, Servers, Which, connect, simple_first};
use crate::pooler;
use crate::topology::{ExternalSpec, Topology};
use crate::vocab::Versions;
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio_postgres::Config;

/// The deployment's endpoints, expanded and parsed.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// The clients' connection (through the pooler).
    pub pooler: Config,
    /// PostgreSQL directly, as the observer's role.
    pub postgres: Config,
    /// The pooler's admin console.
    pub admin: Option<Config>,
    pub client_role: String,
    pub observer_role: String,
    /// The database on PostgreSQL (the observer's).
    pub database: String,
    /// The database name the clients give the pooler (its pool's name).
    pub pooler_database: String,
}

impl Endpoints {
    /// Expand and parse a topology's `external:` section.
    pub fn from_spec(spec: &ExternalSpec, source: &Path) -> Result<Endpoints> {
        let parse = |dsn: &str, key: &str| -> Result<Config> {
            let text =
                ExternalSpec::expand(dsn, key).map_err(|e| anyhow!("{}: {e}", source.display()))?;
            let mut c: Config = text
                .parse()
                .map_err(|e| anyhow!("{}: `{key}` does not parse: {e}", source.display()))?;
            c.connect_timeout(super::IO_TIMEOUT);
            Ok(c)
        };
        let mut pooler = parse(&spec.pooler, "external.pooler")?;
        pooler.application_name("pgchaos");
        let mut postgres = parse(&spec.postgres, "external.postgres")?;
        postgres.application_name("pgchaos-observer");
        let admin = match &spec.admin {
            Some(a) => Some(parse(a, "external.admin")?),
            None => None,
        };
        let user = |c: &Config| c.get_user().unwrap_or_default().to_string();
        let db = |c: &Config| c.get_dbname().unwrap_or_default().to_string();
        let e = Endpoints {
            client_role: user(&pooler),
            observer_role: user(&postgres),
            database: db(&postgres),
            pooler_database: db(&pooler),
            pooler,
            postgres,
            admin,
        };
        for (key, role) in [
            ("external.pooler", &e.client_role),
            ("external.postgres", &e.observer_role),
        ] {
            if !plain_identifier(role) {
                bail!(
                    "{}: `{key}`'s role {role:?} is not a plain lower-case identifier ([a-z_][a-z0-9_]*): pgchaos names it in its queries",
                    source.display()
                );
            }
        }
        if e.client_role == e.observer_role {
            bail!(
                "{}: the clients (external.pooler) and the observer (external.postgres) are the same role {:?}; a case's reset terminates every backend of the clients' role, the observer's too: give the observer a role of its own",
                source.display(),
                e.client_role
            );
        }
        Ok(e)
    }

    /// The clients' role straight to PostgreSQL (the contender's "outside connection"): the
    /// PostgreSQL DSN's host and database with the pooler DSN's user and password.
    pub fn client_direct(&self) -> Config {
        let mut c = self.postgres.clone();
        c.user(&self.client_role);
        if let Some(pw) = self.pooler.get_password() {
            c.password(pw);
        }
        c.application_name("pgchaos");
        c
    }

    /// Where the admin console is.
    pub fn console_at(&self) -> Option<crate::pooler::ConsoleAt> {
        let a = self.admin.as_ref()?;
        let host = a.get_hosts().first().map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        });
        Some(crate::pooler::ConsoleAt {
            unix_dir: match a.get_hosts().first() {
                Some(tokio_postgres::config::Host::Unix(p)) => Some(p.clone()),
                _ => None,
            },
            host,
            pool_user: Some(self.client_role.clone()),
            port: a.get_ports().first().copied().unwrap_or(5432),
            admin_port: None,
            user: a.get_user().unwrap_or_default().to_string(),
            password: a
                .get_password()
                .map(|p| String::from_utf8_lossy(p).to_string()),
            container: None,
        })
    }
}

fn plain_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Why a topology cannot run against a deployment, if it cannot.
pub fn unsupported(t: &Topology, has_admin: bool) -> Option<String> {
    let pooler = pooler::for_topology(t);
    let not_console = super::faults_named(t, |op| pooler.console_fault(op, "db").is_none());
    if let Some(f) = not_console {
        return Some(format!(
            "the faults {f} (pgchaos controls no process, host or link of a deployment it did not start; only its pooler's console faults)"
        ));
    }
    if !has_admin && let Some(f) = super::faults_named(t, |_| true) {
        return Some(format!(
            "the console faults {f} without `external.admin` (the pooler's admin console performs them)"
        ));
    }
    if t.workload.may_set(crate::vocab::Guc::Role) {
        return Some(format!(
            "a workload that may `set` the role (it switches to roles pgchaos creates, `{}<n>`, and it creates none on a deployment it did not start; a script naming only other settings runs)",
            crate::vocab::setting::ROLE_PREFIX
        ));
    }
    if t.postgres.standby {
        return Some("postgres.standby (a failover needs servers pgchaos started)".into());
    }
    if t.pooler.as_ref().is_some_and(|p| p.replicas > 1) {
        return Some("replicas of the pooler (the deployment's pooler is one DSN)".into());
    }
    None
}

/// The reaper's environment: the observer's DSN (expanded) and the clients' role.
const REAP_DSN: &str = "PGCHAOS_REAP_DSN";
const REAP_ROLE: &str = "PGCHAOS_REAP_ROLE";

/// `pgchaos reap-external` (run by the reaper when the harness is gone): terminate the
/// clients' role's backends on the PostgreSQL of `PGCHAOS_REAP_DSN`, bounded by the
/// connect and query timeouts.
pub async fn reap_from_env() -> Result<()> {
    let dsn = std::env::var(REAP_DSN).map_err(|_| anyhow!("{REAP_DSN} is not set"))?;
    let role = std::env::var(REAP_ROLE).map_err(|_| anyhow!("{REAP_ROLE} is not set"))?;
    if !plain_identifier(&role) {
        bail!("{REAP_ROLE} {role:?} is not a plain identifier");
    }
    let mut c: Config = dsn.parse().context("PGCHAOS_REAP_DSN")?;
    c.connect_timeout(super::IO_TIMEOUT)
        .application_name("pgchaos-reaper");
    let client = connect(&c).await?;
    super::timed(client.simple_query(&crate::sql::terminate_role(&role))).await?;
    Ok(())
}

/// Launches nothing: connects to the deployment.
pub struct ExternalLauncher;

impl Launcher for ExternalLauncher {
    fn name(&self) -> &'static str {
        "external"
    }

    fn launch<'a>(&'a self, topology: &'a Topology) -> BoxFuture<'a, Result<Cluster>> {
        Box::pin(launch(topology))
    }
}

/// The privileges the clients' role must not have, each as the query's column and its name.
const CLIENT_ROLE_CHECK: &str = "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, \
     coalesce((SELECT string_agg(g.rolname, ', ' ORDER BY g.rolname) FROM pg_auth_members m \
     JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid AND g.rolname LIKE 'pg\\_%'), '') \
     FROM pg_roles r WHERE rolname = $1";

/// Advisory locks of roles other than `$1` in the current database, with their holders.
pub const FOREIGN_LOCKS: &str = "SELECT l.pid, a.backend_start::text, coalesce(a.usename::text, '?'), \
     l.classid::text, l.objid::text, l.objsubid::text, l.mode, l.granted \
     FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND a.usename IS DISTINCT FROM $1 ORDER BY l.pid, l.objid";

async fn launch(topology: &Topology) -> Result<Cluster> {
    let t0 = Instant::now();
    let src = topology.source.display().to_string();
    let spec = topology.external.as_ref().ok_or_else(|| {
        anyhow!("{src}: `--launcher external` needs the topology's `external:` section (the deployment's DSNs)")
    })?;
    let e = Endpoints::from_spec(spec, &topology.source)?;
    if let Some(why) = unsupported(topology, e.admin.is_some()) {
        bail!("{src}: launcher external cannot run {why}");
    }
    let observer = connect(&e.postgres).await.with_context(|| {
        format!(
            "{src}: connecting to PostgreSQL as the observer (external.postgres, role {})",
            e.observer_role
        )
    })?;
    // What the observer needs: another role's backend_start, terminating the clients'
    // backends, and (a migrating workload) reading the tables the clients' migration made.
    let mut needs = vec!["pg_read_all_stats", "pg_signal_backend"];
    if topology.workload.uses(crate::vocab::Op::Migrate) {
        needs.push("pg_read_all_data");
    }
    let mut missing = Vec::new();
    for role in needs {
        let has = simple_first(
            &observer,
            &format!("SELECT pg_has_role(current_user, '{role}', 'member')"),
        )
        .await?;
        if has != "t" {
            missing.push(role);
        }
    }
    if !missing.is_empty() {
        bail!(
            "{src}: the observer's role {} (external.postgres) is not a member of {}; as an administrator: GRANT {} TO {}",
            e.observer_role,
            missing.join(", "),
            missing.join(", "),
            e.observer_role
        );
    }
    let rows = super::timed(observer.query(CLIENT_ROLE_CHECK, &[&e.client_role]))
        .await
        .context("reading the clients' role's attributes")?;
    let row = rows.first().ok_or_else(|| {
        anyhow!(
            "{src}: the clients' role {:?} (external.pooler) does not exist on PostgreSQL (external.postgres)",
            e.client_role
        )
    })?;
    let mut wrong: Vec<String> = [
        "SUPERUSER",
        "CREATEROLE",
        "CREATEDB",
        "REPLICATION",
        "BYPASSRLS",
    ]
    .iter()
    .enumerate()
    .filter(|(i, _)| row.get::<_, bool>(*i))
    .map(|(_, n)| n.to_string())
    .collect();
    let member_of: String = row.get(5);
    if !member_of.is_empty() {
        wrong.push(format!("member of {member_of}"));
    }
    if !wrong.is_empty() {
        bail!(
            "{src}: refusing to run: the clients' role {:?} has privileges a role made for pgchaos should not have: {}",
            e.client_role,
            wrong.join(", ")
        );
    }
    let foreign = super::timed(observer.query(FOREIGN_LOCKS, &[&e.client_role]))
        .await
        .context("reading pg_locks for other roles' advisory locks")?;
    if !foreign.is_empty() {
        let mut msg = format!(
            "{src}: refusing to run: roles other than the clients' ({}) hold advisory locks in database {} (pgchaos resets a case by terminating its own backends only, and would judge these locks as its clients'):",
            e.client_role, e.database
        );
        for r in &foreign {
            let key = match r.get::<_, String>(5).as_str() {
                // objsubid 1: one bigint key (classid high half, objid low half).
                "1" => {
                    let hi: u64 = r.get::<_, String>(3).parse().unwrap_or(0);
                    let lo: u64 = r.get::<_, String>(4).parse().unwrap_or(0);
                    format!("key {}", ((hi << 32) | lo) as i64)
                }
                _ => format!(
                    "keys ({}, {})",
                    r.get::<_, String>(3).parse::<u32>().unwrap_or(0) as i32,
                    r.get::<_, String>(4).parse::<u32>().unwrap_or(0) as i32
                ),
            };
            msg.push_str(&format!(
                "\n  pid {} backend_start {} role {} {key} {}{}",
                r.get::<_, i32>(0),
                r.get::<_, Option<String>>(1).unwrap_or_else(|| "?".into()),
                r.get::<_, String>(2),
                r.get::<_, String>(6),
                if r.get::<_, bool>(7) {
                    ""
                } else {
                    " (waiting)"
                }
            ));
        }
        bail!(msg);
    }
    let kind = pooler::for_topology(topology);
    let at = e.console_at().filter(|_| kind.has_console());
    if let Some(at) = &at {
        super::verify_pooler_config(kind.as_ref(), at, &topology.name, "at launch", None)
            .await
            .with_context(|| format!("{src}: the deployment's pooler (external.admin)"))?;
    }
    let mut versions = Versions {
        postgres_declared: topology.postgres.version.clone(),
        pooler_name: topology.pooler.as_ref().map(|p| p.kind.to_string()),
        pooler_declared: topology.pooler.as_ref().map(|p| p.version.clone()),
        ..Default::default()
    };
    let full = simple_first(&observer, crate::sql::VERSION).await?;
    let ran = match &at {
        Some(at) => Some(kind.console(at).await?.version().await?),
        None => None,
    };
    versions.ran(&full, ran.as_deref())?;
    if at.is_none() && topology.pooler.is_some() {
        versions.version_drift.push(format!(
            "{} version unknown (no external.admin): its settings were taken as declared",
            kind.display_name()
        ));
    }
    let run_dir = super::runtime::make_run_dir(None)?;
    // However the harness ends (SIGKILL included), the reaper terminates the clients'
    // backends: a lock a client left on a pooled server must not outlive the run.
    let expanded = ExternalSpec::expand(&spec.postgres, "external.postgres")
        .map_err(|e| anyhow!("{src}: {e}"))?;
    let reaper = super::reaper::Reaper::spawn_with_reap(
        &run_dir,
        &[(REAP_DSN, expanded), (REAP_ROLE, e.client_role.clone())],
    )?;
    let servers = ExternalServers {
        observer: e.postgres.clone(),
        client_role: e.client_role.clone(),
        run_dir: run_dir.clone(),
        down: false,
        reaper: Some(reaper),
    };
    let port = |c: &Config| c.get_ports().first().copied().unwrap_or(5432);
    Ok(Cluster {
        topology: topology.clone(),
        pooler: kind,
        launcher: "external",
        pg_bin_dir: PathBuf::new(),
        run_dir,
        pg_port: port(&e.postgres),
        primary_port: std::sync::atomic::AtomicU16::new(port(&e.postgres)),
        pooler_port: topology.pooler.as_ref().map(|_| port(&e.pooler)),
        pooler_admin_port: None,
        pooler_container: None,
        pooler_replicas: Vec::new(),
        versions,
        ready_ms: t0.elapsed().as_millis(),
        pinned_cpu: None,
        passwords: Vec::new(),
        local: false,
        unix_sockets: false,
        servers: tokio::sync::Mutex::new(Box::new(servers)),
        external: Some(e),
    })
}

/// No process to control; at the end, the clients' role's backends are terminated (no lock
/// of the run's outlives it) and the run directory removed.
struct ExternalServers {
    observer: Config,
    client_role: String,
    run_dir: PathBuf,
    down: bool,
    reaper: Option<super::reaper::Reaper>,
}

impl Servers for ExternalServers {
    fn pids(&self) -> (Option<i32>, Option<i32>) {
        (None, None)
    }
    fn local(&self) -> bool {
        false
    }
    fn control(&mut self, which: Which, what: Control) -> Result<()> {
        bail!("launcher external controls no process ({what:?} of {which:?} refused)")
    }
    fn restart(&mut self, which: Which) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { bail!("launcher external restarts nothing ({which:?})") })
    }
    fn check_alive(&mut self) -> Result<()> {
        Ok(())
    }
    fn save_logs(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("README"),
            "launcher external: the deployment's logs are the team's own; pgchaos read none\n",
        )?;
        Ok(())
    }
    fn shutdown(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        // Terminate what the run left (a lock held by an orphaned backend must not outlive
        // it). From a thread of its own: shutdown may run inside or outside a runtime.
        let cfg = self.observer.clone();
        let sql = crate::sql::terminate_role(&self.client_role);
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let c = connect(&cfg).await.ok()?;
                super::timed(c.simple_query(&sql)).await.ok()
            })
        })
        .join();
        if !matches!(done, Ok(Some(_))) {
            eprintln!(
                "pgchaos: launcher external: could not terminate the backends of role {} at the end of the run; check pg_stat_activity",
                self.client_role
            );
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
        if let Some(mut r) = self.reaper.take() {
            r.finish();
        }
    }
    fn signal_backend(&mut self, pid: i32, _sig: i32) -> Result<bool> {
        bail!("launcher external sends no signal to a backend (pid {pid}): it is not on this host")
    }
}
