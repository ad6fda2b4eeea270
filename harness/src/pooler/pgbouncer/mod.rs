//! PgBouncer, all of it in this folder: its topology section (`section.rs`, its settings
//! table `settings.rs`), how it is obtained (`provision.rs`), its files (`config.rs`:
//! `pgbouncer.ini`, HBA, auth, and the settings it must run with compared with `SHOW CONFIG`
//! in its own formats), its admin console (`console.rs`: commands, faults, the reset) and its
//! view of the connections in common words (`view.rs`), the import of a team's
//! `pgbouncer.ini` (`import.rs`, the topology it writes: `import_yaml.rs`), its container
//! (`entrypoint.sh`), and here its pooling rules (read from PgBouncer 1.25's source: a server
//! is released on ReadyForQuery 'I'; the reset query runs on release only in session mode or
//! with `server_reset_query_always`; a client that leaves mid-transaction gets its server
//! closed).

pub mod config;
pub mod console;
pub mod import;
mod import_yaml;
pub mod pools;
pub mod provision;
pub mod section;
pub mod settings;
pub mod view;

use super::{ConfigContext, ConfigDifference, ConfigFile, ExpectedSetting, PoolRules, Pooler};
use config::{compare_config, expected_config, hba, userlist};
pub use console::{ADMIN_DB, Console, RELOAD, SHOW_CONFIG, kill, pause, reconnect, resume};
pub use section::PgbouncerSpec;

/// PgBouncer as a kind of pooler (`pooler::KINDS`).
pub struct PgBouncerKind;

pub const PGBOUNCER: PgBouncerKind = PgBouncerKind;

impl super::Kind for PgBouncerKind {
    fn section(&self) -> &'static dyn crate::topology::PoolerSection {
        &section::PgbouncerSection
    }
    fn display_name(&self) -> &'static str {
        "PgBouncer"
    }
    fn file_kind(&self) -> &'static str {
        "pgbouncer.ini"
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

pub struct PgBouncer {
    topology_name: String,
    spec: PgbouncerSpec,
}

impl PgBouncer {
    pub fn new(topology_name: &str, spec: PgbouncerSpec) -> PgBouncer {
        PgBouncer {
            topology_name: topology_name.to_string(),
            spec,
        }
    }

    /// `max_prepared_statements` > 0: the topology's value, else the version's default (200
    /// from 1.22, 0 before; `SHOW CONFIG` of 1.24.1, docs/session-state.md).
    pub fn tracks_prepared(&self) -> bool {
        match self.spec.settings.get("max_prepared_statements") {
            Some(v) => v.trim().parse::<u64>().is_ok_and(|n| n > 0),
            None => config::default_max_prepared_statements(&self.spec.version) > 0,
        }
    }

    /// The settings of `vocab::setting` PgBouncer restores per client: those named in
    /// `track_extra_parameters` (1.20+; its default, `IntervalStyle`, names none of them) that
    /// PostgreSQL reports. PgBouncer takes any name, and one PostgreSQL does not report is
    /// never restored (`role` and `lock_timeout` listed still leak: docs/session-state.md,
    /// "Settings a pooler tracks").
    pub fn tracked_settings(&self) -> Vec<crate::vocab::Guc> {
        let listed = self
            .spec
            .settings
            .get("track_extra_parameters")
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_default();
        let names: Vec<&str> = listed.split(',').map(str::trim).collect();
        crate::vocab::setting::GUCS
            .iter()
            .filter(|r| r.reported && names.contains(&r.name))
            .map(|r| r.guc)
            .collect()
    }

    /// `pgbouncer.ini` for this run (see [`config::ini`]).
    pub fn ini(&self, cx: &ConfigContext) -> String {
        config::ini(&self.topology_name, &self.spec, cx)
    }
}

impl Pooler for PgBouncer {
    fn name(&self) -> &'static str {
        "pgbouncer"
    }

    fn display_name(&self) -> &'static str {
        "PgBouncer"
    }

    fn log_file(&self) -> &'static str {
        "pgbouncer.log"
    }

    fn console<'a>(
        &'a self,
        at: &'a super::ConsoleAt,
    ) -> super::BoxFuture<'a, anyhow::Result<Box<dyn super::Console>>> {
        Box::pin(async move {
            let client = super::connect_pg(&at.pg_config(ADMIN_DB)).await?;
            Ok(Box::new(Console {
                client,
                user: at.pool_user.clone(),
            }) as Box<dyn super::Console>)
        })
    }

    fn has_console(&self) -> bool {
        true
    }

    fn settings_source(&self) -> &'static str {
        SHOW_CONFIG
    }

    fn reload_commands(&self) -> Vec<String> {
        vec![RELOAD.to_string()]
    }

    fn container(&self) -> Option<super::ContainerRecipe> {
        Some(super::ContainerRecipe {
            repo: "pgchaos/pgbouncer",
            files: |exe| {
                Ok(super::ImageFiles::executable(
                    "usr/local/bin/pgbouncer",
                    exe,
                ))
            },
            user: "pgbouncer",
            home: "/var/lib/pgbouncer",
            entrypoint: include_str!("entrypoint.sh"),
            config_dir: "/etc/pgbouncer",
            port: 6432,
            admin_port: None,
        })
    }

    fn console_fault(&self, op: crate::vocab::Op, db: &str) -> Option<super::ConsoleFault> {
        use crate::vocab::Op;
        let f = |start: Vec<String>, heal: Option<Vec<String>>| super::ConsoleFault { start, heal };
        Some(match op {
            // PAUSE returns once every server is released and closed; RESUME after the hold.
            Op::PoolerPause => f(vec![pause(db)], Some(vec![resume(db)])),
            Op::PoolerReconnect => f(vec![reconnect(db)], None),
            // KILL, then RESUME at once: clients arriving in between wait for it.
            Op::PoolerKill => f(vec![kill(db), resume(db)], None),
            Op::PoolerReload => f(vec![RELOAD.to_string()], None),
            _ => return None,
        })
    }

    fn provision(
        &self,
        spec: &crate::topology::PoolerSpec,
        opts: &crate::provision::Options,
    ) -> anyhow::Result<crate::provision::PoolerBinary> {
        provision::pgbouncer(&spec.version, spec.binary.as_deref(), opts)
    }

    fn rules(&self) -> PoolRules {
        let q = self.spec.server_reset_query.to_ascii_lowercase();
        PoolRules {
            mode: Some(self.spec.pool_mode),
            pool_size: self.spec.default_pool_size as usize,
            reset_releases_locks: q.contains("discard all") || q.contains("pg_advisory_unlock_all"),
            // DISCARD ALL runs RESET ALL (docs/session-state.md).
            reset_clears_settings: q.contains("discard all") || q.contains("reset all"),
            // RESET ALL keeps the role (docs/session-state.md, "SET ROLE and search_path").
            reset_clears_role: crate::pooler::reset_clears_role(&q),
            // DISCARD ALL deallocates, closes and drops temporary tables
            // (docs/session-state.md, "Named objects").
            reset_clears_objects: q.contains("discard all"),
            tracks_prepared: self.tracks_prepared(),
            tracked_settings: self.tracked_settings(),
            // DISCARD ALL runs UNLISTEN * (docs/session-state.md).
            reset_unlistens: q.contains("discard all") || q.contains("unlisten"),
            reset_always: self.spec.server_reset_query_always,
            abort_on_disconnect: false,
            links_at_connect: false,
            // 1.24.1 and 1.25.2 close a server its client leaves with a reply still in flight
            // (docs/session-state.md, "Replies out of step"; docs/pgbouncer-1-25.md).
            closes_server_in_flight: true,
            // SIGINT is its safe shutdown (`vocab::fault::Meaning::drains`).
            restart_drains: true,
            // `server_login_retry` (docs/faults.md, measured on 1.24.1 and 1.25.2).
            login_failure_sticks: true,
            app_pin: None,
            replicas: 1,
        }
    }

    fn config_files(&self, cx: &ConfigContext) -> Option<Vec<ConfigFile>> {
        Some(vec![
            ConfigFile {
                name: "pgbouncer.ini",
                text: self.ini(cx),
                is_main: true,
            },
            ConfigFile {
                name: "pgbouncer_hba.conf",
                text: hba(),
                is_main: false,
            },
            ConfigFile {
                name: "userlist.txt",
                text: userlist(cx.passwords),
                is_main: false,
            },
        ])
    }

    fn admin_database(&self) -> Option<&'static str> {
        Some(ADMIN_DB)
    }

    fn reset_commands(&self, db: &str) -> Vec<String> {
        vec![kill(db), resume(db)]
    }

    fn expected_config(&self) -> Vec<ExpectedSetting> {
        expected_config(&self.spec)
    }

    fn config_differences(&self, running: &[(String, String)]) -> Vec<ConfigDifference> {
        compare_config(&self.expected_config(), running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pooler::PoolMode;
    use std::collections::BTreeMap;

    /// A transaction-mode section with `reset` as its reset query (the folder's tests share it).
    pub(super) fn spec(reset: &str) -> PgbouncerSpec {
        PgbouncerSpec {
            version: "1.25.2".into(),
            pool_mode: PoolMode::Transaction,
            default_pool_size: 2,
            max_client_conn: 50,
            server_reset_query: reset.into(),
            server_reset_query_always: false,
            settings: BTreeMap::from([("server_lifetime".to_string(), "3600".to_string())]),
        }
    }

    #[test]
    fn only_a_releasing_reset_query_releases_locks() {
        assert!(
            PgBouncer::new("t", spec("DISCARD ALL"))
                .rules()
                .reset_releases_locks
        );
        assert!(
            PgBouncer::new("t", spec("SELECT pg_advisory_unlock_all()"))
                .rules()
                .reset_releases_locks
        );
        assert!(!PgBouncer::new("t", spec("")).rules().reset_releases_locks);
        assert!(
            !PgBouncer::new("t", spec("RESET ALL"))
                .rules()
                .reset_releases_locks
        );
    }

    #[test]
    fn discard_all_and_reset_all_clear_settings() {
        let clears = |q: &str| PgBouncer::new("t", spec(q)).rules().reset_clears_settings;
        assert!(clears("DISCARD ALL"));
        assert!(clears("RESET ALL"));
        assert!(!clears(""));
        assert!(!clears("SELECT pg_advisory_unlock_all()"));
        let objects = |q: &str| PgBouncer::new("t", spec(q)).rules().reset_clears_objects;
        assert!(objects("DISCARD ALL"));
        assert!(!objects("RESET ALL"));
    }

    #[test]
    fn only_reported_settings_named_in_track_extra_parameters_are_tracked() {
        use crate::vocab::Guc;
        let tracked = |v: Option<&str>| {
            let mut s = spec("");
            if let Some(v) = v {
                s.settings.insert("track_extra_parameters".into(), v.into());
            }
            PgBouncer::new("t", s).rules().tracked_settings
        };
        assert_eq!(
            tracked(None),
            vec![],
            "the default, IntervalStyle, names none"
        );
        assert_eq!(tracked(Some("search_path")), vec![Guc::SearchPath]);
        assert_eq!(
            tracked(Some("IntervalStyle, Search_Path ,role,lock_timeout")),
            vec![Guc::SearchPath],
            "role and lock_timeout are not reported: listed, they still leak"
        );
        assert_eq!(tracked(Some("search_pathx")), vec![]);
    }

    #[test]
    fn prepared_statements_are_tracked_when_max_prepared_statements_is_positive() {
        let with = |version: &str, v: Option<&str>| {
            let mut s = spec("DISCARD ALL");
            s.version = version.into();
            if let Some(v) = v {
                s.settings
                    .insert("max_prepared_statements".into(), v.into());
            }
            PgBouncer::new("t", s).rules().tracks_prepared
        };
        assert!(!with("1.24.1", Some("0")));
        assert!(with("1.24.1", Some("100")));
        assert!(with("1.24.1", None), "200 by default since 1.22");
        assert!(!with("1.21.0", None));
    }

    #[test]
    fn discard_all_and_unlisten_end_listens() {
        let unlistens = |q: &str| PgBouncer::new("t", spec(q)).rules().reset_unlistens;
        assert!(unlistens("DISCARD ALL"));
        assert!(unlistens("UNLISTEN *"));
        assert!(!unlistens("RESET ALL"));
        assert!(!unlistens(""));
    }
}
