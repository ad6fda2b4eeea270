//! The raw layer: what serde-saphyr deserializes, every leaf kept with its position.

use super::*;

/// Any YAML node, kept with its position. Leaves of the raw structs are `Spanned<Node>` so the
/// conversion can give precise, uniform messages for wrong types and bad values.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
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

pub(super) type Leaf = Spanned<Node>;

pub(super) fn absent() -> Leaf {
    Spanned::new(Node::Absent, Location::UNKNOWN, Location::UNKNOWN)
}

impl Node {
    pub(super) fn kind(&self) -> &'static str {
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

    pub(super) fn scalar_text(&self) -> Option<String> {
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

pub(super) const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "launcher",
    "external",
    "postgres",
    "app_pool",
    "workload",
    "faults",
    "run",
    "expect",
    "expect_concurrent",
];
pub(super) const POSTGRES_KEYS: &[&str] = &["version", "bin_dir", "settings", "standby"];
pub(super) const APP_POOL_KEYS: &[&str] = &["max_open", "pin"];
pub(super) const EXTERNAL_KEYS: &[&str] =
    &["pooler", "postgres", "admin", "console_faults", "plaintext"];
pub(super) const WORKLOAD_KEYS: &[&str] = &[
    "clients",
    "keys",
    "api",
    "steps",
    "lock_timeout",
    "ops",
    "think",
    "script",
    "settings",
];
pub(super) const FAULTS_KEYS: &[&str] = &["kinds", "weight", "hold", "delay"];
pub(super) const RUN_KEYS: &[&str] = &[
    "cases",
    "seed",
    "time_limit",
    "max_shrink_runs",
    "schedule",
    "sample_every",
    "op_deadline",
    "case_time_limit",
    "shrink_replays",
    "shrink_quorum",
    "search_states",
    "search_work",
    "search_time",
    "shrink_time",
    "time_scale",
];

/// Which section a serde "expected one of" list belongs to (`""` for the top level).
pub(super) fn section_of(expected: &[&str]) -> Option<&'static str> {
    [
        ("", TOP_KEYS),
        ("postgres", POSTGRES_KEYS),
        ("app_pool", APP_POOL_KEYS),
        ("external", EXTERNAL_KEYS),
        ("workload", WORKLOAD_KEYS),
        ("faults", FAULTS_KEYS),
        ("run", RUN_KEYS),
    ]
    .into_iter()
    .find(|(_, keys)| *keys == expected)
    .map(|(name, _)| name)
}

/// A section: absent (line 0), null (`value: None`) or a mapping.
pub(super) type Section<T> = Spanned<Option<T>>;

pub(super) fn absent_section<T>() -> Section<T> {
    Spanned::new(None, Location::UNKNOWN, Location::UNKNOWN)
}

pub(super) fn section_given<T>(s: &Section<T>) -> bool {
    s.referenced.line() != 0
}

/// The top level. A key that is none of [`TOP_KEYS`] is kept in `others` with its position:
/// a pooler's section (`pgbouncer:`), which the pooler reads, or an unknown key, reported
/// with the pooler sections among the valid keys.
pub(super) struct RawTopology {
    pub(super) name: Leaf,
    pub(super) description: Leaf,
    pub(super) launcher: Leaf,
    pub(super) external: Section<RawExternal>,
    pub(super) postgres: Section<RawPostgres>,
    pub(super) app_pool: Section<RawAppPool>,
    pub(super) workload: Section<RawWorkload>,
    pub(super) faults: Section<RawFaults>,
    pub(super) run: Section<RawRun>,
    pub(super) expect: Leaf,
    pub(super) expect_concurrent: Leaf,
    pub(super) others: Vec<(Spanned<String>, Leaf)>,
}

impl<'de> Deserialize<'de> for RawTopology {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawTopology, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = RawTopology;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTopology, A::Error> {
                let mut t = RawTopology {
                    name: absent(),
                    description: absent(),
                    launcher: absent(),
                    external: absent_section(),
                    postgres: absent_section(),
                    app_pool: absent_section(),
                    workload: absent_section(),
                    faults: absent_section(),
                    run: absent_section(),
                    expect: absent(),
                    expect_concurrent: absent(),
                    others: Vec::new(),
                };
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    match key.value.as_str() {
                        "name" => t.name = map.next_value()?,
                        "description" => t.description = map.next_value()?,
                        "launcher" => t.launcher = map.next_value()?,
                        "external" => t.external = map.next_value()?,
                        "postgres" => t.postgres = map.next_value()?,
                        "app_pool" => t.app_pool = map.next_value()?,
                        "workload" => t.workload = map.next_value()?,
                        "faults" => t.faults = map.next_value()?,
                        "run" => t.run = map.next_value()?,
                        "expect" => t.expect = map.next_value()?,
                        "expect_concurrent" => t.expect_concurrent = map.next_value()?,
                        _ => {
                            let value = map.next_value::<Leaf>()?;
                            t.others.push((key, value));
                        }
                    }
                }
                Ok(t)
            }
        }
        d.deserialize_map(TopVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPostgres {
    #[serde(default = "absent")]
    pub(super) version: Leaf,
    #[serde(default = "absent")]
    pub(super) bin_dir: Leaf,
    #[serde(default = "absent")]
    pub(super) settings: Leaf,
    #[serde(default = "absent")]
    pub(super) standby: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkload {
    #[serde(default = "absent")]
    pub(super) clients: Leaf,
    #[serde(default = "absent")]
    pub(super) keys: Leaf,
    #[serde(default = "absent")]
    pub(super) api: Leaf,
    #[serde(default = "absent")]
    pub(super) steps: Leaf,
    #[serde(default = "absent")]
    pub(super) lock_timeout: Leaf,
    #[serde(default = "absent")]
    pub(super) ops: Leaf,
    #[serde(default = "absent")]
    pub(super) think: Leaf,
    #[serde(default = "absent")]
    pub(super) script: Leaf,
    #[serde(default = "absent")]
    pub(super) settings: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFaults {
    #[serde(default = "absent")]
    pub(super) kinds: Leaf,
    #[serde(default = "absent")]
    pub(super) weight: Leaf,
    #[serde(default = "absent")]
    pub(super) hold: Leaf,
    #[serde(default = "absent")]
    pub(super) delay: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExternal {
    #[serde(default = "absent")]
    pub(super) pooler: Leaf,
    #[serde(default = "absent")]
    pub(super) postgres: Leaf,
    #[serde(default = "absent")]
    pub(super) admin: Leaf,
    #[serde(default = "absent")]
    pub(super) console_faults: Leaf,
    #[serde(default = "absent")]
    pub(super) plaintext: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAppPool {
    #[serde(default = "absent")]
    pub(super) max_open: Leaf,
    #[serde(default = "absent")]
    pub(super) pin: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    #[serde(default = "absent")]
    pub(super) cases: Leaf,
    #[serde(default = "absent")]
    pub(super) seed: Leaf,
    #[serde(default = "absent")]
    pub(super) time_limit: Leaf,
    #[serde(default = "absent")]
    pub(super) max_shrink_runs: Leaf,
    #[serde(default = "absent")]
    pub(super) schedule: Leaf,
    #[serde(default = "absent")]
    pub(super) sample_every: Leaf,
    #[serde(default = "absent")]
    pub(super) op_deadline: Leaf,
    #[serde(default = "absent")]
    pub(super) case_time_limit: Leaf,
    #[serde(default = "absent")]
    pub(super) shrink_replays: Leaf,
    #[serde(default = "absent")]
    pub(super) shrink_quorum: Leaf,
    #[serde(default = "absent")]
    pub(super) search_states: Leaf,
    #[serde(default = "absent")]
    pub(super) search_work: Leaf,
    #[serde(default = "absent")]
    pub(super) search_time: Leaf,
    #[serde(default = "absent")]
    pub(super) shrink_time: Leaf,
    #[serde(default = "absent")]
    pub(super) time_scale: Leaf,
}
