//! Where a sequential run executes: the harness thread and the servers it launches share one
//! CPU. A step is a chain of round trips (harness -> PgBouncer -> PostgreSQL -> back, then the
//! observer's look) with one process runnable at a time; on a virtual machine every wake-up of
//! a process on another, idle vCPU costs an inter-processor interrupt, which made a round trip
//! 3-5 times slower than on one CPU (measured figures in the README). Pinning is chosen per
//! run (`--cpu`, `PGCHAOS_CPU`), recorded in results.json, and never applied to `up`, whose
//! servers serve other programs. Helper threads (the history writer) stay
//! on it too: measured, a writer on the other vCPU slowed the pinned one far more than its work.

use anyhow::{Context, Result, anyhow, bail};

/// The `--cpu` choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuChoice {
    /// Pin to the CPU the harness is running on when it launches (the scheduler's pick).
    Auto,
    /// Do not pin.
    Off,
    /// Pin to this CPU.
    Cpu(usize),
}

impl CpuChoice {
    /// `auto`, `off` (or `none`), or a CPU number.
    pub fn parse(s: &str) -> Result<CpuChoice> {
        match s.trim() {
            "auto" => Ok(CpuChoice::Auto),
            "off" | "none" => Ok(CpuChoice::Off),
            n => n
                .parse::<usize>()
                .map(CpuChoice::Cpu)
                .map_err(|_| anyhow!("{s:?}: expected `auto`, `off` or a CPU number")),
        }
    }

    /// The flag if given, else `PGCHAOS_CPU`, else `auto`.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<CpuChoice> {
        match (flag, std::env::var("PGCHAOS_CPU")) {
            (Some(f), _) => CpuChoice::parse(f).context("--cpu"),
            (None, Ok(v)) => CpuChoice::parse(&v).context("PGCHAOS_CPU"),
            (None, Err(_)) => Ok(CpuChoice::Auto),
        }
    }
}

/// CPUs online on this machine (not just those this thread may use).
pub fn online() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|n| *n > 0)
}

/// The CPUs this thread may run on.
pub fn allowed() -> Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|c| unsafe { libc::CPU_ISSET(*c, &set) })
        .collect())
}

/// Apply the choice to the calling thread; the servers it spawns afterwards inherit it.
/// Returns the CPU pinned to, if any.
pub fn pin(choice: CpuChoice) -> Result<Option<usize>> {
    let allowed = allowed()?;
    let cpu = match choice {
        CpuChoice::Off => return Ok(None),
        CpuChoice::Auto => {
            // SAFETY: no arguments; returns the current CPU or -1.
            let now = unsafe { libc::sched_getcpu() };
            match usize::try_from(now) {
                Ok(c) if allowed.contains(&c) => c,
                _ => match allowed.first() {
                    Some(c) => *c,
                    None => return Ok(None),
                },
            }
        }
        CpuChoice::Cpu(n) => {
            if !allowed.contains(&n) {
                bail!(
                    "--cpu {n}: CPU {n} is not available to this process (allowed: {})",
                    allowed
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
            n
        }
    };
    // SAFETY: a zeroed set with one CPU added; pid 0 is the calling thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        bail!(
            "sched_setaffinity to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(Some(cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!(CpuChoice::parse("auto").unwrap(), CpuChoice::Auto);
        assert_eq!(CpuChoice::parse("off").unwrap(), CpuChoice::Off);
        assert_eq!(CpuChoice::parse(" 1 ").unwrap(), CpuChoice::Cpu(1));
        let e = CpuChoice::parse("fast").unwrap_err().to_string();
        assert!(e.contains("expected `auto`, `off` or a CPU number"), "{e}");
    }

    #[test]
    fn pinning_a_thread_restricts_it_and_its_children() {
        // In a thread of its own, so the test harness's other threads are untouched.
        std::thread::spawn(|| {
            let before = allowed().unwrap();
            let first = before[0];
            assert_eq!(pin(CpuChoice::Cpu(first)).unwrap(), Some(first));
            assert_eq!(allowed().unwrap(), vec![first]);
            // A child process inherits the mask.
            let out = std::process::Command::new("grep")
                .args(["Cpus_allowed_list", "/proc/self/status"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.trim().ends_with(&format!("\t{first}")),
                "child sees {text:?}, expected CPU {first}"
            );
            let missing = before.iter().max().unwrap() + 1;
            let e = pin(CpuChoice::Cpu(missing)).unwrap_err().to_string();
            assert!(e.contains("not available"), "{e}");
        })
        .join()
        .unwrap();
    }
}
