//! pgpool-II's admin console: PCP on its own loopback port, through the PCP tools unpacked
//! beside the running `pgpool` (found from the main process: the pid file in the run
//! directory, then `/proc/<pid>/exe`), with the run's `pcppass` file; and `SHOW POOL_VERSION`
//! on the pool port to database `postgres` (pgpool never caches a connection to it, so the
//! probe leaves no server behind; docs/pgpool.md §4). Every call is bounded by
//! `ADMIN_TIMEOUT`.
//!
//! In a container (`ConsoleAt::container`): the same PCP tools, those provisioned on this
//! host, against the PCP port published on loopback, with a `pcppass` file the console writes
//! into the run's private directory; pids a view names are mapped to this host's through
//! `/proc` (a process's cgroup names its container, `NSpid` its pid inside it): the children
//! to signal, the backends still alive.
//!
//! Commands the harness sends ([`crate::pooler::Console::command`]):
//! - `CLOSE_IDLE`: SIGUSR1 to every child with no client attached, which closes its idle
//!   cached connections (`close_idle_connection`, child.c:1142 of V4_3_5): the reset between
//!   cases;
//! - `RELOAD`: `pcp_reload_config`.

use super::config::{PCPPASS, PID_FILE};
use crate::pooler::{ADMIN_TIMEOUT, BoxFuture, ConsoleAt};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};

pub const CLOSE_IDLE: &str = "close idle connections";
pub const RELOAD: &str = "pcp_reload_config";
pub const SHOW_VERSION: &str = "SHOW POOL_VERSION";
pub const POOL_STATUS: &str = "pcp_pool_status";

/// An open console: where the PCP tools are, and how to reach PCP and the pool port.
pub struct Console {
    /// The main process of a local pgpool (`None` in a container: nothing the console keeps
    /// goes stale when pgpool restarts there).
    main_pid: Option<i32>,
    /// Where the packages were unpacked (`<root>/usr/sbin/pgpool`).
    sbin: PathBuf,
    libs: String,
    at: ConsoleAt,
    pcppass: PathBuf,
}

/// The main process's pid from the pid file (the pid and a NUL byte, main.c:686).
fn main_pid(dir: &Path) -> Result<i32> {
    let path = dir.join(PID_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: pgpool has not written its pid file", path.display()))?;
    text.trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .parse()
        .with_context(|| format!("{}: not a pid: {text:?}", path.display()))
}

impl Console {
    pub async fn open(at: &ConsoleAt) -> Result<Console> {
        if let Some(c) = &at.container {
            let (sbin, root) = super::provision::unpacked(&c.executable)?;
            let port = at
                .admin_port
                .ok_or_else(|| anyhow!("pgpool-II's PCP port is not published"))?;
            let pcppass = c.dir.join(PCPPASS);
            let text =
                super::config::pcppass(port, &at.user, at.password.as_deref().unwrap_or_default());
            // Through safe_fs like every credential file: a new file (O_EXCL, 0600, ours)
            // renamed over the name, so nothing planted there is followed or written through.
            crate::safe_fs::write_private(&c.dir, &pcppass, &text, None)?;
            return Ok(Console {
                main_pid: None,
                libs: root
                    .map(|r| super::provision::library_path(&r))
                    .unwrap_or_default(),
                sbin,
                pcppass,
                at: at.clone(),
            });
        }
        let dir = at.unix_dir.clone().ok_or_else(|| {
            anyhow!("pgpool-II's console needs the run directory (the native launcher)")
        })?;
        let main_pid = main_pid(&dir)?;
        let exe = std::fs::read_link(format!("/proc/{main_pid}/exe"))
            .with_context(|| format!("pgpool main process {main_pid} is not running"))?;
        let sbin = exe
            .parent()
            .ok_or_else(|| anyhow!("{}: no directory", exe.display()))?
            .to_path_buf();
        // <root>/usr/sbin/pgpool: the libraries are under <root>/usr/lib.
        let root = sbin
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| anyhow!("{}: not under <root>/usr/sbin", exe.display()))?;
        Ok(Console {
            main_pid: Some(main_pid),
            libs: super::provision::library_path(root),
            sbin,
            pcppass: dir.join(PCPPASS),
            at: at.clone(),
        })
    }

    /// Run PCP tool `tool` (its stdout).
    async fn pcp(&self, tool: &str, args: &[&str]) -> Result<String> {
        let port = self
            .at
            .admin_port
            .ok_or_else(|| anyhow!("pgpool-II's PCP port is not known"))?;
        let mut cmd = tokio::process::Command::new(self.sbin.join(tool));
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            &self.at.user,
            "-w",
        ])
        .args(args)
        .env("PCPPASSFILE", &self.pcppass)
        .env("LD_LIBRARY_PATH", &self.libs)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
        let out = tokio::time::timeout(ADMIN_TIMEOUT, cmd.output())
            .await
            .map_err(|_| anyhow!("{tool} timed out after {ADMIN_TIMEOUT:?}"))?
            .with_context(|| format!("running {tool}"))?;
        if !out.status.success() {
            bail!(
                "{tool} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn close_idle(&self) -> Result<()> {
        let text = self.pcp("pcp_proc_info", &["--verbose", "--all"]).await?;
        let here = self
            .at
            .container
            .as_ref()
            .map(|c| container_pids(&c.pooler));
        for (pid, connected) in super::view::children(&text) {
            if connected || pid <= 0 {
                continue;
            }
            let pid = match &here {
                None => pid,
                Some(map) => match map.get(&pid) {
                    Some(p) => *p,
                    // Gone since PCP listed it.
                    None => continue,
                },
            };
            // SAFETY: a signal to a pgpool child this run started (listed by its PCP).
            if unsafe { libc::kill(pid, libc::SIGUSR1) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    bail!("SIGUSR1 to pgpool child {pid}: {e}");
                }
            }
        }
        Ok(())
    }
}

impl crate::pooler::Console for Console {
    fn command<'a>(&'a self, cmd: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match cmd {
                CLOSE_IDLE => self.close_idle().await,
                RELOAD => self.pcp("pcp_reload_config", &[]).await.map(|_| ()),
                _ => bail!("pgpool-II's console has no command {cmd:?}"),
            }
        })
    }

    fn look<'a>(
        &'a self,
        db: &'a str,
        _pools: bool,
    ) -> BoxFuture<'a, Result<crate::pooler::view::Look>> {
        Box::pin(async move {
            let text = self.pcp("pcp_proc_info", &["--verbose"]).await?;
            let mut look = super::view::look(&text, db);
            match &self.at.container {
                None => super::view::drop_exited(&mut look, |pid| {
                    std::path::Path::new(&format!("/proc/{pid}")).exists()
                }),
                Some(c) if !look.servers.is_empty() => {
                    let alive = container_pids(&c.postgres);
                    super::view::drop_exited(&mut look, |pid| alive.contains_key(&pid));
                }
                Some(_) => {}
            }
            Ok(look)
        })
    }

    fn settings(&self) -> BoxFuture<'_, Result<Vec<(String, String)>>> {
        Box::pin(async move {
            let text = self.pcp(POOL_STATUS, &[]).await?;
            Ok(pool_status(&text))
        })
    }

    fn version(&self) -> BoxFuture<'_, Result<String>> {
        Box::pin(async move {
            // Ready means both: PCP answers (the harness's view), and the pool port (clients).
            self.pcp("pcp_node_count", &[]).await?;
            let client = crate::pooler::connect_pg(&self.at.pg_config("postgres")).await?;
            for m in crate::pooler::admin_query(&client, SHOW_VERSION).await? {
                if let tokio_postgres::SimpleQueryMessage::Row(row) = m {
                    let text = row.get(0).unwrap_or_default();
                    return Ok(text.split_whitespace().next().unwrap_or("").to_string());
                }
            }
            bail!("{SHOW_VERSION} returned no row")
        })
    }

    fn is_closed(&self) -> bool {
        self.main_pid
            .is_some_and(|p| !crate::provision::process_alive(p))
    }
}

/// The processes of container `id` on this host, by their pid inside it (the last of
/// `NSpid`) to their pid here. A process's `/proc/<pid>/cgroup` names its container's id
/// (cgroup v1 and v2, the cgroupfs and systemd drivers); the engine must run on this host, as
/// the docker launcher's bind mounts already require.
pub fn container_pids(id: &str) -> std::collections::HashMap<i32, i32> {
    let mut out = std::collections::HashMap::new();
    if id.is_empty() {
        return out;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(host) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{host}/cgroup")) else {
            continue;
        };
        if !cgroup.contains(id) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{host}/status")) else {
            continue;
        };
        if let Some(inner) = ns_pid(&status) {
            out.insert(inner, host);
        }
    }
    out
}

/// The innermost pid of a `/proc/<pid>/status` (`NSpid:\t<here>\t<inside>`).
fn ns_pid(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// `pcp_pool_status`'s `name : X` / `value: Y` / `desc : Z` blocks as `(name, value)`.
pub fn pool_status(text: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut name: Option<String> = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "name" => name = Some(v.trim().to_string()),
            "value" => {
                if let Some(n) = name.take() {
                    out.push((n, v.trim().to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_innermost_pid_is_the_container_s_own() {
        let status = "Name:\tpostgres\nTgid:\t15179\nNSpid:\t15179\t87\nNSpgid:\t15179\t1\n";
        assert_eq!(super::ns_pid(status), Some(87));
        assert_eq!(super::ns_pid("Name:\tx\nNSpid:\t4242\n"), Some(4242));
        assert_eq!(super::ns_pid("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_in_no_container_named_by_an_unknown_id() {
        assert!(super::container_pids("0123456789abcdef0123456789abcdef").is_empty());
        assert!(super::container_pids("").is_empty());
    }

    /// A symlink planted at the container console's `pcppass` is replaced, never written
    /// through: its target keeps its content, the name becomes a file of ours, mode 0600.
    #[tokio::test(flavor = "current_thread")]
    async fn a_symlink_planted_at_pcppass_is_replaced_not_followed() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("pgchaos-pcppass-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let exe = dir.join("pgpool");
        std::fs::write(&exe, "not a script").unwrap();
        let victim = dir.join("victim.conf");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("run").join(super::PCPPASS)).unwrap();
        let at = crate::pooler::ConsoleAt {
            unix_dir: None,
            host: None,
            pool_user: None,
            port: 9999,
            admin_port: Some(9898),
            user: "postgres".into(),
            password: Some("s3cret".into()),
            container: Some(crate::pooler::InContainer {
                pooler: String::new(),
                postgres: String::new(),
                executable: exe,
                dir: dir.join("run"),
            }),
        };
        super::Console::open(&at).await.unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let written = dir.join("run").join(super::PCPPASS);
        let meta = std::fs::symlink_metadata(&written).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // SAFETY: geteuid has no preconditions.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
        assert!(
            std::fs::read_to_string(&written)
                .unwrap()
                .contains(":9898:postgres:s3cret")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pool_status_pairs_names_with_values() {
        let text = "name : reset_query_list\nvalue: ABORT; DISCARD ALL\ndesc : queries issued at the end of session\n\nname : num_init_children\nvalue: 4\ndesc : x\n";
        assert_eq!(
            super::pool_status(text),
            [
                (
                    "reset_query_list".to_string(),
                    "ABORT; DISCARD ALL".to_string()
                ),
                ("num_init_children".to_string(), "4".to_string())
            ]
        );
    }
}
