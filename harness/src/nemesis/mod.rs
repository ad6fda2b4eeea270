//! The nemesis: faults, beside the clients. Each fault kind is one small unit: how it is
//! started against the live cluster, and how its effect is confirmed before the run goes on.
//! Client-step faults: `terminate` and `cancel` of one backend, by identity, from a direct
//! superuser connection (the workload names them as steps: `C2 terminate` acts on the
//! backend that last served C2). Faults of the servers (the topology's `faults` section,
//! [`Nemesis::server_fault`]): the pooler's admin console (as the pooler does each:
//! PgBouncer's PAUSE, RECONNECT, KILL, RELOAD), its process (restart, crash, freeze), PostgreSQL (fast or immediate restart) and one
//! backend (SIGKILL, freeze). Each is started, held for `faults.hold` when it holds, and
//! healed before the call returns; what it means for the model is `vocab::fault`. A frozen
//! process is continued on drop too, and the reaper kills a postmaster's children first, so
//! a fault interrupted by the harness's own death leaves nothing stopped behind. After a
//! fault that makes PgBouncer read its config again (RELOAD, restart, crash, a promote's
//! repoint), its `SHOW CONFIG` is compared with the topology: a difference is an error.
//!
//! May import `vocab`, `sql`, `launch`, `client` (the bounded query call), `observe`.

use crate::client::{Raw, run_raw};
use crate::launch::proxy::LinkMode;
use crate::launch::{Cluster, Control, Which, connect};
use crate::observe::{backoff, process_running, until_accepted};
use crate::sql;
use crate::vocab::backend::parse_timestamptz;
use crate::vocab::fault::{self, Down, Host, HostAction};
use crate::vocab::{BackendId, Op, Reply, ServerTime};
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

/// The nemesis's own direct connection (opened again after a fault restarts PostgreSQL).
pub struct Nemesis {
    pg: std::cell::RefCell<std::rc::Rc<Client>>,
    /// Its connection's config (a failover moves the primary to another port).
    config: std::cell::RefCell<tokio_postgres::Config>,
    local_processes: bool,
    /// Backends frozen by a fault in progress (continued on drop).
    frozen: std::cell::RefCell<Vec<i32>>,
    /// One fault at a time (Jepsen's nemesis is one process too): in the concurrent
    /// schedule two clients' fault steps may come due together.
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Drop for Nemesis {
    fn drop(&mut self) {
        // Local servers only: a container's frozen backend goes with its container.
        if !self.local_processes {
            return;
        }
        for pid in self.frozen.get_mut().drain(..) {
            signal(pid, libc::SIGCONT);
        }
    }
}

/// Signal a local process (a backend of the run's postmaster).
fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: a plain syscall on a pid the run owns (a backend of its postmaster).
    unsafe { libc::kill(pid, sig) == 0 }
}

impl Nemesis {
    pub async fn connect(cluster: &Cluster) -> Result<Nemesis> {
        let config = cluster.socket_config(cluster.observer_role());
        Ok(Nemesis {
            pg: std::cell::RefCell::new(std::rc::Rc::new(
                connect(&config)
                    .await
                    .context("nemesis: connecting to PostgreSQL")?,
            )),
            config: std::cell::RefCell::new(config),
            local_processes: cluster.local,
            frozen: std::cell::RefCell::new(vec![]),
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// Open the direct connection again if a fault closed it, retrying while PostgreSQL
    /// recovers (bounded: 30 s).
    pub async fn reconnect(&self) -> Result<()> {
        if !self.pg.borrow().is_closed() {
            return Ok(());
        }
        let config = self.config.borrow().clone();
        let c = until_accepted("nemesis", || connect(&config)).await?;
        *self.pg.borrow_mut() = std::rc::Rc::new(c);
        Ok(())
    }

    /// Start a fault of the servers, hold it for `hold` where it holds, heal it, and return
    /// once the servers accept connections again. `target`: the backend of `backend_kill` /
    /// `backend_freeze`. Replies `ok`; a fault that cannot be done is an error of the run.
    /// Its server time: PostgreSQL's time read just before the fault starts (every effect of
    /// the fault comes after it; none is bounded after, a pooler's servers close as they
    /// notice), of the clock then running.
    pub async fn server_fault(
        &self,
        cluster: &Cluster,
        op: Op,
        target: Option<BackendId>,
        hold: Duration,
        delay: Duration,
    ) -> Result<(Reply, Option<ServerTime>)> {
        let _one = self.one_at_a_time.lock().await;
        let time = self.clock_now().await.map(|(clock, lo)| ServerTime {
            clock,
            lo: Some(lo),
            hi: None,
        });
        let fault = ServerFault {
            cluster,
            op,
            target,
            hold,
            delay,
        };
        let reply = self.start_and_heal(&fault).await?;
        Ok((reply, time))
    }

    /// Start the fault `f`, hold it and heal it ([`Nemesis::server_fault`]). Replies `false`
    /// where the target backend is gone or cannot be signalled, and a timeout where a
    /// console fault's start failed.
    async fn start_and_heal(&self, f: &ServerFault<'_>) -> Result<Reply> {
        let ServerFault {
            cluster, op, hold, ..
        } = *f;
        if let Some(cf) = cluster.pooler.console_fault(op, cluster.pool_database()) {
            return self.console_fault(f, &cf.start, cf.heal.as_deref()).await;
        }
        match op {
            Op::PoolerRestart => {
                cluster.control(Which::Pooler, Control::Interrupt).await?;
                cluster.restart(Which::Pooler).await?;
            }
            Op::PoolerCrash => {
                cluster.control(Which::Pooler, Control::Kill).await?;
                cluster.restart(Which::Pooler).await?;
            }
            Op::PoolerFreeze => freeze(cluster, Which::Pooler, hold).await?,
            Op::PgRestart => {
                cluster.control(Which::Postgres, Control::Interrupt).await?;
                cluster.restart(Which::Postgres).await?;
            }
            Op::PgCrash => cluster.restart(Which::Postgres).await?,
            Op::LinkCut | Op::LinkBlackhole | Op::LinkDelay => link_fault(f).await?,
            Op::Promote => {
                cluster.promote().await?;
                *self.config.borrow_mut() = cluster.socket_config(cluster.observer_role());
            }
            Op::BackendKill => {
                if !self.backend_kill(f).await? {
                    return Ok(Reply::Bool { value: false });
                }
            }
            Op::BackendFreeze => {
                if !self.backend_freeze(f).await? {
                    return Ok(Reply::Bool { value: false });
                }
            }
            _ => host_fault(f).await?,
        }
        self.after_server_fault(cluster, op).await
    }

    /// A fault of the pooler's admin console: its commands `start`, then, where the fault
    /// holds, its commands `heal` after the hold.
    async fn console_fault(
        &self,
        f: &ServerFault<'_>,
        start: &[String],
        heal: Option<&[String]>,
    ) -> Result<Reply> {
        let ServerFault {
            cluster, op, hold, ..
        } = *f;
        // A deployment's: refused when anyone else is on the database now, and a PAUSE
        // or KILL is recorded first, so teardown and the reaper resume it whatever ends
        // the run before its RESUME.
        let pauses = matches!(op, Op::PoolerPause | Op::PoolerKill);
        let pg = self.pg.borrow().clone();
        crate::launch::external::before_console_fault(cluster, &pg, op, pauses).await?;
        let resumed = |ok: bool| {
            if ok && pauses && cluster.external.is_some() {
                crate::launch::external::clear_pause(cluster);
            }
        };
        match heal {
            // A fault that holds: started, held, healed whatever became of the start (a
            // PAUSE returns once every server is released and closed; a client holding
            // one in a long transaction can make it time out: the heal finds nothing
            // paused then, which is what it is for).
            Some(heal) => {
                let started = admin(cluster, start).await;
                tokio::time::sleep(hold).await;
                let healed = admin(cluster, heal).await;
                resumed(healed.is_ok());
                if started.is_ok() {
                    healed?;
                }
                if let Err(e) = started {
                    return Ok(Reply::Error {
                        code: crate::vocab::reply::code::TIMEOUT.into(),
                        message: format!("{e:#}"),
                    });
                }
            }
            None => {
                admin(cluster, start).await?;
                resumed(true);
            }
        }
        self.after_server_fault(cluster, op).await
    }

    /// The fault's target backend's pid, while it is still that backend; `None` when it is
    /// gone. By identity: a pid alone may be a zombie or, later, another backend.
    async fn backend_pid(&self, f: &ServerFault<'_>) -> Result<Option<i32>> {
        let op = f.op;
        let t = f
            .target
            .ok_or_else(|| anyhow::anyhow!("`{op}` needs a target backend"))?;
        let present = self.rows(&sql::backend_present(t.pid, t.start_us)).await?;
        // With local servers the process is checked too (a zombie is no target).
        let running = !self.local_processes || process_running(t.pid);
        Ok((!present.is_empty() && running).then_some(t.pid))
    }

    /// SIGKILL of the target backend, returning once PostgreSQL has begun resetting its
    /// backends. False where the backend was gone or could not be signalled.
    async fn backend_kill(&self, f: &ServerFault<'_>) -> Result<bool> {
        let Some(pid) = self.backend_pid(f).await? else {
            return Ok(false);
        };
        if !f.cluster.signal_backend(pid, libc::SIGKILL).await? {
            return Ok(false);
        }
        // The postmaster ends every other backend and recovers; wait until it has
        // begun (our connection is closed) before reconnecting.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut attempt = 0;
        while !self.pg.borrow().is_closed() {
            attempt += 1;
            let pg = self.pg.borrow().clone();
            let _ = run_raw(&pg, "SELECT 1").await;
            if Instant::now() > deadline {
                bail!(
                    "PostgreSQL did not reset its backends within 5 s of SIGKILL to backend {pid}"
                );
            }
            backoff(attempt).await;
        }
        Ok(true)
    }

    /// SIGSTOP of the target backend for the hold, then SIGCONT (continued on drop too,
    /// meanwhile). False where the backend was gone or could not be signalled.
    async fn backend_freeze(&self, f: &ServerFault<'_>) -> Result<bool> {
        let Some(pid) = self.backend_pid(f).await? else {
            return Ok(false);
        };
        if !f.cluster.signal_backend(pid, libc::SIGSTOP).await? {
            return Ok(false);
        }
        self.frozen.borrow_mut().push(pid);
        tokio::time::sleep(f.hold).await;
        f.cluster.signal_backend(pid, libc::SIGCONT).await?;
        self.frozen.borrow_mut().retain(|p| *p != pid);
        Ok(true)
    }

    /// After a fault of the servers: the pooler still runs what the topology declares, and
    /// the nemesis's own connection is open again.
    async fn after_server_fault(&self, cluster: &Cluster, op: Op) -> Result<Reply> {
        let pooler_started = fault::meaning(op).is_some_and(|m| m.down == Some(Down::Pooler));
        if pooler_started || matches!(op, Op::PoolerReload | Op::Promote) {
            // The pooler read its config again (a promote repoints it by a reload): it must
            // still run what the topology declares, or the model predicts another pooler.
            cluster
                .verify_pooler_config(&format!("after the nemesis's {op}"))
                .await?;
        }
        self.reconnect().await?;
        Ok(Reply::Ok)
    }

    /// PostgreSQL's clock (its postmaster's start) and its time now, read on the nemesis's
    /// direct connection. Evidence, not a step of the fault: where it cannot be read (the
    /// server is not answering), the fault goes on without it.
    async fn clock_now(&self) -> Option<(i64, i64)> {
        let now = self.rows(sql::CLOCK_NOW).await.ok()?;
        let at = |i: usize| now.first()?.get(i)?.as_deref().and_then(parse_timestamptz);
        at(0).zip(at(1))
    }

    async fn rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        // A fault of the servers (concurrent schedule: beside this call) may have restarted
        // PostgreSQL under the connection.
        self.reconnect().await?;
        let pg = self.pg.borrow().clone();
        let Raw { rows, error } = run_raw(&pg, sql).await;
        match error {
            None => Ok(rows),
            Some((code, msg)) => bail!("nemesis query failed ({code}: {msg}): {sql}"),
        }
    }

    /// Start a fault and confirm its effect. The reply is what the admin function returned
    /// (`true`: the backend was there and was signalled), with the server's time of the
    /// fault's effect ([`Signalled::time`]).
    pub async fn run(&self, fault: Fault) -> Result<(Reply, Option<ServerTime>)> {
        // Not while a fault of the servers restarts one (its connection would go under it).
        let _one = self.one_at_a_time.lock().await;
        match fault {
            Fault::Terminate(id) => self.terminate(id).await,
            Fault::Cancel(id) => {
                let sent = Signalled::read(&self.rows(&sql::cancel(id.pid, id.start_us)).await?);
                // A cancel takes effect when the backend next checks for interrupts: after
                // the time read before it was sent, at no bound known after it.
                Ok((Reply::Bool { value: sent.value }, sent.time(None)))
            }
        }
    }

    /// `pg_terminate_backend` of exactly this identity, confirmed by its leaving
    /// `pg_stat_activity` within a bounded wait (with local servers, after its process has
    /// exited). Its server time: the time read before the signal, and the server's time read
    /// once it was confirmed gone (its exit lies between them).
    async fn terminate(&self, id: BackendId) -> Result<(Reply, Option<ServerTime>)> {
        let rows = self.rows(&sql::terminate(id.pid, id.start_us)).await?;
        if rows.is_empty() {
            return Ok((Reply::Bool { value: false }, None));
        }
        let sent = Signalled::read(&rows);
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
        // A statement after the one that found it gone: its time is later.
        let after = self
            .clock_now()
            .await
            .filter(|(clock, _)| Some(*clock) == sent.clock)
            .map(|(_, t)| t);
        Ok((Reply::Bool { value: sent.value }, sent.time(after)))
    }
}

/// A signalling statement's row (`sql::signal_col`): whether the backend was there and was
/// signalled, and the server's clock and time read before the signal.
struct Signalled {
    value: bool,
    clock: Option<i64>,
    before: Option<i64>,
}

impl Signalled {
    fn read(rows: &[Vec<Option<String>>]) -> Signalled {
        use sql::signal_col::{BEFORE, CLOCK, SIGNALLED};
        let col = |i: usize| rows.first().and_then(|r| r.get(i)?.as_deref());
        Signalled {
            value: col(SIGNALLED) == Some("t"),
            clock: col(CLOCK).and_then(parse_timestamptz),
            before: col(BEFORE).and_then(parse_timestamptz),
        }
    }

    /// The fault's server time: from the time read before the signal to `after` (the server's
    /// time once its effect was confirmed, of the same clock), where the backend was signalled.
    fn time(&self, after: Option<i64>) -> Option<ServerTime> {
        if !self.value {
            return None;
        }
        Some(ServerTime {
            clock: self.clock?,
            lo: Some(self.before?),
            hi: after,
        })
    }
}

/// A fault of the servers and what it is started with ([`Nemesis::server_fault`]).
#[derive(Clone, Copy)]
struct ServerFault<'c> {
    cluster: &'c Cluster,
    op: Op,
    /// The backend of `backend_kill` / `backend_freeze`.
    target: Option<BackendId>,
    /// How long a fault that holds is held.
    hold: Duration,
    /// The link's delay, for `link_delay`.
    delay: Duration,
}

/// Run commands on the pooler's admin console, in order; the first that fails is the error.
async fn admin(cluster: &Cluster, cmds: &[String]) -> Result<()> {
    let console = cluster.console().await.context("nemesis")?;
    for cmd in cmds {
        console.command(cmd).await.with_context(|| {
            format!(
                "nemesis: {} admin command {cmd}",
                cluster.pooler.display_name()
            )
        })?;
    }
    Ok(())
}

/// A fault of the link proxy (cut, blackhole, delay) for the hold, then forwarding again.
async fn link_fault(f: &ServerFault<'_>) -> Result<()> {
    let ServerFault {
        cluster,
        op,
        hold,
        delay,
        ..
    } = *f;
    let mode = match op {
        Op::LinkCut => LinkMode::Cut,
        Op::LinkBlackhole => LinkMode::Blackhole,
        _ => LinkMode::Delay(delay),
    };
    let servers = cluster.servers.lock().await;
    let link = servers
        .link()
        .ok_or_else(|| anyhow::anyhow!("`{op}` needs the link proxy"))?;
    link.set_mode(mode);
    tokio::time::sleep(hold).await;
    link.set_mode(LinkMode::Forward);
    // Let the proxy's tasks see the heal before the run goes on.
    tokio::task::yield_now().await;
    Ok(())
}

/// A fault of a server's host (`vocab::fault::host`): frozen, killed (and started again),
/// restarted, or partitioned from its peer, for the hold. Containers only.
async fn host_fault(f: &ServerFault<'_>) -> Result<()> {
    let ServerFault {
        cluster, op, hold, ..
    } = *f;
    let Some((host, action)) = fault::host(op) else {
        bail!("`{op}` is not a fault of the servers")
    };
    if cluster.local {
        bail!(
            "`{op}` needs each server on its own host (launcher: docker); \
             launcher native runs them as processes of this machine"
        );
    }
    let which = match host {
        Host::Pooler => Which::Pooler,
        Host::Postgres => Which::Postgres,
    };
    match action {
        HostAction::Freeze => freeze(cluster, which, hold).await?,
        HostAction::Kill | HostAction::Restart => {
            cluster.control(which, Control::Kill).await?;
            if action == HostAction::Kill {
                tokio::time::sleep(hold).await;
            }
            // Started again (the host's filesystem kept), once it accepts.
            cluster.restart(which).await?;
        }
        HostAction::Partition(peer) => {
            cluster.partition(Some(peer)).await?;
            tokio::time::sleep(hold).await;
            cluster.partition(None).await?;
        }
    }
    Ok(())
}

/// Stop a server (native: SIGSTOP of its process; docker: its whole container by the
/// cgroup freezer) for `hold`, then continue it.
async fn freeze(cluster: &Cluster, which: Which, hold: Duration) -> Result<()> {
    cluster.control(which, Control::Pause).await?;
    tokio::time::sleep(hold).await;
    cluster.control(which, Control::Resume).await
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
