//! Client profiles: one tool's advisory-locking protocol as it runs it (`profiles/NAME.yaml`:
//! the lock call, the key, what a failed try does, the work under the lock, the unlock and
//! whether its result is checked, the tool's timeout), composed with a topology's servers
//! into a runnable topology; and the matrix's outcome classes, from the facts of a run
//! (read from its results and history by `report::matrix`, never from the servers).
//!
//! May import `vocab`, `topology`, `safe_fs` (its safe file reads) and the checker's `catalog`.
//!
//! A profile file is the `workload:` section of a topology (a scripted group of replicas,
//! steps guarded with `when:`) plus `tool:`, `waits_forever:`, `expected:` (the cell the
//! matrix should show on each topology, written before running), `fix:` (what to change
//! where a cell is unsafe, by class) and `detect:` (the packages that identify the tool in a
//! project's dependency files, read by `deps.rs`, for `pgchaos init`). The shipped profiles are also built into the binary (`embedded`). Composition keeps the
//! profile's lines where they are, so an error in its script is reported at the profile's
//! own line and column.

use crate::topology::Topology;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The topologies a matrix runs when none are named (the five).
pub const DEFAULT_TOPOLOGIES: [&str; 5] = [
    "direct",
    "session-mode",
    "transaction-mode",
    "transaction-mode-xact",
    "transaction-mode-reset-always",
];

/// A `raise` message starting so is the harness's own stop (a tool that waits forever,
/// stopped at the harness's patience), not the tool's error path.
pub const HARNESS_STOP: &str = "pgchaos:";

/// What happened to a tool on a topology, worst first (a cell shows its worst class).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Class {
    /// Two replicas inside the critical section at once (`app.mutual_exclusion` or
    /// `app.applied_once` violated).
    #[serde(rename = "ran twice")]
    RanTwice,
    /// A holder lost its lock to a fault of the servers (`app.no_lost_lock`).
    #[serde(rename = "lost")]
    Lost,
    /// A lock still held once every replica had finished, by a live backend no replica
    /// believes holds it (`app.no_orphans` at the case's end).
    #[serde(rename = "leaked")]
    Leaked,
    /// An op missed its bound (`app.progress`), or a tool that waits forever for its lock
    /// was still waiting when the harness's patience (`lock_timeout`) ran out.
    #[serde(rename = "stuck")]
    Stuck,
    /// A notification did not reach the client that listened for it, or reached one that
    /// never listened (`app.notifications_arrive`): a LISTEN-based runner with a polling
    /// fallback only runs the job late. Below `stuck` (nothing waits forever), above
    /// `error path` (nothing tells the tool).
    #[serde(rename = "missed")]
    Missed,
    /// The tool's own error path (a `raise`: its timeout error, "another migration is
    /// running", "failed to release").
    #[serde(rename = "error path")]
    ErrorPath,
    #[serde(rename = "safe")]
    Safe,
}

impl Class {
    pub const ALL: [Class; 7] = [
        Class::RanTwice,
        Class::Lost,
        Class::Leaked,
        Class::Stuck,
        Class::Missed,
        Class::ErrorPath,
        Class::Safe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::RanTwice => "ran twice",
            Class::Lost => "lost",
            Class::Leaked => "leaked",
            Class::Stuck => "stuck",
            Class::Missed => "missed",
            Class::ErrorPath => "error path",
            Class::Safe => "safe",
        }
    }

    pub fn from_name(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The invariant whose minimal case is this class's evidence, if one is.
    pub fn invariants(self) -> &'static [&'static str] {
        match self {
            Class::RanTwice => &["app.mutual_exclusion", "app.applied_once"],
            Class::Lost => &["app.no_lost_lock"],
            Class::Leaked => &["app.no_orphans", "app.unlock_reaches_owner"],
            Class::Stuck => &["app.progress"],
            Class::Missed => &["app.notifications_arrive"],
            Class::ErrorPath | Class::Safe => &[],
        }
    }

    /// The classes a fix is owed for: the critical section ran twice, a lock was lost or
    /// left behind, a replica waited past its bound, a notification went astray. `error
    /// path` is the tool failing loudly on its own, and `safe` is safe.
    pub fn is_unsafe(self) -> bool {
        self < Class::ErrorPath
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile file.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The file's stem: `rails`.
    pub name: String,
    pub path: PathBuf,
    /// For people: the tool and version whose source the protocol follows.
    pub tool: String,
    /// The tool's blocking lock has no timeout of its own, or its retry loop no bound.
    pub waits_forever: bool,
    /// Topology name -> the cell expected there (written before running).
    pub expected: BTreeMap<String, Class>,
    /// The packages that identify the tool in a project's dependency files (`detect:`;
    /// `pgchaos init` picks the profile when one of them is a dependency). Empty for an
    /// application rather than a library (authentik): nothing depends on it.
    pub detect: Vec<Detect>,
    /// What to change where a cell shows an unsafe class (`fix:`, by class): the answer
    /// table prints it under each unsafe cell's profile. Written from the tool's docs, its
    /// issue threads and the matrix's own safe columns.
    pub fix: BTreeMap<Class, String>,
    pub text: String,
}

/// A package ecosystem, as dependency files name packages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// Go modules (`go.mod`): module paths, `github.com/golang-migrate/migrate/v4`.
    Go,
    /// RubyGems (`Gemfile.lock`): gem names.
    Ruby,
    /// npm (`package.json`): package names, scoped ones with their scope.
    Npm,
    /// crates (`Cargo.toml`): crate names (`-` and `_` alike).
    Cargo,
    /// PyPI (`requirements*.txt`, `pyproject.toml`): names normalised as PEP 503 says.
    Pypi,
    /// Hex (`mix.lock`): package names.
    Hex,
    /// Maven (`pom.xml`): `groupId:artifactId`.
    Maven,
}

impl Ecosystem {
    pub const ALL: [Ecosystem; 7] = [
        Ecosystem::Go,
        Ecosystem::Ruby,
        Ecosystem::Npm,
        Ecosystem::Cargo,
        Ecosystem::Pypi,
        Ecosystem::Hex,
        Ecosystem::Maven,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Ecosystem::Go => "go",
            Ecosystem::Ruby => "ruby",
            Ecosystem::Npm => "npm",
            Ecosystem::Cargo => "cargo",
            Ecosystem::Pypi => "pypi",
            Ecosystem::Hex => "hex",
            Ecosystem::Maven => "maven",
        }
    }

    /// A package name as this ecosystem compares them: PyPI's PEP 503 normal form
    /// (lowercase, runs of `-`, `_`, `.` as one `-`), crates with `_` as `-` and lowercase;
    /// the others as written.
    pub fn normalise(self, name: &str) -> String {
        let name = name.trim();
        match self {
            Ecosystem::Pypi => {
                let mut out = String::new();
                let mut sep = false;
                for ch in name.chars() {
                    if matches!(ch, '-' | '_' | '.') {
                        sep = true;
                    } else {
                        if sep && !out.is_empty() {
                            out.push('-');
                        }
                        sep = false;
                        out.extend(ch.to_lowercase());
                    }
                }
                out
            }
            Ecosystem::Cargo => name.replace('_', "-").to_lowercase(),
            _ => name.to_string(),
        }
    }
}

/// A `detect:` entry: a package of an ecosystem that identifies the tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detect {
    pub ecosystem: Ecosystem,
    pub package: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    tool: String,
    #[serde(default)]
    waits_forever: bool,
    #[serde(default)]
    expected: BTreeMap<String, String>,
    #[serde(default)]
    detect: Vec<Detect>,
    #[serde(default)]
    fix: BTreeMap<String, String>,
    #[allow(dead_code)]
    workload: serde::de::IgnoredAny,
}

/// `rails` -> `profiles/rails.yaml` (here or in the nearest ancestor that has it); a
/// path (with `/` or `.yaml`) as it is.
pub fn resolve(arg: &str) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    crate::topology::resolve_in("profiles", arg, &cwd)
}

/// Every profile in the `profiles/` directory (here or in the nearest ancestor), by name.
pub fn all() -> Result<Vec<String>> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let Some(dir) = cwd
        .ancestors()
        .map(|d| d.join("profiles"))
        .find(|p| p.is_dir())
    else {
        bail!(
            "no profiles/ directory in {} or above it: name profiles with --profiles",
            cwd.display()
        );
    };
    let mut names = vec![];
    for e in std::fs::read_dir(&dir).with_context(|| format!("{}: reading", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            names.push(p.file_stem().unwrap_or_default().to_string_lossy().into());
        }
    }
    names.sort();
    Ok(names)
}

impl Profile {
    pub fn load(path: &Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read the profile", path.display()))?;
        Profile::parse(&text, path)
    }

    /// Parse a profile; its script is checked by composing it with a direct topology.
    pub fn parse(text: &str, path: &Path) -> Result<Profile> {
        let raw: RawProfile =
            serde_saphyr::from_str(text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let mut expected = BTreeMap::new();
        for (t, c) in raw.expected {
            let class = Class::from_name(&c).ok_or_else(|| {
                anyhow!(
                    "{}: expected.{t}: unknown outcome class {c:?} (one of: {})",
                    path.display(),
                    Class::ALL.map(Class::name).join(", ")
                )
            })?;
            expected.insert(t, class);
        }
        let mut fix = BTreeMap::new();
        for (c, text) in raw.fix {
            let class = Class::from_name(&c)
                .filter(|c| c.is_unsafe())
                .ok_or_else(|| {
                    anyhow!(
                        "{}: fix.{c}: not an unsafe outcome class (one of: {})",
                        path.display(),
                        Class::ALL
                            .into_iter()
                            .filter(|c| c.is_unsafe())
                            .map(Class::name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            if let Some(ch) = text.chars().find(|ch| ch.is_control() && *ch != '\n') {
                bail!(
                    "{}: fix.{c}: a control character {ch:?} in the text",
                    path.display()
                );
            }
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if text.is_empty() {
                bail!("{}: fix.{c}: empty", path.display());
            }
            fix.insert(class, text);
        }
        for d in &raw.detect {
            if d.package.trim().is_empty() || d.package.chars().any(char::is_whitespace) {
                bail!(
                    "{}: detect: package {:?} ({}): a package name, without spaces",
                    path.display(),
                    d.package,
                    d.ecosystem.name()
                );
            }
            if d.ecosystem == Ecosystem::Maven && d.package.split(':').count() != 2 {
                bail!(
                    "{}: detect: maven package {:?}: write it groupId:artifactId (org.flywaydb:flyway-core)",
                    path.display(),
                    d.package
                );
            }
        }
        let p = Profile {
            name: path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into(),
            path: path.to_path_buf(),
            tool: raw.tool,
            waits_forever: raw.waits_forever,
            expected,
            detect: raw.detect,
            fix,
            text: text.to_string(),
        };
        // The script itself: parsed as a topology would parse it, errors at its lines.
        p.compose(
            "postgres:\n  version: \"18.6\"\n",
            "direct",
            &Compose::default(),
        )?;
        Ok(p)
    }

    /// A topology text: this profile's `workload:` (at its own lines, the other keys of the
    /// profile commented out) with the servers of `base` (a topology's text: every key but
    /// name, description, workload, run, expect and faults) and a concurrent `run:`.
    /// Returns the text and the parsed topology; errors name the profile's file and line.
    pub fn compose(&self, base: &str, base_name: &str, c: &Compose) -> Result<(String, Topology)> {
        let mut out = String::new();
        for (key, lines) in sections(&self.text) {
            for line in lines {
                if key.as_deref() == Some("workload") || key.is_none() {
                    out.push_str(&replicas_line(line, c.replicas));
                } else {
                    out.push_str("# ");
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        let name = format!("{}--{base_name}", self.name);
        out.push_str(&format!(
            "\n# Composed by pgchaos matrix: profile {} ({}) on the servers of topology {base_name}.\n",
            self.path.display(),
            self.tool
        ));
        out.push_str(&format!("name: {name}\n"));
        out.push_str(&format!(
            "description: >-\n  {} as replicas on {base_name}.\n",
            self.tool.replace(':', " -")
        ));
        for (key, lines) in sections(base) {
            let skip = matches!(
                key.as_deref(),
                None | Some("name" | "description" | "workload" | "run" | "expect" | "faults")
            );
            if !skip {
                for line in lines {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out.push_str(&format!(
            "run:\n  schedule: concurrent\n  cases: {}\n  seed: {}\n  time_limit: 5m\n  op_deadline: {}ms\n  max_shrink_runs: {}\n",
            c.cases,
            c.seed,
            c.op_deadline_ms,
            c.max_shrink_runs
        ));
        if c.time_scale_milli != 1000 {
            out.push_str(&format!(
                "  time_scale: {}   # every duration of the script, lock_timeout included\n",
                f64::from(c.time_scale_milli) / 1000.0
            ));
        }
        let topo = Topology::parse(&out, &self.path, &crate::catalog()).map_err(|e| {
            anyhow!(
                "{e}\n(profile {} composed with topology {base_name})",
                self.path.display()
            )
        })?;
        if topo.workload.script.is_empty() {
            bail!(
                "{}: a profile needs `workload.script`: its replicas' protocol",
                self.path.display()
            );
        }
        Ok((out, topo))
    }
}

/// How a profile is composed with a topology.
#[derive(Clone, Debug)]
pub struct Compose {
    /// Replaces every script group's `clients:` (a group is a deploy of N pods; the
    /// profile's own counts when `None`).
    pub replicas: Option<u32>,
    pub seed: u64,
    pub cases: u32,
    pub max_shrink_runs: u32,
    pub op_deadline_ms: u64,
    /// `run.time_scale` of the composed topology, in thousandths (1000: as written).
    pub time_scale_milli: u32,
}

impl Default for Compose {
    fn default() -> Compose {
        Compose {
            replicas: None,
            seed: 1,
            cases: 1,
            max_shrink_runs: 6,
            op_deadline_ms: 2000,
            time_scale_milli: 1000,
        }
    }
}

/// A YAML text's top-level sections in order: `(Some(key), lines)`, or `(None, lines)` for
/// comments and blank lines before the first key. Block style, keys at column 0.
fn sections(text: &str) -> Vec<(Option<String>, Vec<&str>)> {
    let mut out: Vec<(Option<String>, Vec<&str>)> = vec![(None, vec![])];
    for line in text.lines() {
        let top = line
            .chars()
            .next()
            .is_some_and(|ch| !ch.is_whitespace() && ch != '#' && ch != '-')
            && line.contains(':');
        if top {
            let key = line.split(':').next().unwrap_or("").trim().to_string();
            out.push((Some(key), vec![line]));
        } else {
            out.last_mut().expect("one").1.push(line);
        }
    }
    out
}

/// A `- clients: N` line with N replaced (same line, same columns before it, a trailing
/// `# comment` kept).
fn replicas_line(line: &str, replicas: Option<u32>) -> String {
    let Some(n) = replicas else {
        return line.to_string();
    };
    let t = line.trim_start();
    let Some(rest) = t.strip_prefix("- clients:") else {
        return line.to_string();
    };
    let value = rest.find(" #").map_or(rest, |i| &rest[..i]).trim();
    if value.parse::<u32>().is_err() {
        return line.to_string();
    }
    // What follows the number, as written (its spaces and comment).
    let lead = rest.len() - rest.trim_start().len();
    let comment = &rest[lead + value.len()..];
    format!("{}- clients: {n}{comment}", &line[..line.len() - t.len()])
}

/// What one run showed, read from its results and its history (generated cases only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFacts {
    /// Invariants violated in the run.
    pub violated: BTreeSet<String>,
    /// The tool's errors raised, with how many times each.
    pub raised: BTreeMap<String, u32>,
    /// Blocking lock calls that ended at `lock_timeout` (55P03).
    pub lock_timeouts: u32,
    /// The orphaned locks at a case's end (pg_locks), where `app.no_orphans` was violated:
    /// `pid N (backend_start) key K`.
    pub leaked: Vec<String>,
    /// Invariants a class rests on (`Class::invariants`) that the run could not judge
    /// (verdict `unknown`): the run's classes say nothing about them, and the cell says so
    /// (`unknown: ...`) rather than passing for `safe` on them.
    #[serde(default)]
    pub unknown: BTreeSet<String>,
}

impl RunFacts {
    /// Every class the run showed (`safe` alone when none other).
    pub fn classes(&self, waits_forever: bool) -> BTreeSet<Class> {
        // A class that rests on invariants is shown when one of them is violated (the
        // table `Class::invariants` is the one mapping).
        let mut out: BTreeSet<Class> = Class::ALL
            .into_iter()
            .filter(|c| c.invariants().iter().any(|i| self.violated.contains(*i)))
            .collect();
        // A tool that waits (or retries) forever, stopped at the harness's patience: its
        // blocking lock ended at lock_timeout, or a retry loop ran out and the script raised
        // the harness's stop.
        let stopped = self.raised.keys().any(|m| m.starts_with(HARNESS_STOP));
        if waits_forever && (self.lock_timeouts > 0 || stopped) {
            out.insert(Class::Stuck);
        }
        if self.raised.keys().any(|m| !m.starts_with(HARNESS_STOP)) {
            out.insert(Class::ErrorPath);
        }
        if out.is_empty() {
            out.insert(Class::Safe);
        }
        out
    }

    /// Whether `name` is an invariant some class rests on (`Class::invariants`).
    pub fn class_invariant(name: &str) -> bool {
        Class::ALL.iter().any(|c| c.invariants().contains(&name))
    }

    /// A `pg.*` invariant was violated: PostgreSQL, the pooler or pgchaos is wrong, and the
    /// cell cannot be trusted until that is understood.
    pub fn pg_violated(&self) -> bool {
        self.violated.iter().any(|n| n.starts_with("pg."))
    }
}

/// The shipped profiles and topologies, built into the binary (`build.rs`): `(name, text)`.
pub mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

/// The profiles built into this binary (those of `profiles/` when it was built).
pub fn shipped() -> Result<Vec<Profile>> {
    embedded::PROFILES
        .iter()
        .map(|(name, text)| Profile::parse(text, Path::new(&format!("profiles/{name}.yaml"))))
        .collect()
}

impl Profile {
    /// The packages found that identify this profile's tool (its `detect:` entries).
    pub fn detected<'f>(&self, found: &'f [deps::Found]) -> Vec<&'f deps::Found> {
        found
            .iter()
            .filter(|f| {
                self.detect.iter().any(|d| {
                    d.ecosystem == f.ecosystem
                        && d.ecosystem.normalise(&d.package) == f.ecosystem.normalise(&f.package)
                })
            })
            .collect()
    }
}

pub mod deps;

#[cfg(test)]
mod tests;
