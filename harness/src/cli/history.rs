//! `pgchaos history RUN [--case N]`: a stored history in words, event by event.

use super::Exit;
use super::analyze::run_dir;
use crate::history::{At, Body, Event, HistoryReader, Observation, ProbeWhy};
use anyhow::Result;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory, or a topology name meaning its latest run.
    run: String,
    /// Only the events of this case (its run, shrink and evidence phases).
    #[arg(long)]
    case: Option<u32>,
    /// The events as stored (JSON lines, repeated observations restored).
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = "reports")]
    reports: PathBuf,
}

pub fn history(a: Args) -> Result<Exit> {
    let dir = run_dir(&a.run, &a.reports)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut in_case: Option<u32> = None;
    for ev in HistoryReader::open(&dir)? {
        let ev = ev?;
        if let Body::Case(c) = &ev.body {
            in_case = Some(c.case);
        }
        let shown = match (a.case, in_case, &ev.body) {
            (None, _, _) => true,
            (Some(_), _, Body::Run(_)) => true,
            (Some(n), Some(c), _) => n == c,
            (Some(_), None, _) => false,
        };
        if shown {
            let line = if a.json {
                serde_json::to_string(&ev)?
            } else {
                describe(&ev)
            };
            if writeln!(out, "{line}").is_err() {
                break; // a closed pipe (`| head`)
            }
        }
        if let Body::CaseEnd(_) = &ev.body {
            in_case = None;
        }
    }
    Ok(Exit::Ok)
}

fn held(o: &Observation) -> String {
    let locks: Vec<String> = o
        .backends
        .iter()
        .map(|b| {
            let list = |granted: bool| -> String {
                b.locks
                    .iter()
                    .filter(|l| l.granted == granted)
                    .map(|l| l.key.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (holds, waits) = (list(true), list(false));
            format!(
                "pid {} ({}) {}{}{}",
                b.id.pid,
                b.backend_start,
                b.state,
                if holds.is_empty() {
                    String::new()
                } else {
                    format!(" holds {holds}")
                },
                if waits.is_empty() {
                    String::new()
                } else {
                    format!(" waits for {waits}")
                }
            )
        })
        .collect();
    let servers: Vec<String> = o
        .servers
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s.pid.map_or("?".to_string(), |p| p.to_string()),
                s.raw.get("state").map(String::as_str).unwrap_or("?")
            )
        })
        .collect();
    let mut s = if locks.is_empty() {
        "no client backends".to_string()
    } else {
        locks.join("; ")
    };
    if !servers.is_empty() {
        s.push_str(&format!(" | servers: {}", servers.join(", ")));
    }
    for p in &o.pools {
        let waiting = p.clients_waiting;
        if waiting != 0 {
            s.push_str(&format!(" | {waiting} clients wait for a server"));
        }
    }
    if let Some(p) = &o.app_pool {
        s.push_str(&format!(
            " | app pool {}/{} open, {} idle, {} waiting",
            p.size, p.max_open, p.idle, p.waiting
        ));
    }
    s
}

/// One event in words.
pub fn describe(ev: &Event) -> String {
    let t = format!("{:>12.6}s", ev.t as f64 / 1e9);
    let step = |s: Option<usize>| s.map(|i| format!(" [step {}]", i + 1)).unwrap_or_default();
    match &ev.body {
        Body::Run(h) => format!(
            "{t}  run: {} seed {}; PostgreSQL {}; pooler {} {}; contender pid {} ({}); keys {}",
            h.topology,
            h.seed,
            h.versions.postgres,
            h.pooler,
            h.versions.pooler.as_deref().unwrap_or(""),
            h.contender.pid,
            h.contender_start,
            h.keys
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Body::Case(c) => format!(
            "{t}  case {} ({:?}{}{}): {} clients, {} steps",
            c.case,
            c.phase,
            c.seed.map(|s| format!(", seed {s}")).unwrap_or_default(),
            c.invariant
                .as_ref()
                .map(|i| format!(", for {i}"))
                .unwrap_or_default(),
            c.clients,
            c.steps
        ),
        Body::Invoke(i) => format!(
            "{t}  {} invoke {}{}{}{}",
            i.p,
            i.f,
            i.key.map(|k| format!(" {k}")).unwrap_or_default(),
            i.target
                .map(|b| format!(" target pid {} ({})", b.pid, b.backend_start()))
                .unwrap_or_default(),
            step(i.step)
        ),
        Body::Ok(c) | Body::Fail(c) | Body::Info(c) => format!(
            "{t}  {} {:?} {} {}{}{}",
            c.p,
            c.value.outcome(),
            c.f,
            c.value,
            c.backend
                .map(|b| format!(" on pid {} ({})", b.pid, b.backend_start()))
                .unwrap_or_default(),
            step(c.step)
        ),
        Body::Skip(s) => format!(
            "{t}  {} skip {}{}{}: {}",
            s.p,
            s.f,
            s.key.map(|k| format!(" {k}")).unwrap_or_default(),
            step(Some(s.step)),
            s.reason
        ),
        Body::Obs(o) => format!(
            "{t}  observed {}{}: {}",
            match o.at {
                At::Before => "before",
                At::After => "after",
                At::Sample => "(sample)",
                At::End => "at the end",
            },
            step(o.step),
            held(&o.obs)
        ),
        Body::Probe(p) => format!(
            "{t}  contender {} {}: {}{}",
            match p.why {
                ProbeWhy::Boundary => "probe",
                ProbeWhy::Before => "probe (before)",
                ProbeWhy::After => "probe (after)",
                ProbeWhy::End => "probe (end)",
            },
            p.key,
            if p.available { "free" } else { "taken" },
            step(p.step)
        ),
        Body::Notification(n) => format!(
            "{t}  {} received notification {} {:?} from pid {}{}",
            n.p,
            n.channel,
            n.payload,
            n.pid,
            n.backend
                .map(|b| format!(" on pid {} ({})", b.pid, b.backend_start()))
                .unwrap_or_default()
        ),
        Body::CaseEnd(e) => format!(
            "{t}  case {} ends: {:.1} ms in steps, {:.1} ms in the reset",
            e.case,
            e.steps_us as f64 / 1000.0,
            e.reset_us as f64 / 1000.0
        ),
        Body::RunEnd(e) => format!(
            "{t}  run ends: {} cases in {:.1} s{}",
            e.cases,
            e.run_ms as f64 / 1000.0,
            if e.stopped_by_time_limit {
                " (time limit)"
            } else {
                ""
            }
        ),
    }
}
