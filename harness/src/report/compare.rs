//! Comparing runs: one table, a row per invariant and a column per run; below it, a line
//! per run with its versions, drift, cases and seed (long text stays out of the table's
//! columns, so the table stays readable in a terminal).

use super::Results;
use super::terminal::cases;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

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

/// The comparison of runs, as a terminal table or Markdown.
pub fn compare(runs: &[Results], markdown: bool) -> String {
    let mut header = vec!["invariant".to_string()];
    for r in runs {
        header.push(r.topology.clone());
    }
    let names: Vec<String> = runs
        .first()
        .map(|r| r.invariants.iter().map(|i| i.name.clone()).collect())
        .unwrap_or_default();
    let mut b = tabled::builder::Builder::default();
    b.push_record(header);
    for name in &names {
        let mut row = vec![name.clone()];
        for r in runs {
            let cell = r
                .invariants
                .iter()
                .find(|i| &i.name == name)
                .map(|i| {
                    let mark = if i.verdict.meets(i.expected) {
                        ""
                    } else {
                        " (UNEXPECTED)"
                    };
                    match &i.first_failure {
                        Some(f) => format!(
                            "{}{mark} {}/{}, min {}",
                            i.verdict,
                            i.violating_cases,
                            cases(r.cases),
                            f.minimal_steps
                        ),
                        None => format!("{}{mark}", i.verdict),
                    }
                })
                .unwrap_or_else(|| "-".into());
            row.push(cell);
        }
        b.push_record(row);
    }
    let mut passed = vec!["passed".to_string()];
    passed.extend(runs.iter().map(|r| r.passed.to_string()));
    b.push_record(passed);
    let mut table = b.build();
    if markdown {
        table.with(tabled::settings::Style::markdown());
    } else {
        table.with(tabled::settings::Style::sharp());
    }
    let mut out = table.to_string();
    out.push_str("\n(violated N/M cases: N of the run's M cases violated it; min: steps in its minimal case)\n\n");
    for r in runs {
        let versions = format!(
            "PostgreSQL {} / {} {}",
            r.versions.postgres,
            crate::pooler::display_name(&r.pooler),
            r.versions.pooler.as_deref().unwrap_or("none")
        );
        let drift = if r.version_drift.is_empty() {
            "version drift: none".to_string()
        } else {
            format!("version drift: {}", r.version_drift.join("; "))
        };
        let line = format!(
            "{}: {}, seed {}; {versions}; {drift}",
            r.topology,
            cases(r.cases),
            r.seed
        );
        if markdown {
            out.push_str(&format!("- {line}\n"));
        } else {
            out.push_str(&format!("{line}\n"));
        }
    }
    out
}

/// The comparison of runs as a self-contained HTML page: the same table, a cell per
/// invariant and run (classed by verdict, `unexpected` when it differs from `expect`), and
/// a line per run with its versions, drift, cases and seed.
pub fn compare_html(runs: &[Results]) -> String {
    use super::markup::esc;
    use std::fmt::Write as _;
    let names: Vec<String> = runs
        .first()
        .map(|r| r.invariants.iter().map(|i| i.name.clone()).collect())
        .unwrap_or_default();
    let mut b = String::from(
        "<h1>pgchaos: comparison of runs</h1>\n<table class=\"compare\">\n<thead><tr><th>invariant</th>",
    );
    for r in runs {
        let _ = write!(
            b,
            "<th data-topology=\"{}\">{}</th>",
            esc(&r.topology),
            esc(&r.topology)
        );
    }
    b.push_str("</tr></thead>\n<tbody>\n");
    for name in &names {
        let _ = write!(
            b,
            "<tr data-invariant=\"{}\"><td class=\"mono\">{}</td>",
            esc(name),
            esc(name)
        );
        for r in runs {
            match r.invariants.iter().find(|i| &i.name == name) {
                Some(i) => {
                    let unexpected = !i.verdict.meets(i.expected);
                    let detail = match &i.first_failure {
                        Some(f) => format!(
                            " {}/{}, min {}",
                            i.violating_cases,
                            cases(r.cases),
                            f.minimal_steps
                        ),
                        None => String::new(),
                    };
                    let _ = write!(
                        b,
                        "<td class=\"{}{}\" data-topology=\"{}\" data-verdict=\"{}\" data-expected=\"{}\">{}{}{}</td>",
                        i.verdict,
                        if unexpected { " unexpected" } else { "" },
                        esc(&r.topology),
                        i.verdict,
                        i.expected,
                        i.verdict,
                        if unexpected { " (UNEXPECTED)" } else { "" },
                        esc(&detail),
                    );
                }
                None => b.push_str("<td>-</td>"),
            }
        }
        b.push_str("</tr>\n");
    }
    b.push_str("<tr class=\"passed\"><td>passed</td>");
    for r in runs {
        let _ = write!(
            b,
            "<td class=\"{}\" data-topology=\"{}\">{}</td>",
            if r.passed { "pass" } else { "fail" },
            esc(&r.topology),
            r.passed
        );
    }
    b.push_str("</tr>\n</tbody>\n</table>\n<p>violated N/M cases: N of the run's M cases violated it; min: steps in its minimal case. A cell shaded red differs from the topology's <code>expect</code> block.</p>\n<ul class=\"runs\">\n");
    for r in runs {
        let _ = writeln!(
            b,
            "<li data-topology=\"{}\"><b>{}</b> ({}): {}, seed {}; PostgreSQL {} / {} {}; version drift: {}</li>",
            esc(&r.topology),
            esc(&r.topology),
            esc(&r.topology_file),
            cases(r.cases),
            r.seed,
            esc(&r.versions.postgres),
            esc(&crate::pooler::display_name(&r.pooler)),
            esc(r.versions.pooler.as_deref().unwrap_or("none")),
            esc(&if r.version_drift.is_empty() {
                "none".to_string()
            } else {
                r.version_drift.join("; ")
            }),
        );
    }
    b.push_str("</ul>\n");
    super::html::page("pgchaos: comparison of runs", &b)
}

#[cfg(test)]
mod tests {
    use super::super::results::*;
    use super::*;
    use crate::vocab::{Tier, Verdict};

    fn results(name: &str, cases: u32, violated: u32, drift: &[&str]) -> Results {
        Results {
            topology: name.into(),
            topology_file: format!("topologies/{name}.yaml"),
            pooler: "pgbouncer".into(),
            pool_mode: Some("transaction".into()),
            launcher: "native".into(),
            versions: VersionsOut {
                postgres: "18.6".into(),
                postgres_declared: "18.6".into(),
                postgres_full: String::new(),
                pooler: Some("1.24.1".into()),
                pooler_declared: Some("1.25.2".into()),
                pooler_built_from: None,
                pooler_tarball_sha256: None,
            },
            version_drift: drift.iter().map(|d| d.to_string()).collect(),
            cpu: CpuOut {
                pinned: None,
                online: Some(2),
            },
            seed: 1,
            cases,
            steps: 10,
            skipped_steps: 0,
            stopped_by_time_limit: false,
            schedule: "sequential".into(),
            judged_cases: cases,
            judged: Default::default(),
            unknown_why: vec![],
            replay_violations: vec![],
            require_expected: false,
            passed: true,
            invariants: vec![InvariantResult {
                name: "app.mutual_exclusion".into(),
                tier: Tier::App,
                verdict: if violated > 0 {
                    Verdict::Violated
                } else {
                    Verdict::Holds
                },
                expected: Verdict::Violated,
                violating_cases: violated,
                unknown_cases: 0,
                exercised: 1,
                note: None,
                violating: (0..violated).collect(),
                unknown: vec![],
                first_failure: (violated > 0).then(|| FailureOut {
                    case_file: String::new(),
                    case_seed: Some(1),
                    case_index: 0,
                    minimal_steps: 2,
                    original_steps: 9,
                    shrink_runs: 30,
                    unshrunk: false,
                }),
                expected_rate: None,
            }],
            timing: Timing {
                topology_ready_ms: 0,
                run_ms: 0,
                steps_ms: 0,
                reset_ms: 0,
                steps_per_sec: 0.0,
                overall_steps_per_sec: 0.0,
                time_to_first_violation_ms: None,
                time_to_first_minimal_ms: None,
                shrink_ms: 0,
            },
            history: None,
        }
    }

    #[test]
    fn counts_carry_their_case_totals_and_long_drift_stays_out_of_the_columns() {
        let long = "pgbouncer declared 1.25.2, obtained 1.24.1 (nearest available: cached build from Debian source package pgbouncer 1.24.1-1+deb13u2 (trixie))";
        let t = compare(
            &[
                results("transaction-mode", 256, 140, &[long]),
                results("transaction-mode-xact", 64, 1, &[]),
            ],
            false,
        );
        assert!(t.contains("violated 140/256 cases, min 2"), "{t}");
        assert!(
            t.contains("violated (UNEXPECTED)") || t.contains("1/64 cases"),
            "{t}"
        );
        assert!(t.contains("1/64 cases"), "{t}");
        assert!(!t.contains(" 1 cases"), "plural: {t}");
        let table_width = t.lines().next().unwrap().chars().count();
        assert!(table_width < 100, "table is {table_width} wide:\n{t}");
        assert!(t.contains(long), "the drift is still reported: {t}");
        let html = compare_html(&[
            results("transaction-mode", 256, 140, &[long]),
            results("<x>", 64, 0, &[]),
        ]);
        assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
        assert!(
            !html.contains("<script") && !html.contains("http://") && !html.contains("https://")
        );
        assert!(
            html.contains("<th data-topology=\"&lt;x&gt;\">&lt;x&gt;</th>"),
            "{html}"
        );
        assert!(html.contains("data-verdict=\"violated\" data-expected=\"violated\">violated 140/256 cases, min 2</td>"), "{html}");
        assert!(html.contains("class=\"holds unexpected\""), "{html}");
        assert!(html.contains(long), "{html}");
        let md = compare(&[results("a", 1, 0, &[])], true);
        assert!(md.contains("| app.mutual_exclusion"), "{md}");
        assert!(md.contains("- a: 1 case, seed 1"), "{md}");
    }
}
