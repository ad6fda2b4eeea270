//! Verdicts and tiers: how an invariant is judged and which layer it speaks about. The
//! invariants themselves live in the checker (`check::invariants`), each behind the
//! `Invariant` trait; what the rest of the harness knows of one is its [`InvariantInfo`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// Whether an invariant holds (or is expected to hold) in a topology.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    #[default]
    Holds,
    Violated,
    /// Not judged: the search ran out of budget on every case, or nothing that exercises the
    /// invariant was judged. Never an expectation, never "holds".
    Unknown,
    /// An expectation only (`expect_concurrent:`): the schedule's timing decides whether a run
    /// reaches the violation, and confirmation runs saw both. Met by `holds` or `violated`,
    /// never by `unknown`.
    Either,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Unknown => "unknown",
            Verdict::Either => "either",
        }
    }

    /// Whether this verdict meets an expectation.
    pub fn meets(self, expected: Verdict) -> bool {
        self == expected || (expected == Verdict::Either && self != Verdict::Unknown)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which layer an invariant speaks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// PostgreSQL's own semantics, per backend. Must always hold; a violation is a bug in
    /// PostgreSQL, the pooler or the harness.
    Pg,
    /// What the application (a logical client) believes. May be expected violated behind a pooler.
    App,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Pg => "pg",
            Tier::App => "app",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the harness outside the checker knows of one invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvariantInfo {
    /// `pg.exclusion`, `app.mutual_exclusion`, ...
    pub name: &'static str,
    pub tier: Tier,
    /// One line, for tables and `--help`.
    pub meaning: &'static str,
}
