//! `report.md`: the verdict table and a plain-words story of each minimal case.

use super::Results;
use super::terminal::verdict_table;
use crate::check::{CaseCheck, FirstFailure};
use crate::history::{CaseView, StepView, symbol};
use crate::vocab::BackendId;

/// A plain-words story of a recorded case, one paragraph a step.
pub fn story(view: &CaseView, check: &CaseCheck) -> String {
    let order = view.backend_order();
    let mut out = view
        .steps
        .iter()
        .map(|s| narrate(s, &order, check))
        .collect::<Vec<_>>()
        .join("\n");
    for x in &check.explanations {
        out.push_str(&explanation(x));
    }
    if let Some(u) = &check.unknown {
        out.push_str(&format!(
            "\n\nThe search ran out of budget ({u}): what it could not judge is unknown."
        ));
    }
    out
}

/// A `pg.*` violation as the search explains it: the operation no order can place, what
/// the model said, the prefix that was explained, and the states reached.
pub fn explanation(x: &crate::check::Explanation) -> String {
    let mut s = format!(
        "\n\n**{}**: no order of the case's operations explains {}{} (at {:.3} ms). {} operations, looks and probes before it were explained. What the model said:\n",
        x.invariant,
        x.op,
        x.step
            .map(|s| format!(" (step {})", s + 1))
            .unwrap_or_default(),
        x.at_ns as f64 / 1e6,
        x.explained_before,
    );
    for r in &x.reasons {
        s.push_str(&format!("\n- {r}"));
    }
    s.push_str(&format!(
        "\n\nThe search had reached {} state{}:\n",
        x.states_reached,
        if x.states_reached == 1 { "" } else { "s" }
    ));
    for st in &x.states {
        s.push_str(&format!("\n- {st}"));
    }
    s
}

fn narrate(s: &StepView, order: &[BackendId], check: &CaseCheck) -> String {
    let who = format!("C{}", s.client + 1);
    let op = s.op.map(|o| o.name()).unwrap_or("?");
    let key = s.key.map(|k| format!(" {k}")).unwrap_or_default();
    if let Some(skip) = &s.skip {
        return format!(
            "{}. {who} {op}{key}: skipped ({})",
            s.index + 1,
            skip.reason
        );
    }
    let on = match (s.target(), s.done.as_ref().and_then(|d| d.backend)) {
        (Some(_), _) => String::new(),
        (None, Some(b)) => format!(
            " on {} (pid {}, backend_start {})",
            symbol(order, b),
            b.pid,
            b.backend_start()
        ),
        (None, None) => String::new(),
    };
    let reply = s
        .done
        .as_ref()
        .map(|d| d.value.to_string())
        .unwrap_or_else(|| "no reply recorded".into());
    let mut line = format!("{}. {who} {op}{key}{on}: got {reply}", s.index + 1);
    if let (Some(e), Some(d)) = (check.expected_at(s.index), &s.done)
        && !e.same_as(&d.value)
    {
        line.push_str(&format!(" (the model predicted {e})"));
    }
    if let Some(t) = s.target() {
        line.push_str(&format!(
            " [target {} pid {}, backend_start {}]",
            symbol(order, t),
            t.pid,
            t.backend_start()
        ));
    }
    if let Some(obs) = &s.obs_after {
        let held: Vec<String> = obs
            .held()
            .into_iter()
            .map(|(b, k)| format!("{} holds {k}", symbol(order, b)))
            .collect();
        line.push_str(&format!(
            ". Afterwards pg_locks: {}.",
            if held.is_empty() {
                "no advisory locks".to_string()
            } else {
                held.join(", ")
            }
        ));
    }
    if !s.probes_after.is_empty() {
        let probes: Vec<String> = s
            .probes_after
            .iter()
            .map(|(k, ok)| format!("{k} {}", if *ok { "free" } else { "taken" }))
            .collect();
        line.push_str(&format!(" A fresh contender finds: {}.", probes.join(", ")));
    }
    for v in check.at_step(s.index) {
        line.push_str(&format!("\n   -> {} violated: {}", v.invariant, v.detail));
    }
    line
}

/// The whole `report.md`.
pub fn report(
    results: &Results,
    description: Option<&str>,
    run_dir: &std::path::Path,
    failures: &[FirstFailure],
) -> String {
    let r = results;
    let versions = crate::report::versions_text(
        &r.versions.postgres,
        &r.pooler,
        r.versions.pooler.as_deref(),
        r.versions.pooler_declared.as_deref(),
    );
    let mut md = format!(
        "# pgchaos report: {name}\n\n{desc}\n\n- versions: {versions}\n- version drift: {drift}\n- pool mode: {mode}\n- seed: {seed}\n- cases: {cases}, steps: {steps} ({skipped} skipped)\n- passed (verdicts match `expect`): **{passed}**\n\n```\n{table}\n```\n",
        name = r.topology,
        desc = description.unwrap_or_default(),
        drift = if r.version_drift.is_empty() {
            "none".to_string()
        } else {
            r.version_drift.join("; ")
        },
        mode = r.pool_mode.as_deref().unwrap_or("direct (no pooler)"),
        seed = r.seed,
        cases = r.cases,
        steps = r.steps,
        skipped = r.skipped_steps,
        passed = r.passed,
        table = verdict_table(r),
    );
    let notes = super::terminal::verdict_notes(r);
    md.push_str(&format!(
        "\nWhat the verdicts rest on:\n\n{}\n",
        notes
            .iter()
            .map(|n| format!("- {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    ));
    for f in failures {
        let Some((events, check)) = &f.evidence else {
            continue;
        };
        let Ok(view) = CaseView::build(events) else {
            continue;
        };
        md.push_str(&format!(
            "\n## {inv}\n\n{what}: {n} steps (from {orig}; {runs} shrink runs). Reproduce: `pgchaos reproduce {dir}/failures/{inv}/case.yaml` or `pgchaos reproduce --seed {seed} --invariant {inv} {file}`\n\n{story}\n",
            inv = f.invariant,
            n = view.steps.len(),
            orig = f.original.len(),
            runs = f.shrink_runs,
            what = if f.unshrunk() {
                "Failing case as it ran (not shrunk)"
            } else {
                "Minimal case"
            },
            dir = run_dir.display(),
            seed = f.case_seed.unwrap_or(0),
            file = r.topology_file,
            story = story(&view, check),
        ));
    }
    md
}
