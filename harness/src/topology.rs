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

use crate::key::Key;
use crate::op::Op;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::{Location, Spanned};
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
    pub postgres: PostgresSpec,
    /// `None`: clients connect straight to PostgreSQL.
    pub pgbouncer: Option<PgbouncerSpec>,
    pub workload: Workload,
    pub run: RunSpec,
    /// Invariant name -> expected verdict, for the entries the file lists (all `app.*`).
    /// Use [`Topology::expected`], which defaults to [`Verdict::Holds`].
    pub expect: BTreeMap<String, Verdict>,
    /// The file this topology was read from (as given to [`Topology::load`] / [`Topology::parse`]).
    pub source: PathBuf,
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
}

/// The PgBouncer in front of PostgreSQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgbouncerSpec {
    /// `MAJOR.MINOR.PATCH`, e.g. `1.25.2`.
    pub version: String,
    /// The `pgbouncer` executable; `None` lets the launcher find it.
    pub binary: Option<PathBuf>,
    pub pool_mode: PoolMode,
    pub default_pool_size: u32,
    pub max_client_conn: u32,
    /// `""` means no reset query.
    pub server_reset_query: String,
    pub server_reset_query_always: bool,
    /// Further `pgbouncer.ini` settings, values rendered to strings (booleans as `1`/`0`).
    pub settings: BTreeMap<String, String>,
}

/// PgBouncer's `pool_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    Session,
    Transaction,
    Statement,
}

impl PoolMode {
    pub const ALL: [PoolMode; 3] = [
        PoolMode::Session,
        PoolMode::Transaction,
        PoolMode::Statement,
    ];

    /// The `pgbouncer.ini` / YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }

    fn from_name(s: &str) -> Option<PoolMode> {
        PoolMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// Bound on blocking lock waits (`SET lock_timeout`), 1..=10000 ms.
    pub lock_timeout_ms: u64,
}

/// How long and how hard the chaos engine searches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// Generated cases (> 0).
    pub cases: u32,
    /// `None`: pick a random seed (and report it).
    pub seed: Option<u64>,
    /// Wall-clock budget for the whole run (> 0).
    pub time_limit: Duration,
    /// Cap on replays while shrinking a failing case (0 disables shrinking).
    pub max_shrink_runs: u32,
}

/// Whether an invariant is expected to hold in a topology.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    #[default]
    Holds,
    Violated,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
        }
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
    /// PostgreSQL or in the harness.
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

/// Every invariant the checker knows: name, tier, one-line description.
pub const INVARIANTS: &[(&str, Tier, &str)] = &[
    (
        "pg.exclusion",
        Tier::Pg,
        "no advisory key is ever held by two backends at once",
    ),
    (
        "pg.replies_match_model",
        Tier::Pg,
        "every lock, try-lock and unlock reply equals what the per-backend model of PostgreSQL predicts",
    ),
    (
        "pg.locks_match_model",
        Tier::Pg,
        "after every step the advisory rows of pg_locks equal the model's locks, backend by backend",
    ),
    (
        "pg.xact_released_at_end",
        Tier::Pg,
        "transaction-level locks are released when their transaction commits or rolls back, not before",
    ),
    (
        "pg.session_survives_rollback",
        Tier::Pg,
        "a session-level lock taken inside a transaction survives that transaction's rollback",
    ),
    (
        "pg.stacking",
        Tier::Pg,
        "a key locked n times by one backend needs n unlocks; unlocking a key not held returns false",
    ),
    (
        "pg.terminate_releases",
        Tier::Pg,
        "pg_terminate_backend releases every lock the terminated backend held",
    ),
    (
        "pg.cancel_keeps_session_locks",
        Tier::Pg,
        "pg_cancel_backend aborts the running statement but the backend keeps its session locks",
    ),
    (
        "app.mutual_exclusion",
        Tier::App,
        "no two clients believe they hold the same key at the same time",
    ),
    (
        "app.no_orphans",
        Tier::App,
        "once a client has disconnected, no backend still holds a lock that client took",
    ),
    (
        "app.unlock_reaches_owner",
        Tier::App,
        "a client's unlock runs on the backend that holds the client's lock and releases it",
    ),
    (
        "app.rollback_releases",
        Tier::App,
        "every lock a client took inside a transaction is gone once that transaction rolls back",
    ),
    (
        "app.no_stale_holder",
        Tier::App,
        "no client still believes it holds a key on a backend that was terminated (a fencing hazard, \
         reported apart from pooled inheritance)",
    ),
];

/// Looks an invariant up in [`INVARIANTS`].
pub fn invariant(name: &str) -> Option<(Tier, &'static str)> {
    INVARIANTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, t, d)| (*t, *d))
}

/// Defaults and limits, public so the CLI and the docs can quote them.
pub mod limits {
    pub const DEFAULT_CLIENTS: u32 = 4;
    pub const MAX_CLIENTS: u32 = 64;
    pub const DEFAULT_KEYS: [crate::key::Key; 2] = [
        crate::key::Key::Big(4242424242),
        crate::key::Key::Big(612001),
    ];
    pub const MAX_KEY_COUNT: u32 = 1024;
    pub const DEFAULT_STEPS_MIN: usize = 1;
    /// Inclusive (the YAML default is `1..40`).
    pub const DEFAULT_STEPS_MAX: usize = 39;
    pub const MAX_STEPS: usize = 10_000;
    pub const MAX_WEIGHT: u32 = 1000;
    pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 1;
    pub const MAX_LOCK_TIMEOUT_MS: u64 = 10_000;
    pub const DEFAULT_CASES: u32 = 256;
    pub const DEFAULT_TIME_LIMIT_SECS: u64 = 60;
    pub const DEFAULT_MAX_SHRINK_RUNS: u32 = 512;
    pub const DEFAULT_POOL_SIZE: u32 = 2;
    pub const DEFAULT_MAX_CLIENT_CONN: u32 = 100;
    pub const DEFAULT_SERVER_RESET_QUERY: &str = "DISCARD ALL";
    /// PostgreSQL's own defaults, used when `postgres.settings` does not set them.
    pub const PG_DEFAULT_MAX_CONNECTIONS: i64 = 100;
    pub const PG_DEFAULT_SUPERUSER_RESERVED: i64 = 3;
    /// Direct (not pooled) connections the harness keeps open to observe and to terminate/cancel.
    pub const HARNESS_DIRECT_CONNECTIONS: i64 = 4;
}

use limits::*;

impl Topology {
    /// Reads and validates a topology file.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let src = std::fs::read_to_string(path).map_err(|e| {
            TopologyError::from(ErrorInner {
                path: path.to_path_buf(),
                message: format!("cannot read: {e}"),
                at: None,
                hints: Vec::new(),
                io: Some(e),
            })
        })?;
        Topology::parse(&src, path)
    }

    /// Parses and validates topology text; `path` is used in messages and kept as `source`.
    pub fn parse(src: &str, path: &Path) -> Result<Topology, TopologyError> {
        let cx = Cx { src, path };
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

    /// True when clients connect straight to PostgreSQL.
    pub fn is_direct(&self) -> bool {
        self.pgbouncer.is_none()
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
    if arg.contains('/') || arg.ends_with(".yaml") || arg.ends_with(".yml") {
        return PathBuf::from(arg);
    }
    let rel = Path::new("topologies").join(format!("{arg}.yaml"));
    if cwd.join(&rel).is_file() {
        return rel;
    }
    for dir in cwd.ancestors().skip(1) {
        let candidate = dir.join(&rel);
        if candidate.is_file() {
            return candidate;
        }
    }
    rel
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A topology that could not be read or is not valid.
///
/// `Display` gives `path:line:column: message`, then the offending source line with a caret under
/// the value, then `hint:` lines. An I/O failure displays as `path: cannot read: <cause>`.
#[derive(Debug)]
pub struct TopologyError {
    inner: Box<ErrorInner>,
}

#[derive(Debug)]
struct ErrorInner {
    path: PathBuf,
    message: String,
    at: Option<At>,
    hints: Vec<String>,
    io: Option<std::io::Error>,
}

impl From<ErrorInner> for TopologyError {
    fn from(inner: ErrorInner) -> Self {
        TopologyError {
            inner: Box::new(inner),
        }
    }
}

#[derive(Debug, Clone)]
struct At {
    line: usize,
    column: usize,
    width: usize,
    source_line: Option<String>,
}

impl TopologyError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// 1-based line of the offending value (`None` for I/O errors).
    pub fn line(&self) -> Option<usize> {
        self.inner.at.as_ref().map(|a| a.line)
    }

    /// 1-based column (in characters) of the offending value (`None` for I/O errors).
    pub fn column(&self) -> Option<usize> {
        self.inner.at.as_ref().map(|a| a.column)
    }

    /// The one-line message, without position, snippet or hints.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// What would be valid, one hint per entry.
    pub fn hints(&self) -> &[String] {
        &self.inner.hints
    }

    /// True when the file could not be read at all.
    pub fn is_io(&self) -> bool {
        self.inner.io.is_some()
    }
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.inner;
        let path = e.path.display();
        let Some(at) = &e.at else {
            return write!(f, "{path}: {}", e.message);
        };
        write!(f, "{path}:{}:{}: {}", at.line, at.column, e.message)?;
        if let Some(line) = &at.source_line {
            let (shown, caret_at) = expand_tabs(line, at.column);
            let gutter = at.line.to_string();
            let pad = " ".repeat(gutter.len());
            write!(f, "\n{gutter} | {shown}")?;
            write!(
                f,
                "\n{pad} | {}{}",
                " ".repeat(caret_at),
                "^".repeat(at.width.max(1))
            )?;
        }
        for hint in &self.inner.hints {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for TopologyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.io.as_ref().map(|e| e as _)
    }
}

/// Expands tabs (to 4 spaces) in a snippet line; returns it and the caret's display offset for
/// the 1-based character `column`.
fn expand_tabs(line: &str, column: usize) -> (String, usize) {
    let mut shown = String::new();
    let mut caret_at = None;
    for (i, c) in line.chars().enumerate() {
        if i + 1 == column {
            caret_at = Some(shown.chars().count());
        }
        if c == '\t' {
            shown.push_str("    ");
        } else {
            shown.push(c);
        }
    }
    let end = shown.chars().count();
    (shown, caret_at.unwrap_or(end))
}

fn is_blank_document(src: &str) -> bool {
    src.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

/// Conversion context: the source text (for snippets) and the path (for messages).
struct Cx<'a> {
    src: &'a str,
    path: &'a Path,
}

type Res<T> = Result<T, TopologyError>;

impl Cx<'_> {
    fn error_at(
        &self,
        line: usize,
        column: usize,
        width: usize,
        message: impl Into<String>,
        hints: Vec<String>,
    ) -> TopologyError {
        let (line, column) = (line.max(1), column.max(1));
        let source_line = self
            .src
            .lines()
            .nth(line - 1)
            .map(|l| l.trim_end_matches('\r').to_string());
        let width = match &source_line {
            Some(l) => {
                let rest = l.chars().count().saturating_sub(column - 1);
                width.clamp(1, rest.max(1))
            }
            None => 1,
        };
        TopologyError::from(ErrorInner {
            path: self.path.to_path_buf(),
            message: message.into(),
            at: Some(At {
                line,
                column,
                width,
                source_line,
            }),
            hints,
            io: None,
        })
    }

    fn err(&self, loc: &Location, message: impl Into<String>, hints: Vec<String>) -> TopologyError {
        self.error_at(
            loc.line() as usize,
            loc.column() as usize,
            loc.span().len() as usize,
            message,
            hints,
        )
    }

    /// The source text of a node, when it is a short single-line scalar.
    fn raw_text(&self, loc: &Location) -> Option<&str> {
        let span = loc.span();
        let (off, len) = (span.byte_offset()? as usize, span.byte_len()? as usize);
        let text = self.src.get(off..off + len)?;
        (!text.is_empty() && !text.contains('\n')).then_some(text)
    }

    /// How to describe what was found, for "expected X, found Y" messages.
    fn found(&self, leaf: &Leaf) -> String {
        match &leaf.value {
            Node::Absent | Node::Null => "an empty value".into(),
            Node::Seq(_) => "a sequence".into(),
            Node::Map(_) => "a mapping".into(),
            other => {
                let text = self
                    .raw_text(&leaf.referenced)
                    .map(str::to_string)
                    .unwrap_or_else(|| other.scalar_text().unwrap_or_default());
                if text.chars().count() > 60 {
                    format!("{} starting `{}`", other.kind(), truncate(&text, 40))
                } else {
                    format!("`{text}`")
                }
            }
        }
    }

    fn yaml_error(&self, err: &serde_saphyr::Error) -> TopologyError {
        use serde_saphyr::Error as E;
        let loc = err.location().unwrap_or(Location::UNKNOWN);
        let mut inner = err;
        while let E::WithSnippet { error, .. } | E::AliasError { error, .. } = inner {
            inner = error;
        }
        let (line, col, width) = (
            loc.line() as usize,
            loc.column() as usize,
            loc.span().len() as usize,
        );
        match inner {
            E::SerdeUnknownField {
                field, expected, ..
            } => {
                let section = section_of(expected);
                let mut message = format!("unknown key `{field}`");
                match section {
                    Some("") => message.push_str(" at the top level"),
                    Some(s) => message.push_str(&format!(" in `{s}`")),
                    None => {}
                }
                let mut hints = Vec::new();
                let close = close_matches(field, expected.iter().copied());
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                if section == Some("pgbouncer") && pgbouncer_setting(field).is_some() {
                    hints.push(format!(
                        "`{field}` is a pgbouncer.ini setting: put it under `pgbouncer.settings`"
                    ));
                }
                if section == Some("postgres") && is_setting_name(field) {
                    hints.push(format!(
                        "postgresql.conf settings go under `postgres.settings`, e.g. `settings: {{ {field}: ... }}`"
                    ));
                }
                hints.push(format!("valid keys here: {}", expected.join(", ")));
                self.error_at(line, col, width, message, hints)
            }
            E::DuplicateMappingKey { key, .. } => {
                let message = match key {
                    Some(k) => format!("duplicate key `{k}`"),
                    None => "duplicate key".to_string(),
                };
                self.error_at(
                    line,
                    col,
                    width,
                    message,
                    vec!["each key may appear only once in a mapping; remove one of them".into()],
                )
            }
            E::SerdeMissingField { field, .. } => self.error_at(
                line,
                col,
                1,
                format!("missing required key `{field}`"),
                Vec::new(),
            ),
            E::Unexpected { expected, .. } if expected.contains("mapping") => {
                let rest: String = self
                    .src
                    .lines()
                    .nth(line.saturating_sub(1))
                    .map(|l| l.chars().skip(col.saturating_sub(1)).collect())
                    .unwrap_or_default();
                let found = match self.raw_text(&loc) {
                    _ if rest.starts_with(['-', '[']) => "a sequence".to_string(),
                    Some(t) => format!("`{t}`"),
                    None => "another kind of value".to_string(),
                };
                self.error_at(
                    line,
                    col,
                    width,
                    format!("expected a mapping here, found {found}"),
                    vec![
                        "a topology and each of its sections are `key: value` mappings; see docs/topology.md"
                            .into(),
                    ],
                )
            }
            E::MultipleDocuments { .. } => self.error_at(
                line,
                col,
                width,
                "a topology file holds one YAML document, but a second one starts here",
                vec!["remove the `---` separator and what follows it, or split the file".into()],
            ),
            E::SerdeInvalidType {
                unexpected,
                expected,
                ..
            } => self.error_at(
                line,
                col,
                width,
                format!(
                    "expected {}, found {}",
                    humanize_expected(expected),
                    humanize_unexpected(unexpected)
                ),
                Vec::new(),
            ),
            other => {
                use serde_saphyr::MessageFormatter;
                let text = serde_saphyr::DefaultMessageFormatter.format_message(other);
                let message = lowercase_first(&text);
                let mut hints = Vec::new();
                let (mut line, mut col) = (line, col);
                if message.contains("tab") {
                    hints.push("YAML indentation must use spaces, not tabs".into());
                    // Point at the tab itself when the parser reports the character after it.
                    if let Some(l) = self.src.lines().nth(line.saturating_sub(1))
                        && col >= 2
                        && l.chars().nth(col - 2) == Some('\t')
                    {
                        col -= 1;
                    }
                } else if matches!(other, E::Eof { .. }) {
                    line = line.max(1);
                    col = col.max(1);
                    hints.push("the document ends early: check brackets and quotes".into());
                }
                self.error_at(line, col, width.max(1), message, hints)
            }
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) if !s.starts_with("YAML") => first.to_lowercase().chain(c).collect(),
        _ => s.to_string(),
    }
}

fn humanize_expected(expected: &str) -> String {
    if expected.starts_with("struct ") || expected.contains("map") {
        "a mapping".into()
    } else if expected.contains("sequence") {
        "a sequence".into()
    } else {
        expected.to_string()
    }
}

fn humanize_unexpected(unexpected: &str) -> String {
    match unexpected {
        "map" => "a mapping".into(),
        "sequence" => "a sequence".into(),
        "unit value" | "null" => "an empty value".into(),
        other => other.to_string(),
    }
}

fn did_you_mean(close: &[&str]) -> String {
    format!("did you mean {}?", or_list(close))
}

/// "`a`", "`a` or `b`", "`a`, `b` or `c`".
fn or_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|c| format!("`{c}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to three candidates close to `word`: small edit distance, or one containing the other.
fn close_matches<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &'a str)> = candidates
        .into_iter()
        .filter(|c| *c != word)
        .filter_map(|c| {
            let d = edit_distance(word, c);
            let contains = word.len() >= 4 && (c.contains(word) || word.contains(c));
            (d <= limit || contains).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

// ---------------------------------------------------------------------------------------------
// Raw layer: what serde-saphyr deserializes
// ---------------------------------------------------------------------------------------------

/// Any YAML node, kept with its position. Leaves of the raw structs are `Spanned<Node>` so the
/// conversion can give precise, uniform messages for wrong types and bad values.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// The key is not in the file (serde default).
    Absent,
    /// `~`, `null` or nothing after the colon.
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Leaf>),
    Map(Vec<(Spanned<String>, Leaf)>),
}

type Leaf = Spanned<Node>;

fn absent() -> Leaf {
    Spanned::new(Node::Absent, Location::UNKNOWN, Location::UNKNOWN)
}

impl Node {
    fn kind(&self) -> &'static str {
        match self {
            Node::Absent | Node::Null => "an empty value",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a sequence",
            Node::Map(_) => "a mapping",
        }
    }

    fn scalar_text(&self) -> Option<String> {
        match self {
            Node::Bool(b) => Some(b.to_string()),
            Node::Int(i) => Some(i.to_string()),
            Node::Float(x) => Some(x.to_string()),
            Node::Str(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
                Ok(Node::Int(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
                i128::try_from(v)
                    .map(Node::Int)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Str(v))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Node, D2::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Leaf>()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let value = map.next_value::<Leaf>()?;
                    entries.push((key, value));
                }
                Ok(Node::Map(entries))
            }
        }
        d.deserialize_any(NodeVisitor)
    }
}

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "postgres",
    "pgbouncer",
    "workload",
    "run",
    "expect",
];
const POSTGRES_KEYS: &[&str] = &["version", "bin_dir", "settings"];
const PGBOUNCER_KEYS: &[&str] = &[
    "version",
    "binary",
    "pool_mode",
    "default_pool_size",
    "max_client_conn",
    "server_reset_query",
    "server_reset_query_always",
    "settings",
];
const WORKLOAD_KEYS: &[&str] = &["clients", "keys", "api", "steps", "lock_timeout", "ops"];
const RUN_KEYS: &[&str] = &["cases", "seed", "time_limit", "max_shrink_runs"];

/// Which section a serde "expected one of" list belongs to (`""` for the top level).
fn section_of(expected: &[&str]) -> Option<&'static str> {
    [
        ("", TOP_KEYS),
        ("postgres", POSTGRES_KEYS),
        ("pgbouncer", PGBOUNCER_KEYS),
        ("workload", WORKLOAD_KEYS),
        ("run", RUN_KEYS),
    ]
    .into_iter()
    .find(|(_, keys)| *keys == expected)
    .map(|(name, _)| name)
}

/// A section: absent (line 0), null (`value: None`) or a mapping.
type Section<T> = Spanned<Option<T>>;

fn absent_section<T>() -> Section<T> {
    Spanned::new(None, Location::UNKNOWN, Location::UNKNOWN)
}

fn section_given<T>(s: &Section<T>) -> bool {
    s.referenced.line() != 0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    #[serde(default = "absent")]
    name: Leaf,
    #[serde(default = "absent")]
    description: Leaf,
    #[serde(default = "absent_section")]
    postgres: Section<RawPostgres>,
    #[serde(default = "absent_section")]
    pgbouncer: Section<RawPgbouncer>,
    #[serde(default = "absent_section")]
    workload: Section<RawWorkload>,
    #[serde(default = "absent_section")]
    run: Section<RawRun>,
    #[serde(default = "absent")]
    expect: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPostgres {
    #[serde(default = "absent")]
    version: Leaf,
    #[serde(default = "absent")]
    bin_dir: Leaf,
    #[serde(default = "absent")]
    settings: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPgbouncer {
    #[serde(default = "absent")]
    version: Leaf,
    #[serde(default = "absent")]
    binary: Leaf,
    #[serde(default = "absent")]
    pool_mode: Leaf,
    #[serde(default = "absent")]
    default_pool_size: Leaf,
    #[serde(default = "absent")]
    max_client_conn: Leaf,
    #[serde(default = "absent")]
    server_reset_query: Leaf,
    #[serde(default = "absent")]
    server_reset_query_always: Leaf,
    #[serde(default = "absent")]
    settings: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    #[serde(default = "absent")]
    clients: Leaf,
    #[serde(default = "absent")]
    keys: Leaf,
    #[serde(default = "absent")]
    api: Leaf,
    #[serde(default = "absent")]
    steps: Leaf,
    #[serde(default = "absent")]
    lock_timeout: Leaf,
    #[serde(default = "absent")]
    ops: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    #[serde(default = "absent")]
    cases: Leaf,
    #[serde(default = "absent")]
    seed: Leaf,
    #[serde(default = "absent")]
    time_limit: Leaf,
    #[serde(default = "absent")]
    max_shrink_runs: Leaf,
}

// ---------------------------------------------------------------------------------------------
// Known settings
// ---------------------------------------------------------------------------------------------

/// `postgresql.conf` parameters the harness sets itself.
const PG_HARNESS_SETTINGS: &[(&str, &str)] = &[
    ("port", "the harness picks the port PostgreSQL listens on"),
    (
        "listen_addresses",
        "the harness picks the address PostgreSQL listens on",
    ),
    (
        "unix_socket_directories",
        "the harness picks PostgreSQL's socket directory",
    ),
    (
        "data_directory",
        "the harness creates and owns the cluster's data directory",
    ),
    ("hba_file", "the harness writes pg_hba.conf itself"),
    ("ident_file", "the harness writes pg_ident.conf itself"),
    ("config_file", "the harness writes postgresql.conf itself"),
    (
        "external_pid_file",
        "the harness manages the postmaster's process",
    ),
];

/// `pgbouncer.ini` settings the harness sets itself (the reason is the hint).
const PGBOUNCER_HARNESS_SETTINGS: &[(&str, &str)] = &[
    (
        "listen_addr",
        "the harness picks the address pgbouncer listens on",
    ),
    (
        "listen_port",
        "the harness picks the port pgbouncer listens on",
    ),
    (
        "unix_socket_dir",
        "the harness picks pgbouncer's socket directory",
    ),
    ("auth_file", "the harness configures authentication"),
    ("auth_type", "the harness configures authentication"),
    ("auth_user", "the harness configures authentication"),
    ("admin_users", "the harness uses the admin console itself"),
    ("stats_users", "the harness uses the admin console itself"),
    ("logfile", "the harness captures pgbouncer's log"),
    ("pidfile", "the harness manages pgbouncer's process"),
    ("conffile", "the harness writes pgbouncer.ini itself"),
    ("pool_mode", "use the top-level key `pgbouncer.pool_mode`"),
    (
        "default_pool_size",
        "use the top-level key `pgbouncer.default_pool_size`",
    ),
    (
        "max_client_conn",
        "use the top-level key `pgbouncer.max_client_conn`",
    ),
    (
        "server_reset_query",
        "use the top-level key `pgbouncer.server_reset_query`",
    ),
    (
        "server_reset_query_always",
        "use the top-level key `pgbouncer.server_reset_query_always`",
    ),
];

/// The `[pgbouncer]` section of `pgbouncer.ini` in PgBouncer 1.25 (Linux build), with the
/// release that introduced the recent ones (`None`: older than 1.19).
const PGBOUNCER_SETTINGS: &[(&str, Option<(u32, u32)>)] = &[
    ("admin_users", None),
    ("application_name_add_host", None),
    ("auth_dbname", Some((1, 20))),
    ("auth_file", None),
    ("auth_hba_file", None),
    ("auth_ident_file", Some((1, 23))),
    ("auth_ldap_options", Some((1, 25))),
    ("auth_query", None),
    ("auth_type", None),
    ("auth_user", None),
    ("autodb_idle_timeout", None),
    ("cancel_wait_timeout", Some((1, 19))),
    ("client_idle_timeout", None),
    ("client_login_timeout", None),
    ("client_tls13_ciphers", None),
    ("client_tls_ca_file", None),
    ("client_tls_cert_file", None),
    ("client_tls_ciphers", None),
    ("client_tls_dheparams", None),
    ("client_tls_ecdhcurve", None),
    ("client_tls_key_file", None),
    ("client_tls_protocols", None),
    ("client_tls_sslmode", None),
    ("conffile", None),
    ("default_pool_size", None),
    ("disable_pqexec", None),
    ("dns_max_ttl", None),
    ("dns_nxdomain_ttl", None),
    ("dns_zone_check_period", None),
    ("idle_transaction_timeout", None),
    ("ignore_startup_parameters", None),
    ("job_name", None),
    ("listen_addr", None),
    ("listen_backlog", None),
    ("listen_port", None),
    ("log_connections", None),
    ("log_disconnections", None),
    ("log_pooler_errors", None),
    ("log_stats", None),
    ("logfile", None),
    ("max_client_conn", None),
    ("max_db_client_connections", Some((1, 24))),
    ("max_db_connections", None),
    ("max_packet_size", None),
    ("max_prepared_statements", Some((1, 21))),
    ("max_user_client_connections", Some((1, 24))),
    ("max_user_connections", None),
    ("min_pool_size", None),
    ("peer_id", Some((1, 19))),
    ("pidfile", None),
    ("pkt_buf", None),
    ("pool_mode", None),
    ("query_timeout", None),
    ("query_wait_notify", Some((1, 25))),
    ("query_wait_timeout", None),
    ("reserve_pool_size", None),
    ("reserve_pool_timeout", None),
    ("resolv_conf", None),
    ("sbuf_loopcnt", None),
    ("scram_iterations", None),
    ("server_check_delay", None),
    ("server_check_query", None),
    ("server_connect_timeout", None),
    ("server_fast_close", None),
    ("server_idle_timeout", None),
    ("server_lifetime", None),
    ("server_login_retry", None),
    ("server_reset_query", None),
    ("server_reset_query_always", None),
    ("server_round_robin", None),
    ("server_tls13_ciphers", None),
    ("server_tls_ca_file", None),
    ("server_tls_cert_file", None),
    ("server_tls_ciphers", None),
    ("server_tls_key_file", None),
    ("server_tls_protocols", None),
    ("server_tls_sslmode", None),
    ("so_reuseport", None),
    ("stats_period", None),
    ("stats_users", None),
    ("suspend_timeout", None),
    ("syslog", None),
    ("syslog_facility", None),
    ("syslog_ident", None),
    ("tcp_defer_accept", None),
    ("tcp_keepalive", None),
    ("tcp_keepcnt", None),
    ("tcp_keepidle", None),
    ("tcp_keepintvl", None),
    ("tcp_socket_buffer", None),
    ("tcp_user_timeout", None),
    ("track_extra_parameters", Some((1, 20))),
    ("transaction_timeout", Some((1, 25))),
    ("unix_socket_dir", None),
    ("unix_socket_group", None),
    ("unix_socket_mode", None),
    ("user", None),
    ("verbose", None),
];

fn pgbouncer_setting(name: &str) -> Option<Option<(u32, u32)>> {
    PGBOUNCER_SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, since)| *since)
}

/// `[a-z_][a-z0-9_.]*`: the shape of a postgresql.conf / pgbouncer.ini parameter name.
fn is_setting_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '.'))
}

// ---------------------------------------------------------------------------------------------
// Conversion and validation
// ---------------------------------------------------------------------------------------------

/// Whether the key was written in the file (null counts as written).
fn is_given(leaf: &Leaf) -> bool {
    !matches!(leaf.value, Node::Absent)
}

/// Parses a topology duration: an integer and a unit, no space (`500ms`, `60s`, `2m`, `1h`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    }?;
    Some(Duration::from_millis(ms))
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses `"MAJOR.MINOR"` (`parts == 2`) or `"MAJOR.MINOR.PATCH"` (`parts == 3`).
fn parse_version(s: &str, parts: usize) -> Option<Vec<u32>> {
    let nums: Vec<&str> = s.split('.').collect();
    if nums.len() != parts
        || nums
            .iter()
            .any(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 6)
    {
        return None;
    }
    nums.iter().map(|n| n.parse().ok()).collect()
}

struct Setting {
    name: Spanned<String>,
    value: Leaf,
}

impl Cx<'_> {
    // -- typed leaf readers ---------------------------------------------------------------------

    /// A string, or an error naming `what` (a dotted key path).
    fn string(&self, leaf: &Leaf, what: &str, hints: &[&str]) -> Res<String> {
        match &leaf.value {
            Node::Str(s) => Ok(s.clone()),
            _ => Err(self.err(
                &leaf.referenced,
                format!("`{what}` must be a string, found {}", self.found(leaf)),
                hints.iter().map(|h| h.to_string()).collect(),
            )),
        }
    }

    /// The text of a scalar as written (numbers keep their source spelling, e.g. `18.10`).
    fn scalar_as_written(&self, leaf: &Leaf) -> Option<String> {
        match &leaf.value {
            Node::Str(s) => Some(s.clone()),
            Node::Int(_) | Node::Float(_) => self
                .raw_text(&leaf.referenced)
                .map(str::to_string)
                .or_else(|| leaf.value.scalar_text()),
            _ => None,
        }
    }

    fn int(&self, leaf: &Leaf, what: &str, min: i128, max: i128) -> Res<i128> {
        let range = if max == i128::from(u32::MAX) || max == i128::from(u64::MAX) {
            format!("an integer >= {min}")
        } else {
            format!("an integer from {min} to {max}")
        };
        match &leaf.value {
            Node::Int(i) if (min..=max).contains(i) => Ok(*i),
            Node::Int(i) => Err(self.err(
                &leaf.referenced,
                format!("`{what}` must be {range}, found {i}"),
                Vec::new(),
            )),
            _ => Err(self.err(
                &leaf.referenced,
                format!("`{what}` must be {range}, found {}", self.found(leaf)),
                Vec::new(),
            )),
        }
    }

    fn u32_or(&self, leaf: &Leaf, what: &str, min: u32, max: u32, default: u32) -> Res<u32> {
        if !is_given(leaf) {
            return Ok(default);
        }
        self.int(leaf, what, min.into(), max.into())
            .map(|i| i as u32)
    }

    fn bool_or(&self, leaf: &Leaf, what: &str, default: bool) -> Res<bool> {
        match &leaf.value {
            Node::Absent => Ok(default),
            Node::Bool(b) => Ok(*b),
            _ => Err(self.err(
                &leaf.referenced,
                format!(
                    "`{what}` must be a boolean (true or false), found {}",
                    self.found(leaf)
                ),
                Vec::new(),
            )),
        }
    }

    fn duration_or(
        &self,
        leaf: &Leaf,
        what: &str,
        max: Option<Duration>,
        default: Duration,
    ) -> Res<Duration> {
        const FORMS: &str = "a duration is an integer and a unit: `500ms`, `60s`, `2m`, `1h`";
        let d = match &leaf.value {
            Node::Absent => return Ok(default),
            Node::Str(s) => parse_duration(s).ok_or_else(|| {
                self.err(
                    &leaf.referenced,
                    format!("`{what}` is not a duration: `{s}`"),
                    vec![FORMS.into()],
                )
            })?,
            Node::Int(i) => {
                return Err(self.err(
                    &leaf.referenced,
                    format!("`{what}` needs a unit: `{i}` alone is ambiguous"),
                    vec![format!("write `{i}ms` or `{i}s`"), FORMS.into()],
                ));
            }
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!("`{what}` must be a duration, found {}", self.found(leaf)),
                    vec![FORMS.into()],
                ));
            }
        };
        if d.is_zero() {
            return Err(self.err(
                &leaf.referenced,
                format!("`{what}` must be greater than zero"),
                vec![FORMS.into()],
            ));
        }
        if let Some(max) = max
            && d > max
        {
            return Err(self.err(
                &leaf.referenced,
                format!(
                    "`{what}` must be at most {}, found {}",
                    fmt_duration(max),
                    fmt_duration(d)
                ),
                Vec::new(),
            ));
        }
        Ok(d)
    }

    fn optional_path(&self, leaf: &Leaf, what: &str) -> Res<Option<PathBuf>> {
        if !is_given(leaf) {
            return Ok(None);
        }
        let s = self.string(
            leaf,
            what,
            &["give a path, or remove the key to search PATH"],
        )?;
        if s.is_empty() {
            return Err(self.err(
                &leaf.referenced,
                format!("`{what}` must not be empty"),
                vec!["give a path, or remove the key".into()],
            ));
        }
        Ok(Some(PathBuf::from(s)))
    }

    /// The entries of a mapping leaf (absent or null -> none, e.g. `expect:` with every entry
    /// commented out).
    fn entries<'l>(&self, leaf: &'l Leaf, what: &str) -> Res<&'l [(Spanned<String>, Leaf)]> {
        match &leaf.value {
            Node::Absent | Node::Null => Ok(&[]),
            Node::Map(entries) => Ok(entries),
            _ => Err(self.err(
                &leaf.referenced,
                format!("`{what}` must be a mapping, found {}", self.found(leaf)),
                vec![format!(
                    "write `{what}: {{ key: value, ... }}` or one `key: value` per indented line"
                )],
            )),
        }
    }

    /// Renders a setting's scalar value; booleans become `on_off`.
    fn setting_value(&self, s: &Setting, section: &str, on_off: (&str, &str)) -> Res<String> {
        let what = format!("{section}.{}", s.name.value);
        let text = match &s.value.value {
            Node::Bool(true) => on_off.0.to_string(),
            Node::Bool(false) => on_off.1.to_string(),
            Node::Int(i) => i.to_string(),
            Node::Float(x) => x.to_string(),
            Node::Str(v) => v.clone(),
            _ => {
                return Err(self.err(
                    &s.value.referenced,
                    format!(
                        "`{what}` must be a string, number or boolean, found {}",
                        self.found(&s.value)
                    ),
                    Vec::new(),
                ));
            }
        };
        if text.chars().any(|c| c.is_control()) {
            return Err(self.err(
                &s.value.referenced,
                format!("`{what}` must be one line without control characters"),
                Vec::new(),
            ));
        }
        Ok(text)
    }

    fn settings(&self, leaf: &Leaf, section: &str) -> Res<Vec<Setting>> {
        let what = format!("{section}.settings");
        let mut out = Vec::new();
        for (name, value) in self.entries(leaf, &what)? {
            if !is_setting_name(&name.value) {
                return Err(self.err(
                    &name.referenced,
                    format!("`{}` is not a valid setting name", name.value),
                    vec!["setting names are lower case: letters, digits, `_` and `.`".into()],
                ));
            }
            out.push(Setting {
                name: name.clone(),
                value: value.clone(),
            });
        }
        Ok(out)
    }

    /// An integer-valued setting (int, or a string of digits), if present.
    fn int_setting(
        &self,
        settings: &[Setting],
        name: &str,
        section: &str,
    ) -> Res<Option<(i64, Location)>> {
        let Some(s) = settings.iter().find(|s| s.name.value == name) else {
            return Ok(None);
        };
        let n = match &s.value.value {
            Node::Int(i) => i64::try_from(*i).ok(),
            Node::Str(t) => t.trim().parse::<i64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= 0 => Ok(Some((n, s.value.referenced))),
            _ => Err(self.err(
                &s.value.referenced,
                format!(
                    "`{section}.settings.{name}` must be a non-negative integer, found {}",
                    self.found(&s.value)
                ),
                vec![format!(
                    "the harness uses `{name}` to check that the connections fit"
                )],
            )),
        }
    }

    // -- sections -------------------------------------------------------------------------------

    /// "missing required key" at the start of the mapping that lacks it.
    fn missing(&self, at: &Location, key: &str, section: &str, example: &str) -> TopologyError {
        let place = if section.is_empty() {
            "at the top level".to_string()
        } else {
            format!("in `{section}`")
        };
        let mut e = self.err(
            at,
            format!("missing required key `{key}` {place}"),
            vec![format!("add `{example}`")],
        );
        if let Some(a) = &mut e.inner.at {
            a.width = 1;
        }
        e
    }

    /// A section given as null where a mapping is required.
    fn null_section(&self, at: &Location, key: &str, example: &str) -> TopologyError {
        self.err(
            at,
            format!("`{key}` must be a mapping, found an empty value"),
            vec![format!("e.g. `{example}`")],
        )
    }

    fn convert(&self, top: &Spanned<RawTopology>) -> Res<Topology> {
        let raw = &top.value;
        if !is_given(&raw.name) {
            return Err(self.missing(&top.referenced, "name", "", "name: transaction-mode"));
        }
        let name = self.string(&raw.name, "name", &["e.g. `name: transaction-mode`"])?;
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(self.err(
                &raw.name.referenced,
                format!("invalid topology name `{name}`"),
                vec![
                    "a name is 1 to 64 characters of `a-z`, `0-9` and `-`, e.g. `transaction-mode`"
                        .into(),
                ],
            ));
        }
        let description = if is_given(&raw.description) {
            Some(self.string(&raw.description, "description", &[])?)
        } else {
            None
        };

        const PG_EXAMPLE: &str = "postgres: { version: \"18.6\" }";
        let (postgres, pg_settings) = match &raw.postgres.value {
            Some(pg) => self.postgres(pg, &raw.postgres.referenced)?,
            None if section_given(&raw.postgres) => {
                return Err(self.null_section(&raw.postgres.referenced, "postgres", PG_EXAMPLE));
            }
            None => return Err(self.missing(&top.referenced, "postgres", "", PG_EXAMPLE)),
        };
        let pgbouncer = match &raw.pgbouncer.value {
            Some(b) => Some(self.pgbouncer(b, &raw.pgbouncer.referenced)?),
            None => None,
        };
        let default_workload = RawWorkload::default();
        let raw_workload = raw.workload.value.as_ref().unwrap_or(&default_workload);
        let workload = self.workload(raw_workload)?;
        let run = match &raw.run.value {
            Some(r) => self.run(r)?,
            None => self.run(&RawRun::default())?,
        };
        let expect = self.expect(&raw.expect)?;

        // Cross-section checks.
        let (max_connections, max_conn_loc) = self
            .int_setting(&pg_settings, "max_connections", "postgres")?
            .map_or((PG_DEFAULT_MAX_CONNECTIONS, None), |(n, l)| (n, Some(l)));
        let superuser_reserved = self
            .int_setting(&pg_settings, "superuser_reserved_connections", "postgres")?
            .map_or(PG_DEFAULT_SUPERUSER_RESERVED, |(n, _)| n);
        let reserved = self
            .int_setting(&pg_settings, "reserved_connections", "postgres")?
            .map_or(0, |(n, _)| n);
        let available =
            max_connections - superuser_reserved - reserved - HARNESS_DIRECT_CONNECTIONS;
        let budget = format!(
            "max_connections {max_connections} - {superuser_reserved} superuser_reserved_connections{} - {HARNESS_DIRECT_CONNECTIONS} harness connections = {available}",
            if reserved > 0 {
                format!(" - {reserved} reserved_connections")
            } else {
                String::new()
            }
        );

        match (&pgbouncer, &raw.pgbouncer.value) {
            (Some((spec, bouncer_settings)), Some(rb)) => {
                if spec.max_client_conn < workload.clients {
                    return Err(self.err(
                        &rb.max_client_conn.referenced,
                        format!(
                            "`pgbouncer.max_client_conn` ({}) is below `workload.clients` ({})",
                            spec.max_client_conn, workload.clients
                        ),
                        vec![format!(
                            "raise max_client_conn to at least {}, or lower workload.clients",
                            workload.clients
                        )],
                    ));
                }
                let reserve =
                    self.int_setting(bouncer_settings, "reserve_pool_size", "pgbouncer")?;
                let min_pool = self.int_setting(bouncer_settings, "min_pool_size", "pgbouncer")?;
                let pool = i64::from(spec.default_pool_size)
                    + reserve.map_or(0, |(n, _)| n)
                    + min_pool.map_or(0, |(n, _)| n);
                if pool > available {
                    let loc = if is_given(&rb.default_pool_size) {
                        rb.default_pool_size.referenced
                    } else if let Some(l) = max_conn_loc {
                        l
                    } else if let Some((_, l)) = reserve.or(min_pool) {
                        l
                    } else {
                        raw.pgbouncer.referenced
                    };
                    return Err(self.err(
                        &loc,
                        format!(
                            "the pool needs {pool} server connections but PostgreSQL has room for {available}"
                        ),
                        vec![
                            format!(
                                "pool = default_pool_size {}{}{}",
                                spec.default_pool_size,
                                reserve.map_or(String::new(), |(n, _)| format!(" + reserve_pool_size {n}")),
                                min_pool.map_or(String::new(), |(n, _)| format!(" + min_pool_size {n}")),
                            ),
                            format!("room = {budget}"),
                            "lower the pool, or raise `postgres.settings.max_connections`".into(),
                        ],
                    ));
                }
            }
            _ => {
                let needed = i64::from(workload.clients);
                if needed > available {
                    let loc = match max_conn_loc {
                        Some(l) => l,
                        None => raw_workload.clients.referenced,
                    };
                    return Err(self.err(
                        &loc,
                        format!(
                            "{needed} direct clients do not fit: PostgreSQL has room for {available}"
                        ),
                        vec![
                            format!("room = {budget}"),
                            "lower `workload.clients`, or raise `postgres.settings.max_connections`".into(),
                        ],
                    ));
                }
            }
        }

        Ok(Topology {
            name,
            description,
            postgres,
            pgbouncer: pgbouncer.map(|(spec, _)| spec),
            workload,
            run,
            expect,
            source: self.path.to_path_buf(),
        })
    }

    fn postgres(&self, raw: &RawPostgres, at: &Location) -> Res<(PostgresSpec, Vec<Setting>)> {
        if !is_given(&raw.version) {
            return Err(self.missing(at, "version", "postgres", "version: \"18.6\""));
        }
        let version = match self.scalar_as_written(&raw.version) {
            Some(v) => v,
            None => {
                return Err(self.err(
                    &raw.version.referenced,
                    format!(
                        "`postgres.version` must be a version such as \"18.6\", found {}",
                        self.found(&raw.version)
                    ),
                    Vec::new(),
                ));
            }
        };
        if parse_version(&version, 2).is_none() {
            let hint = if parse_version(&version, 1).is_some() {
                format!(
                    "give the minor release too, e.g. \"{version}.6\"; the harness pins exact binaries"
                )
            } else if parse_version(&version, 3).is_some() {
                "PostgreSQL releases since 10 have two numbers, MAJOR.MINOR, e.g. \"18.6\"".into()
            } else {
                "write MAJOR.MINOR, e.g. \"18.6\"".into()
            };
            return Err(self.err(
                &raw.version.referenced,
                format!("invalid postgres version `{version}`: expected MAJOR.MINOR"),
                vec![hint],
            ));
        }
        let bin_dir = self.optional_path(&raw.bin_dir, "postgres.bin_dir")?;
        let settings = self.settings(&raw.settings, "postgres")?;
        let mut rendered = BTreeMap::new();
        for s in &settings {
            if let Some((_, why)) = PG_HARNESS_SETTINGS.iter().find(|(n, _)| *n == s.name.value) {
                return Err(self.err(
                    &s.name.referenced,
                    format!("`{}` cannot be set in a topology", s.name.value),
                    vec![why.to_string()],
                ));
            }
            rendered.insert(
                s.name.value.clone(),
                self.setting_value(s, "postgres.settings", ("on", "off"))?,
            );
        }
        Ok((
            PostgresSpec {
                version,
                bin_dir,
                settings: rendered,
            },
            settings,
        ))
    }

    fn pgbouncer(&self, raw: &RawPgbouncer, at: &Location) -> Res<(PgbouncerSpec, Vec<Setting>)> {
        if !is_given(&raw.version) {
            return Err(self.missing(at, "version", "pgbouncer", "version: \"1.25.2\""));
        }
        if !is_given(&raw.pool_mode) {
            return Err(self.missing(at, "pool_mode", "pgbouncer", "pool_mode: transaction"));
        }
        let version = match &raw.version.value {
            Node::Str(s) => s.clone(),
            _ => {
                return Err(self.err(
                    &raw.version.referenced,
                    format!(
                        "`pgbouncer.version` must be a quoted version such as \"1.25.2\", found {}",
                        self.found(&raw.version)
                    ),
                    Vec::new(),
                ));
            }
        };
        let Some(parts) = parse_version(&version, 3) else {
            return Err(self.err(
                &raw.version.referenced,
                format!("invalid pgbouncer version `{version}`: expected MAJOR.MINOR.PATCH"),
                vec!["e.g. \"1.25.2\"".into()],
            ));
        };
        let target = (parts[0], parts[1]);
        let binary = self.optional_path(&raw.binary, "pgbouncer.binary")?;

        let modes = "valid pool modes: session, transaction, statement";
        let pool_mode = match &raw.pool_mode.value {
            Node::Str(s) => match PoolMode::from_name(s) {
                Some(m) => m,
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(s, PoolMode::ALL.iter().map(|m| m.as_str()));
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(modes.into());
                    return Err(self.err(
                        &raw.pool_mode.referenced,
                        format!("unknown pool_mode `{s}`"),
                        hints,
                    ));
                }
            },
            _ => {
                return Err(self.err(
                    &raw.pool_mode.referenced,
                    format!(
                        "`pgbouncer.pool_mode` must be a pool mode, found {}",
                        self.found(&raw.pool_mode)
                    ),
                    vec![modes.into()],
                ));
            }
        };
        let default_pool_size = self.u32_or(
            &raw.default_pool_size,
            "pgbouncer.default_pool_size",
            1,
            10_000,
            DEFAULT_POOL_SIZE,
        )?;
        let max_client_conn = self.u32_or(
            &raw.max_client_conn,
            "pgbouncer.max_client_conn",
            1,
            100_000,
            DEFAULT_MAX_CLIENT_CONN,
        )?;
        let server_reset_query = match &raw.server_reset_query.value {
            Node::Absent => DEFAULT_SERVER_RESET_QUERY.to_string(),
            Node::Str(s) if s.contains(['\n', '\r']) => {
                return Err(self.err(
                    &raw.server_reset_query.referenced,
                    "`pgbouncer.server_reset_query` must be one line",
                    Vec::new(),
                ));
            }
            Node::Str(s) => s.clone(),
            _ => {
                return Err(self.err(
                    &raw.server_reset_query.referenced,
                    format!(
                        "`pgbouncer.server_reset_query` must be a string, found {}",
                        self.found(&raw.server_reset_query)
                    ),
                    vec![
                        "write `\"\"` for no reset query, or remove the key for `DISCARD ALL`"
                            .into(),
                    ],
                ));
            }
        };
        let server_reset_query_always = self.bool_or(
            &raw.server_reset_query_always,
            "pgbouncer.server_reset_query_always",
            false,
        )?;

        let settings = self.settings(&raw.settings, "pgbouncer")?;
        let mut rendered = BTreeMap::new();
        for s in &settings {
            let name = s.name.value.as_str();
            if let Some((_, why)) = PGBOUNCER_HARNESS_SETTINGS.iter().find(|(n, _)| *n == name) {
                return Err(self.err(
                    &s.name.referenced,
                    format!("`{name}` cannot be set in `pgbouncer.settings`"),
                    vec![why.to_string()],
                ));
            }
            match pgbouncer_setting(name) {
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(
                        name,
                        PGBOUNCER_SETTINGS
                            .iter()
                            .map(|(n, _)| *n)
                            .filter(|n| !PGBOUNCER_HARNESS_SETTINGS.iter().any(|(h, _)| h == n)),
                    );
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(
                        "valid names are the [pgbouncer] section settings of pgbouncer.ini(5) for PgBouncer 1.25"
                            .into(),
                    );
                    return Err(self.err(
                        &s.name.referenced,
                        format!("unknown pgbouncer setting `{name}`"),
                        hints,
                    ));
                }
                Some(Some(since)) if target < since => {
                    return Err(self.err(
                        &s.name.referenced,
                        format!(
                            "`{name}` needs pgbouncer {}.{} or newer, but `pgbouncer.version` is {version}",
                            since.0, since.1
                        ),
                        vec!["remove the setting, or target a newer pgbouncer".into()],
                    ));
                }
                Some(_) => {}
            }
            rendered.insert(
                name.to_string(),
                self.setting_value(s, "pgbouncer.settings", ("1", "0"))?,
            );
        }
        Ok((
            PgbouncerSpec {
                version,
                binary,
                pool_mode,
                default_pool_size,
                max_client_conn,
                server_reset_query,
                server_reset_query_always,
                settings: rendered,
            },
            settings,
        ))
    }

    fn workload(&self, raw: &RawWorkload) -> Res<Workload> {
        let clients = self.u32_or(
            &raw.clients,
            "workload.clients",
            1,
            MAX_CLIENTS,
            DEFAULT_CLIENTS,
        )?;
        let keys = self.keys(&raw.keys)?;

        let apis = "valid apis: session, xact, mixed";
        let api = match &raw.api.value {
            Node::Absent => Api::Session,
            Node::Str(s) => Api::from_name(s).ok_or_else(|| {
                let mut hints = Vec::new();
                let close = close_matches(s, Api::ALL.iter().map(|a| a.as_str()));
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                hints.push(apis.into());
                self.err(&raw.api.referenced, format!("unknown api `{s}`"), hints)
            })?,
            _ => {
                return Err(self.err(
                    &raw.api.referenced,
                    format!(
                        "`workload.api` must be an api name, found {}",
                        self.found(&raw.api)
                    ),
                    vec![apis.into()],
                ));
            }
        };

        let (steps_min, steps_max) = self.steps(&raw.steps)?;
        let lock_timeout = self.duration_or(
            &raw.lock_timeout,
            "workload.lock_timeout",
            Some(Duration::from_millis(MAX_LOCK_TIMEOUT_MS)),
            Duration::from_millis(DEFAULT_LOCK_TIMEOUT_MS),
        )?;
        let ops = self.ops(&raw.ops, api)?;

        Ok(Workload {
            clients,
            keys,
            api,
            steps_min,
            steps_max,
            ops,
            lock_timeout_ms: lock_timeout.as_millis() as u64,
        })
    }

    fn keys(&self, leaf: &Leaf) -> Res<Vec<Key>> {
        const FORMS: &str = "a key is a bigint (`4242424242`) or an int4 pair (`[1, 612001]`); or write `keys: { count: N }`";
        let items = match &leaf.value {
            Node::Absent => return Ok(DEFAULT_KEYS.to_vec()),
            Node::Seq(items) => items,
            Node::Map(entries) => {
                let mut count = None;
                for (k, v) in entries {
                    if k.value != "count" {
                        return Err(self.err(
                            &k.referenced,
                            format!("unknown key `{}` in `workload.keys`", k.value),
                            vec!["the mapping form is `keys: { count: N }`".into()],
                        ));
                    }
                    count = Some(self.int(v, "workload.keys.count", 1, MAX_KEY_COUNT.into())?);
                }
                let Some(n) = count else {
                    return Err(self.err(
                        &leaf.referenced,
                        "missing required key `count` in `workload.keys`",
                        vec!["the mapping form is `keys: { count: N }`".into()],
                    ));
                };
                return Ok((1..=n as i64).map(Key::Big).collect());
            }
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`workload.keys` must be a list of keys, found {}",
                        self.found(leaf)
                    ),
                    vec![FORMS.into()],
                ));
            }
        };
        if items.is_empty() {
            return Err(self.err(
                &leaf.referenced,
                "`workload.keys` must not be empty",
                vec![FORMS.into()],
            ));
        }
        let mut keys: Vec<(Key, Location)> = Vec::new();
        for item in items {
            let key = match &item.value {
                Node::Int(i) => i64::try_from(*i).ok().map(Key::Big),
                Node::Seq(pair) if pair.len() == 2 => match (&pair[0].value, &pair[1].value) {
                    (Node::Int(a), Node::Int(b)) => {
                        for p in pair {
                            if let Node::Int(v) = p.value
                                && i32::try_from(v).is_err()
                            {
                                return Err(self.err(
                                    &p.referenced,
                                    format!("pair key element {v} is out of the int4 range"),
                                    vec![format!(
                                        "int4 is {} to {}; use a single bigint key for larger values",
                                        i32::MIN,
                                        i32::MAX
                                    )],
                                ));
                            }
                        }
                        Some(Key::Pair(*a as i32, *b as i32))
                    }
                    _ => None,
                },
                _ => None,
            };
            let Some(key) = key else {
                return Err(self.err(
                    &item.referenced,
                    format!("invalid advisory key: found {}", self.found(item)),
                    vec![
                        FORMS.into(),
                        format!("a bigint key is {} to {}", i64::MIN, i64::MAX),
                    ],
                ));
            };
            if let Some((_, first)) = keys.iter().find(|(k, _)| *k == key) {
                return Err(self.err(
                    &item.referenced,
                    format!("duplicate key {key} in `workload.keys`"),
                    vec![format!(
                        "first listed at line {}, column {}",
                        first.line(),
                        first.column()
                    )],
                ));
            }
            keys.push((key, item.referenced));
        }
        Ok(keys.into_iter().map(|(k, _)| k).collect())
    }

    fn steps(&self, leaf: &Leaf) -> Res<(usize, usize)> {
        const FORMS: &str = "steps is `a..b` (b excluded), `a..=b` (b included) or an integer N (exactly N), with 1 <= a";
        let max = MAX_STEPS as i128;
        let (lo, hi, text) = match &leaf.value {
            Node::Absent => return Ok((DEFAULT_STEPS_MIN, DEFAULT_STEPS_MAX)),
            Node::Int(_) => {
                let n = self.int(leaf, "workload.steps", 1, max)? as usize;
                return Ok((n, n));
            }
            Node::Str(s) => {
                let parsed = if let Some((a, b)) = s.split_once("..=") {
                    a.parse::<i128>().ok().zip(b.parse::<i128>().ok())
                } else if let Some((a, b)) = s.split_once("..") {
                    a.parse::<i128>()
                        .ok()
                        .zip(b.parse::<i128>().ok().map(|b| b - 1))
                } else {
                    None
                };
                match parsed {
                    Some((lo, hi)) => (lo, hi, s.as_str()),
                    None => {
                        return Err(self.err(
                            &leaf.referenced,
                            format!("`workload.steps` is not a range: `{s}`"),
                            vec![FORMS.into()],
                        ));
                    }
                }
            }
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`workload.steps` must be a range, found {}",
                        self.found(leaf)
                    ),
                    vec![FORMS.into()],
                ));
            }
        };
        if lo < 1 {
            return Err(self.err(
                &leaf.referenced,
                format!("`workload.steps` must start at 1 or more: `{text}`"),
                vec![FORMS.into()],
            ));
        }
        if hi < lo {
            return Err(self.err(
                &leaf.referenced,
                format!("`workload.steps` range `{text}` is empty"),
                vec![
                    "the start must not exceed the end: e.g. `1..40` (1 to 39) or `1..=40`".into(),
                ],
            ));
        }
        if hi > max {
            return Err(self.err(
                &leaf.referenced,
                format!("`workload.steps` allows at most {MAX_STEPS} steps: `{text}`"),
                Vec::new(),
            ));
        }
        Ok((lo as usize, hi as usize))
    }

    fn ops(&self, leaf: &Leaf, api: Api) -> Res<BTreeMap<Op, u32>> {
        let mut weights = api.default_weights();
        for (name, value) in self.entries(leaf, "workload.ops")? {
            let Some(op) = Op::from_name(&name.value) else {
                let mut hints = Vec::new();
                let close = close_matches(&name.value, Op::ALL.iter().map(|o| o.name()));
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                let valid: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
                hints.push(format!("valid ops: {}", valid.join(", ")));
                return Err(self.err(
                    &name.referenced,
                    format!("unknown op `{}`", name.value),
                    hints,
                ));
            };
            let w = self.int(
                value,
                &format!("workload.ops.{}", name.value),
                0,
                MAX_WEIGHT.into(),
            )? as u32;
            if w > 0 && !api.allows(op) {
                let level = if op.is_session_api() {
                    "session-level"
                } else {
                    "transaction-level"
                };
                return Err(self.err(
                    &name.referenced,
                    format!("`{op}` is a {level} op, but `workload.api` is `{api}`"),
                    vec![format!(
                        "give `{op}` weight 0 or remove it, or use `api: mixed`"
                    )],
                ));
            }
            if w == 0 {
                weights.remove(&op);
            } else {
                weights.insert(op, w);
            }
        }
        let lock_ops = [Op::TryLock, Op::Lock, Op::XactLock, Op::TryXactLock];
        if !lock_ops.iter().any(|op| weights.contains_key(op)) {
            let allowed: Vec<&str> = lock_ops
                .iter()
                .filter(|op| api.allows(**op))
                .map(|op| op.name())
                .collect();
            return Err(self.err(
                &leaf.referenced,
                "`workload.ops` leaves no lock op with a weight above 0",
                vec![format!("give {} a weight above 0", or_list(&allowed))],
            ));
        }
        Ok(weights)
    }

    fn run(&self, raw: &RawRun) -> Res<RunSpec> {
        let cases = self.u32_or(&raw.cases, "run.cases", 1, u32::MAX, DEFAULT_CASES)?;
        let seed = match &raw.seed.value {
            Node::Absent => None,
            Node::Str(s) if s == "random" => None,
            Node::Int(_) => Some(self.int(&raw.seed, "run.seed", 0, u64::MAX.into())? as u64),
            _ => {
                return Err(self.err(
                    &raw.seed.referenced,
                    format!(
                        "`run.seed` must be `random` or an integer, found {}",
                        self.found(&raw.seed)
                    ),
                    vec![format!("a seed is `random` or 0 to {}", u64::MAX)],
                ));
            }
        };
        let time_limit = self.duration_or(
            &raw.time_limit,
            "run.time_limit",
            None,
            Duration::from_secs(DEFAULT_TIME_LIMIT_SECS),
        )?;
        let max_shrink_runs = self.u32_or(
            &raw.max_shrink_runs,
            "run.max_shrink_runs",
            0,
            u32::MAX,
            DEFAULT_MAX_SHRINK_RUNS,
        )?;
        Ok(RunSpec {
            cases,
            seed,
            time_limit,
            max_shrink_runs,
        })
    }

    fn expect(&self, leaf: &Leaf) -> Res<BTreeMap<String, Verdict>> {
        let app_names: Vec<&str> = INVARIANTS
            .iter()
            .filter(|(_, t, _)| *t == Tier::App)
            .map(|(n, _, _)| *n)
            .collect();
        let mut out = BTreeMap::new();
        for (name, value) in self.entries(leaf, "expect")? {
            let n = name.value.as_str();
            match invariant(n) {
                Some((Tier::App, _)) => {}
                Some((Tier::Pg, _)) => {
                    return Err(self.err(
                        &name.referenced,
                        format!("`{n}` cannot be listed in `expect`: pg.* invariants must always hold"),
                        vec![
                            "a pg.* violation is a bug in PostgreSQL or in the harness, never an expectation".into(),
                            format!("expectable invariants: {}", app_names.join(", ")),
                        ],
                    ));
                }
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(n, app_names.iter().copied());
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(format!("expectable invariants: {}", app_names.join(", ")));
                    return Err(self.err(
                        &name.referenced,
                        format!("unknown invariant `{n}`"),
                        hints,
                    ));
                }
            }
            let verdict = match &value.value {
                Node::Str(s) if s == "holds" => Verdict::Holds,
                Node::Str(s) if s == "violated" => Verdict::Violated,
                _ => {
                    return Err(self.err(
                        &value.referenced,
                        format!(
                            "the verdict for `{n}` must be `holds` or `violated`, found {}",
                            self.found(value)
                        ),
                        Vec::new(),
                    ));
                }
            };
            out.insert(n.to_string(), verdict);
        }
        Ok(out)
    }
}

impl Default for RawWorkload {
    fn default() -> Self {
        RawWorkload {
            clients: absent(),
            keys: absent(),
            api: absent(),
            steps: absent(),
            lock_timeout: absent(),
            ops: absent(),
        }
    }
}

impl Default for RawRun {
    fn default() -> Self {
        RawRun {
            cases: absent(),
            seed: absent(),
            time_limit: absent(),
            max_shrink_runs: absent(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bad");
    const TOPOLOGIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../topologies");

    fn parse(src: &str) -> Result<Topology, TopologyError> {
        Topology::parse(src, Path::new("t.yaml"))
    }

    fn ok(src: &str) -> Topology {
        parse(src).unwrap_or_else(|e| panic!("expected valid topology, got:\n{e}"))
    }

    fn err(src: &str) -> TopologyError {
        match parse(src) {
            Ok(t) => panic!("expected an error, parsed {t:?}"),
            Err(e) => e,
        }
    }

    const MINIMAL: &str = "name: minimal\npostgres:\n  version: \"18.6\"\n";

    fn load_bad(file: &str) -> TopologyError {
        let path = Path::new(FIXTURES).join(file);
        match Topology::load(&path) {
            Ok(t) => panic!("{file}: expected an error, parsed {t:?}"),
            Err(e) => e,
        }
    }

    fn check_bad(file: &str, line: usize, column: usize, needle: &str) {
        let e = load_bad(file);
        assert!(!e.is_io(), "{file}: {e}");
        assert_eq!(
            (e.line(), e.column()),
            (Some(line), Some(column)),
            "{file}: wrong position in:\n{e}"
        );
        assert!(
            e.message().contains(needle),
            "{file}: message lacks {needle:?}:\n{e}"
        );
        let shown = e.to_string();
        let head = format!("{}:{line}:{column}: ", e.path().display());
        assert!(
            shown.starts_with(&head),
            "{file}: display should start with {head:?}:\n{shown}"
        );
        assert_eq!(e.message(), e.message().trim(), "{file}");
        assert!(
            e.message().starts_with(|c: char| !c.is_uppercase()),
            "{file}: messages are lower-case: {}",
            e.message()
        );
        if file != "empty.yaml" {
            assert!(
                shown.lines().nth(2).is_some_and(|l| l.contains('^')),
                "{file}: no caret line:\n{shown}"
            );
        }
    }

    /// One test per bad fixture (file, line:column, a substring of the message); also lists
    /// the files so that a fixture without a test is noticed.
    macro_rules! bad_fixtures {
        ($($test:ident => $file:literal, $line:literal:$col:literal, $needle:literal;)*) => {
            const BAD_FILES: &[&str] = &[$($file),*];
            $(
                #[test]
                fn $test() {
                    check_bad($file, $line, $col, $needle);
                }
            )*
        };
    }

    bad_fixtures! {
        fixture_bad_duration => "bad-duration.yaml", 7:15, "`run.time_limit` is not a duration: `1 minute`";
        fixture_bad_name => "bad-name.yaml", 2:7, "invalid topology name `Transaction_Mode`";
        fixture_bad_pool_mode => "bad-pool-mode.yaml", 7:14, "unknown pool_mode `transction`";
        fixture_comments_only => "comments-only.yaml", 1:1, "empty topology";
        fixture_direct_clients_exceed_max_connections => "direct-clients-exceed-max-connections.yaml", 6:22, "12 direct clients do not fit: PostgreSQL has room for 9";
        fixture_duplicate_advisory_key => "duplicate-advisory-key.yaml", 6:43, "duplicate key (1,612001) in `workload.keys`";
        fixture_duplicate_key => "duplicate-key.yaml", 9:3, "duplicate key `pool_mode`";
        fixture_duration_without_unit => "duration-without-unit.yaml", 6:17, "`workload.lock_timeout` needs a unit";
        fixture_empty => "empty.yaml", 1:1, "empty topology";
        fixture_harness_pgbouncer_setting => "harness-pgbouncer-setting.yaml", 8:15, "`listen_port` cannot be set in `pgbouncer.settings`";
        fixture_lock_timeout_too_long => "lock-timeout-too-long.yaml", 6:17, "`workload.lock_timeout` must be at most 10s, found 2m";
        fixture_max_client_conn_below_clients => "max-client-conn-below-clients.yaml", 8:20, "`pgbouncer.max_client_conn` (6) is below `workload.clients` (8)";
        fixture_missing_postgres => "missing-postgres.yaml", 2:1, "missing required key `postgres` at the top level";
        fixture_no_lock_op => "no-lock-op.yaml", 7:5, "leaves no lock op with a weight above 0";
        fixture_pg_invariant_in_expect => "pg-invariant-in-expect.yaml", 7:3, "pg.* invariants must always hold";
        fixture_pgbouncer_setting_has_top_level_key => "pgbouncer-setting-has-top-level-key.yaml", 9:5, "`pool_mode` cannot be set in `pgbouncer.settings`";
        fixture_pgbouncer_setting_too_new => "pgbouncer-setting-too-new.yaml", 9:5, "`transaction_timeout` needs pgbouncer 1.25 or newer";
        fixture_pgbouncer_version_two_parts => "pgbouncer-version-two-parts.yaml", 6:12, "invalid pgbouncer version `1.25`";
        fixture_pool_exceeds_max_connections => "pool-exceeds-max-connections.yaml", 10:22, "the pool needs 35 server connections but PostgreSQL has room for 33";
        fixture_pool_size_zero => "pool-size-zero.yaml", 8:22, "`pgbouncer.default_pool_size` must be an integer from 1 to 10000, found 0";
        fixture_postgres_harness_setting => "postgres-harness-setting.yaml", 7:5, "`port` cannot be set in a topology";
        fixture_postgres_version_major_only => "postgres-version-major-only.yaml", 4:12, "invalid postgres version `18`: expected MAJOR.MINOR";
        fixture_session_op_with_xact_api => "session-op-with-xact-api.yaml", 7:24, "`try_lock` is a session-level op, but `workload.api` is `xact`";
        fixture_steps_reversed => "steps-reversed.yaml", 6:10, "`workload.steps` range `40..1` is empty";
        fixture_tab_indentation => "tab-indentation.yaml", 4:1, "tabs";
        fixture_unknown_invariant => "unknown-invariant.yaml", 6:3, "unknown invariant `app.mutual_exlusion`";
        fixture_unknown_key_in_section => "unknown-key-in-section.yaml", 8:3, "unknown key `server_lifetime` in `pgbouncer`";
        fixture_unknown_op => "unknown-op.yaml", 8:5, "unknown op `tri_lock`";
        fixture_unknown_pgbouncer_setting => "unknown-pgbouncer-setting.yaml", 10:5, "unknown pgbouncer setting `server_lifetme`";
        fixture_unknown_top_level_key => "unknown-top-level-key.yaml", 5:1, "unknown key `pgbouncr` at the top level";
        fixture_wrong_type => "wrong-type.yaml", 6:12, "`workload.clients` must be an integer from 1 to 64, found `four`";
    }

    #[test]
    fn every_bad_fixture_has_a_test() {
        let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = BAD_FILES.iter().map(|f| f.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed);
        assert!(listed.len() >= 14);
    }

    #[test]
    fn hints_say_what_is_valid() {
        let e = load_bad("bad-pool-mode.yaml");
        assert!(
            e.hints().iter().any(|h| h == "did you mean `transaction`?"),
            "{e}"
        );
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("session, transaction, statement"))
        );

        let e = load_bad("unknown-top-level-key.yaml");
        assert!(
            e.hints().iter().any(|h| h == "did you mean `pgbouncer`?"),
            "{e}"
        );
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("name, description, postgres, pgbouncer"))
        );

        let e = load_bad("unknown-pgbouncer-setting.yaml");
        assert!(
            e.hints().iter().any(|h| h.contains("`server_lifetime`")),
            "{e}"
        );

        let e = load_bad("unknown-key-in-section.yaml");
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("under `pgbouncer.settings`")),
            "{e}"
        );

        let e = load_bad("pgbouncer-setting-has-top-level-key.yaml");
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("use the top-level key")),
            "{e}"
        );

        let e = load_bad("unknown-op.yaml");
        assert!(e.hints().iter().any(|h| h.contains("`try_lock`")), "{e}");
        assert!(
            e.hints()
                .iter()
                .any(|h| h.starts_with("valid ops: try_lock, lock,"))
        );

        let e = load_bad("unknown-invariant.yaml");
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("`app.mutual_exclusion`")),
            "{e}"
        );

        let e = load_bad("tab-indentation.yaml");
        assert!(
            e.hints().iter().any(|h| h.contains("spaces, not tabs")),
            "{e}"
        );
    }

    #[test]
    fn display_is_path_position_message_snippet_caret_hints() {
        let e = load_bad("bad-pool-mode.yaml");
        let path = Path::new(FIXTURES).join("bad-pool-mode.yaml");
        let expected = format!(
            "{}:7:14: unknown pool_mode `transction`\n\
             7 |   pool_mode: transction\n  \
             |              ^^^^^^^^^^\n\
             hint: did you mean `transaction`?\n\
             hint: valid pool modes: session, transaction, statement",
            path.display()
        );
        assert_eq!(e.to_string(), expected);
    }

    #[test]
    fn tabs_are_expanded_in_snippets() {
        let shown = load_bad("tab-indentation.yaml").to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[1], "4 |     version: \"18.6\"");
        assert_eq!(lines[2], "  | ^");
    }

    #[test]
    fn io_errors_name_the_file() {
        let e = Topology::load(Path::new("/nonexistent/dir/t.yaml")).unwrap_err();
        assert!(e.is_io());
        assert_eq!(e.line(), None);
        assert!(
            e.to_string()
                .starts_with("/nonexistent/dir/t.yaml: cannot read: "),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn shipped_topologies_parse() {
        let mut seen = Vec::new();
        for entry in std::fs::read_dir(TOPOLOGIES).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let t = Topology::load(&path).unwrap_or_else(|e| panic!("{e}"));
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            assert_eq!(t.name, stem, "name should match the file name");
            assert!(t.description.is_some(), "{stem}: describe it");
            assert_eq!(t.workload.clients, 4, "{stem}");
            assert!(
                t.workload
                    .keys
                    .starts_with(&[Key::Big(4242424242), Key::Big(612001)])
            );
            assert_eq!(t.run.cases, 256, "{stem}");
            assert_eq!(t.run.seed, None, "{stem}");
            assert_eq!(t.run.time_limit, Duration::from_secs(60), "{stem}");
            if let Some(b) = &t.pgbouncer {
                // Transaction pooling shares 2 servers among 4 clients; session pooling pins
                // a server per client, so it gets one each (no skipped steps).
                let want = if b.pool_mode == PoolMode::Session {
                    4
                } else {
                    2
                };
                assert_eq!(b.default_pool_size, want, "{stem}");
            }
            assert!(
                t.expect.values().all(|v| *v == Verdict::Violated),
                "{stem}: list only violations"
            );
            assert_eq!(t.source, path);
            seen.push(stem);
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                "direct",
                "session-mode",
                "session-mode-no-reset",
                "transaction-mode",
                "transaction-mode-reset-always",
                "transaction-mode-xact",
            ]
        );
    }

    #[test]
    fn shipped_topologies_expect_what_was_decided() {
        let violated = |name: &str| -> Vec<String> {
            let t = Topology::load(&Path::new(TOPOLOGIES).join(format!("{name}.yaml"))).unwrap();
            INVARIANTS
                .iter()
                .filter(|(n, _, _)| t.expected(n) == Verdict::Violated)
                .map(|(n, _, _)| n.to_string())
                .collect()
        };
        let direct = ["app.rollback_releases", "app.no_stale_holder"];
        assert_eq!(violated("direct"), direct);
        assert_eq!(violated("session-mode"), direct);
        assert_eq!(
            violated("session-mode-no-reset"),
            [
                "app.no_orphans",
                "app.rollback_releases",
                "app.no_stale_holder"
            ]
        );
        assert_eq!(
            violated("transaction-mode"),
            [
                "app.mutual_exclusion",
                "app.no_orphans",
                "app.unlock_reaches_owner",
                "app.rollback_releases",
                "app.no_stale_holder"
            ]
        );
        assert_eq!(
            violated("transaction-mode-reset-always"),
            [
                "app.mutual_exclusion",
                "app.unlock_reaches_owner",
                "app.no_stale_holder"
            ]
        );
        assert_eq!(violated("transaction-mode-xact"), ["app.no_stale_holder"]);

        let t = Topology::load(&Path::new(TOPOLOGIES).join("transaction-mode.yaml")).unwrap();
        assert!(t.workload.keys.contains(&Key::Pair(1, 612001)));
        let t = Topology::load(&Path::new(TOPOLOGIES).join("transaction-mode-xact.yaml")).unwrap();
        assert_eq!(t.workload.api, Api::Xact);
        assert_eq!(t.workload.ops, Api::Xact.default_weights());
        let t = Topology::load(&Path::new(TOPOLOGIES).join("direct.yaml")).unwrap();
        assert!(t.is_direct());
    }

    #[test]
    fn documented_example_parses() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/topology.md"))
                .unwrap();
        let start = doc
            .find("```yaml\n")
            .expect("docs/topology.md has a yaml example")
            + 8;
        let len = doc[start..].find("```").unwrap();
        let t = Topology::parse(&doc[start..start + len], Path::new("docs/topology.md"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.name, "transaction-mode");
        assert_eq!(t.pgbouncer.unwrap().settings["server_lifetime"], "3600");
    }

    #[test]
    fn defaults_apply() {
        let t = ok(MINIMAL);
        assert_eq!(t.name, "minimal");
        assert_eq!(t.description, None);
        assert_eq!(t.postgres.version, "18.6");
        assert_eq!(t.postgres.bin_dir, None);
        assert!(t.postgres.settings.is_empty());
        assert!(t.pgbouncer.is_none());
        let w = &t.workload;
        assert_eq!(w.clients, 4);
        assert_eq!(w.keys, [Key::Big(4242424242), Key::Big(612001)]);
        assert_eq!(w.api, Api::Session);
        assert_eq!((w.steps_min, w.steps_max), (1, 39));
        assert_eq!(w.ops, Api::Session.default_weights());
        assert_eq!(w.lock_timeout_ms, 1);
        assert_eq!(
            t.run,
            RunSpec {
                cases: 256,
                seed: None,
                time_limit: Duration::from_secs(60),
                max_shrink_runs: 512
            }
        );
        assert!(t.expect.is_empty());
        assert_eq!(t.expected("app.mutual_exclusion"), Verdict::Holds);
        assert_eq!(t.expected("pg.exclusion"), Verdict::Holds);
        assert_eq!(t.source, Path::new("t.yaml"));

        let t = ok(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: statement\n"
        ));
        let b = t.pgbouncer.unwrap();
        assert_eq!(b.pool_mode, PoolMode::Statement);
        assert_eq!(b.default_pool_size, 2);
        assert_eq!(b.max_client_conn, 100);
        assert_eq!(b.server_reset_query, "DISCARD ALL");
        assert!(!b.server_reset_query_always);
        assert_eq!(b.binary, None);

        // Null sections mean "use the defaults"; a null pgbouncer means direct.
        let t = ok(&format!("{MINIMAL}pgbouncer:\nworkload: ~\nrun:\n"));
        assert!(t.is_direct());
        assert_eq!(t.workload.clients, 4);
        // Null mappings are empty: `expect:` with every entry commented out.
        let t = ok(&format!(
            "{MINIMAL}  settings:\nexpect:\n  # app.no_orphans: violated\n"
        ));
        assert!(t.expect.is_empty() && t.postgres.settings.is_empty());
    }

    #[test]
    fn full_topology_round_trip() {
        let t = ok(r#"
name: full-1
description: every key
postgres:
  version: 17.10
  bin_dir: /usr/lib/postgresql/17/bin
  settings: { max_connections: 60, fsync: off, random_page_cost: 1.5, shared_buffers: 128MB }
pgbouncer:
  version: "1.25.2"
  binary: /usr/sbin/pgbouncer
  pool_mode: transaction
  default_pool_size: 3
  max_client_conn: 10
  server_reset_query: ""
  server_reset_query_always: true
  settings: { server_lifetime: 3600, server_fast_close: true, reserve_pool_size: 1 }
workload:
  clients: 8
  keys: [-1, [1, 2], [2, 1], 1]
  api: mixed
  steps: 5..=9
  lock_timeout: 1s
  ops: { try_lock: 10, terminate: 0, xact_lock: 5 }
run:
  cases: 10
  seed: 18446744073709551615
  time_limit: 2m
  max_shrink_runs: 0
expect:
  app.no_orphans: violated
  app.mutual_exclusion: holds
"#);
        assert_eq!(t.description.as_deref(), Some("every key"));
        // An unquoted version keeps its spelling (17.10 is not 17.1).
        assert_eq!(t.postgres.version, "17.10");
        assert_eq!(
            t.postgres.bin_dir,
            Some(PathBuf::from("/usr/lib/postgresql/17/bin"))
        );
        let s = &t.postgres.settings;
        assert_eq!(s["max_connections"], "60");
        assert_eq!(s["fsync"], "off");
        assert_eq!(s["random_page_cost"], "1.5");
        assert_eq!(s["shared_buffers"], "128MB");
        let b = t.pgbouncer.as_ref().unwrap();
        assert_eq!(b.binary, Some(PathBuf::from("/usr/sbin/pgbouncer")));
        assert_eq!((b.default_pool_size, b.max_client_conn), (3, 10));
        assert_eq!(b.server_reset_query, "");
        assert!(b.server_reset_query_always);
        assert_eq!(b.settings["server_fast_close"], "1");
        assert_eq!(b.settings["server_lifetime"], "3600");
        let w = &t.workload;
        assert_eq!(
            w.keys,
            [Key::Big(-1), Key::Pair(1, 2), Key::Pair(2, 1), Key::Big(1)]
        );
        assert_eq!((w.steps_min, w.steps_max), (5, 9));
        assert_eq!(w.lock_timeout_ms, 1000);
        assert_eq!(w.ops[&Op::TryLock], 10);
        assert_eq!(w.ops[&Op::XactLock], 5);
        assert_eq!(w.ops[&Op::TryXactLock], 2);
        assert!(
            !w.ops.contains_key(&Op::Terminate),
            "zero weights are removed"
        );
        assert_eq!(t.run.seed, Some(u64::MAX));
        assert_eq!(t.run.time_limit, Duration::from_secs(120));
        assert_eq!(t.run.max_shrink_runs, 0);
        assert_eq!(t.expected("app.no_orphans"), Verdict::Violated);
        assert_eq!(t.expected("app.mutual_exclusion"), Verdict::Holds);
        assert_eq!(t.expect.len(), 2);
    }

    #[test]
    fn steps_forms() {
        let steps = |s: &str| {
            let t = ok(&format!("{MINIMAL}workload:\n  steps: {s}\n"));
            (t.workload.steps_min, t.workload.steps_max)
        };
        assert_eq!(steps("1..40"), (1, 39));
        assert_eq!(steps("3..=3"), (3, 3));
        assert_eq!(steps("2..3"), (2, 2));
        assert_eq!(steps("7"), (7, 7));
        assert_eq!(steps("\"1..=10000\""), (1, 10_000));
        for bad in [
            "0..5",
            "5..5",
            "5..=4",
            "1..=10001",
            "0",
            "1-40",
            "a..b",
            "[1, 40]",
        ] {
            let e = err(&format!("{MINIMAL}workload:\n  steps: {bad}\n"));
            assert_eq!((e.line(), e.column()), (Some(5), Some(10)), "{bad}: {e}");
            assert!(e.message().contains("workload.steps"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations() {
        let lt = |s: &str| {
            ok(&format!("{MINIMAL}workload:\n  lock_timeout: {s}\n"))
                .workload
                .lock_timeout_ms
        };
        assert_eq!(lt("500ms"), 500);
        assert_eq!(lt("10s"), 10_000);
        let tl = |s: &str| {
            ok(&format!("{MINIMAL}run:\n  time_limit: {s}\n"))
                .run
                .time_limit
        };
        assert_eq!(tl("500ms"), Duration::from_millis(500));
        assert_eq!(tl("60s"), Duration::from_secs(60));
        assert_eq!(tl("2m"), Duration::from_secs(120));
        assert_eq!(tl("1h"), Duration::from_secs(3600));
        for bad in ["0s", "1.5s", "s", "10 s", "-1s", "1d", "true"] {
            let e = err(&format!("{MINIMAL}run:\n  time_limit: {bad}\n"));
            assert_eq!((e.line(), e.column()), (Some(5), Some(15)), "{bad}: {e}");
        }
        assert_eq!(parse_duration("18446744073709551615h"), None);
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn keys_forms() {
        let keys = |s: &str| {
            ok(&format!("{MINIMAL}workload:\n  keys: {s}\n"))
                .workload
                .keys
        };
        assert_eq!(
            keys("{ count: 3 }"),
            [Key::Big(1), Key::Big(2), Key::Big(3)]
        );
        assert_eq!(keys("[[0, 5], 5]"), [Key::Pair(0, 5), Key::Big(5)]);
        assert_eq!(
            keys("\n    - 9223372036854775807\n    - [-2147483648, 2147483647]"),
            [Key::Big(i64::MAX), Key::Pair(i32::MIN, i32::MAX)]
        );
        let cases: &[(&str, usize, &str)] = &[
            ("[]", 9, "must not be empty"),
            ("[1, 2, 1]", 16, "duplicate key 1"),
            ("[9223372036854775808]", 10, "invalid advisory key"),
            ("[[1, 2, 3]]", 10, "invalid advisory key"),
            ("[[1, 2147483648]]", 14, "out of the int4 range"),
            ("[x]", 10, "invalid advisory key: found `x`"),
            ("{ count: 0 }", 18, "must be an integer from 1 to 1024"),
            (
                "{ number: 3 }",
                11,
                "unknown key `number` in `workload.keys`",
            ),
            ("42", 9, "must be a list of keys"),
        ];
        for (src, col, needle) in cases {
            let e = err(&format!("{MINIMAL}workload:\n  keys: {src}\n"));
            assert_eq!((e.line(), e.column()), (Some(5), Some(*col)), "{src}: {e}");
            assert!(e.message().contains(needle), "{src}: {e}");
        }
    }

    #[test]
    fn ops_merge_over_api_defaults() {
        let ops = |api: &str, ops: &str| {
            ok(&format!("{MINIMAL}workload:\n  api: {api}\n  ops: {ops}\n"))
                .workload
                .ops
        };
        // A zero weight for the other API's op is allowed (it disables nothing).
        let o = ops("xact", "{ try_lock: 0, xact_lock: 7 }");
        assert_eq!(o[&Op::XactLock], 7);
        assert!(!o.contains_key(&Op::TryLock));
        assert_eq!(o.len(), Api::Xact.default_weights().len());
        // Transaction-level ops are errors under api: session.
        let e = err(&format!(
            "{MINIMAL}workload:\n  api: session\n  ops: {{ xact_lock: 1 }}\n"
        ));
        assert!(
            e.message()
                .contains("`xact_lock` is a transaction-level op"),
            "{e}"
        );
        assert_eq!((e.line(), e.column()), (Some(6), Some(10)));
        // discard_all belongs to the session API.
        let e = err(&format!(
            "{MINIMAL}workload:\n  api: xact\n  ops:\n    discard_all: 1\n"
        ));
        assert_eq!((e.line(), e.column()), (Some(7), Some(5)), "{e}");
        // Statement pooling with transactions is allowed: PgBouncer's refusal is a finding.
        let t = ok(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: statement\nworkload:\n  ops: {{ begin: 5 }}\n"
        ));
        assert_eq!(t.workload.ops[&Op::Begin], 5);
        // Weights are bounded and must be integers.
        let e = err(&format!("{MINIMAL}workload:\n  ops: {{ lock: -1 }}\n"));
        assert!(
            e.message()
                .contains("`workload.ops.lock` must be an integer from 0 to 1000"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}workload:\n  ops: [lock]\n"));
        assert!(
            e.message().contains("`workload.ops` must be a mapping"),
            "{e}"
        );
    }

    #[test]
    fn default_weights_per_api() {
        let s = Api::Session.default_weights();
        assert_eq!(s.len(), 13);
        assert_eq!(
            (s[&Op::TryLock], s[&Op::Lock], s[&Op::Unlock], s[&Op::Begin]),
            (4, 2, 3, 2)
        );
        assert!(s.keys().all(|op| Api::Session.allows(*op)));
        let x = Api::Xact.default_weights();
        assert_eq!(x.len(), 10);
        assert_eq!(
            (x[&Op::XactLock], x[&Op::TryXactLock], x[&Op::Begin]),
            (3, 4, 3)
        );
        assert!(x.keys().all(|op| Api::Xact.allows(*op)));
        let m = Api::Mixed.default_weights();
        assert_eq!(m.len(), 15);
        assert_eq!(
            (m[&Op::XactLock], m[&Op::TryXactLock], m[&Op::Begin]),
            (2, 2, 2)
        );
        for api in Api::ALL {
            assert!(api.default_weights().values().all(|w| *w > 0));
        }
    }

    #[test]
    fn settings_validation() {
        let e = err(&format!(
            "{MINIMAL}  settings:\n    data_directory: /tmp/x\n"
        ));
        assert!(
            e.message().contains("`data_directory` cannot be set"),
            "{e}"
        );
        assert_eq!((e.line(), e.column()), (Some(5), Some(5)));
        let e = err(&format!(
            "{MINIMAL}  settings:\n    max_connections: lots\n"
        ));
        assert!(
            e.message()
                .contains("max_connections` must be a non-negative integer"),
            "{e}"
        );
        assert_eq!((e.line(), e.column()), (Some(5), Some(22)));
        let e = err(&format!("{MINIMAL}  settings:\n    work_mem: [1]\n"));
        assert!(
            e.message().contains("must be a string, number or boolean"),
            "{e}"
        );
        let e = err(&format!(
            "{MINIMAL}  settings:\n    application_name: \"a\\nb\"\n"
        ));
        assert!(e.message().contains("one line"), "{e}");
        let e = err(&format!("{MINIMAL}  max_connections: 10\n"));
        assert!(
            e.hints().iter().any(|h| h.contains("postgres.settings")),
            "{e}"
        );
        // reserved connections count against the room.
        let e = err(&format!(
            "{MINIMAL}  settings:\n    max_connections: 20\n    reserved_connections: 10\nworkload:\n  clients: 4\n"
        ));
        assert!(e.message().contains("room for 3"), "{e}");
        // String integers count too.
        ok(&format!(
            "{MINIMAL}  settings:\n    max_connections: \"12\"\n"
        ));
        // A pgbouncer setting newer than the target version is refused, an older one is fine.
        ok(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.24.0\"\n  pool_mode: session\n  settings: {{ max_db_client_connections: 9 }}\n"
        ));
    }

    #[test]
    fn pool_must_fit_postgres() {
        let src = |pool: u32, max: u32| {
            format!(
                "{MINIMAL}  settings: {{ max_connections: {max} }}\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n  default_pool_size: {pool}\n  settings: {{ min_pool_size: 1 }}\n"
            )
        };
        // room = 20 - 3 - 4 = 13; pool = size + 1 (min_pool_size).
        ok(&src(12, 20));
        let e = err(&src(13, 20));
        assert!(
            e.message()
                .contains("the pool needs 14 server connections but PostgreSQL has room for 13"),
            "{e}"
        );
        assert_eq!((e.line(), e.column()), (Some(8), Some(22)));
        assert!(
            e.hints().iter().any(|h| h.contains("+ min_pool_size 1")),
            "{e}"
        );
    }

    #[test]
    fn versions() {
        let pg = |v: &str| {
            parse(&format!("name: v\npostgres:\n  version: {v}\n")).map(|t| t.postgres.version)
        };
        assert_eq!(pg("\"18.6\"").unwrap(), "18.6");
        assert_eq!(pg("18.6").unwrap(), "18.6");
        for bad in [
            "\"18\"",
            "18",
            "\"18.6.1\"",
            "\"v18.6\"",
            "\"18.\"",
            "[18, 6]",
            "~",
        ] {
            let e = pg(bad).unwrap_err();
            assert_eq!((e.line(), e.column()), (Some(3), Some(12)), "{bad}: {e}");
        }
        let e = pg("\"18.6.1\"").unwrap_err();
        assert!(e.hints()[0].contains("two numbers"), "{e}");
        let bouncer = |v: &str| {
            parse(&format!(
                "{MINIMAL}pgbouncer:\n  version: {v}\n  pool_mode: session\n"
            ))
            .map(|t| t.pgbouncer.unwrap().version)
        };
        assert_eq!(bouncer("1.25.2").unwrap(), "1.25.2");
        assert_eq!(bouncer("\"1.25.2\"").unwrap(), "1.25.2");
        assert!(
            bouncer("1.25")
                .unwrap_err()
                .message()
                .contains("quoted version")
        );
        assert!(
            bouncer("\"1.25.2.1\"")
                .unwrap_err()
                .message()
                .contains("MAJOR.MINOR.PATCH")
        );
    }

    #[test]
    fn structural_errors() {
        let e = err("- a\n- b\n");
        assert_eq!((e.line(), e.column()), (Some(1), Some(1)));
        assert!(
            e.message()
                .contains("expected a mapping here, found a sequence"),
            "{e}"
        );
        let e = err("name: x\npostgres: ~\n");
        assert!(e.message().contains("`postgres` must be a mapping"), "{e}");
        let e = err(&format!("{MINIMAL}pgbouncer: transaction\n"));
        assert_eq!((e.line(), e.column()), (Some(4), Some(12)), "{e}");
        let e = err(&format!("{MINIMAL}---\nname: y\n"));
        assert!(e.message().contains("one YAML document"), "{e}");
        let e = err("name: x\npostgres:\n  bin_dir: /x\n");
        assert!(
            e.message()
                .contains("missing required key `version` in `postgres`"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n"));
        assert!(
            e.message()
                .contains("missing required key `pool_mode` in `pgbouncer`"),
            "{e}"
        );
        let e = err("postgres:\n  version: \"18.6\"\n");
        assert!(e.message().contains("missing required key `name`"), "{e}");
        let e = err(&format!("{MINIMAL}run:\n  cases: 0\n"));
        assert!(
            e.message()
                .contains("`run.cases` must be an integer >= 1, found 0"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}run:\n  seed: sometimes\n"));
        assert!(
            e.message()
                .contains("`run.seed` must be `random` or an integer"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}workload:\n  api: transaction\n"));
        assert!(e.message().contains("unknown api `transaction`"), "{e}");
        let e = err(&format!("{MINIMAL}description:\n"));
        assert!(
            e.message().contains("`description` must be a string"),
            "{e}"
        );
        let e = err(&format!(
            "{MINIMAL}pgbouncer:\n  version: \"1.25.2\"\n  pool_mode: session\n  server_reset_query_always: yes please\n"
        ));
        assert!(e.message().contains("must be a boolean"), "{e}");
        let e = err(&format!("{MINIMAL}expect:\n  app.no_orphans: maybe\n"));
        assert!(e.message().contains("must be `holds` or `violated`"), "{e}");
        assert_eq!((e.line(), e.column()), (Some(5), Some(19)));
        let e = err(&format!("{MINIMAL}workload:\n  bogus: 1\n"));
        assert!(
            e.message().contains("unknown key `bogus` in `workload`"),
            "{e}"
        );
        assert!(
            e.hints()
                .iter()
                .any(|h| h.contains("clients, keys, api, steps, lock_timeout, ops"))
        );
    }

    #[test]
    fn invariants_table() {
        let mut names: Vec<&str> = INVARIANTS.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names.len(), 13);
        for (name, tier, description) in INVARIANTS {
            assert!(name.starts_with(&format!("{tier}.")), "{name}");
            assert!(!description.is_empty() && !description.ends_with('.'));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 13);
        assert_eq!(invariant("app.no_orphans").map(|(t, _)| t), Some(Tier::App));
        assert_eq!(invariant("nope"), None);
    }

    #[test]
    fn enums_spell_like_yaml() {
        assert_eq!(PoolMode::Transaction.to_string(), "transaction");
        assert_eq!(PoolMode::Session.as_str(), "session");
        assert_eq!(Api::Xact.to_string(), "xact");
        assert_eq!(Verdict::Violated.to_string(), "violated");
        assert_eq!(serde_json::to_string(&Verdict::Holds).unwrap(), "\"holds\"");
        assert_eq!(
            serde_json::from_str::<Verdict>("\"violated\"").unwrap(),
            Verdict::Violated
        );
        assert_eq!(
            serde_json::to_string(&PoolMode::Statement).unwrap(),
            "\"statement\""
        );
        assert_eq!(serde_json::to_string(&Tier::Pg).unwrap(), "\"pg\"");
    }

    #[test]
    fn resolve_names_and_paths() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        // A name is looked up in topologies/, walking up to the workspace root.
        let p = resolve_from("transaction-mode", here);
        assert!(p.ends_with("topologies/transaction-mode.yaml"), "{p:?}");
        assert!(p.is_file(), "{p:?}");
        let root = Path::new(TOPOLOGIES).parent().unwrap();
        assert_eq!(
            resolve_from("direct", root),
            Path::new("topologies/direct.yaml")
        );
        // Paths are taken as given.
        assert_eq!(resolve_from("x/y", here), Path::new("x/y"));
        assert_eq!(resolve_from("t.yaml", here), Path::new("t.yaml"));
        assert_eq!(resolve_from("t.yml", here), Path::new("t.yml"));
        // Unknown names stay relative, so the load error names them.
        assert_eq!(
            resolve_from("no-such-topology", here),
            Path::new("topologies/no-such-topology.yaml")
        );
        assert!(resolve("no-such-topology").ends_with("topologies/no-such-topology.yaml"));
    }

    #[test]
    fn close_matches_are_close() {
        assert_eq!(
            close_matches("pgbouncr", TOP_KEYS.iter().copied()),
            ["pgbouncer"]
        );
        assert_eq!(
            close_matches("zzzz", TOP_KEYS.iter().copied()),
            Vec::<&str>::new()
        );
        assert!(
            close_matches("pool_size", PGBOUNCER_KEYS.iter().copied())
                .contains(&"default_pool_size")
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(or_list(&["a", "b", "c"]), "`a`, `b` or `c`");
    }

    #[test]
    fn known_pgbouncer_settings_are_sorted_and_cover_harness_keys() {
        let names: Vec<&str> = PGBOUNCER_SETTINGS.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        for (name, _) in PGBOUNCER_HARNESS_SETTINGS {
            assert!(names.contains(name), "{name}");
        }
    }
}
