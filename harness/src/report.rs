//! What a person reads: `results.json`, `history.jsonl`, minimal cases (`case.yaml`) with
//! their evidence, `report.md`, the terminal verdict table, and the comparison of runs.
//! Everything is written into a temporary directory and renamed into place, so a report is
//! either complete or absent.

use crate::client::Reply;
use crate::engine::{Failure, RunOutcome};
use crate::launch::Cluster;
use crate::runner::{CaseRun, StepRecord, symbol, symbolic};
use crate::topology::Topology;
use crate::workload::Step;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use tabled::Tabled;

/// One step of a case file: the step, and (when recorded) what was expected and observed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseStep {
    #[serde(flatten)]
    pub step: Step,
    /// The model's prediction, e.g. `true`, `ok`, `error 55P03`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub observed: Option<String>,
    /// The backend that served it, symbolically (`B1`), and for people its pid and start.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend_pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend_start: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub violations: Vec<String>,
}

/// A replayable case: a minimal failure, or a hand-written scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// The topology file, relative to the workspace root (or absolute).
    pub topology: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub description: Option<String>,
    /// The invariant this case violates (minimal failures).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub invariant: Option<String>,
    /// Invariants the case must violate when replayed (scenarios); others must hold.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub expect_violated: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub case_seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub versions: Option<String>,
    pub steps: Vec<CaseStep>,
}

impl CaseFile {
    pub fn load(path: &Path) -> Result<CaseFile> {
        let src =
            fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        serde_saphyr::from_str(&src).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn steps(&self) -> Vec<Step> {
        self.steps.iter().map(|s| s.step.clone()).collect()
    }

    /// A case file from a run of `steps`.
    pub fn from_run(topology: &str, run: &CaseRun) -> CaseFile {
        let order = symbolic(&run.steps);
        CaseFile {
            topology: topology.to_string(),
            description: None,
            invariant: None,
            expect_violated: vec![],
            case_seed: None,
            versions: None,
            steps: run
                .steps
                .iter()
                .map(|r| CaseStep {
                    step: r.step.clone(),
                    expected: r.expected.as_ref().map(Reply::to_string),
                    observed: Some(r.reply.to_string()),
                    backend: r
                        .backend
                        .as_ref()
                        .map(|s| symbol(&order, s.backend))
                        .or_else(|| r.target.map(|t| symbol(&order, t))),
                    backend_pid: r
                        .backend
                        .as_ref()
                        .map(|s| s.backend.pid)
                        .or(r.target.map(|t| t.pid)),
                    backend_start: r.backend.as_ref().map(|s| s.backend_start.clone()),
                    violations: r
                        .violations
                        .iter()
                        .map(|v| format!("{}: {}", v.invariant, v.detail))
                        .collect(),
                })
                .collect(),
        }
    }
}

/// UTC `YYYYMMDDTHHMMSSZ` without a date crate.
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn versions_line(cluster: &Cluster) -> String {
    let v = &cluster.versions;
    match &v.pgbouncer {
        Some(b) => format!(
            "PostgreSQL {} + PgBouncer {} (declared {})",
            v.postgres,
            b,
            v.pgbouncer_declared.clone().unwrap_or_default()
        ),
        None => format!("PostgreSQL {}", v.postgres),
    }
}

/// `results.json` as a value.
pub fn results_json(cluster: &Cluster, out: &RunOutcome, topo_file: &str) -> serde_json::Value {
    let v = &cluster.versions;
    let steps_per_sec = if out.steps_ms > 0 {
        out.steps as f64 * 1000.0 / out.steps_ms as f64
    } else {
        0.0
    };
    let overall = if out.run_ms > 0 {
        out.steps as f64 * 1000.0 / out.run_ms as f64
    } else {
        0.0
    };
    json!({
        "topology": cluster.topology.name,
        "topology_file": topo_file,
        "pool_mode": cluster.pool_mode().map(|m| m.as_str()),
        "versions": {
            "postgres": v.postgres,
            "postgres_declared": v.postgres_declared,
            "postgres_full": v.postgres_full,
            "pgbouncer": v.pgbouncer,
            "pgbouncer_declared": v.pgbouncer_declared,
        },
        "version_drift": v.version_drift,
        "cpu": {
            "pinned": cluster.pinned_cpu,
            "online": crate::cpu::online(),
        },
        "seed": out.run_seed,
        "cases": out.cases,
        "steps": out.steps,
        "skipped_steps": out.skipped_steps,
        "stopped_by_time_limit": out.stopped_by_time_limit,
        "passed": out.passed(),
        "invariants": out.invariants.iter().map(|i| {
            let f = out.failures.iter().find(|f| f.invariant == i.name);
            json!({
                "name": i.name,
                "tier": i.tier,
                "verdict": i.verdict,
                "expected": i.expected,
                "violating_cases": i.violating_cases,
                "first_failure": f.map(|f| json!({
                    "case_file": format!("failures/{}/case.yaml", f.invariant),
                    "case_seed": f.case_seed,
                    "case_index": f.case_index,
                    "minimal_steps": f.minimal.len(),
                    "original_steps": f.original.len(),
                    "shrink_runs": f.shrink_runs,
                })),
            })
        }).collect::<Vec<_>>(),
        "timing": {
            "topology_ready_ms": cluster.ready_ms,
            "run_ms": out.run_ms,
            "steps_ms": out.steps_ms,
            "reset_ms": out.reset_ms,
            "steps_per_sec": (steps_per_sec * 10.0).round() / 10.0,
            "overall_steps_per_sec": (overall * 10.0).round() / 10.0,
            "time_to_first_violation_ms": out.time_to_first_violation_ms,
            "time_to_first_minimal_ms": out.time_to_first_minimal_ms,
            "shrink_ms": out.shrink_ms,
        },
    })
}

/// The acceptance-protocol evidence of a minimal failure (see the README).
pub fn evidence_json(
    cluster: &Cluster,
    f: &Failure,
    observer_contender: (i32, &str),
) -> serde_json::Value {
    let run = &f.evidence;
    let order = symbolic(&run.steps);
    let boundary = run
        .steps
        .iter()
        .find(|s| s.violations.iter().any(|v| v.invariant == f.invariant))
        .or(run.steps.last());
    let holder = boundary
        .and_then(|s| s.backend.clone())
        .or_else(|| run.steps.iter().rev().find_map(|s| s.backend.clone()));
    json!({
        "test_case_id": format!("{}/{}/{}", cluster.topology.name, f.invariant, f.case_seed),
        "invariant": f.invariant,
        "postgres_version": cluster.versions.postgres,
        "pooler_version": cluster.versions.pgbouncer,
        "pooler_declared_version": cluster.versions.pgbouncer_declared,
        "version_drift": cluster.versions.version_drift,
        "pool_mode": cluster.pool_mode().map(|m| m.as_str()).unwrap_or("direct"),
        "database": crate::launch::DB,
        "holder": holder.as_ref().map(|h| json!({
            "symbol": symbol(&order, h.backend),
            "backend_pid": h.backend.pid,
            "backend_start": h.backend_start,
        })),
        "contender": {"backend_pid": observer_contender.0, "backend_start": observer_contender.1},
        "boundary_step": boundary.map(|s| s.index),
        "boundary_action": boundary.map(|s| s.step.to_string()),
        "violations": boundary.map(|s| &s.violations),
        "pg_locks_before": boundary.and_then(|s| s.observation_before.as_ref()).map(|o| &o.backends),
        "pg_locks_after": boundary.map(|s| &s.observation.backends),
        "show_servers_after": boundary.map(|s| &s.observation.servers),
        "show_clients_after": boundary.map(|s| &s.observation.clients),
        "contender_try_before": boundary.and_then(|s| s.contender_before.clone()),
        "contender_try_after": boundary.and_then(|s| s.contender_after.clone()),
        "cleanup_action": "PgBouncer KILL/RESUME of the database (pooled) and pg_terminate_backend of every client-role backend, then verified: zero client-role backends, zero advisory locks, empty pool",
        "steps": run.steps,
    })
}

/// A plain-words story of a minimal case.
pub fn story(f: &Failure) -> String {
    let run = &f.evidence;
    let order = symbolic(&run.steps);
    let mut lines = vec![];
    for r in &run.steps {
        lines.push(narrate(r, &order));
    }
    lines.join("\n")
}

fn narrate(r: &StepRecord, order: &[crate::client::BackendId]) -> String {
    let who = format!("C{}", r.step.client + 1);
    let on = r
        .backend
        .as_ref()
        .map(|s| {
            format!(
                " on {} (pid {}, backend_start {})",
                symbol(order, s.backend),
                s.backend.pid,
                s.backend_start
            )
        })
        .unwrap_or_default();
    let key = r.step.key.map(|k| format!(" {k}")).unwrap_or_default();
    let mut s = format!(
        "{}. {who} {}{key}{on}: got {}",
        r.index + 1,
        r.step.op,
        r.reply
    );
    if let Some(e) = &r.expected
        && !e.same_as(&r.reply)
    {
        s.push_str(&format!(" (the model predicted {e})"));
    }
    if let Some(t) = r.target {
        s.push_str(&format!(" [target {} pid {}]", symbol(order, t), t.pid));
    }
    let held: Vec<String> = r
        .observation
        .backends
        .iter()
        .flat_map(|b| {
            b.locks
                .iter()
                .filter(|l| l.granted)
                .map(move |l| format!("{} holds {}", symbol(order, b.id), l.key))
        })
        .collect();
    s.push_str(&format!(
        ". Afterwards pg_locks: {}.",
        if held.is_empty() {
            "no advisory locks".to_string()
        } else {
            held.join(", ")
        }
    ));
    if let Some(after) = &r.contender_after {
        let probes: Vec<String> = after
            .iter()
            .map(|(k, ok)| format!("{k} {}", if *ok { "free" } else { "taken" }))
            .collect();
        s.push_str(&format!(" A fresh contender finds: {}.", probes.join(", ")));
    }
    for v in &r.violations {
        s.push_str(&format!("\n   -> {} violated: {}", v.invariant, v.detail));
    }
    s
}

#[derive(Tabled)]
struct VerdictRow {
    invariant: String,
    tier: String,
    verdict: String,
    expected: String,
    #[tabled(rename = "cases")]
    violating_cases: u32,
    #[tabled(rename = "minimal")]
    minimal: String,
}

/// The terminal verdict table.
pub fn verdict_table(out: &RunOutcome) -> String {
    let rows: Vec<VerdictRow> = out
        .invariants
        .iter()
        .map(|i| {
            let f = out.failures.iter().find(|f| f.invariant == i.name);
            let mark = if i.verdict == i.expected {
                ""
            } else {
                "  <-- UNEXPECTED"
            };
            VerdictRow {
                invariant: i.name.clone(),
                tier: i.tier.clone(),
                verdict: format!("{}{mark}", i.verdict.as_str()),
                expected: i.expected.as_str().to_string(),
                violating_cases: i.violating_cases,
                minimal: f
                    .map(|f| format!("{} steps ({} shrink runs)", f.minimal.len(), f.shrink_runs))
                    .unwrap_or_default(),
            }
        })
        .collect();
    tabled::Table::new(rows)
        .with(tabled::settings::Style::sharp())
        .to_string()
}

/// Write a whole report directory atomically; returns its path.
pub fn write_run(
    out_root: &Path,
    cluster: &Cluster,
    topo_file: &str,
    outcome: &RunOutcome,
    contender: (i32, &str),
) -> Result<PathBuf> {
    let name = &cluster.topology.name;
    let parent = out_root.join(name);
    fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let final_dir = parent.join(format!("{}-{}", utc_stamp(), outcome.run_seed));
    let tmp = parent.join(format!(".tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let results = results_json(cluster, outcome, topo_file);
    fs::write(
        tmp.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    let mut history = String::new();
    for (index, seed, run) in &outcome.history {
        for r in &run.steps {
            history.push_str(&serde_json::to_string(
                &json!({"case": index, "case_seed": seed, "step": r}),
            )?);
            history.push('\n');
        }
    }
    fs::write(tmp.join("history.jsonl"), history)?;
    let mut md = format!(
        "# pgchaos report: {name}\n\n{}\n\n- versions: {}\n- version drift: {}\n- pool mode: {}\n- seed: {}\n- cases: {}, steps: {} ({} skipped)\n- passed (verdicts match `expect`): **{}**\n\n```\n{}\n```\n",
        cluster.topology.description.clone().unwrap_or_default(),
        versions_line(cluster),
        if cluster.versions.version_drift.is_empty() {
            "none".to_string()
        } else {
            cluster.versions.version_drift.join("; ")
        },
        cluster
            .pool_mode()
            .map(|m| m.as_str())
            .unwrap_or("direct (no pooler)"),
        outcome.run_seed,
        outcome.cases,
        outcome.steps,
        outcome.skipped_steps,
        outcome.passed(),
        verdict_table(outcome),
    );
    for f in &outcome.failures {
        let dir = tmp.join("failures").join(&f.invariant);
        fs::create_dir_all(&dir)?;
        let mut case = CaseFile::from_run(topo_file, &f.evidence);
        case.invariant = Some(f.invariant.clone());
        case.case_seed = Some(f.case_seed);
        case.versions = Some(versions_line(cluster));
        fs::write(dir.join("case.yaml"), serde_saphyr::to_string(&case)?)?;
        fs::write(
            dir.join("evidence.json"),
            serde_json::to_string_pretty(&evidence_json(cluster, f, contender))?,
        )?;
        md.push_str(&format!(
            "\n## {}\n\nMinimal case: {} steps (from {}; {} shrink runs). Reproduce: `pgchaos reproduce {}/failures/{}/case.yaml` or `pgchaos reproduce --seed {} --invariant {} {}`\n\n{}\n",
            f.invariant,
            f.minimal.len(),
            f.original.len(),
            f.shrink_runs,
            final_dir.display(),
            f.invariant,
            f.case_seed,
            f.invariant,
            topo_file,
            story(f)
        ));
    }
    fs::write(tmp.join("report.md"), md)?;
    fs::rename(&tmp, &final_dir)
        .with_context(|| format!("moving the report to {}", final_dir.display()))?;
    let latest = parent.join("latest");
    let tmp_link = parent.join(format!(".latest-{}", std::process::id()));
    let _ = fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(final_dir.file_name().expect("named"), &tmp_link)?;
    fs::rename(&tmp_link, &latest)?;
    Ok(final_dir)
}

/// A run directory from an argument: a directory with results.json, or a topology name
/// meaning `reports/<name>/latest`.
pub fn resolve_run(arg: &str, reports: &Path) -> Result<PathBuf> {
    let p = PathBuf::from(arg);
    if p.join("results.json").is_file() {
        return Ok(p);
    }
    let latest = reports.join(arg).join("latest");
    if latest.join("results.json").is_file() {
        return Ok(latest);
    }
    bail!(
        "{arg}: neither a run directory (no results.json) nor a topology with a run ({} has none); run `pgchaos chaos {arg}` first",
        latest.display()
    )
}

/// One table: a row per invariant, a column per run; then versions and drift per run.
pub fn compare(runs: &[PathBuf], markdown: bool) -> Result<String> {
    let mut results = vec![];
    for r in runs {
        let text = fs::read_to_string(r.join("results.json"))
            .with_context(|| format!("{}: cannot read results.json", r.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}/results.json", r.display()))?;
        results.push(v);
    }
    let mut header = vec!["invariant".to_string()];
    for v in &results {
        header.push(v["topology"].as_str().unwrap_or("?").to_string());
    }
    let mut rows: Vec<Vec<String>> = vec![];
    let names: Vec<String> = results
        .first()
        .and_then(|v| v["invariants"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|i| i["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    for name in &names {
        let mut row = vec![name.clone()];
        for v in &results {
            let cell = v["invariants"]
                .as_array()
                .and_then(|a| a.iter().find(|i| i["name"] == name.as_str()))
                .map(|i| {
                    let verdict = i["verdict"].as_str().unwrap_or("?");
                    let mark = if i["verdict"] == i["expected"] {
                        ""
                    } else {
                        " (UNEXPECTED)"
                    };
                    match i["first_failure"]["minimal_steps"].as_u64() {
                        Some(m) => format!(
                            "{verdict}{mark}: {} cases, min {m} steps",
                            i["violating_cases"]
                        ),
                        None => format!("{verdict}{mark}"),
                    }
                })
                .unwrap_or_else(|| "-".into());
            row.push(cell);
        }
        rows.push(row);
    }
    let meta = |label: &str, f: &dyn Fn(&serde_json::Value) -> String| {
        let mut row = vec![label.to_string()];
        row.extend(results.iter().map(f));
        row
    };
    rows.push(meta("versions", &|v| {
        format!(
            "PG {} / PgBouncer {}",
            v["versions"]["postgres"].as_str().unwrap_or("?"),
            v["versions"]["pgbouncer"].as_str().unwrap_or("none")
        )
    }));
    rows.push(meta("version drift", &|v| {
        let d: Vec<String> = v["version_drift"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if d.is_empty() {
            "none".into()
        } else {
            d.join("; ")
        }
    }));
    rows.push(meta("cases / seed", &|v| {
        format!("{} / {}", v["cases"], v["seed"])
    }));
    rows.push(meta("passed", &|v| v["passed"].to_string()));
    let mut b = tabled::builder::Builder::default();
    b.push_record(header);
    for r in rows {
        b.push_record(r);
    }
    let mut table = b.build();
    if markdown {
        table.with(tabled::settings::Style::markdown());
    } else {
        table.with(tabled::settings::Style::sharp());
    }
    Ok(table.to_string())
}

/// The topology file as recorded in case files: relative to the cwd when possible.
pub fn topo_label(topo: &Topology) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    topo.source
        .strip_prefix(&cwd)
        .unwrap_or(&topo.source)
        .display()
        .to_string()
}
