//! The checker's search budget per case, by default: the topology's `run.search_states`,
//! `run.search_work` and `run.search_time` when it does not set them, and what a history
//! that does not record its budget was judged with.

/// States held at once.
pub const DEFAULT_SEARCH_STATES: u32 = 20_000;
/// The search's work budget for one case: about 3 s of search on this project's machine
/// under a load of 7 on its 2 cores (360,000 model steps a second, measured re-checking a
/// concurrent history of transaction-mode-settings; docs/checker.md, "The search's
/// budget").
pub const DEFAULT_SEARCH_WORK: u32 = 1_000_000;
/// Wall-clock time for one case's search: a safety net far past what the work takes.
pub const DEFAULT_SEARCH_TIME_MS: u64 = 30_000;
