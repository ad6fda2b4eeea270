//! pgpool-II's topology section (`pgpool:`, docs/pgpool.md): its keys and defaults, and the
//! checks that need the rest of the topology (the children's servers against what PostgreSQL
//! has room for), each reported at its line and column. What pgchaos cannot model yet is
//! refused here with the reason (`connection_cache: false`, load balancing without a standby,
//! function lists that would route a lock call to the standby).

use crate::topology::{PoolerConfig, PoolerSection, PoolerSpec, Room, Section, TopologyError};
use crate::vocab::Op;
use std::any::Any;
use std::sync::Arc;

/// The section's keys.
pub const KEYS: &[&str] = &[
    "version",
    "binary",
    "num_init_children",
    "max_pool",
    "reset_query_list",
    "connection_cache",
    "child_life_time",
    "connection_life_time",
    "load_balance_mode",
    "write_function_list",
    "read_only_function_list",
];

/// The release provisioned from Debian 12's binary packages (docs/pgpool.md §1).
pub const DEFAULT_VERSION: &str = "4.3.5";
pub const DEFAULT_NUM_INIT_CHILDREN: u32 = 4;
pub const DEFAULT_MAX_POOL: u32 = 1;
/// pgpool-II's own default (`reset_query_list`).
pub const DEFAULT_RESET_QUERY_LIST: &str = "ABORT; DISCARD ALL";

/// The faults of the servers pgpool-II has here: none of its console's or process's yet
/// (its SIGKILLed main leaves the children serving, which no fault meaning says; docs/pgpool.md
/// §10). The faults that need no pooler (PostgreSQL's, `terminate`) apply as always.
pub const FAULTS: &[Op] = &[];

/// pgpool-II's pooling configuration, as the topology declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgpoolSpec {
    pub version: String,
    /// Children: each serves one client at a time and caches one server per (user, database).
    pub num_init_children: u32,
    /// Cached connections per child.
    pub max_pool: u32,
    /// Run on every node when a client leaves (`ABORT` only inside a transaction).
    pub reset_query_list: String,
    /// Seconds an idle child that has served lives (0: forever).
    pub child_life_time: u32,
    /// Seconds a cached connection lives after its last client left (0: forever).
    pub connection_life_time: u32,
    /// Load balancing over the primary and the topology's streaming standby (with both
    /// function lists empty: every advisory lock function is volatile, so a lock call goes to
    /// the primary; docs/pgpool.md §7 LB1, §17).
    pub load_balance_mode: bool,
}

impl PoolerConfig for PgpoolSpec {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same(&self, other: &dyn PoolerConfig) -> bool {
        other.as_any().downcast_ref::<PgpoolSpec>() == Some(self)
    }

    fn faults(&self) -> &'static [Op] {
        FAULTS
    }

    /// Not modelled: with 4.3.5's defaults a backend that ends under a client fails the node
    /// over (`failover_on_backend_shutdown`, docs/pgpool.md "K-terminate-backend").
    fn postgres_faults_modelled(&self) -> bool {
        false
    }

    fn timeouts(&self) -> Vec<(crate::vocab::timeout::Effect, u64)> {
        // Both close an idle cached server some seconds after its last client left: the
        // model's "retire an idle server" timer, at the shorter of the two.
        [self.child_life_time, self.connection_life_time]
            .into_iter()
            .filter(|s| *s > 0)
            .min()
            .map(|s| {
                vec![(
                    crate::vocab::timeout::Effect::RetireIdle,
                    u64::from(s) * 1000,
                )]
            })
            .unwrap_or_default()
    }

    fn build(&self, topology_name: &str) -> Box<dyn Any> {
        let p: Arc<dyn crate::pooler::Pooler> =
            Arc::new(super::Pgpool::new(topology_name, self.clone()));
        Box::new(p)
    }
}

/// The `pgpool:` section.
pub struct PgpoolSection;

impl PoolerSection for PgpoolSection {
    fn key(&self) -> &'static str {
        "pgpool"
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn parse(&self, s: &Section<'_>, room: &Room) -> Result<PoolerSpec, TopologyError> {
        let (version, _) = s.version("version", 3, DEFAULT_VERSION)?;
        let binary = s.path("binary")?;
        let num_init_children =
            s.u32_or("num_init_children", 1, 1000, DEFAULT_NUM_INIT_CHILDREN)?;
        let max_pool = s.u32_or("max_pool", 1, 100, DEFAULT_MAX_POOL)?;
        let reset_query_list = s.line_or(
            "reset_query_list",
            DEFAULT_RESET_QUERY_LIST,
            "a `;`-separated list such as 'ABORT; DISCARD ALL', or remove the key for that default",
        )?;
        if !s.bool_or("connection_cache", true)? {
            return Err(s.error(
                s.at("connection_cache"),
                "`pgpool.connection_cache: false` is not modelled yet",
                vec![
                    "without the cache every client's backend exits when it leaves; the model does not predict that yet".into(),
                    "remove the key (pgpool-II's default is on)".into(),
                ],
            ));
        }
        let load_balance_mode = s.bool_or("load_balance_mode", false)?;
        if load_balance_mode && !room.standby {
            return Err(s.error(
                s.at("load_balance_mode"),
                "`pgpool.load_balance_mode: true` needs a standby to balance over",
                vec![
                    "set `postgres.standby: true` (pgpool-II then has the primary and the standby as backends)".into(),
                    "or remove the key (one backend: nothing to balance)".into(),
                ],
            ));
        }
        for list in ["write_function_list", "read_only_function_list"] {
            let v = s.line_or(list, "", "a `,`-separated list of function names")?;
            if !v.trim().is_empty() {
                return Err(s.error(
                    s.at(list),
                    format!("`pgpool.{list}` other than empty is not modelled yet"),
                    vec![
                        "with such a list pgpool-II sends an application's `SELECT pg_try_advisory_lock(k)` to the standby, where it locks nothing on the primary (docs/pgpool.md §7 LB2, LB3)".into(),
                        "but the harness's own statements begin with a tag comment, which pgpool-II never balances (`allow_sql_comments = off`), and the model keeps one lock table: a run would not see it (docs/pgpool.md §17)".into(),
                        "remove the key (both lists empty: every advisory lock function goes to the primary)".into(),
                    ],
                ));
            }
        }
        if room.replicas > 1 {
            return Err(s.error(
                s.at("replicas"),
                "replicas of pgpool-II are not supported yet",
                vec!["each replica would need its own PCP port; use one".into()],
            ));
        }
        let child_life_time = s.u32_or("child_life_time", 0, 86_400, 0)?;
        let connection_life_time = s.u32_or("connection_life_time", 0, 86_400, 0)?;

        // Every child may cache a server (one per user and database: the harness has one).
        let pool = i64::from(num_init_children);
        if pool > room.available {
            let loc = if s.given("num_init_children") {
                s.at("num_init_children")
            } else if let Some(l) = room.max_connections_at {
                l
            } else {
                s.start()
            };
            return Err(s.error(
                loc,
                format!(
                    "pgpool's {num_init_children} children need up to {pool} server connections but PostgreSQL has room for {}",
                    room.available
                ),
                vec![
                    format!("room = {}", room.budget),
                    "lower `pgpool.num_init_children`, or raise `postgres.settings.max_connections`"
                        .into(),
                ],
            ));
        }

        let spec = PgpoolSpec {
            version: version.clone(),
            num_init_children,
            max_pool,
            reset_query_list,
            child_life_time,
            connection_life_time,
            load_balance_mode,
        };
        Ok(PoolerSpec {
            kind: "pgpool",
            version,
            binary,
            replicas: 1,
            config: Arc::new(spec),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;
    use std::path::Path;

    fn parse(standby: bool, pgpool: &str) -> Result<Topology, TopologyError> {
        let y = format!(
            "name: t\npostgres:\n  version: \"18.6\"\n  standby: {standby}\npgpool:\n  version: \"4.3.5\"\n{pgpool}"
        );
        Topology::parse(&y, Path::new("t.yaml"), &crate::catalog())
    }

    #[test]
    fn load_balancing_needs_the_standby_and_empty_function_lists() {
        let t = parse(true, "  load_balance_mode: true\n").unwrap();
        let p = t.pooler.as_ref().unwrap().config::<PgpoolSpec>().unwrap();
        assert!(p.load_balance_mode);
        let e = parse(false, "  load_balance_mode: true\n").unwrap_err();
        assert_eq!((e.line(), e.column()), (Some(7), Some(22)), "{e}");
        assert!(e.message().contains("needs a standby"), "{e}");
        let e = parse(
            true,
            "  load_balance_mode: true\n  write_function_list: \"nextval,setval\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line(), Some(8), "{e}");
        assert!(e.message().contains("not modelled yet"), "{e}");
        assert!(e.hints().iter().any(|h| h.contains("§17")), "{e}");
        // Empty lists are pgpool-II's defaults, and accepted.
        parse(
            true,
            "  load_balance_mode: true\n  read_only_function_list: \"\"\n",
        )
        .unwrap();
    }
}
