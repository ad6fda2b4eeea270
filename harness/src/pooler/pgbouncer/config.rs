//! PgBouncer's configuration: the `pgbouncer.ini`, HBA and auth files the harness writes for
//! a run, the settings the harness relies on (what the topology declares, and PgBouncer's
//! defaults the model assumes where it declares none), and their comparison with what
//! `SHOW CONFIG` reports, in PgBouncer's own formats (`cfparser.c`, `main.c`).

use super::PgbouncerSpec;
use crate::pooler::{ConfigContext, ConfigDifference, ExpectedSetting};

/// PgBouncer's defaults for the settings the model relies on, which it assumes where a
/// topology declares none (`src/main.c` of 1.24.1 and 1.25.2 agree; 1.24 has no
/// `transaction_timeout`, which is the same as its default, 0: off). Pool sizes beyond
/// `default_pool_size`, and the timeouts that close servers or clients behind the model's back.
pub const RELIED_ON_DEFAULTS: &[(&str, &str)] = &[
    ("min_pool_size", "0"),
    ("reserve_pool_size", "0"),
    ("server_lifetime", "3600"),
    ("server_idle_timeout", "600"),
    ("idle_transaction_timeout", "0"),
    ("query_timeout", "0"),
    ("query_wait_timeout", "120"),
    ("client_idle_timeout", "0"),
    ("transaction_timeout", "0"),
];

/// The settings the harness relies on, from the topology: its `pool_mode`, pool size, client
/// limit, reset query and `server_reset_query_always`, every `pgbouncer.settings` entry, and
/// [`RELIED_ON_DEFAULTS`] for those it leaves unset. Values as `pgbouncer.ini` gets them.
pub fn expected_config(spec: &PgbouncerSpec) -> Vec<ExpectedSetting> {
    let top = |key: &str, value: String| ExpectedSetting {
        key: key.to_string(),
        value,
        declared_by: Some(format!("pgbouncer.{key}")),
    };
    let mut out = vec![
        top("pool_mode", spec.pool_mode.as_str().to_string()),
        top("default_pool_size", spec.default_pool_size.to_string()),
        top("max_client_conn", spec.max_client_conn.to_string()),
        top("server_reset_query", spec.server_reset_query.clone()),
        top(
            "server_reset_query_always",
            u8::from(spec.server_reset_query_always).to_string(),
        ),
    ];
    for (k, v) in &spec.settings {
        out.push(ExpectedSetting {
            key: k.clone(),
            value: v.clone(),
            declared_by: Some(format!("pgbouncer.settings.{k}")),
        });
    }
    for (k, v) in RELIED_ON_DEFAULTS {
        if !spec.settings.contains_key(*k) {
            out.push(ExpectedSetting {
                key: k.to_string(),
                value: v.to_string(),
                declared_by: None,
            });
        }
    }
    if !spec.settings.contains_key("max_prepared_statements") {
        // The model's `tracks_prepared` rests on it: the version's default, checked like
        // the others (a PgBouncer older than its declared version would not track).
        out.push(ExpectedSetting {
            key: "max_prepared_statements".to_string(),
            value: default_max_prepared_statements(&spec.version).to_string(),
            declared_by: None,
        });
    }
    out
}

/// `max_prepared_statements` when `pgbouncer.ini` leaves it unset: 200 from 1.22 (its
/// `src/main.c`; `SHOW CONFIG` of 1.24.1 prints 200, docs/session-state.md), 0 (off) before.
pub fn default_max_prepared_statements(version: &str) -> u32 {
    let mut it = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    if (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (1, 22) {
        200
    } else {
        0
    }
}

/// How PgBouncer reads and prints a setting (libusual's `cfparser.c`, PgBouncer's `src/main.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `CF_TIME_USEC`: seconds through `strtod`, kept as whole microseconds, printed with `%g`
    /// (six significant digits: `1.23457`, `1e+08`); no units.
    Seconds,
    /// `CF_INT` / `CF_UINT`: `strtol(.., 0)` (`010` is octal 8, `0x10` is 16), printed in
    /// decimal; PgBouncer's booleans are these, `0`/`1`.
    Int,
    /// `unix_socket_mode`: an `Int` that people write in octal (`0600` shows as `384`).
    Mode,
    /// `CF_LOOKUP`: a keyword matched without case, printed in lower case.
    Keyword,
    /// `CF_STR`: the text, trimmed, quotes and all.
    Text,
}

fn kind(key: &str) -> Kind {
    const SECONDS: &[&str] = &[
        "autodb_idle_timeout",
        "cancel_wait_timeout",
        "client_idle_timeout",
        "client_login_timeout",
        "dns_max_ttl",
        "dns_nxdomain_ttl",
        "dns_zone_check_period",
        "idle_transaction_timeout",
        "query_timeout",
        "query_wait_timeout",
        "reserve_pool_timeout",
        "server_check_delay",
        "server_connect_timeout",
        "server_idle_timeout",
        "server_lifetime",
        "server_login_retry",
        "suspend_timeout",
        "transaction_timeout",
    ];
    const INTS: &[&str] = &[
        "application_name_add_host",
        "default_pool_size",
        "disable_pqexec",
        "listen_backlog",
        "listen_port",
        "log_connections",
        "log_disconnections",
        "log_pooler_errors",
        "log_stats",
        "max_client_conn",
        "max_db_client_connections",
        "max_db_connections",
        "max_packet_size",
        "max_prepared_statements",
        "max_user_client_connections",
        "max_user_connections",
        "min_pool_size",
        "peer_id",
        "pkt_buf",
        "query_wait_notify",
        "reserve_pool_size",
        "sbuf_loopcnt",
        "scram_iterations",
        "server_fast_close",
        "server_reset_query_always",
        "server_round_robin",
        "so_reuseport",
        "stats_period",
        "syslog",
        "tcp_defer_accept",
        "tcp_keepalive",
        "tcp_keepcnt",
        "tcp_keepidle",
        "tcp_keepintvl",
        "tcp_socket_buffer",
        "tcp_user_timeout",
        "verbose",
    ];
    const KEYWORDS: &[&str] = &[
        "auth_type",
        "client_tls_sslmode",
        "pool_mode",
        "server_tls_sslmode",
    ];
    if SECONDS.contains(&key) {
        Kind::Seconds
    } else if INTS.contains(&key) {
        Kind::Int
    } else if key == "unix_socket_mode" {
        Kind::Mode
    } else if KEYWORDS.contains(&key) {
        Kind::Keyword
    } else {
        Kind::Text
    }
}

/// C's `strtol(text, .., 0)` over the whole text: a sign, then `0x` hex, `0` octal, or decimal.
fn c_integer(text: &str) -> Option<i64> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (radix, digits) = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, hex)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let v = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Whether PgBouncer running `running` (as `SHOW CONFIG` prints it) runs the declared value,
/// and a note when the two differ only in how PgBouncer read the declared text.
fn runs_declared(kind: Kind, declared: &str, running: &str) -> (bool, Option<String>) {
    let (d, r) = (declared.trim(), running.trim());
    match kind {
        Kind::Seconds => match (d.parse::<f64>(), r.parse::<f64>()) {
            (Ok(d), Ok(r)) => {
                // Whole microseconds, as PgBouncer keeps it; `%g` keeps six digits.
                let kept = (d * 1e6) as u64 as f64 / 1e6;
                ((r - kept).abs() <= kept.abs() * 5e-6 + 1e-9, None)
            }
            _ => (d == r, None),
        },
        Kind::Int | Kind::Mode => {
            let c = c_integer(d);
            // The harness reads a decimal number as decimal; PgBouncer, as C does.
            let meant = match kind {
                Kind::Int => d.parse::<i64>().ok().or(c),
                _ => c,
            };
            match (meant, r.parse::<i64>()) {
                (Some(m), Ok(r)) if m == r => (true, None),
                (Some(m), Ok(r)) if c == Some(r) => (
                    false,
                    Some(format!(
                        "PgBouncer reads a leading 0 as octal: {d} is {r}, not {m}"
                    )),
                ),
                (Some(_), Ok(_)) => (false, None),
                _ => (d == r, None),
            }
        }
        Kind::Keyword => (d.eq_ignore_ascii_case(r), None),
        Kind::Text => (d == r, None),
    }
}

/// Compare `SHOW CONFIG`'s `(key, value)` rows with the expected settings: one entry per
/// setting PgBouncer runs with another value, or does not list although the topology
/// declares it. (A default it does not list is no difference: 1.24 has no
/// `transaction_timeout`, and times out no transaction.)
pub fn compare_config(
    expected: &[ExpectedSetting],
    running: &[(String, String)],
) -> Vec<ConfigDifference> {
    let mut out = Vec::new();
    for e in expected {
        let found = running.iter().find(|(k, _)| *k == e.key).map(|(_, v)| v);
        let difference = match found {
            None if e.declared_by.is_none() => None,
            None => Some((None, None)),
            Some(v) => match runs_declared(kind(&e.key), &e.value, v) {
                (true, _) => None,
                (false, note) => Some((Some(v.clone()), note)),
            },
        };
        if let Some((running, note)) = difference {
            out.push(ConfigDifference {
                pooler: "PgBouncer",
                expected: e.clone(),
                running,
                note,
            });
        }
    }
    out
}

/// `pgbouncer.ini` for this run: the topology's pool settings on top of the harness's
/// fixed ones (loopback only; HBA auth: trust on the private Unix socket, SCRAM on TCP;
/// admin console for the superuser). Beside the harness's database, a fallback entry `*`
/// routes any other database name to the same PostgreSQL under that name (PgBouncer makes
/// its pool on first use): `pgchaos run` gives each round a fresh database of its own.
pub fn ini(topology_name: &str, b: &PgbouncerSpec, cx: &ConfigContext) -> String {
    let sock = cx.run_dir.display();
    let mut ini = format!(
        "; generated by pgchaos for topology {name}\n\
         [databases]\n\
         {db} = host={pg_host} port={pg_port} dbname={db}\n\
         * = host={pg_host} port={pg_port}\n\n\
         [pgbouncer]\n\
         listen_addr = {listen_addr}\n\
         listen_port = {port}\n\
         unix_socket_dir = {sock}\n\
         unix_socket_mode = 0600\n\
         auth_type = hba\n\
         auth_hba_file = {hba}\n\
         auth_file = {auth}\n\
         admin_users = {superuser}\n\
         pool_mode = {mode}\n\
         default_pool_size = {size}\n\
         max_client_conn = {maxc}\n\
         server_reset_query = {reset}\n\
         server_reset_query_always = {always}\n\
         ignore_startup_parameters = extra_float_digits\n",
        name = topology_name,
        db = cx.database,
        pg_port = cx.pg_port,
        pg_host = cx.pg_host.map_or_else(|| sock.to_string(), str::to_string),
        port = cx.listen_port,
        listen_addr = cx.listen_addr,
        hba = cx.run_dir.join("pgbouncer_hba.conf").display(),
        auth = cx.run_dir.join("userlist.txt").display(),
        superuser = cx.superuser,
        mode = b.pool_mode.as_str(),
        size = b.default_pool_size,
        maxc = b.max_client_conn,
        reset = b.server_reset_query,
        always = u8::from(b.server_reset_query_always),
    );
    for (k, v) in &b.settings {
        ini.push_str(&format!("{k} = {v}\n"));
    }
    ini
}

/// PgBouncer's HBA file: the private Unix socket is trusted (only the harness's user can
/// reach it), TCP on loopback needs the run's SCRAM password, anything else is rejected.
pub fn hba() -> String {
    "# generated by pgchaos\n\
     local all all trust\n\
     host all all 127.0.0.1/32 scram-sha-256\n\
     host all all ::1/128 scram-sha-256\n"
        .to_string()
}

/// `userlist.txt`: each role with the run's password (PgBouncer computes the SCRAM exchange
/// from a plain-text entry). Both are quoted, a `"` inside doubled (`find_quote` and
/// `copy_quoted` in src/loader.c at `pgbouncer_1_25_2`).
pub fn userlist(passwords: &[(String, String)]) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    passwords
        .iter()
        .map(|(role, pw)| format!("{} {}\n", q(role), q(pw)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::PgBouncer;
    use super::*;
    use crate::pooler::Pooler;
    use std::collections::BTreeMap;

    /// A `"` in a role or password is doubled inside its quotes, as PgBouncer's loader reads
    /// it back (`find_quote` skips a doubled quote; `copy_quoted` keeps one of the two).
    #[test]
    fn userlist_quotes_each_field() {
        let list = [("te\"am".to_string(), "p\"w x".to_string())];
        assert_eq!(userlist(&list), "\"te\"\"am\" \"p\"\"w x\"\n");
    }

    use super::super::tests::spec;

    #[test]
    fn the_ini_keeps_tcp_on_loopback_behind_scram_and_carries_the_topology() {
        let b = super::super::PgBouncer::new("t", spec("DISCARD ALL"));
        let pw = vec![("chaos".to_string(), "secret".to_string())];
        let cx = ConfigContext {
            pg_host: None,
            topology_name: "t",
            run_dir: std::path::Path::new("/run/x"),
            pg_port: 5433,
            listen_addr: "127.0.0.1",
            listen_port: 6433,
            admin_port: None,
            standby_port: None,
            database: "chaos",
            superuser: "postgres",
            passwords: &pw,
        };
        let files = b.config_files(&cx).unwrap();
        let ini = &files.iter().find(|f| f.is_main).unwrap().text;
        for line in [
            "listen_addr = 127.0.0.1",
            "listen_port = 6433",
            "auth_type = hba",
            "pool_mode = transaction",
            "chaos = host=/run/x port=5433 dbname=chaos",
            "server_lifetime = 3600",
        ] {
            assert!(ini.lines().any(|l| l == line), "{line} missing:\n{ini}");
        }
        assert!(!ini.contains("trust"), "no trust auth in the ini: {ini}");
        let hba = &files
            .iter()
            .find(|f| f.name == "pgbouncer_hba.conf")
            .unwrap()
            .text;
        assert!(hba.contains("host all all 127.0.0.1/32 scram-sha-256"));
        assert!(!hba.contains("host all all 127.0.0.1/32 trust"));
        let users = &files
            .iter()
            .find(|f| f.name == "userlist.txt")
            .unwrap()
            .text;
        assert_eq!(users, "\"chaos\" \"secret\"\n");
    }

    /// `SHOW CONFIG` of PgBouncer 1.24.1 running `topologies/transaction-mode-faults.yaml`
    /// (psql `-A -F '|'`; the run directory shown as /run/x).
    const SHOW_CONFIG_1_24_1: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pgbouncer/show-config-1.24.1.txt"
    ));

    /// `(key, value)` rows of a `psql -A -F '|'` listing.
    fn rows(listing: &str) -> Vec<(String, String)> {
        listing
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('('))
            .map(|l| {
                let mut cols = l.split('|');
                let key = cols.next().unwrap().to_string();
                (key, cols.next().unwrap_or_default().to_string())
            })
            .collect()
    }

    /// The rows with some values replaced (or, with `None`, removed).
    fn with(listing: &str, changes: &[(&str, Option<&str>)]) -> Vec<(String, String)> {
        let mut out = rows(listing);
        for (k, v) in changes {
            match v {
                Some(v) => match out.iter_mut().find(|(key, _)| key == k) {
                    Some(row) => row.1 = v.to_string(),
                    None => out.push((k.to_string(), v.to_string())),
                },
                None => out.retain(|(key, _)| key != k),
            }
        }
        out
    }

    /// `topologies/transaction-mode-faults.yaml`'s pgbouncer section.
    fn faults_spec() -> PgbouncerSpec {
        PgbouncerSpec {
            server_reset_query_always: false,
            settings: BTreeMap::from([("server_login_retry".to_string(), "1".to_string())]),
            ..spec("DISCARD ALL")
        }
    }

    fn differences(spec: &PgbouncerSpec, running: &[(String, String)]) -> Vec<String> {
        PgBouncer::new("t", spec.clone())
            .config_differences(running)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_expected_config_is_the_declared_settings_then_the_defaults_the_model_assumes() {
        let mut s = faults_spec();
        s.settings
            .insert("server_lifetime".to_string(), "7200".to_string());
        let got: Vec<(String, String, Option<String>)> = expected_config(&s)
            .into_iter()
            .map(|e| (e.key, e.value, e.declared_by))
            .collect();
        let declared = |k: &str, v: &str, by: &str| (k.into(), v.into(), Some(by.to_string()));
        let default = |k: &str, v: &str| (k.into(), v.into(), None);
        assert_eq!(
            got,
            vec![
                declared("pool_mode", "transaction", "pgbouncer.pool_mode"),
                declared("default_pool_size", "2", "pgbouncer.default_pool_size"),
                declared("max_client_conn", "50", "pgbouncer.max_client_conn"),
                declared(
                    "server_reset_query",
                    "DISCARD ALL",
                    "pgbouncer.server_reset_query"
                ),
                declared(
                    "server_reset_query_always",
                    "0",
                    "pgbouncer.server_reset_query_always"
                ),
                declared(
                    "server_lifetime",
                    "7200",
                    "pgbouncer.settings.server_lifetime"
                ),
                declared(
                    "server_login_retry",
                    "1",
                    "pgbouncer.settings.server_login_retry"
                ),
                default("min_pool_size", "0"),
                default("reserve_pool_size", "0"),
                default("server_idle_timeout", "600"),
                default("idle_transaction_timeout", "0"),
                default("query_timeout", "0"),
                default("query_wait_timeout", "120"),
                default("client_idle_timeout", "0"),
                default("transaction_timeout", "0"),
                default("max_prepared_statements", "200"),
            ]
        );
    }

    #[test]
    fn the_prepared_statement_tracking_the_model_assumes_is_checked_against_show_config() {
        // The fixture's PgBouncer (1.24.1) tracks by default: a topology declaring 1.21 (whose
        // default is off) would be modelled without tracking, and the launch check says so.
        let running = rows(SHOW_CONFIG_1_24_1);
        let old = PgbouncerSpec {
            version: "1.21.0".into(),
            ..faults_spec()
        };
        assert!(!super::super::PgBouncer::new("t", old.clone()).tracks_prepared());
        let d = differences(&old, &running);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("max_prepared_statements"), "{d:?}");
        assert!(d[0].contains("200"), "{d:?}");
        // Declared explicitly, the declared value is what is compared.
        let mut declared = faults_spec();
        declared
            .settings
            .insert("max_prepared_statements".into(), "0".into());
        assert_eq!(differences(&declared, &running).len(), 1);
        assert_eq!(differences(&faults_spec(), &running), Vec::<String>::new());
    }

    #[test]
    fn pgbouncer_1_24_running_a_shipped_topology_runs_what_it_declares() {
        let running = rows(SHOW_CONFIG_1_24_1);
        assert_eq!(running.len(), 92, "every row of the fixture");
        // 1.24 lists no transaction_timeout: the default the model assumes (off) holds.
        assert!(!running.iter().any(|(k, _)| k == "transaction_timeout"));
        assert_eq!(differences(&faults_spec(), &running), Vec::<String>::new());
    }

    #[test]
    fn a_difference_names_the_setting_the_declared_value_and_what_pgbouncer_reports() {
        let running = with(SHOW_CONFIG_1_24_1, &[("pool_mode", Some("session"))]);
        assert_eq!(
            differences(&faults_spec(), &running),
            [
                r#"pool_mode: declared "transaction" (pgbouncer.pool_mode), PgBouncer reports "session""#
            ]
        );
        // A default the model assumes, changed behind the topology's back.
        let running = with(SHOW_CONFIG_1_24_1, &[("server_idle_timeout", Some("1"))]);
        assert_eq!(
            differences(&faults_spec(), &running),
            [
                r#"server_idle_timeout: not declared, so the model assumes the default "600", PgBouncer reports "1""#
            ]
        );
        // A declared setting this PgBouncer does not know.
        let mut s = faults_spec();
        s.settings
            .insert("transaction_timeout".to_string(), "60".to_string());
        assert_eq!(
            differences(&s, &rows(SHOW_CONFIG_1_24_1)),
            [
                r#"transaction_timeout: declared "60" (pgbouncer.settings.transaction_timeout), PgBouncer lists no such setting"#
            ]
        );
    }

    #[test]
    fn a_reload_pgbouncer_could_not_parse_leaves_the_later_settings_at_their_defaults() {
        // Observed on 1.24.1: `server_lifetime = 1min` inserted before `pool_mode` in the
        // run's pgbouncer.ini, then RELOAD: the console answers RELOAD, the log says "invalid
        // value", and every setting after the bad line is back at its default.
        let running = with(
            SHOW_CONFIG_1_24_1,
            &[
                ("pool_mode", Some("session")),
                ("default_pool_size", Some("20")),
                ("max_client_conn", Some("100")),
                ("ignore_startup_parameters", Some("")),
                ("server_login_retry", Some("15")),
            ],
        );
        let got = differences(&faults_spec(), &running);
        let keys: Vec<&str> = got.iter().map(|d| d.split(':').next().unwrap()).collect();
        assert_eq!(
            keys,
            [
                "pool_mode",
                "default_pool_size",
                "max_client_conn",
                "server_login_retry"
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn values_are_compared_in_pgbouncers_own_formats() {
        let same = |kind_of: &str, declared: &str, shown: &str| {
            runs_declared(kind(kind_of), declared, shown).0
        };
        // Seconds: `%g` of whole microseconds; no units.
        for (declared, shown) in [
            ("3600", "3600"),
            ("3600.0", "3600"),
            (" 7200 ", "7200"),
            ("0.5", "0.5"),
            ("1e3", "1000"),
            ("1.23456789", "1.23457"),
            ("100000000", "1e+08"),
            ("0.000001", "1e-06"),
            ("0.0000015", "1e-06"),
            ("0", "0"),
        ] {
            assert!(
                same("server_lifetime", declared, shown),
                "{declared} vs {shown}"
            );
        }
        for (declared, shown) in [("3600", "3601"), ("1.2346", "1.23457"), ("inf", "0")] {
            assert!(
                !same("server_lifetime", declared, shown),
                "{declared} vs {shown}"
            );
        }
        // Integers and PgBouncer's booleans: decimal, 0/1.
        assert!(same("server_reset_query_always", "1", "1"));
        assert!(!same("server_reset_query_always", "1", "0"));
        assert!(same("default_pool_size", "0x10", "16"), "strtol reads hex");
        assert!(same("unix_socket_mode", "0600", "384"), "a mode is octal");
        let (ok, note) = runs_declared(kind("min_pool_size"), "010", "8");
        assert!(!ok, "the harness reads 010 as ten");
        assert_eq!(
            note.as_deref(),
            Some("PgBouncer reads a leading 0 as octal: 010 is 8, not 10")
        );
        // Keywords without case; text trimmed, quotes kept.
        assert!(same("pool_mode", "Transaction", "transaction"));
        assert!(!same("pool_mode", "transaction", "session"));
        assert!(same("server_reset_query", "", ""));
        assert!(same("server_reset_query", "DISCARD ALL ", "DISCARD ALL"));
        assert!(!same("server_reset_query", "", "DISCARD ALL"));
        assert!(!same("server_reset_query", "DISCARD ALL", "discard all"));
        assert!(
            !same("server_reset_query", "''", ""),
            "PgBouncer keeps quotes"
        );
    }

    #[test]
    fn c_integers_read_as_strtol_base_0_does() {
        assert_eq!(c_integer("10"), Some(10));
        assert_eq!(c_integer("010"), Some(8));
        assert_eq!(c_integer("0x1F"), Some(31));
        assert_eq!(c_integer("-7"), Some(-7));
        assert_eq!(c_integer("0"), Some(0));
        assert_eq!(c_integer("08"), None);
        assert_eq!(c_integer("5x"), None);
        assert_eq!(c_integer(""), None);
        assert_eq!(c_integer("--1"), None);
    }
}
