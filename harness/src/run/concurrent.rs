//! The concurrent schedule: every logical client is a task of its own, running its steps in
//! order against the pooler with real waits (a blocking lock waits up to `lock_timeout`, a
//! client waits for a pooled server or an application-pool connection, or, where connecting
//! links a server (pgpool-II), for the pooler to accept its connection), with optional think
//! time between ops; a generated client closes its connection when its steps are done, as the
//! application it models would (a scripted one stays); a sampler reads the servers beside them
//! every `run.sample_every`; the case ends when every client is done, or at
//! `run.case_time_limit` (ops still running are
//! recorded as `info` and cancelled). Then, once the servers are quiet, one last
//! observation and a contender probe of every key: the state the checker compares with the
//! model. All tasks share one thread and record into the same history, on the same clock.

use super::{CaseMeta, Runner};
use crate::client::LogicalClient;
use crate::history::{
    At, Body, Completion, Invoke, ObsEvent, Observation, ProbeEvent, ProbeWhy, Process, Recorder,
    Skip,
};
use crate::nemesis::Fault;
use crate::observe::backoff;
use crate::topology::Schedule;
use crate::vocab::reply::code;
use crate::vocab::{BackendId, Op, Replica, Reply};
use crate::workload::Step;
use anyhow::Result;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// An op a client has invoked and not yet completed.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    client: usize,
    op: Op,
    /// Nanoseconds on the run's clock.
    t_invoke: u64,
    bound_ns: u64,
}

/// What the client tasks and the sampler share (one thread: no locking, no awaits while a
/// borrow is held).
struct Shared<'r, 's> {
    rec: RefCell<&'r mut Recorder>,
    inflight: RefCell<BTreeMap<usize, InFlight>>,
    /// The backend that last served each client (the target of its faults).
    last: RefCell<Vec<Option<BackendId>>>,
    /// Steps whose deadline has passed and which the sampler has already looked at.
    overdue_seen: RefCell<Vec<usize>>,
    done: Cell<bool>,
    wake: tokio::sync::Notify,
    runner: &'s Runner<'s>,
    /// When the case's steps began: each step is due at its offset from here (`due`).
    start: tokio::time::Instant,
}

impl Shared<'_, '_> {
    fn emit(&self, body: Body) {
        self.rec.borrow_mut().emit(body);
    }
    fn now(&self) -> u64 {
        self.rec.borrow().now()
    }
}

/// A deterministic think time for a step: `lo..=hi`, from the case seed and the step.
pub(super) fn think_for(range: Option<(Duration, Duration)>, seed: u64, step: usize) -> Duration {
    let Some((lo, hi)) = range else {
        return Duration::ZERO;
    };
    let span = hi.saturating_sub(lo).as_micros() as u64;
    if span == 0 {
        return lo;
    }
    let r = crate::workload::case_seed(seed, step as u32);
    lo + Duration::from_micros(r % (span + 1))
}

/// When step `i` of a case is due, from the case's start: the think times of the steps up to
/// it, as the sequential schedule spends them (before each step but the first). A case then
/// lasts about as long in both schedules, however many clients share its steps: the
/// schedule staggers the case's steps, as Jepsen's `stagger` spaces a generator's ops across
/// all its workers, rather than each client pausing on its own.
pub(super) fn due(range: Option<(Duration, Duration)>, seed: u64, i: usize) -> Duration {
    (1..=i).map(|j| think_for(range, seed, j)).sum()
}

impl Runner<'_> {
    /// Run a case in the concurrent schedule, recording every event into `rec` (every case
    /// records what an evidence replay would: the sampler's rows).
    pub async fn run_case_concurrent(
        &self,
        rec: &mut Recorder,
        meta: CaseMeta,
        steps: &[Step],
    ) -> Result<()> {
        let topo = &self.cluster.topology;
        let (mut clients, _, reset_us) = self
            .begin_case(rec, &meta, steps, Schedule::Concurrent, true)
            .await?;
        let nclients = clients.len();
        let t_steps = Instant::now();
        let seed = meta.seed.unwrap_or(0);
        let pool = clients.first().and_then(|c| c.app_pool().cloned());
        let shared = Shared {
            rec: RefCell::new(rec),
            inflight: RefCell::new(BTreeMap::new()),
            last: RefCell::new(vec![None; nclients]),
            overdue_seen: RefCell::new(vec![]),
            done: Cell::new(false),
            wake: tokio::sync::Notify::new(),
            runner: self,
            start: tokio::time::Instant::now(),
        };
        let mine: Vec<Vec<usize>> = (0..nclients)
            .map(|c| {
                steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.client == c)
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        let outcome = {
            let tasks = clients
                .iter_mut()
                .enumerate()
                .map(|(c, client)| client_task(&shared, c, client, &mine[c], steps, seed));
            let all = async {
                let results = futures_util::future::join_all(tasks).await;
                shared.done.set(true);
                shared.wake.notify_one();
                results.into_iter().collect::<Result<Vec<()>>>()
            };
            let sampler = sampler(&shared, pool.as_ref());
            tokio::time::timeout(topo.run.case_time_limit, async {
                let (a, s) = tokio::join!(all, sampler);
                a.and(s)
            })
            .await
        };
        let cut = match outcome {
            Ok(r) => {
                r?;
                false
            }
            Err(_) => true,
        };
        if cut {
            // Ops still running at the case's time bound: their outcome is unknown.
            let pending: Vec<(usize, InFlight)> = shared
                .inflight
                .borrow()
                .iter()
                .map(|(s, f)| (*s, *f))
                .collect();
            for (step, f) in pending {
                shared.emit(Body::Info(Completion {
                    p: Process::of(f.op, f.client),
                    step: Some(step),
                    f: f.op,
                    value: Reply::Error {
                        code: code::TIMEOUT.into(),
                        message: format!(
                            "cut at the case time limit ({:?})",
                            topo.run.case_time_limit
                        ),
                    },
                    backend: None,
                    server: None,
                }));
            }
            for c in &clients {
                c.cancel().await;
            }
        }
        // The end state: every op done (or cancelled), the servers quiet.
        self.observer.reconnect(self.cluster).await?;
        let mut end = self.quiet_look().await?;
        end.app_pool = pool.as_ref().map(|p| p.row());
        if topo.workload.uses(Op::Migrate) {
            end.migrated = Some(self.observer.migrated().await?);
        }
        shared.emit(Body::Obs(ObsEvent {
            step: None,
            at: At::End,
            same: false,
            delta: None,
            obs: end,
        }));
        for k in &topo.workload.keys {
            let available = self.observer.probe(*k).await?;
            shared.emit(Body::Probe(ProbeEvent {
                step: None,
                why: ProbeWhy::End,
                key: *k,
                available,
            }));
        }
        for (c, r) in super::settle_notifications(steps, &mut clients).await {
            shared.emit(super::received(c, r));
        }
        drop(clients);
        shared.emit(super::case_end(&meta, t_steps, reset_us));
        Ok(())
    }

    /// A look once the servers are quiet: no backend running a statement, no server
    /// mid-login or mid-reset, no server left linked to an idle backend (bounded: 5 s, then
    /// the last look is taken as it is).
    async fn quiet_look(&self) -> Result<Observation> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let obs = self.observer.snapshot().await?;
            let busy = obs.backends.iter().any(|b| b.state == "active") || obs.pooler_busy();
            if !busy || Instant::now() > deadline {
                return Ok(obs);
            }
            backoff(attempt).await;
        }
    }
}

/// One logical client: its steps in order, each when it is due (think times, `due`).
async fn client_task(
    sh: &Shared<'_, '_>,
    c: usize,
    client: &mut LogicalClient,
    mine: &[usize],
    steps: &[Step],
    seed: u64,
) -> Result<()> {
    let runner = sh.runner;
    let topo = &runner.cluster.topology;
    let bounds = runner.bounds();
    let config = runner.cluster.client_config_for(c);
    // What the replica knows of itself, for its steps' guards (a client profile's flow).
    let mut me = Replica::default();
    let mut leaving = Leaving::default();
    for &i in mine {
        let step = &steps[i];
        let p = Process::Client(c);
        if !step.when.admits(&me) {
            sh.emit(Body::Skip(Skip::of(p, i, step, step.when.skip_reason(&me))));
            me.skipped();
            continue;
        }
        // The step waits until it is due and its client is done with the one before.
        let at = sh.start + due(topo.workload.think, seed, i);
        if at > tokio::time::Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        let target = if step.op.targets_backend() {
            sh.last.borrow()[c]
        } else {
            None
        };
        if step.op.targets_backend() && target.is_none() {
            let reason = format!("C{} has not been served by a backend yet", c + 1);
            sh.emit(Body::Skip(Skip::of(p, i, step, reason)));
            continue;
        }
        let bound_ns = bounds.of(step.op, step.ms);
        // The client gives up a while after the bound, so a slow op is seen as slow.
        let give_up = Duration::from_nanos(bound_ns) + Duration::from_secs(2);
        // What arrived while the client was idle, before its op.
        for r in client.take_received() {
            sh.emit(super::received(c, r));
        }
        // Where connecting is what links a server (pgpool-II: a child accepts the client with
        // its cached backend), the client connects when its script first needs a connection,
        // as the replica it models starts then, and the connect is an op of its own, bounded
        // like any: one that does not complete (every child serving a client) is recorded as
        // the `open`'s `timeout`, judged by app.progress, and the step sends nothing.
        if runner.rules.links_at_connect && uses_connection(step.op) && client.needs_connect() {
            let opened = open_op(sh, c, i, client, &config, &bounds).await;
            if opened != Reply::Ok {
                let reply = crate::client::not_connected(&opened);
                me.after(step.op, &reply);
                unsent(sh, c, i, step, target, reply);
                continue;
            }
        }
        let t_invoke = sh.now();
        sh.inflight.borrow_mut().insert(
            i,
            InFlight {
                client: c,
                op: step.op,
                t_invoke,
                bound_ns,
            },
        );
        sh.emit(Body::Invoke(Invoke {
            client: step.op.is_fault().then_some(c),
            ..Invoke::of_step(Process::of(step.op, c), i, step, target)
        }));
        let (reply, served) = perform(sh, c, i, step, client, &config, target, give_up).await?;
        if let Some(b) = served {
            sh.last.borrow_mut()[c] = Some(b);
        }
        if reply.ended_by_server() && !step.op.is_fault() {
            client.disconnect();
        }
        me.after(step.op, &reply);
        leaving.after(step.op, &reply);
        sh.inflight.borrow_mut().remove(&i);
        sh.emit(Body::completion(Completion {
            p: Process::of(step.op, c),
            step: Some(i),
            f: step.op,
            value: reply,
            backend: served,
            server: client.take_time(),
        }));
        for r in client.take_received() {
            sh.emit(super::received(c, r));
        }
    }
    // The steps are done: a generated client leaves as the application it models would, its
    // connection closed (a `disconnect` of no step), so a client whose steps ended inside a
    // transaction does not keep its pooled server while the others wait out their deadlines.
    // A listener outside a transaction block stays to receive (`Leaving`). A script says
    // itself what its replicas do, and a replica that stays holding its server is what the
    // starvation topologies show: scripted clients stay until the end.
    if topo.workload.script.is_empty()
        && client.app_pool().is_none()
        && !client.needs_connect()
        && !leaving.stays()
    {
        leave(sh, c, client);
    }
    // The script is done: a pinned pooled connection goes back to the pool, as a replica's
    // `defer conn.Close()` would (session locks stay on it). Recorded: the checker ends the
    // client's beliefs and its pin there.
    if client.holds_pooled() {
        let p = Process::Client(c);
        sh.emit(Body::Invoke(Invoke::bare(p, None, Op::Release)));
        client.release_pin();
        sh.emit(Body::Ok(Completion {
            p,
            step: None,
            f: Op::Release,
            value: Reply::Ok,
            backend: None,
            server: None,
        }));
    }
    Ok(())
}

/// Step `i` of client `c` sent nothing (its connection did not open): recorded as invoked
/// and answered with `reply` at once.
fn unsent(
    sh: &Shared<'_, '_>,
    c: usize,
    i: usize,
    step: &Step,
    target: Option<BackendId>,
    reply: Reply,
) {
    let p = Process::Client(c);
    sh.emit(Body::Invoke(Invoke::of_step(p, i, step, target)));
    sh.emit(Body::completion(Completion {
        p,
        step: Some(i),
        f: step.op,
        value: reply,
        backend: None,
        server: None,
    }));
}

/// Step `i` of client `c`: its own time, its error path, its connection ops, a fault, or a
/// statement on its connection (opened first when it has none). Returns the reply and the
/// backend that served it.
#[allow(clippy::too_many_arguments)]
async fn perform(
    sh: &Shared<'_, '_>,
    c: usize,
    i: usize,
    step: &Step,
    client: &mut LogicalClient,
    config: &tokio_postgres::Config,
    target: Option<BackendId>,
    give_up: Duration,
) -> Result<(Reply, Option<BackendId>)> {
    let runner = sh.runner;
    let topo = &runner.cluster.topology;
    Ok(match step.op {
        Op::Sleep => {
            tokio::time::sleep(Duration::from_millis(step.ms.unwrap_or(0))).await;
            (Reply::Ok, None)
        }
        Op::Raise => (
            Reply::Error {
                code: code::RAISED.into(),
                message: step.message.clone().unwrap_or_default(),
            },
            None,
        ),
        Op::Disconnect => {
            close(sh, c, client);
            (Reply::Ok, None)
        }
        Op::Reconnect => {
            close(sh, c, client);
            // A connect that does not complete in time is the reconnect's `timeout`.
            (
                client.open_within(config, crate::launch::IO_TIMEOUT).await,
                None,
            )
        }
        Op::Terminate | Op::Cancel => {
            let fault = Fault::for_op(step.op, target.expect("checked")).expect("a fault");
            let (reply, time) = runner.nemesis.run(fault).await?;
            client.note_time(time);
            (reply, None)
        }
        op if op.is_server_fault() => {
            let hold = topo.faults.hold;
            let (reply, time) = runner
                .nemesis
                .server_fault(runner.cluster, op, target, hold, topo.faults.delay)
                .await?;
            client.note_time(time);
            runner.observer.reconnect(runner.cluster).await?;
            (reply, None)
        }
        _ => {
            if client.needs_connect()
                && let Err(e) = client.connect(config).await
            {
                (crate::client::refused_reply(&e), None)
            } else {
                client
                    .run(step.op, step.key, step.ms, step.guc, i, give_up)
                    .await
            }
        }
    })
}

/// Whether a generated client whose steps are done stays connected: it asked to LISTEN on
/// its connection and is outside a transaction block. It stays to receive what is committed
/// on the channel (`app.notifications_arrive` judges a listener that stays, and can judge no
/// client that left); inside a block PostgreSQL holds notifications back, so it leaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Leaving {
    listens: bool,
    block: bool,
}

impl Leaving {
    /// After an op of the client and its reply.
    fn after(&mut self, op: Op, reply: &Reply) {
        if reply.ended_by_server() || matches!(op, Op::Disconnect | Op::Reconnect) {
            *self = Leaving::default();
            return;
        }
        match op {
            Op::Listen => self.listens = true,
            Op::Unlisten | Op::DiscardAll if *reply == Reply::Ok => self.listens = false,
            // A BEGIN that failed may still have opened its block (a cancel after it).
            Op::Begin => self.block = true,
            Op::Commit | Op::Rollback => self.block = false,
            _ => {}
        }
    }

    fn stays(&self) -> bool {
        self.listens && !self.block
    }
}

/// Client `c` closes its connection; what arrived on it before is recorded first.
fn close(sh: &Shared<'_, '_>, c: usize, client: &mut LogicalClient) {
    client.disconnect();
    for r in client.take_received() {
        sh.emit(super::received(c, r));
    }
}

/// Client `c` closes its connection after its last step, recorded as a `disconnect` of no
/// step (what arrived before the close is recorded first, as for a `disconnect` step).
fn leave(sh: &Shared<'_, '_>, c: usize, client: &mut LogicalClient) {
    let p = Process::Client(c);
    sh.emit(Body::Invoke(Invoke::bare(p, None, Op::Disconnect)));
    close(sh, c, client);
    sh.emit(Body::Ok(Completion {
        p,
        step: None,
        f: Op::Disconnect,
        value: Reply::Ok,
        backend: None,
        server: None,
    }));
}

/// Whether the op runs on the client's connection (not its own time, its error path, its
/// connection ops or a fault).
fn uses_connection(op: Op) -> bool {
    !matches!(op, Op::Sleep | Op::Raise | Op::Disconnect | Op::Reconnect) && !op.is_fault()
}

/// Open client `c`'s connection before step `i`, recorded as an `open` op of that step (in
/// flight while it waits, so the sampler looks at the servers when it is overdue and a cut
/// at the case's time limit records it), bounded by the open's bound plus the slack every
/// op gets. Returns its reply.
async fn open_op(
    sh: &Shared<'_, '_>,
    c: usize,
    i: usize,
    client: &mut LogicalClient,
    config: &tokio_postgres::Config,
    bounds: &crate::history::Bounds,
) -> Reply {
    let p = Process::Client(c);
    let bound_ns = bounds.of(Op::Open, None);
    let give_up = Duration::from_nanos(bound_ns) + Duration::from_secs(2);
    sh.inflight.borrow_mut().insert(
        i,
        InFlight {
            client: c,
            op: Op::Open,
            t_invoke: sh.now(),
            bound_ns,
        },
    );
    sh.emit(Body::Invoke(Invoke::bare(p, Some(i), Op::Open)));
    let reply = client.open_within(config, give_up).await;
    sh.inflight.borrow_mut().remove(&i);
    sh.emit(Body::completion(Completion {
        p,
        step: Some(i),
        f: Op::Open,
        value: reply.clone(),
        backend: None,
        server: None,
    }));
    reply
}

/// The sampler: a look every `sample_every` until the clients are done; when an op has
/// passed its bound, that look also tries an outside connection.
async fn sampler(sh: &Shared<'_, '_>, pool: Option<&crate::client::AppPool>) -> Result<()> {
    let runner = sh.runner;
    let every = runner.cluster.topology.run.sample_every;
    // Looks that failed in a row (a fault restarting a server closes the observer's
    // connections; the fault's own call waits until they can be opened again).
    let mut failures = 0;
    while !sh.done.get() {
        let t = sh.now();
        let overdue: Vec<usize> = sh
            .inflight
            .borrow()
            .iter()
            .filter(|(s, f)| {
                t.saturating_sub(f.t_invoke) > f.bound_ns && !sh.overdue_seen.borrow().contains(s)
            })
            .map(|(s, _)| *s)
            .collect();
        sh.overdue_seen.borrow_mut().extend(&overdue);
        let mut obs = match runner.observer.sample(!overdue.is_empty()).await {
            Ok(obs) => obs,
            // A fault restarted a server under the look: open the connections again (the
            // fault's own call waits for the servers) and look next time.
            Err(e) => {
                let faulting = sh
                    .inflight
                    .borrow()
                    .values()
                    .any(|f| f.op.is_server_fault());
                // Only looks that fail with no fault running count, and each first tries
                // to open the connections again.
                if !faulting {
                    failures += 1;
                    if failures > 3 {
                        return Err(e.context("sampler: four looks in a row failed"));
                    }
                    runner.observer.reopen(runner.cluster).await?;
                }
                tokio::time::sleep(every).await;
                continue;
            }
        };
        failures = 0;
        obs.app_pool = pool.map(|p| p.row());
        sh.rec.borrow_mut().emit_at(
            t,
            Body::Obs(ObsEvent {
                step: None,
                at: At::Sample,
                same: false,
                delta: None,
                obs,
            }),
        );
        if sh.done.get() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = sh.wake.notified() => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_outside_a_block_stays_and_every_other_client_leaves() {
        let ok = Reply::Ok;
        let run = |ops: &[(Op, &Reply)]| {
            let mut l = Leaving::default();
            for (op, r) in ops {
                l.after(*op, r);
            }
            l.stays()
        };
        assert!(!run(&[]));
        assert!(!run(&[(Op::TryLock, &Reply::Bool { value: true })]));
        assert!(run(&[(Op::Listen, &ok)]));
        assert!(!run(&[(Op::Listen, &ok), (Op::Begin, &ok)]));
        assert!(run(&[
            (Op::Listen, &ok),
            (Op::Begin, &ok),
            (Op::Rollback, &ok)
        ]));
        assert!(!run(&[(Op::Listen, &ok), (Op::Unlisten, &ok)]));
        assert!(!run(&[(Op::Listen, &ok), (Op::DiscardAll, &ok)]));
        // DISCARD ALL refused inside a block unlistens nothing.
        let refused = Reply::error(code::ACTIVE_TRANSACTION);
        assert!(run(&[(Op::Listen, &ok), (Op::DiscardAll, &refused)]));
        // A new connection listens to nothing.
        assert!(!run(&[(Op::Listen, &ok), (Op::Reconnect, &ok)]));
        let killed = Reply::error(code::ADMIN_SHUTDOWN);
        assert!(!run(&[(Op::Listen, &ok), (Op::Ping, &killed)]));
    }

    #[test]
    fn steps_are_due_at_the_sum_of_the_pauses_before_them() {
        let ms = Duration::from_millis;
        assert_eq!(due(None, 7, 5), Duration::ZERO);
        let fixed = Some((ms(10), ms(10)));
        assert_eq!(due(fixed, 7, 0), Duration::ZERO);
        assert_eq!(due(fixed, 7, 1), ms(10));
        assert_eq!(due(fixed, 7, 4), ms(40));
        // Drawn pauses: each step's offset is the one before plus its own pause, within range.
        let range = Some((ms(10), ms(100)));
        for i in 1..40 {
            let step = due(range, 99, i) - due(range, 99, i - 1);
            assert_eq!(step, think_for(range, 99, i));
            assert!((ms(10)..=ms(100)).contains(&step), "{step:?}");
        }
    }
}
