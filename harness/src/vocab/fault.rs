//! What each fault of the servers means for the model: which backends it ends, which
//! clients' connections it breaks. One table ([`meaning`]), read by the model and by the
//! runner's planning (what to wait for after a fault), so the two cannot disagree.
//! The effects, from PgBouncer's documentation and source (admin.c, janitor.c) and checked
//! by the real-server tests in `tests/faults.rs`.

use super::Op;

/// Which PostgreSQL backends a fault ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ends {
    /// None: a paused or frozen process, a reload with nothing changed.
    Nothing,
    /// Every backend that is not linked to a client ends now; a linked one ends when its
    /// client's transaction (session mode: session) releases it (`RECONNECT`; `PAUSE`, which
    /// the runner only starts when no server is linked).
    IdleNowLinkedAtRelease,
    /// Every backend of the clients (the pooler drops its server connections, or
    /// PostgreSQL itself stops or resets every backend).
    All,
}

/// Whose connections a fault breaks (their next statement fails: `closed`, or the
/// server's own error passed on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breaks {
    /// No client connection.
    Nothing,
    /// Clients whose backend ended under them: a pooled client linked to it (the pooler
    /// closes the client with its server), a direct client on it.
    OnEndedBackend,
    /// Every client connection to the pooler (the pooler itself went away or dropped them).
    AllClients,
}

/// Who ends the backends a fault ends: what the pooler and PostgreSQL know of it afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// Nobody: the fault ends nothing.
    Nobody,
    /// The pooler closes its server connections (the backends exit once they read the close).
    Pooler,
    /// PostgreSQL ends its backends at once; the pooler learns of it when it next uses or
    /// checks each server.
    Postgres,
    /// The link between them is cut: both sides read the close.
    Link,
}

/// A span of the fault during which something is not available: between the fault's points
/// in the model (started, healed; a draining fault: drained, stopped, started).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Down {
    /// The pooler accepts no connections and serves nothing (it is restarting).
    Pooler,
    /// No new server connection can be made (PostgreSQL restarting, the link cut): clients
    /// that need one get an error.
    Postgres,
    /// The pooler hands out no server; clients that need one wait (PAUSE, KILL until RESUME).
    Paused,
    /// Nothing passes through the pooler, the link or PostgreSQL (a frozen pooler, a
    /// blackholed link, a frozen PostgreSQL host): statements that need it wait.
    Frozen,
    /// The pooler is shutting down safely ([`Meaning::drains`]): it accepts no connections
    /// and hands out no server (a client that needs one is disconnected), while clients
    /// linked to a server are served until they release it.
    Draining,
}

/// What a fault does, as the model needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meaning {
    pub ends: Ends,
    /// Who ends them.
    pub by: By,
    pub breaks: Breaks,
    /// What is unavailable while the fault holds (the model gives the fault two points: start
    /// and heal).
    pub down: Option<Down>,
    /// PostgreSQL itself restarts or resets: the harness's own direct connections
    /// (observer, contender, nemesis) must reconnect.
    pub resets_postgres: bool,
    /// It needs PgBouncer.
    pub needs_pooler: bool,
    /// It waits until every server is released (PAUSE; SIGINT's safe shutdown): a client
    /// linked to one holds it up.
    pub waits_for_release: bool,
    /// It drops the servers still logging in, and PgBouncer counts each as a failed login
    /// (`disconnect_server` in `SV_LOGIN` sets `last_login_failed`; RECONNECT's
    /// `tag_pool_dirty` closes the login phase with "connect string changed", objects.c at
    /// pgbouncer_1_24_1 and pgbouncer_1_25_2): for `server_login_retry` a client that needs
    /// a server when none is left gets `08P01 server login has been failing`. Whether a login
    /// was under way is not in the history: the model allows both.
    pub drops_logins: bool,
    /// Where the pooler's rules say its restart drains first
    /// ([`crate::pooler::PoolRules::restart_drains`]), the fault has a point before its
    /// effect. PgBouncer's SIGINT (`handle_sigint`, src/main.c at `pgbouncer_1_25_2`) sets
    /// `P_PAUSE` and `SHUTDOWN_WAIT_FOR_SERVERS` and closes its TCP listening sockets
    /// (`cleanup_tcp_sockets`, src/pooler.c; a login on the Unix socket is refused,
    /// `finish_client_login`, src/objects.c); each loop closes the idle servers
    /// (`per_loop_pause`, src/janitor.c); a client that needs a server is disconnected
    /// ("server shutting down": `pause_client`, src/objects.c); a linked server closes at its
    /// release; the process exits once no server is left (`do_full_maint`, src/janitor.c),
    /// dropping the clients. So: drain ([`Down::Draining`]), then the effect below (the
    /// exit), then the start.
    pub drains: bool,
}

/// What a fault needs of the topology beyond PgBouncer: a streaming standby (`promote`).
pub fn needs_standby(op: Op) -> bool {
    op == Op::Promote
}

/// Whether a fault acts on the link proxy between PgBouncer and PostgreSQL (the launcher
/// starts the proxy when a topology's faults name one).
pub fn needs_link(op: Op) -> bool {
    matches!(op, Op::LinkCut | Op::LinkBlackhole | Op::LinkDelay)
}

/// Which host a host fault acts on: the container PgBouncer runs in, or PostgreSQL's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Pooler,
    Postgres,
}

/// What the engine does to a host (`launcher: docker`; a process on this machine has no
/// host of its own, so the native launcher refuses these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAction {
    /// `docker pause` for `faults.hold`, then `docker unpause`: the cgroup freezer stops
    /// every process of the host at once; sockets stay open, nothing is read or answered.
    Freeze,
    /// `docker kill` (PID 1 gets SIGKILL; the kernel ends the rest of its namespace), down
    /// for `faults.hold`, then `docker start`: the host vanished and came back.
    Kill,
    /// `docker kill`, then `docker start` at once: a reboot.
    Restart,
    /// Every packet between the host and a peer dropped, both ways, for `faults.hold`
    /// (nftables in the host's network namespace): no FIN, no RST, the sockets stay open on
    /// both sides; healed, TCP retransmits what was held.
    Partition(Peer),
}

/// Whom a partition cuts a host off from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// PostgreSQL's host.
    Postgres,
    /// Everyone else: the clients, and the harness's own connections to PgBouncer.
    Clients,
}

/// The host faults, one row each: the op, its host, what the engine does. What each means
/// for the model is its row in [`meaning`], beside the process fault it equals where one
/// does (a killed host is a SIGKILLed server whose every process is gone at once).
pub const HOSTS: [(Op, Host, HostAction); 8] = [
    (Op::HostFreezePooler, Host::Pooler, HostAction::Freeze),
    (Op::HostFreezePostgres, Host::Postgres, HostAction::Freeze),
    (Op::HostKillPooler, Host::Pooler, HostAction::Kill),
    (Op::HostKillPostgres, Host::Postgres, HostAction::Kill),
    (Op::HostRestartPooler, Host::Pooler, HostAction::Restart),
    (Op::HostRestartPostgres, Host::Postgres, HostAction::Restart),
    (
        Op::PartitionPoolerPostgres,
        Host::Pooler,
        HostAction::Partition(Peer::Postgres),
    ),
    (
        Op::PartitionClientsPooler,
        Host::Pooler,
        HostAction::Partition(Peer::Clients),
    ),
];

/// The host and the engine's action of a host fault (`None` for any other op).
pub fn host(op: Op) -> Option<(Host, HostAction)> {
    HOSTS
        .iter()
        .find(|(o, ..)| *o == op)
        .map(|(_, h, a)| (*h, *a))
}

/// The meaning of a fault of the servers (`None` for any other op).
pub fn meaning(op: Op) -> Option<Meaning> {
    let m = |ends, by, breaks, down, resets_postgres, needs_pooler| {
        Some(Meaning {
            ends,
            by,
            breaks,
            down,
            resets_postgres,
            needs_pooler,
            waits_for_release: matches!(op, Op::PoolerPause | Op::PoolerRestart),
            drops_logins: op == Op::PoolerReconnect,
            drains: op == Op::PoolerRestart,
        })
    };
    use Breaks as B;
    use By as W;
    use Down as D;
    use Ends as E;
    match op {
        Op::PoolerPause => m(
            E::IdleNowLinkedAtRelease,
            W::Pooler,
            B::Nothing,
            Some(D::Paused),
            false,
            true,
        ),
        Op::PoolerReconnect => m(
            E::IdleNowLinkedAtRelease,
            W::Pooler,
            B::Nothing,
            None,
            false,
            true,
        ),
        // KILL, then RESUME: clients arriving in between wait for the RESUME.
        Op::PoolerKill => m(
            E::All,
            W::Pooler,
            B::AllClients,
            Some(D::Paused),
            false,
            true,
        ),
        Op::PoolerReload => m(E::Nothing, W::Nobody, B::Nothing, None, false, true),
        Op::PoolerRestart => m(
            E::All,
            W::Pooler,
            B::AllClients,
            Some(D::Pooler),
            false,
            true,
        ),
        // A killed host's PgBouncer is a SIGKILLed one: the kernel closes its sockets, each
        // backend reads the close and exits; clients are refused until it is started again.
        Op::PoolerCrash | Op::HostKillPooler | Op::HostRestartPooler => m(
            E::All,
            W::Pooler,
            B::AllClients,
            Some(D::Pooler),
            false,
            true,
        ),
        // Clients cut off from PgBouncer: for them it is a frozen pooler (nothing reaches it,
        // nothing comes back), while it goes on talking to PostgreSQL.
        Op::PoolerFreeze | Op::HostFreezePooler | Op::PartitionClientsPooler => m(
            E::Nothing,
            W::Nobody,
            B::Nothing,
            Some(D::Frozen),
            false,
            true,
        ),
        Op::PgRestart => m(
            E::All,
            W::Postgres,
            B::OnEndedBackend,
            Some(D::Postgres),
            true,
            false,
        ),
        // A killed host's PostgreSQL: every process gone at once (no backend answers, none
        // writes its exit), crash recovery at start; PgBouncer learns of it when it next
        // uses each server.
        Op::PgCrash | Op::HostKillPostgres | Op::HostRestartPostgres => m(
            E::All,
            W::Postgres,
            B::OnEndedBackend,
            Some(D::Postgres),
            true,
            false,
        ),
        Op::BackendKill => m(
            E::All,
            W::Postgres,
            B::OnEndedBackend,
            Some(D::Postgres),
            true,
            false,
        ),
        Op::BackendFreeze => m(E::Nothing, W::Nobody, B::Nothing, None, false, false),
        // Every process of PostgreSQL frozen: nothing ends, and every statement that reaches
        // it (pooled or direct, a new server's login too) waits for the thaw.
        Op::HostFreezePostgres => m(
            E::Nothing,
            W::Nobody,
            B::Nothing,
            Some(D::Frozen),
            false,
            false,
        ),
        // Advisory locks are not WAL-logged: the new primary holds none.
        Op::Promote => m(
            E::All,
            W::Postgres,
            B::OnEndedBackend,
            Some(D::Postgres),
            true,
            false,
        ),
        // PostgreSQL reads the cut as its client gone; PgBouncer closes the server and a
        // client linked to it. Held or slowed bytes are delivered: nothing ends.
        Op::LinkCut => m(
            E::All,
            W::Link,
            B::OnEndedBackend,
            Some(D::Postgres),
            false,
            true,
        ),
        // A partition between the hosts is the blackholed link without the proxy: nothing
        // ends while it holds shorter than TCP's retransmission gives up (minutes).
        Op::LinkBlackhole | Op::PartitionPoolerPostgres => m(
            E::Nothing,
            W::Nobody,
            B::Nothing,
            Some(D::Frozen),
            false,
            true,
        ),
        Op::LinkDelay => m(E::Nothing, W::Nobody, B::Nothing, None, false, true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_has_a_meaning_and_nothing_else_does() {
        for op in Op::FAULTS {
            assert!(meaning(op).is_some(), "{op}");
            assert!(op.is_fault() && op.is_server_fault(), "{op}");
            assert_eq!(Op::from_fault_name(op.name()), Some(op));
        }
        for op in Op::ALL {
            assert!(meaning(op).is_none(), "{op}");
        }
        // A reset of PostgreSQL ends every backend; pooler faults never reset PostgreSQL.
        for op in Op::FAULTS {
            let m = meaning(op).unwrap();
            if m.resets_postgres {
                assert_eq!(m.ends, Ends::All, "{op}");
                assert!(!m.needs_pooler, "{op}");
            }
        }
        assert_eq!(meaning(Op::PoolerKill).unwrap().breaks, Breaks::AllClients);
        // Every host fault has one row, and only they do; a host of PgBouncer's needs it.
        for op in Op::FAULTS {
            let rows = HOSTS.iter().filter(|(o, ..)| *o == op).count();
            let hosted = op.name().starts_with("host_") || op.name().starts_with("partition_");
            assert_eq!(rows, usize::from(hosted), "{op}");
            if let Some((h, HostAction::Freeze | HostAction::Kill | HostAction::Restart)) = host(op)
            {
                assert_eq!(meaning(op).unwrap().needs_pooler, h == Host::Pooler, "{op}");
                assert!(op.name().ends_with(match h {
                    Host::Pooler => "_pooler",
                    Host::Postgres => "_postgres",
                }));
            }
        }
        assert_eq!(meaning(Op::PoolerReload).unwrap().ends, Ends::Nothing);
        // Who ends what agrees with what ends: a fault that ends nothing has nobody ending it,
        // and one that resets PostgreSQL is PostgreSQL's.
        for op in Op::FAULTS {
            let m = meaning(op).unwrap();
            assert_eq!(m.ends == Ends::Nothing, m.by == By::Nobody, "{op}");
            if m.resets_postgres {
                assert_eq!(m.by, By::Postgres, "{op}");
            }
            // Waiting for release and the pooler going away break every client.
            if m.by == By::Pooler && m.ends == Ends::All {
                assert_eq!(m.breaks, Breaks::AllClients, "{op}");
            }
        }
    }
}
