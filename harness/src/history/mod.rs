//! The history of a run: everything that happened, as one append-only event log (Jepsen's
//! history): case boundaries, each client op as `invoke` then `ok` / `fail` / `info` with the
//! serving backend `(pid, backend_start)`, every fault with its target, every observation and
//! contender probe, on one monotonic clock. The runner records it, the checker judges it, the
//! reporters render from the checker's results; none calls back into an earlier stage.
//!
//! `event` defines the events, `observation` the recorded server views, `recorder` the
//! in-memory buffer of the case in progress, `store` the file (`history.jsonl.gz`, streamed
//! by a writer thread, read back by [`HistoryReader`]) with `delta` its encoding of
//! observations, `view` the folding of a case's events
//! into steps. May import `vocab` and `pooler` (the rules a run recorded); nothing else.

pub mod delta;
pub mod event;
pub mod observation;
pub mod recorder;
pub mod store;
pub mod view;

pub use event::{
    At, Body, Bounds, CaseEnd, CaseStart, Completion, Event, Invoke, Notified, ObsEvent, Phase,
    ProbeEvent, ProbeWhy, Process, RunEnd, RunHeader, SearchBudget, Skip,
};
pub use observation::{
    AppPoolRow, BackendRow, ClientRow, LockRow, LookTime, Observation, PoolRow, PoolerRow,
    ServerRow, ServerState,
};
pub use recorder::Recorder;
pub use store::{HistoryReader, HistoryWriter, Written};
pub use view::{CaseView, StepView, symbol};
