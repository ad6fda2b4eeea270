//! `workload` into the model: clients, keys, steps, ops and their weights, settings, and
//! scripts.

use super::*;

/// What may be written beside a script op's name.
const MODIFIERS: [&str; 3] = ["when", "attempts", "pause"];

/// A script op as written: its name, its argument, where it is written, and the modifiers
/// beside it.
struct OpForm<'l> {
    name: String,
    arg: Option<&'l Leaf>,
    at: Location,
    modifiers: Vec<(&'l Spanned<String>, &'l Leaf)>,
}

impl Cx<'_> {
    pub(in crate::topology) fn workload(&self, raw: &RawWorkload) -> Res<Workload> {
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
    pub(super) fn guc(&self, leaf: &Leaf, what: &str) -> Res<crate::vocab::Guc> {
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
    pub(super) fn gucs(&self, leaf: &Leaf) -> Res<Vec<crate::vocab::Guc>> {
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
    pub(in crate::topology) fn duration_range(
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
    pub(in crate::topology) fn script(&self, leaf: &Leaf) -> Res<Vec<ScriptGroup>> {
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

    pub(super) fn script_ops(&self, leaf: &Leaf) -> Res<Vec<ScriptOp>> {
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
        let mut out = vec![];
        for item in items {
            let OpForm {
                name,
                arg,
                at,
                modifiers,
            } = self.script_op_form(item)?;
            let op = self.script_op(&name, &at)?;
            let mut step = ScriptOp {
                op,
                key: None,
                ms: None,
                guc: None,
                when: When::Ok,
                message: None,
            };
            let (attempts, pause) = self.script_modifiers(op, &name, &modifiers, &mut step)?;
            if !self.script_op_arg(op, &name, arg, &at, &mut step)? {
                out.push(step);
                continue;
            }
            push_attempts(&mut out, step, attempts, pause);
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

    /// A script op as written: `name`, `name: argument`, or that with modifiers beside it:
    /// `{ unlock: 42, when: held }`, `{ try_lock: 42, attempts: 51, pause: 1s }`.
    fn script_op_form<'l>(&self, item: &'l Leaf) -> Res<OpForm<'l>> {
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
        Ok(OpForm {
            name,
            arg,
            at,
            modifiers,
        })
    }

    /// The op a script names (at `at`): a client op or a script-only one, not a fault.
    fn script_op(&self, name: &str, at: &Location) -> Res<Op> {
        let Some(op) = Op::from_script_name(name) else {
            let names: Vec<&str> = Op::ALL
                .iter()
                .chain(&Op::SCRIPT_ONLY)
                .map(|o| o.name())
                .collect();
            let mut hints = Vec::new();
            let close = close_matches(name, names.iter().copied());
            if !close.is_empty() {
                hints.push(did_you_mean(&close));
            }
            hints.push(format!("valid ops: {}", names.join(", ")));
            return Err(self.err(at, format!("unknown op `{name}`"), hints));
        };
        if op.is_fault() || matches!(op, Op::Open) {
            return Err(self.err(
                at,
                format!("`{name}` cannot be scripted yet"),
                vec!["faults in scripts come with the nemesis".into()],
            ));
        }
        Ok(op)
    }

    /// The modifiers beside a script op: `when` into `step`; returns `attempts` (1 when not
    /// given) and `pause` (zero when not given), a pause only with retries.
    fn script_modifiers(
        &self,
        op: Op,
        name: &str,
        modifiers: &[(&Spanned<String>, &Leaf)],
        step: &mut ScriptOp,
    ) -> Res<(u32, Duration)> {
        let mut attempts = 1u32;
        let mut pause = Duration::ZERO;
        for (k, v) in modifiers {
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
                    pause =
                        self.duration_or(v, "pause", Some(Duration::from_secs(60)), Duration::ZERO)?
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
        Ok((attempts, pause))
    }

    /// A script op's argument (`arg`, of the op written at `at`) into `step`: the message of
    /// a `raise`, the setting of a setting op, else a key or a duration where the op takes
    /// one. Returns false for a `raise` and a setting op (written once, never retried).
    fn script_op_arg(
        &self,
        op: Op,
        name: &str,
        arg: Option<&Leaf>,
        at: &Location,
        step: &mut ScriptOp,
    ) -> Res<bool> {
        if op == Op::Raise {
            match arg {
                Some(a) => step.message = Some(self.string(a, "raise", &[])?),
                None => {
                    return Err(self.err(
                        at,
                        "`raise` needs the tool's error message: `raise: \"...\"`",
                        Vec::new(),
                    ));
                }
            }
            return Ok(false);
        }
        if op.takes_guc() {
            // `set: lock_timeout`: each replica sets its own value (`vocab::setting`).
            let Some(a) = arg else {
                let names: Vec<&str> = crate::vocab::setting::GUCS.iter().map(|r| r.name).collect();
                return Err(self.err(
                    at,
                    format!("`{name}` needs a setting: `{name}: lock_timeout`"),
                    vec![format!("settings: {}", names.join(", "))],
                ));
            };
            step.guc = Some(self.guc(a, name)?);
            return Ok(false);
        }
        match (op.takes_key(), op.takes_duration(), arg) {
            (true, _, Some(a)) => step.key = Some(self.key(a)?),
            (_, true, Some(a)) => {
                step.ms = Some(
                    self.duration_or(a, name, Some(Duration::from_secs(60)), Duration::ZERO)?
                        .as_millis() as u64,
                )
            }
            (true, _, None) => {
                return Err(self.err(
                    at,
                    format!("`{name}` needs a key: `{name}: 42`"),
                    Vec::new(),
                ));
            }
            (_, true, None) if op != Op::Migrate => {
                return Err(self.err(
                    at,
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
        Ok(true)
    }

    /// One advisory key: a bigint, or a pair of int4.
    pub(super) fn key(&self, item: &Leaf) -> Res<Key> {
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

    pub(in crate::topology) fn keys(&self, leaf: &Leaf) -> Res<Vec<Key>> {
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

    pub(in crate::topology) fn steps(&self, leaf: &Leaf) -> Res<(usize, usize)> {
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

    pub(in crate::topology) fn ops(&self, leaf: &Leaf, api: Api) -> Res<BTreeMap<Op, u32>> {
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
}

/// Push a script op and, for `attempts` above 1, its retries, each after a `pause` (where
/// not zero). A retried try: the first attempt as written, then each retry after a pause,
/// both only while the lock is not held (Flyway's loop; a failed last attempt is what a
/// following `when: last_failed` sees). A retried unlock (goose's): each retry and pause
/// only while the last unlock returned false.
fn push_attempts(out: &mut Vec<ScriptOp>, step: ScriptOp, attempts: u32, pause: Duration) {
    let again = if step.op == Op::Unlock {
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
