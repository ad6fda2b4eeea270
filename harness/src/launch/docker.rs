//! `launcher: docker`: the topology's servers as containers of the images built here
//! (`container::images`), started with testcontainers-modules (its postgres module with the
//! local image name and tag; a generic image for the pooler) on one private network per run.
//! The pooler reaches PostgreSQL by container name; the harness reaches both over TCP on
//! ports published on 127.0.0.1 only (a pooler's admin port of its own too, pgpool-II's PCP),
//! with the run's passwords (the same SCRAM rules as native); the pooler's console is told
//! the containers' ids, the provisioned executable and the run directory
//! (`pooler::InContainer`). Process control is the engine's: stop, kill, pause (the cgroup freezer: every
//! process of the container at once), unpause, SIGINT, start again on the same port.
//!
//! Every container and the network carry the label `pgchaos.run=<run id>`; the reaper
//! removes whatever has it when the harness ends, SIGKILL included (testcontainers' own
//! drop does not run then). A backend is signalled inside its container (`docker exec`,
//! dash's `kill`). The host faults (`vocab::fault::HOSTS`) are these controls on a whole
//! container: pause and unpause, kill and start, and a partition (nft in PgBouncer's
//! network namespace). A standby is a container of its own (`postgres.standby`), and
//! `promote` fails over between containers: the primary fenced by `docker kill`, the standby
//! promoted, the pooler's mounted config rewritten and reloaded, a new standby made. Refused
//! at launch: the link faults (the link proxy is a loopback process PgBouncer in a container
//! cannot reach).

use super::reaper::Reaper;
use super::runtime::{self, write_private};
use super::{
    BackendSignals, BoxFuture, CLIENT_ROLE, Cluster, Control, DB, Failover, Launcher, Partitions,
    Processes, SUPERUSER, Servers, Which, connect, simple_first,
};
use crate::container::{self, images};
use crate::pooler::{self, ConfigContext, Pooler};
use crate::provision::{PgBinaries, PoolerBinary};
use crate::topology::Topology;
use crate::vocab::Versions;
use crate::vocab::fault::Peer;
use anyhow::{Context, Result, anyhow, bail};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::core::{IntoContainerPort, Mount, WaitFor};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{GenericImage, ImageExt};
use tokio_postgres::Config;

const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// nft in the PgBouncer image (`container::images`), and the table a partition adds.
const NFT: &str = "/usr/sbin/nft";
const CUT_TABLE: &str = "pgchaos_partition";
/// The label every container and network of a run carries.
pub const RUN_LABEL: &str = "pgchaos.run";

/// Launches servers as containers.
pub struct DockerLauncher {
    pg: PgBinaries,
    bouncer: Option<PoolerBinary>,
}

impl DockerLauncher {
    pub fn new(pg: PgBinaries, bouncer: Option<PoolerBinary>) -> DockerLauncher {
        DockerLauncher { pg, bouncer }
    }
}

impl Launcher for DockerLauncher {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn launch<'a>(&'a self, topology: &'a Topology) -> BoxFuture<'a, Result<Cluster>> {
        Box::pin(launch(topology, &self.pg, self.bouncer.as_ref()))
    }
}

struct Node {
    /// testcontainers' handle; taken and forgotten at shutdown, after the engine removed
    /// the container (its drop needs a runtime that may be gone by then).
    handle: Option<Box<dyn std::any::Any + Send>>,
    id: String,
    name: String,
}

impl Node {
    fn of<I: testcontainers_modules::testcontainers::Image + 'static>(
        c: testcontainers_modules::testcontainers::ContainerAsync<I>,
        name: String,
    ) -> Node {
        Node {
            id: c.id().to_string(),
            handle: Some(Box::new(c)),
            name,
        }
    }
}

/// `repository:tag` -> both parts.
fn split_reference(reference: &str) -> Result<(&str, &str)> {
    reference
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("image reference {reference} has no tag"))
}

struct DockerServers {
    run_dir: PathBuf,
    run_id: String,
    network: String,
    pg: Option<Node>,
    pooler: Option<Node>,
    /// Replicas of the pooler beyond the first (`replicas:`): each container and its port.
    replicas: Vec<(Node, u16)>,
    pg_port: u16,
    pooler_port: Option<u16>,
    /// The pooler's admin port on the host, when its console listens apart (pgpool-II's PCP).
    pooler_admin_port: Option<u16>,
    /// The pooler's executable as provisioned here (its console's tools run on this host).
    pooler_exe: Option<PathBuf>,
    /// The streaming standby (`postgres.standby`) and its host port, until it is promoted.
    standby: Option<(Node, u16)>,
    /// Primaries a promote fenced (killed and kept stopped until the run ends).
    fenced: Vec<Node>,
    /// Standbys made so far (each container gets its own name).
    standbys_made: u32,
    /// What a PostgreSQL container runs (the image and its `-c` arguments), for standbys.
    pg_reference: String,
    pg_args: Vec<String>,
    topology_name: String,
    passwords: Vec<(String, String)>,
    pooler_kind: std::sync::Arc<dyn Pooler>,
    reaper: Option<Reaper>,
    down: bool,
}

fn tcp(port: u16, user: &str, password: &str, db: &str) -> Config {
    let mut c = Config::new();
    c.host("127.0.0.1")
        .port(port)
        .user(user)
        .password(password)
        .dbname(db)
        .connect_timeout(super::IO_TIMEOUT)
        .application_name("pgchaos");
    c
}

async fn launch(
    topology: &Topology,
    pg: &PgBinaries,
    bouncer: Option<&PoolerBinary>,
) -> Result<Cluster> {
    let t0 = Instant::now();
    let imgs = images::ensure_for(topology, pg, bouncer)?;
    let run_dir = runtime::make_run_dir(None)?;
    let run_id = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .ok_or_else(|| anyhow!("{}: no name", run_dir.display()))?;
    let keep = std::env::var_os("PGCHAOS_KEEP_RUN_DIR").is_some();
    let network = format!("pgchaos-{run_id}");
    let mut servers = DockerServers {
        run_dir: run_dir.clone(),
        run_id: run_id.clone(),
        network: network.clone(),
        pg: None,
        pooler: None,
        replicas: Vec::new(),
        pg_port: 0,
        pooler_port: None,
        pooler_admin_port: None,
        pooler_exe: bouncer.map(|b| b.path.clone()),
        standby: None,
        fenced: Vec::new(),
        standbys_made: 0,
        pg_reference: imgs.postgres.reference.clone(),
        pg_args: Vec::new(),
        topology_name: topology.name.clone(),
        passwords: vec![
            (SUPERUSER.to_string(), super::template::random_password()),
            (CLIENT_ROLE.to_string(), super::template::random_password()),
        ],
        pooler_kind: pooler::for_topology(topology),
        reaper: None,
        down: false,
    };
    // From here on the reaper removes the run's containers and network however we end.
    servers.reaper = Some(Reaper::spawn_with_docker(
        &run_dir,
        keep,
        &run_id,
        &container::docker_program(),
    )?);
    container::docker(&[
        "network",
        "create",
        "--label",
        &format!("{RUN_LABEL}={run_id}"),
        &network,
    ])
    .context("creating the run's network")?;
    servers
        .start_postgres(topology, &imgs.postgres.reference)
        .await?;
    if topology.postgres.standby {
        servers.start_standby().await?;
    }
    if let Some(b) = &imgs.pooler {
        servers.start_pooler(&b.reference).await?;
        let at = servers.console_at().expect("a pooler with a console");
        super::verify_pooler_config(
            servers.pooler_kind.as_ref(),
            &at,
            &topology.name,
            "at launch",
            None,
        )
        .await?;
        let replicas = topology.pooler.as_ref().map_or(1, |p| p.replicas) as usize;
        for k in 1..replicas {
            servers.start_replica(&b.reference, k).await?;
            let at = servers.replica_console_at(servers.replicas[k - 1].1);
            super::verify_pooler_config(
                servers.pooler_kind.as_ref(),
                &at,
                &topology.name,
                &format!("at launch (replica {})", k + 1),
                None,
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
        launcher: "docker",
        pg_bin_dir: pg.bin_dir.clone(),
        run_dir,
        pg_port: servers.pg_port,
        primary_port: std::sync::atomic::AtomicU16::new(servers.pg_port),
        pooler_port: servers.pooler_port,
        pooler_admin_port: servers.pooler_admin_port,
        pooler_container: servers.in_container(),
        pooler_replicas: servers
            .replicas
            .iter()
            .map(|(_, port)| (*port, servers.run_dir.clone()))
            .collect(),
        versions,
        ready_ms: t0.elapsed().as_millis(),
        pinned_cpu: None,
        passwords: servers.passwords.clone(),
        local: false,
        unix_sockets: false,
        servers: tokio::sync::Mutex::new(Box::new(servers)),
        external: None,
    })
}

impl DockerServers {
    fn password(&self, role: &str) -> &str {
        self.passwords
            .iter()
            .find(|(r, _)| r == role)
            .map(|(_, p)| p.as_str())
            .unwrap_or_default()
    }

    /// The pooler's container as its console reaches it: the engine's ids of its container and
    /// PostgreSQL's, its executable here, the run directory.
    fn in_container(&self) -> Option<crate::pooler::InContainer> {
        Some(crate::pooler::InContainer {
            pooler: self.pooler.as_ref()?.id.clone(),
            postgres: self.pg.as_ref().map(|n| n.id.clone()).unwrap_or_default(),
            executable: self.pooler_exe.clone()?,
            dir: self.run_dir.clone(),
        })
    }

    /// The pooler's admin console, over loopback TCP with the superuser's password.
    fn console_at(&self) -> Option<crate::pooler::ConsoleAt> {
        if !self.pooler_kind.has_console() {
            return None;
        }
        Some(crate::pooler::ConsoleAt {
            unix_dir: None,
            host: None,
            pool_user: None,
            port: self.pooler_port?,
            admin_port: self.pooler_admin_port,
            user: SUPERUSER.to_string(),
            password: Some(self.password(SUPERUSER).to_string()),
            container: self.in_container(),
        })
    }

    /// A container of the run: its name, the run's network and label, `ports.1` inside
    /// mapped to `ports.0` on the host, the start bounded.
    fn of_run<I: testcontainers_modules::testcontainers::Image>(
        &self,
        image: impl Into<testcontainers_modules::testcontainers::ContainerRequest<I>>,
        name: &str,
        ports: (u16, u16),
    ) -> testcontainers_modules::testcontainers::ContainerRequest<I> {
        image
            .into()
            .with_container_name(name)
            .with_network(&self.network)
            .with_label(RUN_LABEL, &self.run_id)
            .with_mapped_port(ports.0, ports.1.tcp())
            .with_startup_timeout(READY_TIMEOUT)
    }

    fn name(&self, which: &str) -> String {
        format!("pgchaos-{}-{which}", self.run_id)
    }

    async fn start_postgres(&mut self, t: &Topology, reference: &str) -> Result<()> {
        let (repo, tag) = split_reference(reference)?;
        let port = super::free_port()?;
        let name = self.name("postgres");
        let mut args: Vec<String> = Vec::new();
        for (k, v) in super::template::SPEED_SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(t.postgres.settings.clone())
        {
            args.push("-c".into());
            args.push(format!("{k}={v}"));
        }
        self.pg_args = args.clone();
        let image = Postgres::default()
            .with_password(self.password(SUPERUSER))
            .with_init_sql(super::template::init_sql(t).into_bytes());
        let request = self
            .of_run(
                image
                    .with_name(repo)
                    .with_tag(tag)
                    .with_cmd(args)
                    .with_env_var("CHAOS_PASSWORD", self.password(CLIENT_ROLE)),
                &name,
                (port, 5432),
            )
            .with_host_config_modifier(loopback_only);
        let c = request
            .start()
            .await
            .with_context(|| format!("starting {reference} (container {name})"))?;
        self.pg = Some(Node::of(c, name));
        self.pg_port = port;
        self.wait_ready(Which::Postgres).await
    }

    async fn start_pooler(&mut self, reference: &str) -> Result<()> {
        let (node, port) = self.pooler_container(reference, 0).await?;
        self.pooler = Some(node);
        self.pooler_port = Some(port);
        self.wait_ready(Which::Pooler).await
    }

    /// The pooler's main config file, pointing at the current primary's container, in the
    /// directory mounted into its containers (readable by its server user, nothing secret
    /// in it: the entrypoint writes what holds passwords from the environment).
    fn write_pooler_conf(&self) -> Result<PathBuf> {
        let recipe = self
            .pooler_kind
            .container()
            .ok_or_else(|| anyhow!("{} has no container recipe", self.pooler_kind.name()))?;
        let pg_name = self.pg.as_ref().map(|n| n.name.clone()).unwrap_or_default();
        let no_passwords: Vec<(String, String)> = Vec::new();
        let cx = ConfigContext {
            topology_name: &self.topology_name,
            run_dir: Path::new("/tmp"),
            pg_port: 5432,
            pg_host: Some(&pg_name),
            listen_addr: "0.0.0.0",
            listen_port: recipe.port,
            admin_port: recipe.admin_port,
            standby_port: None,
            database: DB,
            superuser: SUPERUSER,
            passwords: &no_passwords,
        };
        let main = self
            .pooler_kind
            .config_files(&cx)
            .unwrap_or_default()
            .into_iter()
            .find(|f| f.is_main)
            .ok_or_else(|| anyhow!("the pooler has no main config file"))?;
        let conf = self.run_dir.join("pooler-conf");
        fs::create_dir_all(&conf).with_context(|| format!("{}: creating", conf.display()))?;
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o755))?;
        let main_path = conf.join(main.name);
        fs::write(&main_path, &main.text)
            .with_context(|| format!("{}: writing", main_path.display()))?;
        fs::set_permissions(&main_path, fs::Permissions::from_mode(0o644))?;
        Ok(conf)
    }

    /// A streaming standby of the current primary in a container of its own (the image's
    /// entrypoint with `PGCHAOS_ROLE=standby`: a pg_basebackup of the primary, then
    /// streaming), ready when it answers in recovery.
    async fn start_standby(&mut self) -> Result<()> {
        let (repo, tag) = split_reference(&self.pg_reference)?;
        let (repo, tag) = (repo.to_string(), tag.to_string());
        let port = super::free_port()?;
        self.standbys_made += 1;
        let name = match self.standbys_made {
            1 => self.name("standby"),
            n => self.name(&format!("standby-{n}")),
        };
        let primary = self
            .pg
            .as_ref()
            .map(|n| n.name.clone())
            .ok_or_else(|| anyhow!("no primary to copy"))?;
        let request = self
            .of_run(
                GenericImage::new(repo, tag)
                    .with_wait_for(WaitFor::Nothing)
                    .with_cmd(self.pg_args.clone())
                    .with_env_var("POSTGRES_PASSWORD", self.password(SUPERUSER))
                    .with_env_var("PGCHAOS_ROLE", "standby")
                    .with_env_var("PRIMARY_HOST", &primary),
                &name,
                (port, 5432),
            )
            .with_host_config_modifier(loopback_only);
        let c = request
            .start()
            .await
            .with_context(|| format!("starting the standby (container {name})"))?;
        let node = Node::of(c, name.clone());
        let id = node.id.clone();
        self.standby = Some((node, port));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let probe = async {
                let c = connect(&tcp(port, SUPERUSER, self.password(SUPERUSER), DB)).await?;
                simple_first(&c, "SELECT pg_is_in_recovery()").await
            };
            match probe.await {
                Ok(v) if v == "t" => return Ok(()),
                r if Instant::now() > deadline => {
                    let logs =
                        container::docker(&["logs", "--tail", "15", &id]).unwrap_or_default();
                    bail!(
                        "the standby (container {name}) did not answer in recovery within {} s (last: {r:?})\n  last lines of its log:\n{logs}",
                        READY_TIMEOUT.as_secs()
                    );
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Fail over: fence the primary (docker kill: gone before anything else happens, and
    /// kept stopped), promote the standby (`pg_promote`) and wait until it is out of
    /// recovery, then repoint the pooler at it (its config rewritten in the mounted
    /// directory, reloaded on its console) and wait until a client through the pooler lands
    /// on a server out of recovery (the old primary answers nobody).
    async fn fail_over(&mut self) -> Result<()> {
        let (standby, port) = self
            .standby
            .take()
            .ok_or_else(|| anyhow!("no standby in this topology"))?;
        if let Some(old) = self.pg.take() {
            container::docker(&["kill", &old.id]).context("fencing the primary (docker kill)")?;
            self.wait_stopped(&old.id, Duration::from_secs(10));
            self.fenced.push(old);
        }
        let admin = connect(&tcp(port, SUPERUSER, self.password(SUPERUSER), DB))
            .await
            .context("connecting to the standby to promote it")?;
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            admin.simple_query("SELECT pg_promote(true, 55)"),
        )
        .await
        .map_err(|_| anyhow!("pg_promote on the standby gave no answer within 60 s"))?
        .context("pg_promote on the standby")?;
        let promoted = answer.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        if promoted.as_deref() != Some("t") {
            bail!("pg_promote on the standby returned {promoted:?}, not true");
        }
        self.pg = Some(standby);
        self.pg_port = port;
        if self.pooler.is_none() {
            return Ok(());
        }
        self.write_pooler_conf()?;
        let at = self.console_at().expect("a pooler with a console");
        let console = self.pooler_kind.console(&at).await?;
        for cmd in self.pooler_kind.reload_commands() {
            console.command(&cmd).await.with_context(|| {
                format!("{cmd} on the pooler's console to repoint it at the new primary")
            })?;
        }
        let client = tcp(
            self.pooler_port.expect("a pooler port"),
            CLIENT_ROLE,
            self.password(CLIENT_ROLE),
            DB,
        );
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let probe = async {
                let c = connect(&client).await?;
                simple_first(&c, "SELECT pg_is_in_recovery()").await
            };
            let last = match probe.await {
                Ok(v) if v == "f" => return Ok(()),
                Ok(v) => format!("a client landed on a server in recovery ({v})"),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "after the reload, a client through the pooler does not reach the new primary within {} s (last: {last})",
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Start replica `k` (k >= 1) of the pooler in a container of its own.
    async fn start_replica(&mut self, reference: &str, k: usize) -> Result<()> {
        let (node, port) = self.pooler_container(reference, k).await?;
        let name = node.name.clone();
        self.replicas.push((node, port));
        let at = self.replica_console_at(port);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answered = match self.pooler_kind.console(&at).await {
                Ok(c) => c.version().await.map(|_| ()),
                Err(e) => Err(e),
            };
            match answered {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!(
                        "{} replica {} in container {name} did not answer within {} s: {e:#}",
                        self.pooler_kind.name(),
                        k + 1,
                        READY_TIMEOUT.as_secs()
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn replica_console_at(&self, port: u16) -> crate::pooler::ConsoleAt {
        crate::pooler::ConsoleAt {
            unix_dir: None,
            host: None,
            pool_user: None,
            port,
            admin_port: None,
            user: SUPERUSER.to_string(),
            password: Some(self.password(SUPERUSER).to_string()),
            // PgBouncer's replicas (a pooler whose console needs its container has none).
            container: None,
        }
    }

    /// The pooler's container `k` (0: the first), created and started, with its host port.
    async fn pooler_container(&mut self, reference: &str, k: usize) -> Result<(Node, u16)> {
        let (repo, tag) = split_reference(reference)?;
        let port = super::free_port()?;
        let recipe = self
            .pooler_kind
            .container()
            .ok_or_else(|| anyhow!("{} has no container recipe", self.pooler_kind.name()))?;
        let name = match k {
            0 => self.name(self.pooler_kind.name()),
            k => self.name(&format!("{}-{}", self.pooler_kind.name(), k + 1)),
        };
        let conf = self.write_pooler_conf()?;
        let admin = match recipe.admin_port {
            Some(inside) => Some((super::free_port()?, inside)),
            None => None,
        };
        let mut request = self
            .of_run(
                GenericImage::new(repo, tag)
                    .with_wait_for(WaitFor::Nothing)
                    .with_env_var("POSTGRES_PASSWORD", self.password(SUPERUSER))
                    .with_env_var("CHAOS_PASSWORD", self.password(CLIENT_ROLE))
                    .with_mount(Mount::bind_mount(
                        conf.to_string_lossy().to_string(),
                        recipe.config_dir,
                    )),
                &name,
                (port, recipe.port),
            )
            .with_host_config_modifier(pooler_host_config);
        if let Some((host, inside)) = admin {
            request = request.with_mapped_port(host, inside.tcp());
            if k == 0 {
                self.pooler_admin_port = Some(host);
            }
        }
        let c = request
            .start()
            .await
            .with_context(|| format!("starting {reference} (container {name})"))?;
        Ok((Node::of(c, name), port))
    }

    async fn wait_ready(&self, which: Which) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answered = match which {
                Which::Postgres => {
                    let c = tcp(self.pg_port, SUPERUSER, self.password(SUPERUSER), DB);
                    match connect(&c).await {
                        Ok(c) => simple_first(&c, "SELECT 1").await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                }
                Which::Pooler => {
                    let at = self
                        .console_at()
                        .ok_or_else(|| anyhow!("this topology has no pooler"))?;
                    match self.pooler_kind.console(&at).await {
                        Ok(c) => c.version().await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                }
            };
            match answered {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    let node = self.node(which).map(|n| n.id.clone()).unwrap_or_default();
                    let logs =
                        container::docker(&["logs", "--tail", "15", &node]).unwrap_or_default();
                    bail!(
                        "{which:?} in container {node} did not answer within {} s: {e:#}\n  last lines of its log:\n{logs}",
                        READY_TIMEOUT.as_secs()
                    );
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn node(&self, which: Which) -> Option<&Node> {
        match which {
            Which::Postgres => self.pg.as_ref(),
            Which::Pooler => self.pooler.as_ref(),
        }
    }

    fn id(&self, which: Which) -> Result<String> {
        self.node(which)
            .map(|n| n.id.clone())
            .ok_or_else(|| anyhow!("no {which:?} container in this run"))
    }

    async fn read_versions(&self, v: &mut Versions) -> Result<()> {
        let pg = tcp(self.pg_port, SUPERUSER, self.password(SUPERUSER), DB);
        super::read_versions(
            &pg,
            self.pooler_kind.as_ref(),
            self.console_at().as_ref(),
            v,
        )
        .await
    }

    fn write_credentials(&self) -> Result<()> {
        let ports: Vec<u16> = std::iter::once(self.pg_port)
            .chain(self.pooler_port)
            .collect();
        let text = super::credentials(
            "this run's logins over loopback TCP (containers; ports published on 127.0.0.1)",
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

    /// Wait until the container has stopped (`docker wait`); false after `within`.
    fn wait_stopped(&self, id: &str, within: Duration) -> bool {
        container::run(&container::docker_program(), &["wait", id], None, within).is_ok()
    }
}

/// Publish every port on 127.0.0.1 only (testcontainers binds all interfaces otherwise).
fn loopback_only(h: &mut testcontainers_modules::testcontainers::bollard::models::HostConfig) {
    if let Some(bindings) = h.port_bindings.as_mut() {
        for list in bindings.values_mut().flatten() {
            for b in list.iter_mut() {
                b.host_ip = Some("127.0.0.1".to_string());
            }
        }
    }
}

/// PgBouncer's container: loopback ports, and NET_ADMIN in its bounding set so that nft,
/// exec'd as root, can cut its host off (`partition`; this engine refuses `exec
/// --privileged`: "unable to apply caps"). PgBouncer itself runs as its own user, without it.
fn pooler_host_config(h: &mut testcontainers_modules::testcontainers::bollard::models::HostConfig) {
    loopback_only(h);
    h.cap_add
        .get_or_insert_with(Vec::new)
        .push("NET_ADMIN".to_string());
}

impl Servers for DockerServers {
    fn processes(&mut self) -> Option<&mut dyn Processes> {
        Some(self)
    }

    fn backends(&mut self) -> Option<&mut dyn BackendSignals> {
        Some(self)
    }

    fn failover(&mut self) -> Option<&mut dyn Failover> {
        Some(self)
    }

    fn partitions(&mut self) -> Option<&mut dyn Partitions> {
        Some(self)
    }

    fn pids(&self) -> (Option<i32>, Option<i32>) {
        (None, None)
    }

    fn local(&self) -> bool {
        false
    }

    fn check_alive(&mut self) -> Result<()> {
        for which in [Which::Postgres, Which::Pooler] {
            let Some(n) = self.node(which) else { continue };
            let state = container::docker(&[
                "inspect",
                "--format",
                "{{.State.Running}} {{.State.ExitCode}}",
                &n.id,
            ])?;
            if !state.trim().starts_with("true") {
                let logs = container::docker(&["logs", "--tail", "15", &n.id]).unwrap_or_default();
                bail!(
                    "{which:?} (container {}) died: {}\n  last lines of its log:\n{logs}",
                    n.name,
                    state.trim()
                );
            }
        }
        Ok(())
    }

    fn save_logs(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).with_context(|| format!("{}: creating", dir.display()))?;
        // One container's `docker logs` (stdout, then stderr) into `file`.
        let save = |id: &str, file: &str| -> Result<()> {
            let out = std::process::Command::new(container::docker_program())
                .args(["logs", id])
                .output()
                .with_context(|| format!("docker logs {id}"))?;
            let mut text = out.stdout;
            text.extend_from_slice(&out.stderr);
            fs::write(dir.join(file), text)
                .with_context(|| format!("{}: writing", dir.join(file).display()))
        };
        for (which, file) in [
            (Which::Postgres, "postgres.log"),
            (Which::Pooler, self.pooler_kind.log_file()),
        ] {
            if let Some(n) = self.node(which) {
                save(&n.id, file)?;
            }
        }
        for (k, (n, _)) in self.replicas.iter().enumerate() {
            save(
                &n.id,
                &format!("replica-{}-{}", k + 2, self.pooler_kind.log_file()),
            )?;
        }
        Ok(())
    }

    fn shutdown(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        let ids: Vec<String> = [self.pg.as_ref(), self.pooler.as_ref()]
            .into_iter()
            .flatten()
            .chain(self.replicas.iter().map(|(n, _)| n))
            .chain(self.standby.iter().map(|(n, _)| n))
            .chain(self.fenced.iter())
            .map(|n| n.id.clone())
            .collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids.iter().map(String::as_str));
            let _ = container::docker(&args);
        }
        let _ = container::docker(&["network", "rm", &self.network]);
        for n in [self.pg.as_mut(), self.pooler.as_mut()]
            .into_iter()
            .flatten()
            .chain(self.replicas.iter_mut().map(|(n, _)| n))
            .chain(self.standby.iter_mut().map(|(n, _)| n))
            .chain(self.fenced.iter_mut())
        {
            if let Some(h) = n.handle.take() {
                // Removed above; testcontainers' drop would ask the engine again from a
                // runtime that may no longer exist.
                std::mem::forget(h);
            }
        }
        if let Some(mut r) = self.reaper.take() {
            r.finish();
        }
        let keep = std::env::var_os("PGCHAOS_KEEP_RUN_DIR").is_some();
        if !keep {
            let _ = fs::remove_dir_all(&self.run_dir);
        }
    }
}

impl Processes for DockerServers {
    fn control(&mut self, which: Which, what: Control) -> Result<()> {
        let id = self.id(which)?;
        match what {
            Control::Stop => {
                container::docker(&["stop", "-t", "5", &id])?;
            }
            Control::Kill => {
                container::docker(&["kill", &id])?;
                self.wait_stopped(&id, Duration::from_secs(10));
            }
            Control::Pause => {
                container::docker(&["pause", &id])?;
            }
            Control::Resume => {
                container::docker(&["unpause", &id])?;
            }
            Control::Interrupt => {
                container::docker(&["kill", "--signal", "INT", &id])?;
                if !self.wait_stopped(&id, Duration::from_secs(5)) {
                    container::docker(&["kill", &id])?;
                    self.wait_stopped(&id, Duration::from_secs(10));
                }
            }
        }
        Ok(())
    }

    fn restart(&mut self, which: Which) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let id = self.id(which)?;
            let running = container::docker(&["inspect", "--format", "{{.State.Running}}", &id])?;
            if running.trim() == "true" {
                // As native: PostgreSQL immediate shutdown (SIGQUIT), PgBouncer SIGINT.
                let sig = match which {
                    Which::Postgres => "QUIT",
                    Which::Pooler => "INT",
                };
                container::docker(&["kill", "--signal", sig, &id])?;
                if !self.wait_stopped(&id, Duration::from_secs(5)) {
                    container::docker(&["kill", &id])?;
                    self.wait_stopped(&id, Duration::from_secs(10));
                }
            }
            container::docker(&["start", &id])?;
            self.wait_ready(which).await
        })
    }
}

impl BackendSignals for DockerServers {
    fn signal_backend(&mut self, pid: i32, sig: i32) -> Result<bool> {
        // The pid PostgreSQL reports is the container's own; dash's kill builtin, run as
        // the server user, signals it inside the container.
        let id = self.id(Which::Postgres)?;
        let name = match sig {
            libc::SIGKILL => "KILL",
            libc::SIGSTOP => "STOP",
            libc::SIGCONT => "CONT",
            libc::SIGTERM => "TERM",
            libc::SIGINT => "INT",
            other => bail!("signal {other} to a backend in a container is not supported"),
        };
        let script = format!("kill -{name} {pid}");
        Ok(container::docker(&["exec", &id, "/bin/sh", "-c", &script]).is_ok())
    }
}

impl Failover for DockerServers {
    fn primary_port(&self) -> u16 {
        self.pg_port
    }

    fn promote(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.fail_over())
    }

    fn rebuild_standby(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.standby.is_some() {
                return Ok(());
            }
            self.start_standby().await
        })
    }
}

impl Partitions for DockerServers {
    fn partition(&mut self, peer: Option<Peer>) -> Result<()> {
        // nftables in PgBouncer's network namespace (the image carries the machine's nft,
        // run as root with the container's NET_ADMIN): a table of two chains dropping
        // every packet to and from the peer. Loopback inside the container stays up.
        let pooler = self.id(Which::Pooler)?;
        let Some(peer) = peer else {
            container::docker(&[
                "exec", "--user", "0", &pooler, NFT, "delete", "table", "inet", CUT_TABLE,
            ])
            .context("healing the partition")?;
            return Ok(());
        };
        let pg = self.id(Which::Postgres)?;
        let ip = container::docker(&[
            "inspect",
            "--format",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &pg,
        ])?;
        let ip = ip.trim();
        if ip.parse::<std::net::Ipv4Addr>().is_err() {
            bail!("PostgreSQL's container has no single IPv4 address on the run's network: {ip:?}");
        }
        let (inbound, outbound) = match peer {
            Peer::Postgres => (format!("ip saddr {ip}"), format!("ip daddr {ip}")),
            Peer::Clients => (
                format!("iifname != \"lo\" ip saddr != {ip}"),
                format!("oifname != \"lo\" ip daddr != {ip}"),
            ),
        };
        let t = CUT_TABLE;
        let rules = format!(
            "add table inet {t}; \
             add chain inet {t} inbound {{ type filter hook input priority 0 ; }} ; \
             add rule inet {t} inbound {inbound} drop; \
             add chain inet {t} outbound {{ type filter hook output priority 0 ; }} ; \
             add rule inet {t} outbound {outbound} drop"
        );
        container::docker(&["exec", "--user", "0", &pooler, NFT, &rules])
            .context("cutting PgBouncer's host off (nft in its network namespace)")?;
        Ok(())
    }
}

impl Drop for DockerServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
