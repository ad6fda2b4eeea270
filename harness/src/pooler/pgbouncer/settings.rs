//! PgBouncer's settings: the `[pgbouncer]` settings of `pgbouncer.ini` by release (what a
//! topology's `pgbouncer.settings` may name), those the harness sets itself (refused, the
//! reason the hint), and the timers among them the model knows.

use crate::vocab::timeout::{Effect, Timeout, find, t};

/// `pgbouncer.ini` settings the harness sets itself (the reason is the hint).
pub const PGBOUNCER_HARNESS_SETTINGS: &[(&str, &str)] = &[
    (
        "listen_addr",
        "the harness picks the address pgbouncer listens on",
    ),
    (
        "listen_port",
        "the harness picks the port pgbouncer listens on",
    ),
    (
        "unix_socket_dir",
        "the harness picks pgbouncer's socket directory",
    ),
    ("auth_file", "the harness configures authentication"),
    ("auth_type", "the harness configures authentication"),
    ("auth_user", "the harness configures authentication"),
    ("admin_users", "the harness uses the admin console itself"),
    ("stats_users", "the harness uses the admin console itself"),
    ("logfile", "the harness captures pgbouncer's log"),
    ("pidfile", "the harness manages pgbouncer's process"),
    ("conffile", "the harness writes pgbouncer.ini itself"),
    ("pool_mode", "use the top-level key `pgbouncer.pool_mode`"),
    (
        "default_pool_size",
        "use the top-level key `pgbouncer.default_pool_size`",
    ),
    (
        "max_client_conn",
        "use the top-level key `pgbouncer.max_client_conn`",
    ),
    (
        "server_reset_query",
        "use the top-level key `pgbouncer.server_reset_query`",
    ),
    (
        "server_reset_query_always",
        "use the top-level key `pgbouncer.server_reset_query_always`",
    ),
];

/// The `[pgbouncer]` section of `pgbouncer.ini` in PgBouncer 1.25 (Linux build), with the
/// release that introduced the recent ones (`None`: older than 1.19).
pub const PGBOUNCER_SETTINGS: &[(&str, Option<(u32, u32)>)] = &[
    ("admin_users", None),
    ("application_name_add_host", None),
    ("auth_dbname", Some((1, 20))),
    ("auth_file", None),
    ("auth_hba_file", None),
    ("auth_ident_file", Some((1, 23))),
    ("auth_ldap_options", Some((1, 25))),
    ("auth_query", None),
    ("auth_type", None),
    ("auth_user", None),
    ("autodb_idle_timeout", None),
    ("cancel_wait_timeout", Some((1, 19))),
    ("client_idle_timeout", None),
    ("client_login_timeout", None),
    ("client_tls13_ciphers", None),
    ("client_tls_ca_file", None),
    ("client_tls_cert_file", None),
    ("client_tls_ciphers", None),
    ("client_tls_dheparams", None),
    ("client_tls_ecdhcurve", None),
    ("client_tls_key_file", None),
    ("client_tls_protocols", None),
    ("client_tls_sslmode", None),
    ("conffile", None),
    ("default_pool_size", None),
    ("disable_pqexec", None),
    ("dns_max_ttl", None),
    ("dns_nxdomain_ttl", None),
    ("dns_zone_check_period", None),
    ("idle_transaction_timeout", None),
    ("ignore_startup_parameters", None),
    ("job_name", None),
    ("listen_addr", None),
    ("listen_backlog", None),
    ("listen_port", None),
    ("log_connections", None),
    ("log_disconnections", None),
    ("log_pooler_errors", None),
    ("log_stats", None),
    ("logfile", None),
    ("max_client_conn", None),
    ("max_db_client_connections", Some((1, 24))),
    ("max_db_connections", None),
    ("max_packet_size", None),
    ("max_prepared_statements", Some((1, 21))),
    ("max_user_client_connections", Some((1, 24))),
    ("max_user_connections", None),
    ("min_pool_size", None),
    ("peer_id", Some((1, 19))),
    ("pidfile", None),
    ("pkt_buf", None),
    ("pool_mode", None),
    ("query_timeout", None),
    ("query_wait_notify", Some((1, 25))),
    ("query_wait_timeout", None),
    ("reserve_pool_size", None),
    ("reserve_pool_timeout", None),
    ("resolv_conf", None),
    ("sbuf_loopcnt", None),
    ("scram_iterations", None),
    ("server_check_delay", None),
    ("server_check_query", None),
    ("server_connect_timeout", None),
    ("server_fast_close", None),
    ("server_idle_timeout", None),
    ("server_lifetime", None),
    ("server_login_retry", None),
    ("server_reset_query", None),
    ("server_reset_query_always", None),
    ("server_round_robin", None),
    ("server_tls13_ciphers", None),
    ("server_tls_ca_file", None),
    ("server_tls_cert_file", None),
    ("server_tls_ciphers", None),
    ("server_tls_key_file", None),
    ("server_tls_protocols", None),
    ("server_tls_sslmode", None),
    ("so_reuseport", None),
    ("stats_period", None),
    ("stats_users", None),
    ("suspend_timeout", None),
    ("syslog", None),
    ("syslog_facility", None),
    ("syslog_ident", None),
    ("tcp_defer_accept", None),
    ("tcp_keepalive", None),
    ("tcp_keepcnt", None),
    ("tcp_keepidle", None),
    ("tcp_keepintvl", None),
    ("tcp_socket_buffer", None),
    ("tcp_user_timeout", None),
    ("track_extra_parameters", Some((1, 20))),
    ("transaction_timeout", Some((1, 25))),
    ("unix_socket_dir", None),
    ("unix_socket_group", None),
    ("unix_socket_mode", None),
    ("user", None),
    ("verbose", None),
];

pub fn pgbouncer_setting(name: &str) -> Option<Option<(u32, u32)>> {
    PGBOUNCER_SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, since)| *since)
}

/// PgBouncer settings that close or cancel servers and clients on a timer, and what each
/// does (`vocab::timeout::Effect`; janitor.c: `pool_server_maint`, `pool_client_maint`): the
/// model knows them, so any value is accepted, and the history records them.
pub const PGBOUNCER_TIMEOUTS: &[Timeout] = &[
    t("server_lifetime", Effect::RetireOld),
    t("server_idle_timeout", Effect::RetireIdle),
    t("client_idle_timeout", Effect::CloseIdleClient),
    t("idle_transaction_timeout", Effect::CloseIdleInTransaction),
    t("query_timeout", Effect::EndLongStatement),
    t("query_wait_timeout", Effect::EndLongWait),
    t("transaction_timeout", Effect::CloseLongTransaction),
];

/// Whether `name` is one of PgBouncer's timeouts ([`PGBOUNCER_TIMEOUTS`]).
pub fn is_timeout(name: &str) -> bool {
    find(PGBOUNCER_TIMEOUTS, name).is_some()
}

/// A PgBouncer time setting as seconds: a bare number is seconds (PgBouncer's own unit).
pub fn pgbouncer_seconds(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| *v >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::timeout::POSTGRES;

    /// Every effect the model knows belongs to one setting, PgBouncer's or PostgreSQL's
    /// (`transaction_timeout` is a name of both, with different effects).
    #[test]
    fn every_effect_belongs_to_one_setting() {
        let all: Vec<Effect> = PGBOUNCER_TIMEOUTS
            .iter()
            .chain(POSTGRES)
            .map(|t| t.effect)
            .collect();
        let mut effects = all.clone();
        effects.sort();
        effects.dedup();
        assert_eq!(effects.len(), all.len());
        assert_eq!(all.len(), 11);
        let mut names: Vec<&str> = PGBOUNCER_TIMEOUTS.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PGBOUNCER_TIMEOUTS.len());
        assert!(is_timeout("query_wait_timeout") && !is_timeout("statement_timeout"));
        // Each is a setting PgBouncer has.
        for t in PGBOUNCER_TIMEOUTS {
            assert!(
                PGBOUNCER_SETTINGS.iter().any(|(n, _)| *n == t.name),
                "{}",
                t.name
            );
        }
    }
}
