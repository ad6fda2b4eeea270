//! `launcher: external`: a deployment the harness did not start (staging: a team's own
//! PgBouncer in front of its PostgreSQL), named by the topology's `external:` DSNs. Nothing is
//! started, provisioned or configured; the launch checks that the run can stay inside what it
//! owns, and refuses otherwise (docs/external.md):
//!
//! - each DSN's password is `${NAME}`, set on the parsed settings; its `sslmode` is
//!   honoured (`tls.rs`), and at least `require` to a host that is not loopback unless the
//!   topology says `plaintext: true`;
//! - the clients' role (the pooler DSN's user) is one the team made for pgchaos: not a
//!   superuser, no CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS, a member of no predefined
//!   `pg_*` role; the observer (the PostgreSQL DSN's user) is another role, with
//!   `pg_read_all_stats`, `pg_signal_backend` (and `pg_read_all_data` when the workload
//!   migrates), the GRANT to run printed when one is missing;
//! - the run takes the deployment's lease and proves nothing else is there before any
//!   statement as the clients' role (`owned.rs`, [`check_strangers`]): no backend or pooler
//!   client of the clients' role it did not open, no other role's advisory lock, and with
//!   console faults no other user on the pool's database;
//! - the topology's faults are console faults of its pooler (never RELOAD), opted into with
//!   `console_faults: true`, with an admin DSN to perform them;
//! - the pooler's running settings, when an admin DSN lets them be read, are the ones the
//!   topology declares. Without an admin DSN they are taken as declared, and the report's
//!   versions say the pooler's is unknown.
//!
//! A case is reset only by terminating the backends the run opened (never a console
//! command), after the same check; the run ends the same way (a paused database resumed
//! first), and the reaper does both after a SIGKILL, so no lock of pgchaos's outlives it.

use super::{BoxFuture, Cluster, Launcher, Servers, connect, simple_first};
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
    /// The run's `application_name` on every connection of the clients' role it opens.
    pub tag: String,
    /// What the run owns, once its lease is taken (the launch sets it).
    pub own: Option<super::owned::Ownership>,
    /// The team agreed to console faults (`external.console_faults`).
    pub console_faults: bool,
}

impl Endpoints {
    /// Expand and parse a topology's `external:` section.
    pub fn from_spec(spec: &ExternalSpec, source: &Path) -> Result<Endpoints> {
        // Each DSN with its password set from the environment and its TLS registered
        // (plaintext to a host that is not loopback only with `external.plaintext`).
        let parse = |dsn: &str, key: &str| -> Result<Config> {
            let (mut c, tls) = ExternalSpec::resolve(dsn, key)
                .map_err(|e| anyhow!("{}: {e}", source.display()))?;
            c.connect_timeout(super::IO_TIMEOUT);
            if !tls.mode.encrypts() && !spec.plaintext && !crate::tls::loopback(&c) {
                bail!(
                    "{}: `{key}` reaches a host that is not this machine with sslmode={}: the password and every statement would cross the network in plaintext; add sslmode=require (or verify-ca, verify-full) to the DSN, or `external.plaintext: true` to the `external:` section to allow it",
                    source.display(),
                    tls.mode.as_str()
                );
            }
            crate::tls::register(&c, &tls)
                .map_err(|e| anyhow!("{}: `{key}`: {e:#}", source.display()))?;
            Ok(c)
        };
        let tag = super::owned::new_tag();
        let mut pooler = parse(&spec.pooler, "external.pooler")?;
        pooler.application_name(&tag);
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
            tag,
            own: None,
            console_faults: spec.console_faults,
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
        if e.pooler_database.is_empty() || e.pooler_database.chars().any(|c| c.is_control()) {
            bail!(
                "{}: `external.pooler`'s database {:?} is empty or has a control character: pgchaos names it on the pooler's console",
                source.display(),
                e.pooler_database
            );
        }
        // The clients' role straight to PostgreSQL (the contender's outside connection) has
        // the PostgreSQL DSN's TLS.
        let (_, pg_tls) = ExternalSpec::resolve(&spec.postgres, "external.postgres")
            .map_err(|err| anyhow!("{}: {err}", source.display()))?;
        crate::tls::register(&e.client_direct(), &pg_tls)?;
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
        c.application_name(&self.tag);
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

/// Why a topology cannot run against a deployment, if it cannot, beyond the capabilities
/// it asks for (this launcher offers none: [`super::capability::offers`]; only the pooler's
/// console faults run, and only as the deployment's team allows).
pub fn unsupported(t: &Topology, has_admin: bool, console_faults: bool) -> Option<String> {
    if let Some(f) = super::faults_named(t, |op| op == crate::vocab::Op::PoolerReload) {
        return Some(format!(
            "the fault {f} (RELOAD makes the deployment's pooler read its whole configuration again: pgchaos never sends it to a deployment)"
        ));
    }
    if !console_faults && let Some(f) = super::faults_named(t, |_| true) {
        return Some(format!(
            "the console faults {f} without `external.console_faults: true` (PAUSE, KILL and RECONNECT act on every user's pool of the database: the team opts in, and the run is refused while the console shows another user there)"
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
    None
}

/// The reaper's environment: the observer's DSN as written (`${VAR}` references expanded by
/// the reaper from the environment it inherits), the clients' role, the run's tag and lease
/// time, the admin DSN as written and the pause record's path.
const REAP_DSN: &str = "PGCHAOS_REAP_DSN";
const REAP_ROLE: &str = "PGCHAOS_REAP_ROLE";
const REAP_TAG: &str = "PGCHAOS_REAP_TAG";
const REAP_SINCE: &str = "PGCHAOS_REAP_SINCE";
const REAP_ADMIN: &str = "PGCHAOS_REAP_ADMIN";
const REAP_RECORD: &str = "PGCHAOS_REAP_RECORD";
const REAP_POOL_DB: &str = "PGCHAOS_REAP_POOL_DB";

/// `pgchaos reap-external` (run by the reaper when the harness is gone): RESUME a database a
/// console fault left paused, then terminate the backends the run opened on the PostgreSQL
/// of `PGCHAOS_REAP_DSN`, each bounded by the connect and query timeouts.
pub async fn reap_from_env() -> Result<()> {
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow!("{k} is not set"));
    let parse = |dsn: &str, key: &str| -> Result<Config> {
        let (mut c, _) = ExternalSpec::resolve(dsn, key).map_err(|e| anyhow!("{e}"))?;
        c.connect_timeout(super::IO_TIMEOUT)
            .application_name("pgchaos-reaper");
        Ok(c)
    };
    let mut first_error = None;
    let mut pooled = None;
    // The DSNs' TLS, as the run had it.
    for k in [REAP_DSN, REAP_ADMIN] {
        if let Ok(dsn) = var(k)
            && let Ok((c, tls)) = ExternalSpec::resolve(&dsn, k)
        {
            let _ = crate::tls::register(&c, &tls);
        }
    }
    if let (Ok(admin), Ok(record)) = (var(REAP_ADMIN), var(REAP_RECORD)) {
        // The pooler's servers of the run's pool (the run's, whatever their name).
        if let (Ok(db), Ok(role), Ok(cfg)) = (
            var(REAP_POOL_DB),
            var(REAP_ROLE),
            parse(&admin, "external.admin"),
        ) && let Ok(client) = crate::pooler::connect_pg(&cfg).await
            && let Ok(look) =
                crate::pooler::pgbouncer::view::look(&client, &db, Some(&role), false).await
        {
            pooled = Some(
                look.servers
                    .iter()
                    .filter_map(|s| s.pid)
                    .collect::<Vec<i32>>(),
            );
        }
        let record = Path::new(&record);
        if let Some(db) = super::owned::read_pause_record(record) {
            let resumed = async {
                let client = crate::pooler::connect_pg(&parse(&admin, "external.admin")?).await?;
                crate::pooler::admin_query(
                    &client,
                    &crate::pooler::pgbouncer::console::resume(&db),
                )
                .await?;
                anyhow::Ok(())
            }
            .await;
            match resumed {
                Ok(()) => {
                    let _ = std::fs::remove_file(record);
                }
                Err(e) => first_error = Some(e.context(format!("RESUME {db}"))),
            }
        }
    }
    let role = var(REAP_ROLE)?;
    let tag = var(REAP_TAG)?;
    if !plain_identifier(&role) || !super::owned::is_tag(&tag) {
        bail!("{REAP_ROLE} {role:?} or {REAP_TAG} {tag:?} is not what pgchaos writes");
    }
    let own = super::owned::Ownership {
        role,
        tag,
        since: var(REAP_SINCE)?.parse().context(REAP_SINCE)?,
    };
    let client = connect(&parse(&var(REAP_DSN)?, "external.postgres")?).await?;
    super::timed(client.simple_query(&own.terminate_sql(pooled.as_deref()))).await?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
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

/// Advisory locks of roles other than `$1` in the current database, with their holders (the
/// lease of [`super::owned`] excepted).
pub const FOREIGN_LOCKS: &str = "SELECT l.pid, a.backend_start::text, coalesce(a.usename::text, '?'), \
     l.classid::text, l.objid::text, l.objsubid::text, l.mode, l.granted \
     FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND a.usename IS DISTINCT FROM $1 \
     AND NOT (l.objsubid = 2 AND l.classid = 1885823848 AND l.objid = 1634693921) \
     ORDER BY l.pid, l.objid";

/// Other roles' advisory locks in the database, one line each (pid, backend_start, role,
/// key, mode), or `None` when there is none.
pub async fn foreign_locks(
    observer: &tokio_postgres::Client,
    role: &str,
) -> Result<Option<String>> {
    let foreign = super::timed(observer.query(FOREIGN_LOCKS, &[&role]))
        .await
        .context("reading pg_locks for other roles' advisory locks")?;
    if foreign.is_empty() {
        return Ok(None);
    }
    let mut msg = String::new();
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
    Ok(Some(msg))
}

/// What the run does not own, checked at launch and at every case's reset: backends of the
/// clients' role the run did not open, the pooler's clients of that role with another
/// `application_name`, other users on the pool's database when console faults may run
/// (`console_faults`), other roles' advisory locks. `Err(`[`super::owned::Stopped`]`)`
/// naming each.
pub async fn check_strangers(
    observer: &tokio_postgres::Client,
    consoles: &[&dyn crate::pooler::Console],
    own: &super::owned::Ownership,
    pool_db: &str,
    pooled: Option<&[i32]>,
    console_faults: bool,
) -> Result<()> {
    use super::owned::{Stopped, describe_backends, rows};
    let by = rows(observer, &own.bystanders_sql(pooled)).await?;
    if !by.is_empty() {
        return Err(Stopped(format!(
            "backends of the clients' role {} that this run did not open (pgchaos terminates only its own, and would judge their locks as its clients'):{}",
            own.role,
            describe_backends(&by)
        ))
        .into());
    }
    for console in consoles {
        let Some(s) = console.strangers(pool_db, &own.role, &own.tag).await? else {
            continue;
        };
        if !s.same_role.is_empty() {
            return Err(Stopped(format!(
                "the pooler has clients of the clients' role {} that this run did not open:\n  {}",
                own.role,
                s.same_role.join("\n  ")
            ))
            .into());
        }
        if console_faults && !s.other_users.is_empty() {
            return Err(Stopped(format!(
                "other users are on database {pool_db} of the pooler, and a console fault (PAUSE, KILL, RECONNECT {pool_db}) would act on them:\n  {}",
                s.other_users.join("\n  ")
            ))
            .into());
        }
    }
    if let Some(locks) = foreign_locks(observer, &own.role).await? {
        return Err(Stopped(format!(
            "roles other than the clients' ({}) hold advisory locks in the database (the verdicts would take them as the clients'):{locks}",
            own.role
        ))
        .into());
    }
    Ok(())
}

/// The observer's role has what it needs (another role's backend_start, terminating the
/// clients' backends, and with a migrating workload reading the migration's tables).
async fn check_grants(
    observer: &tokio_postgres::Client,
    topology: &Topology,
    e: &Endpoints,
) -> Result<()> {
    let src = topology.source.display();
    let mut needs = vec!["pg_read_all_stats", "pg_signal_backend"];
    if topology.workload.uses(crate::vocab::Op::Migrate) {
        needs.push("pg_read_all_data");
    }
    let mut missing = Vec::new();
    for role in needs {
        let has = simple_first(
            observer,
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
    Ok(())
}

/// The clients' role exists and is one made for pgchaos (no attribute or `pg_*` membership
/// that reaches beyond it).
async fn check_client_role(
    observer: &tokio_postgres::Client,
    src: &str,
    e: &Endpoints,
) -> Result<()> {
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
    Ok(())
}

/// The versions that ran: PostgreSQL's, and the pooler's when its console can say.
async fn versions(
    topology: &Topology,
    observer: &tokio_postgres::Client,
    kind: &dyn crate::pooler::Pooler,
    at: Option<&crate::pooler::ConsoleAt>,
) -> Result<Versions> {
    let mut versions = Versions {
        postgres_declared: topology.postgres.version.clone(),
        pooler_name: topology.pooler.as_ref().map(|p| p.kind.to_string()),
        pooler_declared: topology.pooler.as_ref().map(|p| p.version.clone()),
        ..Default::default()
    };
    let full = simple_first(observer, crate::sql::VERSION).await?;
    let ran = match at {
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
    Ok(versions)
}

async fn launch(topology: &Topology) -> Result<Cluster> {
    let t0 = Instant::now();
    let src = topology.source.display().to_string();
    let spec = topology.external.as_ref().ok_or_else(|| {
        anyhow!("{src}: `--launcher external` needs the topology's `external:` section (the deployment's DSNs)")
    })?;
    let mut e = Endpoints::from_spec(spec, &topology.source)?;
    if let Some(why) = unsupported(topology, e.admin.is_some(), e.console_faults) {
        bail!("{src}: launcher external cannot run {why}");
    }
    let observer = connect(&e.postgres).await.with_context(|| {
        format!(
            "{src}: connecting to PostgreSQL as the observer (external.postgres, role {})",
            e.observer_role
        )
    })?;
    check_grants(&observer, topology, &e).await?;
    check_client_role(&observer, &src, &e).await?;
    // One run at a time: the lease, on a connection of its own held until teardown.
    let mut lease_cfg = e.postgres.clone();
    lease_cfg.application_name("pgchaos-lease");
    let lease = connect(&lease_cfg)
        .await
        .with_context(|| format!("{src}: connecting for the run's lease (external.postgres)"))?;
    let since = super::owned::take_lease(&lease, &e.database)
        .await
        .map_err(|err| anyhow!("{src}: {err:#}"))?;
    let own = super::owned::Ownership {
        role: e.client_role.clone(),
        tag: e.tag.clone(),
        since,
    };
    e.own = Some(own.clone());
    let kind = pooler::for_topology(topology);
    let at = e.console_at().filter(|_| kind.has_console());
    let console = match &at {
        Some(at) => Some(kind.console(at).await.with_context(|| {
            format!("{src}: connecting to the pooler's admin console (external.admin)")
        })?),
        None => None,
    };
    let consoles: Vec<&dyn crate::pooler::Console> = console.iter().map(|c| c.as_ref()).collect();
    let console_faults = !topology.faults.kinds.is_empty();
    if console_faults && let Some(c) = &console {
        // Console faults need the console to say who else is on the database.
        if c.strangers(&e.pooler_database, &own.role, &own.tag)
            .await?
            .is_none()
        {
            bail!(
                "{src}: launcher external cannot run console faults on {}: its console cannot list its clients, so pgchaos cannot tell that no other user is on database {}",
                kind.display_name(),
                e.pooler_database
            );
        }
    }
    check_strangers(
        &observer,
        &consoles,
        &own,
        &e.pooler_database,
        None,
        console_faults,
    )
    .await
    .map_err(|err| {
        anyhow!(
            "{src}: refusing to run: {}",
            err.to_string().trim_start_matches("stopped: ")
        )
    })?;
    drop(consoles);
    drop(console);
    if let Some(at) = &at {
        super::verify_pooler_config(kind.as_ref(), at, &topology.name, "at launch", None)
            .await
            .with_context(|| format!("{src}: the deployment's pooler (external.admin)"))?;
    }
    let versions = versions(topology, &observer, kind.as_ref(), at.as_ref()).await?;
    let run_dir = super::runtime::make_run_dir(None)?;
    // However the harness ends (SIGKILL included), the reaper resumes a paused database and
    // terminates the run's backends: a lock a client left on a pooled server must not
    // outlive the run. Secrets stay in the environment the reaper inherits.
    let mut reap_env = vec![
        (REAP_DSN, spec.postgres.clone()),
        (REAP_ROLE, own.role.clone()),
        (REAP_TAG, own.tag.clone()),
        (REAP_SINCE, format!("{:.6}", own.since)),
        (
            REAP_RECORD,
            run_dir
                .join(super::owned::PAUSE_RECORD)
                .display()
                .to_string(),
        ),
    ];
    if let Some(a) = &spec.admin {
        reap_env.push((REAP_ADMIN, a.clone()));
        reap_env.push((REAP_POOL_DB, e.pooler_database.clone()));
    }
    let reaper = super::reaper::Reaper::spawn_with_reap(&run_dir, &reap_env)?;
    let servers = ExternalServers {
        observer: e.postgres.clone(),
        own,
        at: at.clone(),
        pooler: kind.clone(),
        pool_db: e.pooler_database.clone(),
        lease: Some(lease),
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

/// Before a console fault on a deployment: nothing the run does not own is on the
/// database now, and a PAUSE or KILL (`pauses`) is recorded first. A no-op for servers the
/// harness started.
pub async fn before_console_fault(
    cluster: &Cluster,
    observer: &tokio_postgres::Client,
    op: crate::vocab::Op,
    pauses: bool,
) -> Result<()> {
    let Some(own) = cluster.external.as_ref().and_then(|e| e.own.as_ref()) else {
        return Ok(());
    };
    let console = cluster.console().await.context("nemesis")?;
    check_strangers(
        observer,
        &[console.as_ref()],
        own,
        cluster.pool_database(),
        None,
        true,
    )
    .await
    .with_context(|| format!("nemesis: before {op}"))?;
    if pauses {
        record_pause(cluster, cluster.pool_database())?;
    }
    Ok(())
}

/// A console fault is about to PAUSE or KILL `db` on a deployment: write the record teardown
/// and the reaper resume from.
pub fn record_pause(cluster: &Cluster, db: &str) -> Result<()> {
    let at = cluster
        .console_at()
        .map(|a| format!("{}:{}", a.host.unwrap_or_default(), a.port))
        .unwrap_or_default();
    super::owned::write_pause_record(&cluster.run_dir, db, &at)
        .context("writing the pause record before a console fault")
}

/// The console fault's RESUME went through: nothing is left paused.
pub fn clear_pause(cluster: &Cluster) {
    let _ = std::fs::remove_file(cluster.run_dir.join(super::owned::PAUSE_RECORD));
}

/// No process to control; at the end, a database a console fault left paused is resumed,
/// the run's backends are terminated (no lock of the run's outlives it), the lease is let go
/// and the run directory removed.
struct ExternalServers {
    observer: Config,
    own: super::owned::Ownership,
    at: Option<crate::pooler::ConsoleAt>,
    pooler: std::sync::Arc<dyn crate::pooler::Pooler>,
    pool_db: String,
    lease: Option<tokio_postgres::Client>,
    run_dir: PathBuf,
    down: bool,
    reaper: Option<super::reaper::Reaper>,
}

impl ExternalServers {
    /// RESUME the database a record says is paused; Ok(true) when there was one.
    async fn resume(
        pooler: &dyn crate::pooler::Pooler,
        at: Option<&crate::pooler::ConsoleAt>,
        record: &Path,
    ) -> Result<bool> {
        let Some(db) = super::owned::read_pause_record(record) else {
            return Ok(false);
        };
        let at = at.ok_or_else(|| anyhow!("{db} was paused, and there is no console"))?;
        let heal = pooler
            .console_fault(crate::vocab::Op::PoolerPause, &db)
            .and_then(|f| f.heal)
            .unwrap_or_default();
        let console = pooler.console(at).await?;
        for cmd in heal {
            console.command(&cmd).await?;
        }
        let _ = std::fs::remove_file(record);
        Ok(true)
    }
}

impl Servers for ExternalServers {
    fn pids(&self) -> (Option<i32>, Option<i32>) {
        (None, None)
    }
    fn local(&self) -> bool {
        false
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
        // Resume what a console fault left paused, then terminate what the run left (a lock
        // held by an orphaned backend must not outlive it). From a thread of its own:
        // shutdown may run inside or outside a runtime.
        let cfg = self.observer.clone();
        let own = self.own.clone();
        let at = self.at.clone();
        let pooler = self.pooler.clone();
        let pool_db = self.pool_db.clone();
        let record = self.run_dir.join(super::owned::PAUSE_RECORD);
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let resumed = Self::resume(pooler.as_ref(), at.as_ref(), &record).await;
                // The pooler's servers of the run's pool, when its console can say.
                let pooled =
                    match &at {
                        Some(at) => match pooler.console(at).await {
                            Ok(c) => c.look(&pool_db, false).await.ok().map(|l| {
                                l.servers.iter().filter_map(|s| s.pid).collect::<Vec<_>>()
                            }),
                            Err(_) => None,
                        },
                        None => None,
                    };
                let c = connect(&cfg).await.ok()?;
                let terminated =
                    super::timed(c.simple_query(&own.terminate_sql(pooled.as_deref())))
                        .await
                        .ok();
                Some((resumed, terminated.is_some()))
            })
        })
        .join();
        match done {
            Ok(Some((resumed, true))) => {
                if let Err(e) = resumed {
                    eprintln!(
                        "pgchaos: launcher external: could not RESUME the database a console fault paused: {e:#}; run RESUME on the pooler's console"
                    );
                }
            }
            _ => eprintln!(
                "pgchaos: launcher external: could not terminate the backends this run opened (role {}, application_name {}) at its end; check pg_stat_activity",
                self.own.role, self.own.tag
            ),
        }
        // The run's backends are gone: the lease can go.
        self.lease = None;
        let _ = std::fs::remove_dir_all(&self.run_dir);
        if let Some(mut r) = self.reaper.take() {
            r.finish();
        }
    }
}
