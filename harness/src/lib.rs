//! pgchaos: chaos and property testing of PostgreSQL advisory locks through connection poolers.
//!
//! Data flows one way: [`topology`] (what runs) -> [`provision`] + [`launch`] (how it runs)
//! -> [`runner`] driving [`client`]s with steps from [`workload`] -> [`observer`] (what the
//! servers say) -> [`model`] + [`checker`] (what should have happened; verdicts) ->
//! [`report`] (what a person reads). [`engine`] ties a chaos run together; [`sql`] holds
//! every statement; [`cpu`] places a sequential run on one CPU.

pub mod checker;
pub mod cli;
pub mod client;
pub mod cpu;
pub mod engine;
pub mod key;
pub mod launch;
pub mod model;
pub mod observer;
pub mod op;
pub mod provision;
pub mod report;
pub mod runner;
pub mod sql;
pub mod topology;
pub mod workload;
