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
uid=$6
pids=
while read -r pid start; do
    case $pid in
        -*) pids=$(echo " $pids " | sed "s/ ${pid#-} / /g") ;;
        ''|*[!0-9]*) ;;
        *) case $start in ''|*[!0-9]*) continue ;; esac
           pids="$pids $pid"; eval "start_$pid=$start" ;;
    esac
done
# A process's start time (clock ticks since boot, field 22 of its stat) and real uid.
started() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
owner() { awk '/^Uid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# Only the processes the harness recorded: the same start time and owner as then. One that
# is gone entirely is kept for its group (a pid is not handed out again while a process
# group still uses it); one whose pid now names another process is dropped. Gone at either
# look counts as gone: a SIGKILLed harness's postmaster is a zombie that its new parent may
# reap between the two reads, and dropping it then left its System V segment behind.
ours=
gone=
for p in $pids; do
    eval "want=\$start_$p"
    now=$(started "$p")
    who=$(owner "$p")
    if [ -z "$now" ] || [ -z "$who" ]; then ours="$ours $p"; gone="$gone $p"
    elif [ "$now" = "$want" ] && [ "$who" = "$uid" ]; then ours="$ours $p"
    fi
done
pids=$ours
# Every process of the servers' user working inside the run directory first: backends (each
# in a session of its own) and above all one the nemesis froze with SIGSTOP, which would
# never notice its postmaster is gone; by now it may have been re-parented, so look by
# working directory.
for p in /proc/[0-9]*; do
    case $(readlink "$p/cwd" 2>/dev/null) in
        "$dir"|"$dir"/*) [ "$(owner "${p#/proc/}")" = "$uid" ] && kill -KILL "${p#/proc/}" 2>/dev/null ;;
    esac
done
# Every member of the servers' process groups owned by their user, before they go (a
# pooler's children).
members=$(ps -eo pid=,pgid=,uid= 2>/dev/null | awk -v g=" $pids " -v u="$uid" 'index(g, " " $2 " ") && $3 == u { print $1 }')
# dash's kill takes a process group as `-PGID` after the signal; `kill -KILL -- -PGID`
# fails there ("Illegal number"), which left a SIGKILLed pgpool-II's children serving. A
# recorded pid already gone is signalled as a group only (the pid alone may be reused).
for p in $pids; do
    kill -KILL "-$p" 2>/dev/null
    case " $gone " in *" $p "*) ;; *) kill -KILL "$p" 2>/dev/null ;; esac
done
running() {
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
for p in $pids; do
    case " $gone " in *" $p "*) continue ;; esac
    n=0
    while running "$p" && [ $n -lt 1000 ]; do sleep 0.01; n=$((n + 1)); done
done
# System V objects a killed process cannot remove, only those of the servers' user (owner
# and creator): a segment one of the recorded processes created (a postmaster's, a
# SIGKILLed pgpool-II's), a semaphore set one of them last operated on (pgpool-II's). Never
# by an id read from a file the servers' user can write (postmaster.pid).
for m in $members $pids; do
    awk -v p="$m" -v u="$uid" '$5 == p && $8 == u && $10 == u { print $2 }' /proc/sysvipc/shm 2>/dev/null | while read -r id; do ipcrm -m "$id" 2>/dev/null; done
done
for sem in $(awk -v u="$uid" '$2 ~ /^[0-9]+$/ && $5 == u && $7 == u { print $2 }' /proc/sysvipc/sem 2>/dev/null); do
    last=$(ipcs -s -i "$sem" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $5 }')
    for m in $members $pids; do
        case " $(echo $last) " in *" $m "*) ipcrm -s "$sem" 2>/dev/null; break ;; esac
    done
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
        Self::spawn_inner(run_dir, keep, "", "", &[], euid())
    }

    /// The same for servers running as `uid` (root's harness, the unprivileged server
    /// user): only processes and System V objects of that user are touched.
    pub fn spawn_for(run_dir: &Path, keep: bool, uid: u32) -> Result<Reaper> {
        Self::spawn_inner(run_dir, keep, "", "", &[], uid)
    }

    /// The same for a `launcher: external` run: at the end, `pgchaos reap-external` (this
    /// executable) with `env` (the observer's DSN and the clients' role: secrets stay out
    /// of the process list).
    pub fn spawn_with_reap(run_dir: &Path, env: &[(&str, String)]) -> Result<Reaper> {
        Self::spawn_inner(run_dir, false, "", "", env, euid())
    }

    /// The same for a docker run: also removes every container and network labelled
    /// `pgchaos.run=<label>`, with the docker client `docker`.
    pub fn spawn_with_docker(
        run_dir: &Path,
        keep: bool,
        label: &str,
        docker: &str,
    ) -> Result<Reaper> {
        Self::spawn_inner(run_dir, keep, label, docker, &[], euid())
    }

    fn spawn_inner(
        run_dir: &Path,
        keep: bool,
        label: &str,
        docker: &str,
        env: &[(&str, String)],
        uid: u32,
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
            .arg(uid.to_string())
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

    /// Watch a server: its process group is killed if the harness dies first (if the pid
    /// still names the process started at the time read now, owned by the servers' user).
    pub fn watch(&mut self, pid: i32) {
        if let Some(start) = start_time(pid) {
            self.watch_recorded(pid, start);
        }
    }

    /// Watch `pid` as the process that started at `start` (tests give a wrong one).
    pub fn watch_recorded(&mut self, pid: i32, start: u64) {
        self.say(&format!("{pid} {start}"));
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

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`, read
/// after the command name, which may hold spaces and parentheses): with the pid, it names
/// one process, not whichever holds that pid later.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.finish();
    }
}
