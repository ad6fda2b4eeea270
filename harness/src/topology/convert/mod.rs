//! Conversion of the raw layer into the public model: defaults, validation, cross-section
//! checks.

use super::*;
use crate::vocab::{Tier, When};

mod run;
mod sections;
mod workload;

/// Whether the key was written in the file (null counts as written).
pub(super) fn is_given(leaf: &Leaf) -> bool {
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

pub(super) fn fmt_duration(d: Duration) -> String {
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
pub(super) fn parse_version(s: &str, parts: usize) -> Option<Vec<u32>> {
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

pub(super) struct Setting {
    pub(super) name: Spanned<String>,
    pub(super) value: Leaf,
}

impl Cx<'_> {
    // -- typed leaf readers ---------------------------------------------------------------------

    /// A string, or an error naming `what` (a dotted key path).
    pub(super) fn string(&self, leaf: &Leaf, what: &str, hints: &[&str]) -> Res<String> {
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
    pub(super) fn scalar_as_written(&self, leaf: &Leaf) -> Option<String> {
        match &leaf.value {
            Node::Str(s) => Some(s.clone()),
            Node::Int(_) | Node::Float(_) => self
                .raw_text(&leaf.referenced)
                .map(str::to_string)
                .or_else(|| leaf.value.scalar_text()),
            _ => None,
        }
    }

    pub(super) fn int(&self, leaf: &Leaf, what: &str, min: i128, max: i128) -> Res<i128> {
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

    pub(super) fn u32_or(
        &self,
        leaf: &Leaf,
        what: &str,
        min: u32,
        max: u32,
        default: u32,
    ) -> Res<u32> {
        if !is_given(leaf) {
            return Ok(default);
        }
        self.int(leaf, what, min.into(), max.into())
            .map(|i| i as u32)
    }

    pub(super) fn bool_or(&self, leaf: &Leaf, what: &str, default: bool) -> Res<bool> {
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

    pub(super) fn duration_or(
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

    pub(super) fn optional_path(&self, leaf: &Leaf, what: &str) -> Res<Option<PathBuf>> {
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
    pub(super) fn entries<'l>(
        &self,
        leaf: &'l Leaf,
        what: &str,
    ) -> Res<&'l [(Spanned<String>, Leaf)]> {
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
    pub(super) fn setting_value(
        &self,
        s: &Setting,
        section: &str,
        on_off: (&str, &str),
    ) -> Res<String> {
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

    pub(super) fn settings(&self, leaf: &Leaf, section: &str) -> Res<Vec<Setting>> {
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

    /// A timeout setting: any duration (0 is off); the model knows what each does.
    pub(super) fn timeout_setting(
        &self,
        s: &Setting,
        section: &str,
        value: &str,
        seconds: fn(&str) -> Option<f64>,
        bare_unit: &str,
    ) -> Res<()> {
        let name = &s.name.value;
        match seconds(value) {
            Some(_) => Ok(()),
            None => Err(self.err(
                &s.value.referenced,
                format!("`{section}.{name}` is not a duration: `{value}`"),
                vec![format!("a bare number is {bare_unit}; 0 is off")],
            )),
        }
    }

    /// An integer-valued setting (int, or a string of digits), if present.
    pub(super) fn int_setting(
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
    pub(super) fn missing(
        &self,
        at: &Location,
        key: &str,
        section: &str,
        example: &str,
    ) -> TopologyError {
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
    pub(super) fn null_section(&self, at: &Location, key: &str, example: &str) -> TopologyError {
        self.err(
            at,
            format!("`{key}` must be a mapping, found an empty value"),
            vec![format!("e.g. `{example}`")],
        )
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
            think: absent(),
            script: absent(),
            settings: absent(),
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
            schedule: absent(),
            sample_every: absent(),
            op_deadline: absent(),
            case_time_limit: absent(),
            shrink_replays: absent(),
            shrink_quorum: absent(),
            search_states: absent(),
            search_work: absent(),
            search_time: absent(),
            shrink_time: absent(),
            time_scale: absent(),
        }
    }
}

/// Why a PostgreSQL setting leaves no streaming standby possible (`postgres.standby: true`):
/// the primary must write replica WAL and serve `pg_basebackup` (two WAL senders: the copy
/// and the WAL stream), and the standby must accept the harness's connections in recovery.
fn standby_conflict(name: &str, value: &str) -> Option<&'static str> {
    let v = value.trim().to_ascii_lowercase();
    match name {
        "wal_level" if v == "minimal" => Some(
            "a streaming standby needs `wal_level` replica or logical (PostgreSQL's default is replica)",
        ),
        "max_wal_senders" if v.parse::<i64>().is_ok_and(|n| n < 2) => Some(
            "pg_basebackup needs two WAL senders (the copy and the WAL stream); PostgreSQL's default is 10",
        ),
        "hot_standby" if matches!(v.as_str(), "off" | "false" | "no" | "0") => Some(
            "the harness connects to the standby to see it in recovery: leave `hot_standby` on",
        ),
        _ => None,
    }
}

/// What an `external:` section looks like (hints of its errors).
const EXTERNAL_EXAMPLE: &str = "external:\n  pooler: postgresql://pgchaos_client:${PGCHAOS_CLIENT_PASSWORD}@pgbouncer.staging:6432/app\n  postgres: postgresql://pgchaos_observer:${PGCHAOS_OBSERVER_PASSWORD}@db.staging:5432/app\n  admin: postgresql://pgchaos_admin:${PGCHAOS_ADMIN_PASSWORD}@pgbouncer.staging:6432/pgbouncer   # optional";

/// A scalar's text, for an error message.
fn value_text(n: &Node) -> String {
    match n {
        Node::Str(s) => s.clone(),
        _ => String::new(),
    }
}
