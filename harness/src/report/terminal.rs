//! The terminal: the verdict table, a progress bar while a run goes, and a line for each
//! minimal case as soon as it is shrunk (with the command that reproduces it).

use super::Results;
use crate::check::FirstFailure;
use crate::engine::RunEvent;
use std::time::Duration;
use tabled::Tabled;

#[derive(Tabled)]
struct VerdictRow {
    invariant: String,
    tier: String,
    verdict: String,
    expected: String,
    cases: String,
    minimal: String,
}

/// `"1 case"`, `"3 cases"`.
pub fn cases(n: u32) -> String {
    if n == 1 {
        "1 case".into()
    } else {
        format!("{n} cases")
    }
}

/// The verdict table.
pub fn verdict_table(r: &Results) -> String {
    let rows: Vec<VerdictRow> = r
        .invariants
        .iter()
        .map(|i| {
            let mark = if i.verdict.meets(i.expected) {
                ""
            } else if !i.fails(r.require_expected) {
                "  (not reached)"
            } else {
                "  <-- UNEXPECTED"
            };
            VerdictRow {
                invariant: i.name.clone(),
                tier: i.tier.to_string(),
                verdict: format!("{}{mark}", i.verdict),
                expected: i.expected.to_string(),
                cases: if i.unknown_cases > 0 {
                    format!(
                        "{}/{} ({} unknown)",
                        i.violating_cases, r.cases, i.unknown_cases
                    )
                } else {
                    format!("{}/{}", i.violating_cases, r.cases)
                },
                minimal: i
                    .first_failure
                    .as_ref()
                    .map(|f| {
                        if f.unshrunk {
                            format!("{} steps (not shrunk)", f.minimal_steps)
                        } else {
                            format!("{} steps ({} shrink runs)", f.minimal_steps, f.shrink_runs)
                        }
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    tabled::Table::new(rows)
        .with(tabled::settings::Style::sharp())
        .to_string()
}

/// What the verdicts rest on, in lines to print under the table: cases judged, each
/// verdict's note (unknown cases, "rests on nothing", not exercised), why searches ran out,
/// and pg.* violations seen in replays.
pub fn verdict_notes(r: &Results) -> Vec<String> {
    let mut out = vec![format!(
        "judged: {} of {} cases ({} operations, {} looks, {} probes){}",
        r.judged_cases,
        r.cases,
        r.judged.ops(),
        r.judged.reads,
        r.judged.probes,
        if r.thinly_judged() {
            " -- LESS THAN HALF of the cases were judged"
        } else {
            ""
        }
    )];
    for i in &r.invariants {
        if let Some(n) = &i.note {
            out.push(format!("{}: {} ({n})", i.name, i.verdict));
        }
        if i.not_reached() {
            out.push(format!(
                "{}: expected violated, {}{}",
                i.name,
                i.not_reached_note(r.cases),
                if r.require_expected {
                    ": FAILS the run (--require-expected)"
                } else {
                    ": not a failure without --require-expected"
                }
            ));
        }
    }
    for w in &r.unknown_why {
        out.push(format!("unknown: {w}"));
    }
    for v in &r.replay_violations {
        out.push(format!(
            "{} in a {} replay of case {}: {}",
            v.invariant, v.phase, v.case, v.detail
        ));
    }
    out
}

/// One line for a minimal case, printed as soon as it is shrunk.
pub fn finding_line(f: &FirstFailure, at: Duration, topology_file: &str) -> String {
    let minimal = f.minimal().unwrap_or_default();
    let steps: Vec<String> = minimal.iter().map(|s| s.to_string()).collect();
    let seed = f.case_seed.unwrap_or(0);
    format!(
        "[{:.1}s] {} violated in case {} (seed {seed}): minimal {} steps after {} shrink runs: {}\n        reproduce: pgchaos reproduce --seed {seed} --invariant {} {topology_file}",
        at.as_secs_f64(),
        f.invariant,
        f.case_index,
        minimal.len(),
        f.shrink_runs,
        steps.join("; "),
        f.invariant,
    )
}

/// Progress and findings on the terminal (a bar, or plain lines with `--quiet`).
pub struct Progress {
    bar: indicatif::ProgressBar,
    topology_file: String,
}

impl Progress {
    pub fn new(cases: u32, quiet: bool, topology_file: &str) -> Progress {
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(u64::from(cases))
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} cases  {elapsed} elapsed, ETA {eta}  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message("0 invariants violated");
        if !bar.is_hidden() {
            // Elapsed and ETA move while a slow case runs.
            bar.enable_steady_tick(std::time::Duration::from_secs(1));
        }
        Progress {
            bar,
            topology_file: topology_file.to_string(),
        }
    }

    pub fn event(&self, e: RunEvent) {
        match e {
            RunEvent::CaseDone { done, violated, .. } => {
                self.bar.set_position(u64::from(done));
                self.bar
                    .set_message(format!("{violated} invariants violated"));
            }
            RunEvent::Minimal { failure, at } => {
                let line = finding_line(failure, at, &self.topology_file);
                if self.bar.is_hidden() {
                    println!("{line}");
                } else {
                    self.bar.println(line);
                }
            }
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The matrix's progress: on a terminal (and without `--quiet`), a bar with the cells done
/// of all, elapsed, ETA and the cells running, each finished cell's line printed above it;
/// otherwise only the lines, on stderr, as they always were.
pub struct MatrixProgress {
    bar: indicatif::ProgressBar,
    running: std::sync::Mutex<Vec<String>>,
}

impl MatrixProgress {
    pub fn new(cells: usize, quiet: bool) -> MatrixProgress {
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(cells as u64)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} cells  {elapsed} elapsed, ETA {eta}  running: {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        if !bar.is_hidden() {
            bar.enable_steady_tick(std::time::Duration::from_secs(1));
        }
        MatrixProgress {
            bar,
            running: Default::default(),
        }
    }

    fn show_running(&self, running: &[String]) {
        self.bar.set_message(running.join(", "));
    }

    /// A cell started (`profile on topology`).
    pub fn start(&self, cell: &str) {
        let mut r = self.running.lock().unwrap_or_else(|e| e.into_inner());
        r.push(cell.to_string());
        self.show_running(&r);
    }

    /// A cell ended: its line, above the bar or alone on stderr.
    pub fn done(&self, cell: &str, line: &str) {
        let mut r = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = r.iter().position(|c| c == cell) {
            r.remove(i);
        }
        self.show_running(&r);
        self.bar.inc(1);
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
