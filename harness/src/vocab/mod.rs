//! The shared language of every stage: advisory keys, op names, backend identity, replies,
//! verdicts. Pure data, no I/O; everything else may import it.
//!
//! May import nothing of pgchaos.

pub mod backend;
pub mod budget;
pub mod fault;
pub mod key;
pub mod notify;
pub mod object;
pub mod op;
pub mod partition;
pub mod reply;
pub mod schedule;
pub mod setting;
pub mod step;
pub mod timeout;
pub mod verdict;
pub mod versions;
pub mod when;

pub use backend::{BackendId, ServerTime};
pub use key::Key;
pub use op::Op;
pub use partition::{Partition, parse_seeds};
pub use reply::{Outcome, Reply};
pub use setting::Guc;
pub use verdict::{InvariantInfo, Tier, Verdict};
pub use versions::{Versions, parse_pg_version};
pub use when::{Replica, When};
