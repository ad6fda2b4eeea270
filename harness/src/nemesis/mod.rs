//! The nemesis: faults, beside the clients. Each fault kind is one small unit: how it is
//! started against the live cluster, and how its effect is confirmed before the run goes on.
//! Today: `terminate` and `cancel` of one backend, by identity, from a direct superuser
//! connection (the workload names them as steps: `C2 terminate` acts on the backend that
//! last served C2). The launcher's process controls (stop, kill, pause, resume, restart)
//! are the next kinds.
//!
//! May import `vocab`, `sql`, `launch`, `client` (the bounded query call), `observe`.

use crate::client::{Raw, run_raw};
use crate::launch::{Cluster, SUPERUSER, connect};
use crate::observe::{backoff, process_running};
use crate::sql;
use crate::vocab::{BackendId, Op, Reply};
use anyhow::{Context, Result, bail};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// A fault, with its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `pg_terminate_backend`, confirmed by the identity leaving `pg_stat_activity`.
    Terminate(BackendId),
    /// `pg_cancel_backend`: cancels the backend's running statement, if any.
    Cancel(BackendId),
}

impl Fault {
    /// The fault for a workload op aimed at `target`.
    pub fn for_op(op: Op, target: BackendId) -> Option<Fault> {
        match op {
            Op::Terminate => Some(Fault::Terminate(target)),
            Op::Cancel => Some(Fault::Cancel(target)),
            _ => None,
        }
    }

    pub fn op(&self) -> Op {
        match self {
            Fault::Terminate(_) => Op::Terminate,
            Fault::Cancel(_) => Op::Cancel,
        }
    }

    pub fn target(&self) -> BackendId {
        match self {
            Fault::Terminate(t) | Fault::Cancel(t) => *t,
        }
    }
}

/// The nemesis's own direct connection.
pub struct Nemesis {
    pg: Client,
    local_processes: bool,
}

impl Nemesis {
    pub async fn connect(cluster: &Cluster) -> Result<Nemesis> {
        Ok(Nemesis {
            pg: connect(&cluster.socket_config(SUPERUSER))
                .await
                .context("nemesis: connecting to PostgreSQL")?,
            local_processes: cluster.servers.local(),
        })
    }

    async fn rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let Raw { rows, error } = run_raw(&self.pg, sql).await;
        match error {
            None => Ok(rows),
            Some((code, msg)) => bail!("nemesis query failed ({code}: {msg}): {sql}"),
        }
    }

    /// Start a fault and confirm its effect. The reply is what the admin function returned
    /// (`true`: the backend was there and was signalled).
    pub async fn run(&self, fault: Fault) -> Result<Reply> {
        match fault {
            Fault::Terminate(id) => self.terminate(id).await,
            Fault::Cancel(id) => {
                let rows = self.rows(&sql::cancel(id.pid, id.start_us)).await?;
                Ok(Reply::Bool {
                    value: rows.first().and_then(|r| r[0].as_deref()) == Some("t"),
                })
            }
        }
    }

    /// `pg_terminate_backend` of exactly this identity, confirmed by its leaving
    /// `pg_stat_activity` within a bounded wait (with local servers, after its process has
    /// exited).
    async fn terminate(&self, id: BackendId) -> Result<Reply> {
        let rows = self.rows(&sql::terminate(id.pid, id.start_us)).await?;
        let Some(row) = rows.first() else {
            return Ok(Reply::Bool { value: false });
        };
        let signalled = row[0].as_deref() == Some("t");
        let deadline = Instant::now() + Duration::from_secs(5);
        if self.local_processes {
            // Watch the process itself first: a /proc read costs no query, so the poll does
            // not take the CPU from the backend it waits for. The query below confirms.
            let mut polls = 0u32;
            while process_running(id.pid) {
                if Instant::now() > deadline {
                    bail!("backend {id} still running 5 s after pg_terminate_backend");
                }
                polls += 1;
                // 50 us steps for the first few milliseconds (an exit takes 1-3 ms here),
                // then the runtime's timer, so a stuck exit does not block the thread.
                if polls <= 60 {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let present = self
                .rows(&sql::backend_present(id.pid, id.start_us))
                .await?;
            if present.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!("backend {id} still present 5 s after pg_terminate_backend");
            }
            backoff(attempt).await;
        }
        Ok(Reply::Bool { value: signalled })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_come_from_their_ops() {
        let t = BackendId {
            pid: 1,
            start_us: 2,
        };
        assert_eq!(Fault::for_op(Op::Terminate, t), Some(Fault::Terminate(t)));
        assert_eq!(Fault::for_op(Op::Cancel, t).unwrap().op(), Op::Cancel);
        assert_eq!(Fault::for_op(Op::TryLock, t), None);
        assert_eq!(Fault::Cancel(t).target(), t);
    }
}
