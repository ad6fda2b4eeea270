//! What a `launcher: external` run owns on a deployment it did not start, and the proof of
//! it before anything is touched.
//!
//! - **The lease.** The observer's role takes a session advisory lock on a key of the
//!   harness's own ([`LEASE_KEY`], two int4 halves: a space no workload key uses) on a
//!   connection of its own, held for the whole run. A second run against the same database
//!   finds it taken and is refused, naming the holder. The lock goes with the connection, so
//!   a run killed with SIGKILL leaves no lease behind.
//! - **The run's tag.** Every connection of the clients' role the run opens sets
//!   `application_name` to the run's tag (`pgchaos-<12 hex digits>`); the lease records the
//!   server's clock when it was taken ([`Ownership::since`]).
//! - **What is the run's.** A backend of the clients' role in the database, started after
//!   the lease, whose `application_name` is the tag or still empty (PgBouncer opens a
//!   server without the client's `application_name` and `SET`s it when it first links a
//!   client that has one: PgBouncer 1.25.2 `src/loader.c`, `src/varcache.c` `apply_var`),
//!   or (with an admin DSN) one of the pooler's servers of the run's pool (`SHOW SERVERS`),
//!   whatever its name. A session of the role opened after the lease without any
//!   `application_name` cannot be told from a server the pooler opened for the run.
//! - **A bystander** is any other backend of the clients' role (in any database), a client
//!   of the role on the pooler whose `application_name` is not the tag (`SHOW CLIENTS`), or
//!   another role's advisory lock in the database: the launch refuses, and a run that meets
//!   one at a case's reset stops ([`Stopped`]).
//!
//! Resets, teardown and the reaper terminate only what is the run's, by the row of
//! `pg_stat_activity` that names it (pid and backend_start read in the same statement).

use super::timed;
use anyhow::{Result, anyhow};
use std::path::Path;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The lease's key: `pg_try_advisory_lock(int4, int4)` (objsubid 2 in `pg_locks`), the
/// ASCII of "pgch" and "aos!".
pub const LEASE_KEY: (i32, i32) = (0x7067_6368, 0x616f_7321);

/// The file in the run directory that says a console fault paused a database (written
/// before the PAUSE or KILL, removed after its RESUME): teardown and the reaper resume it.
pub const PAUSE_RECORD: &str = "console-paused";

/// A run stopped because something it does not own appeared (the error's text says what).
#[derive(Debug)]
pub struct Stopped(pub String);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped: {}", self.0)
    }
}

impl std::error::Error for Stopped {}

/// The run's claim on the clients' role.
#[derive(Clone, Debug, PartialEq)]
pub struct Ownership {
    /// The clients' role (a plain identifier, checked when the DSN was read).
    pub role: String,
    /// The run's `application_name`.
    pub tag: String,
    /// The server's clock when the lease was taken, seconds since the epoch.
    pub since: f64,
}

/// A fresh tag for a run.
pub fn new_tag() -> String {
    let n: u64 = rand::random();
    format!("pgchaos-{:012x}", n & 0xffff_ffff_ffff)
}

/// Whether `s` is a tag [`new_tag`] makes (it is written into SQL).
pub fn is_tag(s: &str) -> bool {
    s.len() == 20 && s.starts_with("pgchaos-") && s[8..].chars().all(|c| c.is_ascii_hexdigit())
}

impl Ownership {
    /// The predicate on `pg_stat_activity a` of a backend that is the run's; `pooled`: the
    /// backend pids the pooler lists as servers of the run's pool (`None`: no console).
    fn ours(&self, pooled: Option<&[i32]>) -> String {
        // A server the pooler opened for the run's clients: one not yet given a client's
        // name (also one logging in, or closed by the pooler and still exiting, which its
        // console no longer lists), and with a console any it lists in the run's pool
        // (whatever its name: a role default or the pooler's database entry may set one).
        let empty = match pooled {
            None => "a.application_name = ''".to_string(),
            Some(p) => format!(
                "a.application_name = '' OR a.pid = ANY('{{{}}}'::int[])",
                p.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
            ),
        };
        format!(
            "a.usename = {} AND a.datname = current_database() \
             AND a.backend_start >= to_timestamp({:.6}) \
             AND (a.application_name = '{}' OR {empty})",
            crate::sql::literal(&self.role),
            self.since,
            self.tag
        )
    }

    /// Terminate the run's backends (one row per backend: pid, and whether it was signalled).
    pub fn terminate_sql(&self, pooled: Option<&[i32]>) -> String {
        format!(
            "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a \
             WHERE {} AND a.pid <> pg_backend_pid()",
            self.ours(pooled)
        )
    }

    /// How many of the run's backends are left.
    pub fn count_sql(&self, pooled: Option<&[i32]>) -> String {
        format!(
            "SELECT count(*) FROM pg_stat_activity a WHERE {}",
            self.ours(pooled)
        )
    }

    /// Advisory locks held by the run's backends.
    pub fn locks_sql(&self, pooled: Option<&[i32]>) -> String {
        format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND {} \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            self.ours(pooled)
        )
    }

    /// Backends of the clients' role (any database) that are not the run's: pid,
    /// backend_start, application_name, client address, database.
    pub fn bystanders_sql(&self, pooled: Option<&[i32]>) -> String {
        format!(
            "SELECT a.pid::text, a.backend_start::text, a.application_name, \
             coalesce(host(a.client_addr), 'local'), a.datname::text \
             FROM pg_stat_activity a WHERE a.usename = {} AND a.pid <> pg_backend_pid() \
             AND NOT ({}) ORDER BY a.backend_start",
            crate::sql::literal(&self.role),
            self.ours(pooled)
        )
    }
}

/// Rows of a simple query as text.
pub async fn rows(c: &Client, sql: &str) -> Result<Vec<Vec<String>>> {
    let mut out = vec![];
    for m in timed(c.simple_query(sql)).await? {
        if let SimpleQueryMessage::Row(r) = m {
            out.push(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("").to_string())
                    .collect(),
            );
        }
    }
    Ok(out)
}

/// Each bystander backend as one line: `(pid P, backend_start S) application_name "A"
/// from ADDR in database D`.
pub fn describe_backends(rows: &[Vec<String>]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "\n  (pid {}, backend_start {}) application_name {:?} from {} in database {}",
                r[0], r[1], r[2], r[3], r[4]
            )
        })
        .collect()
}

/// Take the lease on `lease` (the observer's role, a connection of its own). `Ok(since)`,
/// the server's clock then; an error naming the holder when another run has it.
pub async fn take_lease(lease: &Client, database: &str) -> Result<f64> {
    let (a, b) = LEASE_KEY;
    let got = rows(
        lease,
        &format!(
            "SELECT pg_try_advisory_lock({a}, {b})::text, extract(epoch FROM clock_timestamp())::text"
        ),
    )
    .await?;
    let row = got
        .first()
        .ok_or_else(|| anyhow!("the lease query returned no row"))?;
    if row[0] == "true" {
        return row[1]
            .parse::<f64>()
            .map_err(|e| anyhow!("the server's clock {:?}: {e}", row[1]));
    }
    let holders = rows(
        lease,
        &format!(
            "SELECT l.pid::text, coalesce(a.backend_start::text, '?'), \
             coalesce(a.application_name, '?'), coalesce(host(a.client_addr), 'local'), \
             coalesce(a.usename::text, '?') \
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {a} \
             AND l.objid = {b} AND l.objsubid = 2 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ),
    )
    .await?;
    let who: String = holders
        .iter()
        .map(|r| {
            format!(
                "\n  (pid {}, backend_start {}) application_name {:?} from {} as role {}",
                r[0], r[1], r[2], r[3], r[4]
            )
        })
        .collect();
    Err(anyhow!(
        "refusing to run: another pgchaos run holds the lease on database {database} (advisory lock ({a}, {b})); one run at a time uses a deployment, so runs against it interleave nothing: wait for it to end{who}"
    ))
}

/// The record of a paused database: `db` on the console at `console` (host:port).
pub fn write_pause_record(run_dir: &Path, db: &str, console: &str) -> Result<()> {
    std::fs::write(run_dir.join(PAUSE_RECORD), format!("{db}\n{console}\n"))?;
    Ok(())
}

/// The database a record says is paused, if one does.
pub fn read_pause_record(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .next()
        .map(str::to_string)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_key_is_the_one_the_sql_spells() {
        assert_eq!(LEASE_KEY, (1885823848, 1634693921));
        let foreign = crate::launch::external::FOREIGN_LOCKS;
        assert!(
            foreign.contains("l.classid = 1885823848 AND l.objid = 1634693921"),
            "{foreign}"
        );
    }

    #[test]
    fn tags_are_what_the_sql_may_hold() {
        let t = new_tag();
        assert!(is_tag(&t), "{t}");
        assert_ne!(t, new_tag());
        assert!(!is_tag("pgchaos-'; DROP x--"));
        assert!(!is_tag("pgchaos-0123456789ag"));
    }

    #[test]
    fn what_is_the_runs_needs_tag_role_and_time() {
        let o = Ownership {
            role: "pgchaos_client".into(),
            tag: "pgchaos-0123456789ab".into(),
            since: 1_700_000_000.25,
        };
        let t = o.terminate_sql(Some(&[11, 12]));
        assert!(t.contains("a.usename = 'pgchaos_client'"), "{t}");
        assert!(t.contains("to_timestamp(1700000000.250000)"), "{t}");
        assert!(
            t.contains("a.application_name = 'pgchaos-0123456789ab'"),
            "{t}"
        );
        assert!(t.contains("OR a.pid = ANY('{11,12}'::int[])"), "{t}");
        let none = o.count_sql(None);
        assert!(none.contains("OR a.application_name = ''"), "{none}");
        let b = o.bystanders_sql(None);
        assert!(b.contains("AND NOT (a.usename"), "{b}");
        // A role with a quote stays one literal: the predicate is not widened.
        let odd = Ownership {
            role: "o'brien' OR true OR 'x".into(),
            ..o
        };
        let t = odd.terminate_sql(None);
        assert!(
            t.contains("a.usename = 'o''brien'' OR true OR ''x' AND"),
            "{t}"
        );
    }

    #[test]
    fn a_pause_record_names_the_database() {
        let dir = std::env::temp_dir().join(format!("pgchaos-pause-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_pause_record(&dir, "app", "h:6432").unwrap();
        assert_eq!(
            read_pause_record(&dir.join(PAUSE_RECORD)).as_deref(),
            Some("app")
        );
        assert_eq!(read_pause_record(&dir.join("none")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
