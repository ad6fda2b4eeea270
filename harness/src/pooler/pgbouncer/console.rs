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

    fn strangers<'a>(
        &'a self,
        db: &'a str,
        role: &'a str,
        tag: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<crate::pooler::Strangers>>> {
        Box::pin(async move { Ok(Some(view::strangers(&self.client, db, role, tag).await?)) })
    }
}

/// A database name as one word of the console's grammar (PgBouncer 1.25.2 `src/admin.c`:
/// `WORD` is `[0-9a-z_]+`, case-insensitive, or a double-quoted string with `""` for a
/// quote, unquoted by `copy_arg`): bare when it is a plain word, quoted otherwise.
pub fn word(db: &str) -> String {
    if !db.is_empty() && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        db.to_string()
    } else {
        format!("\"{}\"", db.replace('"', "\"\""))
    }
}

/// Admin console commands (PgBouncer's `admin.c`).
pub fn kill(db: &str) -> String {
    format!("KILL {}", word(db))
}
pub fn resume(db: &str) -> String {
    format!("RESUME {}", word(db))
}
pub fn pause(db: &str) -> String {
    format!("PAUSE {}", word(db))
}
pub fn reconnect(db: &str) -> String {
    format!("RECONNECT {}", word(db))
}
pub const RELOAD: &str = "RELOAD";
pub const SHOW_VERSION: &str = "SHOW VERSION";
pub const SHOW_CONFIG: &str = "SHOW CONFIG";

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_name_is_one_word_of_the_console() {
        assert_eq!(super::pause("chaos"), "PAUSE chaos");
        assert_eq!(super::pause("my app"), "PAUSE \"my app\"");
        assert_eq!(
            super::kill("a\"; SHUTDOWN; \""),
            "KILL \"a\"\"; SHUTDOWN; \"\"\""
        );
        assert_eq!(super::resume("Café"), "RESUME \"Café\"");
    }
}
