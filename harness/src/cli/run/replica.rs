//! The user's command as replicas: each started with the argv it was given (no shell),
//! `{placeholders}` substituted in its arguments, the connection in its environment, stdin
//! from /dev/null, stdout and stderr into files of the run directory, in a process group of
//! its own. A replica that outlives its deadline gets SIGTERM on its group, then SIGKILL 2 s
//! later; one still running when the run ends (or is interrupted) gets SIGKILL on its group
//! ([`Replicas`]'s drop), and the reaper kills the groups of a harness that was SIGKILLed.

use crate::launch::reaper::Reaper;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a replica's group has between SIGTERM and SIGKILL at its deadline.
pub const GRACE: Duration = Duration::from_secs(2);

/// Where the replicas connect, and who they are.
#[derive(Clone, Debug)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
}

impl Target {
    pub fn dsn(&self) -> String {
        format!(
            "postgresql://{}:{}@{}:{}/{}",
            self.user, self.password, self.host, self.port, self.database
        )
    }
}

/// `{dsn}`, `{host}`, `{port}`, `{user}`, `{password}`, `{database}`, `{replica}`, `{round}`
/// in an argument.
pub fn substitute(arg: &str, t: &Target, replica: u32, round: u32) -> String {
    arg.replace("{dsn}", &t.dsn())
        .replace("{host}", &t.host)
        .replace("{port}", &t.port.to_string())
        .replace("{user}", &t.user)
        .replace("{password}", &t.password)
        .replace("{database}", &t.database)
        .replace("{replica}", &replica.to_string())
        .replace("{round}", &round.to_string())
}

/// The environment a replica gets (on top of the harness's own).
pub fn env(t: &Target, replica: u32, round: u32) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", t.dsn()),
        ("PGHOST", t.host.clone()),
        ("PGPORT", t.port.to_string()),
        ("PGUSER", t.user.clone()),
        ("PGPASSWORD", t.password.clone()),
        ("PGDATABASE", t.database.clone()),
        ("PGCHAOS_REPLICA", replica.to_string()),
        ("PGCHAOS_ROUND", round.to_string()),
    ]
}

/// The program, found as a shell would (a name with a slash as given, else on PATH), or why
/// it cannot run.
pub fn resolve(program: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let usable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        bail!("the command after `--` is empty");
    }
    if program.contains('/') {
        let p = PathBuf::from(program);
        if !p.exists() {
            bail!("command {program}: no such file");
        }
        if !usable(&p) {
            bail!("command {program}: not an executable file");
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(program);
        if usable(&p) {
            return Ok(p);
        }
    }
    bail!(
        "command {program}: not found on PATH ({})",
        std::env::var("PATH").unwrap_or_default()
    )
}

/// How a replica ended.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ended {
    pub replica: u32,
    /// Its process group (= its pid).
    pub pgid: i32,
    /// When it started, from the round's start.
    pub start_ms: u64,
    pub ms: u64,
    /// Its exit code, or the signal that ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// It was still running at the deadline (its group was terminated).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deadline: bool,
    pub stdout: String,
    pub stderr: String,
}

struct Running {
    replica: u32,
    child: tokio::process::Child,
    pgid: i32,
    started: Instant,
    start_ms: u64,
    stdout: String,
    stderr: String,
}

/// The replicas of one round.
pub struct Replicas<'r> {
    running: Vec<Running>,
    reaper: &'r mut Reaper,
    round_start: Instant,
}

/// What one round's replicas are.
pub struct Spec<'a> {
    pub program: &'a Path,
    pub args: &'a [OsString],
    pub target: &'a Target,
    pub round: u32,
    /// Directory (in the run directory) for their output; `rel` is its path inside the run
    /// directory, as results.json gives it.
    pub out_dir: &'a Path,
    pub rel: &'a str,
}

impl<'r> Replicas<'r> {
    pub fn new(reaper: &'r mut Reaper) -> Replicas<'r> {
        Replicas {
            running: Vec::new(),
            reaper,
            round_start: Instant::now(),
        }
    }

    /// Start replica `replica` now.
    pub fn start(&mut self, spec: &Spec, replica: u32) -> Result<i32> {
        let out = spec.out_dir.join(format!("{replica}.stdout"));
        let err = spec.out_dir.join(format!("{replica}.stderr"));
        let file = |p: &Path| {
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))
        };
        let mut cmd = tokio::process::Command::new(spec.program);
        for a in spec.args {
            match a.to_str() {
                Some(s) => cmd.arg(substitute(s, spec.target, replica, spec.round)),
                None => cmd.arg(a),
            };
        }
        cmd.envs(env(spec.target, replica, spec.round))
            .stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&err)?)
            .process_group(0)
            .kill_on_drop(false);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", spec.program.display()))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        self.reaper.watch(pgid);
        self.running.push(Running {
            replica,
            child,
            pgid,
            started: Instant::now(),
            start_ms: self.round_start.elapsed().as_millis() as u64,
            stdout: format!("{}/{replica}.stdout", spec.rel),
            stderr: format!("{}/{replica}.stderr", spec.rel),
        });
        Ok(pgid)
    }

    /// Whether every replica has ended.
    pub fn all_done(&mut self) -> bool {
        self.running
            .iter_mut()
            .all(|r| matches!(r.child.try_wait(), Ok(Some(_))))
    }

    /// Wait for every replica until `deadline` (from the round's start); a replica still
    /// running then has its group terminated. Each one's end, in replica order.
    pub async fn wait(mut self, deadline: Duration) -> Vec<Ended> {
        let until = tokio::time::Instant::from_std(self.round_start + deadline);
        let mut out = Vec::new();
        for mut r in std::mem::take(&mut self.running) {
            let status = match tokio::time::timeout_at(until, r.child.wait()).await {
                Ok(s) => (s.ok(), false),
                Err(_) => {
                    signal_group(r.pgid, libc::SIGTERM);
                    let s = match tokio::time::timeout(GRACE, r.child.wait()).await {
                        Ok(s) => s.ok(),
                        Err(_) => {
                            signal_group(r.pgid, libc::SIGKILL);
                            r.child.wait().await.ok()
                        }
                    };
                    (s, true)
                }
            };
            // The group may have members left (a child the replica started): end them too.
            signal_group(r.pgid, libc::SIGKILL);
            self.reaper.forget(r.pgid);
            use std::os::unix::process::ExitStatusExt;
            out.push(Ended {
                replica: r.replica,
                pgid: r.pgid,
                start_ms: r.start_ms,
                ms: r.started.elapsed().as_millis() as u64,
                code: status.0.and_then(|s| s.code()),
                signal: status.0.and_then(|s| s.signal()),
                deadline: status.1,
                stdout: r.stdout,
                stderr: r.stderr,
            });
        }
        out.sort_by_key(|e| e.replica);
        out
    }
}

impl Drop for Replicas<'_> {
    fn drop(&mut self) {
        for r in &mut self.running {
            signal_group(r.pgid, libc::SIGKILL);
            let _ = r.child.start_kill();
        }
        for r in &mut self.running {
            // Reaped here so no zombie stays behind (the group was killed just now).
            for _ in 0..200 {
                if matches!(r.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            self.reaper.forget(r.pgid);
        }
    }
}

/// A signal to a whole process group (nothing when it is gone).
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: a plain syscall on a process group this run created.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_environment() {
        let t = Target {
            host: "127.0.0.1".into(),
            port: 6000,
            user: "chaos".into(),
            password: "pw".into(),
            database: "chaos_r2".into(),
        };
        assert_eq!(
            substitute(
                "--url={dsn} -r{replica}/{round} {database}:{port}",
                &t,
                3,
                2
            ),
            "--url=postgresql://chaos:pw@127.0.0.1:6000/chaos_r2 -r3/2 chaos_r2:6000"
        );
        let e = env(&t, 3, 2);
        assert!(e.contains(&("PGDATABASE", "chaos_r2".into())));
        assert!(e.contains(&("PGCHAOS_REPLICA", "3".into())));
        assert!(e.contains(&("DATABASE_URL", t.dsn())));
    }

    #[test]
    fn a_missing_command_is_named() {
        let e = resolve("pgchaos-no-such-command").unwrap_err().to_string();
        assert!(
            e.contains("pgchaos-no-such-command: not found on PATH"),
            "{e}"
        );
        let e = resolve("/nonexistent/x").unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        let plain = std::env::temp_dir().join(format!("pgchaos-not-exec-{}", std::process::id()));
        std::fs::write(&plain, "x").unwrap();
        let e = resolve(plain.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_file(&plain).unwrap();
        assert!(e.contains("not an executable file"), "{e}");
        assert!(resolve("sh").unwrap().is_absolute());
    }
}
