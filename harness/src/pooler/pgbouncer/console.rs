//! PgBouncer's admin console: the `pgbouncer` database on its port, the commands the harness
//! sends there (faults, the reset between cases, reloads) and what it reads (its view of the
//! connections, `SHOW CONFIG`, `SHOW VERSION`).

use super::view;
use crate::pooler::{BoxFuture, admin_query};

/// The admin console's database name.
pub const ADMIN_DB: &str = "pgbouncer";

/// PgBouncer's admin console: the `pgbouncer` database on its port (simple query protocol
/// only: `admin.c` answers anything else with 08P01 and closes the connection).
pub struct Console {
    pub(super) client: tokio_postgres::Client,
    /// Only this user's connections (a deployment's pool database that other roles share).
    pub(super) user: Option<String>,
}

impl crate::pooler::Console for Console {
    fn command<'a>(&'a self, cmd: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move { admin_query(&self.client, cmd).await.map(|_| ()) })
    }

    fn look<'a>(
        &'a self,
        db: &'a str,
        pools: bool,
    ) -> BoxFuture<'a, anyhow::Result<crate::pooler::view::Look>> {
        Box::pin(view::look(&self.client, db, self.user.as_deref(), pools))
    }

    fn settings(&self) -> BoxFuture<'_, anyhow::Result<Vec<(String, String)>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for m in admin_query(&self.client, SHOW_CONFIG).await? {
                if let tokio_postgres::SimpleQueryMessage::Row(row) = m {
                    let (Some(key), value) = (row.try_get("key")?, row.try_get("value")?) else {
                        continue;
                    };
                    out.push((key.to_string(), value.unwrap_or_default().to_string()));
                }
            }
            Ok(out)
        })
    }

    fn version(&self) -> BoxFuture<'_, anyhow::Result<String>> {
        Box::pin(async move {
            for m in admin_query(&self.client, SHOW_VERSION).await? {
                if let tokio_postgres::SimpleQueryMessage::Row(row) = m {
                    let text = row.get(0).unwrap_or_default();
                    return Ok(text.trim_start_matches("PgBouncer").trim().to_string());
                }
            }
            anyhow::bail!("{SHOW_VERSION} returned no row")
        })
    }

    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// Admin console commands (PgBouncer's `admin.c`).
pub fn kill(db: &str) -> String {
    format!("KILL {db}")
}
pub fn resume(db: &str) -> String {
    format!("RESUME {db}")
}
pub fn pause(db: &str) -> String {
    format!("PAUSE {db}")
}
pub fn reconnect(db: &str) -> String {
    format!("RECONNECT {db}")
}
pub const RELOAD: &str = "RELOAD";
pub const SHOW_VERSION: &str = "SHOW VERSION";
pub const SHOW_CONFIG: &str = "SHOW CONFIG";
