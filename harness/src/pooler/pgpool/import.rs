//! Import of a team's `pgpool.conf`: a topology with its pooling settings (`pgchaos import`,
//! which writes the file), so pgchaos runs against the configuration they deploy.
//!
//! The file is read as pgpool-II reads it (src/config/pool_config.l: `key [=] value` per line,
//! `#` comments, values quoted with `'` or bare; keys are case-sensitive; a later line wins).
//! The pooling settings map onto the `pgpool:` section (section.rs); what the harness
//! controls itself (addresses, ports, sockets, authentication, logging, backends' hosts,
//! health checks, failover, watchdog) is dropped with one YAML comment each; what changes how
//! clients and locks are served and no topology key says (another clustering mode, the cache
//! off, `client_idle_limit`, ...) is refused at `path:line:column`, as is a key one typo away
//! from a pooling key (pgpool-II would ignore it and run with the default). The output is
//! checked by loading it (`Topology::parse`) before anything is written.

use super::import_yaml::Written;
use super::section::DEFAULT_VERSION;
use crate::pooler::import::{CLIENTS, POSTGRES_VERSION};
use crate::pooler::import::{ConfError, ConfFile, col_of, yaml_quote};
use crate::pooler::{Imported, Origin};
use crate::topology::Topology;
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// PostgreSQL's default `max_connections`.
const PG_DEFAULT_MAX_CONNECTIONS: u64 = 100;
/// `superuser_reserved_connections` (default) + the harness's direct connections.
const PG_RESERVED: u64 = 3 + 3;

/// pgpool-II's own defaults (4.3.5's pool_config_variables.c), for what the file leaves out.
const PGPOOL_NUM_INIT_CHILDREN: u64 = 32;
const PGPOOL_MAX_POOL: u64 = 4;
const PGPOOL_CHILD_LIFE_TIME: u64 = 300;

/// Every parameter pgpool-II 4.3.5 or 4.6.1 knows (pool_config_variables.c of `V4_3_5` and
/// `V4_6_1`); the backend, watchdog and health-check ones also with a node number appended.
const KNOWN: &str = "allow_clear_text_frontend_auth allow_multiple_failover_requests_from_node \
    allow_sql_comments app_name_redirect_preference_list arping_cmd arping_path \
    authentication_timeout auto_failback auto_failback_interval backend_application_name \
    backend_clustering_mode backend_data_directory backend_flag backend_hostname backend_port \
    backend_weight cache_safe_memqcache_table_list cache_unsafe_memqcache_table_list \
    check_temp_table check_unlogged_table child_life_time child_max_connections \
    clear_memqcache_on_escalation client_idle_limit client_idle_limit_in_recovery \
    client_min_messages connect_timeout connection_cache connection_life_time \
    database_redirect_preference_list delay_threshold delay_threshold_by_time delegate_ip \
    detach_false_primary disable_load_balance_on_write dml_adaptive_object_relationship_list \
    enable_consensus_with_half_votes enable_pool_hba enable_shared_relcache \
    fail_over_on_backend_error failback_command failover_command \
    failover_if_affected_tuples_mismatch failover_on_backend_error failover_on_backend_shutdown \
    failover_require_consensus failover_when_quorum_exists follow_primary_command \
    health_check_database health_check_max_retries health_check_password health_check_period \
    health_check_retry_delay health_check_test health_check_timeout health_check_user \
    heartbeat_device heartbeat_hostname heartbeat_port hostname if_cmd_path if_down_cmd \
    if_up_cmd ignore_leading_white_space insert_lock listen_addresses listen_backlog_multiplier \
    load_balance_mode lobj_lock_table log_backend_messages log_client_messages log_connections \
    log_destination log_directory log_disconnections log_error_verbosity log_file_mode \
    log_filename log_hostname log_line_prefix log_min_messages log_pcp_processes \
    log_per_node_statement log_rotation_age log_rotation_size log_standby_delay log_statement \
    log_truncate_on_rotation logdir logging_collector max_pool max_spare_children \
    memory_cache_enabled memqcache_auto_cache_invalidation memqcache_cache_block_size \
    memqcache_expire memqcache_max_num_cache memqcache_maxcache memqcache_memcached_host \
    memqcache_memcached_port memqcache_method memqcache_oiddir memqcache_total_size \
    min_spare_children notice_per_node_statement num_init_children pcp_listen_addresses \
    pcp_port pcp_socket_dir pgpool_port pid_file_name ping_path pool_passwd port \
    prefer_lower_delay_standby primary_routing_query_pattern_list process_management_mode \
    process_management_strategy read_only_function_list recovery_1st_stage_command \
    recovery_2nd_stage_command recovery_password recovery_timeout recovery_user relcache_expire \
    relcache_query_target relcache_size replicate_select replication_mode \
    replication_stop_on_mismatch reserved_connections reset_query_list \
    search_primary_node_timeout serialize_accept socket_dir sr_check_database sr_check_password \
    sr_check_period sr_check_user ssl ssl_ca_cert ssl_ca_cert_dir ssl_cert ssl_ciphers \
    ssl_crl_file ssl_dh_params_file ssl_ecdh_curve ssl_key ssl_passphrase_command \
    ssl_prefer_server_ciphers statement_level_load_balance syslog_facility syslog_ident \
    trusted_server_command trusted_servers unix_socket_directories unix_socket_group \
    unix_socket_permissions use_watchdog user_redirect_preference_list wd_authkey \
    wd_de_escalation_command wd_escalation_command wd_heartbeat_deadtime wd_heartbeat_keepalive \
    wd_interval wd_ipc_socket_dir wd_life_point wd_lifecheck_dbname wd_lifecheck_method \
    wd_lifecheck_password wd_lifecheck_query wd_lifecheck_user wd_lost_node_removal_timeout \
    wd_monitoring_interfaces_list wd_no_show_node_removal_timeout wd_port wd_priority \
    wd_remove_shutdown_nodes write_function_list";

/// Keys only a pgpool.conf has (one of them set, outside a comment, makes a file one).
const MARKERS: &[&str] = &[
    "num_init_children",
    "max_pool",
    "reset_query_list",
    "backend_clustering_mode",
    "pcp_port",
    "backend_hostname0",
    "enable_pool_hba",
    "connection_cache",
    "child_life_time",
    "sr_check_user",
];

/// The pooling keys the import maps (a key close to one of these is a typo, refused).
const POOLING: &[&str] = &[
    "num_init_children",
    "max_pool",
    "reset_query_list",
    "connection_cache",
    "child_life_time",
    "connection_life_time",
    "load_balance_mode",
    "backend_clustering_mode",
    "client_idle_limit",
    "child_max_connections",
    "reserved_connections",
    "write_function_list",
    "read_only_function_list",
    "statement_level_load_balance",
    "process_management_mode",
];

/// Whether `key` is a parameter pgpool-II knows (`backend_hostname0`: a numbered one).
fn is_known(key: &str) -> bool {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    KNOWN.split_whitespace().any(|k| k == key || k == base)
}

/// Whether a file is a `pgpool.conf`: one of [`MARKERS`] is set outside a comment.
pub fn recognises(src: &str) -> bool {
    src.lines().any(|l| {
        let t = l.trim_start();
        let key: String = t
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        MARKERS.contains(&key.as_str()) && {
            let rest = t[key.len()..].trim_start();
            rest.starts_with('=')
                || rest.starts_with('\'')
                || rest.starts_with(|c: char| c.is_ascii_alphanumeric())
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The file

/// One `key = value` line. Columns are 1-based, in characters.
#[derive(Clone, Debug)]
struct Entry {
    line: usize,
    key: String,
    key_col: usize,
    /// Without its quotes (pgpool-II keeps what is between them as it is).
    value: String,
    value_col: usize,
    /// The value as written, quotes included (for the caret).
    value_width: usize,
}

trait At {
    fn at_key(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> ConfError;
    fn at_value(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> ConfError;
}

impl At for ConfFile<'_> {
    fn at_key(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> ConfError {
        self.error(e.line, e.key_col, e.key.chars().count(), message, hints)
    }
    fn at_value(&self, e: &Entry, message: impl Into<String>, hints: Vec<String>) -> ConfError {
        self.error(e.line, e.value_col, e.value_width, message, hints)
    }
}

fn is_key_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || !c.is_ascii()
}

fn is_key_char(c: char) -> bool {
    is_key_start(c) || c.is_ascii_digit()
}

/// Reads the file: every `key [=] value` line, in file order.
fn parse_conf(f: &ConfFile) -> Result<Vec<Entry>, ConfError> {
    let mut out = Vec::new();
    for (i, raw) in f.src.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        let start = line.len() - line.trim_start().len();
        let t = &line[start..];
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let key_col = col_of(line, start);
        if !t.starts_with(is_key_start) {
            return Err(f.error(
                n,
                key_col,
                t.chars().count(),
                format!("expected `key = value`, found `{t}`"),
                vec!["comments start with `#`".into()],
            ));
        }
        let key_len = t.find(|c: char| !is_key_char(c)).unwrap_or(t.len());
        let key = &t[..key_len];
        let mut pos = start + key_len;
        let skip_ws = |p: usize| p + (line[p..].len() - line[p..].trim_start().len());
        pos = skip_ws(pos);
        if line[pos..].starts_with('=') {
            pos = skip_ws(pos + 1);
        }
        let rest = &line[pos..];
        let value_col = col_of(line, pos);
        if rest.is_empty() || rest.starts_with('#') {
            return Err(f.error(
                n,
                value_col,
                1,
                format!("`{key}` has no value"),
                vec![format!(
                    "write `{key} = value` (quote text: '...'; an empty text is '')"
                )],
            ));
        }
        let (value, raw_len) = if let Some(body) = rest.strip_prefix('\'') {
            // pool_config.l: \'([^'\n]|\\.)*\' ; the value is what lies between the quotes.
            let mut end = None;
            let mut chars = body.char_indices();
            while let Some((j, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '\'' => {
                        end = Some(j);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(end) = end else {
                return Err(f.error(
                    n,
                    value_col,
                    rest.chars().count(),
                    format!("`{key}`: the quoted value is not closed"),
                    vec!["end it with `'` on the same line".into()],
                ));
            };
            (body[..end].to_string(), end + 2)
        } else {
            let len = rest
                .find(|c: char| c.is_whitespace() || c == '#')
                .unwrap_or(rest.len());
            let v = &rest[..len];
            let bare_ok = v.starts_with(is_key_start)
                && v.chars()
                    .all(|c| is_key_char(c) || matches!(c, '-' | '.' | ':' | '/'))
                || is_number(v);
            if !bare_ok {
                return Err(f.error(
                    n,
                    value_col,
                    v.chars().count(),
                    format!("`{key}`: `{v}` is neither a number nor a plain word"),
                    vec![format!("quote it: {key} = '{v}'")],
                ));
            }
            (v.to_string(), len)
        };
        let after = &rest[raw_len..];
        let trailing = after.trim_start();
        if !trailing.is_empty() && !trailing.starts_with('#') {
            let at = pos + raw_len + (after.len() - trailing.len());
            return Err(f.error(
                n,
                col_of(line, at),
                trailing.chars().count(),
                format!("unexpected `{}` after `{key}`'s value", trailing.trim_end()),
                vec!["one `key = value` per line; quote a value with spaces: '...'".into()],
            ));
        }
        out.push(Entry {
            line: n,
            key: key.to_string(),
            key_col,
            value,
            value_col,
            value_width: rest[..raw_len].chars().count(),
        });
    }
    Ok(out)
}

/// pool_config.l's INTEGER (`[+-]?(digits|0xhex)` with unit letters: `5min`) or REAL.
fn is_number(v: &str) -> bool {
    let u = v.strip_prefix(['-', '+']).unwrap_or(v);
    if let Some(h) = u.strip_prefix("0x") {
        let hex = h.trim_end_matches(|c: char| c.is_ascii_alphabetic() && !c.is_ascii_hexdigit());
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    let digits = u.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let int = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit());
    let real = u.contains('.')
        && u.parse::<f64>().is_ok()
        && u.chars().all(|c| c.is_ascii_digit() || ".eE+-".contains(c));
    int || real
}

/// pgpool-II's booleans (PostgreSQL's parse_bool: true/false/yes/no/on/off/1/0 and unique
/// prefixes of them).
fn parse_bool(v: &str) -> Option<bool> {
    let l = v.to_ascii_lowercase();
    let prefix_of = |w: &str, min: usize| l.len() >= min && w.starts_with(l.as_str());
    if l == "1" || prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) {
        Some(true)
    } else if l == "0" || prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) {
        Some(false)
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// The mapping

/// Why the harness drops a key it controls itself.
fn harness_reason(key: &str) -> Option<&'static str> {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    Some(match base {
        "listen_addresses" | "pcp_listen_addresses" => "pgchaos listens on loopback only",
        "port" | "pcp_port" => "pgchaos picks a free loopback port",
        "socket_dir"
        | "unix_socket_directories"
        | "unix_socket_group"
        | "unix_socket_permissions"
        | "pcp_socket_dir"
        | "wd_ipc_socket_dir" => "pgchaos picks pgpool-II's socket directory",
        "pid_file_name" | "logdir" => "pgchaos keeps pgpool-II's files in its run directory",
        "enable_pool_hba"
        | "pool_passwd"
        | "authentication_timeout"
        | "allow_clear_text_frontend_auth" => "pgchaos configures authentication itself",
        "backend_hostname"
        | "backend_port"
        | "backend_data_directory"
        | "backend_application_name"
        | "backend_flag"
        | "backend_weight" => "pgchaos points pgpool-II at the PostgreSQL it starts",
        "sr_check_user" | "sr_check_password" | "sr_check_database" | "sr_check_period" => {
            "pgchaos sets the streaming-replication check itself"
        }
        "failover_on_backend_shutdown"
        | "failover_on_backend_error"
        | "fail_over_on_backend_error" => {
            "pgchaos runs pgpool-II with it off, or one pg_terminate_backend fails the node over (docs/pgpool.md §10)"
        }
        "memory_cache_enabled" => "pgchaos runs pgpool-II without its query cache",
        "listen_backlog_multiplier" | "serialize_accept" => {
            "the model lets any idle child take a client, whatever the accept queue"
        }
        "client_min_messages" | "syslog_facility" | "syslog_ident" | "logging_collector" => {
            "pgchaos captures pgpool-II's log itself"
        }
        "use_watchdog"
        | "trusted_servers"
        | "trusted_server_command"
        | "delegate_ip"
        | "hostname"
        | "pgpool_port"
        | "ping_path"
        | "if_cmd_path"
        | "if_up_cmd"
        | "if_down_cmd"
        | "arping_path"
        | "arping_cmd"
        | "clear_memqcache_on_escalation"
        | "enable_consensus_with_half_votes"
        | "failover_require_consensus"
        | "failover_when_quorum_exists"
        | "allow_multiple_failover_requests_from_node" => {
            "pgchaos runs a single pgpool-II, without a watchdog"
        }
        "failover_command"
        | "failback_command"
        | "follow_primary_command"
        | "auto_failback"
        | "auto_failback_interval"
        | "detach_false_primary"
        | "search_primary_node_timeout"
        | "connect_timeout" => "pgchaos does not fail pgpool-II's nodes over",
        "recovery_user"
        | "recovery_password"
        | "recovery_1st_stage_command"
        | "recovery_2nd_stage_command"
        | "recovery_timeout" => "pgchaos does not run online recovery",
        b if b.starts_with("log_") => "pgchaos captures pgpool-II's log itself",
        b if b.starts_with("ssl") => "pgchaos connects without TLS over loopback",
        b if b.starts_with("health_check") => "pgchaos runs pgpool-II without health checks",
        b if b.starts_with("wd_") || b.starts_with("heartbeat") => {
            "pgchaos runs a single pgpool-II, without a watchdog"
        }
        b if b.starts_with("memqcache_") || b.ends_with("memqcache_table_list") => {
            "pgchaos runs pgpool-II without its query cache"
        }
        _ => return None,
    })
}

/// Keys that decide only which node a statement goes to: nothing with one backend.
fn is_routing(key: &str) -> bool {
    matches!(
        key,
        "write_function_list"
            | "read_only_function_list"
            | "statement_level_load_balance"
            | "disable_load_balance_on_write"
            | "primary_routing_query_pattern_list"
            | "database_redirect_preference_list"
            | "app_name_redirect_preference_list"
            | "user_redirect_preference_list"
            | "prefer_lower_delay_standby"
            | "delay_threshold"
            | "delay_threshold_by_time"
            | "dml_adaptive_object_relationship_list"
            | "allow_sql_comments"
            | "ignore_leading_white_space"
            | "check_temp_table"
            | "check_unlogged_table"
            | "relcache_expire"
            | "relcache_size"
            | "relcache_query_target"
            | "enable_shared_relcache"
            | "insert_lock"
            | "lobj_lock_table"
            | "replicate_select"
            | "replication_stop_on_mismatch"
            | "failover_if_affected_tuples_mismatch"
            | "client_idle_limit_in_recovery"
    )
}

/// Values not echoed in comments: credentials, and the addresses of a team's machines (as
/// PgBouncer's import does not copy connection strings).
fn is_secret(key: &str) -> bool {
    let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
    key.contains("password")
        || key.contains("passphrase")
        || key.contains("authkey")
        || matches!(
            base,
            "backend_hostname"
                | "backend_data_directory"
                | "hostname"
                | "heartbeat_hostname"
                | "delegate_ip"
                | "trusted_servers"
                | "memqcache_memcached_host"
        )
}

fn int_value(f: &ConfFile, e: &Entry, lo: u64, hi: u64, what: &str) -> Result<u64, ConfError> {
    match e.value.parse::<u64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        Ok(v) => Err(f.at_value(
            e,
            format!(
                "`{} = {v}` is outside what pgchaos accepts ({lo} to {hi})",
                e.key
            ),
            vec![what.to_string()],
        )),
        Err(_) => Err(f.at_value(
            e,
            format!("`{}` must be an integer, found `{}`", e.key, e.value),
            vec![what.to_string()],
        )),
    }
}

/// A time in seconds as pgpool-II reads one (GUC_UNIT_S: a number, optionally with a unit
/// `us`, `ms`, `s`, `min`, `h` or `d`, rounded to the nearest second).
fn seconds_value(f: &ConfFile, e: &Entry, hi: u64) -> Result<u64, ConfError> {
    let v = e.value.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = (&v[..split], v[split..].trim());
    let factor = match unit {
        "" | "s" => Some(1.0),
        "us" => Some(1e-6),
        "ms" => Some(1e-3),
        "min" => Some(60.0),
        "h" => Some(3600.0),
        "d" => Some(86_400.0),
        _ => None,
    };
    let secs = num
        .parse::<f64>()
        .ok()
        .zip(factor)
        .map(|(n, f)| (n * f).round());
    match secs {
        Some(s) if s <= hi as f64 => Ok(s as u64),
        Some(s) => Err(f.at_value(
            e,
            format!(
                "`{} = {}` is {s} s, more than pgchaos accepts ({hi} s)",
                e.key, e.value
            ),
            vec!["seconds (0: never)".into()],
        )),
        None => Err(f.at_value(
            e,
            format!("`{}` must be a time, found `{}`", e.key, e.value),
            vec![
                "seconds, or a number with a unit: '300', '5min' (units us, ms, s, min, h, d)"
                    .into(),
            ],
        )),
    }
}

fn bool_value(f: &ConfFile, e: &Entry) -> Result<bool, ConfError> {
    parse_bool(&e.value).ok_or_else(|| {
        f.at_value(
            e,
            format!("`{}` must be a boolean, found `{}`", e.key, e.value),
            vec!["write on or off".into()],
        )
    })
}

/// A value as a comment shows it (an empty one as `''`).
fn shown(v: &str) -> &str {
    if v.is_empty() { "''" } else { v }
}

/// A refusal of a value the topology cannot express, with what to import instead.
fn cannot(f: &ConfFile, e: &Entry, why: &str, instead: &str) -> anyhow::Error {
    f.at_value(
        e,
        format!("`{} = {}` is not modelled by pgchaos yet", e.key, e.value),
        vec![why.to_string(), instead.to_string()],
    )
    .into()
}

/// The node number a `backend_hostnameN` / `backend_portN` key names.
fn node_of(key: &str) -> Option<u32> {
    ["backend_hostname", "backend_port"]
        .iter()
        .find_map(|b| key.strip_prefix(b))
        .and_then(|n| n.parse::<u32>().ok())
}

/// The first entry naming node `n`.
fn node_entry(entries: &[Entry], n: u32) -> &Entry {
    entries
        .iter()
        .find(|e| node_of(&e.key) == Some(n))
        .expect("node numbers are read from entries")
}

/// The file's text as a topology YAML, or the first error in it.
pub fn convert(src: &str, path: &Path, origin: &Origin) -> Result<Imported> {
    let f = ConfFile { src, path };
    crate::pooler::import::refuse_control(&f)?;
    if origin.select.database.is_some() || origin.select.user.is_some() {
        bail!(
            "{}: --database and --user choose a pgbouncer.ini's pool; pgpool-II's pool settings (num_init_children, max_pool, ...) are the same for every database and user (its per-database rules route reads to backends, which pgchaos drops)",
            path.display()
        );
    }
    let entries = parse_conf(&f)?;
    let version = origin.version.unwrap_or(DEFAULT_VERSION);
    let probe = format!(
        "name: probe\npostgres:\n  version: \"{POSTGRES_VERSION}\"\npgpool:\n  version: {}\n",
        yaml_quote(version)
    );
    if let Err(e) = Topology::parse(
        &probe,
        Path::new("probe"),
        &crate::pooler::import::probe_catalog(),
    ) {
        bail!("--pooler-version {version:?}: {}", e.message());
    }

    // pgpool-II reads every line, and a later one wins: the entry that counts per key.
    let mut m = Mapping::default();
    let last = last_entries(&f, &entries, &mut m.notes)?;

    // Backends: the node numbers with a host or port (the harness starts its own).
    let mut nodes: Vec<u32> = entries.iter().filter_map(|e| node_of(&e.key)).collect();
    nodes.sort_unstable();
    nodes.dedup();

    // In file order, for the comments.
    let mut counted: Vec<&Entry> = last.values().copied().collect();
    counted.sort_by_key(|e| e.line);

    for e in counted {
        m.entry(&f, e, version)?;
    }

    let balanced = m.balance(&f, &entries, &nodes, &last)?;
    let written = m.settle(balanced);
    let yaml = super::import_yaml::topology(origin, version, &written);
    let Written {
        num_init_children,
        max_pool,
        reset_query_list,
        dropped,
        ..
    } = written;
    Ok(Imported {
        yaml,
        summary: format!(
            "num_init_children {num_init_children}, max_pool {max_pool}, reset_query_list {reset_query_list:?}; {} key(s) dropped or ignored (see the comments)",
            dropped.len()
        ),
        dropped: dropped
            .iter()
            .map(|d| d.trim_start_matches("# ").to_string())
            .collect(),
    })
}

/// The entry that counts per key (pgpool-II reads every line, and a later one wins), with a
/// note for each key set twice; `include` is refused.
fn last_entries<'e>(
    f: &ConfFile,
    entries: &'e [Entry],
    notes: &mut Vec<String>,
) -> Result<BTreeMap<&'e str, &'e Entry>> {
    let mut last: BTreeMap<&str, &Entry> = BTreeMap::new();
    for e in entries {
        if e.key == "include" {
            return Err(f
                .at_key(
                    e,
                    "`include` is not followed by pgchaos import",
                    vec!["paste the included file's settings into this file, or import the included file on its own".into()],
                )
                .into());
        }
        if let Some(prev) = last.insert(e.key.as_str(), e) {
            notes.push(format!(
                "# {} is set at line {} and again at line {}: the later counts, as in pgpool-II",
                e.key, prev.line, e.line
            ));
        }
    }
    Ok(last)
}

/// What the counted entries say, read one at a time in file order: the pooling settings the
/// file sets, its `load_balance_mode`, and the comments for the rest.
#[derive(Default)]
struct Mapping<'a> {
    num_init_children: Option<u64>,
    max_pool: Option<u64>,
    reset_query_list: Option<String>,
    child_life_time: Option<u64>,
    connection_life_time: Option<u64>,
    load_balance: Option<&'a Entry>,
    /// Comments on how the settings were read, written above them.
    notes: Vec<String>,
    /// One comment per key dropped or ignored.
    dropped: Vec<String>,
}

impl<'a> Mapping<'a> {
    /// Reads one counted entry: a pooling setting's value, or (through [`Mapping::modelled`])
    /// a refusal or a comment.
    fn entry(&mut self, f: &ConfFile, e: &'a Entry, version: &str) -> Result<()> {
        match e.key.as_str() {
            "num_init_children" => {
                self.num_init_children = Some(int_value(
                    f,
                    e,
                    1,
                    1000,
                    "children: each serves one client at a time",
                )?)
            }
            "max_pool" => {
                self.max_pool = Some(int_value(f, e, 1, 100, "cached connections per child")?)
            }
            "reset_query_list" => self.reset_query_list = Some(e.value.clone()),
            "child_life_time" => self.child_life_time = Some(seconds_value(f, e, 86_400)?),
            "connection_life_time" => {
                self.connection_life_time = Some(seconds_value(f, e, 86_400)?)
            }
            "load_balance_mode" => {
                bool_value(f, e)?;
                self.load_balance = Some(e);
            }
            _ => self.modelled(f, e, version)?,
        }
        Ok(())
    }

    /// Refuses a value that changes how clients and locks are served in a way no topology key
    /// says (another clustering mode, the cache off, `client_idle_limit`, ...); hands any
    /// other key to [`Mapping::unused`].
    fn modelled(&mut self, f: &ConfFile, e: &Entry, version: &str) -> Result<()> {
        let key = e.key.as_str();
        match key {
            "connection_cache" => {
                if !bool_value(f, e)? {
                    return Err(cannot(
                        f,
                        e,
                        "without the cache every client's backend exits when it leaves; the model does not predict that yet",
                        "import a copy with connection_cache = on",
                    ));
                }
            }
            "backend_clustering_mode" => match e.value.as_str() {
                "streaming_replication" => {}
                "raw" => self.notes.push(format!(
                    "# backend_clustering_mode = raw (line {}): with one backend it serves as streaming_replication does (docs/pgpool.md §7), which pgchaos runs",
                    e.line
                )),
                "native_replication" | "snapshot_isolation" | "logical_replication" | "slony" => {
                    return Err(cannot(
                        f,
                        e,
                        "pgchaos runs pgpool-II in streaming_replication mode over one PostgreSQL; other clustering modes send writes to several nodes",
                        "import a copy with backend_clustering_mode = 'streaming_replication'",
                    ));
                }
                _ => {
                    return Err(f
                        .at_value(
                            e,
                            format!("unknown backend_clustering_mode `{}`", e.value),
                            vec!["valid modes: streaming_replication, native_replication, logical_replication, slony, snapshot_isolation, raw".into()],
                        )
                        .into());
                }
            },
            "replication_mode" => {
                if bool_value(f, e)? {
                    return Err(cannot(
                        f,
                        e,
                        "native replication sends every write to several nodes",
                        "import a copy without replication_mode",
                    ));
                }
            }
            "client_idle_limit" | "child_max_connections" | "reserved_connections" => {
                let v = if key == "client_idle_limit" {
                    seconds_value(f, e, u64::from(u32::MAX))?
                } else {
                    int_value(f, e, 0, u64::from(u32::MAX), "0 is pgpool-II's default")?
                };
                if v > 0 {
                    let why = match key {
                        "client_idle_limit" => {
                            "pgpool-II cuts a client idle that long and discards its cached backend with its locks (docs/pgpool.md §6); the model does not predict that yet"
                        }
                        "child_max_connections" => {
                            "a child exits after that many clients, closing its cached backend; the model does not predict that yet"
                        }
                        _ => {
                            "with reserved connections a client finding every child busy is refused (53300) instead of waiting (docs/pgpool.md §3); the model does not predict that yet"
                        }
                    };
                    return Err(cannot(
                        f,
                        e,
                        why,
                        &format!("import a copy with {key} = 0 (pgchaos runs with 0)"),
                    ));
                }
            }
            "process_management_mode" => {
                if !e.value.eq_ignore_ascii_case("static") {
                    return Err(cannot(
                        f,
                        e,
                        "dynamic process management spawns and retires children by load; not examined (docs/pgpool.md §13)",
                        "import a copy with process_management_mode = static",
                    ));
                }
            }
            _ => self.unused(f, e, version)?,
        }
        Ok(())
    }

    /// Drops or ignores a key pgchaos does not map, with one comment; refuses an unknown key
    /// one typo away from a pooling key, or a known one in another case (pgpool-II would
    /// ignore either and run with its default).
    fn unused(&mut self, f: &ConfFile, e: &Entry, version: &str) -> Result<()> {
        let key = e.key.as_str();
        let dropped = &mut self.dropped;
        match key {
            "process_management_strategy" | "min_spare_children" | "max_spare_children" => {
                dropped.push(format!(
                    "# dropped {key} = {}: only used with process_management_mode = dynamic",
                    e.value
                ));
            }
            "master_slave_mode" | "master_slave_sub_mode" | "black_function_list"
            | "white_function_list" => {
                dropped.push(format!(
                    "# ignored {key} = {}: a name from before pgpool-II 4.2, which {version} does not read either (it logs \"unrecognized configuration parameter\")",
                    e.value
                ));
            }
            _ if is_routing(key) => dropped.push(format!(
                "# ignored {key} = {}: it decides which node a statement goes to, and every lock call goes to the primary here",
                shown(&e.value)
            )),
            _ => {
                if let Some(why) = harness_reason(key) {
                    if is_secret(key) {
                        dropped.push(format!("# dropped {key} (value not shown): {why}"));
                    } else {
                        dropped.push(format!("# dropped {key} = {}: {why}", shown(&e.value)));
                    }
                    return Ok(());
                }
                if is_known(key) {
                    dropped.push(format!(
                        "# ignored {key} = {}: not a pooling setting pgchaos models",
                        e.value
                    ));
                    return Ok(());
                }
                let close = crate::topology::close_matches(key, POOLING.iter().copied());
                let lower = key.to_ascii_lowercase();
                if lower != key && is_known(&lower) {
                    return Err(f
                        .at_key(
                            e,
                            format!("unknown pgpool-II setting `{key}`: pgpool-II's names are lower case, and it would ignore this one"),
                            vec![crate::topology::did_you_mean(&[lower.as_str()])],
                        )
                        .into());
                }
                if !close.is_empty() {
                    return Err(f
                        .at_key(
                            e,
                            format!("unknown pgpool-II setting `{key}`: pgpool-II would ignore it and run with its default"),
                            vec![crate::topology::did_you_mean(&close)],
                        )
                        .into());
                }
                dropped.push(format!(
                    "# ignored {key}: not a pgpool-II {version} setting (pgpool-II ignores it too)"
                ));
            }
        }
        Ok(())
    }

    /// Load balancing over the file's backends (`nodes`): more than one standby is refused,
    /// and so is a function list that sends lock calls to a balanced standby; a note says
    /// where statements go. Whether the standby is balanced over.
    fn balance(
        &mut self,
        f: &ConfFile,
        entries: &[Entry],
        nodes: &[u32],
        last: &BTreeMap<&str, &Entry>,
    ) -> Result<bool> {
        let (load_balance, notes) = (self.load_balance, &mut self.notes);
        // Load balancing: on is pgpool-II's default; with one backend there is nothing to balance.
        let lb_on = load_balance.is_none_or(|e| parse_bool(&e.value) == Some(true));
        if nodes.len() > 2 {
            let e = node_entry(entries, nodes[2]);
            return Err(f
                .at_key(
                    e,
                    format!(
                        "{} backends: pgchaos runs a primary and at most one standby",
                        nodes.len()
                    ),
                    vec![
                        "import a copy with backend 0 (the primary) and at most one standby".into(),
                    ],
                )
                .into());
        }
        // A standby with load balancing: modelled with both function lists empty (every
        // advisory lock function is volatile, so lock calls go to the primary; docs/pgpool.md §7).
        let balanced = nodes.len() == 2 && lb_on;
        if balanced {
            // (`black_function_list`, `white_function_list`: names 4.2 dropped, which 4.3 ignores.)
            let lists = ["write_function_list", "read_only_function_list"];
            if let Some(e) = lists
                .iter()
                .filter_map(|k| last.get(k))
                .find(|e| !e.value.trim().is_empty())
            {
                return Err(cannot(
                    f,
                    e,
                    "with a standby and load balancing, this list sends an application's `SELECT pg_try_advisory_lock(k)` to the standby, where it locks nothing on the primary (docs/pgpool.md §7 LB2, LB3); the model keeps one lock table (§17)",
                    &format!(
                        "import a copy with {} = '' (every lock call then goes to the primary), or with load_balance_mode = off",
                        e.key
                    ),
                ));
            }
            notes.push(match load_balance {
                Some(e) => format!(
                    "# load_balance_mode = {} (line {}) over the primary and the standby: both function lists are empty, so every lock call goes to the primary",
                    e.value, e.line
                ),
                None => "# load_balance_mode is not set (pgpool-II's default: on): balanced over the primary and the standby; both function lists are empty, so every lock call goes to the primary".into(),
            });
        } else if nodes.len() == 2 {
            notes.push(
                "# the file names a standby; without load balancing pgpool-II sends every statement to the primary, which is all pgchaos runs"
                    .into(),
            );
        } else if lb_on {
            notes.push(match load_balance {
                Some(e) => format!(
                    "# load_balance_mode = {} (line {}): with one backend there is nothing to balance",
                    e.value, e.line
                ),
                None => "# load_balance_mode is not set (pgpool-II's default: on): with one backend there is nothing to balance".into(),
            });
        }
        Ok(balanced)
    }

    /// The settings to write: pgpool-II's defaults for what the file leaves out (each with a
    /// note), and PostgreSQL's `max_connections` raised where the children's backends need it.
    fn settle(self, balanced: bool) -> Written {
        let mut notes = self.notes;
        let num_init_children = self.num_init_children.unwrap_or_else(|| {
            notes.push(format!(
                "# num_init_children is not set: pgpool-II's default, {PGPOOL_NUM_INIT_CHILDREN}"
            ));
            PGPOOL_NUM_INIT_CHILDREN
        });
        let max_pool = self.max_pool.unwrap_or_else(|| {
            notes.push(format!(
                "# max_pool is not set: pgpool-II's default, {PGPOOL_MAX_POOL}"
            ));
            PGPOOL_MAX_POOL
        });
        let reset_query_list = self.reset_query_list.unwrap_or_else(|| {
            notes.push(format!(
                "# reset_query_list is not set: pgpool-II's default, {}",
                super::section::DEFAULT_RESET_QUERY_LIST
            ));
            super::section::DEFAULT_RESET_QUERY_LIST.into()
        });
        let child_life_time = self.child_life_time.unwrap_or_else(|| {
            notes.push(format!(
                "# child_life_time is not set: pgpool-II's default, {PGPOOL_CHILD_LIFE_TIME}"
            ));
            PGPOOL_CHILD_LIFE_TIME
        });
        let connection_life_time = self.connection_life_time.unwrap_or(0);
        if num_init_children < u64::from(CLIENTS) {
            notes.push(format!(
                "# {num_init_children} children for {CLIENTS} clients: a client finding every child busy waits outside pgpool-II (docs/pgpool.md §3)"
            ));
        }
        let pool = num_init_children;
        let max_connections =
            (pool + PG_RESERVED > PG_DEFAULT_MAX_CONNECTIONS).then_some(pool + PG_RESERVED);
        Written {
            num_init_children,
            max_pool,
            reset_query_list,
            child_life_time,
            connection_life_time,
            balanced,
            max_connections,
            notes,
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;
