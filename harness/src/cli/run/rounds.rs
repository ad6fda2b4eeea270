//! Every round starts from the database as it was before the first: before round 1 the
//! harness's database is copied into a template (`CREATE DATABASE ... TEMPLATE`), each round
//! runs on a fresh copy of that template (`chaos_r1`, `chaos_r2`, ...) and the copy is dropped
//! after the round (`WITH (FORCE)`: the pooler's idle servers of that database were opened for
//! the round's clients), the template at the end. The pooler routes the round's name through
//! its fallback entry (PgBouncer's `*`, written for every run; pgpool-II passes any name on).
//! All of it on a superuser connection to the `postgres` database, so the copied database has
//! no session of the harness's own.
//!
//! The harness gives its client role timeouts for its own generated workloads (`lock_timeout`
//! from `workload.lock_timeout_ms`, a `statement_timeout` from its longest op): a user's tool
//! must not run under them. In a round's database the role gets what the topology's
//! `postgres.settings` declare for these three, else PostgreSQL's defaults (0: none), with
//! `ALTER ROLE ... IN DATABASE` (which takes precedence over the role's own settings).

use crate::launch::{self, Cluster, IO_TIMEOUT};
use anyhow::{Context, Result, bail};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// The template's name.
pub const TEMPLATE: &str = "pgchaos_run_template";

/// Round `r`'s database.
pub fn database(r: u32) -> String {
    format!("{}_r{r}", launch::DB)
}

/// The superuser's connection that creates and drops the databases.
pub struct Databases {
    client: Client,
    template: bool,
}

impl Databases {
    pub async fn open(cluster: &Cluster) -> Result<Databases> {
        let mut cfg = cluster.socket_config(launch::SUPERUSER);
        cfg.dbname("postgres");
        let client = launch::connect(&cfg)
            .await
            .context("connecting to PostgreSQL to make the rounds' databases")?;
        Ok(Databases {
            client,
            template: false,
        })
    }

    async fn exec(&self, sql: &str) -> Result<()> {
        match tokio::time::timeout(Duration::from_secs(30), self.client.batch_execute(sql)).await {
            Ok(r) => r.with_context(|| format!("running {sql:?}")),
            Err(_) => bail!("{sql:?} did not finish within 30 s"),
        }
    }

    /// Copy the harness's database into the template (retried while something still has a
    /// session there, at most [`IO_TIMEOUT`]).
    pub async fn take_template(&mut self) -> Result<()> {
        let sql = format!(
            "CREATE DATABASE {TEMPLATE} TEMPLATE {db} OWNER {role}",
            db = launch::DB,
            role = launch::CLIENT_ROLE
        );
        let t0 = Instant::now();
        loop {
            match self.exec(&sql).await {
                Ok(()) => break,
                Err(e)
                    if t0.elapsed() < IO_TIMEOUT && format!("{e:#}").contains("being accessed") =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e).context("taking the template of the rounds' database"),
            }
        }
        self.template = true;
        Ok(())
    }

    /// Round `r`'s fresh database; `declared`: the topology's `postgres.settings`.
    pub async fn create(
        &self,
        r: u32,
        declared: &std::collections::BTreeMap<String, String>,
    ) -> Result<String> {
        let db = database(r);
        let role = launch::CLIENT_ROLE;
        self.exec(&format!(
            "CREATE DATABASE {db} TEMPLATE {TEMPLATE} OWNER {role}"
        ))
        .await?;
        self.exec(&role_settings(&db, declared)).await?;
        Ok(db)
    }

    /// Drop round `r`'s database.
    pub async fn drop_round(&self, r: u32) -> Result<()> {
        self.exec(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            database(r)
        ))
        .await
    }

    /// Drop the template.
    pub async fn finish(self) -> Result<()> {
        if self.template {
            self.exec(&format!("DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)"))
                .await?;
        }
        Ok(())
    }
}

/// The client role's timeouts in database `db` (see the module doc). The values are the
/// topology's (already checked as settings when it was read) quoted as SQL literals.
pub fn role_settings(db: &str, declared: &std::collections::BTreeMap<String, String>) -> String {
    [
        "lock_timeout",
        "statement_timeout",
        "idle_in_transaction_session_timeout",
    ]
    .iter()
    .map(|k| {
        let v = declared
            .get(*k)
            .map_or("0".to_string(), |v| v.replace('\'', "''"));
        format!(
            "ALTER ROLE {role} IN DATABASE {db} SET {k} = '{v}'",
            role = launch::CLIENT_ROLE
        )
    })
    .collect::<Vec<_>>()
    .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_gets_the_declared_timeouts_or_none() {
        let mut declared = std::collections::BTreeMap::new();
        declared.insert("statement_timeout".to_string(), "5s".to_string());
        let sql = role_settings("chaos_r2", &declared);
        assert_eq!(
            sql,
            "ALTER ROLE chaos IN DATABASE chaos_r2 SET lock_timeout = '0'; \
             ALTER ROLE chaos IN DATABASE chaos_r2 SET statement_timeout = '5s'; \
             ALTER ROLE chaos IN DATABASE chaos_r2 SET idle_in_transaction_session_timeout = '0'"
        );
    }
}
