//! `pgchaos up TOPOLOGY`: start a topology, print versions and endpoints (with this run's
//! passwords), stay up until Ctrl-C / SIGTERM / SIGHUP (or check health and stop, `--once`).

use super::{Exit, load};
use crate::launch::{self, LaunchOptions};
use crate::run::Runner;
use anyhow::Result;
use serde_json::json;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    topology: String,
    /// Check health and tear down at once.
    #[arg(long)]
    once: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[arg(long)]
    strict_versions: bool,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
    /// Start the servers with this launcher instead of the topology's (`native`, `docker`, `external`).
    #[arg(long, value_parser = super::parse_launcher)]
    launcher: Option<crate::topology::LauncherKind>,
}

pub async fn up(a: Args) -> Result<Exit> {
    let topo = load(&a.topology)?;
    if a.launcher.unwrap_or(topo.launcher) == crate::topology::LauncherKind::External {
        anyhow::bail!(
            "{}: `up` starts servers, and launcher external has none to start (run `chaos` or `matrix` against the deployment)",
            topo.source.display()
        );
    }
    // Never pinned: `up`'s servers serve other programs.
    let mut cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            launcher: a.launcher,
            ..Default::default()
        },
    )
    .await?;
    let runner = Runner::new(&cluster).await?; // health: observer, contender, nemesis, console
    runner.observer.reset().await?;
    drop(runner);
    let v = &cluster.versions;
    let (pg_pid, pooler_pid) = cluster.pids();
    let credentials = cluster.run_dir.join("credentials.txt");
    let doc = json!({
        "topology": cluster.topology.name,
        "launcher": cluster.launcher,
        "postgres": {"version": v.postgres, "declared_version": v.postgres_declared, "full_version": v.postgres_full, "dsn": cluster.direct_dsn(), "port": cluster.pg_port, "pid": pg_pid},
        "pooler": cluster.topology.pooler.as_ref().map(|p| json!({
            "kind": p.kind,
            "version": v.pooler, "declared_version": v.pooler_declared,
            "built_from": v.pooler_built_from, "tarball_sha256": v.pooler_tarball_sha256,
            "pool_mode": cluster.pool_mode().map(|m| m.as_str()),
            "dsn": cluster.client_dsn(), "admin_dsn": cluster.admin_dsn(), "port": cluster.pooler_port, "pid": pooler_pid,
            "replica_dsns": cluster.replica_dsns(),
        })),
        "client_dsn": cluster.client_dsn(),
        "credentials_file": credentials,
        "run_dir": cluster.run_dir,
        "version_drift": v.version_drift,
        "ready_ms": cluster.ready_ms,
    });
    if a.json {
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        println!("topology   {}", cluster.topology.name);
        println!(
            "postgres   {} (declared {})  {}",
            v.postgres,
            v.postgres_declared,
            cluster.direct_dsn()
        );
        if let Some(b) = &v.pooler {
            println!(
                "{:<10} {} (declared {})  pool_mode={}  {}",
                cluster.pooler.name(),
                b,
                v.pooler_declared.clone().unwrap_or_default(),
                cluster.pool_mode().map(|m| m.as_str()).unwrap_or(""),
                cluster.client_dsn()
            );
            println!("admin      {}", cluster.admin_dsn().unwrap_or_default());
            for (k, dsn) in cluster.replica_dsns().iter().enumerate() {
                println!("replica {}  {dsn}", k + 2);
            }
        }
        for d in &v.version_drift {
            println!("DRIFT      {d}");
        }
        println!(
            "logins     {} (mode 0600; TCP needs the password, the Unix sockets in {} do not)",
            credentials.display(),
            cluster.run_dir.display()
        );
        println!("ready in   {} ms", cluster.ready_ms);
    }
    if !a.once {
        if !a.json {
            println!("up; Ctrl-C to stop");
        }
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.check_alive()?;
        }
    }
    cluster.shutdown();
    Ok(Exit::Ok)
}
