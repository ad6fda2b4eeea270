//! PgBouncer's topology section (`pgbouncer:`, docs/topology.md): its keys and defaults, its
//! settings checked against the `[pgbouncer]` section by release, and the checks that need
//! the rest of the topology (the client limit against `workload.clients`, the pool against
//! what PostgreSQL has room for), each reported at its line and column.

use super::settings::{
    PGBOUNCER_HARNESS_SETTINGS, PGBOUNCER_SETTINGS, PGBOUNCER_TIMEOUTS, is_timeout,
    pgbouncer_seconds, pgbouncer_setting,
};
use crate::pooler::PoolMode;
use crate::topology::{
    Location, PoolerConfig, PoolerSection, PoolerSpec, Room, Section, SettingEntry, TopologyError,
};
use crate::vocab::Op;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The section's keys.
pub const KEYS: &[&str] = &[
    "version",
    "binary",
    "pool_mode",
    "default_pool_size",
    "max_client_conn",
    "server_reset_query",
    "server_reset_query_always",
    "settings",
];

pub const DEFAULT_POOL_SIZE: u32 = 2;
pub const DEFAULT_MAX_CLIENT_CONN: u32 = 100;
pub const DEFAULT_SERVER_RESET_QUERY: &str = "DISCARD ALL";

/// The faults of the servers PgBouncer has: every one that needs a pooler (its admin
/// console's, its process's and host's, and the link behind it), read off the fault table.
pub static FAULTS: std::sync::LazyLock<Vec<Op>> = std::sync::LazyLock::new(|| {
    Op::FAULTS
        .into_iter()
        .filter(|op| crate::vocab::fault::meaning(*op).is_some_and(|m| m.needs_pooler))
        .collect()
});

/// PgBouncer's pooling configuration, as the topology declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgbouncerSpec {
    /// The declared version's numbers (settings are checked against it).
    pub version: String,
    pub pool_mode: PoolMode,
    pub default_pool_size: u32,
    pub max_client_conn: u32,
    /// `""` means no reset query.
    pub server_reset_query: String,
    pub server_reset_query_always: bool,
    /// Further `pgbouncer.ini` settings, values rendered to strings (booleans as `1`/`0`).
    pub settings: BTreeMap<String, String>,
}

impl PoolerConfig for PgbouncerSpec {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same(&self, other: &dyn PoolerConfig) -> bool {
        other.as_any().downcast_ref::<PgbouncerSpec>() == Some(self)
    }

    fn faults(&self) -> &'static [Op] {
        &FAULTS
    }

    fn postgres_faults_modelled(&self) -> bool {
        true
    }

    fn timeouts(&self) -> Vec<(crate::vocab::timeout::Effect, u64)> {
        PGBOUNCER_TIMEOUTS
            .iter()
            .filter_map(|t| {
                let v = self
                    .settings
                    .get(t.name)
                    .and_then(|v| pgbouncer_seconds(v))?;
                Some((t.effect, (v * 1000.0).round() as u64))
            })
            .collect()
    }

    fn build(&self, topology_name: &str) -> Box<dyn Any> {
        let p: Arc<dyn crate::pooler::Pooler> =
            Arc::new(super::PgBouncer::new(topology_name, self.clone()));
        Box::new(p)
    }
}

/// The `pgbouncer:` section.
pub struct PgbouncerSection;

impl PoolerSection for PgbouncerSection {
    fn key(&self) -> &'static str {
        "pgbouncer"
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn unknown_key_hint(&self, key: &str) -> Option<String> {
        pgbouncer_setting(key).map(|_| {
            format!("`{key}` is a pgbouncer.ini setting: put it under `pgbouncer.settings`")
        })
    }

    fn parse(&self, s: &Section<'_>, room: &Room) -> Result<PoolerSpec, TopologyError> {
        let (version, parts) = s.version("version", 3, "1.25.2")?;
        s.require("pool_mode", "pool_mode: transaction")?;
        let target = (parts[0], parts[1]);
        let binary = s.path("binary")?;
        let modes: Vec<(&str, PoolMode)> = PoolMode::ALL.iter().map(|m| (m.as_str(), *m)).collect();
        let pool_mode = s
            .keyword("pool_mode", &modes, "pool modes")?
            .expect("required");
        if pool_mode == PoolMode::Statement {
            return Err(s.error(
                s.at("pool_mode"),
                "`pool_mode: statement` is not modelled yet",
                vec![
                    "in statement mode PgBouncer closes the client and its server when a statement leaves a transaction open; the model does not predict that yet, and a run would report pgchaos's ignorance as pg.* violations".into(),
                    "use session or transaction".into(),
                ],
            ));
        }
        let default_pool_size = s.u32_or("default_pool_size", 1, 10_000, DEFAULT_POOL_SIZE)?;
        let max_client_conn = s.u32_or("max_client_conn", 1, 100_000, DEFAULT_MAX_CLIENT_CONN)?;
        let server_reset_query = s.line_or(
            "server_reset_query",
            DEFAULT_SERVER_RESET_QUERY,
            "write `\"\"` for no reset query, or remove the key for `DISCARD ALL`",
        )?;
        let server_reset_query_always = s.bool_or("server_reset_query_always", false)?;
        let settings = s.settings("settings", ("1", "0"), |name| {
            check_setting(name, target, &version)
        })?;
        for e in &settings {
            if is_timeout(&e.name) && pgbouncer_seconds(&e.value).is_none() {
                return Err(s.error(
                    e.value_at,
                    format!(
                        "`pgbouncer.settings.{}` is not a duration: `{}`",
                        e.name, e.value
                    ),
                    vec!["a bare number is seconds; 0 is off".into()],
                ));
            }
        }

        // The clients must fit, and so must the pool in PostgreSQL.
        check_clients(s, room, max_client_conn)?;
        check_pool(s, room, default_pool_size, &settings)?;

        let spec = PgbouncerSpec {
            version: version.clone(),
            pool_mode,
            default_pool_size,
            max_client_conn,
            server_reset_query,
            server_reset_query_always,
            settings: settings.into_iter().map(|e| (e.name, e.value)).collect(),
        };
        Ok(PoolerSpec {
            kind: "pgbouncer",
            version,
            binary,
            replicas: 1,
            config: Arc::new(spec),
        })
    }
}

/// Whether `pgbouncer.settings` may hold `name` for the declared release (`target`: its major
/// and minor numbers; `version`: as declared): a setting of pgbouncer.ini's `[pgbouncer]`
/// section, not one the harness sets itself, and known to that release. The error: message
/// and hints.
fn check_setting(
    name: &str,
    target: (u32, u32),
    version: &str,
) -> Result<(), (String, Vec<String>)> {
    if let Some((_, why)) = PGBOUNCER_HARNESS_SETTINGS.iter().find(|(n, _)| *n == name) {
        return Err((
            format!("`{name}` cannot be set in `pgbouncer.settings`"),
            vec![why.to_string()],
        ));
    }
    match pgbouncer_setting(name) {
        None => {
            let mut hints = Vec::new();
            let close = crate::topology::close_matches(
                name,
                PGBOUNCER_SETTINGS
                    .iter()
                    .map(|(n, _)| *n)
                    .filter(|n| !PGBOUNCER_HARNESS_SETTINGS.iter().any(|(h, _)| h == n)),
            );
            if !close.is_empty() {
                hints.push(crate::topology::did_you_mean(&close));
            }
            hints.push(
                "valid names are the [pgbouncer] section settings of pgbouncer.ini(5) for PgBouncer 1.25"
                    .into(),
            );
            Err((format!("unknown pgbouncer setting `{name}`"), hints))
        }
        Some(Some(since)) if target < since => Err((
            format!(
                "`{name}` needs pgbouncer {}.{} or newer, but `pgbouncer.version` is {version}",
                since.0, since.1
            ),
            vec!["remove the setting, or target a newer pgbouncer".into()],
        )),
        Some(_) => Ok(()),
    }
}

/// The clients must fit: `max_client_conn` is at least the clients each replica serves.
fn check_clients(s: &Section<'_>, room: &Room, max_client_conn: u32) -> Result<(), TopologyError> {
    if max_client_conn < room.clients {
        return Err(s.error(
            s.at("max_client_conn"),
            if room.replicas > 1 {
                format!(
                    "`pgbouncer.max_client_conn` ({max_client_conn}) is below the {} clients each of its {} replicas serves",
                    room.clients, room.replicas
                )
            } else {
                format!(
                    "`pgbouncer.max_client_conn` ({max_client_conn}) is below `workload.clients` ({})",
                    room.clients
                )
            },
            vec![format!(
                "raise max_client_conn to at least {}, or lower workload.clients",
                room.clients
            )],
        ));
    }
    Ok(())
}

/// A `pgbouncer.settings` entry the pool's size counts (`reserve_pool_size`,
/// `min_pool_size`): its value, a non-negative integer, and where it is; `None` when unset.
fn int_setting(
    s: &Section<'_>,
    settings: &[SettingEntry],
    name: &str,
) -> Result<Option<(i64, Location)>, TopologyError> {
    let Some(e) = settings.iter().find(|e| e.name == name) else {
        return Ok(None);
    };
    match e.value.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some((n, e.value_at))),
        _ => Err(s.error(
            e.value_at,
            format!(
                "`pgbouncer.settings.{name}` must be a non-negative integer, found `{}`",
                e.value
            ),
            vec![format!(
                "the harness uses `{name}` to check that the connections fit"
            )],
        )),
    }
}

/// The pool must fit in PostgreSQL: default_pool_size + reserve_pool_size + min_pool_size,
/// times the replicas, is at most the connections PostgreSQL has room for.
fn check_pool(
    s: &Section<'_>,
    room: &Room,
    default_pool_size: u32,
    settings: &[SettingEntry],
) -> Result<(), TopologyError> {
    let reserve = int_setting(s, settings, "reserve_pool_size")?;
    let min_pool = int_setting(s, settings, "min_pool_size")?;
    let pool = (i64::from(default_pool_size)
        + reserve.map_or(0, |(n, _)| n)
        + min_pool.map_or(0, |(n, _)| n))
        * i64::from(room.replicas);
    if pool > room.available {
        let loc = if s.given("default_pool_size") {
            s.at("default_pool_size")
        } else if let Some(l) = room.max_connections_at {
            l
        } else if let Some((_, l)) = reserve.or(min_pool) {
            l
        } else {
            s.start()
        };
        return Err(s.error(
            loc,
            format!(
                "the pool needs {pool} server connections but PostgreSQL has room for {}",
                room.available
            ),
            vec![
                format!(
                    "pool = {}default_pool_size {default_pool_size}{}{}{}",
                    if room.replicas > 1 { "(" } else { "" },
                    reserve.map_or(String::new(), |(n, _)| format!(" + reserve_pool_size {n}")),
                    min_pool.map_or(String::new(), |(n, _)| format!(" + min_pool_size {n}")),
                    if room.replicas > 1 {
                        format!(") x {} replicas", room.replicas)
                    } else {
                        String::new()
                    },
                ),
                format!("room = {}", room.budget),
                "lower the pool, or raise `postgres.settings.max_connections`".into(),
            ],
        ));
    }
    Ok(())
}

#[cfg(test)]
mod fault_tests {
    use super::*;

    #[test]
    fn pgbouncer_has_every_fault_of_a_pooler_and_none_of_postgres_alone() {
        let mut got: Vec<String> = FAULTS.iter().map(|o| o.name().to_string()).collect();
        got.sort();
        let mut want: Vec<&str> = vec![
            "pooler_pause",
            "pooler_reconnect",
            "pooler_kill",
            "pooler_reload",
            "pooler_restart",
            "pooler_crash",
            "pooler_freeze",
            "link_cut",
            "link_blackhole",
            "link_delay",
            "host_freeze_pooler",
            "host_kill_pooler",
            "host_restart_pooler",
            "partition_pooler_postgres",
            "partition_clients_pooler",
        ];
        want.sort();
        assert_eq!(got, want);
    }
}
