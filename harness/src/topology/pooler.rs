//! The topology's half of the pooler seam: a pooler's section (`pgbouncer:`, `pgpool:`) is
//! read by the pooler itself ([`PoolerSection`], in its folder under `pooler/`), through a
//! [`Section`] reader that gives its complaints the same positions, snippets and hints as
//! every other key; what it returns is opaque to the topology ([`PoolerConfig`]) except for
//! what the topology's own checks need (the faults it has, the timeouts it runs with). The
//! list of pooler sections is handed in with the invariants ([`Catalog`]), as the checker's
//! invariants are: this module imports no pooler.

use super::convert::{is_given, parse_version};
use super::*;
use std::any::Any;
use std::sync::Arc;

/// What `Topology::parse` needs to know beyond the file: the invariants `expect:` may name,
/// and the poolers whose sections a topology may have.
#[derive(Clone, Copy)]
pub struct Catalog<'a> {
    pub invariants: &'a [InvariantInfo],
    pub poolers: &'a [&'a dyn PoolerSection],
}

/// A pooler's topology section: its key, and how it is read.
pub trait PoolerSection: Sync {
    /// The section's key and the pooler's name (`pgbouncer`).
    fn key(&self) -> &'static str;
    /// The keys the section may have.
    fn keys(&self) -> &'static [&'static str];
    /// A further hint for an unknown key of the section (e.g. "that is a setting: put it
    /// under `settings`").
    fn unknown_key_hint(&self, key: &str) -> Option<String> {
        let _ = key;
        None
    }
    /// Read the section (its keys already checked against [`PoolerSection::keys`]); `room`
    /// says what the rest of the topology leaves for the pooler's connections.
    fn parse(&self, s: &Section<'_>, room: &Room) -> Result<PoolerSpec, TopologyError>;
}

/// What a pooler section parsed into: opaque to the topology but for these.
pub trait PoolerConfig: fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    /// The same configuration (for `Topology`'s equality).
    fn same(&self, other: &dyn PoolerConfig) -> bool;
    /// The faults of the servers that need a pooler (`needs_pooler` in `vocab::fault`) this
    /// pooler has.
    fn faults(&self) -> &'static [Op];
    /// Whether the model knows what this pooler does to its clients through a fault of
    /// PostgreSQL (a restart, a killed or frozen backend, its host or link): PgBouncer's is
    /// measured (docs/faults.md). A topology with a pooler that lacks it is refused PostgreSQL's
    /// faults at `check`.
    fn postgres_faults_modelled(&self) -> bool;
    /// The timeouts it runs with that close servers or clients (by what they do, in
    /// milliseconds; 0 or absent: off).
    fn timeouts(&self) -> Vec<(crate::vocab::timeout::Effect, u64)>;
    /// The pooler itself, built from this configuration for the topology `name`: an
    /// `Arc<dyn crate::pooler::Pooler>` in a box (the topology cannot name that trait;
    /// `pooler::for_topology` unboxes it).
    fn build(&self, topology_name: &str) -> Box<dyn Any>;
}

/// A topology's pooler.
#[derive(Clone, Debug)]
pub struct PoolerSpec {
    /// The section's key (`pgbouncer`).
    pub kind: &'static str,
    /// As the file declares it (`1.25.2`).
    pub version: String,
    /// The executable; `None` lets provisioning find it.
    pub binary: Option<PathBuf>,
    /// How many of it run side by side in front of PostgreSQL (`replicas:`, every pooler's
    /// section has it; default 1), each with its own pool, the clients spread over them.
    pub replicas: u32,
    pub config: Arc<dyn PoolerConfig>,
}

impl PartialEq for PoolerSpec {
    fn eq(&self, other: &PoolerSpec) -> bool {
        self.kind == other.kind
            && self.version == other.version
            && self.replicas == other.replicas
            && self.binary == other.binary
            && self.config.same(other.config.as_ref())
    }
}

impl PoolerSpec {
    /// The pooler's own configuration, when it is a `T`.
    pub fn config<T: 'static>(&self) -> Option<&T> {
        self.config.as_any().downcast_ref()
    }
}

/// What the rest of the topology leaves the pooler: how many logical clients will connect
/// (`workload.clients`), and how many server connections PostgreSQL has room for.
pub struct Room {
    /// Logical clients that connect to each replica of the pooler at most (the clients are
    /// spread over the replicas: client `c` uses replica `c % replicas`).
    pub clients: u32,
    /// How many replicas of the pooler run (`replicas:`), each with its own pool of servers.
    pub replicas: u32,
    /// PostgreSQL's connections left for the pooler's servers.
    pub available: i64,
    /// How `available` was reckoned, for a message.
    pub budget: String,
    /// Where `postgres.settings.max_connections` is, when the file sets it.
    pub max_connections_at: Option<Location>,
    /// The topology runs a streaming standby (`postgres.standby: true`).
    pub standby: bool,
}

/// The most replicas of a pooler a topology may run.
pub const MAX_POOLER_REPLICAS: u32 = 8;

/// A setting of a section's `settings:` mapping, its value rendered to a string.
#[derive(Clone, Debug)]
pub struct SettingEntry {
    pub name: String,
    pub value: String,
    /// Where its name and its value are.
    pub name_at: Location,
    pub value_at: Location,
}

/// One pooler section, for its pooler to read: typed readers that report errors at the
/// value's line and column, named `<section>.<key>`.
pub struct Section<'a> {
    pub(super) cx: &'a Cx<'a>,
    pub(super) name: &'static str,
    pub(super) at: Location,
    pub(super) entries: &'a [(Spanned<String>, Leaf)],
}

impl Section<'_> {
    fn leaf(&self, key: &str) -> Option<&Leaf> {
        self.entries
            .iter()
            .find(|(k, _)| k.value == key)
            .map(|(_, v)| v)
    }

    fn what(&self, key: &str) -> String {
        format!("{}.{key}", self.name)
    }

    /// The section's key (`pgbouncer`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Where the section starts.
    pub fn start(&self) -> Location {
        self.at
    }

    /// Whether the file writes `key` in this section.
    pub fn given(&self, key: &str) -> bool {
        self.leaf(key).is_some_and(is_given)
    }

    /// Where `key`'s value is (the section's start when it is absent).
    pub fn at(&self, key: &str) -> Location {
        self.leaf(key)
            .filter(|l| is_given(l))
            .map_or(self.at, |l| l.referenced)
    }

    /// An error at `at`, with hints.
    pub fn error(
        &self,
        at: Location,
        message: impl Into<String>,
        hints: Vec<String>,
    ) -> TopologyError {
        self.cx.err(&at, message, hints)
    }

    /// "missing required key" unless the file writes `key`.
    pub fn require(&self, key: &str, example: &str) -> Result<(), TopologyError> {
        if self.given(key) {
            return Ok(());
        }
        Err(self.cx.missing(&self.at, key, self.name, example))
    }

    /// A quoted version of `parts` numbers (`"1.25.2"`), and its numbers.
    pub fn version(
        &self,
        key: &str,
        parts: usize,
        example: &str,
    ) -> Result<(String, Vec<u32>), TopologyError> {
        self.require(key, &format!("{key}: \"{example}\""))?;
        let leaf = self.leaf(key).expect("required");
        let Node::Str(version) = &leaf.value else {
            return Err(self.error(
                leaf.referenced,
                format!(
                    "`{}` must be a quoted version such as \"{example}\", found {}",
                    self.what(key),
                    self.cx.found(leaf)
                ),
                Vec::new(),
            ));
        };
        let shape = ["MAJOR", "MINOR", "PATCH"][..parts.min(3)].join(".");
        let Some(numbers) = parse_version(version, parts) else {
            return Err(self.error(
                leaf.referenced,
                format!(
                    "invalid {} version `{version}`: expected {shape}",
                    self.name
                ),
                vec![format!("e.g. \"{example}\"")],
            ));
        };
        Ok((version.clone(), numbers))
    }

    /// A path, when given (never empty).
    pub fn path(&self, key: &str) -> Result<Option<PathBuf>, TopologyError> {
        match self.leaf(key) {
            Some(leaf) => self.cx.optional_path(leaf, &self.what(key)),
            None => Ok(None),
        }
    }

    /// One of `choices` by name, when given; an unknown name gets a "did you mean" and the
    /// list (`plural`: what they are, e.g. "pool modes").
    pub fn keyword<T: Copy>(
        &self,
        key: &str,
        choices: &[(&str, T)],
        plural: &str,
    ) -> Result<Option<T>, TopologyError> {
        let Some(leaf) = self.leaf(key).filter(|l| is_given(l)) else {
            return Ok(None);
        };
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        let valid = format!("valid {plural}: {}", names.join(", "));
        match &leaf.value {
            Node::Str(s) => match choices.iter().find(|(n, _)| n == s) {
                Some((_, v)) => Ok(Some(*v)),
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(s, names.iter().copied());
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(valid);
                    Err(self.error(leaf.referenced, format!("unknown {key} `{s}`"), hints))
                }
            },
            _ => Err(self.error(
                leaf.referenced,
                format!(
                    "`{}` must be one of the {plural}, found {}",
                    self.what(key),
                    self.cx.found(leaf)
                ),
                vec![valid],
            )),
        }
    }

    /// An integer in `min..=max`, or `default` when absent.
    pub fn u32_or(
        &self,
        key: &str,
        min: u32,
        max: u32,
        default: u32,
    ) -> Result<u32, TopologyError> {
        match self.leaf(key) {
            Some(leaf) => self.cx.u32_or(leaf, &self.what(key), min, max, default),
            None => Ok(default),
        }
    }

    /// A boolean, or `default` when absent.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, TopologyError> {
        match self.leaf(key) {
            Some(leaf) => self.cx.bool_or(leaf, &self.what(key), default),
            None => Ok(default),
        }
    }

    /// A one-line string (empty allowed), or `default` when absent; `hint` for a value of
    /// another kind.
    pub fn line_or(&self, key: &str, default: &str, hint: &str) -> Result<String, TopologyError> {
        let Some(leaf) = self.leaf(key).filter(|l| is_given(l)) else {
            return Ok(default.to_string());
        };
        match &leaf.value {
            Node::Str(s) if s.contains(['\n', '\r']) => Err(self.error(
                leaf.referenced,
                format!("`{}` must be one line", self.what(key)),
                Vec::new(),
            )),
            Node::Str(s) => Ok(s.clone()),
            _ => Err(self.error(
                leaf.referenced,
                format!(
                    "`{}` must be a string, found {}",
                    self.what(key),
                    self.cx.found(leaf)
                ),
                vec![hint.to_string()],
            )),
        }
    }

    /// The entries of a `settings:`-like mapping, each value rendered to a string (booleans
    /// as `on_off`); `check` vets each name (`Err((message, hints))` is reported at it).
    pub fn settings(
        &self,
        key: &str,
        on_off: (&str, &str),
        check: impl Fn(&str) -> Result<(), (String, Vec<String>)>,
    ) -> Result<Vec<SettingEntry>, TopologyError> {
        let Some(leaf) = self.leaf(key) else {
            return Ok(Vec::new());
        };
        let what = self.what(key);
        let mut out = Vec::new();
        for s in self.cx.settings(leaf, self.name)? {
            if let Err((message, hints)) = check(&s.name.value) {
                return Err(self.error(s.name.referenced, message, hints));
            }
            let value = self.cx.setting_value(&s, &what, on_off)?;
            out.push(SettingEntry {
                name: s.name.value.clone(),
                value,
                name_at: s.name.referenced,
                value_at: s.value.referenced,
            });
        }
        Ok(out)
    }
}

impl Cx<'_> {
    /// A pooler's section: its keys checked against the pooler's, then read by it.
    pub(super) fn pooler(
        &self,
        section: &dyn PoolerSection,
        key: &Spanned<String>,
        leaf: &Leaf,
        room: &Room,
    ) -> Res<PoolerSpec> {
        let name = section.key();
        let entries: &[(Spanned<String>, Leaf)] = match &leaf.value {
            Node::Map(entries) => entries,
            Node::Null | Node::Absent => {
                return Err(self.null_section(
                    &key.referenced,
                    name,
                    &format!("{name}: {{ version: ... }}"),
                ));
            }
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!("expected a mapping here, found {}", self.found(leaf)),
                    vec![
                        "a topology and each of its sections are `key: value` mappings; see docs/topology.md"
                            .into(),
                    ],
                ));
            }
        };
        // `replicas` is every pooler's: read here, the rest by the pooler.
        let mut keys: Vec<&str> = section.keys().to_vec();
        keys.push("replicas");
        for (k, _) in entries {
            if !keys.contains(&k.value.as_str()) {
                let mut hints = Vec::new();
                let close = close_matches(&k.value, keys.iter().copied());
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                hints.extend(section.unknown_key_hint(&k.value));
                hints.push(format!("valid keys here: {}", keys.join(", ")));
                return Err(self.err(
                    &k.referenced,
                    format!("unknown key `{}` in `{name}`", k.value),
                    hints,
                ));
            }
        }
        let s = Section {
            cx: self,
            name,
            at: leaf.referenced,
            entries,
        };
        let replicas = s.u32_or("replicas", 1, MAX_POOLER_REPLICAS, 1)?;
        let per_replica = Room {
            clients: room.clients.div_ceil(replicas),
            replicas,
            available: room.available,
            budget: room.budget.clone(),
            max_connections_at: room.max_connections_at,
            standby: room.standby,
        };
        let mut spec = section.parse(&s, &per_replica)?;
        spec.replicas = replicas;
        Ok(spec)
    }
}
