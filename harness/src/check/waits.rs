//! The wait-for graph at one moment of a concurrent case, across both layers: clients
//! waiting for a connection (the application pool) or a pooled server (PgBouncer's SHOW
//! CLIENTS `waiting`), backends waiting on an advisory lock (`wait_event = advisory`,
//! `pg_blocking_pids()`), the holders and the clients whose connections they are. A cycle
//! that runs through a pool is a pool deadlock, which PostgreSQL's deadlock detector cannot
//! see: it is said so in plain words, with pid and backend_start for every backend in it.

use crate::history::Observation;
use crate::vocab::{BackendId, Key, Op};
use std::collections::{BTreeMap, BTreeSet};

/// An op running at that moment.
#[derive(Clone, Debug)]
pub struct Running {
    pub client: usize,
    pub step: usize,
    pub op: Op,
    pub key: Option<Key>,
    /// Nanoseconds it has been running.
    pub for_ns: u64,
}

/// What a client waits for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Waits {
    /// A backend's advisory lock held by these clients.
    Lock {
        backend: BackendId,
        blockers: Vec<BackendId>,
    },
    /// A connection from the pool, whose connections these clients hold.
    Pool { what: String },
}

/// What a fault's span makes unavailable, in words.
fn down_words(d: crate::vocab::fault::Down) -> &'static str {
    use crate::vocab::fault::Down;
    match d {
        Down::Pooler => "the pooler accepts no connections",
        Down::Postgres => "no new server connection can be made",
        Down::Paused => "the pooler hands out no server",
        Down::Frozen => "nothing passes (a frozen process or host, or a cut link)",
        Down::Draining => "the pooler is shutting down: no new connection or server",
    }
}

fn who(c: usize) -> String {
    format!("C{}", c + 1)
}

fn backend(b: BackendId) -> String {
    b.to_string()
}

/// The graph as it is built: the lines said, and what each waiting client waits for and on
/// whom.
#[derive(Default)]
struct Graph {
    lines: Vec<String>,
    edges: BTreeMap<usize, (Waits, Vec<usize>)>,
}

/// Describe the wait-for graph in words. `owner`: the client whose connection each backend is
/// (from the history: its pinned client, or the client whose op it is running).
pub fn describe(
    obs: &Observation,
    running: &[Running],
    owner: &BTreeMap<BackendId, usize>,
) -> String {
    let tag_of = |step: usize| crate::vocab::step::tag(step);
    // Whose connection each backend is: the history's owners, and each running op's backend.
    let mut owner = owner.clone();
    for r in running {
        if let Some(b) = obs.ran(&tag_of(r.step)) {
            owner.entry(b).or_insert(r.client);
        }
    }
    let owner = &owner;
    let mut g = Graph::default();
    // Who is using a connection right now (the pool's connections are theirs).
    let mut holding: BTreeSet<usize> = owner.values().copied().collect();
    lock_waits(obs, running, owner, &mut holding, &mut g);
    let during = fault_lines(running, &mut g.lines);
    pool_waits(obs, running, owner, &holding, &during, &mut g);
    holder_lines(obs, owner, &mut g);
    if let Some(o) = &obs.outside {
        g.lines
            .push(format!("a new connection to PostgreSQL as a client: {o}"));
    }
    if let Some(line) = cycle_line(&g.edges) {
        g.lines.insert(0, line);
    }
    if g.lines.is_empty() {
        "nothing visible waits (the op was slow, not blocked)".to_string()
    } else {
        g.lines.join("; ")
    }
}

/// Running ops whose backend waits on a lock: a line each, and an edge to the clients whose
/// backends block it. Every client running on a backend is `holding` a connection.
fn lock_waits(
    obs: &Observation,
    running: &[Running],
    owner: &BTreeMap<BackendId, usize>,
    holding: &mut BTreeSet<usize>,
    g: &mut Graph,
) {
    for r in running {
        let Some(b) = obs.ran(&crate::vocab::step::tag(r.step)) else {
            continue;
        };
        holding.insert(r.client);
        let row = obs.backend(b).expect("ran() found it");
        if row.wait_event_type.as_deref() != Some("Lock") {
            continue;
        }
        let blockers: Vec<BackendId> = row
            .blocked_by
            .iter()
            .filter_map(|pid| obs.backends.iter().find(|x| x.id.pid == *pid).map(|x| x.id))
            .collect();
        let by: Vec<usize> = blockers
            .iter()
            .filter_map(|x| owner.get(x).copied())
            .collect();
        g.lines.push(format!(
            "{} {}{} waits on {} ({} {}), blocked by {}",
            who(r.client),
            r.op,
            r.key.map(|k| format!(" {k}")).unwrap_or_default(),
            backend(b),
            row.wait_event_type.as_deref().unwrap_or(""),
            row.wait_event.as_deref().unwrap_or(""),
            if blockers.is_empty() {
                "nobody visible".to_string()
            } else {
                blockers
                    .iter()
                    .map(|x| match owner.get(x) {
                        Some(c) => format!("{} (the connection of {})", backend(*x), who(*c)),
                        None => backend(*x),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ));
        g.edges.insert(
            r.client,
            (
                Waits::Lock {
                    backend: b,
                    blockers,
                },
                by,
            ),
        );
    }
}

/// Faults of the servers in progress (the nemesis's, for a client's step): they wait for
/// nothing; what they make unavailable is what others wait for. Returns the words that say
/// so beside a wait (`, while PAUSE holds`), or nothing.
fn fault_lines(running: &[Running], lines: &mut Vec<String>) -> String {
    let faults: Vec<&Running> = running.iter().filter(|r| r.op.is_server_fault()).collect();
    for f in &faults {
        lines.push(format!(
            "{} in progress ({}'s step, {:.3} s so far){}",
            f.op,
            who(f.client),
            f.for_ns as f64 / 1e9,
            crate::vocab::fault::meaning(f.op)
                .and_then(|m| m.down)
                .map(|d| format!(": {}", down_words(d)))
                .unwrap_or_default()
        ));
    }
    if faults.is_empty() {
        String::new()
    } else {
        format!(
            ", while {} holds",
            faults
                .iter()
                .map(|f| f.op.to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    }
}

/// Ops that reached no backend wait for a connection or a pooled server (or, a connect, for
/// a pooler's client slot): a line each, and an edge to the clients holding them.
fn pool_waits(
    obs: &Observation,
    running: &[Running],
    owner: &BTreeMap<BackendId, usize>,
    holding: &BTreeSet<usize>,
    during: &str,
    g: &mut Graph,
) {
    let pool_waiters: Vec<&Running> = running
        .iter()
        .filter(|r| {
            obs.ran(&crate::vocab::step::tag(r.step)).is_none()
                && !r.op.client_side()
                && !r.op.is_server_fault()
        })
        .collect();
    if pool_waiters.is_empty() {
        return;
    }
    let what = match (&obs.app_pool, obs.pools.first()) {
        (Some(p), _) => format!(
            "a connection from the application pool ({}/{} open, {} idle, {} waiting)",
            p.size, p.max_open, p.idle, p.waiting
        ),
        (None, Some(pool)) => format!(
            "a server from the pooler's pool ({} clients waiting, {} servers linked, {} idle, longest wait {:.3} s)",
            pool.clients_waiting,
            pool.servers_linked,
            pool.servers_idle,
            pool.longest_wait_us as f64 / 1e6,
        ),
        (None, None) => "a connection".to_string(),
    };
    // Who holds the pooler's client slots (pgpool-II's children), for a connect.
    let slots = slot_holders(obs, owner);
    for r in &pool_waiters {
        if r.op == Op::Open && !obs.clients.is_empty() {
            let others: Vec<usize> = slots.iter().filter_map(|(_, c)| *c).collect();
            g.lines.push(format!(
                "{} open ({:.3} s so far) waits for the pooler to accept it{during}: its {} client connections are served ({})",
                who(r.client),
                r.for_ns as f64 / 1e9,
                obs.clients.len(),
                slots
                    .iter()
                    .map(|(words, _)| words.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            g.edges.insert(
                r.client,
                (
                    Waits::Pool {
                        what: "a pooler client slot".into(),
                    },
                    others,
                ),
            );
            continue;
        }
        let others: Vec<usize> = holding.iter().copied().filter(|c| *c != r.client).collect();
        g.lines.push(format!(
            "{} {} ({:.3} s so far) waits for {what}{during}{}",
            who(r.client),
            r.op,
            r.for_ns as f64 / 1e9,
            if others.is_empty() {
                String::new()
            } else {
                format!(
                    ", its {} held by {}",
                    if obs.app_pool.is_none() && !obs.pools.is_empty() {
                        "servers"
                    } else {
                        "connections"
                    },
                    others
                        .iter()
                        .map(|c| who(*c))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
        g.edges
            .insert(r.client, (Waits::Pool { what: what.clone() }, others));
    }
}

/// Holders: the locks granted to the backends others wait for.
fn holder_lines(obs: &Observation, owner: &BTreeMap<BackendId, usize>, g: &mut Graph) {
    let mut blockers: BTreeSet<BackendId> = BTreeSet::new();
    for (w, _) in g.edges.values() {
        if let Waits::Lock { blockers: bs, .. } = w {
            blockers.extend(bs.iter().copied());
        }
    }
    for b in blockers {
        let Some(row) = obs.backend(b) else {
            continue;
        };
        let keys: Vec<String> = row
            .locks
            .iter()
            .filter(|l| l.granted)
            .map(|l| l.key.to_string())
            .collect();
        // pg_blocking_pids also names waiters queued ahead for the same lock.
        let what = if keys.is_empty() {
            "holds no advisory lock: it is queued ahead".to_string()
        } else {
            format!("holds {}", keys.join(", "))
        };
        g.lines.push(format!(
            "{} {what} ({}{})",
            backend(b),
            row.state,
            owner
                .get(&b)
                .map(|c| format!(", the connection of {}", who(*c)))
                .unwrap_or_default()
        ));
    }
}

/// The first line when the waits form a cycle: a pool deadlock when it runs through a pool.
fn cycle_line(edges: &BTreeMap<usize, (Waits, Vec<usize>)>) -> Option<String> {
    let cycle = find_cycle(edges)?;
    let through_pool = cycle
        .iter()
        .any(|c| matches!(edges.get(c), Some((Waits::Pool { .. }, _))));
    let path: Vec<String> = cycle.iter().map(|c| who(*c)).collect();
    Some(format!(
        "{}: {} -> {} (each waits for the next{})",
        if through_pool {
            "POOL DEADLOCK, a cycle through the pool that PostgreSQL's deadlock detector cannot see"
        } else {
            "a wait cycle"
        },
        path.join(" -> "),
        path[0],
        if through_pool {
            ": for a lock the next one's backend holds, or for a pool connection the next one holds"
        } else {
            ""
        }
    ))
}

/// The pooler's client connections (pgpool-II: a child serving a client, `pcp_proc_info`'s
/// `Connected 1`) in words, each with the client whose connection its server is, if the
/// history says (`owner`): `slot 4242 on 5123@... (the connection of C1)` (pgpool-II's
/// slot is the child's pid).
fn slot_holders(
    obs: &Observation,
    owner: &BTreeMap<BackendId, usize>,
) -> Vec<(String, Option<usize>)> {
    obs.clients
        .iter()
        .map(|c| {
            let linked = c
                .server
                .as_ref()
                .and_then(|id| obs.servers.iter().find(|s| &s.id == id))
                .and_then(|s| s.pid)
                .and_then(|pid| obs.backends.iter().find(|b| b.id.pid == pid))
                .map(|b| b.id);
            let whose = linked.and_then(|b| owner.get(&b).copied());
            let words = format!(
                "slot {} on {}{}",
                c.id,
                linked.map(backend).unwrap_or_else(|| "a backend".into()),
                whose
                    .map(|w| format!(" (the connection of {})", who(w)))
                    .unwrap_or_default()
            );
            (words, whose)
        })
        .collect()
}

/// A cycle among clients, following "waits for" edges.
fn find_cycle(edges: &BTreeMap<usize, (Waits, Vec<usize>)>) -> Option<Vec<usize>> {
    fn dfs(
        n: usize,
        edges: &BTreeMap<usize, (Waits, Vec<usize>)>,
        path: &mut Vec<usize>,
        seen: &mut BTreeSet<usize>,
    ) -> Option<Vec<usize>> {
        if let Some(i) = path.iter().position(|x| *x == n) {
            return Some(path[i..].to_vec());
        }
        if !seen.insert(n) {
            return None;
        }
        path.push(n);
        if let Some((_, next)) = edges.get(&n) {
            for m in next {
                if let Some(c) = dfs(*m, edges, path, seen) {
                    return Some(c);
                }
            }
        }
        path.pop();
        None
    }
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        if let Some(c) = dfs(*start, edges, &mut vec![], &mut seen) {
            return Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{AppPoolRow, BackendRow, LockRow};

    fn id(pid: i32) -> BackendId {
        BackendId {
            pid,
            start_us: 1796000000000000 + pid as i64,
        }
    }

    fn row(pid: i32, step: usize, waiting_on: Option<i32>, holds: Option<i64>) -> BackendRow {
        BackendRow {
            id: id(pid),
            backend_start: String::new(),
            state: "active".into(),
            query: format!("{} SELECT", crate::vocab::step::tag(step)),
            xact_start: None,
            wait_event_type: waiting_on.map(|_| "Lock".to_string()),
            wait_event: waiting_on.map(|_| "advisory".to_string()),
            blocked_by: waiting_on.into_iter().collect(),
            locks: holds
                .map(|k| LockRow {
                    key: Key::Big(k),
                    mode: "ExclusiveLock".into(),
                    granted: true,
                })
                .into_iter()
                .collect(),
        }
    }

    /// A connect that waits for the pooler to accept it (pgpool-II, every child serving a
    /// client) names each client slot, its backend and the client whose connection it is.
    #[test]
    fn a_waiting_open_names_the_slots_and_whose_connections_they_are() {
        use crate::pooler::view::{ClientRow, ClientState, ServerRow, ServerState};
        let mut obs = Observation::default();
        for (child, pid) in [(11, 101), (12, 102)] {
            let mut b = row(pid, 0, None, None);
            b.state = "idle".into();
            obs.backends.push(b);
            obs.servers.push(ServerRow {
                id: format!("{child}/0/{pid}"),
                pid: Some(pid),
                state: ServerState::Linked,
                client: Some(child.to_string()),
                closing: false,
                replica: 0,
                raw: Default::default(),
            });
            obs.clients.push(ClientRow {
                id: child.to_string(),
                state: ClientState::Active,
                server: Some(format!("{child}/0/{pid}")),
                waiting_us: None,
                replica: 0,
                raw: Default::default(),
            });
        }
        let running = vec![Running {
            client: 2,
            step: 4,
            op: Op::Open,
            key: None,
            for_ns: 500_000_000,
        }];
        // The history knows C1's backend only: C2's slot is named without a client.
        let owner = BTreeMap::from([(id(101), 0)]);
        let text = describe(&obs, &running, &owner);
        assert!(
            text.starts_with(
                "C3 open (0.500 s so far) waits for the pooler to accept it: its 2 client connections are served (slot 11 on "
            ),
            "{text}"
        );
        assert!(
            text.contains(" (the connection of C1), slot 12 on "),
            "{text}"
        );
        assert!(!text.contains("the connection of C2"), "{text}");
        // With no slot view (PgBouncer accepts every client), an open waits for a connection.
        let text = describe(&Observation::default(), &running, &owner);
        assert!(
            text.contains("C3 open (0.500 s so far) waits for a connection"),
            "{text}"
        );
    }

    /// A fault in progress waits for nothing: it is named with what it makes unavailable, and
    /// the client whose statement cannot get through waits while it holds.
    #[test]
    fn a_fault_in_progress_is_what_others_wait_behind() {
        let obs = Observation::default();
        let running = vec![
            Running {
                client: 2,
                step: 0,
                op: Op::HostFreezePostgres,
                key: None,
                for_ns: 150_000_000,
            },
            Running {
                client: 0,
                step: 1,
                op: Op::Unlock,
                key: Some(Key::Big(7)),
                for_ns: 2_100_000_000,
            },
        ];
        let text = describe(&obs, &running, &BTreeMap::new());
        assert!(
            text.contains(
                "host_freeze_postgres in progress (C3's step, 0.150 s so far): nothing passes"
            ),
            "{text}"
        );
        assert!(
            text.contains("C1 unlock (2.100 s so far) waits for a connection, while host_freeze_postgres holds"),
            "{text}"
        );
        assert!(
            !text.contains("C3 host_freeze_postgres (0.150 s so far) waits"),
            "{text}"
        );
    }

    /// The article's starvation: C1 holds 42 and needs a pool connection for its next op;
    /// C2..C5 hold the pool's other connections, each waiting for 42.
    #[test]
    fn a_cycle_through_the_pool_is_a_pool_deadlock() {
        let mut holder = row(101, 0, None, Some(42));
        holder.state = "idle".into();
        holder.query = "/*pgchaos s0*/ SELECT".into();
        let mut obs = Observation {
            backends: vec![holder],
            app_pool: Some(AppPoolRow {
                max_open: 5,
                size: 5,
                idle: 0,
                waiting: 1,
            }),
            outside: Some("refused 53300 sorry, too many clients already".into()),
            ..Default::default()
        };
        let mut running = vec![Running {
            client: 0,
            step: 9,
            op: Op::Ping,
            key: None,
            for_ns: 2_100_000_000,
        }];
        let mut owner = BTreeMap::from([(id(101), 0)]);
        for c in 1..5usize {
            obs.backends.push(row(101 + c as i32, c, Some(101), None));
            running.push(Running {
                client: c,
                step: c,
                op: Op::Lock,
                key: Some(Key::Big(42)),
                for_ns: 2_000_000_000,
            });
            owner.insert(id(101 + c as i32), c);
        }
        let text = describe(&obs, &running, &owner);
        assert!(text.starts_with("POOL DEADLOCK"), "{text}");
        assert!(text.contains("C1 ping"), "{text}");
        assert!(
            text.contains("application pool (5/5 open, 0 idle, 1 waiting)"),
            "{text}"
        );
        assert!(text.contains("C2 lock 42 waits on pid 102"), "{text}");
        assert!(text.contains("Lock advisory"), "{text}");
        assert!(
            text.contains("pid 101 (backend_start 2026-11-30 00:53:20.000101+00)"),
            "{text}"
        );
        assert!(text.contains("holds 42"), "{text}");
        assert!(text.contains("53300"), "{text}");
    }

    #[test]
    fn a_plain_lock_wait_is_no_deadlock() {
        let obs = Observation {
            backends: vec![row(101, 0, None, Some(42)), row(102, 1, Some(101), None)],
            ..Default::default()
        };
        let running = vec![Running {
            client: 1,
            step: 1,
            op: Op::Lock,
            key: Some(Key::Big(42)),
            for_ns: 5_000_000_000,
        }];
        let owner = BTreeMap::from([(id(101), 0), (id(102), 1)]);
        let text = describe(&obs, &running, &owner);
        assert!(
            !text.contains("DEADLOCK") && !text.contains("cycle"),
            "{text}"
        );
        assert!(
            text.contains("blocked by pid 101 (backend_start 2026-11-30 00:53:20.000101+00) (the connection of C1)"),
            "{text}"
        );
    }
}
