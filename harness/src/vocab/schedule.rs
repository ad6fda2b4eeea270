//! How a case's steps run: the topology declares it, the runner follows it, the history
//! records it.

use serde::{Deserialize, Serialize};

/// How a case's steps run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// One step at a time, deterministic; a step that would wait forever is skipped.
    #[default]
    Sequential,
    /// Every client its own task, with real waits; sampled alongside.
    Concurrent,
}

impl Schedule {
    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::Sequential => "sequential",
            Schedule::Concurrent => "concurrent",
        }
    }

    pub fn from_name(s: &str) -> Option<Schedule> {
        match s {
            "sequential" => Some(Schedule::Sequential),
            "concurrent" => Some(Schedule::Concurrent),
            _ => None,
        }
    }
}
