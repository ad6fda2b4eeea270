//! Conversion of the raw layer into the public model: defaults, validation, cross-section
//! checks.

use super::*;
use crate::vocab::{Tier, When};

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

    pub(super) fn convert(&self, top: &Spanned<RawTopology>) -> Res<Topology> {
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

        let launcher = if is_given(&raw.launcher) {
            let s = self.string(
                &raw.launcher,
                "launcher",
                &["launcher: native", "launcher: docker", "launcher: external"],
            )?;
            match LauncherKind::from_name(&s) {
                Some(k) => k,
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(&s, LauncherKind::ALL.iter().map(|k| k.as_str()));
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push("launchers: native, docker, external".into());
                    return Err(self.err(
                        &raw.launcher.referenced,
                        format!("unknown launcher `{s}`"),
                        hints,
                    ));
                }
            }
        } else {
            LauncherKind::Native
        };

        let external = match &raw.external.value {
            Some(e) => Some(self.external(e, &raw.external.referenced)?),
            None if section_given(&raw.external) => {
                return Err(self.null_section(
                    &raw.external.referenced,
                    "external",
                    EXTERNAL_EXAMPLE,
                ));
            }
            None => None,
        };
        match (launcher, &external) {
            (LauncherKind::External, None) => {
                return Err(self.err(
                    &raw.launcher.referenced,
                    "`launcher: external` needs an `external:` section naming the deployment's DSNs",
                    vec![format!("for example:\n{EXTERNAL_EXAMPLE}")],
                ));
            }
            (LauncherKind::Native | LauncherKind::Docker, Some(_)) => {
                return Err(self.err(
                    &raw.external.referenced,
                    format!(
                        "an `external:` section is for `launcher: external`, and this topology's launcher is {}",
                        launcher.as_str()
                    ),
                    vec!["add `launcher: external`, or remove the section".into()],
                ));
            }
            _ => {}
        }

        const PG_EXAMPLE: &str = "postgres: { version: \"18.6\" }";
        let (postgres, pg_settings) = match &raw.postgres.value {
            Some(pg) => self.postgres(pg, &raw.postgres.referenced)?,
            None if section_given(&raw.postgres) => {
                return Err(self.null_section(&raw.postgres.referenced, "postgres", PG_EXAMPLE));
            }
            None => return Err(self.missing(&top.referenced, "postgres", "", PG_EXAMPLE)),
        };
        // The pooler's section, if any: a top-level key a pooler claims; any other key is
        // unknown. One pooler per topology.
        let mut pooler_leaf: Option<(&Spanned<String>, &Leaf, &dyn PoolerSection)> = None;
        for (key, leaf) in &raw.others {
            match self.poolers.iter().find(|p| p.key() == key.value) {
                // A null section is no pooler (clients straight to PostgreSQL).
                Some(_) if matches!(leaf.value, Node::Null) => {}
                Some(p) => {
                    if let Some((first, _, _)) = pooler_leaf {
                        let first: &Spanned<String> = first;
                        return Err(self.err(
                            &key.referenced,
                            format!(
                                "a topology has one pooler: `{}` here and `{}` above",
                                key.value, first.value
                            ),
                            vec!["keep one of the two sections".into()],
                        ));
                    }
                    pooler_leaf = Some((key, leaf, *p));
                }
                None => {
                    let valid: Vec<&str> = TOP_KEYS
                        .iter()
                        .copied()
                        .chain(self.poolers.iter().map(|p| p.key()))
                        .collect();
                    let mut hints = Vec::new();
                    let close = close_matches(&key.value, valid.iter().copied());
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(format!("valid keys here: {}", valid.join(", ")));
                    return Err(self.err(
                        &key.referenced,
                        format!("unknown key `{}` at the top level", key.value),
                        hints,
                    ));
                }
            }
        }
        let default_workload = RawWorkload::default();
        let raw_workload = raw.workload.value.as_ref().unwrap_or(&default_workload);
        let mut workload = self.workload(raw_workload)?;

        // What PostgreSQL has room for, beside the harness's own connections.
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
        let room = Room {
            clients: workload.clients,
            replicas: 1,
            available,
            budget: budget.clone(),
            max_connections_at: max_conn_loc,
            standby: postgres.standby,
        };
        let pooler = match &pooler_leaf {
            Some((key, leaf, section)) => Some(self.pooler(*section, key, leaf, &room)?),
            None => None,
        };
        if let Some(p) = pooler.as_ref().filter(|p| p.replicas > 1)
            && postgres.standby
        {
            let (key, _, _) = pooler_leaf.expect("a parsed pooler has its section");
            return Err(self.err(
                &key.referenced,
                format!(
                    "`postgres.standby` with {} replicas of {} is not supported yet",
                    p.replicas, p.kind
                ),
                vec!["a failover repoints one pooler; use one replica with a standby".into()],
            ));
        }
        let faults = match &raw.faults.value {
            Some(f) => self.faults(f, &raw.faults.referenced, pooler.as_ref(), postgres.standby)?,
            None => Faults::default(),
        };
        if workload.script.is_empty() {
            workload.faults = faults.kinds.clone();
            workload.fault_weight = faults.weight;
        }
        let run = match &raw.run.value {
            Some(r) => self.run(r)?,
            None => self.run(&RawRun::default())?,
        };
        workload.scale_time(run.time_scale_milli);
        let app_pool = match &raw.app_pool.value {
            Some(p) => Some(self.app_pool(p, &raw.app_pool.referenced)?),
            None => None,
        };
        if let (Some(_), Some(p)) = (&app_pool, &pooler) {
            return Err(self.err(
                &raw.app_pool.referenced,
                format!("an `app_pool` in front of `{}` is not supported yet", p.kind),
                vec!["the runner does not yet plan waits across two layers of pooling; use `app_pool` on a direct topology".into()],
            ));
        }
        if !workload.script.is_empty() && run.schedule != Schedule::Concurrent {
            return Err(self.err(
                &raw_workload.script.referenced,
                "a `workload.script` runs with `run.schedule: concurrent`",
                vec!["scripted replicas wait for each other's locks for real; set `run: { schedule: concurrent }`".into()],
            ));
        }
        let (expect, expect_rates) = self.expect(&raw.expect, "expect")?;
        let (expect_concurrent, expect_concurrent_rates) =
            self.expect(&raw.expect_concurrent, "expect_concurrent")?;

        // Without a pooler, every client (or the application pool's connections) is a
        // connection of PostgreSQL's; a pooler checked its own servers above.
        if pooler.is_none() {
            let needed = i64::from(app_pool.map_or(workload.clients, |p| p.max_open));
            if needed > available {
                let loc = match max_conn_loc {
                    Some(l) => l,
                    None => raw_workload.clients.referenced,
                };
                return Err(self.err(
                    &loc,
                    format!(
                        "{needed} direct client connections do not fit: PostgreSQL has room for {available}"
                    ),
                    vec![
                        format!("room = {budget}"),
                        "lower `workload.clients`, or raise `postgres.settings.max_connections`".into(),
                    ],
                ));
            }
        }

        Ok(Topology {
            name,
            description,
            launcher,
            external,
            postgres,
            pooler,
            app_pool,
            workload,
            faults,
            run,
            expect,
            expect_concurrent,
            expect_rates,
            expect_concurrent_rates,
            source: self.path.to_path_buf(),
            text: self.src.to_string(),
        })
    }

    pub(super) fn postgres(
        &self,
        raw: &RawPostgres,
        at: &Location,
    ) -> Res<(PostgresSpec, Vec<Setting>)> {
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
        let standby = self.bool_or(&raw.standby, "postgres.standby", false)?;
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
            if s.name.value == "lock_timeout" {
                return Err(self.err(
                    &s.name.referenced,
                    "`lock_timeout` cannot be set in `postgres.settings`",
                    vec!["use `workload.lock_timeout`: the harness sets it for the client role and the model predicts its timeouts".into()],
                ));
            }
            let value = self.setting_value(s, "postgres.settings", ("on", "off"))?;
            if standby && let Some(why) = standby_conflict(&s.name.value, &value) {
                return Err(self.err(
                    &s.value.referenced,
                    format!(
                        "`postgres.settings.{}` cannot be `{value}` with `postgres.standby: true`",
                        s.name.value
                    ),
                    vec![why.to_string()],
                ));
            }
            if PG_TIMEOUTS.contains(&s.name.value.as_str()) {
                self.timeout_setting(
                    s,
                    "postgres.settings",
                    &value,
                    postgres_seconds,
                    "milliseconds",
                )?;
            }
            rendered.insert(s.name.value.clone(), value);
        }
        Ok((
            PostgresSpec {
                version,
                bin_dir,
                settings: rendered,
                standby,
            },
            settings,
        ))
    }

    pub(super) fn faults(
        &self,
        raw: &RawFaults,
        at: &Location,
        pooler: Option<&PoolerSpec>,
        standby: bool,
    ) -> Res<Faults> {
        if !is_given(&raw.kinds) {
            return Err(self.missing(at, "kinds", "faults", "kinds: { pooler_reconnect: 1 }"));
        }
        let mut kinds = BTreeMap::new();
        for (name, value) in self.entries(&raw.kinds, "faults.kinds")? {
            let Some(op) = Op::from_fault_name(&name.value) else {
                let hint = Op::from_name(&name.value).map(|_| {
                    format!(
                        "`{}` is a client op: weigh it in `workload.ops`",
                        name.value
                    )
                });
                return Err(self.unknown_op(name, "fault", &Op::FAULTS, hint));
            };
            let w = self.int(
                value,
                &format!("faults.kinds.{}", name.value),
                0,
                MAX_WEIGHT.into(),
            )? as u32;
            let needs_pooler = crate::vocab::fault::meaning(op).is_some_and(|m| m.needs_pooler);
            if w > 0 && needs_pooler {
                let Some(p) = pooler else {
                    return Err(self.err(
                        &name.referenced,
                        format!("`{op}` is a fault of the pooler, and this topology has none"),
                        vec!["add a pooler section (`pgbouncer`), or remove the fault".into()],
                    ));
                };
                if p.replicas > 1 {
                    return Err(self.err(
                        &name.referenced,
                        format!(
                            "`{op}` is a fault of one pooler, and this topology runs {} replicas of {}",
                            p.replicas, p.kind
                        ),
                        vec!["faults of the pooler with `replicas` are not modelled yet: which replica a fault hits is not in the history; use one replica, or faults of PostgreSQL".into()],
                    ));
                }
                if !p.config.faults().contains(&op) {
                    return Err(self.err(
                        &name.referenced,
                        format!("`{op}` is not a fault {} has", p.kind),
                        vec![format!(
                            "{}'s faults: {}",
                            p.kind,
                            p.config
                                .faults()
                                .iter()
                                .map(|o| o.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )],
                    ));
                }
            }
            if w > 0 && crate::vocab::fault::needs_standby(op) && !standby {
                return Err(self.err(
                    &name.referenced,
                    format!("`{op}` fails over to a standby, and this topology has none"),
                    vec!["set `postgres.standby: true`, or remove the fault".into()],
                ));
            }
            if w > 0 {
                kinds.insert(op, w);
            }
        }
        let weight = self.u32_or(
            &raw.weight,
            "faults.weight",
            1,
            MAX_WEIGHT,
            DEFAULT_FAULT_WEIGHT,
        )?;
        let hold = self.duration_or(
            &raw.hold,
            "faults.hold",
            Some(Duration::from_millis(MAX_FAULT_HOLD_MS)),
            Duration::from_millis(DEFAULT_FAULT_HOLD_MS),
        )?;
        let delay = self.duration_or(
            &raw.delay,
            "faults.delay",
            Some(Duration::from_millis(MAX_FAULT_HOLD_MS)),
            Duration::from_millis(DEFAULT_LINK_DELAY_MS),
        )?;
        let link = kinds
            .keys()
            .find(|op| crate::vocab::fault::needs_link(**op));
        let promote = kinds
            .keys()
            .find(|op| crate::vocab::fault::needs_standby(**op));
        if let (Some(l), Some(p)) = (link, promote) {
            return Err(self.err(
                &raw.kinds.referenced,
                format!("`{l}` and `{p}` cannot be combined yet"),
                vec!["a promote repoints PgBouncer straight at the new primary, past the link proxy; use two topologies".into()],
            ));
        }
        Ok(Faults {
            kinds,
            weight,
            hold,
            delay,
        })
    }

    /// `unknown {what} `name``, with the close names, `hint`, and every valid one.
    fn unknown_op(
        &self,
        name: &Spanned<String>,
        what: &str,
        valid: &[Op],
        hint: Option<String>,
    ) -> TopologyError {
        let mut hints = Vec::new();
        let close = close_matches(&name.value, valid.iter().map(|o| o.name()));
        if !close.is_empty() {
            hints.push(did_you_mean(&close));
        }
        hints.extend(hint);
        let names: Vec<&str> = valid.iter().map(|o| o.name()).collect();
        hints.push(format!("valid {what}s: {}", names.join(", ")));
        self.err(
            &name.referenced,
            format!("unknown {what} `{}`", name.value),
            hints,
        )
    }

    /// `external:`: each DSN a string that parses as a libpq URL or key=value string once
    /// its `${VAR}` references are set aside (they are expanded at launch), naming its user
    /// and database.
    pub(super) fn external(&self, raw: &RawExternal, at: &Location) -> Res<ExternalSpec> {
        let dsn = |leaf: &Leaf, key: &str, required: bool| -> Res<Option<String>> {
            if !is_given(leaf) {
                if required {
                    return Err(self.missing(
                        at,
                        key.trim_start_matches("external."),
                        "external",
                        EXTERNAL_EXAMPLE,
                    ));
                }
                return Ok(None);
            }
            let text = self.string(leaf, key, &[EXTERNAL_EXAMPLE])?;
            let (config, _) = ExternalSpec::resolve_with(&text, key, |_| Some("x".into()))
                .map_err(|e| self.err(&leaf.referenced, e, vec![EXTERNAL_EXAMPLE.into()]))?;
            for (what, given) in [
                ("user", config.get_user().is_some()),
                ("database", config.get_dbname().is_some()),
            ] {
                if !given {
                    return Err(self.err(
                        &leaf.referenced,
                        format!("`{key}` names no {what}"),
                        vec![EXTERNAL_EXAMPLE.into()],
                    ));
                }
            }
            Ok(Some(text))
        };
        Ok(ExternalSpec {
            pooler: dsn(&raw.pooler, "external.pooler", true)?.unwrap_or_default(),
            postgres: dsn(&raw.postgres, "external.postgres", true)?.unwrap_or_default(),
            admin: dsn(&raw.admin, "external.admin", false)?,
            console_faults: self.bool_or(&raw.console_faults, "external.console_faults", false)?,
            plaintext: self.bool_or(&raw.plaintext, "external.plaintext", false)?,
        })
    }

    pub(super) fn app_pool(&self, raw: &RawAppPool, at: &Location) -> Res<AppPool> {
        if !is_given(&raw.max_open) {
            return Err(self.missing(at, "max_open", "app_pool", "max_open: 5"));
        }
        let max_open = self.int(&raw.max_open, "app_pool.max_open", 1, 1000)? as u32;
        let pins = "valid pins: none, session";
        let pin = match &raw.pin.value {
            Node::Absent => Pin::None,
            Node::Str(s) if s == "none" => Pin::None,
            Node::Str(s) if s == "session" => Pin::Session,
            Node::Str(s) => {
                return Err(self.err(
                    &raw.pin.referenced,
                    format!("unknown pin `{s}`"),
                    vec![pins.into()],
                ));
            }
            _ => {
                return Err(self.err(
                    &raw.pin.referenced,
                    format!(
                        "`app_pool.pin` must be none or session, found {}",
                        self.found(&raw.pin)
                    ),
                    vec![pins.into()],
                ));
            }
        };
        Ok(AppPool { max_open, pin })
    }

    pub(super) fn workload(&self, raw: &RawWorkload) -> Res<Workload> {
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
        let think = self.duration_range(&raw.think, "workload.think")?;
        let script = self.script(&raw.script)?;
        let settings = self.gucs(&raw.settings)?;
        let (clients, keys) = if script.is_empty() {
            (clients, keys)
        } else {
            if is_given(&raw.clients) {
                return Err(self.err(
                    &raw.clients.referenced,
                    "`workload.clients` and `workload.script` both given",
                    vec!["a script says how many replicas run each part: remove `clients`".into()],
                ));
            }
            let total: u32 = script.iter().map(|g| g.clients).sum();
            if total > MAX_CLIENTS {
                return Err(self.err(
                    &raw.script.referenced,
                    format!("the script runs {total} clients; at most {MAX_CLIENTS}"),
                    Vec::new(),
                ));
            }
            // The keys the script uses (evidence replays probe each), unless listed.
            let mut used: Vec<Key> = vec![];
            for g in &script {
                for o in &g.ops {
                    if let Some(k) = o.key
                        && !used.contains(&k)
                    {
                        used.push(k);
                    }
                }
            }
            let keys = if is_given(&raw.keys) || used.is_empty() {
                keys
            } else {
                used
            };
            (total, keys)
        };

        Ok(Workload {
            clients,
            keys,
            api,
            steps_min,
            steps_max,
            ops,
            lock_timeout_ms: lock_timeout.as_millis() as u64,
            think,
            script,
            settings,
            faults: BTreeMap::new(),
            fault_weight: 0,
        })
    }

    /// A setting's name (`vocab::setting`), for `what`.
    fn guc(&self, leaf: &Leaf, what: &str) -> Res<crate::vocab::Guc> {
        let names: Vec<&str> = crate::vocab::setting::GUCS.iter().map(|r| r.name).collect();
        let hint = || vec![format!("settings: {}", names.join(", "))];
        let text = match &leaf.value {
            Node::Str(s) => s.clone(),
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`{what}` must be a setting's name, found {}",
                        self.found(leaf)
                    ),
                    hint(),
                ));
            }
        };
        crate::vocab::Guc::from_name(&text).ok_or_else(|| {
            let mut hints = Vec::new();
            let close = close_matches(&text, names.iter().copied());
            if !close.is_empty() {
                hints.push(did_you_mean(&close));
            }
            hints.extend(hint());
            self.err(&leaf.referenced, format!("unknown setting `{text}`"), hints)
        })
    }

    /// `workload.settings`: the settings drawn `set`/`set_local`/`show`/`reset` steps name
    /// (default: every row of `vocab::setting`), a non-empty list without repeats.
    fn gucs(&self, leaf: &Leaf) -> Res<Vec<crate::vocab::Guc>> {
        const WHAT: &str = "workload.settings";
        let items = match &leaf.value {
            Node::Absent => return Ok(crate::vocab::Guc::ALL.to_vec()),
            Node::Seq(items) if !items.is_empty() => items,
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`{WHAT}` must be a non-empty list of settings, found {}",
                        self.found(leaf)
                    ),
                    vec![
                        "e.g. `settings: [search_path, role]`; leave it out to draw every setting"
                            .into(),
                    ],
                ));
            }
        };
        let mut out = Vec::new();
        for item in items {
            let g = self.guc(item, WHAT)?;
            if out.contains(&g) {
                return Err(self.err(
                    &item.referenced,
                    format!("setting `{g}` listed twice in `{WHAT}`"),
                    Vec::new(),
                ));
            }
            out.push(g);
        }
        Ok(out)
    }

    /// `a..b` (both included) or one duration; `None` when absent.
    pub(super) fn duration_range(
        &self,
        leaf: &Leaf,
        what: &str,
    ) -> Res<Option<(Duration, Duration)>> {
        const FORMS: &str = "a range of durations `0ms..5ms` (both included), or one duration";
        let text = match &leaf.value {
            Node::Absent => return Ok(None),
            Node::Str(s) => s.clone(),
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`{what}` must be a duration range, found {}",
                        self.found(leaf)
                    ),
                    vec![FORMS.into()],
                ));
            }
        };
        let parse = |t: &str| {
            parse_duration(t.trim()).or_else(|| (t.trim() == "0").then_some(Duration::ZERO))
        };
        let (lo, hi) = match text.split_once("..") {
            Some((a, b)) => (parse(a), parse(b)),
            None => (parse(&text), parse(&text)),
        };
        match (lo, hi) {
            (Some(lo), Some(hi)) if lo <= hi && hi <= Duration::from_secs(60) => Ok(Some((lo, hi))),
            (Some(_), Some(_)) => Err(self.err(
                &leaf.referenced,
                format!("`{what}` range `{text}` is empty or longer than 60s"),
                vec![FORMS.into()],
            )),
            _ => Err(self.err(
                &leaf.referenced,
                format!("`{what}` is not a duration range: `{text}`"),
                vec![FORMS.into()],
            )),
        }
    }

    /// `workload.script`: groups of replicas, each `{ clients: N, ops: [...] }`; an op is a
    /// name (`ping`, `begin`) or a one-entry mapping (`lock: 42`, `sleep: 3s`).
    pub(super) fn script(&self, leaf: &Leaf) -> Res<Vec<ScriptGroup>> {
        const FORM: &str = "a script is a list of `{ clients: N, ops: [...] }`; an op is a name (`ping`) or `name: argument` (`lock: 42`, `sleep: 3s`, `migrate: 50ms`)";
        let items = match &leaf.value {
            Node::Absent => return Ok(vec![]),
            Node::Seq(items) if !items.is_empty() => items,
            _ => {
                return Err(self.err(
                    &leaf.referenced,
                    format!(
                        "`workload.script` must be a non-empty list, found {}",
                        self.found(leaf)
                    ),
                    vec![FORM.into()],
                ));
            }
        };
        let mut groups = vec![];
        for item in items {
            let Node::Map(entries) = &item.value else {
                return Err(self.err(
                    &item.referenced,
                    format!(
                        "a script group must be a mapping, found {}",
                        self.found(item)
                    ),
                    vec![FORM.into()],
                ));
            };
            let mut clients = None;
            let mut ops = None;
            for (k, v) in entries {
                match k.value.as_str() {
                    "clients" => {
                        clients =
                            Some(
                                self.int(v, "workload.script.clients", 1, MAX_CLIENTS.into())?
                                    as u32,
                            )
                    }
                    "ops" => ops = Some(self.script_ops(v)?),
                    other => {
                        return Err(self.err(
                            &k.referenced,
                            format!("unknown key `{other}` in a script group"),
                            vec!["valid keys here: clients, ops".into()],
                        ));
                    }
                }
            }
            let Some(ops) = ops else {
                return Err(self.err(
                    &item.referenced,
                    "missing required key `ops` in a script group",
                    vec![FORM.into()],
                ));
            };
            groups.push(ScriptGroup {
                clients: clients.unwrap_or(1),
                ops,
            });
        }
        Ok(groups)
    }

    fn script_ops(&self, leaf: &Leaf) -> Res<Vec<ScriptOp>> {
        let Node::Seq(items) = &leaf.value else {
            return Err(self.err(
                &leaf.referenced,
                format!(
                    "`ops` of a script group must be a list, found {}",
                    self.found(leaf)
                ),
                Vec::new(),
            ));
        };
        const MODIFIERS: [&str; 3] = ["when", "attempts", "pause"];
        let mut out = vec![];
        for item in items {
            // `name`, `name: argument`, or that with modifiers beside it:
            // `{ unlock: 42, when: held }`, `{ try_lock: 42, attempts: 51, pause: 1s }`.
            let mut modifiers: Vec<(&Spanned<String>, &Leaf)> = vec![];
            let (name, arg, at) = match &item.value {
                Node::Str(s) => (s.clone(), None, item.referenced),
                Node::Map(e) => {
                    let mut named = None;
                    for (k, v) in e {
                        if MODIFIERS.contains(&k.value.as_str()) {
                            modifiers.push((k, v));
                        } else if named.is_none() {
                            // `{ rollback, when: failed }`: a name without an argument.
                            let arg = (!matches!(v.value, Node::Null)).then_some(v);
                            named = Some((k.value.clone(), arg, k.referenced));
                        } else {
                            return Err(self.err(
                                &k.referenced,
                                format!("a script op names one op; `{}` is a second", k.value),
                                vec![format!(
                                    "beside the op only these may be given: {}",
                                    MODIFIERS.join(", ")
                                )],
                            ));
                        }
                    }
                    match named {
                        Some(n) => n,
                        None => {
                            return Err(self.err(
                                &item.referenced,
                                "a script op mapping needs the op's name: `{ unlock: 42, when: held }`",
                                Vec::new(),
                            ));
                        }
                    }
                }
                _ => {
                    return Err(self.err(
                        &item.referenced,
                        format!(
                            "a script op is a name or `name: argument`, found {}",
                            self.found(item)
                        ),
                        Vec::new(),
                    ));
                }
            };
            let Some(op) = Op::from_script_name(&name) else {
                let names: Vec<&str> = Op::ALL
                    .iter()
                    .chain(&Op::SCRIPT_ONLY)
                    .map(|o| o.name())
                    .collect();
                let mut hints = Vec::new();
                let close = close_matches(&name, names.iter().copied());
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                hints.push(format!("valid ops: {}", names.join(", ")));
                return Err(self.err(&at, format!("unknown op `{name}`"), hints));
            };
            if op.is_fault() || matches!(op, Op::Open) {
                return Err(self.err(
                    &at,
                    format!("`{name}` cannot be scripted yet"),
                    vec!["faults in scripts come with the nemesis".into()],
                ));
            }
            let mut step = ScriptOp {
                op,
                key: None,
                ms: None,
                guc: None,
                when: When::Ok,
                message: None,
            };
            let mut attempts = 1u32;
            let mut pause = Duration::ZERO;
            for (k, v) in &modifiers {
                match k.value.as_str() {
                    "when" => {
                        let text = self.string(v, "when", &[])?;
                        step.when = When::from_name(&text).ok_or_else(|| {
                            let names: Vec<&str> = When::ALL.iter().map(|w| w.name()).collect();
                            self.err(
                                &v.referenced,
                                format!("unknown `when` condition `{text}`"),
                                vec![format!("valid conditions: {}", names.join(", "))],
                            )
                        })?;
                    }
                    "attempts" => {
                        attempts = self.int(v, "attempts", 1, 1000)? as u32;
                        if !matches!(op, Op::TryLock | Op::TryXactLock | Op::Unlock) {
                            return Err(self.err(
                                &k.referenced,
                                format!("`attempts` retries a try or an unlock: `{name}` is not `try_lock`, `try_xact_lock` or `unlock`"),
                                Vec::new(),
                            ));
                        }
                    }
                    _ => {
                        pause = self.duration_or(
                            v,
                            "pause",
                            Some(Duration::from_secs(60)),
                            Duration::ZERO,
                        )?
                    }
                }
            }
            if let Some((k, _)) = modifiers.iter().find(|(k, _)| k.value == "pause")
                && attempts < 2
            {
                return Err(self.err(
                    &k.referenced,
                    "`pause` is the wait between retries: give `attempts` (2 or more) too",
                    Vec::new(),
                ));
            }
            if op == Op::Raise {
                match arg {
                    Some(a) => step.message = Some(self.string(a, "raise", &[])?),
                    None => {
                        return Err(self.err(
                            &at,
                            "`raise` needs the tool's error message: `raise: \"...\"`",
                            Vec::new(),
                        ));
                    }
                }
                out.push(step);
                continue;
            }
            if op.takes_guc() {
                // `set: lock_timeout`: each replica sets its own value (`vocab::setting`).
                let Some(a) = arg else {
                    let names: Vec<&str> =
                        crate::vocab::setting::GUCS.iter().map(|r| r.name).collect();
                    return Err(self.err(
                        &at,
                        format!("`{name}` needs a setting: `{name}: lock_timeout`"),
                        vec![format!("settings: {}", names.join(", "))],
                    ));
                };
                step.guc = Some(self.guc(a, &name)?);
                out.push(step);
                continue;
            }
            match (op.takes_key(), op.takes_duration(), arg) {
                (true, _, Some(a)) => step.key = Some(self.key(a)?),
                (_, true, Some(a)) => {
                    step.ms = Some(
                        self.duration_or(a, &name, Some(Duration::from_secs(60)), Duration::ZERO)?
                            .as_millis() as u64,
                    )
                }
                (true, _, None) => {
                    return Err(self.err(
                        &at,
                        format!("`{name}` needs a key: `{name}: 42`"),
                        Vec::new(),
                    ));
                }
                (_, true, None) if op != Op::Migrate => {
                    return Err(self.err(
                        &at,
                        format!("`{name}` needs a duration: `{name}: 100ms`"),
                        Vec::new(),
                    ));
                }
                (false, false, Some(a)) => {
                    return Err(self.err(
                        &a.referenced,
                        format!("`{name}` takes no argument"),
                        Vec::new(),
                    ));
                }
                _ => {}
            }
            // A retried try: the first attempt as written, then each retry after a pause,
            // both only while the lock is not held (Flyway's loop; a failed last attempt is
            // what a following `when: last_failed` sees). A retried unlock (goose's): each
            // retry and pause only while the last unlock returned false.
            let again = if op == Op::Unlock {
                When::Unreleased
            } else {
                When::NotHeld
            };
            let retry = ScriptOp {
                when: again,
                ..step.clone()
            };
            out.push(step);
            for _ in 1..attempts {
                if !pause.is_zero() {
                    out.push(ScriptOp {
                        op: Op::Sleep,
                        key: None,
                        ms: Some(pause.as_millis() as u64),
                        guc: None,
                        when: again,
                        message: None,
                    });
                }
                out.push(retry.clone());
            }
        }
        if out.is_empty() {
            return Err(self.err(
                &leaf.referenced,
                "a script group needs at least one op",
                Vec::new(),
            ));
        }
        Ok(out)
    }

    /// One advisory key: a bigint, or a pair of int4.
    fn key(&self, item: &Leaf) -> Res<Key> {
        let key = match &item.value {
            Node::Int(i) => i64::try_from(*i).ok().map(Key::Big),
            Node::Seq(pair) if pair.len() == 2 => match (&pair[0].value, &pair[1].value) {
                (Node::Int(a), Node::Int(b)) => i32::try_from(*a)
                    .ok()
                    .zip(i32::try_from(*b).ok())
                    .map(|(a, b)| Key::Pair(a, b)),
                _ => None,
            },
            _ => None,
        };
        key.ok_or_else(|| {
            self.err(
                &item.referenced,
                format!("invalid advisory key: found {}", self.found(item)),
                vec!["a key is a bigint (`4242424242`) or an int4 pair (`[1, 612001]`)".into()],
            )
        })
    }

    pub(super) fn keys(&self, leaf: &Leaf) -> Res<Vec<Key>> {
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

    pub(super) fn steps(&self, leaf: &Leaf) -> Res<(usize, usize)> {
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

    pub(super) fn ops(&self, leaf: &Leaf, api: Api) -> Res<BTreeMap<Op, u32>> {
        let mut weights = api.default_weights();
        for (name, value) in self.entries(leaf, "workload.ops")? {
            let Some(op) = Op::from_name(&name.value) else {
                return Err(self.unknown_op(name, "op", &Op::ALL, None));
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

    pub(super) fn run(&self, raw: &RawRun) -> Res<RunSpec> {
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
        let schedule = match &raw.schedule.value {
            Node::Absent => Schedule::Sequential,
            Node::Str(s) => Schedule::from_name(s).ok_or_else(|| {
                self.err(
                    &raw.schedule.referenced,
                    format!("unknown schedule `{s}`"),
                    vec!["valid schedules: sequential, concurrent".into()],
                )
            })?,
            _ => {
                return Err(self.err(
                    &raw.schedule.referenced,
                    format!(
                        "`run.schedule` must be a schedule, found {}",
                        self.found(&raw.schedule)
                    ),
                    vec!["valid schedules: sequential, concurrent".into()],
                ));
            }
        };
        let sample_every = self.duration_or(
            &raw.sample_every,
            "run.sample_every",
            Some(Duration::from_secs(10)),
            Duration::from_millis(DEFAULT_SAMPLE_EVERY_MS),
        )?;
        let op_deadline = self.duration_or(
            &raw.op_deadline,
            "run.op_deadline",
            Some(Duration::from_secs(600)),
            Duration::from_millis(DEFAULT_OP_DEADLINE_MS),
        )?;
        let case_time_limit = self.duration_or(
            &raw.case_time_limit,
            "run.case_time_limit",
            Some(Duration::from_secs(3600)),
            Duration::from_secs(DEFAULT_CASE_TIME_LIMIT_SECS),
        )?;
        let shrink_replays = self.u32_or(
            &raw.shrink_replays,
            "run.shrink_replays",
            1,
            100,
            DEFAULT_SHRINK_REPLAYS,
        )?;
        let shrink_quorum = self.u32_or(
            &raw.shrink_quorum,
            "run.shrink_quorum",
            1,
            100,
            DEFAULT_SHRINK_QUORUM.min(shrink_replays),
        )?;
        if shrink_quorum > shrink_replays {
            return Err(self.err(
                &raw.shrink_quorum.referenced,
                format!("`run.shrink_quorum` ({shrink_quorum}) exceeds `run.shrink_replays` ({shrink_replays})"),
                vec!["a candidate counts as failing when it fails in `shrink_quorum` of `shrink_replays` replays".into()],
            ));
        }
        let search_states = self.u32_or(
            &raw.search_states,
            "run.search_states",
            100,
            10_000_000,
            DEFAULT_SEARCH_STATES,
        )? as usize;
        let search_work = u64::from(self.u32_or(
            &raw.search_work,
            "run.search_work",
            1_000,
            4_000_000_000,
            DEFAULT_SEARCH_WORK,
        )?);
        let search_time = self.duration_or(
            &raw.search_time,
            "run.search_time",
            Some(Duration::from_secs(600)),
            Duration::from_millis(DEFAULT_SEARCH_TIME_MS),
        )?;
        let shrink_time = self.duration_or(
            &raw.shrink_time,
            "run.shrink_time",
            None,
            Duration::from_secs(DEFAULT_SHRINK_TIME_SECS),
        )?;
        let time_scale_milli = match &raw.time_scale.value {
            Node::Absent => 1000,
            Node::Float(f) if (MIN_TIME_SCALE..=MAX_TIME_SCALE).contains(f) => {
                (f * 1000.0).round() as u32
            }
            Node::Int(i) if (1..=MAX_TIME_SCALE as i128).contains(i) => *i as u32 * 1000,
            _ => {
                return Err(self.err(
                    &raw.time_scale.referenced,
                    format!(
                        "`run.time_scale` must be a number from {MIN_TIME_SCALE} to {MAX_TIME_SCALE}, found {}",
                        self.found(&raw.time_scale)
                    ),
                    vec!["every duration of the workload (its script's sleeps, migrations and pg_sleeps, `lock_timeout`, `think`) is multiplied by it: 0.5 runs the protocol twice as fast".into()],
                ));
            }
        };
        Ok(RunSpec {
            time_scale_milli,
            cases,
            seed,
            time_limit,
            shrink_time,
            max_shrink_runs,
            schedule,
            sample_every,
            op_deadline,
            case_time_limit,
            shrink_replays,
            shrink_quorum,
            search_states,
            search_work,
            search_time,
        })
    }

    /// An `expect:`-like section: each invariant's verdict, and the share of cases that
    /// violated it when measured (`violated ~5%`: what a shorter run is told it missed).
    #[allow(clippy::type_complexity)]
    pub(super) fn expect(
        &self,
        leaf: &Leaf,
        section: &str,
    ) -> Res<(BTreeMap<String, Verdict>, BTreeMap<String, f64>)> {
        let app_names: Vec<&str> = self
            .catalog
            .iter()
            .filter(|i| i.tier == Tier::App)
            .map(|i| i.name)
            .collect();
        let mut out = BTreeMap::new();
        let mut rates = BTreeMap::new();
        for (name, value) in self.entries(leaf, section)? {
            let n = name.value.as_str();
            match self.catalog.iter().find(|i| i.name == n).map(|i| i.tier) {
                Some(Tier::App) => {}
                Some(Tier::Pg) => {
                    return Err(self.err(
                        &name.referenced,
                        format!("`{n}` cannot be listed in `{section}`: pg.* invariants must always hold"),
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
            // `either` in both: a run against faults of real servers is timing-dependent in
            // either schedule (whether a host's restart lands in a case's window).
            let (word, rate) = match &value.value {
                Node::Str(s) => match s.split_once(char::is_whitespace) {
                    Some((w, r)) => (w, Some(r.trim())),
                    None => (s.as_str(), None),
                },
                _ => ("", None),
            };
            let verdict = match word {
                "holds" => Verdict::Holds,
                "violated" => Verdict::Violated,
                "either" => Verdict::Either,
                _ => {
                    return Err(self.err(
                        &value.referenced,
                        format!(
                            "the verdict for `{n}` must be `holds`, `violated` or `either` (`violated ~5%` gives its rate), found {}",
                            self.found(value)
                        ),
                        Vec::new(),
                    ));
                }
            };
            if let Some(r) = rate {
                let pct = r
                    .strip_prefix('~')
                    .and_then(|r| r.strip_suffix('%'))
                    .and_then(|r| r.trim().parse::<f64>().ok())
                    .filter(|p| *p > 0.0 && *p <= 100.0);
                match pct {
                    Some(p) if verdict == Verdict::Violated => {
                        rates.insert(n.to_string(), p);
                    }
                    _ => {
                        return Err(self.err(
                            &value.referenced,
                            format!(
                                "`{}`: after the verdict only a measured rate may follow, `violated ~5%`",
                                value_text(&value.value)
                            ),
                            vec![
                                "the rate is the share of cases that violated it in the runs the expectation comes from (over 0, at most 100)".into(),
                            ],
                        ));
                    }
                }
            }
            out.insert(n.to_string(), verdict);
        }
        Ok((out, rates))
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
