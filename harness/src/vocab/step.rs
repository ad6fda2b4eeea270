//! One step of a case, as generated, recorded and replayed: a client does an op (on a key,
//! for lock ops; for a duration, for `sleep`, `pg_sleep`, `migrate`). The workload generates
//! steps, the history records them, the checker and the reports name them.

use super::{Guc, Key, Op, When};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One step of a case: a client does an op (on a key, for lock ops; for a duration, for
/// `sleep`, `pg_sleep`, `migrate`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    #[serde(serialize_with = "ser_client", deserialize_with = "de_client")]
    pub client: usize,
    pub op: Op,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key: Option<Key>,
    /// Milliseconds, for the ops that take a duration (and the value a `set` sets).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ms: Option<u64>,
    /// The setting a `set`, `set_local` or `show` names.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub guc: Option<Guc>,
    /// Scripts: when the step runs (a client profile's control flow).
    #[serde(skip_serializing_if = "When::is_default", default)]
    pub when: When,
    /// `raise`: the tool's error message.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
}

fn ser_client<S: Serializer>(c: &usize, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("C{}", c + 1))
}

fn de_client<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let s = String::deserialize(d)?;
    s.strip_prefix('C')
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .map(|n| n - 1)
        .ok_or_else(|| serde::de::Error::custom(format!("client must be C1, C2, ...; got {s:?}")))
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "C{} {}", self.client + 1, self.op)?;
        if let Some(k) = self.key {
            write!(f, " {k}")?;
        }
        if let Some(g) = self.guc {
            write!(f, " {g}")?;
        }
        if let Some(ms) = self.ms {
            // A setting's value in its unit (`vocab::setting`); else a duration.
            match self.guc {
                Some(g) => write!(f, " {}", g.row().unit.label(ms))?,
                None => write!(f, " {ms}ms")?,
            }
        }
        if let Some(m) = &self.message {
            write!(f, " {m:?}")?;
        }
        if !self.when.is_default() {
            write!(f, " (when {})", self.when)?;
        }
        Ok(())
    }
}

/// The tag comment that marks a step's SQL: the statement's text in `pg_stat_activity` says
/// which step sent it (the checker reads it back, `check::waits`).
pub fn tag(step: usize) -> String {
    format!("/*pgchaos s{step}*/")
}
