//! The native launcher's failover (`postgres.standby: true`): the streaming standby made by
//! `pg_basebackup` and started like the primary, the fenced primary, the promote, the pooler
//! repointed to the new primary, and a new standby in the fenced one's place.

use super::super::process::{READY_TIMEOUT, Server, log_tail, spawn_server};
use super::super::{BoxFuture, Failover};
use super::*;

impl NativeServers {
    /// Make the streaming standby: `pg_basebackup -R -X stream` of the running primary over
    /// its Unix socket into `<run_dir>/standby` (as the servers' OS user, in its own process
    /// group, bounded), then start it like the primary and wait until it answers in recovery.
    pub(super) async fn start_standby(&mut self) -> Result<()> {
        let dir = self.standby_data.clone();
        self.standbys_made += 1;
        let log = self.run_dir.join("pg_basebackup.log");
        let bin = self.pg_bin.join("pg_basebackup");
        let mut cmd = Command::new(&bin);
        cmd.arg("--pgdata")
            .arg(&dir)
            .args([
                "--write-recovery-conf",
                "--wal-method=stream",
                "--checkpoint=fast",
                "--no-sync",
                "--no-password",
            ])
            .arg("--host")
            .arg(&self.run_dir)
            .arg("--port")
            .arg(self.pg_port.to_string())
            .args(["--username", SUPERUSER]);
        let mut child = spawn_server(cmd, &self.run_dir, &log, self.os_user)
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id() as i32;
        if let Some(r) = self.reaper.as_mut() {
            r.watch(pid);
        }
        let deadline = Instant::now() + BASEBACKUP_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                _ => {
                    // SAFETY: SIGKILL to the process group of a child we spawned.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                    let _ = child.wait();
                    break None;
                }
            }
        };
        if let Some(r) = self.reaper.as_mut() {
            r.forget(pid);
        }
        match status {
            Some(st) if st.success() => {}
            Some(st) => bail!(
                "pg_basebackup of the primary into {} failed ({st})\n  last lines of its log:\n{}",
                dir.display(),
                log_tail(&log, 15)
            ),
            None => bail!(
                "pg_basebackup of the primary into {} did not finish within {BASEBACKUP_TIMEOUT:?}\n  last lines of its log:\n{}",
                dir.display(),
                log_tail(&log, 15)
            ),
        }
        self.start_node(Node::Standby, None).await
    }

    /// Fence the primary before a promote: immediate stop (SIGQUIT, then SIGKILL to its
    /// group), and an error unless it has exited and been reaped.
    pub(super) fn fence_primary(&mut self) -> Result<()> {
        if let Some(mut s) = self.pg.take() {
            let pid = s.pid();
            s.stop();
            if s.exited().is_none() {
                let tail = s.log_tail(15);
                self.pg = Some(s);
                bail!(
                    "fencing the primary: postmaster pid {pid} did not exit after SIGQUIT and SIGKILL; not promoting\n  last lines of its log:\n{tail}"
                );
            }
            if let Some(r) = self.reaper.as_mut() {
                r.forget(pid);
            }
        }
        if !self.fenced_logs.contains(&self.pg_log) {
            self.fenced_logs.push(self.pg_log.clone());
        }
        Ok(())
    }

    /// Promote the standby (the primary fenced already) and make it the primary.
    pub(super) async fn promote_standby(&mut self) -> Result<()> {
        let port = self
            .standby_port
            .ok_or_else(|| anyhow!("no standby in this topology"))?;
        let log = self.standby_log.clone();
        let tail = || log_tail(&log, 15);
        if let Some(status) = self.standby.as_mut().and_then(Server::exited) {
            bail!(
                "the standby (port {port}) is not running ({status}); cannot promote\n  last lines of its log:\n{}",
                tail()
            );
        }
        let admin = connect(&self.config(true, port, SUPERUSER, DB))
            .await
            .with_context(|| format!("connecting to the standby on port {port} to promote it"))?;
        let wait = PROMOTE_TIMEOUT.as_secs() - 5;
        let promoted = tokio::time::timeout(
            PROMOTE_TIMEOUT,
            admin.simple_query(&format!("SELECT pg_promote(true, {wait})")),
        )
        .await;
        let answer = match promoted {
            Ok(Ok(msgs)) => msgs.into_iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            }),
            Ok(Err(e)) => bail!(
                "pg_promote on the standby (port {port}) failed: {e}\n  last lines of its log:\n{}",
                tail()
            ),
            Err(_) => bail!(
                "pg_promote on the standby (port {port}) gave no answer within {PROMOTE_TIMEOUT:?}\n  last lines of its log:\n{}",
                tail()
            ),
        };
        if answer.as_deref() != Some("t") {
            bail!(
                "pg_promote on the standby (port {port}) returned {answer:?}, not true: not promoted within {wait} s\n  last lines of its log:\n{}",
                tail()
            );
        }
        // pg_promote(true) returns once recovery has ended; see it from a fresh session.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let probe = async {
                let c = connect(&self.config(true, port, SUPERUSER, DB)).await?;
                simple_first(&c, "SELECT pg_is_in_recovery()").await
            };
            match probe.await {
                Ok(v) if v == "f" => break,
                r if Instant::now() > deadline => bail!(
                    "the promoted standby (port {port}) is still not out of recovery after {READY_TIMEOUT:?} (last: {r:?})\n  last lines of its log:\n{}",
                    tail()
                ),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        self.pg = self.standby.take();
        self.standby_port = None;
        self.pg_port = port;
        self.pg_data = self.standby_data.clone();
        self.pg_log = log;
        Ok(())
    }

    /// Point the pooler at the current primary: rewrite its config, reload it, and confirm
    /// that a client connection through it reaches that primary. The confirmation waits up
    /// to [`READY_TIMEOUT`], which covers PgBouncer's default `server_login_retry` (15 s: a
    /// pool whose last server login failed, e.g. a client came in while no primary was up,
    /// waits that long before connecting again).
    pub(super) async fn repoint_pooler(&mut self) -> Result<()> {
        let (Some(port), Some(at)) = (self.pooler_port, self.console_at()) else {
            return Ok(());
        };
        if self.pooler_proc.is_none() {
            // Stopped by a control: its next start renders the config for the new primary.
            return Ok(());
        }
        self.write_pooler_config(port)?;
        let pooler_log = self.run_dir.join(self.pooler.log_file());
        let admin = self
            .pooler
            .console(&at)
            .await
            .context("connecting to the pooler's admin console to reload it")?;
        for cmd in self.pooler.reload_commands() {
            admin.command(&cmd).await.with_context(|| {
                format!(
                    "{cmd} on the pooler's admin console\n  last lines of its log:\n{}",
                    log_tail(&pooler_log, 15)
                )
            })?;
        }
        let want = self.pg_port.to_string();
        let client = self.config(true, port, CLIENT_ROLE, DB);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let probe = async {
                let c = connect(&client).await?;
                let port = simple_first(&c, "SELECT current_setting('port')").await?;
                let recovery = simple_first(&c, "SELECT pg_is_in_recovery()").await?;
                Ok::<_, anyhow::Error>((port, recovery))
            };
            let last = match probe.await {
                Ok((p, r)) if p == want && r == "f" => return Ok(()),
                Ok((p, r)) => format!("a client landed on port {p} (in recovery: {r})"),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "after a reload, a client through the pooler does not reach the new primary on port {want} within {READY_TIMEOUT:?} (last: {last})\n  last lines of its log:\n{}",
                    log_tail(&pooler_log, 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Failover for NativeServers {
    fn primary_port(&self) -> u16 {
        self.pg_port
    }

    fn promote(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.standby_port.is_none() {
                bail!("no standby in this topology (or it was promoted already)");
            }
            self.fence_primary()?;
            self.promote_standby().await?;
            self.repoint_pooler().await?;
            self.write_credentials()
        })
    }

    fn rebuild_standby(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.standby_port.is_some() {
                return Ok(());
            }
            if !self.topology.postgres.standby {
                bail!("no standby in this topology");
            }
            // The fenced primary's directory (the one the current primary does not use).
            let data = if self.pg_data == self.run_dir.join("data") {
                self.run_dir.join(STANDBY_DIR)
            } else {
                self.run_dir.join("data")
            };
            runtime::remove_sysv_segment(&data, runtime::server_uid(self.os_user), None);
            if data.exists() {
                fs::remove_dir_all(&data)
                    .with_context(|| format!("{}: removing the fenced primary", data.display()))?;
            }
            self.standby_data = data;
            self.standby_log = self
                .run_dir
                .join(format!("postgres-standby-{}.log", self.standbys_made + 1));
            self.start_standby().await
        })
    }
}
