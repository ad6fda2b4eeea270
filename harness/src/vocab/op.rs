//! The operations a logical client (or the nemesis) can perform, by name. (Their SQL lives
//! in `sql.rs`.)

use serde::{Deserialize, Serialize};
use std::fmt;

/// One step's operation. Names are the YAML spelling (`try_lock`, `xact_lock`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `pg_try_advisory_lock(k)`: session lock, never waits.
    TryLock,
    /// `pg_advisory_lock(k)`: session lock, waits up to the role's `lock_timeout`.
    Lock,
    /// `pg_advisory_unlock(k)`.
    Unlock,
    /// `pg_advisory_unlock_all()`.
    UnlockAll,
    Begin,
    Commit,
    Rollback,
    /// `pg_advisory_xact_lock(k)`: transaction lock, waits up to `lock_timeout`.
    XactLock,
    /// `pg_try_advisory_xact_lock(k)`.
    TryXactLock,
    /// `DISCARD ALL` (refused inside a transaction block).
    DiscardAll,
    /// The client closes its connection (behind a pooler its server may stay).
    Disconnect,
    /// The client opens a new connection (closing any old one first).
    Reconnect,
    /// A fault: `pg_terminate_backend` of the backend that last served this client (run by
    /// the nemesis, from a direct connection).
    Terminate,
    /// A fault: `pg_cancel_backend` of the backend that last served this client (nemesis).
    Cancel,
    /// A statement that raises an error (`division_by_zero`); inside a transaction it aborts it.
    FailStatement,
    /// `SELECT 1`: any statement at all (the article's "SELECT 1 cannot run").
    Ping,
    /// `SET <guc> = '<ms>ms'` (a setting of `vocab::setting`): for the session, or, inside a
    /// transaction, until it ends (kept at commit, undone at rollback).
    Set,
    /// `SET LOCAL <guc> = '<ms>ms'`: until the transaction ends (outside one, no effect).
    SetLocal,
    /// Reads a setting back (`pg_settings`): the value the session set, or `default`.
    Show,
    /// `RESET <guc>` (`reset: role` is `RESET ROLE`): back to the default, for the session
    /// (inside a transaction: undone at rollback, as `SET` is).
    Reset,
    // Named objects a backend owns (`vocab::object`: one row per kind says what each op does).
    /// `PREPARE pgchaos_ps AS SELECT '<client>'`.
    Prepare,
    /// `EXECUTE pgchaos_ps`: the label of the client that prepared it, or 26000.
    Execute,
    /// `DEALLOCATE pgchaos_ps`.
    Deallocate,
    /// A protocol-level named prepared statement (tokio-postgres `prepare`: Parse, Describe,
    /// Sync), replacing the client's previous one.
    PrepareProtocol,
    /// Bind/Execute of the client's latest protocol-level statement: its label, or 26000.
    ExecuteProtocol,
    /// `CREATE TEMP TABLE pgchaos_tmp AS SELECT '<client>'`.
    CreateTemp,
    /// `SELECT creator FROM pgchaos_tmp`: the label, or 42P01.
    ReadTemp,
    /// `DECLARE pgchaos_cur SCROLL CURSOR WITH HOLD FOR SELECT '<client>'`.
    DeclareHold,
    /// `FETCH FIRST FROM pgchaos_cur`: the label, or 34000.
    Fetch,
    /// `LISTEN pgchaos` (the one shared channel, `vocab::notify`): for the session from its
    /// commit (inside a transaction block: at COMMIT, not at ROLLBACK).
    Listen,
    /// `UNLISTEN pgchaos`, at commit like `LISTEN`.
    Unlisten,
    /// `NOTIFY pgchaos, '<client>:<step>'` (the payload names the sender): delivered at
    /// commit to every backend listening then.
    Notify,
    /// Script only: the client thinks for `ms`, holding whatever it holds (no statement).
    Sleep,
    /// Script only: `SELECT pg_sleep(ms / 1000)` on its connection (server-side work).
    PgSleep,
    /// Script only: a schema migration as golang-migrate runs one under its lock: read the
    /// version table; if version 1 is not applied, work for `ms`, then apply it (create its
    /// table, record the version). Replies whether this call applied it.
    Migrate,
    /// Script only: the tool's own error path (a client profile's exception: Rails'
    /// `ConcurrentMigrationError`, Prisma's `P1002`). No statement; the reply is an error
    /// with code `raised` and the tool's message, and the replica has failed from here on
    /// (only its `when: held`/`failed`/`always` steps still run).
    Raise,
    /// Not a workload op: a client opening its connection (at case setup, or before a step
    /// whose client has none).
    Open,
    /// Not a workload op: a client's script ended and its pinned application-pool
    /// connection went back to the pool as it is (Go's `Conn.Close`): the client is gone,
    /// any session lock stays on the connection.
    Release,
    // Faults of the servers, from the topology's `faults` section (run by the nemesis; what
    // each means for the model is `vocab::fault`).
    /// PgBouncer `PAUSE` (waits until every server is released, then closes them all),
    /// held for `faults.hold`, then `RESUME`.
    PoolerPause,
    /// PgBouncer `RECONNECT`: idle servers closed now, linked ones when released.
    PoolerReconnect,
    /// PgBouncer `KILL` of the database (every client and server connection dropped), then
    /// `RESUME`.
    PoolerKill,
    /// PgBouncer `RELOAD` of an unchanged configuration.
    PoolerReload,
    /// PgBouncer SIGINT (safe shutdown: waits until servers are released), started again on
    /// the same port.
    PoolerRestart,
    /// PgBouncer SIGKILL, started again on the same port.
    PoolerCrash,
    /// PgBouncer SIGSTOP for `faults.hold`, then SIGCONT.
    PoolerFreeze,
    /// PostgreSQL fast restart (SIGINT to the postmaster, started again on the same port).
    PgRestart,
    /// PostgreSQL immediate restart (SIGQUIT: no checkpoint, crash recovery at start).
    PgCrash,
    /// SIGKILL of the backend that last served this client: the postmaster ends every
    /// backend and recovers.
    BackendKill,
    /// SIGSTOP of the backend that last served this client for `faults.hold`, then SIGCONT.
    BackendFreeze,
    /// Failover (`postgres.standby: true`): fence the primary, promote the standby, repoint
    /// PgBouncer; then a new standby is made of the new primary.
    Promote,
    /// The link between PgBouncer and PostgreSQL (through pgchaos's proxy) cut: every
    /// connection on it closed, new ones refused for `faults.hold`, then healed.
    LinkCut,
    /// That link blackholed for `faults.hold`: sockets stay open, nothing is forwarded
    /// (half-open connections); healed, what was held is delivered.
    LinkBlackhole,
    /// That link delayed by `faults.delay` each way for `faults.hold`.
    LinkDelay,
    // Faults of whole hosts (`launcher: docker`: each server is its own container; what
    // the engine does to it is `vocab::fault::host`).
    /// PgBouncer's host frozen (`docker pause`: the cgroup freezer stops every process at
    /// once) for `faults.hold`, then thawed.
    HostFreezePooler,
    /// PostgreSQL's host frozen for `faults.hold`: the postmaster and every backend at once.
    HostFreezePostgres,
    /// PgBouncer's host gone (`docker kill`) for `faults.hold`, then started again.
    HostKillPooler,
    /// PostgreSQL's host gone for `faults.hold`, then started again (crash recovery).
    HostKillPostgres,
    /// PgBouncer's host killed and started again at once (a reboot).
    HostRestartPooler,
    /// PostgreSQL's host killed and started again at once.
    HostRestartPostgres,
    /// PgBouncer's host cut off from PostgreSQL's for `faults.hold` (nftables in its
    /// network namespace drops every packet both ways: half-open connections), then healed.
    PartitionPoolerPostgres,
    /// PgBouncer's host cut off from the clients (every peer but PostgreSQL) for
    /// `faults.hold`, then healed.
    PartitionClientsPooler,
}

/// Which ops an op is among: what a topology may weigh, what a script may add, what the
/// nemesis runs, and what only the runner records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A random workload can weigh it (`workload.ops`), and a script can name it.
    Workload,
    /// Only a script names it (it takes an argument, or a protocol's context).
    Script,
    /// A fault of the servers (the `faults` section; scripts may name it).
    Fault,
    /// Recorded by the runner, never asked for (`open`, `release`).
    Internal,
}

/// How an op reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sends {
    /// No statement of its own: a connection op, a fault, the client's own time or error
    /// path, `migrate` (its own statements, `sql::migrate_*`).
    Nothing,
    /// One message of SQL (`sql::op_sql_full`), judged as a statement.
    Sql,
    /// Protocol messages without SQL text of its own (Bind/Execute of a prepared statement),
    /// judged as a statement.
    Protocol,
}

/// One op: its YAML name, its family and what it sends.
#[derive(Clone, Copy, Debug)]
pub struct OpRow {
    pub op: Op,
    pub name: &'static str,
    pub family: Family,
    pub sends: Sends,
}

const fn row(op: Op, name: &'static str, family: Family, sends: Sends) -> OpRow {
    OpRow {
        op,
        name,
        family,
        sends,
    }
}

/// Every op, one row each. The workload's rows come in shrinking order: proptest shrinks a
/// union towards its first alternatives, so the simplest ops come first (`Op::ALL` keeps
/// this order, and generation draws from it: reordering them changes every seed's cases).
pub const OPS: &[OpRow] = &[
    row(Op::TryLock, "try_lock", Family::Workload, Sends::Sql),
    row(Op::Ping, "ping", Family::Workload, Sends::Sql),
    row(Op::Unlock, "unlock", Family::Workload, Sends::Sql),
    row(Op::Begin, "begin", Family::Workload, Sends::Sql),
    row(Op::Commit, "commit", Family::Workload, Sends::Sql),
    row(Op::Rollback, "rollback", Family::Workload, Sends::Sql),
    row(
        Op::TryXactLock,
        "try_xact_lock",
        Family::Workload,
        Sends::Sql,
    ),
    row(Op::Lock, "lock", Family::Workload, Sends::Sql),
    row(Op::XactLock, "xact_lock", Family::Workload, Sends::Sql),
    row(Op::UnlockAll, "unlock_all", Family::Workload, Sends::Sql),
    row(
        Op::Disconnect,
        "disconnect",
        Family::Workload,
        Sends::Nothing,
    ),
    row(Op::Reconnect, "reconnect", Family::Workload, Sends::Nothing),
    row(Op::DiscardAll, "discard_all", Family::Workload, Sends::Sql),
    row(
        Op::FailStatement,
        "fail_statement",
        Family::Workload,
        Sends::Sql,
    ),
    row(Op::Cancel, "cancel", Family::Workload, Sends::Nothing),
    row(Op::Terminate, "terminate", Family::Workload, Sends::Nothing),
    row(Op::Show, "show", Family::Workload, Sends::Sql),
    row(Op::Set, "set", Family::Workload, Sends::Sql),
    row(Op::SetLocal, "set_local", Family::Workload, Sends::Sql),
    row(Op::Reset, "reset", Family::Workload, Sends::Sql),
    row(Op::Execute, "execute", Family::Workload, Sends::Sql),
    row(Op::Prepare, "prepare", Family::Workload, Sends::Sql),
    row(Op::Deallocate, "deallocate", Family::Workload, Sends::Sql),
    row(
        Op::ExecuteProtocol,
        "execute_protocol",
        Family::Workload,
        Sends::Protocol,
    ),
    row(
        Op::PrepareProtocol,
        "prepare_protocol",
        Family::Workload,
        Sends::Sql,
    ),
    row(Op::ReadTemp, "read_temp", Family::Workload, Sends::Sql),
    row(Op::CreateTemp, "create_temp", Family::Workload, Sends::Sql),
    row(Op::Fetch, "fetch", Family::Workload, Sends::Sql),
    row(
        Op::DeclareHold,
        "declare_hold",
        Family::Workload,
        Sends::Sql,
    ),
    row(Op::Listen, "listen", Family::Workload, Sends::Sql),
    row(Op::Notify, "notify", Family::Workload, Sends::Sql),
    row(Op::Unlisten, "unlisten", Family::Workload, Sends::Sql),
    row(Op::Sleep, "sleep", Family::Script, Sends::Nothing),
    row(Op::PgSleep, "pg_sleep", Family::Script, Sends::Sql),
    row(Op::Migrate, "migrate", Family::Script, Sends::Nothing),
    row(Op::Raise, "raise", Family::Script, Sends::Nothing),
    row(Op::Open, "open", Family::Internal, Sends::Nothing),
    row(Op::Release, "release", Family::Internal, Sends::Nothing),
    row(
        Op::PoolerPause,
        "pooler_pause",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PoolerReconnect,
        "pooler_reconnect",
        Family::Fault,
        Sends::Nothing,
    ),
    row(Op::PoolerKill, "pooler_kill", Family::Fault, Sends::Nothing),
    row(
        Op::PoolerReload,
        "pooler_reload",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PoolerRestart,
        "pooler_restart",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PoolerCrash,
        "pooler_crash",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PoolerFreeze,
        "pooler_freeze",
        Family::Fault,
        Sends::Nothing,
    ),
    row(Op::PgRestart, "pg_restart", Family::Fault, Sends::Nothing),
    row(Op::PgCrash, "pg_crash", Family::Fault, Sends::Nothing),
    row(
        Op::BackendKill,
        "backend_kill",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::BackendFreeze,
        "backend_freeze",
        Family::Fault,
        Sends::Nothing,
    ),
    row(Op::Promote, "promote", Family::Fault, Sends::Nothing),
    row(Op::LinkCut, "link_cut", Family::Fault, Sends::Nothing),
    row(
        Op::LinkBlackhole,
        "link_blackhole",
        Family::Fault,
        Sends::Nothing,
    ),
    row(Op::LinkDelay, "link_delay", Family::Fault, Sends::Nothing),
    row(
        Op::HostFreezePooler,
        "host_freeze_pooler",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::HostFreezePostgres,
        "host_freeze_postgres",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::HostKillPooler,
        "host_kill_pooler",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::HostKillPostgres,
        "host_kill_postgres",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::HostRestartPooler,
        "host_restart_pooler",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::HostRestartPostgres,
        "host_restart_postgres",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PartitionPoolerPostgres,
        "partition_pooler_postgres",
        Family::Fault,
        Sends::Nothing,
    ),
    row(
        Op::PartitionClientsPooler,
        "partition_clients_pooler",
        Family::Fault,
        Sends::Nothing,
    ),
];

/// A selection of [`OPS`].
#[derive(Clone, Copy)]
enum Pick {
    Family(Family),
    Statement,
}

const fn picks(r: &OpRow, p: Pick) -> bool {
    match p {
        Pick::Family(f) => r.family as u8 == f as u8,
        Pick::Statement => !matches!(r.sends, Sends::Nothing),
    }
}

/// How many ops of `OPS` `p` keeps.
const fn count(p: Pick) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < OPS.len() {
        if picks(&OPS[i], p) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The ops of `OPS` that `p` keeps, in table order (`N` is their count).
const fn collect<const N: usize>(p: Pick) -> [Op; N] {
    let mut out = [Op::Ping; N];
    let (mut i, mut n) = (0, 0);
    while i < OPS.len() {
        if picks(&OPS[i], p) {
            out[n] = OPS[i].op;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "the count of a selection of ops");
    out
}

const WORKLOAD: Pick = Pick::Family(Family::Workload);
const SCRIPT: Pick = Pick::Family(Family::Script);
const FAULT: Pick = Pick::Family(Family::Fault);

impl Op {
    /// Script-only ops (they take an argument, or a protocol's context).
    pub const SCRIPT_ONLY: [Op; count(SCRIPT)] = collect(SCRIPT);

    /// Ops a random workload can weigh, simplest first.
    pub const ALL: [Op; count(WORKLOAD)] = collect(WORKLOAD);

    /// Faults of the servers a topology's `faults` section can weigh.
    pub const FAULTS: [Op; count(FAULT)] = collect(FAULT);

    /// Ops judged as statements (`Sends::Sql` or `Sends::Protocol`): what the model steps
    /// and `app.progress` bounds.
    pub const STATEMENTS: [Op; count(Pick::Statement)] = collect(Pick::Statement);

    /// This op's row of [`OPS`].
    pub fn row(self) -> &'static OpRow {
        OPS.iter()
            .find(|r| r.op == self)
            .expect("every op has a row")
    }

    /// A fault of the servers by its YAML name.
    pub fn from_fault_name(s: &str) -> Option<Op> {
        Op::FAULTS.into_iter().find(|op| op.name() == s)
    }

    /// A fault of the servers (not `terminate`/`cancel`, which are client steps' faults).
    pub fn is_server_fault(self) -> bool {
        Op::FAULTS.contains(&self)
    }

    /// A fault aimed at the backend that last served the step's client.
    pub fn targets_backend(self) -> bool {
        matches!(
            self,
            Op::Terminate | Op::Cancel | Op::BackendKill | Op::BackendFreeze
        )
    }

    /// The YAML / report spelling.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// A workload op by its YAML name (`open` is not one; nor are the script-only ops).
    pub fn from_name(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == s)
    }

    /// An op a script may name: a workload op, a script-only one, or a fault of the servers.
    pub fn from_script_name(s: &str) -> Option<Op> {
        Op::from_name(s)
            .or_else(|| Op::SCRIPT_ONLY.into_iter().find(|op| op.name() == s))
            .or_else(|| Op::from_fault_name(s))
    }

    /// Takes a duration (`sleep`, `pg_sleep`; `migrate`: the work inside the lock).
    pub fn takes_duration(self) -> bool {
        matches!(self, Op::Sleep | Op::PgSleep | Op::Migrate)
    }

    /// Waits on an advisory lock (bounded by `lock_timeout`).
    pub fn waits_for_lock(self) -> bool {
        matches!(self, Op::Lock | Op::XactLock)
    }

    /// Whether the op names an advisory key.
    pub fn takes_key(self) -> bool {
        matches!(
            self,
            Op::TryLock | Op::Lock | Op::Unlock | Op::XactLock | Op::TryXactLock
        )
    }

    /// Names a setting (`vocab::setting`): `set`, `set_local`, `show`, `reset`.
    pub fn takes_guc(self) -> bool {
        matches!(self, Op::Set | Op::SetLocal | Op::Show | Op::Reset)
    }

    /// Sets a setting (its value is the step's `ms`).
    pub fn sets(self) -> bool {
        matches!(self, Op::Set | Op::SetLocal)
    }

    /// Session-level lock API (`api: session`).
    pub fn is_session_api(self) -> bool {
        matches!(
            self,
            Op::TryLock | Op::Lock | Op::Unlock | Op::UnlockAll | Op::DiscardAll
        )
    }

    /// Run by the nemesis, not by the client itself.
    pub fn is_fault(self) -> bool {
        matches!(self, Op::Terminate | Op::Cancel) || self.is_server_fault()
    }

    /// Releases every advisory lock of a scope in one call, which PostgreSQL does one lock
    /// partition at a time (`LockReleaseAll` in `src/backend/storage/lmgr/lock.c`): a
    /// `pg_locks` read while it runs can see some of the keys released and others still held
    /// (`pg_advisory_unlock_all()` and `DISCARD ALL` the session's, COMMIT and ROLLBACK the
    /// transaction's).
    pub fn releases_all(self) -> bool {
        matches!(
            self,
            Op::UnlockAll | Op::DiscardAll | Op::Commit | Op::Rollback
        )
    }

    /// Asks for an advisory lock (session or transaction level, try or wait).
    pub fn acquires(self) -> bool {
        matches!(
            self,
            Op::TryLock | Op::Lock | Op::XactLock | Op::TryXactLock
        )
    }

    /// Sends no statement: the client's own time (`sleep`) or its error path (`raise`).
    pub fn client_side(self) -> bool {
        matches!(self, Op::Sleep | Op::Raise)
    }

    /// Transaction-level lock API (`api: xact`).
    pub fn is_xact_api(self) -> bool {
        matches!(self, Op::XactLock | Op::TryXactLock)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per op, each name the op's serde spelling (what histories and YAML carry),
    /// and every op in exactly one family.
    #[test]
    fn every_op_has_one_row_named_as_serde_spells_it() {
        let mut names = std::collections::BTreeSet::new();
        let mut ops = std::collections::BTreeSet::new();
        for r in OPS {
            assert!(ops.insert(r.op), "{:?}: two rows", r.op);
            assert!(names.insert(r.name), "{}: two rows", r.name);
            let serde = serde_json::to_string(&r.op).unwrap();
            assert_eq!(serde, format!("\"{}\"", r.name), "{:?}", r.op);
            assert_eq!(r.op.row().name, r.name);
        }
        let families = Op::ALL.len() + Op::SCRIPT_ONLY.len() + Op::FAULTS.len() + 2;
        assert_eq!(
            families,
            OPS.len(),
            "workload + script + faults + open/release"
        );
        for op in Op::ALL {
            assert_eq!(Op::from_name(op.name()), Some(op));
        }
        for op in Op::FAULTS {
            assert_eq!(Op::from_fault_name(op.name()), Some(op));
            assert!(
                !Op::STATEMENTS.contains(&op),
                "{op}: a fault sends no statement"
            );
        }
        assert!(Op::STATEMENTS.contains(&Op::ExecuteProtocol));
        assert!(Op::STATEMENTS.contains(&Op::PgSleep));
        assert!(!Op::STATEMENTS.contains(&Op::Migrate));
    }
}
