//! pgpool-II, all of it in this folder (docs/pgpool.md is its ground truth, confirmed by hand
//! on 4.3.5 and 4.6.1): its topology section (`section.rs`), how it is obtained (Debian 12's
//! binary packages unpacked into the cache, `provision.rs`), its files (`config.rs`:
//! `pgpool.conf`, `pool_hba.conf`, `pool_passwd`, `pcp.conf`), its admin console (`console.rs`:
//! PCP and `SHOW POOL_VERSION`), its view in common words (`view.rs`), the import of a
//! team's `pgpool.conf` (`import.rs`, the topology it writes: `import_yaml.rs`), and here its
//! pooling rules (§11):
//!
//! - a client is served by one child for its whole session: session pooling; each child
//!   caches one server per (user, database), so the pool is `num_init_children` servers, and
//!   which idle child (and so which cached server, or a fresh one) a client gets is not
//!   determined;
//! - a clean disconnect runs `reset_query_list` and keeps the server cached, **also inside a
//!   transaction** (`ABORT` ends it first; PgBouncer closes such a server instead): the
//!   `abort_on_disconnect` rule;
//! - the reset releases session locks only with `DISCARD ALL` (or
//!   `pg_advisory_unlock_all()`) in the list; with `ABORT` alone the next client of the child
//!   inherits them and re-enters them.
//!
//! - with `load_balance_mode` and the topology's standby, both function lists empty: every
//!   advisory lock function is volatile, so every lock call goes to the primary, and the
//!   harness's tagged statements all do (`allow_sql_comments = off`; docs/pgpool.md §7, §17):
//!   the rules above are unchanged.
//!
//! In a container (`launcher: docker`, `pgchaos compose`; docs/pgpool.md §18): the recipe
//! ([`Pooler::container`]: `pgchaos/pgpool:<version>`, what it carries from
//! `provision::image_files`, `entrypoint.sh` writing the secret files from the environment),
//! the pool and PCP ports published on loopback, and the console's container mode
//! (`console.rs`: PCP from this host, pids mapped through `/proc`).
//!
//! Not here: function lists that send lock calls to the standby (refused by the section: the
//! model keeps one lock table), faults of pgpool itself, load balancing over the standby in
//! containers (its recipe is refused: node 1 would be another host).

pub mod config;
pub mod console;
pub mod import;
mod import_yaml;
pub mod md5;
pub mod provision;
pub mod section;
pub mod view;

use super::{
    ConfigContext, ConfigDifference, ConfigFile, ExpectedSetting, PoolMode, PoolRules, Pooler,
};
pub use section::PgpoolSpec;

/// The pool port and the PCP port inside its container (pgpool-II's defaults; the entrypoint's
/// `.pcppass` names the PCP one).
pub const CONTAINER_PORT: u16 = 9999;
pub const CONTAINER_PCP_PORT: u16 = 9898;

/// pgpool-II as a kind of pooler (`pooler::KINDS`).
pub struct PgpoolKind;

pub const PGPOOL: PgpoolKind = PgpoolKind;

impl super::Kind for PgpoolKind {
    fn section(&self) -> &'static dyn crate::topology::PoolerSection {
        &section::PgpoolSection
    }
    fn display_name(&self) -> &'static str {
        "pgpool-II"
    }
    fn file_kind(&self) -> &'static str {
        "pgpool.conf"
    }
    fn recognises(&self, src: &str) -> bool {
        import::recognises(src)
    }
    fn import(
        &self,
        src: &str,
        path: &std::path::Path,
        origin: &super::Origin,
    ) -> anyhow::Result<super::Imported> {
        import::convert(src, path, origin)
    }
}

pub struct Pgpool {
    topology_name: String,
    spec: PgpoolSpec,
}

impl Pgpool {
    pub fn new(topology_name: &str, spec: PgpoolSpec) -> Pgpool {
        Pgpool {
            topology_name: topology_name.to_string(),
            spec,
        }
    }
}

/// The PCP user's password: the superuser's run password (the console is reached as the
/// superuser), or a fixed one where the run has none.
fn pcp_password<'a>(passwords: &'a [(String, String)], user: &str) -> &'a str {
    passwords
        .iter()
        .find(|(r, _)| r == user)
        .map_or("pgchaos", |(_, p)| p.as_str())
}

impl Pooler for Pgpool {
    fn name(&self) -> &'static str {
        "pgpool"
    }

    fn display_name(&self) -> &'static str {
        "pgpool-II"
    }

    fn log_file(&self) -> &'static str {
        "pgpool.log"
    }

    fn needs_admin_port(&self) -> bool {
        true
    }

    fn command_args(&self, main_config: &std::path::Path) -> Vec<std::ffi::OsString> {
        // -n: foreground (the launcher watches it); -D: discard pgpool_status, or a node once
        // detached stays detached (§2).
        let dir = main_config.parent().unwrap_or(std::path::Path::new("."));
        vec![
            "-n".into(),
            "-D".into(),
            "-f".into(),
            main_config.as_os_str().to_os_string(),
            "-F".into(),
            dir.join("pcp.conf").into_os_string(),
            "-a".into(),
            dir.join("pool_hba.conf").into_os_string(),
        ]
    }

    fn console<'a>(
        &'a self,
        at: &'a super::ConsoleAt,
    ) -> super::BoxFuture<'a, anyhow::Result<Box<dyn super::Console>>> {
        Box::pin(async move {
            let mut at = at.clone();
            if at.password.is_none() {
                at.password = Some("pgchaos".into());
            }
            Ok(Box::new(console::Console::open(&at).await?) as Box<dyn super::Console>)
        })
    }

    fn has_console(&self) -> bool {
        true
    }

    fn settings_source(&self) -> &'static str {
        console::POOL_STATUS
    }

    fn container(&self) -> Option<super::ContainerRecipe> {
        // With load balancing the standby is node 1, reached as the primary is (its socket
        // directory natively); between containers it is another host: not built.
        if self.spec.load_balance_mode {
            return None;
        }
        Some(super::ContainerRecipe {
            repo: "pgchaos/pgpool",
            files: provision::image_files,
            user: "pgpool",
            home: "/var/lib/pgpool",
            entrypoint: include_str!("entrypoint.sh"),
            config_dir: "/etc/pgpool2",
            port: CONTAINER_PORT,
            admin_port: Some(CONTAINER_PCP_PORT),
        })
    }

    fn provision(
        &self,
        spec: &crate::topology::PoolerSpec,
        opts: &crate::provision::Options,
    ) -> anyhow::Result<crate::provision::PoolerBinary> {
        provision::pgpool(&spec.version, spec.binary.as_deref(), opts)
    }

    fn rules(&self) -> PoolRules {
        let q = self.spec.reset_query_list.to_ascii_lowercase();
        PoolRules {
            mode: Some(PoolMode::Session),
            pool_size: self.spec.num_init_children as usize,
            reset_releases_locks: q.contains("discard all") || q.contains("pg_advisory_unlock_all"),
            // docs/pgpool.md §5: with `ABORT` alone C1's SET reaches C2; the default list's
            // DISCARD ALL leaves C2 the default.
            reset_clears_settings: q.contains("discard all") || q.contains("reset all"),
            // RESET ALL keeps the role (docs/session-state.md, "SET ROLE and search_path").
            reset_clears_role: crate::pooler::reset_clears_role(&q),
            reset_clears_objects: q.contains("discard all"),
            tracks_prepared: false,
            tracked_settings: vec![],
            // DISCARD ALL runs UNLISTEN * (docs/session-state.md).
            reset_unlistens: q.contains("discard all") || q.contains("unlisten"),
            reset_always: false,
            abort_on_disconnect: true,
            links_at_connect: true,
            closes_server_in_flight: false,
            // SIGINT is its fast shutdown: every backend closed at once (docs/pgpool.md,
            // "fast stop (SIGINT)").
            restart_drains: false,
            // Not measured: a topology with pgpool-II refuses PostgreSQL's faults at `check`
            // (`PoolerConfig::postgres_faults_modelled`).
            login_failure_sticks: false,
            app_pin: None,
            replicas: 1,
        }
    }

    fn config_files(&self, cx: &ConfigContext) -> Option<Vec<ConfigFile>> {
        let pcp_port = cx.admin_port.unwrap_or(0);
        let pw = pcp_password(cx.passwords, cx.superuser);
        Some(vec![
            ConfigFile {
                name: "pgpool.conf",
                text: config::pgpool_conf(&self.topology_name, &self.spec, cx),
                is_main: true,
            },
            ConfigFile {
                name: "pool_hba.conf",
                text: config::pool_hba(),
                is_main: false,
            },
            ConfigFile {
                name: "pool_passwd",
                text: config::pool_passwd(cx.passwords),
                is_main: false,
            },
            ConfigFile {
                name: "pcp.conf",
                text: config::pcp_conf(cx.superuser, pw),
                is_main: false,
            },
            ConfigFile {
                name: config::PCPPASS,
                text: config::pcppass(pcp_port, cx.superuser, pw),
                is_main: false,
            },
        ])
    }

    fn admin_database(&self) -> Option<&'static str> {
        // PCP is not a database a person reaches with psql.
        None
    }

    fn reset_commands(&self, _db: &str) -> Vec<String> {
        // Idle children close their cached servers; the observer then terminates what is
        // left (a linked server, a backend that a child will replace at its next client).
        vec![console::CLOSE_IDLE.to_string()]
    }

    fn expected_config(&self) -> Vec<ExpectedSetting> {
        config::expected_config(&self.spec)
    }

    fn config_differences(&self, running: &[(String, String)]) -> Vec<ConfigDifference> {
        config::compare_config(&self.expected_config(), running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(reset: &str) -> PgpoolSpec {
        PgpoolSpec {
            version: "4.3.5".into(),
            num_init_children: 3,
            max_pool: 1,
            reset_query_list: reset.into(),
            child_life_time: 0,
            connection_life_time: 0,
            load_balance_mode: false,
        }
    }

    #[test]
    fn session_pooling_over_the_children_and_the_reset_list_decides_the_locks() {
        let r = Pgpool::new("t", spec("ABORT; DISCARD ALL")).rules();
        assert_eq!((r.mode, r.pool_size), (Some(PoolMode::Session), 3));
        assert!(r.reset_releases_locks);
        assert!(!Pgpool::new("t", spec("ABORT")).rules().reset_releases_locks);
        // A clean disconnect inside a transaction: ABORT, and the server stays cached.
        assert_eq!(
            r.on_disconnect(true, true),
            super::super::ServerFate::Released { resets: true }
        );
    }
}
