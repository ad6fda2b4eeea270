//! Which local process owns a client's socket: the tap's lanes are TCP connections, and the
//! `run` command's replicas are local processes, each in a process group of its own, so the
//! owner's process group names the replica (a tool's child process, such as the `psql` that
//! sqitch runs, is in the same group). Read from /proc: the socket's inode in
//! `/proc/net/tcp` (local port = the client's, remote port = the tap's), then the process
//! holding `socket:[inode]` among `/proc/*/fd`. Linux only; `None` when the process has
//! already gone or cannot be read.

use std::fs;

/// The inode of the IPv4 socket from `local_port` to `remote_port`, from `/proc/net/tcp`'s text.
pub fn inode_of(table: &str, local_port: u16, remote_port: u16) -> Option<u64> {
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 10 {
            return None;
        }
        (port(cols[1]) == Some(local_port) && port(cols[2]) == Some(remote_port))
            .then(|| cols[9].parse().ok())
            .flatten()
            .filter(|i| *i != 0)
    })
}

/// The process group in a `/proc/PID/stat` line (the field after the state; the command name
/// in parentheses may hold spaces).
pub fn pgid_of_stat(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Whether process `pid` holds `want` (`socket:[inode]`) among its open files.
fn holds(pid: i32, want: &str) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want))
}

/// A process's children (`/proc/PID/task/*/children`).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// `(pid, pgid)` of the process holding the client's socket. `first`: processes to look at
/// before all others, with their descendants (the run's replicas: a scan of every process's
/// files takes tens of milliseconds on a loaded machine, and a short-lived client is gone by
/// then).
pub fn socket_owner(client_port: u16, tap_port: u16, first: &[i32]) -> Option<(i32, i32)> {
    let table = fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = inode_of(&table, client_port, tap_port)?;
    let want = format!("socket:[{inode}]");
    let found = |pid: i32| {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some((pid, pgid_of_stat(&stat)?))
    };
    let mut queue: Vec<i32> = first.to_vec();
    let mut seen = 0;
    while let Some(pid) = queue.pop() {
        seen += 1;
        if seen > 10_000 {
            break;
        }
        if holds(pid, &want) {
            return found(pid);
        }
        queue.extend(children(pid));
    }
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if holds(pid, &want) {
            return found(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_tables() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0\n\
   1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n";
        // The client's socket: local 50000 (C350), remote 8080 (1F90).
        assert_eq!(inode_of(table, 50000, 8080), Some(777));
        assert_eq!(inode_of(table, 8080, 50000), Some(4242));
        assert_eq!(inode_of(table, 1, 2), None);
        assert_eq!(pgid_of_stat("123 (a b) c) S 1 456 456 0"), Some(456));
    }

    /// A socket this test holds is found as its own process's.
    #[test]
    fn finds_this_process_as_the_owner_of_its_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tap_port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", tap_port)).unwrap();
        let (pid, _) = socket_owner(c.local_addr().unwrap().port(), tap_port, &[]).unwrap();
        // Found among the processes to look at first, too (this one).
        let me = std::process::id() as i32;
        assert_eq!(
            socket_owner(c.local_addr().unwrap().port(), tap_port, &[me])
                .unwrap()
                .0,
            me
        );
        assert_eq!(pid, std::process::id() as i32);
    }
}
