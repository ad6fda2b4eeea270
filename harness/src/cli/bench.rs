//! `pgchaos bench TOPOLOGY`: the concurrent workers' op rate beside pgbench's, in one run on
//! one set of servers. Three arms run the same op mix (a try-lock, then unlock-all: the
//! workers' own SQL, identity columns and all) at the same client count through the same
//! pooler: the workers with observation off, the workers with the concurrent sampler on
//! (`run.sample_every`), and `pgbench` from the same PostgreSQL build. Arms alternate round
//! by round (pgbench, off, sampling, pgbench, ...) so the machine's drift hits all three
//! alike; the medians and their ratios are printed and written to `OUT/bench/`.

use super::{Exit, load};
use crate::launch::{self, Cluster, LaunchOptions};
use crate::observe::Observer;
use crate::report;
use crate::sql;
use crate::vocab::{Key, Op};
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_postgres::config::Host;

#[derive(clap::Args)]
pub struct Args {
    topology: String,
    /// Concurrent clients in every arm (default: the topology's `workload.clients`).
    #[arg(long)]
    clients: Option<u32>,
    /// Seconds each arm runs per round.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds of the three arms; the report gives each arm's median.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Where `bench/TOPOLOGY-STAMP.json` is written.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    #[arg(long)]
    strict_versions: bool,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
}

/// One arm's rounds: op pairs (try-lock + unlock-all) per second.
#[derive(Serialize)]
struct Arm {
    name: &'static str,
    rates: Vec<f64>,
    median: f64,
}

#[derive(Serialize)]
struct BenchReport {
    topology: String,
    postgres: String,
    pgbouncer: Option<String>,
    pool_mode: Option<&'static str>,
    clients: u32,
    seconds: u64,
    rounds: u32,
    sample_every_ms: u128,
    /// Samples the sampler took per second in the sampling arm (median round).
    samples_per_s: f64,
    sql: Vec<String>,
    arms: Vec<Arm>,
    ratio_off_vs_pgbench: f64,
    ratio_sampling_vs_pgbench: f64,
}

pub async fn bench(a: Args) -> Result<Exit> {
    let topo = load(&a.topology)?;
    if a.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if topo.app_pool.is_some() {
        bail!(
            "{}: bench measures clients of the pooler (or of PostgreSQL); this topology routes them through an application pool (app_pool), which pgbench cannot",
            topo.source.display()
        );
    }
    if topo.launcher == crate::topology::LauncherKind::External {
        bail!(
            "{}: bench compares with pgbench on servers it starts; launcher external has none (and a staging deployment is no place for a load test pgchaos did not agree with its owners)",
            topo.source.display()
        );
    }
    let clients = a.clients.unwrap_or(topo.workload.clients);
    if clients == 0 {
        bail!("--clients must be at least 1");
    }
    let key = *topo
        .workload
        .keys
        .first()
        .ok_or_else(|| anyhow!("{}: workload.keys is empty", topo.source.display()))?;
    // The output directory first: a bad --out fails before anything starts.
    let dir = a.out.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("{}: creating", dir.display()))?;
    let mut cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            ..Default::default()
        },
    )
    .await?;
    let result = measure(&cluster, &a, clients, key).await;
    cluster.shutdown();
    let report = result?;
    let path = dir.join(format!("{}-{}.json", topo.name, report::utc_stamp()));
    let tmp = path.with_extension("json.tmp");
    let written = std::fs::write(&tmp, serde_json::to_string_pretty(&report)?)
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("{}: writing", path.display()));
    }
    println!("{}", table(&report));
    println!(
        "observation off / pgbench = {:.2}; sampling on / pgbench = {:.2}; sampler {:.0} looks/s",
        report.ratio_off_vs_pgbench, report.ratio_sampling_vs_pgbench, report.samples_per_s
    );
    println!("written: {}", path.display());
    Ok(Exit::Ok)
}

async fn measure(cluster: &Cluster, a: &Args, clients: u32, key: Key) -> Result<BenchReport> {
    let sql = vec![
        sql::op_sql(Op::TryLock, Some(key), 0).expect("SQL"),
        sql::op_sql(Op::UnlockAll, None, 0).expect("SQL"),
    ];
    let script = cluster.run_dir.join("bench.sql");
    std::fs::write(&script, format!("{};\n{};\n", sql[0], sql[1]))
        .with_context(|| format!("{}: writing", script.display()))?;
    let observer = Observer::connect(cluster).await?;
    let every = cluster.topology.run.sample_every;
    let dur = Duration::from_secs(a.seconds);
    let (mut pgb, mut off, mut on, mut looks) = (vec![], vec![], vec![], vec![]);
    for round in 1..=a.rounds {
        pgb.push(pgbench(cluster, &script, clients, a.seconds).await?);
        off.push(workers(cluster, clients, dur, &sql, None).await?.0);
        let (rate, samples) =
            workers(cluster, clients, dur, &sql, Some((&observer, every))).await?;
        on.push(rate);
        looks.push(samples);
        eprintln!(
            "pgchaos bench: round {round}/{}: pgbench {:.0}/s, off {:.0}/s, sampling {:.0}/s",
            a.rounds,
            pgb.last().unwrap(),
            off.last().unwrap(),
            on.last().unwrap()
        );
    }
    let arm = |name, rates: Vec<f64>| Arm {
        name,
        median: median(&rates),
        rates,
    };
    let arms = vec![
        arm("pgbench", pgb),
        arm("workers, observation off", off),
        arm("workers, sampling on", on),
    ];
    let v = &cluster.versions;
    Ok(BenchReport {
        topology: cluster.topology.name.clone(),
        postgres: v.postgres.clone(),
        pgbouncer: v.pooler.clone(),
        pool_mode: cluster.pool_mode().map(|m| m.as_str()),
        clients,
        seconds: a.seconds,
        rounds: a.rounds,
        sample_every_ms: every.as_millis(),
        samples_per_s: median(&looks),
        ratio_off_vs_pgbench: arms[1].median / arms[0].median,
        ratio_sampling_vs_pgbench: arms[2].median / arms[0].median,
        sql,
        arms,
    })
}

/// The workers: one connection per client, try-lock then unlock-all until the time is up;
/// with `sampler`, the concurrent schedule's sampler beside them. Returns op pairs per
/// second and samples per second.
///
/// The clients run as pgbench's do: `threads` OS threads (pgbench's `-j`: the CPUs, at most
/// one per client), each driving its share of the clients on a current-thread runtime of its
/// own, so a client's task and its connection's protocol task wake each other on one thread
/// (a multi-threaded runtime moved them between threads: 0.77 of pgbench on direct, against
/// this layout's figure in the README). The servers stay where they were spawned (this
/// process's main thread, to which their parent-death signal is tied), and the sampler stays
/// on the main runtime with the observer's connection.
async fn workers(
    cluster: &Cluster,
    clients: u32,
    dur: Duration,
    sql: &[String],
    sampler: Option<(&Observer, Duration)>,
) -> Result<(f64, f64)> {
    let config = cluster.client_config();
    let sql = std::sync::Arc::new(sql.to_vec());
    let threads = client_threads(clients);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-clients".into())
        .spawn(move || {
            // Every thread connects its clients, then all start together.
            let ready = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
            let mut handles = Vec::new();
            for t in 0..threads {
                let share =
                    clients / threads as u32 + u32::from((t as u32) < clients % threads as u32);
                let (config, sql, ready) = (config.clone(), sql.clone(), ready.clone());
                let h = std::thread::Builder::new()
                    .name(format!("bench-client-{t}"))
                    .spawn(move || -> Result<u64> {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .context("starting a client thread's runtime")?;
                        rt.block_on(async move {
                            let mut conns = vec![];
                            let mut failed = None;
                            for _ in 0..share {
                                match launch::connect(&config).await {
                                    Ok(c) => conns.push(std::rc::Rc::new(c)),
                                    Err(e) => {
                                        failed = Some(e);
                                        break;
                                    }
                                }
                            }
                            ready.wait();
                            if let Some(e) = failed {
                                return Err(e);
                            }
                            let end = Instant::now() + dur;
                            let local = tokio::task::LocalSet::new();
                            local
                                .run_until(async move {
                                    let loops: Vec<_> = conns
                                        .into_iter()
                                        .map(|c| {
                                            let sql = sql.clone();
                                            tokio::task::spawn_local(async move {
                                                let mut pairs = 0u64;
                                                while Instant::now() < end {
                                                    for s in sql.iter() {
                                                        launch::timed(c.simple_query(s)).await?;
                                                    }
                                                    pairs += 1;
                                                }
                                                Ok::<_, anyhow::Error>(pairs)
                                            })
                                        })
                                        .collect();
                                    let mut pairs = 0;
                                    for l in loops {
                                        pairs += l
                                            .await
                                            .context("bench worker panicked")?
                                            .context("bench worker")?;
                                    }
                                    Ok(pairs)
                                })
                                .await
                        })
                    });
                match h {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        let _ = tx.send(Err(anyhow!("starting a client thread: {e}")));
                        return;
                    }
                }
            }
            ready.wait();
            let start = Instant::now();
            let _ = started_tx.send(start + dur);
            let mut pairs = 0u64;
            let mut first_err = None;
            for h in handles {
                match h.join() {
                    Ok(Ok(n)) => pairs += n,
                    Ok(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    Err(_) => {
                        first_err.get_or_insert(anyhow!("a bench client thread panicked"));
                    }
                }
            }
            let _ = tx.send(match first_err {
                Some(e) => Err(e),
                None => Ok(pairs as f64 / start.elapsed().as_secs_f64()),
            });
        })
        .context("starting the clients' thread")?;
    let sampling = async {
        let mut n = 0u64;
        if let Some((obs, every)) = sampler {
            // From the clients' start to their end.
            let Ok(end) = started_rx.await else {
                return Ok((0, Duration::ZERO));
            };
            let t = Instant::now();
            while Instant::now() < end {
                obs.sample(false).await?;
                n += 1;
                tokio::time::sleep(every).await;
            }
            return Ok((n, t.elapsed()));
        }
        Ok::<_, anyhow::Error>((n, Duration::ZERO))
    };
    let (done, samples) = tokio::join!(rx, sampling);
    let rate = done.map_err(|_| anyhow!("the clients' thread ended without a result"))??;
    let (n, secs) = samples?;
    let per_s = if secs.is_zero() {
        0.0
    } else {
        n as f64 / secs.as_secs_f64()
    };
    Ok((rate, per_s))
}

/// Client threads: as pgbench's `-j` here, the CPUs, at most one per client.
fn client_threads(clients: u32) -> usize {
    clients.min(
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    ) as usize
}

/// pgbench with the same statements (one transaction = the two statements), the same
/// client count, through the same socket; its `tps` (without initial connection time).
async fn pgbench(
    cluster: &Cluster,
    script: &std::path::Path,
    clients: u32,
    seconds: u64,
) -> Result<f64> {
    let exe = cluster.pg_bin_dir.join("pgbench");
    if !exe.is_file() {
        bail!(
            "{}: not found (pgbench ships with the PostgreSQL binaries)",
            exe.display()
        );
    }
    let config = cluster.client_config();
    let host = match config.get_hosts().first() {
        Some(Host::Unix(p)) => p.display().to_string(),
        Some(Host::Tcp(h)) => h.clone(),
        None => bail!("the client connection has no host"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let threads = client_threads(clients);
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.args(["-n", "-f"])
        .arg(script)
        .args(["-c", &clients.to_string(), "-j", &threads.to_string()])
        .args(["-T", &seconds.to_string()])
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-U",
            cluster.client_role(),
        ])
        .arg(config.get_dbname().unwrap_or(launch::DB))
        .env("PGCONNECT_TIMEOUT", "10")
        .kill_on_drop(true);
    if let Some(pw) = cluster.password(cluster.client_role()) {
        cmd.env("PGPASSWORD", pw);
    }
    let out = tokio::time::timeout(Duration::from_secs(seconds + 30), cmd.output())
        .await
        .map_err(|_| anyhow!("{} did not finish within {}s", exe.display(), seconds + 30))?
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_tps(&stdout).ok_or_else(|| anyhow!("no `tps = ` line in pgbench's output:\n{stdout}"))
}

/// `tps = 14936.588 (without initial connection time)` -> 14936.588.
fn parse_tps(out: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn table(r: &BenchReport) -> String {
    #[derive(tabled::Tabled)]
    struct Row {
        arm: &'static str,
        #[tabled(rename = "median op pairs/s")]
        median: String,
        rounds: String,
        #[tabled(rename = "vs pgbench")]
        ratio: String,
    }
    let base = r.arms[0].median;
    let rows: Vec<Row> = r
        .arms
        .iter()
        .map(|a| Row {
            arm: a.name,
            median: format!("{:.0}", a.median),
            rounds: a
                .rates
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            ratio: format!("{:.2}", a.median / base),
        })
        .collect();
    format!(
        "{} ({}), {} clients, {} x {} s per arm\n{}",
        r.topology,
        match (&r.pgbouncer, r.pool_mode) {
            (Some(b), Some(m)) => format!("PostgreSQL {} + PgBouncer {b}, {m} mode", r.postgres),
            _ => format!("PostgreSQL {}, direct", r.postgres),
        },
        r.clients,
        r.rounds,
        r.seconds,
        tabled::Table::new(rows).with(tabled::settings::Style::sharp())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_tps_and_medians() {
        let out = "pgbench (18.6)\ntransaction type: bench.sql\nnumber of clients: 4\n\
                   latency average = 0.267 ms\ninitial connection time = 3.412 ms\n\
                   tps = 14936.588123 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(14936.588123));
        assert_eq!(parse_tps("no rate here"), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
