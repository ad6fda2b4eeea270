//! The events of a history. One JSON object per line; `t` is nanoseconds since the run
//! started (monotonic), `type` says what happened.
//!
//! | type | what |
//! |---|---|
//! | `run` | the first line: format, topology, pooler rules, versions, seed, the contender |
//! | `case` | a case begins (its index, seed, phase: `run`, `shrink`, `evidence`, `replay`) |
//! | `invoke` | a process (`C1`, ..., or `nemesis`) starts an op |
//! | `ok` / `fail` / `info` | it completed: a result; a definite error; outcome unknown |
//! | `skip` | a generated step the schedule did not run, with the reason |
//! | `obs` | what the servers said after a step settled (or before it, in evidence replays) |
//! | `probe` | the fresh contender tried a key |
//! | `notification` | a client received a notification (`LISTEN`/`NOTIFY`): on which backend, from whom |
//! | `case_end` | the case is over (its time in steps and in the reset) |
//! | `run_end` | the run is over |

use super::observation::Observation;
use crate::pooler::PoolRules;
use crate::vocab::{BackendId, Key, Op, Reply, When, budget};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The format written in the `run` event; readers refuse formats other than it and
/// [`READS`].
pub const FORMAT: &str = "pgchaos-history/3";

/// The formats this pgchaos reads: format 1 wrote a pooler's connections as PgBouncer's own
/// rows (PgBouncer was the only pooler then), which are read as PgBouncer's view
/// (`pooler::view`); format 2 writes them in the pooler's common words; format 3 adds the
/// server's time to each op's completion (`Completion::server`) and, since 2026-12-07, to
/// each look (`Observation::server`, an optional field), absent in the older ones (judged by
/// client time alone).
pub const READS: [&str; 3] = ["pgchaos-history/1", "pgchaos-history/2", FORMAT];

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds since the run started.
    pub t: u64,
    #[serde(flatten)]
    pub body: Body,
}

// Observations are the common large variant; boxing them would add an allocation to most
// events of a run for no saving (events live in one Vec per case).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    Run(Box<RunHeader>),
    Case(CaseStart),
    Invoke(Invoke),
    Ok(Completion),
    Fail(Completion),
    Info(Completion),
    Skip(Skip),
    Obs(ObsEvent),
    Probe(ProbeEvent),
    Notification(Notified),
    CaseEnd(CaseEnd),
    RunEnd(RunEnd),
}

/// Who did something: a logical client, or the nemesis (faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    /// 0-based; written `C1`, `C2`, ...
    Client(usize),
    Nemesis,
}

impl Process {
    /// Who runs `op` for client `client`: a fault is the nemesis's, anything else the
    /// client's own.
    pub fn of(op: crate::vocab::Op, client: usize) -> Process {
        if op.is_fault() {
            Process::Nemesis
        } else {
            Process::Client(client)
        }
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(c) => write!(f, "C{}", c + 1),
            Process::Nemesis => f.write_str("nemesis"),
        }
    }
}

impl Serialize for Process {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "nemesis" {
            return Ok(Process::Nemesis);
        }
        s.strip_prefix('C')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n >= 1)
            .map(|n| Process::Client(n - 1))
            .ok_or_else(|| serde::de::Error::custom(format!("unknown process {s:?}")))
    }
}

/// Which part of a chaos run a case belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A generated case.
    Run,
    /// A shrinking candidate.
    Shrink,
    /// The minimal case replayed once with full evidence.
    Evidence,
    /// `reproduce`: a case file replayed.
    Replay,
}

/// The first event of every history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    pub format: String,
    /// The pgchaos version that wrote it.
    pub pgchaos: String,
    pub topology: String,
    /// The topology file as given (its text is kept beside the history as `topology.yaml`).
    pub topology_file: String,
    /// The pooler (`none`, `pgbouncer`) and its rules, as the run used them.
    pub pooler: String,
    pub rules: PoolRules,
    pub seed: u64,
    /// The launcher that started the servers (`native`).
    pub launcher: String,
    pub versions: crate::vocab::Versions,
    /// Milliseconds from launch to ready.
    pub ready_ms: u64,
    /// The CPU the run was pinned to, and the CPUs online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pinned: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_online: Option<usize>,
    /// The fresh contender: a direct backend that never serves a client.
    pub contender: BackendId,
    pub contender_start: String,
    /// The advisory keys of the workload (evidence replays probe each).
    pub keys: Vec<Key>,
    /// The bounds `app.progress` judges ops by.
    #[serde(default)]
    pub bounds: Bounds,
    /// The timeouts the servers ran with (what each does -> milliseconds), for the model.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub timeouts: crate::vocab::timeout::Timeouts,
    /// The checker's budget per case.
    #[serde(default)]
    pub budget: SearchBudget,
    /// UTC start, `YYYYMMDDTHHMMSSZ`.
    pub started: String,
}

/// How long an op may take before it counts as stuck: a lock wait gets `lock_timeout_ms`,
/// and every op `op_deadline_ms` (to get a connection or a pooled server, and to answer);
/// `sleep`, `pg_sleep` and `migrate` add their own duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    pub lock_timeout_ms: u64,
    pub op_deadline_ms: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            lock_timeout_ms: 1,
            op_deadline_ms: 2000,
        }
    }
}

impl Bounds {
    /// The bound of one op, in nanoseconds.
    pub fn of(&self, op: Op, ms: Option<u64>) -> u64 {
        let mut b = self.op_deadline_ms + ms.filter(|_| op.takes_duration()).unwrap_or(0);
        if op.waits_for_lock() {
            b += self.lock_timeout_ms;
        }
        b * 1_000_000
    }
}

/// How far the checker's search may go on one case before it answers unknown: states held at
/// once, the model's work (what decides, the same on any machine), and milliseconds (a safety
/// net).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WrittenBudget")]
pub struct SearchBudget {
    pub max_states: usize,
    pub max_work: u64,
    pub max_ms: u64,
}

/// A [`SearchBudget`] as a history holds it. Histories written before the work budget have
/// none, and their milliseconds were the budget itself (2 s): they read with the default work
/// and the default safety net, so a re-check does not depend on the machine either.
#[derive(Deserialize)]
struct WrittenBudget {
    max_states: usize,
    max_work: Option<u64>,
    max_ms: u64,
}

impl From<WrittenBudget> for SearchBudget {
    fn from(w: WrittenBudget) -> Self {
        let d = SearchBudget::default();
        match w.max_work {
            Some(max_work) => SearchBudget {
                max_states: w.max_states,
                max_work,
                max_ms: w.max_ms,
            },
            None => SearchBudget {
                max_states: w.max_states,
                max_work: d.max_work,
                max_ms: w.max_ms.max(d.max_ms),
            },
        }
    }
}

impl Default for SearchBudget {
    fn default() -> Self {
        // The topology's defaults (`run.search_states`, `run.search_work`,
        // `run.search_time`), which live in `vocab::budget`.
        SearchBudget {
            max_states: budget::DEFAULT_SEARCH_STATES as usize,
            max_work: u64::from(budget::DEFAULT_SEARCH_WORK),
            max_ms: budget::DEFAULT_SEARCH_TIME_MS,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseStart {
    /// The generated case's index (shrink and evidence cases carry the index they shrink).
    pub case: u32,
    /// How the steps ran.
    #[serde(default, skip_serializing_if = "is_sequential")]
    pub schedule: crate::vocab::schedule::Schedule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub phase: Phase,
    /// Shrink and evidence cases: the invariant being shrunk for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invariant: Option<String>,
    pub clients: usize,
    pub steps: usize,
}

fn is_sequential(s: &crate::vocab::schedule::Schedule) -> bool {
    *s == crate::vocab::schedule::Schedule::Sequential
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invoke {
    pub p: Process,
    /// The case step this op runs (sequential schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    pub f: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
    /// Milliseconds, for ops that take a duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// The setting of a `set`, `set_local`, `show` (a `set`'s value is `ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guc: Option<crate::vocab::Guc>,
    /// Faults: the backend acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<BackendId>,
    /// Faults generated as a client's step (terminate, cancel): that client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<usize>,
    /// Scripts: the step's guard (a client profile's control flow), for replays.
    #[serde(default, skip_serializing_if = "When::is_default")]
    pub when: When,
    /// `raise`: the tool's error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Invoke {
    /// An op of `p` with no argument (`open`, `release`, ...).
    /// Step `index` of a case, as `p` invokes it, aimed at `target` (a fault's backend).
    pub fn of_step(
        p: Process,
        index: usize,
        step: &crate::vocab::step::Step,
        target: Option<BackendId>,
    ) -> Invoke {
        Invoke {
            p,
            step: Some(index),
            f: step.op,
            key: step.key,
            ms: step.ms,
            guc: step.guc,
            target,
            client: None,
            when: step.when,
            message: step.message.clone(),
        }
    }

    pub fn bare(p: Process, step: Option<usize>, f: Op) -> Invoke {
        Invoke {
            p,
            step,
            f,
            key: None,
            ms: None,
            guc: None,
            target: None,
            client: None,
            when: Default::default(),
            message: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub p: Process,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    pub f: Op,
    pub value: Reply,
    /// The backend that ran it, as it reported itself (in-band, or found by its tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendId>,
    /// When the server ran it, by the server's clock, as its reply reported (format 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<crate::vocab::ServerTime>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    pub p: Process,
    pub step: usize,
    pub f: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guc: Option<crate::vocab::Guc>,
    #[serde(default, skip_serializing_if = "When::is_default")]
    pub when: When,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub reason: String,
}

impl Skip {
    /// A step not run, and why (its guard, or a fault with no backend to act on).
    pub fn of(p: Process, index: usize, step: &crate::vocab::step::Step, reason: String) -> Skip {
        Skip {
            p,
            step: index,
            f: step.op,
            key: step.key,
            ms: step.ms,
            guc: step.guc,
            when: step.when,
            message: step.message.clone(),
            reason,
        }
    }
}

/// When an observation or probe was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum At {
    /// Before the step ran (evidence replays).
    Before,
    /// After the step settled.
    After,
    /// The concurrent sampler's periodic look (no step).
    Sample,
    /// At the end of a concurrent case, once every op is done and the servers are quiet.
    End,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObsEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    pub at: At,
    /// On disk only: equal to the previous observation, which is not repeated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same: bool,
    /// On disk only: what changed since the previous observation (see `history::delta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<super::delta::ObsDelta>,
    #[serde(flatten)]
    pub obs: Observation,
}

/// Why the contender probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeWhy {
    /// At a boundary the step crossed (commit, rollback, an abort, an unlock that leaves a
    /// count, a terminate, a cancel, a closed server): the checker judges these.
    Boundary,
    /// Every key before the step (evidence replays).
    Before,
    /// Every key after the step (evidence replays).
    After,
    /// Every key at the end of a concurrent case: judged against the model's end state.
    End,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    pub why: ProbeWhy,
    pub key: Key,
    /// The contender could take the key (and released it at once).
    pub available: bool,
}

/// A notification a client received: the only reply that arrives on its own, between or
/// during the client's statements. Written when the harness collects it (after the op it
/// arrived during, before the client's next op or disconnect, at the case's end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notified {
    /// The client whose connection received it.
    pub p: Process,
    /// The backend that sent it to the client: the one serving the client's op when it
    /// arrived, else the one its connection was on (its last op's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendId>,
    pub channel: String,
    /// What the sender sent: `C2 s5` names client C2's `notify` at step 5
    /// (`vocab::notify::payload`).
    pub payload: String,
    /// The notifying backend's pid, as PostgreSQL sent it.
    pub pid: i32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseEnd {
    pub case: u32,
    /// Time in steps: ops, observation, probes, settling.
    pub steps_us: u64,
    /// Time in the reset before the case and the clients' connects.
    pub reset_us: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub cases: u32,
    pub stopped_by_time_limit: bool,
    /// Milliseconds from the first case to the last.
    pub run_ms: u64,
}

impl Event {
    pub fn case_start(&self) -> Option<&CaseStart> {
        match &self.body {
            Body::Case(c) => Some(c),
            _ => None,
        }
    }

    /// A completion (`ok`, `fail` or `info`).
    pub fn completion(&self) -> Option<&Completion> {
        match &self.body {
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) => Some(c),
            _ => None,
        }
    }
}

impl Body {
    /// The completion event for a reply: `ok`, `fail` or `info` by its outcome.
    pub fn completion(c: Completion) -> Body {
        match c.value.outcome() {
            crate::vocab::Outcome::Ok => Body::Ok(c),
            crate::vocab::Outcome::Fail => Body::Fail(c),
            crate::vocab::Outcome::Info => Body::Info(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget round-trips; one written before the work budget reads with the default work
    /// and safety net (its 2 s was the budget itself).
    #[test]
    fn search_budgets_read_old_and_new() {
        let b = SearchBudget {
            max_states: 7,
            max_work: 1234,
            max_ms: 500,
        };
        let back: SearchBudget = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        let old: SearchBudget =
            serde_json::from_str(r#"{"max_states":20000,"max_ms":2000}"#).unwrap();
        assert_eq!(old.max_states, 20000);
        assert_eq!(old.max_work, u64::from(budget::DEFAULT_SEARCH_WORK));
        assert_eq!(old.max_ms, budget::DEFAULT_SEARCH_TIME_MS);
    }

    #[test]
    fn events_are_one_flat_object_each() {
        let e = Event {
            t: 1500,
            body: Body::Invoke(Invoke {
                p: Process::Client(0),
                step: Some(3),
                f: Op::TryLock,
                key: Some(Key::Big(4242424242)),
                ms: None,
                guc: None,
                target: None,
                client: None,
                when: Default::default(),
                message: None,
            }),
        };
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(
            j,
            r#"{"t":1500,"type":"invoke","p":"C1","step":3,"f":"try_lock","key":4242424242}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&j).unwrap(), e);
        let done = Event {
            t: 2000,
            body: Body::completion(Completion {
                p: Process::Nemesis,
                step: Some(3),
                f: Op::Terminate,
                value: Reply::error("closed"),
                backend: None,
                server: None,
            }),
        };
        let j = serde_json::to_string(&done).unwrap();
        assert!(j.contains(r#""type":"info""#), "{j}");
        assert!(j.contains(r#""p":"nemesis""#), "{j}");
        assert_eq!(serde_json::from_str::<Event>(&j).unwrap(), done);
        assert!(serde_json::from_str::<Process>("\"C0\"").is_err());
    }

    #[test]
    fn an_unchanged_observation_is_one_short_line() {
        let e = Event {
            t: 7,
            body: Body::Obs(ObsEvent {
                step: Some(1),
                at: At::After,
                same: true,
                delta: None,
                obs: Observation::default(),
            }),
        };
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(
            j,
            r#"{"t":7,"type":"obs","step":1,"at":"after","same":true}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&j).unwrap(), e);
    }
}
