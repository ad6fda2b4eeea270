//! The topology YAML an import of a `pgpool.conf` writes (import.rs reads the file and
//! settles the settings).

use super::section::PgpoolSection;
use crate::pooler::Origin;
use crate::pooler::import::{topology_head, topology_tail, yaml_quote};
use crate::topology::PoolerSection;

/// The settings an import writes in the `pgpool:` section, with the comments that go with them.
pub(super) struct Written {
    pub(super) num_init_children: u64,
    pub(super) max_pool: u64,
    pub(super) reset_query_list: String,
    pub(super) child_life_time: u64,
    pub(super) connection_life_time: u64,
    /// The file's standby is balanced over (`postgres.standby`, `load_balance_mode: true`).
    pub(super) balanced: bool,
    /// PostgreSQL's `max_connections`, where the default is too few for the children.
    pub(super) max_connections: Option<u64>,
    /// Comments on how the settings were read, written above them.
    pub(super) notes: Vec<String>,
    /// One comment per key dropped or ignored, written below them.
    pub(super) dropped: Vec<String>,
}

/// The topology: a header naming the file, `postgres:`, the `pgpool:` section with its notes,
/// settings and dropped keys, and a workload, a run and an `expect:` to fill in.
pub(super) fn topology(origin: &Origin, version: &str, written: &Written) -> String {
    let Written {
        num_init_children,
        max_pool,
        reset_query_list,
        child_life_time,
        connection_life_time,
        balanced,
        max_connections,
        notes,
        dropped,
    } = written;
    let pool = num_init_children;
    let mut y = topology_head(
        origin,
        "# pgpool.conf's pooling settings; what the harness controls itself is dropped with a comment.\n\
         # Reference for every key: docs/topology.md; pgpool-II's rules: docs/pgpool.md §11.\n",
        "pgpool-II",
    );
    if *balanced {
        y.push_str("  standby: true                # the file's backend 1, balanced over\n");
    }
    if let Some(mc) = max_connections {
        y.push_str(&format!(
            "  settings:\n    # raised so every child's cached backend ({pool}) fits beside the harness's connections\n    max_connections: {mc}\n"
        ));
    }
    y.push_str(&format!(
        "\n{}:\n  version: {}\n",
        PgpoolSection.key(),
        yaml_quote(version)
    ));
    for n in notes {
        y.push_str(&format!("  {n}\n"));
    }
    y.push_str(&format!("  num_init_children: {num_init_children}\n"));
    y.push_str(&format!("  max_pool: {max_pool}\n"));
    y.push_str(&format!(
        "  reset_query_list: {}\n",
        yaml_quote(reset_query_list)
    ));
    y.push_str(&format!("  child_life_time: {child_life_time}\n"));
    y.push_str(&format!("  connection_life_time: {connection_life_time}\n"));
    if *balanced {
        y.push_str("  load_balance_mode: true\n");
    }
    for d in dropped {
        y.push_str(&format!("  {d}\n"));
    }
    y.push_str(&topology_tail("app.no_orphans"));
    y
}
