//! `pgchaos run TOPOLOGY --replicas N [--rounds R] [--out DIR] -- COMMAND [ARGS...]`: the
//! user's own command, N copies at once, through the topology's pooler with the wire tap in
//! front of it, R rounds each on a fresh copy of the database; the tap's record, the
//! observer's looks beside it, and each replica's output and exit in the run directory
//! (`DIR/<topology>/<UTC stamp>/`: `results.json`, `tap.jsonl.gz`, `replicas/r<R>/<N>.stdout`
//! and `.stderr`, `topology.yaml`, `logs/`). docs/tap.md is its chapter.
//!
//! Files: `replica.rs` (starting, waiting for and ending the replicas), `rounds.rs` (the
//! rounds' databases), `summary.rs` (what the record says per replica). Exit codes: 0 every
//! replica of every round ran to its end (whatever its exit code: losing a race is data),
//! 1 a replica ran into trouble (its deadline, a refusal by the tap, an end without ever
//! connecting), 2 the command cannot start or the environment fails (as for every command).

mod replica;
mod rounds;
mod summary;

use super::{Exit, load, parse_duration};
use crate::launch::{self, Cluster, LaunchOptions};
use crate::observe::Observer;
use crate::report::RunDir;
use crate::tap::record::{self, Body, RecordWriter, Recorder};
use crate::tap::{Tap, TapOptions, extract};
use anyhow::{Context, Result, anyhow, bail};
use replica::{Replicas, Spec, Target};
use serde_json::json;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use summary::RoundEnds;

#[derive(clap::Args)]
pub struct Args {
    topology: String,
    /// How many copies of the command run at once.
    #[arg(long)]
    replicas: u32,
    /// How many times the race runs, each round on a fresh copy of the database.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Report root: the run goes to DIR/<topology>/<UTC stamp>/.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Replica k of N starts (k-1)/(N-1) of this after its round begins (evenly spread).
    #[arg(long, default_value = "100ms")]
    spread: String,
    /// Every replica of a round must have ended this long after the round began; one still
    /// running then gets SIGTERM on its process group, SIGKILL 2 s later.
    #[arg(long, default_value = "120s")]
    deadline: String,
    /// How often the observer looks at the servers while replicas run.
    #[arg(long, default_value = "50ms")]
    look_every: String,
    /// Start the servers with this launcher instead of the topology's (`native`, `docker`).
    #[arg(long, value_parser = super::parse_launcher)]
    launcher: Option<crate::topology::LauncherKind>,
    #[arg(long)]
    strict_versions: bool,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
    /// Give the replicas the pooler itself instead of the tap (only the looks are recorded):
    /// what the tap costs, measured.
    #[arg(long)]
    no_tap: bool,
    /// The command and its arguments, after `--` (run as given, no shell; `{dsn}` and the
    /// other placeholders of docs/tap.md substituted in the arguments).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// The run's settings, checked.
struct Plan {
    program: PathBuf,
    args: Vec<OsString>,
    replicas: u32,
    rounds: u32,
    spread: Duration,
    deadline: Duration,
    look_every: Duration,
}

fn plan(a: &Args) -> Result<Plan> {
    if a.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let spread = match a.spread.trim() {
        "0" | "0ms" | "0s" => Duration::ZERO,
        s => parse_duration(s).context("--spread")?,
    };
    let first = a.command[0]
        .to_str()
        .ok_or_else(|| anyhow!("the command {:?} is not UTF-8", a.command[0]))?;
    Ok(Plan {
        program: replica::resolve(first)?,
        args: a.command[1..].to_vec(),
        replicas: a.replicas,
        rounds: a.rounds,
        spread,
        deadline: parse_duration(&a.deadline).context("--deadline")?,
        look_every: parse_duration(&a.look_every).context("--look-every")?,
    })
}

pub async fn run(a: Args) -> Result<Exit> {
    let p = plan(&a)?;
    let topo = load(&a.topology)?;
    if a.launcher.unwrap_or(topo.launcher) == crate::topology::LauncherKind::External {
        bail!(
            "{}: `run` makes a database per round on servers it starts; launcher external has none of its own",
            topo.source.display()
        );
    }
    let run_dir = RunDir::create_stamped(&a.out, &topo.name)?;
    std::fs::write(run_dir.path().join("topology.yaml"), &topo.text)
        .context("writing topology.yaml")?;
    let mut cluster = launch::launch(
        &topo,
        LaunchOptions {
            strict_versions: a.strict_versions,
            launcher: a.launcher,
            ..Default::default()
        },
    )
    .await?;
    let upstream = cluster.pooler_port.unwrap_or(cluster.pg_port_now());
    let password = cluster
        .password(launch::CLIENT_ROLE)
        .ok_or_else(|| anyhow!("the cluster has no password for {}", launch::CLIENT_ROLE))?
        .to_string();
    let record_path = run_dir.path().join(record::FILE);
    let (writer, rec) = RecordWriter::create(&record_path)?;
    let candidates: crate::tap::Candidates = Default::default();
    let tap = if a.no_tap {
        rec.emit(Body::Begin {
            format: record::FORMAT,
            listen: String::new(),
            upstream: format!("127.0.0.1:{upstream}"),
        });
        None
    } else {
        Some(Tap::start(
            TapOptions {
                upstream: SocketAddr::from((Ipv4Addr::LOCALHOST, upstream)),
                owners: Some(candidates.clone()),
            },
            rec.clone(),
        )?)
    };
    eprintln!(
        "pgchaos: {} ready in {} ms; {} replicas x {} rounds of {}; {}",
        topo.name,
        cluster.ready_ms,
        p.replicas,
        p.rounds,
        p.program.display(),
        match &tap {
            Some(t) => format!(
                "tap on 127.0.0.1:{} in front of 127.0.0.1:{upstream}",
                t.port()
            ),
            None => format!("no tap: replicas connect to 127.0.0.1:{upstream}"),
        }
    );
    let port = tap.as_ref().map_or(upstream, Tap::port);
    let ends = rounds(
        &cluster,
        &p,
        &rec,
        port,
        &password,
        run_dir.path(),
        &candidates,
    )
    .await?;
    let lanes = tap.map(Tap::stop).unwrap_or(0);
    drop(rec);
    let events = writer.finish()?;
    let items = extract::extract(&record::read(&record_path)?);
    let mut sum = summary::summarize(&items, &ends, p.deadline.as_secs_f64());
    if a.no_tap {
        // Nothing was recorded of the clients: no verdict on whether they connected.
        sum.errors.retain(|e| !e.contains("without connecting"));
        for r in &mut sum.replicas {
            r.error = r.error.take().filter(|e| !e.contains("without connecting"));
        }
    }
    let results = json!({
        "kind": "run",
        "topology": topo.name,
        "command": a.command.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>(),
        "replicas": p.replicas,
        "rounds": p.rounds,
        "spread_ms": p.spread.as_millis() as u64,
        "deadline_ms": p.deadline.as_millis() as u64,
        "look_every_ms": p.look_every.as_millis() as u64,
        "versions": cluster.versions,
        "pool_mode": cluster.pool_mode().map(|m| m.as_str()),
        "tap": if a.no_tap { json!(null) } else { json!({"record": record::FILE, "events": events, "lanes": lanes}) },
        "ran": ends.iter().map(|r| json!({"round": r.round, "database": rounds::database(r.round), "replicas": r.ends})).collect::<Vec<_>>(),
        "summary": sum,
        "errors": sum.errors,
    });
    std::fs::write(
        run_dir.path().join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )
    .context("writing results.json")?;
    cluster.save_logs(&run_dir.path().join("logs"))?;
    let dir = run_dir.commit()?;
    print_summary(&ends, &sum);
    println!("run: {}", dir.display());
    cluster.shutdown();
    Ok(if sum.errors.is_empty() {
        Exit::Ok
    } else {
        Exit::Mismatch
    })
}

/// Every round: a fresh database, the replicas with the observer looking, the database
/// dropped. The template is taken before the first and dropped after the last.
async fn rounds(
    cluster: &Cluster,
    p: &Plan,
    rec: &Recorder,
    port: u16,
    password: &str,
    dir: &Path,
    candidates: &crate::tap::Candidates,
) -> Result<Vec<RoundEnds>> {
    let mut dbs = rounds::Databases::open(cluster).await?;
    dbs.take_template().await?;
    // The reaper's own directory (it removes it); the replicas' groups are what it watches.
    let scratch = crate::launch::runtime::make_run_dir(None)?;
    let mut reaper = crate::launch::reaper::Reaper::spawn(&scratch, false)?;
    let mut out = Vec::new();
    for r in 1..=p.rounds {
        let db = dbs.create(r, &cluster.topology.postgres.settings).await?;
        rec.emit(Body::Round {
            round: r,
            database: db.clone(),
            end: false,
        });
        let observer = Observer::connect_to(cluster, &db).await?;
        let target = Target {
            host: "127.0.0.1".into(),
            port,
            user: launch::CLIENT_ROLE.into(),
            password: password.to_string(),
            database: db.clone(),
        };
        let rel = format!("replicas/r{r}");
        let out_dir = dir.join(&rel);
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("creating {}", out_dir.display()))?;
        let spec = Spec {
            program: &p.program,
            args: &p.args,
            target: &target,
            round: r,
            out_dir: &out_dir,
            rel: &rel,
        };
        let t0 = rec.now().0;
        let ends = one_round(p, &spec, &observer, rec, &mut reaper, candidates).await?;
        let t1 = rec.now().0;
        for e in &ends {
            rec.emit(Body::Replica {
                round: r,
                replica: e.replica,
                pgid: e.pgid,
                exit: Some(match (e.code, e.signal) {
                    (Some(c), _) => format!("code {c}"),
                    (_, Some(s)) => format!("signal {s}"),
                    _ => "unknown".into(),
                }),
            });
        }
        drop(observer);
        rec.emit(Body::Round {
            round: r,
            database: db,
            end: true,
        });
        dbs.drop_round(r).await?;
        out.push(RoundEnds {
            round: r,
            ends,
            t0,
            t1,
        });
    }
    dbs.finish().await?;
    reaper.finish();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(out)
}

/// One round: the replicas started over the spread, the observer looking until every replica
/// has ended or the deadline passed, then their ends.
async fn one_round(
    p: &Plan,
    spec: &Spec<'_>,
    observer: &Observer,
    rec: &Recorder,
    reaper: &mut crate::launch::reaper::Reaper,
    candidates: &crate::tap::Candidates,
) -> Result<Vec<replica::Ended>> {
    let mut reps = Replicas::new(reaper);
    if let Ok(mut c) = candidates.lock() {
        c.clear();
    }
    let start = Instant::now();
    let at = |k: u32| {
        if p.replicas <= 1 {
            Duration::ZERO
        } else {
            p.spread * (k - 1) / (p.replicas - 1)
        }
    };
    let mut next = 1;
    let mut failed_looks = 0u32;
    loop {
        while next <= p.replicas && start.elapsed() >= at(next) {
            let pgid = reps.start(spec, next)?;
            if let Ok(mut c) = candidates.lock() {
                c.push(pgid);
            }
            rec.emit(Body::Replica {
                round: spec.round,
                replica: next,
                pgid,
                exit: None,
            });
            next += 1;
        }
        match observer.sample(false).await {
            Ok(obs) => rec.emit(Body::Look {
                round: Some(spec.round),
                obs: Box::new(obs),
            }),
            Err(e) => {
                failed_looks += 1;
                if failed_looks == 1 {
                    eprintln!("pgchaos: round {}: a look failed: {e:#}", spec.round);
                }
            }
        }
        if next > p.replicas && reps.all_done() || start.elapsed() >= p.deadline {
            break;
        }
        let until_next = if next <= p.replicas {
            at(next).saturating_sub(start.elapsed())
        } else {
            p.look_every
        };
        tokio::time::sleep(until_next.min(p.look_every)).await;
    }
    Ok(reps.wait(p.deadline).await)
}

fn print_summary(ends: &[RoundEnds], sum: &summary::Summary) {
    for r in ends {
        for e in &r.ends {
            let rt = sum
                .replicas
                .iter()
                .find(|x| x.round == r.round && x.replica == e.replica);
            let calls = rt
                .map(|x| {
                    x.calls
                        .iter()
                        .map(|c| format!("{}({}) {}", c.func, c.key, c.result))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            println!(
                "round {} replica {}: {} after {} ms; {} lanes; {}",
                r.round,
                e.replica,
                match (e.code, e.signal, e.deadline) {
                    (_, _, true) => "killed at its deadline".to_string(),
                    (Some(c), _, _) => format!("exit {c}"),
                    (_, Some(s), _) => format!("signal {s}"),
                    _ => "ended".into(),
                },
                e.ms,
                rt.map_or(0, |x| x.lanes.len()),
                if calls.is_empty() {
                    "no lock calls".into()
                } else {
                    calls
                }
            );
        }
    }
    for (f, c) in &sum.lock_calls {
        println!(
            "{f}: {} calls: {} true, {} false, {} done, {} errors, {} unknown",
            c.calls, c.t, c.f, c.done, c.error, c.unknown
        );
    }
    if !sum.unowned_lanes.is_empty() {
        println!("lanes of no known replica: {:?}", sum.unowned_lanes);
    }
    for e in &sum.errors {
        println!("error: {e}");
    }
}
