//! The topology YAML an import of a `pgbouncer.ini` writes (import.rs reads the ini and
//! settles the settings).

use crate::pooler::import::{topology_head, topology_tail, yaml_quote};
use crate::pooler::{Origin, PoolMode};

/// The settings an import writes in the `pgbouncer:` section, with the comments that go with
/// them.
pub(super) struct Written {
    pub(super) pool_mode: PoolMode,
    pub(super) default_pool_size: u64,
    pub(super) max_client_conn: u64,
    pub(super) reset_query: String,
    pub(super) reset_always: bool,
    /// `pgbouncer.settings`, sorted, values as YAML scalars.
    pub(super) settings: Vec<(String, String)>,
    /// The pool: default_pool_size + reserve_pool_size + min_pool_size.
    pub(super) pool: u64,
    /// PostgreSQL's `max_connections`, where the default is too few for the pool.
    pub(super) max_connections: Option<u64>,
    /// Comments on where the settings come from, written above them.
    pub(super) notes: Vec<String>,
    /// One entry per key dropped, with the reason, written below them.
    pub(super) dropped: Vec<String>,
}

/// The topology: a header naming the ini, `postgres:`, the `pgbouncer:` section with its
/// notes, settings and dropped keys, and a workload, a run and an `expect:` to fill in.
pub(super) fn topology(origin: &Origin, version: &str, written: &Written) -> String {
    let Written {
        pool_mode,
        default_pool_size,
        max_client_conn,
        reset_query,
        reset_always,
        settings,
        pool,
        max_connections,
        notes,
        dropped,
    } = written;
    let mut y = topology_head(
        origin,
        "# The ini's pooling settings; what the harness controls itself is dropped with a comment.\n\
         # Reference for every key: docs/topology.md.\n",
        "PgBouncer",
    );
    if let Some(mc) = max_connections {
        y.push_str(&format!(
            "  settings:\n    # raised so the pool ({pool} = default_pool_size + reserve_pool_size + min_pool_size) fits beside the harness's connections\n    max_connections: {mc}\n"
        ));
    }
    y.push_str(&format!(
        "\npgbouncer:\n  version: {}\n",
        yaml_quote(version)
    ));
    for n in notes {
        y.push_str(&format!("  {n}\n"));
    }
    y.push_str(&format!("  pool_mode: {}\n", pool_mode.as_str()));
    y.push_str(&format!("  default_pool_size: {default_pool_size}\n"));
    y.push_str(&format!("  max_client_conn: {max_client_conn}\n"));
    y.push_str(&format!(
        "  server_reset_query: {}\n",
        yaml_quote(reset_query)
    ));
    y.push_str(&format!("  server_reset_query_always: {reset_always}\n"));
    if !settings.is_empty() {
        y.push_str("  settings:\n");
        for (k, v) in settings {
            y.push_str(&format!("    {k}: {v}\n"));
        }
    }
    for d in dropped {
        y.push_str(&format!("  # dropped {d}\n"));
    }
    y.push_str(&topology_tail("app.mutual_exclusion"));
    y
}
