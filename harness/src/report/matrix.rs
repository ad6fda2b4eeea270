//! The compatibility matrix as people read it: `matrix.json` ([`Matrix`], the typed
//! result), `matrix.md` (profile x topology, each cell its worst outcome class with how
//! many seeds showed it, linked to its minimal evidence), `matrix.html`, and JUnit cases
//! (one per cell, failed when the cell differs from the profile's expectation).

use super::html::page;
use super::junit::JunitCase;
use super::markup::esc;
use crate::history::{At, Body, HistoryReader, Phase};
use crate::profile::{Class, RunFacts};
use crate::vocab::reply::code;
use crate::vocab::{BackendId, Key, Op, Partition};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// A matrix run: the whole matrix, one partition of it (`--partition K/N`), or partitions
/// merged (`pgchaos merge`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// The pgchaos version that ran it.
    #[serde(default)]
    pub pgchaos: String,
    /// `PostgreSQL 18.6 + PgBouncer 1.24.1 (declared 1.25.2)`, from the first run.
    pub versions: String,
    /// Each server's version as it ran (`postgres`, `pgbouncer`), over the runs: what
    /// `merge` compares (a partition of direct cells only ran no PgBouncer).
    #[serde(default)]
    pub servers: BTreeMap<String, String>,
    /// Where a server that ran is not the release its topology declares (each run's
    /// `version_drift`, over the runs).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub drift: BTreeSet<String>,
    pub seeds: Vec<u64>,
    /// `--replicas`, when it overrode the profiles' own counts.
    pub replicas: Option<u32>,
    /// Every duration of the profiles' scripts was multiplied by this many thousandths
    /// (`--time-scale`; 1000: as the profiles are written).
    #[serde(default = "as_written")]
    pub time_scale_milli: u32,
    /// `once`: a cell's runs shrink each violated invariant in the first seed's run that
    /// violates it; `every`: each run shrinks its own.
    #[serde(default)]
    pub shrink: String,
    #[serde(default)]
    pub max_shrink_runs: u32,
    pub profiles: Vec<ProfileRow>,
    pub topologies: Vec<String>,
    /// Every cell of the whole matrix in order, with a fingerprint of what it was composed
    /// from: what `--partition` splits and `merge` checks.
    #[serde(default)]
    pub plan: Vec<PlannedCell>,
    /// The share of the plan these cells are (`None`: all of it).
    #[serde(default)]
    pub partition: Option<Partition>,
    /// Merged from this many partitions (0: not a merge).
    #[serde(default)]
    pub merged: u32,
    /// Cells run at once (child processes).
    #[serde(default)]
    pub jobs: u32,
    /// `--accept`: classes that fail no cell.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub accept: BTreeSet<Class>,
    /// `--require-expected`: a cell that does not reach its written expectation fails.
    #[serde(default)]
    pub require_expected: bool,
    /// Row by row (profile), column by column (topology): the cells run (a partition's own).
    pub cells: Vec<Cell>,
    /// Wall time (a merge: the longest partition's).
    pub run_ms: u64,
}

fn as_written() -> u32 {
    1000
}

/// A cell of the plan: which profile on which topology, and a fingerprint of the two files
/// it is composed from (their texts), so partitions made from different files are refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCell {
    pub profile: String,
    pub topology: String,
    pub fingerprint: String,
}

/// FNV-1a, 64 bits, in hex: a fingerprint of texts (not a security measure).
pub fn fingerprint(texts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in texts {
        for b in t.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileRow {
    pub name: String,
    pub tool: String,
    /// The profile file.
    pub file: String,
    /// The profile's `fix:`, by unsafe class (`report::answer` prints it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fix: BTreeMap<Class, String>,
}

/// One profile on one topology, over the seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub profile: String,
    pub topology: String,
    /// The composed topology file (relative to the matrix directory).
    pub topology_file: String,
    /// What the profile's `expected:` says, written before running. `None`: nothing is
    /// written for this topology, and the cell is held to safe (an unsafe class fails it
    /// unless accepted).
    pub expected: Option<Class>,
    /// Classes accepted on this cell whatever it expects (`--accept`): they never fail it.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub accepted: BTreeSet<Class>,
    /// `--require-expected`: a written expectation the seeds did not reach (a safer class
    /// than expected) fails the cell; without it the cell reports it and passes.
    #[serde(default)]
    pub require_expected: bool,
    /// The worst class any seed showed (`None`: every run failed to run).
    pub worst: Option<Class>,
    /// How many seeds showed `worst`.
    pub count: u32,
    pub runs: Vec<CellRun>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellRun {
    pub seed: u64,
    /// The run directory (relative to the matrix directory), if the run completed.
    pub dir: Option<String>,
    pub classes: BTreeSet<Class>,
    pub facts: RunFacts,
    /// The minimal case behind the worst class (relative to the matrix directory).
    pub evidence: Option<String>,
    /// The run did not complete: why (the harness's error).
    pub error: Option<String>,
    pub run_ms: u64,
}

impl Cell {
    /// The cell from its runs: the worst class over the seeds and how many showed it.
    pub fn fold(&mut self) {
        self.worst = self
            .runs
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| r.classes.first().copied())
            .min();
        self.count = match self.worst {
            Some(w) => self.runs.iter().filter(|r| r.classes.contains(&w)).count() as u32,
            None => 0,
        };
    }

    /// The cell fails the gate: it could not run; or it shows an unsafe class that is not
    /// accepted (`--accept`) and is worse than its written expectation, or any unsafe class
    /// when nothing is written (a cell without an expectation expects safe); or, with
    /// `--require-expected`, it did not reach its written expectation.
    pub fn differs(&self) -> bool {
        let Some(w) = self.worst else { return true };
        if self.accepted.contains(&w) {
            return false;
        }
        match self.expected {
            None => w.is_unsafe(),
            Some(e) if w == e => false,
            // Worse than written (classes sort worst first).
            Some(e) if w < e => true,
            Some(_) => self.require_expected,
        }
    }

    /// The written expectation was not reached: the seeds showed only safer classes.
    pub fn not_reached(&self) -> bool {
        matches!((self.worst, self.expected), (Some(w), Some(e)) if w > e)
    }

    /// What the cell is held to, in words: `ran twice (written)`, `safe (nothing written)`,
    /// with the accepted classes.
    pub fn expectation(&self) -> String {
        let mut s = match self.expected {
            Some(e) => e.name().to_string(),
            None => "safe (nothing written)".into(),
        };
        if !self.accepted.is_empty() {
            let a: Vec<&str> = self.accepted.iter().map(|c| c.name()).collect();
            let _ = write!(s, "; accepted: {}", a.join(", "));
        }
        s
    }

    /// Why the cell fails, in a line (`None`: it passes).
    pub fn failure(&self) -> Option<String> {
        if !self.differs() {
            return None;
        }
        Some(match (self.worst, self.expected) {
            (None, _) => "could not run".into(),
            (Some(w), None) => format!(
                "{} is unsafe and nothing written expects it (accept it with --accept {})",
                self.label(),
                w.name().replace(' ', "-")
            ),
            (Some(_), Some(e)) if self.not_reached() => format!(
                "expected {e}, not reached in {} seeds: {} (--require-expected)",
                self.runs.len(),
                self.label()
            ),
            (Some(_), Some(e)) => format!("expected {e}, got {}", self.label()),
        })
    }

    /// The class invariants some completed run could not judge (`unknown`), and no run
    /// found violated: the cell's class says nothing about them.
    pub fn unknown(&self) -> BTreeSet<String> {
        let violated: BTreeSet<&String> =
            self.runs.iter().flat_map(|r| &r.facts.violated).collect();
        self.runs
            .iter()
            .filter(|r| r.error.is_none())
            .flat_map(|r| r.facts.unknown.iter())
            .filter(|n| !violated.contains(n))
            .cloned()
            .collect()
    }

    /// A `pg.*` invariant was violated in one of its runs.
    pub fn pg_violated(&self) -> bool {
        self.runs.iter().any(|r| r.facts.pg_violated())
    }

    /// `ran twice 3/3`.
    pub fn label(&self) -> String {
        match self.worst {
            Some(w) => format!("{w} {}/{}", self.count, self.runs.len()),
            None => "could not run".into(),
        }
    }

    /// The first run's evidence for the worst class, else its report.
    pub fn link(&self) -> Option<String> {
        let w = self.worst?;
        let run = self.runs.iter().find(|r| r.classes.contains(&w))?;
        run.evidence
            .clone()
            .or_else(|| run.dir.as_ref().map(|d| format!("{d}/report.md")))
    }

    /// The other classes seen, besides the worst (`leaked, error path`).
    pub fn also(&self) -> Vec<Class> {
        let all: BTreeSet<Class> = self
            .runs
            .iter()
            .flat_map(|r| r.classes.iter().copied())
            .collect();
        all.into_iter()
            .filter(|c| Some(*c) != self.worst && *c != Class::Safe)
            .collect()
    }
}

impl Matrix {
    /// `time scale 0.5; partition 2/4; 2 cells at a time; 312 s` (the parts that apply).
    pub fn how_run(&self) -> String {
        let mut parts = vec![];
        if self.time_scale_milli != 1000 {
            parts.push(format!(
                "time scale {}",
                f64::from(self.time_scale_milli) / 1000.0
            ));
        }
        if let Some(p) = self.partition {
            parts.push(format!(
                "partition {p} ({} of {} cells)",
                self.cells.len(),
                self.plan.len()
            ));
        }
        if self.merged > 0 {
            parts.push(format!("merged from {} partitions", self.merged));
        }
        if self.jobs > 1 {
            parts.push(format!("{} cells at a time", self.jobs));
        }
        parts.push(format!(
            "{:.0} s{}",
            self.run_ms as f64 / 1000.0,
            if self.merged > 0 {
                " (the longest partition)"
            } else {
                ""
            }
        ));
        parts.join("; ")
    }

    pub fn cell(&self, profile: &str, topology: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.profile == profile && c.topology == topology)
    }

    pub fn differing(&self) -> impl Iterator<Item = &Cell> {
        self.cells.iter().filter(|c| c.differs())
    }

    /// The Markdown table alone; cells link to their evidence under `link_prefix` (`None`:
    /// no links, as in the README, whose runs are not kept in the repository).
    pub fn table(&self, link_prefix: Option<&str>) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| profile | {} |", self.topologies.join(" | "));
        let _ = writeln!(
            s,
            "|---|{}",
            self.topologies.iter().map(|_| "---|").collect::<String>()
        );
        for p in &self.profiles {
            let mut row = format!("| {} |", p.name);
            for t in &self.topologies {
                let text = match self.cell(&p.name, t) {
                    Some(c) => {
                        let mut text = match (c.link(), link_prefix) {
                            (Some(l), Some(prefix)) => format!("[{}]({prefix}{l})", c.label()),
                            _ => c.label(),
                        };
                        let also = c.also();
                        if !also.is_empty() {
                            let names: Vec<&str> = also.iter().map(|c| c.name()).collect();
                            let _ = write!(text, " (+{})", names.join(", "));
                        }
                        let unknown = c.unknown();
                        if !unknown.is_empty() {
                            let names: Vec<&str> = unknown.iter().map(String::as_str).collect();
                            let _ = write!(text, " (unknown: {})", names.join(", "));
                        }
                        if c.differs() {
                            let _ = write!(
                                text,
                                " **expected {}**",
                                c.expected.map(Class::name).unwrap_or("safe")
                            );
                        } else if c.not_reached() {
                            let _ = write!(
                                text,
                                " (expected {}: not reached)",
                                c.expected.map(Class::name).unwrap_or("safe")
                            );
                        } else if c.worst.is_some_and(|w| c.accepted.contains(&w))
                            && c.expected != c.worst
                        {
                            text.push_str(" (accepted)");
                        }
                        if c.pg_violated() {
                            text.push_str(" **pg.\\* violated**");
                        }
                        text
                    }
                    None => "-".into(),
                };
                let _ = write!(row, " {text} |");
            }
            let _ = writeln!(s, "{row}");
        }
        s
    }

    /// `DRIFT: pgbouncer 1.24.1 ran, 1.25.2 declared` (`None`: every server is the
    /// release its topology declares).
    pub fn drift_line(&self) -> Option<String> {
        (!self.drift.is_empty()).then(|| {
            format!(
                "DRIFT: {} (the servers that ran are not the releases the topologies declare)",
                self.drift.iter().cloned().collect::<Vec<_>>().join("; ")
            )
        })
    }

    /// `matrix.md`.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# pgchaos matrix\n");
        if let Some(d) = self.drift_line() {
            let _ = writeln!(s, "**{d}**\n");
        }
        let _ = writeln!(
            s,
            "{}; seeds {}; {}; {}.\n",
            self.versions,
            seeds_text(&self.seeds),
            match self.replicas {
                Some(n) => format!("{n} replicas"),
                None => "each profile's replicas".into(),
            },
            self.how_run()
        );
        let _ = writeln!(
            s,
            "Each cell: the worst outcome class any seed showed, and how many seeds showed it \
             (worst first: ran twice, lost, leaked, stuck, missed, error path, safe), linked to its \
             minimal case; `(+...)` the other classes seen; **expected** where the cell fails the \
             gate: an unsafe class its profile's `expected:` does not name (nothing written \
             expects safe) and `--accept` does not accept.\n"
        );
        s.push_str(&self.table(Some("")));
        let _ = writeln!(s, "\n## Cells\n");
        for c in &self.cells {
            let _ = writeln!(
                s,
                "### {} on {}: {}{}\n",
                c.profile,
                c.topology,
                c.label(),
                match c.failure() {
                    Some(f) => format!(" (FAILS: {f})"),
                    None if c.not_reached() => format!(
                        " (expected {}: not reached in {} seeds)",
                        c.expectation(),
                        c.runs.len()
                    ),
                    None => format!(" (passes; expected {})", c.expectation()),
                }
            );
            let _ = writeln!(s, "Topology: `{}`\n", c.topology_file);
            for r in &c.runs {
                let _ = write!(s, "- seed {}: ", r.seed);
                if let Some(e) = &r.error {
                    let _ = writeln!(s, "did not run: {e}");
                    continue;
                }
                let names: Vec<&str> = r.classes.iter().map(|c| c.name()).collect();
                let _ = write!(s, "{}", names.join(", "));
                if let Some(d) = &r.dir {
                    let _ = write!(s, " ([report]({d}/report.md))");
                }
                if let Some(e) = &r.evidence {
                    let _ = write!(s, " ([minimal case]({e}))");
                }
                s.push('\n');
                if !r.facts.violated.is_empty() {
                    let v: Vec<&str> = r.facts.violated.iter().map(String::as_str).collect();
                    let _ = writeln!(s, "  - violated: {}", v.join(", "));
                }
                for (m, n) in &r.facts.raised {
                    let _ = writeln!(s, "  - raised {n}x: {m}");
                }
                if r.facts.lock_timeouts > 0 {
                    let _ = writeln!(
                        s,
                        "  - lock waits ended at lock_timeout: {}",
                        r.facts.lock_timeouts
                    );
                }
                for l in &r.facts.leaked {
                    let _ = writeln!(s, "  - left held at the end: {l}");
                }
            }
            s.push('\n');
        }
        s
    }

    /// `matrix.html`: the table, cells coloured by class, details on hover and below.
    pub fn html(&self) -> String {
        let mut b = String::new();
        let _ = writeln!(b, "<h1>pgchaos matrix</h1>");
        let _ = writeln!(
            b,
            "<p>{}; seeds {}; {}.</p>",
            esc(&self.versions),
            esc(&seeds_text(&self.seeds)),
            esc(&self.how_run())
        );
        let _ = writeln!(
            b,
            "<style>td.cell a {{ color: inherit; }} td.c-safe {{ background: #e3f4e4; }} td.c-error-path {{ background: #fff4d6; }} td.c-stuck {{ background: #ffe0c2; }} td.c-missed {{ background: #fdebc8; }} td.c-leaked {{ background: #fcd9d0; }} td.c-lost, td.c-ran-twice {{ background: #f7b8ae; font-weight: 600; }} td.differs {{ outline: 3px solid #b3261e; }}</style>"
        );
        let _ = writeln!(b, "<table class=\"matrix\">\n<tr><th>profile</th>");
        for t in &self.topologies {
            let _ = write!(b, "<th>{}</th>", esc(t));
        }
        b.push_str("</tr>\n");
        for p in &self.profiles {
            let _ = write!(
                b,
                "<tr><th title=\"{}\">{}</th>",
                esc(&p.tool),
                esc(&p.name)
            );
            for t in &self.topologies {
                let Some(c) = self.cell(&p.name, t) else {
                    b.push_str("<td>-</td>");
                    continue;
                };
                let class = c
                    .worst
                    .map(|w| w.name().replace(' ', "-"))
                    .unwrap_or_else(|| "none".into());
                let mut title = format!("expected: {}", c.expectation());
                for r in &c.runs {
                    let names: Vec<&str> = r.classes.iter().map(|c| c.name()).collect();
                    let _ = write!(
                        title,
                        "\nseed {}: {}",
                        r.seed,
                        r.error.clone().unwrap_or_else(|| names.join(", "))
                    );
                }
                let mut label = match c.link() {
                    Some(l) => format!("<a href=\"{}\">{}</a>", esc(&l), esc(&c.label())),
                    None => esc(&c.label()),
                };
                let also: Vec<&str> = c.also().iter().map(|c| c.name()).collect();
                if !also.is_empty() {
                    let _ = write!(label, " <small>+{}</small>", esc(&also.join(", ")));
                }
                let unknown = c.unknown();
                if !unknown.is_empty() {
                    let names: Vec<&str> = unknown.iter().map(String::as_str).collect();
                    let _ = write!(label, " <small>unknown: {}</small>", esc(&names.join(", ")));
                }
                if c.differs() {
                    let _ = write!(
                        label,
                        " <small class=\"expected\">expected {}</small>",
                        esc(c.expected.map(Class::name).unwrap_or("safe"))
                    );
                }
                let _ = write!(
                    b,
                    "<td class=\"cell c-{class}{}\" data-profile=\"{}\" data-topology=\"{}\" data-worst=\"{}\" data-expected=\"{}\" title=\"{}\">{label}</td>",
                    if c.differs() { " differs" } else { "" },
                    esc(&c.profile),
                    esc(&c.topology),
                    esc(c.worst.map(Class::name).unwrap_or("")),
                    esc(c.expected.map(Class::name).unwrap_or("")),
                    esc(&title),
                );
            }
            b.push_str("</tr>\n");
        }
        b.push_str("</table>\n");
        b.push_str("<h2>Profiles</h2>\n<ul>\n");
        for p in &self.profiles {
            let _ = writeln!(
                b,
                "<li><code>{}</code>: {} (<code>{}</code>)</li>",
                esc(&p.name),
                esc(&p.tool),
                esc(&p.file)
            );
        }
        b.push_str("</ul>\n");
        page("pgchaos matrix", &b)
    }

    /// JUnit cases: one per cell.
    pub fn junit(&self, read_evidence: impl Fn(&str) -> Option<String>) -> Vec<JunitCase> {
        self.cells
            .iter()
            .map(|c| JunitCase {
                classname: format!("pgchaos.matrix.{}", c.profile),
                name: c.topology.clone(),
                failure: c.failure().map(|message| {
                    let mut body = String::new();
                    for r in &c.runs {
                        let names: Vec<&str> = r.classes.iter().map(|c| c.name()).collect();
                        let _ = writeln!(
                            body,
                            "seed {}: {}",
                            r.seed,
                            r.error.clone().unwrap_or_else(|| names.join(", "))
                        );
                    }
                    if let Some(e) = c.link().and_then(|l| read_evidence(&l).map(|t| (l, t))) {
                        let _ = write!(body, "\n{}:\n{}", e.0, e.1);
                    }
                    (message, body)
                }),
                time_s: c.runs.iter().map(|r| r.run_ms).sum::<u64>() as f64 / 1000.0,
            })
            .collect()
    }
}

/// Combine partitions of one matrix (`(where it came from, its matrix.json)`) into the
/// whole: refused, with the reason, when they come from different pgchaos versions or
/// servers, from different plans (profiles, topologies, files, seeds, settings), when two
/// hold the same cell or the same partition, or when a partition is missing.
pub fn merge(parts: &[(String, Matrix)]) -> std::result::Result<Matrix, String> {
    let Some((first_at, first)) = parts.first() else {
        return Err("nothing to merge: give the partitions' directories".into());
    };
    for (at, m) in parts {
        if m.pgchaos != first.pgchaos {
            return Err(format!(
                "different pgchaos versions: {} in {first_at}, {} in {at}",
                or_unknown(&first.pgchaos),
                or_unknown(&m.pgchaos)
            ));
        }
        let same_plan = m.plan == first.plan
            && m.seeds == first.seeds
            && m.replicas == first.replicas
            && m.time_scale_milli == first.time_scale_milli
            && m.shrink == first.shrink
            && m.max_shrink_runs == first.max_shrink_runs
            && m.accept == first.accept
            && m.require_expected == first.require_expected
            && m.topologies == first.topologies
            && m.profiles
                .iter()
                .map(|p| &p.name)
                .eq(first.profiles.iter().map(|p| &p.name));
        if !same_plan {
            return Err(format!(
                "{first_at} and {at} are not partitions of the same matrix: {}",
                plan_difference(first, m)
            ));
        }
        if m.merged > 0 {
            return Err(format!(
                "{at} is already a merge: merge the partitions themselves"
            ));
        }
    }
    let mut servers: BTreeMap<&String, (&String, &String)> = BTreeMap::new();
    for (at, m) in parts {
        for (server, v) in &m.servers {
            match servers.get(server) {
                Some((va, a)) if *va != v => {
                    return Err(format!(
                        "different servers: {server} {va} in {a}, {v} in {at}"
                    ));
                }
                Some(_) => {}
                None => {
                    servers.insert(server, (v, at));
                }
            }
        }
    }
    // The versions line of a partition that ran the most servers.
    let versions = parts
        .iter()
        .max_by_key(|(_, m)| m.servers.len())
        .map(|(_, m)| m.versions.clone())
        .unwrap_or_default();
    // Partitions: one N, each K once, none missing.
    let n = match first.partition {
        Some(p) => p.n,
        None => 1,
    };
    let mut seen: BTreeMap<u32, &String> = BTreeMap::new();
    for (at, m) in parts {
        let p = m.partition.unwrap_or(Partition { k: 1, n: 1 });
        if p.n != n {
            return Err(format!(
                "partitions of different splits: {first_at} is one of {n}, {at} is {p}"
            ));
        }
        if let Some(other) = seen.insert(p.k, at) {
            return Err(format!("partition {p} is given twice: {other} and {at}"));
        }
    }
    let missing: Vec<String> = (1..=n)
        .filter(|k| !seen.contains_key(k))
        .map(|k| format!("{k}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "partition{} {} missing: the merged matrix would lack {} cells",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            if missing.len() > 1 { "their" } else { "its" }
        ));
    }
    // Cells: each in exactly one partition, and every cell of the plan somewhere.
    let mut owner: BTreeMap<(&str, &str), &String> = BTreeMap::new();
    for (at, m) in parts {
        for c in &m.cells {
            if !first
                .plan
                .iter()
                .any(|p| p.profile == c.profile && p.topology == c.topology)
            {
                return Err(format!(
                    "{at} has a cell the plan does not: {} on {}",
                    c.profile, c.topology
                ));
            }
            if let Some(other) = owner.insert((&c.profile, &c.topology), at) {
                return Err(format!(
                    "overlapping partitions: the cell {} on {} is in {other} and in {at}",
                    c.profile, c.topology
                ));
            }
        }
    }
    if let Some(p) = first
        .plan
        .iter()
        .find(|p| !owner.contains_key(&(p.profile.as_str(), p.topology.as_str())))
    {
        return Err(format!(
            "no partition holds the cell {} on {}: a partition ran without it",
            p.profile, p.topology
        ));
    }
    let mut cells = vec![];
    for p in &first.plan {
        let c = parts
            .iter()
            .flat_map(|(_, m)| &m.cells)
            .find(|c| c.profile == p.profile && c.topology == p.topology)
            .expect("checked above");
        cells.push(c.clone());
    }
    Ok(Matrix {
        versions,
        drift: parts
            .iter()
            .flat_map(|(_, m)| m.drift.iter().cloned())
            .collect(),
        servers: servers
            .into_iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect(),
        partition: None,
        merged: n,
        jobs: parts.iter().map(|(_, m)| m.jobs).max().unwrap_or(0),
        run_ms: parts.iter().map(|(_, m)| m.run_ms).max().unwrap_or(0),
        cells,
        ..first.clone()
    })
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "(unknown)" } else { s }
}

/// What differs between two matrices' plans, in words.
fn plan_difference(a: &Matrix, b: &Matrix) -> String {
    let names = |m: &Matrix| {
        m.profiles
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };
    if names(a) != names(b) {
        return format!(
            "profiles {} against {}",
            names(a).join(","),
            names(b).join(",")
        );
    }
    if a.topologies != b.topologies {
        return format!(
            "topologies {} against {}",
            a.topologies.join(","),
            b.topologies.join(",")
        );
    }
    if a.seeds != b.seeds {
        return format!(
            "seeds {} against {}",
            seeds_text(&a.seeds),
            seeds_text(&b.seeds)
        );
    }
    if a.replicas != b.replicas {
        return format!("--replicas {:?} against {:?}", a.replicas, b.replicas);
    }
    if a.time_scale_milli != b.time_scale_milli {
        return format!(
            "--time-scale {} against {}",
            f64::from(a.time_scale_milli) / 1000.0,
            f64::from(b.time_scale_milli) / 1000.0
        );
    }
    if a.shrink != b.shrink || a.max_shrink_runs != b.max_shrink_runs {
        return format!(
            "shrinking {} (max {}) against {} (max {})",
            a.shrink, a.max_shrink_runs, b.shrink, b.max_shrink_runs
        );
    }
    if a.accept != b.accept || a.require_expected != b.require_expected {
        let show = |m: &Matrix| {
            let names: Vec<&str> = m.accept.iter().map(|c| c.name()).collect();
            format!(
                "--accept {:?}{}",
                names.join(","),
                if m.require_expected {
                    " --require-expected"
                } else {
                    ""
                }
            )
        };
        return format!("{} against {}", show(a), show(b));
    }
    match a.plan.iter().zip(&b.plan).find(|(x, y)| x != y) {
        Some((x, _)) => format!(
            "the files of {} on {} differ (a profile or topology was edited between the runs)",
            x.profile, x.topology
        ),
        None => "the plans differ".into(),
    }
}

/// The facts of a run directory (its `results.json` and history; generated cases only).
pub fn run_facts(run_dir: &Path) -> Result<RunFacts> {
    let results = super::Results::load(run_dir)?;
    let mut f = RunFacts {
        violated: results
            .invariants
            .iter()
            .filter(|i| i.verdict == crate::vocab::Verdict::Violated)
            .map(|i| i.name.clone())
            .collect(),
        unknown: results
            .invariants
            .iter()
            .filter(|i| i.verdict == crate::vocab::Verdict::Unknown)
            .filter(|i| RunFacts::class_invariant(&i.name))
            .map(|i| i.name.clone())
            .collect(),
        ..Default::default()
    };
    let mut in_run = false;
    let mut leaked: BTreeSet<(BackendId, Key)> = BTreeSet::new();
    for ev in HistoryReader::open(run_dir)? {
        let ev = ev?;
        match &ev.body {
            Body::Case(c) => in_run = c.phase == Phase::Run,
            Body::Fail(c) if in_run && c.f == Op::Raise => {
                let msg = match &c.value {
                    crate::vocab::Reply::Error { message, .. } => message.clone(),
                    r => r.to_string(),
                };
                *f.raised.entry(msg).or_default() += 1;
            }
            Body::Fail(c)
                if in_run
                    && c.f.waits_for_lock()
                    && c.value.code() == Some(code::LOCK_NOT_AVAILABLE) =>
            {
                f.lock_timeouts += 1;
            }
            Body::Obs(o) if in_run && o.at == At::End => leaked.extend(o.obs.held()),
            _ => {}
        }
    }
    // Rows only where the checker found an orphan: at the end a closed client's backend
    // may still be exiting, its lock still listed (the checker knows which ones).
    if !f.violated.contains("app.no_orphans") {
        leaked.clear();
    }
    f.leaked = leaked
        .into_iter()
        .map(|(b, k)| format!("pid {} ({}) key {k}", b.pid, b.backend_start()))
        .collect();
    Ok(f)
}

/// `1-3`, or `1, 5, 9`.
pub fn seeds_text(seeds: &[u64]) -> String {
    let contiguous = seeds.windows(2).all(|w| w[1] == w[0] + 1);
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if contiguous && seeds.len() > 2 => format!("{a}-{b}"),
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
#[path = "matrix_tests.rs"]
mod tests;
