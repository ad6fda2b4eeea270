//! pgpool-II's admin view in the pooler's common words: `pcp_proc_info --verbose` (PCP: it
//! takes no child, where `SHOW POOL_POOLS` on the pool port would take one and wait like a
//! client when all are busy; docs/pgpool.md §9). One block per (child, cached slot, node),
//! only slots with a database (without `--all`): exactly every cached server, linked or idle.
//!
//! - a server: its node's `Backend PID`; its handle `<child pid>/<backend id>/<backend pid>`;
//! - **linked** = `Connected 1` (a client is attached to the child), **idle** = `Connected 0`;
//! - the client linked to it is the child (`<child pid>`): which client connection the child
//!   serves is only in its process title, and waiting clients sit in the kernel's accept
//!   queue, in no view (so no client is ever `Waiting`, and pools' counts are not given);
//! - *closing* is not observable (the reset runs while `Connected` is still 1);
//! - only the primary's blocks (`Backend ID` 0): with load balancing each slot also holds a
//!   backend on the standby (node 1), where nothing the harness sends runs (its statements
//!   begin with a tag comment, which pgpool-II never balances; docs/pgpool.md §17) and which
//!   the observer, reading the primary, does not see.

use crate::pooler::view::{ClientRow, ClientState, Look, PoolerRow, ServerRow, ServerState};

/// The fields of a block kept in an observation.
pub const KEPT: &[&str] = &[
    "PID",
    "Backend ID",
    "Backend PID",
    "Connected",
    "Status",
    "Pool Counter",
    "Backend connection time",
    "Client connection count",
];

/// The blocks of `pcp_proc_info --verbose` (`Name : value` lines, a blank line between
/// blocks), each as a map of every field.
pub fn blocks(text: &str) -> Vec<PoolerRow> {
    let mut out = vec![];
    let mut cur = PoolerRow::new();
    for line in text.lines() {
        match line.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() => {
                let k = k.trim().to_string();
                if cur.contains_key(&k) {
                    out.push(std::mem::take(&mut cur));
                }
                cur.insert(k, v.trim().to_string());
            }
            _ => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn get<'a>(r: &'a PoolerRow, k: &str) -> &'a str {
    r.get(k).map(String::as_str).unwrap_or("")
}

/// The look at database `db` from `pcp_proc_info --verbose`'s text.
pub fn look(text: &str, db: &str) -> Look {
    let mut look = Look::default();
    for b in blocks(text) {
        if get(&b, "Database") != db || get(&b, "Backend ID") != "0" {
            continue;
        }
        let child = get(&b, "PID").to_string();
        let Some(pid) = get(&b, "Backend PID")
            .parse::<i32>()
            .ok()
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let linked = get(&b, "Connected") == "1";
        let id = format!("{child}/{}/{pid}", get(&b, "Backend ID"));
        let raw: PoolerRow = b
            .iter()
            .filter(|(k, _)| KEPT.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if linked {
            look.clients.push(ClientRow {
                id: child.clone(),
                state: ClientState::Active,
                server: Some(id.clone()),
                waiting_us: None,
                replica: 0,
                raw: raw.clone(),
            });
        }
        look.servers.push(ServerRow {
            id,
            pid: Some(pid),
            state: if linked {
                ServerState::Linked
            } else {
                ServerState::Idle
            },
            client: linked.then_some(child),
            closing: false,
            replica: 0,
            raw,
        });
    }
    look
}

/// Drop the slots whose backend has exited. pgpool-II does not notice that an idle cached
/// backend died (a terminate, a crash) until its next client: it lists the slot with the dead
/// pid until then, and replaces it silently (docs/pgpool.md §10, K1). Such a slot is no server
/// connection any more (nothing can run on it), so it is not in the view, nor the client row
/// that names it; `alive` says whether a backend process exists (native runs: same host).
pub fn drop_exited(look: &mut Look, alive: impl Fn(i32) -> bool) {
    let dead: Vec<String> = look
        .servers
        .iter()
        .filter(|s| s.pid.is_some_and(|p| !alive(p)))
        .map(|s| s.id.clone())
        .collect();
    look.servers.retain(|s| !dead.contains(&s.id));
    look.clients
        .retain(|c| c.server.as_ref().is_none_or(|s| !dead.contains(s)));
}

/// The child pids of `pcp_proc_info --verbose`'s blocks, and whether a client is attached to
/// each (`Connected 1` on any of its slots).
pub fn children(text: &str) -> Vec<(i32, bool)> {
    let mut out: Vec<(i32, bool)> = vec![];
    for b in blocks(text) {
        let Ok(pid) = get(&b, "PID").parse::<i32>() else {
            continue;
        };
        let connected = get(&b, "Connected") == "1";
        match out.iter_mut().find(|(p, _)| *p == pid) {
            Some(e) => e.1 |= connected,
            None => out.push((pid, connected)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two children of `pcp_proc_info --verbose` (4.3.5's field names and layout), one with a
    /// client attached, one idle with a cached server, and a slot of another database.
    pub const SAMPLE: &str = "\
Database                  : chaos
Username                  : chaos
Start time                : 2026-12-03 14:40:01
Client connection count   : 1
Major                     : 3
Minor                     : 0
Backend connection time   : 2026-12-03 14:40:02
Client connection time    : 2026-12-03 14:40:03
Client idle duration      : 0
Client disconnection time : 2026-12-03 14:40:02
Pool Counter              : 2
Backend PID               : 4101
Connected                 : 1
PID                       : 4001
Backend ID                : 0
Status                    : Idle

Database                  : chaos
Username                  : chaos
Start time                : 2026-12-03 14:40:01
Client connection count   : 3
Major                     : 3
Minor                     : 0
Backend connection time   : 2026-12-03 14:40:02
Client connection time    : 2026-12-03 14:40:04
Client idle duration      : 0
Client disconnection time : 2026-12-03 14:40:05
Pool Counter              : 3
Backend PID               : 4102
Connected                 : 0
PID                       : 4002
Backend ID                : 0
Status                    : Wait for connection

Database                  : postgres
Username                  : postgres
Start time                : 2026-12-03 14:40:01
Client connection count   : 0
Major                     : 3
Minor                     : 0
Backend connection time   : 2026-12-03 14:40:06
Client connection time    : 2026-12-03 14:40:06
Client idle duration      : 0
Client disconnection time :
Pool Counter              : 1
Backend PID               : 4103
Connected                 : 1
PID                       : 4003
Backend ID                : 0
Status                    : Execute command
";

    #[test]
    fn cached_servers_in_common_words() {
        let l = look(SAMPLE, "chaos");
        let s: Vec<_> = l
            .servers
            .iter()
            .map(|s| (s.id.as_str(), s.pid, s.state, s.client.as_deref()))
            .collect();
        assert_eq!(
            s,
            [
                ("4001/0/4101", Some(4101), ServerState::Linked, Some("4001")),
                ("4002/0/4102", Some(4102), ServerState::Idle, None),
            ]
        );
        assert_eq!(l.clients.len(), 1);
        assert_eq!(l.clients[0].server.as_deref(), Some("4001/0/4101"));
        assert_eq!(
            l.servers[1].raw.get("Status").map(String::as_str),
            Some("Wait for connection")
        );
        assert!(l.pools.is_empty(), "pgpool has no pool counts to give");
        assert_eq!(
            children(SAMPLE),
            [(4001, true), (4002, false), (4003, true)]
        );
        let mut l = l;
        drop_exited(&mut l, |pid| pid != 4102);
        assert_eq!(
            l.servers.iter().map(|s| s.pid).collect::<Vec<_>>(),
            [Some(4101)],
            "the idle slot whose backend exited is not a server any more"
        );
        drop_exited(&mut l, |pid| pid != 4101);
        assert!(l.servers.is_empty() && l.clients.is_empty(), "{l:?}");
    }

    #[test]
    fn a_slot_s_standby_backend_is_not_a_server_of_the_view() {
        // Load balancing: the linked child's slot also holds a backend on node 1.
        let standby = SAMPLE
            .split("\n\n")
            .next()
            .unwrap()
            .replace(
                "Backend PID               : 4101",
                "Backend PID               : 4201",
            )
            .replace(
                "Backend ID                : 0",
                "Backend ID                : 1",
            );
        let text = format!("{standby}\n\n{SAMPLE}");
        assert_eq!(blocks(&text).len(), 4);
        let l = look(&text, "chaos");
        assert_eq!(
            l.servers.iter().map(|s| s.pid).collect::<Vec<_>>(),
            [Some(4101), Some(4102)]
        );
        assert_eq!(l.clients.len(), 1);
    }
}
