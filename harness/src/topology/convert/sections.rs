//! The topology's sections into the model: the whole file (`convert`), `postgres`, the
//! faults, `external` and `app_pool`.

use super::*;

/// A pooler's section in the file: its key, its value, and the pooler that claims it.
type PoolerLeaf<'r, 's> = (&'r Spanned<String>, &'r Leaf, &'s dyn PoolerSection);

impl Cx<'_> {
    pub(in crate::topology) fn convert(&self, top: &Spanned<RawTopology>) -> Res<Topology> {
        let raw = &top.value;
        let name = self.topology_name(top)?;
        let description = if is_given(&raw.description) {
            Some(self.string(&raw.description, "description", &[])?)
        } else {
            None
        };
        let launcher = self.launcher_kind(raw)?;
        let external = self.external_for(raw, launcher)?;
        let (postgres, pg_settings) = self.postgres_section(top)?;
        let pooler_leaf = self.pooler_section(raw)?;
        let default_workload = RawWorkload::default();
        let raw_workload = raw.workload.value.as_ref().unwrap_or(&default_workload);
        let mut workload = self.workload(raw_workload)?;

        let room = self.room(&pg_settings, workload.clients, postgres.standby)?;
        let pooler = self.pooler_in(pooler_leaf, &room, postgres.standby)?;
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
            self.direct_connections_fit(needed, &room, raw_workload.clients.referenced)?;
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

    /// The topology's `name`: given, and 1 to 64 characters of `a-z`, `0-9` and `-`.
    fn topology_name(&self, top: &Spanned<RawTopology>) -> Res<String> {
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
        Ok(name)
    }

    /// `launcher`: a launcher's name, native when absent.
    fn launcher_kind(&self, raw: &RawTopology) -> Res<LauncherKind> {
        if !is_given(&raw.launcher) {
            return Ok(LauncherKind::Native);
        }
        let s = self.string(
            &raw.launcher,
            "launcher",
            &["launcher: native", "launcher: docker", "launcher: external"],
        )?;
        match LauncherKind::from_name(&s) {
            Some(k) => Ok(k),
            None => {
                let mut hints = Vec::new();
                let close = close_matches(&s, LauncherKind::ALL.iter().map(|k| k.as_str()));
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                hints.push("launchers: native, docker, external".into());
                Err(self.err(
                    &raw.launcher.referenced,
                    format!("unknown launcher `{s}`"),
                    hints,
                ))
            }
        }
    }

    /// The `external:` section, if any: there exactly when the launcher is external.
    fn external_for(&self, raw: &RawTopology, launcher: LauncherKind) -> Res<Option<ExternalSpec>> {
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
        Ok(external)
    }

    /// The required `postgres:` section, and its settings as written.
    fn postgres_section(&self, top: &Spanned<RawTopology>) -> Res<(PostgresSpec, Vec<Setting>)> {
        let raw = &top.value;
        const PG_EXAMPLE: &str = "postgres: { version: \"18.6\" }";
        match &raw.postgres.value {
            Some(pg) => self.postgres(pg, &raw.postgres.referenced),
            None if section_given(&raw.postgres) => {
                Err(self.null_section(&raw.postgres.referenced, "postgres", PG_EXAMPLE))
            }
            None => Err(self.missing(&top.referenced, "postgres", "", PG_EXAMPLE)),
        }
    }

    /// The pooler's section, if any: a top-level key a pooler claims; any other key is
    /// unknown. One pooler per topology. Its key, its value, and the pooler that claims it.
    fn pooler_section<'r, 's>(&'s self, raw: &'r RawTopology) -> Res<Option<PoolerLeaf<'r, 's>>> {
        let mut pooler_leaf: Option<PoolerLeaf> = None;
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
        Ok(pooler_leaf)
    }

    /// What PostgreSQL has room for, beside the harness's own connections, for `clients`
    /// logical clients.
    fn room(&self, pg_settings: &[Setting], clients: u32, standby: bool) -> Res<Room> {
        let (max_connections, max_conn_loc) = self
            .int_setting(pg_settings, "max_connections", "postgres")?
            .map_or((PG_DEFAULT_MAX_CONNECTIONS, None), |(n, l)| (n, Some(l)));
        let superuser_reserved = self
            .int_setting(pg_settings, "superuser_reserved_connections", "postgres")?
            .map_or(PG_DEFAULT_SUPERUSER_RESERVED, |(n, _)| n);
        let reserved = self
            .int_setting(pg_settings, "reserved_connections", "postgres")?
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
        Ok(Room {
            clients,
            replicas: 1,
            available,
            budget,
            max_connections_at: max_conn_loc,
            standby,
        })
    }

    /// The pooler of the section `pooler_leaf` found, fitted to `room`; replicas of it do
    /// not run with a standby yet.
    fn pooler_in(
        &self,
        pooler_leaf: Option<PoolerLeaf>,
        room: &Room,
        standby: bool,
    ) -> Res<Option<PoolerSpec>> {
        let pooler = match &pooler_leaf {
            Some((key, leaf, section)) => Some(self.pooler(*section, key, leaf, room)?),
            None => None,
        };
        if let Some(p) = pooler.as_ref().filter(|p| p.replicas > 1)
            && standby
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
        Ok(pooler)
    }

    /// Without a pooler: the `needed` direct connections fit in PostgreSQL's `room` (else
    /// an error at `max_connections`, or at `workload.clients` (`clients_at`) where the
    /// file does not set it).
    fn direct_connections_fit(&self, needed: i64, room: &Room, clients_at: Location) -> Res<()> {
        let available = room.available;
        if needed > available {
            let loc = match room.max_connections_at {
                Some(l) => l,
                None => clients_at,
            };
            return Err(self.err(
                &loc,
                format!(
                    "{needed} direct client connections do not fit: PostgreSQL has room for {available}"
                ),
                vec![
                    format!("room = {}", room.budget),
                    "lower `workload.clients`, or raise `postgres.settings.max_connections`".into(),
                ],
            ));
        }
        Ok(())
    }

    pub(in crate::topology) fn postgres(
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
            if crate::vocab::timeout::find(crate::vocab::timeout::POSTGRES, &s.name.value).is_some()
            {
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

    pub(in crate::topology) fn faults(
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
                    let has: Vec<&str> = p.config.faults().iter().map(|o| o.name()).collect();
                    return Err(self.err(
                        &name.referenced,
                        format!("`{op}` is not a fault {} has", p.kind),
                        vec![if has.is_empty() {
                            format!("{} has no faults of its own here", p.kind)
                        } else {
                            format!("{}'s faults: {}", p.kind, has.join(", "))
                        }],
                    ));
                }
            }
            if w > 0
                && !needs_pooler
                && let Some(p) = pooler.filter(|p| !p.config.postgres_faults_modelled())
            {
                return Err(self.err(
                    &name.referenced,
                    format!(
                        "`{op}` is a fault of PostgreSQL, and what {} does to its clients through it is not modelled",
                        p.kind
                    ),
                    vec![format!(
                        "{} may fail the node over when a backend ends under a client (docs/pgpool.md); run PostgreSQL's faults with pgbouncer or without a pooler",
                        p.kind
                    )],
                ));
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
    pub(super) fn unknown_op(
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
    pub(in crate::topology) fn external(
        &self,
        raw: &RawExternal,
        at: &Location,
    ) -> Res<ExternalSpec> {
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

    pub(in crate::topology) fn app_pool(&self, raw: &RawAppPool, at: &Location) -> Res<AppPool> {
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
}
