//! Every statement pgchaos sends, in one place: the ops of logical clients, the observer's
//! snapshot, the contender's probe, and the admin actions (terminate, cancel, reset).
//!
//! Ops use the simple query protocol (no named prepared statements, and it works through
//! any pooler mode). Each op reports the backend that served it, as `(pid, backend_start)`,
//! in the same query message as the op itself, so even in transaction mode the identity is
//! the one that ran the lock call. Each op also carries a tag comment (`/*pgchaos s12*/`)
//! that the observer can find in `pg_stat_activity.query` for ops that cannot report their
//! identity in-band (`DISCARD ALL` must run alone; a failed statement returns no row).
//!
//! The identity row of an op also echoes the op's step ([`echo`]: `<step> AS step`), so the
//! client can tell a reply that answers another statement (a pooler whose replies slipped
//! out of step: `vocab::reply::code::OUT_OF_STEP`, docs/session-state.md, "Replies out of
//! step") from its own.
//!
//! May import `vocab`.

use crate::vocab::{Guc, Key, Op};

/// The identity of the backend running the statement: pid and `backend_start` as the server
/// prints it (ISO DateStyle, pinned for the client role by the launcher; the harness turns it
/// into microseconds, [`crate::vocab::backend::parse_timestamptz`]). Two columns: the contender's
/// own; an op's identity echoes its step too ([`identity`]), and op results have one more. Deliberately bare: on a fresh backend, `extract(epoch ...)` and casts cost ~0.7 ms of
/// catalog lookups, and every case starts with fresh backends.
pub const IDENTITY: &str =
    "SELECT pg_backend_pid(), backend_start FROM pg_stat_get_activity(pg_backend_pid())";
const IDENTITY_FROM: &str = "FROM pg_stat_get_activity(pg_backend_pid())";

/// The identity columns of an op's reply with its step echoed: pid, `backend_start`, the
/// literal `step`, the server's clock (`pg_postmaster_start_time()`: which PostgreSQL's clock
/// the times are read from) and the server's time as the row is computed (`clock_timestamp()`),
/// five columns. A row that also carries the op's result has seven: the result, then
/// `clock_timestamp()` again. PostgreSQL evaluates a target list left to right
/// (`ExecBuildProjectionInfo` emits one step per entry in order; confirmed by hand,
/// docs/checker.md, "Server time"), so the first time is read before the call and the second
/// after it. The client compares the echoed step with the one it sent
/// ([`crate::client::in_step`]).
pub fn echo(step: usize) -> String {
    format!(
        "SELECT pg_backend_pid(), backend_start, {step} AS step, pg_postmaster_start_time(), \
         clock_timestamp()"
    )
}

/// The columns of an identity row ([`echo`]), and of one that carries the op's result.
pub const IDENTITY_COLS: usize = 5;
pub const IDENTITY_RESULT_COLS: usize = 7;

/// Whether op `op`'s identity row is read after its statement (transaction control: in an
/// aborted transaction the identity query would fail before it), so its time is an upper
/// bound of the op's; every other op's is a lower bound.
pub fn identity_after(op: Op) -> bool {
    matches!(op, Op::Begin | Op::Commit | Op::Rollback)
}

/// The identity query of step `step`: [`IDENTITY`] with the step echoed.
pub fn identity(step: usize) -> String {
    format!("{} {IDENTITY_FROM}", echo(step))
}

/// The tag comment that marks a step's SQL ([`crate::vocab::step::tag`]).
pub use crate::vocab::step::tag;

/// The SQL one op sends through its logical client, or `None` for ops that are not SQL
/// on the client's connection (connect/disconnect, and terminate/cancel from the admin side).
pub fn op_sql(op: Op, key: Option<Key>, step: usize) -> Option<String> {
    op_sql_ms(op, key, None, step)
}

/// [`op_sql`] for ops that take a duration (`pg_sleep`).
pub fn op_sql_ms(op: Op, key: Option<Key>, ms_arg: Option<u64>, step: usize) -> Option<String> {
    op_sql_full(op, key, ms_arg, None, 0, step)
}

/// [`op_sql_ms`] for every op, the settings' too (`set`, `set_local` and `show` name a
/// setting; a `set`'s value is `ms_arg`), and the named objects' (`vocab::object`: client
/// `client` puts its label in what it creates). `prepare_protocol`'s is the text of the
/// statement it prepares; `execute_protocol` sends no text (Bind/Execute of that statement).
pub fn op_sql_full(
    op: Op,
    key: Option<Key>,
    ms_arg: Option<u64>,
    guc: Option<Guc>,
    client: usize,
    step: usize,
) -> Option<String> {
    let t = tag(step);
    let label = || crate::vocab::object::label_of(client);
    let name = |op: Op| op.object().expect("an object op").0.row().name;
    let g = || guc.expect("op names a setting").name();
    let literal = || {
        guc.expect("op names a setting")
            .row()
            .unit
            .literal(ms_arg.unwrap_or(0))
    };
    let k = || key.expect("op takes a key").sql_args();
    // Ops that can fail on their own (lock timeout, the failing statement) report identity
    // in a first statement of the same message, so an error still leaves it; the others
    // return identity and result in one row (they fail only where identity would too).
    let id = identity(step);
    let id_then = |stmt: String| format!("{t} {id}; {stmt}");
    let with_id = |call: String| {
        format!(
            "{t} {}, {call}, clock_timestamp() {IDENTITY_FROM}",
            echo(step)
        )
    };
    Some(match op {
        Op::TryLock => with_id(format!("pg_try_advisory_lock({})", k())),
        // The lock calls that wait report the server's time after the grant beside it.
        Op::Lock => id_then(format!(
            "SELECT pg_advisory_lock({})::text, clock_timestamp()",
            k()
        )),
        Op::Unlock => with_id(format!("pg_advisory_unlock({})", k())),
        Op::UnlockAll => with_id("pg_advisory_unlock_all()::text".into()),
        Op::XactLock => id_then(format!(
            "SELECT pg_advisory_xact_lock({})::text, clock_timestamp()",
            k()
        )),
        Op::TryXactLock => with_id(format!("pg_try_advisory_xact_lock({})", k())),
        Op::FailStatement => id_then("SELECT 1/0".into()),
        Op::Ping => with_id("1::text".into()),
        // The statement applications send (Airflow: `SET LOCK_TIMEOUT`), after the identity
        // in the same message. Outside a transaction block the message is its own implicit
        // transaction: a SET stays after it, a SET LOCAL ends with it.
        Op::Set => id_then(format!("SET {} = {}", g(), literal())),
        Op::SetLocal => id_then(format!("SET LOCAL {} = {}", g(), literal())),
        // The value this session set (`SET` or `SET LOCAL`), else `default` (the role's or
        // the server's): `Unit::show_sql`.
        Op::Show => {
            let g = guc.expect("op names a setting");
            with_id(g.row().unit.show_sql(g.name()))
        }
        // `RESET g`: back to the default, transactional like `SET`.
        Op::Reset => id_then(format!("RESET {}", g())),
        // Named objects: the identity first, so a use that fails still reports its backend.
        // Each is its own implicit transaction outside a block (a WITH HOLD cursor may be
        // declared there; it is committed with the message).
        Op::Prepare => id_then(format!(
            "PREPARE {} AS SELECT '{}'::text",
            name(op),
            label()
        )),
        Op::Execute => id_then(format!("EXECUTE {}", name(op))),
        Op::Deallocate => id_then(format!("DEALLOCATE {}", name(op))),
        // Executing it reports the backend that ran it and whose it is, in one row.
        // (All text: the extended protocol's rows are read as text like the simple ones.)
        Op::PrepareProtocol => format!(
            "{t} SELECT pg_backend_pid()::text, backend_start::text, '{}'::text {IDENTITY_FROM}",
            label()
        ),
        Op::ExecuteProtocol => return None,
        // Readable by every role: a `SET ROLE` leaked onto the backend must not turn a read
        // of the table into a permission error (what the model predicts is the table's).
        Op::CreateTemp => id_then(format!(
            "CREATE TEMP TABLE {n} AS SELECT '{}'::text AS creator; GRANT SELECT ON {n} TO PUBLIC",
            label(),
            n = name(op),
        )),
        Op::ReadTemp => id_then(format!("SELECT creator FROM {}", name(op))),
        Op::DeclareHold => id_then(format!(
            "DECLARE {} SCROLL CURSOR WITH HOLD FOR SELECT '{}'::text",
            name(op),
            label()
        )),
        Op::Fetch => id_then(format!("FETCH FIRST FROM {}", name(op))),
        // LISTEN, UNLISTEN and NOTIFY after the identity, like SET: outside a block the
        // message's implicit transaction commits them; inside one they wait for COMMIT.
        Op::Listen => id_then(format!("LISTEN {}", crate::vocab::notify::CHANNEL)),
        Op::Unlisten => id_then(format!("UNLISTEN {}", crate::vocab::notify::CHANNEL)),
        Op::Notify => id_then(format!(
            "NOTIFY {}, '{}'",
            crate::vocab::notify::CHANNEL,
            crate::vocab::notify::payload(client, step)
        )),
        Op::PgSleep => id_then(format!(
            "SELECT pg_sleep({})::text",
            ms_arg.unwrap_or(0) as f64 / 1000.0
        )),
        // Transaction control first: in an aborted transaction the identity query itself
        // would fail, so it comes after (same query message, same backend).
        Op::Begin => format!("{t} BEGIN; {id}"),
        Op::Commit => format!("{t} COMMIT; {id}"),
        Op::Rollback => format!("{t} ROLLBACK; {id}"),
        // Refused inside any transaction block, including a multi-statement message.
        Op::DiscardAll => format!("{t} DISCARD ALL"),
        Op::Disconnect
        | Op::Reconnect
        | Op::Terminate
        | Op::Cancel
        | Op::Open
        | Op::Release
        | Op::Sleep
        | Op::Raise
        | Op::Migrate
        | Op::PoolerPause
        | Op::PoolerReconnect
        | Op::PoolerKill
        | Op::PoolerReload
        | Op::PoolerRestart
        | Op::PoolerCrash
        | Op::PoolerFreeze
        | Op::PgRestart
        | Op::PgCrash
        | Op::BackendKill
        | Op::BackendFreeze
        | Op::Promote
        | Op::LinkCut
        | Op::LinkBlackhole
        | Op::LinkDelay
        | Op::HostFreezePooler
        | Op::HostFreezePostgres
        | Op::HostKillPooler
        | Op::HostKillPostgres
        | Op::HostRestartPooler
        | Op::HostRestartPostgres
        | Op::PartitionPoolerPostgres
        | Op::PartitionClientsPooler => return None,
    })
}

/// The rows an op's message returns when it succeeds, as [`op_sql_full`] writes it: what the
/// client checks a reply against ([`crate::client::in_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// No row at all (`DISCARD ALL`, which must run alone).
    NoRow,
    /// The identity row with its step echoed ([`IDENTITY_COLS`] columns).
    Identity,
    /// One row: the identity, its step, the op's result and the time after it
    /// ([`IDENTITY_RESULT_COLS`] columns).
    IdentityWithResult,
    /// The identity row, then the statement's result row (one column; two for the lock calls
    /// that wait: the result, then the server's time after it).
    IdentityThenResult,
    /// Not a simple-query op of its own (the protocol-level ops, `migrate`, the rest).
    Other,
}

/// The rows op `op` returns when it succeeds.
pub fn shape(op: Op) -> Shape {
    match op {
        Op::DiscardAll => Shape::NoRow,
        Op::TryLock | Op::Unlock | Op::UnlockAll | Op::TryXactLock | Op::Ping | Op::Show => {
            Shape::IdentityWithResult
        }
        Op::Lock | Op::XactLock | Op::PgSleep | Op::Execute | Op::ReadTemp | Op::Fetch => {
            Shape::IdentityThenResult
        }
        Op::FailStatement
        | Op::Set
        | Op::SetLocal
        | Op::Reset
        | Op::Prepare
        | Op::Deallocate
        | Op::CreateTemp
        | Op::DeclareHold
        | Op::Listen
        | Op::Unlisten
        | Op::Notify
        | Op::Begin
        | Op::Commit
        | Op::Rollback => Shape::Identity,
        _ => Shape::Other,
    }
}

/// The migration `migrate` applies (one version, as golang-migrate's first migration would):
/// its table and the version record. Created with the database; emptied by every reset.
pub const MIGRATIONS_TABLE: &str = "pgchaos_schema_migrations";
pub const MIGRATED_TABLE: &str = "pgchaos_migrated_v1";

/// Setup of the migration record (at launch, as the client role, which owns the database).
pub fn migrations_setup() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} \
         (version int NOT NULL, replica text NOT NULL, backend_pid int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
}

/// The reset of the migration: version 1 not applied, its table gone.
pub fn migrations_reset() -> String {
    format!("TRUNCATE {MIGRATIONS_TABLE}; DROP TABLE IF EXISTS {MIGRATED_TABLE}")
}

/// `migrate`, first half: is version 1 recorded? (Identity first, then the count.)
pub fn migrate_check(step: usize) -> String {
    format!(
        "{} {}; SELECT count(*)::text FROM {MIGRATIONS_TABLE} WHERE version = 1",
        tag(step),
        identity(step)
    )
}

/// `migrate`, second half: apply version 1 (create its table: a second application fails
/// with 42P07, as a real migration would) and record it, in one implicit transaction.
pub fn migrate_apply(step: usize, replica: &str) -> String {
    format!(
        "{} {}; CREATE TABLE {MIGRATED_TABLE} (id int); \
         INSERT INTO {MIGRATIONS_TABLE} (version, replica, backend_pid) VALUES (1, '{replica}', pg_backend_pid())",
        tag(step),
        identity(step)
    )
}

/// How often version 1 was recorded (the case's end state; evidence for `app.applied_once`).
pub fn migrations_count() -> String {
    format!("SELECT count(*) FROM {MIGRATIONS_TABLE} WHERE version = 1")
}

/// The concurrent sampler's view: [`look`] with what a backend waits for and who blocks it
/// (`pg_blocking_pids`, only for backends waiting on a lock: it takes the lock manager's
/// partition locks).
pub fn sample(role: &str) -> String {
    look(role, true)
}

/// Terminate a backend only if it is still the same `(pid, backend_start)`. No row: that
/// backend is already gone. (Without the timeout argument: PostgreSQL's own wait polls in
/// 100 ms steps; the observer confirms the exit itself, polling every millisecond.) Columns:
/// [`signal_col`].
pub fn terminate(pid: i32, start_us: i64) -> String {
    signal_backend("pg_terminate_backend", pid, start_us)
}

/// Cancel the current query of a backend, if it is still the same `(pid, backend_start)`.
/// Columns as [`terminate`]'s.
pub fn cancel(pid: i32, start_us: i64) -> String {
    signal_backend("pg_cancel_backend", pid, start_us)
}

/// The columns of a signalling statement's row ([`terminate`], [`cancel`]): the server's
/// clock (`pg_postmaster_start_time()`), its time read before the call (`clock_timestamp()`),
/// and the call's result. The target list is evaluated left to right ([`echo`]), so the time
/// is read before the signal is sent, and the signal's effect (the backend's exit, the
/// cancel) comes after it.
pub mod signal_col {
    pub const CLOCK: usize = 0;
    pub const BEFORE: usize = 1;
    pub const SIGNALLED: usize = 2;
}

fn signal_backend(function: &str, pid: i32, start_us: i64) -> String {
    format!(
        "SELECT pg_postmaster_start_time(), clock_timestamp(), {function}(pid) \
         FROM pg_stat_activity \
         WHERE pid = {pid} AND (extract(epoch FROM backend_start) * 1000000)::int8 = {start_us}"
    )
}

/// The server's clock and its time now: read after a terminated backend was confirmed gone, an
/// upper bound of its exit by the server's clock (its advisory locks are released before it
/// leaves `pg_stat_activity`: docs/checker.md, "A fault's server time").
pub const CLOCK_NOW: &str = "SELECT pg_postmaster_start_time(), clock_timestamp()";

/// Whether a backend identity is still present (1 row) or gone (0 rows).
pub fn backend_present(pid: i32, start_us: i64) -> String {
    format!(
        "SELECT 1 FROM pg_stat_activity \
         WHERE pid = {pid} AND (extract(epoch FROM backend_start) * 1000000)::int8 = {start_us}"
    )
}

/// The contender's availability probe: the try form at transaction scope, in autocommit,
/// so a successful probe is released when its statement ends and leaves nothing behind.
pub const CONTENDER_PROBE_BIG: &str = "SELECT pg_try_advisory_xact_lock($1::int8)";
pub const CONTENDER_PROBE_PAIR: &str = "SELECT pg_try_advisory_xact_lock($1::int4, $2::int4)";

/// The observer's snapshot: [`look`] without the wait columns.
pub fn snapshot(role: &str) -> String {
    look(role, false)
}

/// A look's part, the first column of each row of [`look`].
pub mod look_part {
    /// `clock_timestamp()` before `pg_stat_activity` is read (and the postmaster's start).
    pub const LO: i32 = 0;
    /// A backend of the client role in the harness database (`pg_stat_activity`).
    pub const BACKEND: i32 = 1;
    /// `clock_timestamp()` between the two reads.
    pub const MID: i32 = 2;
    /// An advisory lock in the harness database (`pg_locks`).
    pub const LOCK: i32 = 3;
    /// `clock_timestamp()` after `pg_locks` was read.
    pub const HI: i32 = 4;
}

/// A look at PostgreSQL: every backend of the client role in the harness database, then every
/// advisory lock in that database, with the server's clock before, between and after
/// (docs/checker.md, "A look is two reads"). One `UNION ALL`: PostgreSQL runs an `Append`'s
/// parts one after the other, in order, and each function scan reads its whole view when its
/// first row is asked for, so `pg_stat_activity` is read between the first two times and
/// `pg_locks` between the last two (confirmed on 18.6 with `EXPLAIN` and by hand). The rows
/// come back in that order; the caller joins locks to backends by pid. Columns: part
/// ([`look_part`]), pid, start_us, backend_start, state, query, classid, objid, objsubid,
/// mode, granted, xact_start, wait_event_type, wait_event, blocking pids (text; `waits`
/// only), clock (the postmaster's start, part LO), t (the time, parts LO, MID, HI).
pub fn look(role: &str, waits: bool) -> String {
    // The role as `regrole` reads it: a quoted identifier (a mixed-case or odd name stays
    // itself), in a string literal.
    let role = literal(&ident(role));
    let us = |e: &str| format!("(extract(epoch FROM {e}) * 1000000)::int8");
    let now = us("clock_timestamp()");
    let blank = |n: usize| vec!["NULL"; n].join(", ");
    let wait_cols = if waits {
        "a.wait_event_type, a.wait_event, \
         CASE WHEN a.wait_event_type = 'Lock' THEN pg_blocking_pids(a.pid)::text END"
    } else {
        "NULL, NULL, NULL"
    };
    let db = "(SELECT oid FROM pg_database WHERE datname = current_database())";
    format!(
        "SELECT {lo}::int4 AS part, NULL::int4 AS pid, NULL::int8 AS start_us, \
                NULL::text AS backend_start, NULL::text AS state, NULL::text AS query, \
                NULL::oid AS classid, NULL::oid AS objid, NULL::int2 AS objsubid, \
                NULL::text AS mode, NULL::bool AS granted, NULL::text AS xact_start, \
                NULL::text AS wait_event_type, NULL::text AS wait_event, NULL::text AS blockers, \
                {clock} AS clock, {now} AS t \
         UNION ALL \
         SELECT {backend}, a.pid, {start}, a.backend_start::text, a.state, left(a.query, 32), \
                {b5}, a.xact_start::text, {wait_cols}, NULL, NULL \
         FROM pg_stat_get_activity(NULL) a \
         WHERE a.usesysid = {role}::regrole AND a.datid = {db} \
         UNION ALL SELECT {mid}, {b14}, NULL, {now} \
         UNION ALL \
         SELECT {lock}, l.pid, {b4}, l.classid, l.objid, l.objsubid, l.mode, l.granted, {b4}, NULL, NULL \
         FROM pg_locks l WHERE l.locktype = 'advisory' AND l.database = {db} \
         UNION ALL SELECT {hi}, {b14}, NULL, {now}",
        lo = look_part::LO,
        backend = look_part::BACKEND,
        mid = look_part::MID,
        lock = look_part::LOCK,
        hi = look_part::HI,
        clock = us("pg_postmaster_start_time()"),
        start = us("a.backend_start"),
        b4 = blank(4),
        b5 = blank(5),
        b14 = blank(14),
    )
}

/// Advisory locks held in the harness database by anyone (reset verification).
pub const ALL_ADVISORY_LOCKS: &str = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// Backends of the client role (reset verification).
pub fn role_backends(role: &str) -> String {
    format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = {} AND datname = current_database()",
        literal(role)
    )
}

/// Terminate every backend of the client role; one row per backend, with its pid (the reset
/// then waits for those processes to exit). The call stays in the target list: in WHERE,
/// the planner may run it before the filters that spare the observer itself.
pub fn terminate_role(role: &str) -> String {
    format!(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE usename = {} AND datname = current_database() AND pid <> pg_backend_pid()",
        literal(role)
    )
}

/// The server's full version string (`PostgreSQL 18.6 on x86_64-...`).
pub const VERSION: &str = "SELECT version()";

/// Per-run settings of the client role (PgBouncer refuses startup options, so they are role
/// defaults): the lock wait bound, a statement bound (a safety net, never a modelled
/// outcome: 10 s past the longest statement a case can run), ISO dates (ops report `backend_start` as
/// text the harness parses), and the clients' application_name (so PgBouncer need not `SET`
/// it on every new server connection). A topology that declares `statement_timeout` or
/// `idle_in_transaction_session_timeout` (validated durations) gets them for the role, as
/// declared: a role setting would otherwise override the server's.
pub fn configure_client_role(
    role: &str,
    lock_timeout_ms: u64,
    longest_ms: u64,
    declared: &std::collections::BTreeMap<String, String>,
) -> String {
    let statement = declared
        .get("statement_timeout")
        .cloned()
        .unwrap_or_else(|| format!("{}ms", lock_timeout_ms.max(longest_ms) + 10_000));
    let idle_in_tx = declared
        .get("idle_in_transaction_session_timeout")
        .cloned()
        .unwrap_or_else(|| "0".into());
    let (role, statement, idle_in_tx) = (ident(role), literal(&statement), literal(&idle_in_tx));
    format!(
        "ALTER ROLE {role} SET lock_timeout = '{lock_timeout_ms}ms'; \
         ALTER ROLE {role} SET statement_timeout = {statement}; \
         ALTER ROLE {role} SET idle_in_transaction_session_timeout = {idle_in_tx}; \
         ALTER ROLE {role} SET DateStyle = 'ISO, MDY'; \
         ALTER ROLE {role} SET application_name = 'pgchaos'"
    )
}

/// The roles `SET ROLE` switches to (`vocab::setting::Unit::Role`: `pgchaos_r1` for client 1,
/// one per client the topology may run): NOLOGIN, each a member of `pg_read_all_stats` (so
/// the identity query still reads `backend_start` after a switch) and granted to the client
/// role. Idempotent (it runs at every start of a cluster); PostgreSQL 16+ grants without
/// INHERIT, so the client role gains no privilege it does not switch to. Checked by hand:
/// docs/session-state.md, "SET ROLE and search_path". The client role reaches the block as a
/// setting of the session (a literal outside it), never as text inside its dollar quote.
pub fn setting_roles(client_role: &str, count: u32) -> String {
    use crate::vocab::setting::ROLE_PREFIX;
    let client = "current_setting('pgchaos.client_role')";
    format!(
        "SELECT set_config('pgchaos.client_role', {}, false); ",
        literal(client_role)
    ) + &format!(
        "DO $pgchaos$ DECLARE r text; BEGIN \
         FOR n IN 1..{count} LOOP r := '{ROLE_PREFIX}' || n; \
         IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN \
         EXECUTE format('CREATE ROLE %I NOLOGIN', r); \
         EXECUTE format('GRANT pg_read_all_stats TO %I', r); \
         IF current_setting('server_version_num')::int >= 160000 THEN \
         EXECUTE format('GRANT %I TO %I WITH INHERIT FALSE', r, {client}); \
         ELSE EXECUTE format('GRANT %I TO %I', r, {client}); END IF; \
         END IF; END LOOP; END $pgchaos$"
    )
}

/// `s` as an SQL identifier: double-quoted, its double quotes doubled.
pub fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `s` as an SQL string literal: single-quoted, its single quotes doubled
/// (`standard_conforming_strings`, on since PostgreSQL 9.1, keeps backslashes as they are).
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Give a role a password (SCRAM, PostgreSQL's default encryption): the run's password for
/// TCP logins. `password` is generated by the harness (hex); both are quoted all the same.
pub fn set_password(role: &str, password: &str) -> String {
    format!("ALTER ROLE {} PASSWORD {}", ident(role), literal(password))
}

/// Create the harness's role and database in a fresh cluster (the initdb template).
pub fn create_role_and_database(role: &str, db: &str) -> [String; 2] {
    [
        format!("CREATE ROLE {} LOGIN", ident(role)),
        format!("CREATE DATABASE {} OWNER {}", ident(db), ident(role)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::object;

    /// A role name with a quote of each kind, a `$` and mixed case reaches no statement as
    /// text of its own: identifiers double-quoted, literals single-quoted, doubled inside.
    #[test]
    fn role_names_are_quoted_where_they_reach_sql() {
        let role = r#"Ops"Te'am$x"#;
        assert_eq!(ident(role), r#""Ops""Te'am$x""#);
        assert_eq!(literal(role), r#"'Ops"Te''am$x'"#);
        assert!(look(role, false).contains(r#"'"Ops""Te''am$x"'::regrole"#));
        assert!(role_backends(role).contains(r#"usename = 'Ops"Te''am$x'"#));
        assert!(terminate_role(role).contains(r#"usename = 'Ops"Te''am$x'"#));
        assert_eq!(
            set_password(role, "p'w"),
            r#"ALTER ROLE "Ops""Te'am$x" PASSWORD 'p''w'"#
        );
        let roles = setting_roles(role, 2);
        assert!(roles.starts_with(
            r#"SELECT set_config('pgchaos.client_role', 'Ops"Te''am$x', false); DO $pgchaos$"#
        ));
        // The DO block's body never holds the name.
        assert!(!roles.split_once("DO $pgchaos$").unwrap().1.contains("Ops"));
        let declared = [("statement_timeout".to_string(), "1s'".to_string())].into();
        assert!(
            configure_client_role(role, 5, 0, &declared)
                .contains(r#"ALTER ROLE "Ops""Te'am$x" SET statement_timeout = '1s'''"#)
        );
    }

    #[test]
    fn every_sql_op_carries_its_tag_and_key() {
        // The op table says which ops send SQL of their own (`Sends::Sql`); every other op
        // sends none here: the connection ops, the nemesis's faults, the client-side `sleep`
        // and `raise`, `migrate` (its own statements, `migrate_*` below), and a protocol-level
        // Bind/Execute.
        let mut with_sql = 0;
        for row in crate::vocab::op::OPS {
            let op = row.op;
            let key = op.takes_key().then_some(Key::Big(4242424242));
            let ms = (op.takes_duration() || op.sets()).then_some(250);
            let guc = op.takes_guc().then_some(Guc::LockTimeout);
            let sql = op_sql_full(op, key, ms, guc, 2, 7);
            if row.sends != crate::vocab::op::Sends::Sql {
                assert_eq!(sql, None, "{op} sends no SQL of its own");
                continue;
            }
            let sql = sql.unwrap_or_else(|| panic!("{op} is a statement but has no SQL"));
            with_sql += 1;
            assert!(sql.starts_with("/*pgchaos s7*/"), "{op}: {sql}");
            if op.takes_key() {
                assert!(sql.contains("(4242424242)"), "{op}: {sql}");
            }
            if op.takes_guc() {
                assert!(sql.contains("lock_timeout"), "{op}: {sql}");
            }
            if op.sets() {
                assert!(sql.ends_with("lock_timeout = '250ms'"), "{op}: {sql}");
            }
            if let Some((kind, role)) = op.object() {
                if role == object::Role::Create {
                    assert!(
                        sql.contains("'C3'::text"),
                        "{op} puts its client's label: {sql}"
                    );
                }
                if !kind.per_client() {
                    assert!(sql.contains(kind.row().name), "{op}: {sql}");
                }
            }
            if op == Op::Notify {
                // The payload names the sender: client 2 (0-based) is C3.
                assert!(sql.ends_with("NOTIFY pgchaos, 'C3 s7'"), "{op}: {sql}");
            }
            if op != Op::DiscardAll {
                assert!(sql.contains("pg_backend_pid()"), "{op} reports identity");
                if op != Op::PrepareProtocol {
                    assert!(sql.contains("7 AS step"), "{op} echoes its step: {sql}");
                }
            } else {
                assert!(!sql.contains(';'), "DISCARD ALL must be sent alone");
            }
        }
        let sql_ops = crate::vocab::op::OPS
            .iter()
            .filter(|r| r.sends == crate::vocab::op::Sends::Sql)
            .count();
        assert_eq!(with_sql, sql_ops, "every SQL op was checked");
        assert!(with_sql >= 28, "the table lists the SQL ops: {with_sql}");
        assert!(
            op_sql_ms(Op::PgSleep, None, Some(250), 1)
                .unwrap()
                .contains("pg_sleep(0.25)")
        );
        assert!(
            op_sql(Op::TryLock, Some(Key::Pair(1, 2)), 1)
                .unwrap()
                .contains("(1, 2)")
        );
    }

    /// Every op that sends SQL of its own has a shape, and the shape is what its SQL returns:
    /// a result beside the identity exactly when the echo is followed by a comma.
    #[test]
    fn every_sql_op_has_the_shape_of_its_sql() {
        for row in crate::vocab::op::OPS {
            let op = row.op;
            if row.sends != crate::vocab::op::Sends::Sql || op == Op::PrepareProtocol {
                continue;
            }
            let key = op.takes_key().then_some(Key::Big(7));
            let ms = (op.takes_duration() || op.sets()).then_some(250);
            let guc = op.takes_guc().then_some(Guc::LockTimeout);
            let sql = op_sql_full(op, key, ms, guc, 0, 3).unwrap();
            let beside = sql.contains(&format!("{},", echo(3)));
            match shape(op) {
                Shape::NoRow => assert!(!sql.contains("AS step"), "{op}"),
                Shape::IdentityWithResult => assert!(beside, "{op}: {sql}"),
                Shape::Identity | Shape::IdentityThenResult => {
                    assert!(!beside && sql.contains(&identity(3)), "{op}: {sql}")
                }
                Shape::Other => panic!("{op} sends SQL but has no shape"),
            }
        }
    }

    #[test]
    fn transaction_control_runs_before_the_identity_query() {
        for op in [Op::Commit, Op::Rollback, Op::Begin] {
            let sql = op_sql(op, None, 1).unwrap();
            assert!(
                sql.find(&identity(1)).unwrap() > sql.find(';').unwrap(),
                "{sql}"
            );
        }
    }
}
