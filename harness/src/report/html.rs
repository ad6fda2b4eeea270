//! `report.html`: the run in a browser, self-contained (inline CSS and SVG, no script, no
//! network fetch): the run's header, the verdict table, and for every minimal failure with
//! evidence a timeline of its evidence replay drawn from the recorded events alone.
//!
//! The timeline has a lane per client (C1, C2, ...), one for the nemesis when the case has
//! faults, and one per backend (B1, B2, ... as in `case.yaml`). Each op is a bar from its
//! invoke to its completion, coloured by outcome; each backend's advisory locks, as the
//! observations' `pg_locks` rows show them, are spans in its lane; faults of the servers
//! shade every lane; the violation is a red line at the step where it was found. Sequential
//! cases get a slot per step (time is stretched between steps, so a 0.3 ms op is as wide as
//! a 200 ms one); concurrent cases a linear time axis, so overlapping ops overlap.
//!
//! Elements carry classes and data attributes for tests and for people reading the source:
//! `g.lane[data-client|data-nemesis|data-backend]`, `g.op.{ok,false,error,info,skip}` with
//! `data-t0`/`data-t1` (ns since the run started), `g.hold[data-pid][data-backend-start]`,
//! `rect.fault`, `g.violation[data-invariant]`.

use super::Results;
use super::markup::esc;
use super::timeline::timeline;
use crate::check::FirstFailure;
use crate::history::CaseView;
use crate::topology::Schedule;
use std::fmt::Write as _;

pub use super::markup::page;

/// `PostgreSQL 18.6 + PgBouncer 1.24.1 (declared 1.25.2)`, from the results.
pub fn versions_line(r: &Results) -> String {
    super::versions_text(
        &r.versions.postgres,
        &r.pooler,
        r.versions.pooler.as_deref(),
        r.versions.pooler_declared.as_deref(),
    )
}

/// The whole `report.html`.
pub fn report(
    results: &Results,
    description: Option<&str>,
    failures: &[FirstFailure],
    perf: Option<&super::plots::Perf>,
) -> String {
    let r = results;
    let mut b = String::new();
    let _ = write!(
        b,
        "<header>\n<h1>pgchaos report: {}</h1>\n",
        esc(&r.topology)
    );
    if let Some(d) = description.filter(|d| !d.trim().is_empty()) {
        let _ = writeln!(b, "<p class=\"description\">{}</p>", esc(d.trim()));
    }
    let facts: Vec<(&str, String, &str)> = vec![
        ("topology", r.topology_file.clone(), "mono"),
        ("versions", versions_line(r), ""),
        (
            "version drift",
            if r.version_drift.is_empty() {
                "none".into()
            } else {
                r.version_drift.join("; ")
            },
            "",
        ),
        (
            "pool mode",
            r.pool_mode
                .clone()
                .unwrap_or_else(|| "direct (no pooler)".into()),
            "",
        ),
        ("seed", r.seed.to_string(), "mono"),
        (
            "cases",
            format!(
                "{}, {} steps ({} skipped){}",
                r.cases,
                r.steps,
                r.skipped_steps,
                if r.stopped_by_time_limit {
                    ", stopped by the time limit"
                } else {
                    ""
                }
            ),
            "",
        ),
    ];
    b.push_str("<dl class=\"facts\">\n");
    for (k, v, class) in facts {
        let _ = writeln!(
            b,
            "<dt>{}</dt><dd class=\"{class}\" data-fact=\"{}\">{}</dd>",
            esc(k),
            esc(k),
            esc(&v)
        );
    }
    let _ = writeln!(
        b,
        "<dt>passed</dt><dd data-fact=\"passed\" class=\"{}\">{} (verdicts {} the topology's <code>expect</code> block)</dd>",
        if r.passed { "pass" } else { "fail" },
        r.passed,
        if r.passed { "match" } else { "differ from" },
    );
    b.push_str("</dl>\n</header>\n");
    b.push_str(&verdict_table(r, failures));
    if let Some(p) = perf {
        b.push_str(&super::plots::section(p));
    }
    b.push_str(LEGEND);
    for f in failures {
        b.push_str(&failure_section(r, f));
    }
    page(&format!("pgchaos report: {}", r.topology), &b)
}

const LEGEND: &str = "<p class=\"legend\">\
<span><i class=\"ok\"></i>ok</span>\
<span><i class=\"false\"></i>false</span>\
<span><i class=\"error\"></i>error</span>\
<span><i class=\"info\"></i>outcome unknown</span>\
<span><i class=\"skip\"></i>skipped</span>\
<span><i class=\"hold\"></i>advisory lock held (pg_locks)</span>\
<span><i class=\"wait\"></i>waiting for a lock</span>\
<span><i class=\"fault\"></i>fault of the servers</span>\
<span><i class=\"violation\"></i>violation</span>\
</p>\n";

fn has_evidence(failures: &[FirstFailure], name: &str) -> bool {
    failures
        .iter()
        .any(|f| f.invariant == name && f.evidence.is_some())
}

/// The verdict table: a row per invariant, its minimal case linked.
fn verdict_table(r: &Results, failures: &[FirstFailure]) -> String {
    let mut t = String::from(
        "<table class=\"verdicts\">\n<thead><tr><th>invariant</th><th>tier</th><th>verdict</th><th>expected</th><th>violating cases</th><th>minimal case</th></tr></thead>\n<tbody>\n",
    );
    for i in &r.invariants {
        let unexpected = i.fails(r.require_expected);
        let not_reached = !unexpected && !i.verdict.meets(i.expected);
        let minimal = match &i.first_failure {
            Some(f) if has_evidence(failures, &i.name) => format!(
                "<a href=\"{}\">{}</a> ({} steps, {} shrink runs) <a href=\"#{}\">timeline</a>",
                esc(&f.case_file),
                esc(&f.case_file),
                f.minimal_steps,
                f.shrink_runs,
                esc(&anchor(&i.name)),
            ),
            Some(f) => format!("{} steps ({} shrink runs)", f.minimal_steps, f.shrink_runs),
            None => String::new(),
        };
        let _ = writeln!(
            t,
            "<tr class=\"inv{}\" data-invariant=\"{}\" data-verdict=\"{}\" data-expected=\"{}\"><td class=\"mono\">{}</td><td>{}</td><td class=\"{}\">{}{}</td><td>{}</td><td>{}/{}</td><td>{}</td></tr>",
            if unexpected { " unexpected" } else { "" },
            esc(&i.name),
            i.verdict,
            i.expected,
            esc(&i.name),
            i.tier,
            i.verdict,
            i.verdict,
            if unexpected {
                " (UNEXPECTED)"
            } else if not_reached {
                " (not reached)"
            } else {
                ""
            },
            i.expected,
            i.violating_cases,
            r.cases,
            {
                let mut m = minimal;
                if i.unknown_cases > 0 {
                    m.push_str(&format!(" ({} cases unknown)", i.unknown_cases));
                }
                if let Some(n) = &i.note {
                    m.push_str(&format!(" <span class=\"note\">{}</span>", esc(n)));
                }
                m
            },
        );
    }
    t.push_str("</tbody>\n</table>\n");
    let notes = super::terminal::verdict_notes(r);
    t.push_str("<ul class=\"notes\">\n");
    for n in notes {
        let _ = writeln!(t, "<li>{}</li>", esc(&n));
    }
    t.push_str("</ul>\n");
    t
}

fn anchor(invariant: &str) -> String {
    format!("failure-{invariant}")
}

/// A failure's section: what shrinking made of it, the timeline, the violations, the story.
fn failure_section(r: &Results, f: &FirstFailure) -> String {
    let Some((events, check)) = &f.evidence else {
        return String::new();
    };
    let Ok(view) = CaseView::build(events) else {
        return String::new();
    };
    let inv = &f.invariant;
    let case_file = format!("failures/{inv}/case.yaml");
    let mut s = format!(
        "<section class=\"failure\" id=\"{}\" data-invariant=\"{}\">\n<h2>{}</h2>\n",
        esc(&anchor(inv)),
        esc(inv),
        esc(inv)
    );
    let _ = writeln!(
        s,
        "<p>Minimal case: {} steps (from {}; {} shrink runs), {} schedule. Case file: <a href=\"{}\">{}</a>, evidence: <a href=\"failures/{}/evidence.json\">evidence.json</a>. Reproduce: <code>pgchaos reproduce {}</code> or <code>pgchaos reproduce --seed {} --invariant {} {}</code></p>",
        view.steps.len(),
        f.original.len(),
        f.shrink_runs,
        match view.start.schedule {
            Schedule::Sequential => "sequential",
            Schedule::Concurrent => "concurrent",
        },
        esc(&case_file),
        esc(&case_file),
        esc(inv),
        esc(&case_file),
        f.case_seed.unwrap_or(0),
        esc(inv),
        esc(&r.topology_file),
    );
    if !check.violates(inv) {
        s.push_str("<p class=\"fail\">The evidence replay of this minimal case did not show the violation (a concurrent case depends on timing); the timeline is of that replay, and <code>pgchaos reproduce</code> replays it again.</p>\n");
    }
    let _ = writeln!(
        s,
        "<div class=\"timeline\">\n{}</div>\n<p class=\"caption\">{}</p>",
        timeline(inv, events, &view, check),
        match view.start.schedule {
            Schedule::Sequential =>
                "A slot per step: each op's bar runs from its invoke to its reply; after it, the observation (pg_locks) and the contender's probes. Lock spans are what pg_locks showed, from the first observation that had the row to the first that did not. Hover for replies, backends and times.",
            Schedule::Concurrent =>
                "Time runs left to right, stretched between events (square-root scale) so short ops stay visible beside long ones; order and overlap are exact, ticks give the time since the case began. Lock spans are what the sampler's pg_locks rows showed. Hover for replies, backends and times.",
        }
    );
    if !check.violations.is_empty() {
        s.push_str("<ul class=\"violations\">\n");
        for v in &check.violations {
            let step = view.steps.get(v.step);
            let _ = writeln!(
                s,
                "<li data-invariant=\"{}\"><b>{}</b> at step {}{}: {}</li>",
                esc(&v.invariant),
                esc(&v.invariant),
                v.step + 1,
                step.map(|s| format!(" ({})", esc(&s.label())))
                    .unwrap_or_default(),
                esc(&v.detail)
            );
        }
        s.push_str("</ul>\n");
    }
    let _ = writeln!(
        s,
        "<details open><summary>The case in words</summary><pre>{}</pre></details>\n</section>",
        esc(&super::markdown::story(&view, check))
    );
    s
}

#[cfg(test)]
#[path = "html_tests.rs"]
mod tests;
