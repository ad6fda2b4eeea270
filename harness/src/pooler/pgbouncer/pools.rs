//! The `[databases]` and `[users]` sections of a `pgbouncer.ini` as PgBouncer 1.25.2 reads
//! them, and the pooling settings of the database and user under test (`pgchaos import
//! --database NAME --user NAME`).
//!
//! Read at pgbouncer/pgbouncer tag `pgbouncer_1_25_2`: `src/loader.c` (`parse_database`,
//! `parse_user`: `key=value` pairs separated by spaces, a value quoted with `'` and `''` for
//! a quote, an unknown key an error), `src/server.c` (the precedence: a user's `pool_mode`,
//! `pool_size` and `reserve_pool_size` over the database's over `[pgbouncer]`'s;
//! `min_pool_size`, `server_lifetime`, `max_db_connections` of the database over the global
//! ones). A topology runs one database and one user, so the effective settings of the pair
//! under test become the topology's own; another database's or user's overrides are not that
//! pair's, and are listed as dropped.

use crate::pooler::import::{ConfError, ConfFile, col_of};
use crate::pooler::{PoolMode, Select};

/// What a `[databases]` or `[users]` pair does for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `pool_mode`.
    Mode,
    /// `pool_size`: the topology's `default_pool_size`.
    PoolSize,
    /// A `[pgbouncer]` setting of this name, for this database or user only.
    Setting(&'static str),
    /// Where and how to connect (host, port, dbname, credentials): pgchaos points PgBouncer
    /// at its own PostgreSQL, as its own role. Values are not shown (passwords).
    Connection,
    /// A server parameter asked of PostgreSQL at connect (`client_encoding`, `datestyle`,
    /// `timezone`): pgchaos's servers keep PostgreSQL's defaults.
    ServerParameter,
    /// `connect_query`: a query on every new server connection, which pgchaos does not run;
    /// it can change what a server holds (a lock, a setting): refused unless `--drop`ped.
    ConnectQuery,
}

fn database_role(key: &str) -> Option<Role> {
    Some(match key {
        "pool_mode" => Role::Mode,
        "pool_size" => Role::PoolSize,
        "min_pool_size" => Role::Setting("min_pool_size"),
        "reserve_pool" | "reserve_pool_size" => Role::Setting("reserve_pool_size"),
        "max_db_connections" => Role::Setting("max_db_connections"),
        "max_db_client_connections" => Role::Setting("max_db_client_connections"),
        "server_lifetime" => Role::Setting("server_lifetime"),
        "dbname" | "host" | "port" | "user" | "password" | "auth_user" | "auth_dbname"
        | "auth_query" | "application_name" | "load_balance_hosts" => Role::Connection,
        "client_encoding" | "datestyle" | "timezone" => Role::ServerParameter,
        "connect_query" => Role::ConnectQuery,
        _ => return None,
    })
}

fn user_role(key: &str) -> Option<Role> {
    Some(match key {
        "pool_mode" => Role::Mode,
        "pool_size" => Role::PoolSize,
        "reserve_pool_size" => Role::Setting("reserve_pool_size"),
        "max_user_connections" => Role::Setting("max_user_connections"),
        "max_user_client_connections" => Role::Setting("max_user_client_connections"),
        "query_timeout" => Role::Setting("query_timeout"),
        "idle_transaction_timeout" => Role::Setting("idle_transaction_timeout"),
        "transaction_timeout" => Role::Setting("transaction_timeout"),
        "client_idle_timeout" => Role::Setting("client_idle_timeout"),
        _ => return None,
    })
}

/// One `key=value` of an entry. Columns are 1-based, in characters of the ini's line.
#[derive(Clone, Debug)]
pub struct Pair {
    pub key: String,
    pub key_col: usize,
    pub value: String,
    pub value_col: usize,
    pub role: Role,
}

/// A `[databases]` or `[users]` entry: `app = host=... pool_mode=transaction`.
#[derive(Clone, Debug)]
pub struct Override {
    /// The name as PgBouncer matches it (SQL identifier quotes removed).
    pub name: String,
    pub line: usize,
    pub pairs: Vec<Pair>,
}

impl Override {
    /// The pairs that change how the entry is pooled (`pool_mode=transaction pool_size=10`).
    pub fn pooling(&self) -> Vec<&Pair> {
        self.pairs
            .iter()
            .filter(|p| matches!(p.role, Role::Mode | Role::PoolSize | Role::Setting(_)))
            .collect()
    }

    /// `pool_mode=transaction pool_size=10` (the pooling pairs only: nothing else is echoed).
    pub fn pooling_text(&self) -> String {
        self.pooling()
            .iter()
            .map(|p| format!("{}={}", p.key, p.value))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// An entry's name: `app`, or `"my-db"` with SQL identifier quoting (`""` for `"`).
fn unquote_name(key: &str) -> String {
    match key.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => key.to_string(),
    }
}

/// A quoted value after its opening `'`, as PgBouncer reads one (`''` for a quote): the
/// value, and the byte just past its closing quote in `q`; `None` when it is not closed.
fn unquote_value(q: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = q.char_indices().peekable();
    let mut end = None;
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().map(|(_, n)| *n) == Some('\'') {
                chars.next();
                out.push('\'');
                continue;
            }
            end = Some(i + 1);
            break;
        }
        out.push(c);
    }
    end.map(|end| (out, end))
}

/// The keys PgBouncer 1.25 knows in a `[users]` entry (`users`) or a `[databases]` one, as an
/// unknown key's error lists them.
fn known_keys(users: bool) -> &'static [&'static str] {
    if users {
        &[
            "pool_mode",
            "pool_size",
            "reserve_pool_size",
            "max_user_connections",
            "max_user_client_connections",
            "query_timeout",
            "idle_transaction_timeout",
            "transaction_timeout",
            "client_idle_timeout",
        ]
    } else {
        &[
            "dbname",
            "host",
            "port",
            "user",
            "password",
            "auth_user",
            "auth_dbname",
            "auth_query",
            "application_name",
            "load_balance_hosts",
            "client_encoding",
            "datestyle",
            "timezone",
            "pool_size",
            "min_pool_size",
            "reserve_pool_size",
            "max_db_connections",
            "max_db_client_connections",
            "server_lifetime",
            "pool_mode",
            "connect_query",
        ]
    }
}

/// Parses an entry's value as PgBouncer's `cstr_get_pair` does; `users`: the `[users]` keys.
pub fn parse_entry(
    cx: &ConfFile,
    line: usize,
    key: &str,
    value: &str,
    value_col: usize,
    users: bool,
) -> Result<Override, ConfError> {
    let section = if users { "[users]" } else { "[databases]" };
    let mut pairs = vec![];
    let mut rest = value;
    let mut at = 0usize; // byte offset of `rest` in `value`
    loop {
        let trimmed = rest.trim_start_matches(' ');
        at += rest.len() - trimmed.len();
        rest = trimmed;
        if rest.is_empty() {
            break;
        }
        let col = |byte: usize| value_col + col_of(value, byte) - 1;
        let key_end = rest.find(['=', ' ']).unwrap_or(rest.len());
        let k = &rest[..key_end];
        let after_key = rest[key_end..].trim_start_matches(' ');
        let Some(after_eq) = after_key.strip_prefix('=') else {
            return Err(cx.error(
                line,
                col(at),
                k.chars().count(),
                format!("{section} {key}: expected `key=value`, found `{k}`"),
                vec!["PgBouncer reads an entry as key=value pairs separated by spaces".into()],
            ));
        };
        if k.is_empty() {
            return Err(cx.error(
                line,
                col(at),
                1,
                format!("{section} {key}: missing key before `=`"),
                vec![],
            ));
        }
        let v_start_rel = rest.len() - after_eq.trim_start_matches(' ').len();
        let v_text = &rest[v_start_rel..];
        let (v, consumed) = if let Some(q) = v_text.strip_prefix('\'') {
            let Some((out, end)) = unquote_value(q) else {
                return Err(cx.error(
                    line,
                    col(at + v_start_rel),
                    1,
                    format!("{section} {key}: `{k}`'s quoted value has no closing `'`"),
                    vec!["write '' for a quote inside a quoted value".into()],
                ));
            };
            (out, 1 + end)
        } else {
            let end = v_text.find(' ').unwrap_or(v_text.len());
            (v_text[..end].to_string(), end)
        };
        let value_byte = at + v_start_rel;
        if v.is_empty() {
            return Err(cx.error(
                line,
                col(value_byte).max(col(at)),
                1,
                format!("{section} {key}: `{k}` has an empty value"),
                vec!["PgBouncer refuses an empty value".into()],
            ));
        }
        let role = if users {
            user_role(k)
        } else {
            database_role(k)
        };
        let Some(role) = role else {
            let known = known_keys(users);
            return Err(cx.error(
                line,
                col(at),
                k.chars().count(),
                format!(
                    "{section} {key}: unknown {} `{k}` (PgBouncer refuses it)",
                    if users {
                        "user parameter"
                    } else {
                        "connection parameter"
                    }
                ),
                vec![format!("PgBouncer 1.25 knows: {}", known.join(", "))],
            ));
        };
        pairs.push(Pair {
            key: k.to_string(),
            key_col: col(at),
            value: v,
            value_col: col(value_byte),
            role,
        });
        at += v_start_rel + consumed;
        rest = &value[at.min(value.len())..];
    }
    Ok(Override {
        name: unquote_name(key),
        line,
        pairs,
    })
}

/// A pool mode as PgBouncer spells it, or an error at the pair.
pub fn pool_mode(cx: &ConfFile, line: usize, p: &Pair) -> Result<PoolMode, ConfError> {
    match p.value.to_ascii_lowercase().as_str() {
        "session" => Ok(PoolMode::Session),
        "transaction" => Ok(PoolMode::Transaction),
        "statement" => Err(cx.error(
            line,
            p.value_col,
            p.value.chars().count(),
            "`pool_mode=statement` is not modelled by pgchaos yet",
            vec!["in statement mode PgBouncer closes the client and its server when a statement leaves a transaction open; the model does not predict that yet".into()],
        )),
        _ => Err(cx.error(
            line,
            p.value_col,
            p.value.chars().count(),
            format!("unknown pool_mode `{}`", p.value),
            vec!["valid pool modes: session, transaction, statement".into()],
        )),
    }
}

/// The pooling settings of the pair under test, where they differ from `[pgbouncer]`'s, each
/// with where it comes from (`[databases] app, line 3`).
#[derive(Debug, Default)]
pub struct Effective {
    pub pool_mode: Option<(PoolMode, String)>,
    pub pool_size: Option<(u64, String)>,
    /// `(setting, value, where, line, key column, value column)`.
    pub settings: Vec<(&'static str, String, String, usize, usize, usize)>,
    /// What the database under test named, and why (`database under test: app (line 3)`).
    pub chosen: Vec<String>,
    /// Dropped entries and pairs, with the reason (for the YAML comments and stderr).
    pub dropped: Vec<String>,
}

/// The effective settings of the database and user under test. Without `--database`, the
/// ini's only database is the one under test; several pooled differently are refused (a
/// topology holds one pool: which one is yours to say). Without `--user`, a `[users]` entry
/// that changes pooling is refused the same way.
pub fn effective(
    cx: &ConfFile,
    databases: &[Override],
    users: &[Override],
    select: &Select,
) -> Result<Effective, ConfError> {
    let mut eff = Effective::default();
    let db = choose_database(cx, databases, select)?;
    let user = choose_user(cx, users, select)?;
    for d in databases {
        if Some(d.name.as_str()) == db.map(|o| o.name.as_str()) {
            continue;
        }
        eff.dropped.push(format!(
            "[databases] {}: not the database under test{}",
            shown_name(&d.name),
            pooling_note(d)
        ));
    }
    for u in users {
        if Some(u.name.as_str()) == user.map(|o| o.name.as_str()) {
            continue;
        }
        eff.dropped.push(format!(
            "[users] {}: not the user under test{}",
            shown_name(&u.name),
            pooling_note(u)
        ));
    }
    if let Some(d) = db {
        let origin = format!("[databases] {}, line {}", shown_name(&d.name), d.line);
        eff.chosen.push(format!(
            "database under test: {} (line {}{})",
            shown_name(&d.name),
            d.line,
            match select.database {
                Some(_) => ", --database".to_string(),
                None => ", the ini's only database".to_string(),
            }
        ));
        apply(cx, d, &origin, &mut eff, select)?;
    }
    if let Some(u) = user {
        let origin = format!("[users] {}, line {}", shown_name(&u.name), u.line);
        eff.chosen.push(format!(
            "user under test: {} (line {})",
            shown_name(&u.name),
            u.line
        ));
        apply(cx, u, &origin, &mut eff, select)?;
    } else if let Some(name) = select.user {
        eff.chosen.push(format!(
            "user under test: {} (not in [users]: the database's settings)",
            shown_name(name)
        ));
    }
    Ok(eff)
}

/// The name as a YAML comment may show it: quoted when it holds anything but `[A-Za-z0-9_*]`.
fn shown_name(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*' || c == '-')
    {
        name.to_string()
    } else {
        crate::pooler::import::yaml_quote(name)
    }
}

fn pooling_note(o: &Override) -> String {
    let t = o.pooling_text();
    if t.is_empty() {
        String::new()
    } else {
        format!(" (its {t} are not this topology's)")
    }
}

/// Apply one entry's pairs (a database's, then the user's over it: src/server.c's order).
fn apply(
    cx: &ConfFile,
    o: &Override,
    origin: &str,
    eff: &mut Effective,
    select: &Select,
) -> Result<(), ConfError> {
    for p in &o.pairs {
        match p.role {
            Role::Mode => eff.pool_mode = Some((pool_mode(cx, o.line, p)?, origin.to_string())),
            Role::PoolSize => {
                let v = p.value.parse::<u64>().ok().filter(|v| (1..=10_000).contains(v));
                let Some(v) = v else {
                    return Err(cx.error(
                        o.line,
                        p.value_col,
                        p.value.chars().count(),
                        format!("`pool_size={}`: expected an integer from 1 to 10000", p.value),
                        vec!["pool_size is a count of server connections".into()],
                    ));
                };
                eff.pool_size = Some((v, origin.to_string()));
            }
            Role::Setting(name) => {
                // PgBouncer reads these with atoi (src/loader.c; seconds for the timeouts and
                // server_lifetime): `lots` would be 0, `0.5` would be 0 (off).
                if p.value.parse::<u64>().is_err() {
                    return Err(cx.error(
                        o.line,
                        p.value_col,
                        p.value.chars().count(),
                        format!("`{}={}`: expected a non-negative integer", p.key, p.value),
                        vec![format!(
                            "PgBouncer reads it with atoi (whole seconds for a timeout): `{}` would not be read as written",
                            p.value
                        )],
                    ));
                }
                eff.settings.retain(|s| s.0 != name);
                eff.settings.push((
                    name,
                    p.value.clone(),
                    origin.to_string(),
                    o.line,
                    p.key_col,
                    p.value_col,
                ));
            }
            Role::Connection => eff.dropped.push(format!(
                "{origin}: {} (value not shown): pgchaos points pgbouncer at the PostgreSQL it starts, as its own role",
                p.key
            )),
            Role::ServerParameter => eff.dropped.push(format!(
                "{origin}: {}={}: a server parameter asked at connect; pgchaos's servers keep PostgreSQL's defaults",
                p.key,
                crate::pooler::import::yaml_quote(&p.value)
            )),
            Role::ConnectQuery => {
                if !select.drop.iter().any(|d| d == "connect_query") {
                    return Err(cx.error(
                        o.line,
                        p.key_col,
                        p.key.chars().count(),
                        format!("{origin}: `connect_query` runs on every new server connection, and pgchaos does not run it"),
                        vec![
                            "it can change what a server holds (a lock, a setting) before any client sees it: the topology would not be what you run".into(),
                            "to import without it, acknowledge it: --drop connect_query".into(),
                        ],
                    ));
                }
                eff.dropped.push(format!(
                    "{origin}: connect_query (value not shown): not run by pgchaos (--drop connect_query)"
                ));
            }
        }
    }
    Ok(())
}

fn choose_database<'o>(
    cx: &ConfFile,
    databases: &'o [Override],
    select: &Select,
) -> Result<Option<&'o Override>, ConfError> {
    let names = || {
        databases
            .iter()
            .map(|d| format!("{} (line {})", shown_name(&d.name), d.line))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(want) = select.database {
        if let Some(d) = databases.iter().rev().find(|d| d.name == want) {
            return Ok(Some(d));
        }
        if let Some(d) = databases.iter().rev().find(|d| d.name == "*") {
            return Ok(Some(d));
        }
        return Err(cx.error(
            databases.first().map_or(1, |d| d.line),
            1,
            1,
            format!(
                "--database {}: no such database in [databases], and no `*` fallback",
                shown_name(want)
            ),
            vec![if databases.is_empty() {
                "the ini has no [databases] entries".into()
            } else {
                format!("the ini's databases: {}", names())
            }],
        ));
    }
    match databases {
        [] => Ok(None),
        [only] => Ok(Some(only)),
        many => {
            // Pooled alike (no entry overrides pooling): the global settings are every
            // database's, and no choice is needed.
            let first = many[0].pooling_text();
            if many.iter().all(|d| d.pooling_text() == first) && first.is_empty() {
                return Ok(None);
            }
            let differing = many
                .iter()
                .find(|d| !d.pooling().is_empty())
                .unwrap_or(&many[0]);
            let col = differing.pooling().first().map_or(1, |p| p.key_col);
            Err(cx.error(
                differing.line,
                col,
                1,
                format!(
                    "the ini pools its databases differently ({}): a topology tests one; name it with --database NAME",
                    many.iter()
                        .map(|d| {
                            let t = d.pooling_text();
                            format!(
                                "{} {}",
                                shown_name(&d.name),
                                if t.is_empty() { "as [pgbouncer] says".into() } else { t }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                vec![format!("the ini's databases: {}", names())],
            ))
        }
    }
}

fn choose_user<'o>(
    cx: &ConfFile,
    users: &'o [Override],
    select: &Select,
) -> Result<Option<&'o Override>, ConfError> {
    if let Some(want) = select.user {
        return Ok(users.iter().rev().find(|u| u.name == want));
    }
    match users.iter().find(|u| !u.pooling().is_empty()) {
        None => Ok(None),
        Some(u) => Err(cx.error(
            u.line,
            u.pooling()[0].key_col,
            u.pooling()[0].key.chars().count(),
            format!(
                "[users] {} changes pooling ({}): name the user your application connects as with --user NAME",
                shown_name(&u.name),
                u.pooling_text()
            ),
            vec!["a user not listed in [users] takes the database's settings: --user with its name says so".into()],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::PgbouncerSpec;
    use super::super::import::convert;
    use crate::pooler::{Imported, Origin, PoolMode, Select};
    use crate::topology::Topology;
    use std::path::Path;

    fn import(src: &str, select: Select) -> anyhow::Result<Imported> {
        convert(
            src,
            Path::new("pgbouncer.ini"),
            &Origin {
                ini: Path::new("/etc/pgbouncer/pgbouncer.ini"),
                when: "2026-12-06 16:00:00+00",
                name: "prod",
                version: None,
                select,
            },
        )
    }

    fn spec(src: &str, select: Select) -> (PgbouncerSpec, String) {
        let y = import(src, select).unwrap().yaml;
        let t = Topology::parse(&y, Path::new("prod.yaml"), &crate::catalog())
            .unwrap_or_else(|e| panic!("{e}\n---\n{y}"));
        let s = t
            .pooler
            .as_ref()
            .unwrap()
            .config::<PgbouncerSpec>()
            .unwrap()
            .clone();
        (s, y)
    }

    /// `(line, column, message)` of an import error.
    fn err(src: &str, select: Select) -> (usize, usize, String) {
        let e = import(src, select)
            .err()
            .unwrap_or_else(|| panic!("no error for {src:?}"));
        let ce = e
            .downcast_ref::<crate::pooler::import::ConfError>()
            .unwrap_or_else(|| panic!("not positioned: {e}"));
        (ce.line, ce.column, e.to_string())
    }

    fn db(name: &str) -> Select<'_> {
        Select {
            database: Some(name),
            ..Default::default()
        }
    }

    const DONE_WHEN: &str = "[pgbouncer]\npool_mode = session\ndefault_pool_size = 20\n[databases]\napp = host=10.0.0.5 port=5432 dbname=app pool_mode=transaction pool_size=10\n";

    /// The layout: `[pgbouncer]` says session, the one database says transaction.
    /// PgBouncer pools `app` in transaction mode (src/server.c: the database's pool_mode
    /// over the global one), and so does the topology; the YAML says where each came from.
    #[test]
    fn the_database_under_test_brings_its_pool_mode_and_size() {
        let (s, y) = spec(DONE_WHEN, Select::default());
        assert_eq!(s.pool_mode, PoolMode::Transaction, "{y}");
        assert_eq!(s.default_pool_size, 10, "{y}");
        assert!(
            y.contains("# database under test: app (line 5, the ini's only database)"),
            "{y}"
        );
        assert!(
            y.contains(
                "# pool_mode transaction from [databases] app, line 5 ([pgbouncer] says session)"
            ),
            "{y}"
        );
        assert!(!y.contains("10.0.0.5"), "a host is not echoed: {y}");
        // A second database pooled otherwise: which one is under test is the user's to say.
        let two = format!("{DONE_WHEN}reports = host=10.0.0.6 pool_mode=session\n");
        let (l, c, m) = err(&two, Select::default());
        assert_eq!((l, c), (5, 42), "{m}");
        assert!(m.contains("--database NAME"), "{m}");
        assert_eq!(spec(&two, db("app")).0.pool_mode, PoolMode::Transaction);
        let (s, y) = spec(&two, db("reports"));
        assert_eq!((s.pool_mode, s.default_pool_size), (PoolMode::Session, 20));
        assert!(
            y.contains("# dropped [databases] app: not the database under test (its pool_mode=transaction pool_size=10 are not this topology's)"),
            "{y}"
        );
        let (_, _, m) = err(&two, db("billing"));
        assert!(
            m.contains("--database billing: no such database") && m.contains("app (line 5)"),
            "{m}"
        );
        // `*` answers for a database not listed, as in PgBouncer.
        let star = format!("{two}* = host=10.0.0.7 pool_mode=transaction pool_size=3\n");
        let (s, _) = spec(&star, db("billing"));
        assert_eq!(
            (s.pool_mode, s.default_pool_size),
            (PoolMode::Transaction, 3)
        );
        // Databases pooled alike need no choice: [pgbouncer]'s settings are every one's.
        let alike = "[pgbouncer]\npool_mode = transaction\n[databases]\na = host=x\nb = host=y\n";
        assert_eq!(
            spec(alike, Select::default()).0.pool_mode,
            PoolMode::Transaction
        );
    }

    /// A user's pool_mode, pool_size and reserve over the database's; its timeouts over
    /// [pgbouncer]'s; a database's min_pool_size, max_db_connections, server_lifetime.
    #[test]
    fn the_user_under_test_overrides_the_database() {
        let src = "[pgbouncer]\npool_mode = session\nreserve_pool_size = 1\n[databases]\napp = host=x pool_mode=transaction pool_size=10 reserve_pool=2 min_pool_size=1 max_db_connections=8 server_lifetime=100\n[users]\nmigrator = pool_mode=session pool_size=3 query_timeout=5 max_user_connections=4\n";
        let (_, _, m) = err(src, Select::default());
        assert!(m.contains("[users] migrator changes pooling"), "{m}");
        let who = |user| Select {
            user: Some(user),
            ..Default::default()
        };
        let (s, y) = spec(src, who("migrator"));
        assert_eq!(
            (s.pool_mode, s.default_pool_size),
            (PoolMode::Session, 3),
            "{y}"
        );
        let set = |k: &str| s.settings.get(k).cloned();
        assert_eq!(set("reserve_pool_size").as_deref(), Some("2"));
        assert_eq!(set("min_pool_size").as_deref(), Some("1"));
        assert_eq!(set("max_db_connections").as_deref(), Some("8"));
        assert_eq!(set("server_lifetime").as_deref(), Some("100"));
        assert_eq!(set("query_timeout").as_deref(), Some("5"));
        assert_eq!(set("max_user_connections").as_deref(), Some("4"));
        // Another user: the database's settings.
        let (s, y) = spec(src, who("web"));
        assert_eq!(
            (s.pool_mode, s.default_pool_size),
            (PoolMode::Transaction, 10)
        );
        assert!(
            y.contains("# user under test: web (not in [users]: the database's settings)"),
            "{y}"
        );
        assert!(
            y.contains("# dropped [users] migrator: not the user under test"),
            "{y}"
        );
    }

    /// `connect_query` changes what a server holds before a client sees it: refused unless
    /// acknowledged; server parameters are dropped with their reason; entries are read as
    /// PgBouncer reads them, and their errors name the line and column.
    #[test]
    fn entries_are_read_as_pgbouncer_reads_them() {
        let cq = "[pgbouncer]\n[databases]\napp = host=x connect_query='SELECT 1' timezone=UTC\n";
        let (l, c, m) = err(cq, Select::default());
        assert_eq!((l, c), (3, 14), "{m}");
        assert!(m.contains("--drop connect_query"), "{m}");
        let drop = ["connect_query".to_string()];
        let i = import(
            cq,
            Select {
                drop: &drop,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            i.dropped
                .iter()
                .any(|d| d.contains("connect_query (value not shown)")),
            "{:?}",
            i.dropped
        );
        assert!(
            i.dropped
                .iter()
                .any(|d| d.contains("timezone=\"UTC\": a server parameter")),
            "{:?}",
            i.dropped
        );
        let cases: &[(&str, usize, usize, &str)] = &[
            ("app = host", 3, 7, "expected `key=value`"),
            (
                "app = host=x pool_sizee=3",
                3,
                14,
                "unknown connection parameter `pool_sizee`",
            ),
            (
                "app = host=x pool_size=0",
                3,
                24,
                "expected an integer from 1 to 10000",
            ),
            ("app = pool_mode=statement", 3, 17, "not modelled"),
            ("app = pool_mode=transction", 3, 17, "unknown pool_mode"),
            ("app = application_name='a b", 3, 24, "no closing"),
            (
                "app = host=x max_db_connections=lots",
                3,
                33,
                "max_db_connections",
            ),
        ];
        for (line, l, c, what) in cases {
            let src = format!("[pgbouncer]\n[databases]\n{line}\n");
            let (el, ec, m) = err(&src, Select::default());
            assert_eq!((el, ec), (*l, *c), "{line}: {m}");
            assert!(m.contains(what), "{line}: {m}");
        }
        // Quoted values ('' for a quote) and quoted names, as PgBouncer reads them; neither
        // reaches the YAML unescaped.
        let q = "[pgbouncer]\n[databases]\n\"my \"\"db\"\"\" = application_name='a b'' c' pool_mode=transaction\n";
        let (s, y) = spec(q, Select::default());
        assert_eq!(s.pool_mode, PoolMode::Transaction);
        assert!(
            y.contains("# database under test: \"my \\\"db\\\"\" (line 3"),
            "{y}"
        );
    }
}
