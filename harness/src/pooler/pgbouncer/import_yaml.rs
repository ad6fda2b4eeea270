//! The topology YAML an import of a `pgbouncer.ini` writes (import.rs reads the ini and
//! settles the settings).

use crate::pooler::import::yaml_quote;
use crate::pooler::{Origin, PoolMode};

/// The PostgreSQL release the written topology declares.
pub(super) const POSTGRES_VERSION: &str = "18.6";
/// `workload.clients` of the written topology (transaction-mode.yaml's).
pub(super) const CLIENTS: u32 = 4;

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
    let mut y = String::new();
    y.push_str(&format!(
        "# Imported by `pgchaos import` from {} at {}.\n",
        origin.ini.display(),
        origin.when
    ));
    y.push_str(
        "# The ini's pooling settings; what the harness controls itself is dropped with a comment.\n\
         # Reference for every key: docs/topology.md.\n\n",
    );
    y.push_str(&format!("name: {}\n", origin.name));
    y.push_str(&format!(
        "description: {}\n\n",
        yaml_quote(&format!(
            "PgBouncer settings imported from {}.",
            origin
                .ini
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
    ));
    y.push_str(&format!("postgres:\n  version: \"{POSTGRES_VERSION}\"\n"));
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
    y.push_str(&format!(
        "\nworkload:\n  clients: {CLIENTS}\n  keys: [4242424242, 612001]\n  api: session\n  steps: 1..40\n  lock_timeout: 1ms\n"
    ));
    y.push_str("\nrun:\n  cases: 256\n  seed: random\n  time_limit: 60s\n");
    y.push_str(
        "\n# Fill this in after a first run (`pgchaos chaos FILE`): list the app.* invariants the\n\
         # verdict table shows as violated and that you accept, e.g.\n\
         #   app.mutual_exclusion: violated\n\
         # Anything not listed is expected to hold.\nexpect:\n",
    );
    y
}
