//! pgchaos: chaos and property testing of PostgreSQL advisory locks through connection poolers.
//!
//! The pipeline, one way, Jepsen's roles in brackets:
//! [`topology`] (what runs) -> [`provision`] + [`launch`] (how it runs: the db) ->
//! [`run`] driving [`client`]s (the client) and the [`nemesis`] (faults) with steps from the
//! [`workload`] (the generator), watched by [`observe`] -> [`history`] (everything that
//! happened, one event log) -> [`check`] (the model and the invariants: verdicts from the
//! history alone) -> [`report`] (what a person reads). [`engine`] is the chaos loop that
//! runs, checks and shrinks; [`cli`] the command line. [`vocab`] is the shared language,
//! [`pooler`] the pooler seam, [`sql`] every statement pgchaos sends.

pub mod check;
pub mod cli;
pub mod client;
pub mod container;
pub mod engine;
pub mod history;
pub mod launch;
pub mod nemesis;
pub mod observe;
pub mod pooler;
pub mod profile;
pub mod provision;
pub mod report;
pub mod run;
pub mod safe_fs;
pub mod sql;
pub mod tap;
pub mod tls;
pub mod topology;
pub mod vocab;
pub mod workload;

/// What a topology may name: the checker's invariants (in `expect:`) and the poolers pgchaos
/// knows (their sections).
pub fn catalog() -> topology::Catalog<'static> {
    topology::Catalog {
        invariants: check::catalog(),
        poolers: &pooler::SECTIONS,
    }
}
