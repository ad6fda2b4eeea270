//! The reaper: a small `sh` process started beside every run that outlives the harness by a
//! moment, so that nothing of the run survives it however it ends, SIGKILL included.
//!
//! It reads server process ids from a pipe the harness holds (`-<pid>` withdraws one the
//! harness stopped and reaped itself); when the pipe closes (the
//! harness exited, crashed or was killed) it kills those process groups, waits for them to
//! go, removes the System V segments the postmasters (primary and standby) registered in
//! their `postmaster.pid` and those the killed processes (their groups' members too) created
//! or last used (a SIGKILLed pgpool-II leaks a segment and a semaphore set), removes a docker
//! run's labelled containers and network, runs `pgchaos reap-external` for a deployment it did
//! not start (terminating the clients' role's backends), and deletes the run directory. After a
//! normal teardown there is nothing left for it to do.
//! It ignores SIGINT, SIGTERM and SIGHUP and runs in a session of its own, so a signal meant
//! for the harness (or its process group) does not stop it before it has cleaned up.

use anyhow::{Context, Result};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

const SCRIPT: &str = r#"
trap '' INT TERM HUP
dir=$1
keep=$2
label=$3
docker=$4
after=$5
pids=
while read -r pid; do
    case $pid in
        -*) pids=$(echo " $pids " | sed "s/ ${pid#-} / /g") ;;
        *) pids="$pids $pid" ;;
    esac
done
# Every process working inside the run directory first: backends (each in a session of its
# own) and above all one the nemesis froze with SIGSTOP, which would never notice its
# postmaster is gone; by now it may have been re-parented, so look by working directory.
for p in /proc/[0-9]*; do
    case $(readlink "$p/cwd" 2>/dev/null) in
        "$dir"|"$dir"/*) kill -KILL "${p#/proc/}" 2>/dev/null ;;
    esac
done
# Every member of the servers' process groups, before they go (a pooler's children).
members=$(ps -eo pid=,pgid= 2>/dev/null | awk -v g=" $pids " 'index(g, " " $2 " ") { print $1 }')
# dash's kill takes a process group as `-PGID` after the signal; `kill -KILL -- -PGID`
# fails there ("Illegal number"), which left a SIGKILLed pgpool-II's children serving.
for p in $pids; do kill -KILL "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
running() {
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
for p in $pids; do
    n=0
    while running "$p" && [ $n -lt 1000 ]; do sleep 0.01; n=$((n + 1)); done
done
# System V objects a killed process cannot remove: a segment one of them created, a
# semaphore set one of them last operated on (a SIGKILLed pgpool-II leaves both).
for m in $members $pids; do
    ipcs -m -p 2>/dev/null | awk -v p="$m" '$3 == p { print $1 }' | while read -r id; do ipcrm -m "$id" 2>/dev/null; done
done
for sem in $(ipcs -s 2>/dev/null | awk '$2 ~ /^[0-9]+$/ { print $2 }'); do
    last=$(ipcs -s -i "$sem" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $5 }')
    for m in $members $pids; do
        case " $(echo $last) " in *" $m "*) ipcrm -s "$sem" 2>/dev/null; break ;; esac
    done
done
for pidfile in "$dir/data/postmaster.pid" "$dir/standby/postmaster.pid"; do
    [ -f "$pidfile" ] || continue
    shmid=$(sed -n 7p "$pidfile" | awk '{print $2}')
    [ -n "$shmid" ] && ipcrm -m "$shmid" 2>/dev/null
done
# A docker run: every container and network labelled with the run.
if [ -n "$label" ]; then
    ids=$("$docker" ps -aq --filter "label=pgchaos.run=$label" 2>/dev/null)
    [ -n "$ids" ] && "$docker" rm -f -v $ids >/dev/null 2>&1
    nets=$("$docker" network ls -q --filter "label=pgchaos.run=$label" 2>/dev/null)
    [ -n "$nets" ] && "$docker" network rm $nets >/dev/null 2>&1
fi
# A deployment pgchaos did not start: the program that ends what the run left there (its
# clients' backends), with what it needs in the environment.
[ -n "$after" ] && "$after" reap-external >/dev/null 2>&1
if [ "$keep" != 1 ]; then
    rm -rf "$dir" 2>/dev/null || { sleep 0.2; rm -rf "$dir" 2>/dev/null; }
fi
exit 0
"#;

/// The watcher of one run directory.
pub struct Reaper {
    stdin: Option<ChildStdin>,
    child: Child,
}

impl Reaper {
    /// Start the reaper for `run_dir` (`keep`: leave the directory, as `PGCHAOS_KEEP_RUN_DIR`
    /// asks).
    pub fn spawn(run_dir: &Path, keep: bool) -> Result<Reaper> {
        Self::spawn_inner(run_dir, keep, "", "", &[])
    }

    /// The same for a `launcher: external` run: at the end, `pgchaos reap-external` (this
    /// executable) with `env` (the observer's DSN and the clients' role: secrets stay out
    /// of the process list).
    pub fn spawn_with_reap(run_dir: &Path, env: &[(&str, String)]) -> Result<Reaper> {
        Self::spawn_inner(run_dir, false, "", "", env)
    }

    /// The same for a docker run: also removes every container and network labelled
    /// `pgchaos.run=<label>`, with the docker client `docker`.
    pub fn spawn_with_docker(
        run_dir: &Path,
        keep: bool,
        label: &str,
        docker: &str,
    ) -> Result<Reaper> {
        Self::spawn_inner(run_dir, keep, label, docker, &[])
    }

    fn spawn_inner(
        run_dir: &Path,
        keep: bool,
        label: &str,
        docker: &str,
        env: &[(&str, String)],
    ) -> Result<Reaper> {
        let after = if env.is_empty() {
            String::new()
        } else {
            std::env::current_exe()
                .context("locating pgchaos for the reaper")?
                .display()
                .to_string()
        };
        let mut cmd = Command::new("sh");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.arg("-c")
            .arg(SCRIPT)
            .arg("pgchaos-reaper")
            .arg(run_dir)
            .arg(if keep { "1" } else { "0" })
            .arg(label)
            .arg(docker)
            .arg(after)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe; a session of its own keeps group signals
        // aimed at the harness from reaching it.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd.spawn().context("starting the reaper (sh)")?;
        let stdin = child.stdin.take();
        Ok(Reaper { stdin, child })
    }

    /// Watch a server: its process group is killed if the harness dies first.
    pub fn watch(&mut self, pid: i32) {
        self.say(&pid.to_string());
    }

    /// The server has been stopped and reaped by the harness: forget it (its pid may be
    /// reused by someone else).
    pub fn forget(&mut self, pid: i32) {
        self.say(&format!("-{pid}"));
    }

    fn say(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{line}");
            let _ = s.flush();
        }
    }

    /// The reaper's own pid (tests wait for it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The harness has cleaned up itself: let the reaper check and exit, and reap it.
    pub fn finish(&mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.finish();
    }
}
