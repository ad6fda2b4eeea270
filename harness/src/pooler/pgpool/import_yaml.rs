//! The topology YAML an import of a `pgpool.conf` writes (import.rs reads the file and
//! settles the settings).

use super::section::PgpoolSection;
use crate::pooler::Origin;
use crate::pooler::import::yaml_quote;
use crate::topology::PoolerSection;

/// The PostgreSQL release the written topology declares.
pub(super) const POSTGRES_VERSION: &str = "18.6";
/// `workload.clients` of the written topology (pgpool-caching.yaml's).
pub(super) const CLIENTS: u32 = 4;

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
    let mut y = String::new();
    y.push_str(&format!(
        "# Imported by `pgchaos import` from {} at {}.\n",
        origin.ini.display(),
        origin.when
    ));
    y.push_str(
        "# pgpool.conf's pooling settings; what the harness controls itself is dropped with a comment.\n\
         # Reference for every key: docs/topology.md; pgpool-II's rules: docs/pgpool.md §11.\n\n",
    );
    y.push_str(&format!("name: {}\n", origin.name));
    y.push_str(&format!(
        "description: {}\n\n",
        yaml_quote(&format!(
            "pgpool-II settings imported from {}.",
            origin
                .ini
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
    ));
    y.push_str(&format!("postgres:\n  version: \"{POSTGRES_VERSION}\"\n"));
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
    y.push_str(&format!(
        "\nworkload:\n  clients: {CLIENTS}\n  keys: [4242424242, 612001]\n  api: session\n  steps: 1..40\n  lock_timeout: 1ms\n"
    ));
    y.push_str("\nrun:\n  cases: 256\n  seed: random\n  time_limit: 60s\n");
    y.push_str(
        "\n# Fill this in after a first run (`pgchaos chaos FILE`): list the app.* invariants the\n\
         # verdict table shows as violated and that you accept, e.g.\n\
         #   app.no_orphans: violated\n\
         # Anything not listed is expected to hold.\nexpect:\n",
    );
    y
}
