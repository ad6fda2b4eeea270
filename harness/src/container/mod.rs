//! Containers, for what the native launcher does not cover: images built here from the
//! provisioned binaries (`images`: no registry, no pull, no base image), and every call to
//! the `docker` program, each with a timeout, a failure naming the command and what it
//! printed. It reads topologies and provisioned binaries and writes images; it starts no
//! server: the docker launcher (`launch::docker`) runs a chaos run in these images, and
//! `launch::compose` writes the compose files that start them for a person (see
//! docs/containers.md).
//!
//! May import `topology`, `provision` and `pooler` (each pooler's container recipe).

pub mod images;

use anyhow::{Context, Result, anyhow, bail};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one docker command may take before it is killed (an import of a few hundred
/// megabytes takes seconds here).
pub const DOCKER_TIMEOUT: Duration = Duration::from_secs(300);

/// The docker client program (`PGCHAOS_DOCKER`, else `docker` on PATH).
pub fn docker_program() -> String {
    std::env::var("PGCHAOS_DOCKER")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "docker".to_string())
}

/// Writes a command's standard input (on a thread of its own).
pub type Feeder = Box<dyn FnOnce(&mut dyn Write) -> Result<()> + Send>;

/// Run `program args`, feeding `stdin` (if any) from a writer, within `timeout`; the
/// standard output on success, else an error naming the command, its status and stderr.
pub fn run(
    program: &str,
    args: &[&str],
    stdin: Option<Feeder>,
    timeout: Duration,
) -> Result<String> {
    let shown = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow!(
                    "`{program}` was not found on PATH (needed for `{shown}`): install Docker, or set PGCHAOS_DOCKER"
                )
            } else {
                anyhow!("starting `{shown}`: {e}")
            }
        })?;
    let feeder = match (stdin, child.stdin.take()) {
        (Some(f), Some(mut pipe)) => Some(std::thread::spawn(move || {
            let r = f(&mut pipe);
            drop(pipe);
            r
        })),
        _ => None,
    };
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child
            .try_wait()
            .with_context(|| format!("waiting for `{shown}`"))?
        {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{shown}` did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let fed = feeder.map(|t| t.join());
    if !status.success() {
        bail!("`{shown}` failed ({status}): {}", stderr.trim());
    }
    match fed {
        Some(Ok(Err(e))) => return Err(e.context(format!("feeding `{shown}`"))),
        Some(Err(_)) => bail!("feeding `{shown}`: the writer panicked"),
        _ => {}
    }
    Ok(stdout)
}

/// `docker ARGS` within [`DOCKER_TIMEOUT`].
pub fn docker(args: &[&str]) -> Result<String> {
    run(&docker_program(), args, None, DOCKER_TIMEOUT)
}
