//! What runs: the YAML topology schema, its validation, and name resolution.
//!
//! A topology file (`topologies/*.yaml`) says which PostgreSQL to start, whether a PgBouncer
//! sits in front of it and how that pooler is configured, what workload the logical clients
//! run, how long and how many cases the chaos engine tries, and which application-level
//! invariants are *expected* to break in that setup. The full reference is
//! `docs/topology.md`.
//!
//! Parsing happens in two layers. A private raw layer is deserialized by `serde-saphyr`
//! with every leaf kept as a [`Spanned`] YAML node, so that every later complaint can point
//! at the offending value. The raw layer is then converted, with all defaults applied and all
//! semantic checks done, into the public [`Topology`]. Errors ([`TopologyError`]) read like a
//! compiler's: `path:line:column: message`, the source line with a caret under the value, and
//! hints on what would be valid.
//!
//! Files: `mod.rs` (the public model, loading, name resolution), `raw.rs` (what serde-saphyr
//! reads), `convert.rs` (defaults and validation), `error.rs` (positioned errors and
//! suggestions), `settings.rs` (the PostgreSQL and PgBouncer settings tables), `pooler.rs`
//! (the pooler's section, read by the pooler itself and held here unnamed). May import
//! `vocab`: which invariants exist is the checker's business, handed in as a catalog, and the
//! search budget's defaults are `vocab::budget`'s (`limits` re-exports them).

mod convert;
pub mod dsn;
mod error;
mod pooler;
mod raw;
mod settings;
#[cfg(test)]
mod tests;

use crate::vocab::{InvariantInfo, Key, Op, Verdict};

pub use convert::parse_duration;
pub use dsn::{SslMode, TlsParams};
use error::*;
pub use error::{TopologyError, close_matches, did_you_mean, write_snippet};
pub use pooler::{Catalog, PoolerConfig, PoolerSection, PoolerSpec, Room, Section, SettingEntry};
use raw::*;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
pub use serde_saphyr::Location;
use serde_saphyr::Spanned;
use settings::*;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Public model
// ---------------------------------------------------------------------------------------------

/// A validated topology: everything a run needs to know about what to start and what to expect.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// `[a-z0-9-]+`; used in reports.
    pub name: String,
    pub description: Option<String>,
    /// Where the servers run: local processes (default) or containers.
    pub launcher: LauncherKind,
    /// `launcher: external`: the deployment's endpoints (`external:`), instead of servers
    /// to start.
    pub external: Option<ExternalSpec>,
    pub postgres: PostgresSpec,
    /// The pooler in front of PostgreSQL (its section, read by the pooler: `pgbouncer:`);
    /// `None`: clients connect straight to PostgreSQL.
    pub pooler: Option<PoolerSpec>,
    /// An application-side pool every logical client's ops go through (like Go's
    /// `database/sql`); `None`: each client has its own connection.
    pub app_pool: Option<AppPool>,
    pub workload: Workload,
    /// Faults of the servers the nemesis injects (their weights are in `workload.ops` too).
    pub faults: Faults,
    pub run: RunSpec,
    /// Invariant name -> expected verdict, for the entries the file lists (all `app.*`).
    /// Use [`Topology::expected`], which defaults to [`Verdict::Holds`].
    pub expect: BTreeMap<String, Verdict>,
    /// The concurrent schedule's expectations where they differ from `expect` (the rest as
    /// `expect` says). Use [`Topology::expected_in`].
    pub expect_concurrent: BTreeMap<String, Verdict>,
    /// The share of cases (percent) that violated an `expect:` entry where the file says
    /// (`violated ~5%`): what a shorter run that did not reach it is told.
    pub expect_rates: BTreeMap<String, f64>,
    /// The same for `expect_concurrent:`.
    pub expect_concurrent_rates: BTreeMap<String, f64>,
    /// The file this topology was read from (as given to [`Topology::load`] / [`Topology::parse`]).
    pub source: PathBuf,
    /// The file's text as read (a run directory keeps a copy, so `analyze` re-checks a run
    /// against the topology it ran, not against a file edited since).
    pub text: String,
}

/// How a topology's servers are started (`launcher:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LauncherKind {
    /// Local processes from the provisioned binaries.
    #[default]
    Native,
    /// Containers of the images built from them (`launch/docker.rs`).
    Docker,
    /// A deployment the harness did not start, named by DSNs (`external:`,
    /// `launch/external.rs`).
    External,
}

impl LauncherKind {
    pub const ALL: [LauncherKind; 3] = [
        LauncherKind::Native,
        LauncherKind::Docker,
        LauncherKind::External,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::Native => "native",
            LauncherKind::Docker => "docker",
            LauncherKind::External => "external",
        }
    }

    pub fn from_name(s: &str) -> Option<LauncherKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The PostgreSQL server the harness starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresSpec {
    /// `MAJOR.MINOR`, e.g. `18.6`.
    pub version: String,
    /// Where `postgres`, `initdb` and `pg_ctl` live; `None` lets the launcher find them.
    pub bin_dir: Option<PathBuf>,
    /// `postgresql.conf` overrides, values rendered to strings (booleans as `on`/`off`).
    pub settings: BTreeMap<String, String>,
    /// Run a streaming standby beside the primary (made with `pg_basebackup`), which the
    /// launcher's promote control turns into the new primary.
    pub standby: bool,
}

/// Which advisory lock API the workload uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `pg_advisory_lock` / `pg_try_advisory_lock` / `pg_advisory_unlock[_all]`.
    Session,
    /// `pg_advisory_xact_lock` / `pg_try_advisory_xact_lock`.
    Xact,
    /// Both.
    Mixed,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Session, Api::Xact, Api::Mixed];

    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Session => "session",
            Api::Xact => "xact",
            Api::Mixed => "mixed",
        }
    }

    fn from_name(s: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// Whether `op` belongs to this API (ops of neither lock API belong to all).
    pub fn allows(self, op: Op) -> bool {
        match self {
            Api::Session => !op.is_xact_api(),
            Api::Xact => !op.is_session_api(),
            Api::Mixed => true,
        }
    }

    /// The op weights used when `workload.ops` does not override them (no zero entries).
    pub fn default_weights(self) -> BTreeMap<Op, u32> {
        const SESSION: &[(Op, u32)] = &[
            (Op::TryLock, 4),
            (Op::Lock, 2),
            (Op::Unlock, 3),
            (Op::UnlockAll, 1),
            (Op::Begin, 2),
            (Op::Commit, 2),
            (Op::Rollback, 2),
            (Op::DiscardAll, 1),
            (Op::Disconnect, 1),
            (Op::Reconnect, 1),
            (Op::Terminate, 1),
            (Op::Cancel, 1),
            (Op::FailStatement, 1),
        ];
        const XACT: &[(Op, u32)] = &[
            (Op::XactLock, 3),
            (Op::TryXactLock, 4),
            (Op::Begin, 3),
            (Op::Commit, 2),
            (Op::Rollback, 2),
            (Op::Disconnect, 1),
            (Op::Reconnect, 1),
            (Op::Terminate, 1),
            (Op::Cancel, 1),
            (Op::FailStatement, 1),
        ];
        const MIXED_EXTRA: &[(Op, u32)] = &[(Op::XactLock, 2), (Op::TryXactLock, 2)];
        let pairs: Vec<(Op, u32)> = match self {
            Api::Session => SESSION.to_vec(),
            Api::Xact => XACT.to_vec(),
            Api::Mixed => SESSION.iter().chain(MIXED_EXTRA).copied().collect(),
        };
        pairs.into_iter().collect()
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A deployment the harness did not start (`external:`): DSNs as written, `${VAR}`
/// references expanded from the environment at launch (so no password sits in the file).
/// The pooler DSN's role and database are the clients'; the PostgreSQL DSN's role is the
/// observer's (it reads `pg_locks` and `pg_stat_activity`, and terminates the clients'
/// backends between cases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalSpec {
    /// The clients' way in: through the pooler (or PostgreSQL itself, without a pooler).
    pub pooler: String,
    /// PostgreSQL directly, as the observer's role.
    pub postgres: String,
    /// The pooler's admin console (PgBouncer's `pgbouncer` database), if the team grants it:
    /// its view of servers and clients, the running settings checked, console faults.
    pub admin: Option<String>,
    /// The team agrees to console faults (`PAUSE`, `KILL`, `RECONNECT` of the pool's
    /// database act on every user's pool of it): without it they are refused.
    pub console_faults: bool,
    /// Plaintext to a host that is not loopback is allowed (`sslmode` below `require`):
    /// without it such a DSN is refused.
    pub plaintext: bool,
}

impl ExternalSpec {
    /// Every `${NAME}` in `dsn` replaced by the environment's value; an error names the
    /// variable and the key when one is not set or a reference is not closed.
    pub fn expand(dsn: &str, key: &str) -> Result<String, String> {
        Self::expand_with(dsn, key, |name| std::env::var(name).ok())
    }

    /// `dsn` parsed as written, then its password set from the environment: the password,
    /// if the DSN has one, must be exactly `${NAME}` (a literal one is refused: the topology
    /// is copied into every run's directory), and no other part may refer to a variable.
    /// The value is set on the parsed configuration, never pasted into the DSN's text (an
    /// `@`, `%` or space in it stays part of the password).
    pub fn resolve(dsn: &str, key: &str) -> Result<(tokio_postgres::Config, TlsParams), String> {
        Self::resolve_with(dsn, key, |name| std::env::var(name).ok())
    }

    /// [`ExternalSpec::resolve`] with the values from `lookup`.
    pub fn resolve_with(
        dsn: &str,
        key: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(tokio_postgres::Config, TlsParams), String> {
        // Unclosed references, bad names and unset variables first, each named.
        Self::expand_with(dsn, key, |n| lookup(n).map(|_| String::new()))?;
        let (text, tls) = dsn::split_tls(dsn, key)?;
        let mut config: tokio_postgres::Config = text
            .parse()
            .map_err(|e| format!("`{key}` is not a PostgreSQL connection string: {e}"))?;
        config.ssl_mode(match tls.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let refs = dsn.matches("${").count();
        let from_env = match config.get_password() {
            None => None,
            Some(p) => {
                let p = String::from_utf8_lossy(p).to_string();
                match p.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                    Some(name)
                        if !name.is_empty()
                            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                    {
                        Some(name.to_string())
                    }
                    _ => {
                        return Err(format!(
                            "`{key}` has a literal password: write `${{NAME}}` in its place and set NAME in the environment (the topology is copied into every run's directory)"
                        ));
                    }
                }
            }
        };
        if refs != usize::from(from_env.is_some()) {
            return Err(format!(
                "`{key}`: only the password may be `${{NAME}}` (the rest of the DSN is written as it is)"
            ));
        }
        if let Some(name) = from_env {
            let value = lookup(&name).ok_or_else(|| {
                format!("`{key}` refers to ${{{name}}}, which is not set in the environment")
            })?;
            config.password(value);
        }
        Ok((config, tls))
    }

    /// [`ExternalSpec::expand`] with the values from `lookup`.
    pub fn expand_with(
        dsn: &str,
        key: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = dsn;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let Some(end) = after.find('}') else {
                return Err(format!("`{key}`: `${{` without a closing `}}`"));
            };
            let name = &after[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "`{key}`: `${{{name}}}` is not an environment variable's name"
                ));
            }
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(format!(
                        "`{key}` refers to ${{{name}}}, which is not set in the environment"
                    ));
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// An application-side connection pool shared by the logical clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppPool {
    /// Connections the pool opens at most (Go's `SetMaxOpenConns`).
    pub max_open: u32,
    pub pin: Pin,
}

/// Whether a logical client keeps one pooled connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pin {
    /// Every op takes whichever connection is free and gives it back (`db.Exec`).
    None,
    /// A client takes a connection at its first op and keeps it until it disconnects
    /// (`db.Conn`: the article's fix, a dedicated connection per lock holder).
    Session,
}

impl Pin {
    pub fn as_str(self) -> &'static str {
        match self {
            Pin::None => "none",
            Pin::Session => "session",
        }
    }
}

pub use crate::vocab::schedule::Schedule;

/// One op of a script: what a client does, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptOp {
    pub op: Op,
    pub key: Option<Key>,
    /// Milliseconds, for `sleep`, `pg_sleep`, `migrate`.
    pub ms: Option<u64>,
    /// The setting of a `set`, `set_local`, `show` (a replica sets its own value).
    pub guc: Option<crate::vocab::Guc>,
    /// When it runs (`when: held`, ...; default: unless the replica has failed).
    pub when: crate::vocab::When,
    /// `raise`: the tool's error message.
    pub message: Option<String>,
}

/// A group of identical replicas running one script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptGroup {
    pub clients: u32,
    pub ops: Vec<ScriptOp>,
}

/// What each logical client does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Logical clients, 1..=64.
    pub clients: u32,
    /// The advisory keys the clients fight over (non-empty, distinct).
    pub keys: Vec<Key>,
    pub api: Api,
    /// Steps per client per case, inclusive bounds, `1 <= steps_min <= steps_max`.
    pub steps_min: usize,
    /// Inclusive.
    pub steps_max: usize,
    /// Effective op weights: the API's defaults merged with `workload.ops`, zero weights removed.
    pub ops: BTreeMap<Op, u32>,
    /// Bound on blocking lock waits (`lock_timeout` of the client role), 1 ms to 60 s.
    pub lock_timeout_ms: u64,
    /// Think time before each step but the first, an inclusive range (in the concurrent
    /// schedule: each step is due at the sum of the pauses before it).
    pub think: Option<(Duration, Duration)>,
    /// Scripted replicas instead of random steps (the same script every case; concurrent
    /// schedule). When given, `clients` is their total.
    pub script: Vec<ScriptGroup>,
    /// The settings drawn setting ops name (`workload.settings`; default every row of
    /// `vocab::setting`).
    pub settings: Vec<crate::vocab::Guc>,
    /// Faults of the servers a step may be (the `faults` section): kind -> weight among
    /// the faults, and the weight of a fault step among the ops (`faults.weight`).
    pub faults: BTreeMap<Op, u32>,
    pub fault_weight: u32,
}

impl Workload {
    /// The longest a lock wait may take: `lock_timeout`, or the largest `lock_timeout` a
    /// client of the workload sets (`vocab::setting`) if it sets one.
    pub fn lock_wait_ms(&self) -> u64 {
        use crate::vocab::Guc;
        let sets = self.ops.iter().any(|(op, w)| op.sets() && *w > 0)
            || self.script.iter().any(|g| {
                g.ops
                    .iter()
                    .any(|o| o.op.sets() && o.guc == Some(Guc::LockTimeout))
            });
        if sets {
            self.lock_timeout_ms
                .max(Guc::LockTimeout.largest(self.clients as usize))
        } else {
            self.lock_timeout_ms
        }
    }

    /// Multiply every duration of the workload by `f` (`run.time_scale`): the script's
    /// `sleep`, `pg_sleep` and `migrate` durations, `lock_timeout` and `think`. A nonzero
    /// duration stays at least 1 ms.
    pub fn scale_time(&mut self, milli: u32) {
        if milli == 1000 {
            return;
        }
        let f = f64::from(milli) / 1000.0;
        let ms = |v: u64| {
            if v == 0 {
                0
            } else {
                ((v as f64 * f).round() as u64).max(1)
            }
        };
        self.lock_timeout_ms = ms(self.lock_timeout_ms);
        for g in &mut self.script {
            for o in &mut g.ops {
                if let Some(v) = &mut o.ms {
                    *v = ms(*v);
                }
            }
        }
        if let Some((lo, hi)) = &mut self.think {
            *lo = Duration::from_micros((lo.as_micros() as f64 * f).round() as u64);
            *hi = Duration::from_micros((hi.as_micros() as f64 * f).round() as u64);
        }
    }

    /// Whether the workload (weights or script) runs this op.
    pub fn uses(&self, op: Op) -> bool {
        // A script runs its own ops: the weights are not drawn from.
        let weighed = self.script.is_empty() && self.ops.contains_key(&op);
        weighed
            || self.faults.contains_key(&op)
            || self.script.iter().any(|g| g.ops.iter().any(|o| o.op == op))
    }

    /// Whether the workload may set this setting: a script names it, or drawn ops draw it
    /// (`workload.settings`).
    pub fn may_set(&self, g: crate::vocab::Guc) -> bool {
        let drawn = self.script.is_empty()
            && self.settings.contains(&g)
            && self.ops.keys().any(|op| op.sets() && op.takes_guc());
        drawn
            || self
                .script
                .iter()
                .any(|s| s.ops.iter().any(|o| o.op.sets() && o.guc == Some(g)))
    }
}

/// The `faults` section: which faults of the servers the nemesis may inject (a fault step is
/// drawn among the workload's ops with weight `weight`, its kind by the kinds' weights), and
/// how long a held fault lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Fault op -> weight among the faults (no zero entries); copied to `workload.faults`.
    pub kinds: BTreeMap<Op, u32>,
    /// The weight of a fault step among the workload's op weights.
    pub weight: u32,
    /// How long `pooler_pause`, `pooler_freeze`, `backend_freeze`, the link faults,
    /// `host_freeze_*`, `host_kill_*` (the host down) and the partitions hold before healing.
    pub hold: Duration,
    /// `link_delay`: how late each chunk is delivered, each way.
    pub delay: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            kinds: BTreeMap::new(),
            weight: limits::DEFAULT_FAULT_WEIGHT,
            hold: Duration::from_millis(limits::DEFAULT_FAULT_HOLD_MS),
            delay: Duration::from_millis(limits::DEFAULT_LINK_DELAY_MS),
        }
    }
}

/// How long and how hard the chaos engine searches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// Every duration of the workload was multiplied by this many thousandths
    /// (`run.time_scale`, default 1 = 1000): script sleeps, migrations and pg_sleeps,
    /// `lock_timeout`, `think`.
    pub time_scale_milli: u32,
    /// Generated cases (> 0).
    pub cases: u32,
    /// `None`: pick a random seed (and report it).
    pub seed: Option<u64>,
    /// Wall-clock budget for the generated cases (> 0): no new case starts past it.
    pub time_limit: Duration,
    /// Wall-clock budget for shrinking and evidence replays, over the run: past it, a new
    /// failure is replayed with evidence as it is (not shrunk).
    pub shrink_time: Duration,
    /// Cap on replays while shrinking a failing case (0 disables shrinking).
    pub max_shrink_runs: u32,
    pub schedule: Schedule,
    /// Concurrent schedule: how often the sampler reads the servers.
    pub sample_every: Duration,
    /// `app.progress`: the bound on getting a connection or a pooled server, and on any op
    /// that does not wait for a lock (a lock wait gets `lock_timeout` on top).
    pub op_deadline: Duration,
    /// Concurrent schedule: a case ends when its ops are done or after this long.
    pub case_time_limit: Duration,
    /// Concurrent schedule: a shrink candidate is replayed `shrink_replays` times and counts
    /// as failing when it fails in at least `shrink_quorum` of them.
    pub shrink_replays: u32,
    pub shrink_quorum: u32,
    /// The checker's budget per case: states held at once, and time. A case whose search
    /// needs more is unknown.
    pub search_states: usize,
    /// The model's work per case (`check::search::Budget::max_work`).
    pub search_work: u64,
    pub search_time: Duration,
}

/// Defaults and limits, public so the CLI and the docs can quote them.
pub mod limits {
    pub const DEFAULT_CLIENTS: u32 = 4;
    pub const DEFAULT_FAULT_HOLD_MS: u64 = 100;
    pub const DEFAULT_LINK_DELAY_MS: u64 = 10;
    /// About one step in twelve with the session API's default weights (22 in all).
    pub const DEFAULT_FAULT_WEIGHT: u32 = 2;
    /// A held fault is shorter than `run.op_deadline`'s default: longer holds are liveness
    /// failures by construction.
    pub const MAX_FAULT_HOLD_MS: u64 = 10_000;
    pub const MAX_CLIENTS: u32 = 64;
    pub const DEFAULT_KEYS: [crate::vocab::Key; 2] = [
        crate::vocab::Key::Big(4242424242),
        crate::vocab::Key::Big(612001),
    ];
    pub const MAX_KEY_COUNT: u32 = 1024;
    pub const DEFAULT_STEPS_MIN: usize = 1;
    /// Inclusive (the YAML default is `1..40`).
    pub const DEFAULT_STEPS_MAX: usize = 39;
    pub const MAX_STEPS: usize = 10_000;
    pub const MAX_WEIGHT: u32 = 1000;
    pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 1;
    pub const MAX_LOCK_TIMEOUT_MS: u64 = 60_000;
    pub const DEFAULT_SAMPLE_EVERY_MS: u64 = 5;
    pub const DEFAULT_OP_DEADLINE_MS: u64 = 2_000;
    pub const DEFAULT_CASE_TIME_LIMIT_SECS: u64 = 30;
    pub const DEFAULT_SHRINK_REPLAYS: u32 = 3;
    pub const DEFAULT_SHRINK_QUORUM: u32 = 2;
    /// The search's budget per case (`run.search_states`, `run.search_work`,
    /// `run.search_time`): pure data the history records too, so they live in `vocab`.
    pub use crate::vocab::budget::{
        DEFAULT_SEARCH_STATES, DEFAULT_SEARCH_TIME_MS, DEFAULT_SEARCH_WORK,
    };
    pub const DEFAULT_CASES: u32 = 256;
    pub const DEFAULT_TIME_LIMIT_SECS: u64 = 60;
    pub const DEFAULT_SHRINK_TIME_SECS: u64 = 60;
    /// `run.time_scale` bounds.
    pub const MIN_TIME_SCALE: f64 = 0.01;
    pub const MAX_TIME_SCALE: f64 = 10.0;
    pub const DEFAULT_MAX_SHRINK_RUNS: u32 = 512;
    pub const DEFAULT_POOL_SIZE: u32 = 2;
    pub const DEFAULT_MAX_CLIENT_CONN: u32 = 100;
    pub const DEFAULT_SERVER_RESET_QUERY: &str = "DISCARD ALL";
    /// PostgreSQL's own defaults, used when `postgres.settings` does not set them.
    pub const PG_DEFAULT_MAX_CONNECTIONS: i64 = 100;
    pub const PG_DEFAULT_SUPERUSER_RESERVED: i64 = 3;
    /// Direct (not pooled) superuser connections the harness keeps open: the observer (and
    /// the concurrent sampler, which shares it), the contender, the nemesis.
    pub const HARNESS_DIRECT_CONNECTIONS: i64 = 3;
}

use limits::*;

impl Topology {
    /// Reads and validates a topology file. `catalog` lists the invariants `expect` may name
    /// and the poolers whose sections it may have.
    pub fn load(path: &Path, catalog: &Catalog) -> Result<Topology, TopologyError> {
        let src = std::fs::read_to_string(path).map_err(|e| {
            TopologyError::from(ErrorInner {
                path: path.to_path_buf(),
                message: format!("cannot read: {e}"),
                at: None,
                hints: Vec::new(),
                io: Some(e),
            })
        })?;
        Topology::parse(&src, path, catalog)
    }

    /// Parses and validates topology text; `path` is used in messages and kept as `source`.
    pub fn parse(src: &str, path: &Path, catalog: &Catalog) -> Result<Topology, TopologyError> {
        let cx = Cx {
            src,
            path,
            catalog: catalog.invariants,
            poolers: catalog.poolers,
        };
        if is_blank_document(src) {
            return Err(cx.error_at(
                1,
                1,
                1,
                "empty topology: the file has no content",
                vec![
                    "a topology needs at least `name:` and `postgres: { version: \"18.6\" }`"
                        .into(),
                    "see docs/topology.md for every key".into(),
                ],
            ));
        }
        let raw: Spanned<RawTopology> =
            serde_saphyr::from_str(src).map_err(|e| cx.yaml_error(&e))?;
        cx.convert(&raw)
    }

    /// The expected verdict for an invariant: what `expect:` says, else [`Verdict::Holds`].
    pub fn expected(&self, invariant: &str) -> Verdict {
        self.expect.get(invariant).copied().unwrap_or_default()
    }

    /// The expected verdict in a schedule: `expect_concurrent:` first for the concurrent one.
    pub fn expected_in(&self, invariant: &str, schedule: Schedule) -> Verdict {
        match schedule {
            Schedule::Concurrent => self
                .expect_concurrent
                .get(invariant)
                .copied()
                .unwrap_or_else(|| self.expected(invariant)),
            Schedule::Sequential => self.expected(invariant),
        }
    }

    /// The measured rate (percent of cases) of an expected violation in a schedule, if the
    /// file gives one.
    pub fn expected_rate_in(&self, invariant: &str, schedule: Schedule) -> Option<f64> {
        match schedule {
            Schedule::Concurrent if self.expect_concurrent.contains_key(invariant) => {
                self.expect_concurrent_rates.get(invariant).copied()
            }
            _ => self.expect_rates.get(invariant).copied(),
        }
    }

    /// Whether the workload can exercise an invariant: it runs an op of each group.
    pub fn exercises(&self, needs: &[&[Op]]) -> bool {
        needs
            .iter()
            .all(|g| g.iter().any(|op| self.workload.uses(*op)))
    }

    /// The timeouts the servers run with, by what they do (0: off), in milliseconds: the
    /// pooler's (its settings) and `postgres.settings` (milliseconds by default).
    pub fn timeouts(&self) -> crate::vocab::timeout::Timeouts {
        let mut out = crate::vocab::timeout::Timeouts::new();
        if let Some(p) = &self.pooler {
            out.extend(p.config.timeouts());
        }
        for t in crate::vocab::timeout::POSTGRES {
            if let Some(v) = self
                .postgres
                .settings
                .get(t.name)
                .and_then(|v| settings::postgres_seconds(v))
            {
                out.insert(t.effect, (v * 1000.0).round() as u64);
            }
        }
        out.retain(|_, v| *v > 0);
        out
    }

    /// True when clients connect straight to PostgreSQL.
    pub fn is_direct(&self) -> bool {
        self.pooler.is_none()
    }
}

/// Turns a topology argument into a path. `transaction-mode` becomes
/// `topologies/transaction-mode.yaml` relative to the working directory; when that file does not
/// exist, the nearest ancestor directory holding `topologies/transaction-mode.yaml` is used. An
/// argument containing `/` or ending in `.yaml` / `.yml` is a path and is returned as is.
/// When nothing is found the relative path is returned, so that loading it reports it.
pub fn resolve(arg: &str) -> PathBuf {
    match std::env::current_dir() {
        Ok(cwd) => resolve_from(arg, &cwd),
        Err(_) => resolve_from(arg, Path::new(".")),
    }
}

fn resolve_from(arg: &str, cwd: &Path) -> PathBuf {
    resolve_in("topologies", arg, cwd)
}

/// A NAME as `<folder>/NAME.yaml` here or in the nearest ancestor that has it, up to the
/// repository root (the nearest directory with `.git`; outside a repository, here only), so a
/// `/tmp/topologies/NAME.yaml` planted by someone else is not picked up from a working
/// directory under /tmp. A path with `/` or `.yaml`/`.yml` as it is; when nothing is found,
/// the relative path, so that loading it reports it. Topologies and client profiles are
/// found alike.
pub fn resolve_in(folder: &str, arg: &str, cwd: &Path) -> PathBuf {
    if arg.contains('/') || arg.ends_with(".yaml") || arg.ends_with(".yml") {
        return PathBuf::from(arg);
    }
    let rel = Path::new(folder).join(format!("{arg}.yaml"));
    if cwd.join(&rel).is_file() {
        return rel;
    }
    let in_repo = cwd.ancestors().any(|d| d.join(".git").exists());
    if !in_repo || cwd.join(".git").exists() {
        return rel;
    }
    for dir in cwd.ancestors().skip(1) {
        let candidate = dir.join(&rel);
        if candidate.is_file() {
            return candidate;
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    rel
}

/// A topology or profile found by name must be yours (or root's) and writable by no one
/// else, with its folder: another user's file is refused with the reason, not run.
pub fn check_found(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    for p in [Some(path), folder].into_iter().flatten() {
        let Ok(m) = std::fs::metadata(p) else {
            continue;
        };
        if (m.uid() != me && m.uid() != 0) || m.mode() & 0o022 != 0 {
            return Err(format!(
                "{}: found by name but owned by uid {} with mode {:o} (yours is uid {me}); \
                 refusing a file another user could have put or changed there (name its path \
                 to use it anyway)",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}
