//! Import of a team's `pgbouncer.ini`: a topology with its pooling settings, so pgchaos runs
//! against the configuration they deploy (`pgchaos import`, which writes the file).
//!
//! The ini is parsed here (sections, `key = value`, `;`/`#` comments; `%include` is refused).
//! The `[pgbouncer]` keys map onto the topology's `pgbouncer` keys and `pgbouncer.settings`;
//! what the harness controls itself (listen address, authentication, admin console, log,
//! pid file, TLS, the `[databases]`/`[users]`/`[peers]` sections) and the timeouts pgchaos
//! refuses are dropped, one YAML comment each. Bad input is an error at `path:line:column`;
//! the output is checked by loading it (`Topology::parse`) before anything is written.

use super::import_yaml::Written;
use super::pools;
use crate::pooler::import::{CLIENTS, POSTGRES_VERSION};
use crate::pooler::{Imported, Origin, PoolMode};
use crate::topology::Topology;
use anyhow::{Result, bail};
use std::path::Path;

/// The PgBouncer release an imported topology declares unless told otherwise.
pub const DEFAULT_PGBOUNCER_VERSION: &str = "1.25.2";
/// PostgreSQL's default `max_connections`, and what the room for the pool is computed from.
const PG_DEFAULT_MAX_CONNECTIONS: u64 = 100;
/// `superuser_reserved_connections` (default) + the harness's direct connections.
const PG_RESERVED: u64 = 3 + 3;
/// The topology's bound on `pgbouncer.max_client_conn`.
const MAX_CLIENT_CONN_LIMIT: u64 = 100_000;

/// Whether a file is a `pgbouncer.ini`: it has a `[pgbouncer]` section.
pub fn recognises(src: &str) -> bool {
    src.lines()
        .any(|l| l.trim().eq_ignore_ascii_case("[pgbouncer]"))
}

// ---------------------------------------------------------------------------------------------
// Errors

/// An ini error: `path:line:column: message`, the line with a caret, hints (every import's).
pub use crate::pooler::import::ConfError as IniError;
use crate::pooler::import::{ConfFile as Cx, col_of, yaml_quote};

trait At {
    fn at_key(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> IniError;
    fn at_value(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> IniError;
}

impl At for Cx<'_> {
    fn at_key(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> IniError {
        self.error(e.line, e.key_col, e.key.chars().count(), message, hints)
    }

    fn at_value(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> IniError {
        self.error(e.line, e.value_col, e.value.chars().count(), message, hints)
    }
}

// ---------------------------------------------------------------------------------------------
// The ini parser

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Databases,
    Users,
    Peers,
    Pgbouncer,
}

/// One `key = value` line. Columns are 1-based, in characters.
#[derive(Clone, Debug)]
struct Entry {
    section: Section,
    line: usize,
    /// As written (`[pgbouncer]` keys are compared in lower case).
    key: String,
    key_col: usize,
    value: String,
    value_col: usize,
}

/// Parses the ini: every `key = value` line with its section, in file order.
fn parse_ini(cx: &Cx) -> Result<Vec<Entry>, IniError> {
    let mut out: Vec<Entry> = Vec::new();
    let mut section: Option<Section> = None;
    for (i, raw) in cx.src.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        let start = line.len() - line.trim_start().len();
        let t = line.trim();
        if t.is_empty() || t.starts_with(';') || t.starts_with('#') {
            continue;
        }
        let col = col_of(line, start);
        if t.starts_with('%') {
            let word = t.split_whitespace().next().unwrap_or(t);
            if word.eq_ignore_ascii_case("%include") {
                return Err(cx.error(
                    n,
                    col,
                    t.chars().count(),
                    "`%include` is not followed by pgchaos import",
                    vec![
                        "paste the included file's settings into this file, or import the included file on its own".into(),
                    ],
                ));
            }
            return Err(cx.error(
                n,
                col,
                word.chars().count(),
                format!("unknown directive `{word}`"),
                vec![
                    "pgbouncer.ini knows only `%include`, which pgchaos import does not follow"
                        .into(),
                ],
            ));
        }
        if let Some(rest) = t.strip_prefix('[') {
            let Some(inner) = rest.strip_suffix(']') else {
                return Err(cx.error(
                    n,
                    col,
                    t.chars().count(),
                    format!("a section header must end with `]`: `{t}`"),
                    vec!["sections are [databases], [users], [peers] and [pgbouncer]".into()],
                ));
            };
            let name = inner.trim().to_ascii_lowercase();
            section = Some(match name.as_str() {
                "databases" => Section::Databases,
                "users" => Section::Users,
                "peers" => Section::Peers,
                "pgbouncer" => Section::Pgbouncer,
                _ => {
                    return Err(cx.error(
                        n,
                        col,
                        t.chars().count(),
                        format!("unknown section `{t}`"),
                        vec!["sections are [databases], [users], [peers] and [pgbouncer]".into()],
                    ));
                }
            });
            continue;
        }
        let Some(eq) = line.find('=') else {
            return Err(cx.error(
                n,
                col,
                t.chars().count(),
                format!("expected `key = value` or `[section]`, found `{t}`"),
                vec!["comments start with `;` or `#`".into()],
            ));
        };
        let key = line[..eq].trim();
        if key.is_empty() {
            return Err(cx.error(
                n,
                col_of(line, eq),
                1,
                format!("missing key before `=`: `{t}`"),
                vec!["write `key = value`".into()],
            ));
        }
        let Some(section) = section else {
            return Err(cx.error(
                n,
                col,
                key.chars().count(),
                format!("`{key}` is set before any section"),
                vec!["put it under [pgbouncer] (or [databases] / [users])".into()],
            ));
        };
        let after = &line[eq + 1..];
        let value = after.trim();
        let value_byte = eq + 1 + (after.len() - after.trim_start().len());
        let entry = Entry {
            section,
            line: n,
            key: key.to_string(),
            key_col: col,
            value: value.to_string(),
            value_col: col_of(line, value_byte),
        };
        if section == Section::Pgbouncer {
            let lower = key.to_ascii_lowercase();
            if let Some(first) = out
                .iter()
                .find(|e| e.section == Section::Pgbouncer && e.key.eq_ignore_ascii_case(&lower))
            {
                return Err(cx.at_key(
                    &entry,
                    format!("`{key}` is set twice in [pgbouncer]"),
                    vec![format!(
                        "first set at line {}: `{} = {}`; keep one",
                        first.line, first.key, first.value
                    )],
                ));
            }
        }
        out.push(entry);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The mapping

/// Why the harness drops a `[pgbouncer]` key it controls itself.
fn harness_reason(name: &str) -> Option<&'static str> {
    Some(match name {
        "listen_addr" => "pgchaos listens on loopback only",
        "listen_port" => "pgchaos picks a free loopback port",
        "unix_socket_dir" | "unix_socket_mode" | "unix_socket_group" => {
            "pgchaos picks pgbouncer's socket directory"
        }
        "admin_users" | "stats_users" => "pgchaos uses the admin console itself",
        "logfile" | "syslog" | "syslog_ident" | "syslog_facility" => {
            "pgchaos captures pgbouncer's log itself"
        }
        "pidfile" => "pgchaos manages the pgbouncer process",
        "user" => "pgchaos runs pgbouncer as the invoking user",
        "conffile" => "pgchaos writes pgbouncer.ini itself",
        "peer_id" => "pgchaos runs a single pgbouncer, without peers",
        n if n.starts_with("auth_") => "pgchaos configures authentication itself",
        n if n.starts_with("client_tls") || n.starts_with("server_tls") => {
            "pgchaos connects without TLS over loopback"
        }
        _ => return None,
    })
}

/// Values not echoed in comments (they may hold credentials).
fn is_secret(name: &str) -> bool {
    name == "auth_ldap_options" || name.contains("password") || name.contains("secret")
}

/// PgBouncer's timeouts (the topology's list): kept as they are, and checked to be seconds.
use super::settings::is_timeout;

/// A YAML scalar for an ini value: a plain integer, else a double-quoted string.
fn yaml_value(v: &str) -> String {
    if !v.is_empty()
        && v.len() <= 18
        && v.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
        && !v.trim_start_matches('-').is_empty()
        && v.parse::<i64>().is_ok()
    {
        return v.to_string();
    }
    yaml_quote(v)
}

fn int_value(cx: &Cx, e: &Entry, lo: u64, what: &str) -> Result<u64, IniError> {
    match e.value.parse::<u64>() {
        Ok(v) if v >= lo => Ok(v),
        _ => Err(cx.at_value(
            e,
            format!(
                "`{}` must be an integer >= {lo}, found `{}`",
                e.key, e.value
            ),
            vec![format!("{what} is a count of connections")],
        )),
    }
}

fn bool_value(cx: &Cx, e: &Entry) -> Result<bool, IniError> {
    match e.value.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(cx.at_value(
            e,
            format!("`{}` must be a boolean, found `{}`", e.key, e.value),
            vec!["write 1 or 0".into()],
        )),
    }
}

/// A minimal topology holding one `pgbouncer.settings` entry, to ask the topology's own
/// validation whether pgchaos accepts it (its name, its release, its value).
fn probe(version: &str, setting: Option<(&str, &str)>) -> String {
    let mut y = format!(
        "name: probe\npostgres:\n  version: \"{POSTGRES_VERSION}\"\n  settings:\n    max_connections: 100000\npgbouncer:\n  version: {}\n  pool_mode: session\n",
        yaml_quote(version)
    );
    if let Some((k, v)) = setting {
        y.push_str(&format!("  settings:\n    {k}: {v}\n"));
    }
    y
}

/// Line of the setting's key in [`probe`]'s text (1-based), and its key column.
const PROBE_SETTING_LINE: usize = 10;
const PROBE_KEY_COL: usize = 5;

/// The ini text as a topology YAML, or the first error in it.
pub fn convert(src: &str, path: &Path, origin: &Origin) -> Result<Imported> {
    let cx = Cx { src, path };
    crate::pooler::import::refuse_control(&cx)?;
    let entries = parse_ini(&cx)?;
    let version = origin.version.unwrap_or(DEFAULT_PGBOUNCER_VERSION);
    if let Err(e) = Topology::parse(
        &probe(version, None),
        Path::new("probe"),
        &crate::pooler::import::probe_catalog(),
    ) {
        bail!("--pgbouncer-version {version:?}: {}", e.message());
    }

    let mut ini = Ini::default();
    for e in &entries {
        ini.entry(&cx, e, version)?;
    }

    // The database and user under test: their overrides of [pgbouncer]'s pooling settings
    // become the topology's own (PgBouncer's precedence: user, database, [pgbouncer]).
    let eff = pools::effective(&cx, &ini.databases, &ini.users, &origin.select)?;
    let notes = ini.under_test(&cx, &eff, version)?;

    let written = ini.settle(notes);
    let yaml = super::import_yaml::topology(origin, version, &written);
    let Written {
        pool_mode,
        default_pool_size,
        max_client_conn,
        settings,
        dropped,
        ..
    } = written;
    Ok(Imported {
        yaml,
        summary: format!(
            "{}pool_mode {}, default_pool_size {default_pool_size}, max_client_conn {max_client_conn}, {} further setting(s); {} key(s) dropped (listed above, and in the comments)",
            eff.chosen
                .iter()
                .map(|c| format!("{c}: "))
                .collect::<String>(),
            pool_mode.as_str(),
            settings.len(),
            dropped.len()
        ),
        dropped: dropped.iter().map(|d| format!("dropped {d}")).collect(),
    })
}

/// What the ini says, read one entry at a time in file order: `[pgbouncer]`'s pooling
/// settings and further settings, the `[databases]` and `[users]` entries, and what is
/// dropped.
#[derive(Default)]
struct Ini {
    pool_mode: Option<PoolMode>,
    default_pool_size: Option<u64>,
    max_client_conn: Option<u64>,
    reset_query: Option<String>,
    reset_always: Option<bool>,
    /// Further `[pgbouncer]` settings, as YAML scalars.
    settings: Vec<(String, String)>,
    /// One entry per key dropped, with the reason.
    dropped: Vec<String>,
    databases: Vec<pools::Override>,
    users: Vec<pools::Override>,
}

impl Ini {
    /// Reads one entry of any section.
    fn entry(&mut self, cx: &Cx, e: &Entry, version: &str) -> Result<()> {
        match e.section {
            Section::Databases => self.databases.push(pools::parse_entry(
                cx,
                e.line,
                &e.key,
                &e.value,
                e.value_col,
                false,
            )?),
            Section::Users => self.users.push(pools::parse_entry(
                cx,
                e.line,
                &e.key,
                &e.value,
                e.value_col,
                true,
            )?),
            Section::Peers => self.dropped.push(format!(
                "[peers] {}: pgchaos runs a single pgbouncer, without peers",
                yaml_quote(&e.key)
            )),
            Section::Pgbouncer => self.pgbouncer_key(cx, e, version)?,
        }
        Ok(())
    }

    /// Reads one `[pgbouncer]` key: a pooling setting the topology has a key for, or (through
    /// [`Ini::setting`]) a further setting or a dropped key.
    fn pgbouncer_key(&mut self, cx: &Cx, e: &Entry, version: &str) -> Result<()> {
        let name = e.key.to_ascii_lowercase();
        match name.as_str() {
            "pool_mode" => {
                self.pool_mode = Some(match e.value.to_ascii_lowercase().as_str() {
                    "session" => PoolMode::Session,
                    "transaction" => PoolMode::Transaction,
                    "statement" => {
                        return Err(cx
                            .at_value(
                                e,
                                "`pool_mode = statement` is not modelled by pgchaos yet",
                                vec![
                                    "in statement mode PgBouncer closes the client and its server when a statement leaves a transaction open; the model does not predict that yet".into(),
                                    "import a copy with session or transaction".into(),
                                ],
                            )
                            .into());
                    }
                    _ => {
                        return Err(cx
                            .at_value(
                                e,
                                format!("unknown pool_mode `{}`", e.value),
                                vec!["valid pool modes: session, transaction, statement".into()],
                            )
                            .into());
                    }
                });
            }
            "default_pool_size" => {
                let v = int_value(cx, e, 1, "default_pool_size")?;
                if v > 10_000 {
                    return Err(cx
                        .at_value(
                            e,
                            format!(
                                "`default_pool_size = {v}` is more than pgchaos accepts (10000)"
                            ),
                            vec!["pgchaos starts a PostgreSQL with room for the whole pool".into()],
                        )
                        .into());
                }
                self.default_pool_size = Some(v);
            }
            "max_client_conn" => {
                self.max_client_conn = Some(int_value(cx, e, 1, "max_client_conn")?);
            }
            "server_reset_query" => self.reset_query = Some(e.value.clone()),
            "server_reset_query_always" => self.reset_always = Some(bool_value(cx, e)?),
            _ => self.setting(cx, e, name, version)?,
        }
        Ok(())
    }

    /// A `[pgbouncer]` key the topology has no key for (`name`, in lower case): dropped with
    /// the reason if the harness controls it, else a `pgbouncer.settings` entry if pgchaos
    /// accepts it (a timeout must be seconds), else an error.
    fn setting(&mut self, cx: &Cx, e: &Entry, name: String, version: &str) -> Result<()> {
        if let Some(why) = harness_reason(&name) {
            if is_secret(&name) {
                self.dropped
                    .push(format!("{name} (value not shown): {why}"));
            } else {
                self.dropped
                    .push(format!("{name} = {}: {why}", yaml_quote(&e.value)));
            }
            return Ok(());
        }
        if is_timeout(&name) {
            match e.value.parse::<f64>() {
                Ok(v) if v >= 0.0 => {}
                _ => {
                    return Err(cx
                        .at_value(
                            e,
                            format!("`{name}` is not a number of seconds: `{}`", e.value),
                            vec!["a PgBouncer timeout is seconds, e.g. 600 (0 = off)".into()],
                        )
                        .into());
                }
            }
        }
        let value = yaml_value(&e.value);
        if let Err((msg, hints, on_key)) = probe_setting(version, &name, &value) {
            return Err(if on_key {
                cx.at_key(e, msg, hints)
            } else {
                cx.at_value(e, msg, hints)
            }
            .into());
        }
        self.settings.push((name, value));
        Ok(())
    }

    /// Takes the overrides of the database and user under test (`eff`) over `[pgbouncer]`'s
    /// settings, and their dropped entries; the notes saying where each came from.
    fn under_test(
        &mut self,
        cx: &Cx,
        eff: &pools::Effective,
        version: &str,
    ) -> Result<Vec<String>> {
        let mut notes: Vec<String> = eff.chosen.iter().map(|c| format!("# {c}")).collect();
        let global_mode = self.pool_mode;
        if let Some((m, from)) = &eff.pool_mode {
            notes.push(format!(
                "# pool_mode {} from {from} ([pgbouncer] says {})",
                m.as_str(),
                global_mode.map_or("nothing: session", |g| g.as_str())
            ));
            self.pool_mode = Some(*m);
        }
        if let Some((n, from)) = &eff.pool_size {
            notes.push(format!(
                "# default_pool_size {n} from {from}'s pool_size ([pgbouncer] says {})",
                self.default_pool_size
                    .map_or("nothing: 20".to_string(), |d| d.to_string())
            ));
            self.default_pool_size = Some(*n);
        }
        for (name, value, from, line, key_col, value_col) in &eff.settings {
            let value = yaml_value(value);
            if let Err((msg, hints, on_key)) = probe_setting(version, name, &value) {
                let col = if on_key { *key_col } else { *value_col };
                return Err(cx
                    .error(*line, col, 1, format!("{from}: {msg}"), hints)
                    .into());
            }
            notes.push(format!("# {name} from {from}"));
            self.settings.retain(|(k, _)| k != name);
            self.settings.push((name.to_string(), value));
        }
        self.settings.sort();
        self.dropped.extend(eff.dropped.iter().cloned());
        Ok(notes)
    }

    /// The settings to write, with a note for each default taken and each value changed
    /// (`max_client_conn` brought within what pgchaos accepts), and PostgreSQL's
    /// `max_connections` where the pool needs more than its default.
    fn settle(self, mut notes: Vec<String>) -> Written {
        let pool_extra: u64 = self
            .settings
            .iter()
            .filter(|(k, _)| k == "reserve_pool_size" || k == "min_pool_size")
            .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
            .sum();

        // PgBouncer's defaults for what the ini leaves out (the topology's differ for the pool).
        let pool_mode = self.pool_mode.unwrap_or_else(|| {
            notes.push("# pool_mode is not set in the ini: PgBouncer's default, session".into());
            PoolMode::Session
        });
        let default_pool_size = self.default_pool_size.unwrap_or_else(|| {
            notes.push("# default_pool_size is not set in the ini: PgBouncer's default, 20".into());
            20
        });
        let mut max_client_conn = self.max_client_conn.unwrap_or(100);
        if max_client_conn < u64::from(CLIENTS) {
            notes.push(format!(
                "# max_client_conn raised from {max_client_conn} to {CLIENTS}: it must be at least workload.clients"
            ));
            max_client_conn = CLIENTS.into();
        } else if max_client_conn > MAX_CLIENT_CONN_LIMIT {
            notes.push(format!(
                "# max_client_conn lowered from {max_client_conn} to {MAX_CLIENT_CONN_LIMIT}, the most pgchaos accepts (its {CLIENTS} clients never reach it)"
            ));
            max_client_conn = MAX_CLIENT_CONN_LIMIT;
        }
        let reset_query = self.reset_query.unwrap_or_else(|| "DISCARD ALL".into());
        let reset_always = self.reset_always.unwrap_or(false);
        let pool = default_pool_size + pool_extra;
        let max_connections =
            (pool + PG_RESERVED > PG_DEFAULT_MAX_CONNECTIONS).then_some(pool + PG_RESERVED);
        Written {
            pool_mode,
            default_pool_size,
            max_client_conn,
            reset_query,
            reset_always,
            settings: self.settings,
            pool,
            max_connections,
            notes,
            dropped: self.dropped,
        }
    }
}

/// Whether pgchaos accepts a `pgbouncer.settings` entry (its name, its release, its value),
/// asked of the topology's own validation on a probe. The error: message, hints, and whether
/// it is about the key (else the value).
fn probe_setting(
    version: &str,
    name: &str,
    value: &str,
) -> std::result::Result<(), (String, Vec<String>, bool)> {
    match Topology::parse(
        &probe(version, Some((name, value))),
        Path::new("probe"),
        &crate::pooler::import::probe_catalog(),
    ) {
        Ok(_) => Ok(()),
        Err(te) => Err((
            te.message().replace("pgbouncer.settings.", ""),
            te.hints().to_vec(),
            te.line() == Some(PROBE_SETTING_LINE) && te.column() == Some(PROBE_KEY_COL),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REALISTIC: &str = "\
;; pgbouncer.ini of the orders service (production)
[databases]
orders = host=10.0.3.17 port=5432 dbname=orders password=hunter2
reporting = host=10.0.3.18 port=5432 dbname=orders pool_size=5 pool_mode=session

[users]
batch = pool_mode=session

[pgbouncer]
listen_addr = *
listen_port = 6432
auth_type = scram-sha-256
auth_file = /etc/pgbouncer/userlist.txt
admin_users = pgbouncer_admin
stats_users = datadog, pgbouncer_stats
logfile = /var/log/postgresql/pgbouncer.log
pidfile = /var/run/postgresql/pgbouncer.pid

# pooling
pool_mode = transaction
default_pool_size = 20
max_client_conn = 1000
server_reset_query = DISCARD ALL
server_lifetime = 3600
server_idle_timeout = 600
query_wait_timeout = 120
max_prepared_statements = 200
ignore_startup_parameters = extra_float_digits
";

    fn origin() -> Origin<'static> {
        Origin {
            ini: Path::new("/etc/pgbouncer/pgbouncer.ini"),
            when: "2026-12-01 05:50:00+00",
            name: "orders",
            version: None,
            select: Default::default(),
        }
    }

    fn run(src: &str) -> Result<Imported> {
        convert(src, Path::new("pgbouncer.ini"), &origin())
    }

    /// REALISTIC's database under test, `orders`, as the user `app` (not in [users]).
    fn run_orders(src: &str) -> Result<Imported> {
        convert(
            src,
            Path::new("pgbouncer.ini"),
            &Origin {
                select: crate::pooler::Select {
                    database: Some("orders"),
                    user: Some("app"),
                    drop: &[],
                },
                ..origin()
            },
        )
    }

    fn topo(src: &str) -> (Topology, String) {
        let y = run(src).unwrap().yaml;
        let t = Topology::parse(&y, Path::new("orders.yaml"), &crate::catalog())
            .unwrap_or_else(|e| panic!("{e}\n---\n{y}"));
        (t, y)
    }

    /// The error's `(line, column, message)`.
    fn err(src: &str) -> (usize, usize, String, String) {
        let e = run(src).err().expect("an error");
        let ie = e.downcast_ref::<IniError>().expect("an IniError");
        (ie.line, ie.column, ie.message.clone(), e.to_string())
    }

    #[test]
    fn realistic_ini_round_trips() {
        let y = run_orders(REALISTIC).unwrap().yaml;
        let t = Topology::parse(&y, Path::new("orders.yaml"), &crate::catalog())
            .unwrap_or_else(|e| panic!("{e}\n---\n{y}"));
        assert_eq!(t.name, "orders");
        assert_eq!(t.postgres.version, "18.6");
        let pb = t
            .pooler
            .as_ref()
            .unwrap()
            .config::<crate::pooler::pgbouncer::PgbouncerSpec>()
            .unwrap();
        assert_eq!(pb.version, "1.25.2");
        assert_eq!(pb.pool_mode, PoolMode::Transaction);
        assert_eq!(pb.default_pool_size, 20);
        assert_eq!(pb.max_client_conn, 1000);
        assert_eq!(pb.server_reset_query, "DISCARD ALL");
        assert!(!pb.server_reset_query_always);
        let s: Vec<(&str, &str)> = pb
            .settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            s,
            [
                ("ignore_startup_parameters", "extra_float_digits"),
                ("max_prepared_statements", "200"),
                ("query_wait_timeout", "120"),
                ("server_idle_timeout", "600"),
                ("server_lifetime", "3600"),
            ]
        );
        assert_eq!(t.workload.clients, 4);
        assert_eq!(t.workload.steps_min, 1);
        assert_eq!(t.workload.steps_max, 39);
        assert_eq!(t.workload.lock_timeout_ms, 1);
        assert_eq!(t.workload.keys.len(), 2);
        assert!(t.expect.is_empty());
        assert!(
            t.postgres.settings.is_empty(),
            "a pool of 20 fits the default"
        );
        for line in [
            "# dropped listen_addr = \"*\": ",
            "# dropped listen_port = \"6432\": pgchaos picks a free loopback port",
            "# dropped auth_type = \"scram-sha-256\": ",
            "# dropped auth_file = \"/etc/pgbouncer/userlist.txt\": ",
            "# dropped admin_users = \"pgbouncer_admin\": ",
            "# dropped stats_users = \"datadog, pgbouncer_stats\": ",
            "# dropped logfile = \"/var/log/postgresql/pgbouncer.log\": ",
            "# dropped pidfile = \"/var/run/postgresql/pgbouncer.pid\": ",
            "# dropped [databases] orders, line 3: host (value not shown): ",
            "# dropped [databases] orders, line 3: password (value not shown): ",
            "# dropped [databases] reporting: not the database under test (its pool_size=5 pool_mode=session are not this topology's)",
            "# dropped [users] batch: not the user under test (its pool_mode=session are not this topology's)",
            "# database under test: orders (line 3, --database)",
            "# user under test: app (not in [users]: the database's settings)",
        ] {
            assert!(y.contains(line), "missing {line:?} in\n{y}");
        }
        assert!(!y.contains("hunter2"), "a password leaked into\n{y}");
        assert!(
            !y.contains("10.0.3.17"),
            "connection strings are not echoed"
        );
        assert!(y.starts_with("# Imported by `pgchaos import` from /etc/pgbouncer/pgbouncer.ini at 2026-12-01 05:50:00+00."));
        let imported = run_orders(REALISTIC).unwrap();
        assert!(
            imported
                .summary
                .ends_with("; 14 key(s) dropped (listed above, and in the comments)"),
            "{}",
            imported.summary
        );
        assert_eq!(imported.dropped.len(), 14);
        assert!(imported.dropped.iter().all(|d| d.starts_with("dropped ")));
        assert!(!imported.dropped.iter().any(|d| d.contains("hunter2")));
        // Without --database, two databases pooled differently are refused, at the one
        // that overrides; without --user, a [users] entry that changes pooling is too.
        let (l, c, m, _) = err(REALISTIC);
        assert_eq!((l, c), (4, 52), "{m}");
        assert!(
            m.contains("pools its databases differently")
                && m.contains("reporting pool_size=5 pool_mode=session")
                && m.contains("--database NAME"),
            "{m}"
        );
        let e = convert(
            REALISTIC,
            Path::new("pgbouncer.ini"),
            &Origin {
                select: crate::pooler::Select {
                    database: Some("orders"),
                    ..Default::default()
                },
                ..origin()
            },
        )
        .err()
        .unwrap();
        assert!(
            e.to_string()
                .starts_with("pgbouncer.ini:7:9: [users] batch changes pooling (pool_mode=session): name the user"),
            "{e}"
        );
    }

    #[test]
    fn timeouts_are_kept_as_they_are_for_the_model() {
        let src =
            "[pgbouncer]\npool_mode = session\nquery_wait_timeout = 30\nserver_lifetime = 0.5\n";
        let (t, y) = topo(src);
        let pb = t
            .pooler
            .as_ref()
            .unwrap()
            .config::<crate::pooler::pgbouncer::PgbouncerSpec>()
            .unwrap();
        assert_eq!(
            pb.settings.get("query_wait_timeout").map(String::as_str),
            Some("30")
        );
        assert_eq!(
            pb.settings.get("server_lifetime").map(String::as_str),
            Some("0.5")
        );
        assert!(!y.contains("# dropped query_wait_timeout"), "{y}");
        use crate::vocab::timeout::Effect;
        assert_eq!(t.timeouts().get(&Effect::EndLongWait), Some(&30_000));
        assert_eq!(t.timeouts().get(&Effect::RetireOld), Some(&500));
        assert!(run("[pgbouncer]\nserver_lifetime = soon\n").is_err());
    }

    #[test]
    fn defaults_and_adjustments() {
        // No pool settings: PgBouncer's defaults (session, 20), said in comments.
        let (t, y) = topo("[pgbouncer]\nmax_client_conn = 2\n");
        let pb = t
            .pooler
            .as_ref()
            .unwrap()
            .config::<crate::pooler::pgbouncer::PgbouncerSpec>()
            .unwrap()
            .clone();
        assert_eq!(pb.pool_mode, PoolMode::Session);
        assert_eq!(pb.default_pool_size, 20);
        assert_eq!(pb.max_client_conn, 4);
        assert!(y.contains("# max_client_conn raised from 2 to 4"));
        assert!(y.contains("# pool_mode is not set in the ini"));
        // A pool bigger than PostgreSQL's default room raises max_connections.
        let (t, _) = topo(
            "[pgbouncer]\npool_mode = transaction\ndefault_pool_size = 200\nreserve_pool_size = 10\nserver_reset_query =\nserver_reset_query_always = 1\n",
        );
        assert_eq!(
            t.postgres
                .settings
                .get("max_connections")
                .map(String::as_str),
            Some("216")
        );
        let pb = t
            .pooler
            .as_ref()
            .unwrap()
            .config::<crate::pooler::pgbouncer::PgbouncerSpec>()
            .unwrap()
            .clone();
        assert_eq!(pb.server_reset_query, "");
        assert!(pb.server_reset_query_always);
    }

    #[test]
    fn errors_name_line_and_column() {
        let cases: &[(&str, usize, usize, &str)] = &[
            (
                "[pgbouncer]\npool_mode = transction\n",
                2,
                13,
                "unknown pool_mode `transction`",
            ),
            (
                "[pgbouncer]\npool_mode = statement\n",
                2,
                13,
                "not modelled",
            ),
            (
                "[pgbouncer]\n  default_pool_size = twenty\n",
                2,
                23,
                "must be an integer",
            ),
            (
                "[pgbouncer]\ndefault_pool_size = 0\n",
                2,
                21,
                "must be an integer >= 1",
            ),
            (
                "[pgbouncer]\nmax_client_conn = 1k\n",
                2,
                19,
                "must be an integer",
            ),
            (
                "[pgbouncer]\npool_mode = session\n\nPool_Mode = transaction\n",
                4,
                1,
                "set twice",
            ),
            (
                "[pgbouncer]\nthis is not a setting\n",
                2,
                1,
                "expected `key = value` or `[section]`",
            ),
            (
                "; top\n%include /etc/pgbouncer/extra.ini\n",
                2,
                1,
                "`%include` is not followed",
            ),
            ("pool_mode = session\n", 1, 1, "before any section"),
            ("[pgbouncer\n", 1, 1, "must end with `]`"),
            ("[pgbouncr]\n", 1, 1, "unknown section"),
            ("[pgbouncer]\n = 3\n", 2, 2, "missing key"),
            (
                "[pgbouncer]\nserver_lifetme = 3600\n",
                2,
                1,
                "unknown pgbouncer setting `server_lifetme`",
            ),
            (
                "[pgbouncer]\nserver_lifetime = soon\n",
                2,
                19,
                "not a number of seconds",
            ),
            (
                "[pgbouncer]\nserver_reset_query_always = maybe\n",
                2,
                29,
                "must be a boolean",
            ),
            (
                "[pgbouncer]\nmin_pool_size = lots\n",
                2,
                17,
                "min_pool_size",
            ),
        ];
        for (src, line, col, msg) in cases {
            let (l, c, m, shown) = err(src);
            assert_eq!((l, c), (*line, *col), "{src:?}: {shown}");
            assert!(m.contains(msg), "{src:?}: {m:?} lacks {msg:?}");
            assert!(
                shown.starts_with(&format!("pgbouncer.ini:{line}:{col}: ")),
                "{shown}"
            );
            assert!(
                shown.contains(&format!("\n{line} | ")),
                "no snippet: {shown}"
            );
            assert!(shown.contains('^'), "no caret: {shown}");
        }
        // The typo gets a suggestion, from the topology's own validation.
        let (_, _, _, shown) = err("[pgbouncer]\nserver_lifetme = 3600\n");
        assert!(shown.contains("server_lifetime"), "{shown}");
        // A setting newer than the declared release.
        let e = convert(
            "[pgbouncer]\ntransaction_timeout = 0\n",
            Path::new("pgbouncer.ini"),
            &Origin {
                version: Some("1.23.1"),
                ..origin()
            },
        )
        .err()
        .unwrap();
        assert!(
            e.to_string()
                .starts_with("pgbouncer.ini:2:1: `transaction_timeout` needs pgbouncer 1.25"),
            "{e}"
        );
    }
}
