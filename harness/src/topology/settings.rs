//! The settings tables of PostgreSQL: what the harness sets itself (refused in a topology),
//! and the settings the model does not know yet (refused, so no `pg.*` verdict can come from
//! pgchaos not knowing them). A pooler's own tables are in its folder (`pooler/pgbouncer/`).

#[allow(unused_imports)]
use super::*;

/// `postgresql.conf` parameters the harness sets itself.
pub(super) const PG_HARNESS_SETTINGS: &[(&str, &str)] = &[
    ("port", "the harness picks the port PostgreSQL listens on"),
    (
        "listen_addresses",
        "the harness picks the address PostgreSQL listens on",
    ),
    (
        "unix_socket_directories",
        "the harness picks PostgreSQL's socket directory",
    ),
    (
        "data_directory",
        "the harness creates and owns the cluster's data directory",
    ),
    ("hba_file", "the harness writes pg_hba.conf itself"),
    ("ident_file", "the harness writes pg_ident.conf itself"),
    ("config_file", "the harness writes postgresql.conf itself"),
    (
        "external_pid_file",
        "the harness manages the postmaster's process",
    ),
];

/// `[a-z_][a-z0-9_.]*`: the shape of a postgresql.conf / pgbouncer.ini parameter name.
pub fn is_setting_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '.'))
}

/// A PostgreSQL time setting as seconds: a bare number is milliseconds; units `us`, `ms`,
/// `s`, `min`, `h`, `d` as postgresql.conf takes them.
pub(super) fn postgres_seconds(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let per = match unit.trim() {
        "" | "ms" => 0.001,
        "us" => 0.000_001,
        "s" => 1.0,
        "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    Some(n * per)
}
