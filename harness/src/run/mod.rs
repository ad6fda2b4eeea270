//! Running cases on a live topology and recording what happened. [`Runner::run_case`] runs
//! one case in a sequential schedule: reset to the empty state, connect the clients, then
//! each step through its logical client (or the nemesis, for faults), settle, observe, probe,
//! and record it all into the history ([`Recorder`]). It judges nothing: the checker reads
//! the history afterwards (the chaos loop that shrinks with it is `engine`). `plan` holds
//! the schedule's decisions.
//!
//! May import everything below it: `vocab`, `topology`, `pooler`, `launch`, `client`,
//! `observe`, `nemesis`, `history`, `workload`, `sql`.

pub mod concurrent;
pub mod plan;

use crate::client::{AppPool, LogicalClient};
use crate::history::{
    At, Body, CaseEnd, CaseStart, Completion, Invoke, ObsEvent, Observation, Phase, ProbeEvent,
    ProbeWhy, Process, Recorder, RunHeader, Skip,
};
use crate::launch::{Cluster, IO_TIMEOUT};
use crate::nemesis::{Fault, Nemesis};
use crate::observe::{Observer, Waits};
use crate::pooler::{PoolRules, ServerFate};
use crate::topology::Schedule;
use crate::vocab::{BackendId, Key, Op, Reply};
use crate::workload::Step;
use anyhow::{Result, bail};
use plan::{ProbeInput, Slot};
use std::time::{Duration, Instant};

/// Which case this is, for the history.
#[derive(Clone, Debug)]
pub struct CaseMeta {
    pub case: u32,
    pub seed: Option<u64>,
    pub phase: Phase,
    pub invariant: Option<String>,
}

/// Drives cases on one cluster.
pub struct Runner<'a> {
    pub cluster: &'a Cluster,
    pub observer: Observer,
    nemesis: Nemesis,
    pub rules: PoolRules,
    /// How cases run (the topology's `run.schedule`, or `--schedule`).
    pub schedule: Schedule,
    trace: bool,
}

impl<'a> Runner<'a> {
    pub async fn new(cluster: &'a Cluster) -> Result<Runner<'a>> {
        Ok(Runner {
            observer: Observer::connect(cluster).await?,
            nemesis: Nemesis::connect(cluster).await?,
            rules: crate::pooler::rules_for(&cluster.topology),
            schedule: cluster.topology.run.schedule,
            cluster,
            trace: std::env::var_os("PGCHAOS_TRACE").is_some(),
        })
    }

    /// The history's first event for a run of this cluster.
    pub fn header(&self, seed: u64, topology_file: &str) -> RunHeader {
        RunHeader {
            format: crate::history::event::FORMAT.into(),
            pgchaos: env!("CARGO_PKG_VERSION").into(),
            topology: self.cluster.topology.name.clone(),
            topology_file: topology_file.into(),
            pooler: self.cluster.pooler.name().into(),
            rules: self.rules.clone(),
            seed,
            launcher: self.cluster.launcher.into(),
            versions: self.cluster.versions.clone(),
            ready_ms: self.cluster.ready_ms as u64,
            cpu_pinned: self.cluster.pinned_cpu,
            cpu_online: crate::launch::cpu::online(),
            contender: self.observer.contender_id(),
            contender_start: self.observer.contender_start(),
            keys: self.cluster.topology.workload.keys.clone(),
            bounds: self.bounds(),
            timeouts: self.cluster.topology.timeouts(),
            budget: self.budget(),
            started: crate::vocab::backend::utc_stamp(),
        }
    }

    /// Run a case from the empty state, recording every event into `rec`. `evidence`: also
    /// probe every key and observe before each step (minimal cases and replays).
    pub async fn run_case(
        &self,
        rec: &mut Recorder,
        meta: CaseMeta,
        steps: &[Step],
        evidence: bool,
    ) -> Result<()> {
        let (clients, opened, reset_us) = self
            .begin_case(rec, &meta, steps, Schedule::Sequential, evidence)
            .await?;
        let nclients = clients.len();
        let mut slots = vec![Slot::default(); nclients];
        for (slot, opened) in slots.iter_mut().zip(opened) {
            slot.connected = opened;
        }
        let t_steps = Instant::now();
        let mut s = Sequence {
            clients,
            slots,
            // After the reset, the servers hold nothing.
            last_obs: Observation::default(),
            seen: vec![],
            closing: vec![],
        };

        let think = self.cluster.topology.workload.think;
        let seed = meta.seed.unwrap_or(0);
        for (i, step) in steps.iter().enumerate() {
            // Think time before each step but the first: servers age, idle timers run (the
            // concurrent schedule makes each step due at the same offset, `concurrent::due`).
            let pause = concurrent::think_for(think, seed, i);
            if i > 0 && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            self.run_step(rec, &mut s, i, step, evidence).await?;
        }
        for (c, r) in settle_notifications(steps, &mut s.clients).await {
            rec.emit(received(c, r));
        }
        drop(s);
        rec.emit(case_end(&meta, t_steps, reset_us));
        Ok(())
    }

    /// One step `i` of the sequential schedule: decide whether it can run, run its op,
    /// record its completion, settle, observe and probe (with `evidence`, every key before
    /// and after too).
    async fn run_step(
        &self,
        rec: &mut Recorder,
        s: &mut Sequence,
        i: usize,
        step: &Step,
        evidence: bool,
    ) -> Result<()> {
        let t_step = Instant::now();
        let c = step.client;
        let p = Process::Client(c);
        if evidence {
            self.evidence_before(rec, i).await?;
        }
        // Decide: a fault needs a target; a statement must not wait forever.
        let target = if step.op.targets_backend() {
            s.slots[c].last
        } else {
            None
        };
        if let Some(reason) = self.skip_reason(s, step, target) {
            rec.emit(Body::Skip(Skip::of(p, i, step, reason)));
            return Ok(());
        }

        // What arrived while the client was idle, before its op.
        for r in s.clients[c].take_received() {
            rec.emit(received(c, r));
        }
        let t_exec = Instant::now();
        let Done {
            reply,
            served,
            waits,
            closed,
            first_look,
        } = self.exec(rec, s, i, step, target).await?;
        let contender = self.observer.contender_id();
        if served.is_some_and(|b| b == contender) || target == Some(contender) {
            bail!(
                "the contender's backend {} served a client: probes are not fresh",
                contender
            );
        }
        rec.emit(Body::completion(Completion {
            p: Process::of(step.op, step.client),
            step: Some(i),
            f: step.op,
            value: reply.clone(),
            backend: served,
            server: s.clients[c].take_time(),
        }));
        for r in s.clients[c].take_received() {
            rec.emit(received(c, r));
        }
        let exec_us = t_exec.elapsed().as_micros() as u64;

        let t_obs = Instant::now();
        let obs = self.observer.settle(first_look, &waits).await?;
        s.closing.retain(|b| obs.alive(*b));
        if reply.ended_by_server() && !step.op.is_fault() {
            s.clients[c].disconnect();
        }
        let obs_us = t_obs.elapsed().as_micros() as u64;

        let t_probe = Instant::now();
        let probes = plan::probe_keys(&ProbeInput {
            op: step.op,
            key: step.key,
            reply: &reply,
            backend: served.or(target),
            closed,
            before: &s.last_obs,
            after: &obs,
        });
        rec.emit(Body::Obs(ObsEvent {
            step: Some(i),
            at: At::After,
            same: false,
            delta: None,
            obs: obs.clone(),
        }));
        for k in probes {
            self.probe(rec, i, ProbeWhy::Boundary, k).await?;
        }
        let probe_us = t_probe.elapsed().as_micros() as u64;
        if evidence {
            for k in &self.cluster.topology.workload.keys {
                self.probe(rec, i, ProbeWhy::After, *k).await?;
            }
        }
        if self.trace {
            let new = match served {
                Some(b) if !s.seen.contains(&b) => {
                    s.seen.push(b);
                    1
                }
                _ => 0,
            };
            eprintln!(
                "trace {} exec {exec_us} obs {obs_us} probe {probe_us} new {new} step {}",
                step.op,
                t_step.elapsed().as_micros()
            );
        }
        s.last_obs = obs;
        Ok(())
    }

    /// Evidence before step `i`: every key probed, then an observation.
    async fn evidence_before(&self, rec: &mut Recorder, i: usize) -> Result<()> {
        for k in &self.cluster.topology.workload.keys {
            self.probe(rec, i, ProbeWhy::Before, *k).await?;
        }
        let obs = self.observer.snapshot().await?;
        rec.emit(Body::Obs(ObsEvent {
            step: Some(i),
            at: At::Before,
            same: false,
            delta: None,
            obs,
        }));
        Ok(())
    }

    /// Why `step` is skipped, if it is: a fault aimed at a client no backend has served yet
    /// (no `target`), or an op that would wait forever for a pooled server
    /// (`plan::fault_would_wait`, `plan::would_wait`).
    fn skip_reason(&self, s: &Sequence, step: &Step, target: Option<BackendId>) -> Option<String> {
        let c = step.client;
        if step.op.targets_backend() && target.is_none() {
            Some(format!("C{} has not been served by a backend yet", c + 1))
        } else if step.op.is_server_fault() {
            plan::fault_would_wait(&self.rules, &s.slots, step.op, &s.last_obs)
        } else {
            plan::would_wait(&self.rules, &s.slots, c, step.op, &s.last_obs)
        }
    }

    /// Run step `i`'s op (decided runnable; `target`: the backend a fault aims at),
    /// recording its invoke and what the client received on a connection it closes.
    async fn exec(
        &self,
        rec: &mut Recorder,
        s: &mut Sequence,
        i: usize,
        step: &Step,
        target: Option<BackendId>,
    ) -> Result<Done> {
        let c = step.client;
        let p = Process::Client(c);
        match step.op {
            Op::Disconnect | Op::Reconnect => self.exec_disconnect(rec, s, i, step).await,
            Op::Terminate | Op::Cancel => {
                let t = target.expect("planned with a target");
                let fault = Fault::for_op(step.op, t).expect("a fault op");
                rec.emit(nemesis_invoke(i, step.op, Some(t), c));
                let (reply, time) = self.nemesis.run(fault).await?;
                s.clients[c].note_time(time);
                let mut waits = Waits::default();
                if matches!(fault, Fault::Terminate(_)) && reply == (Reply::Bool { value: true }) {
                    // Clients linked to it hear of it at their next statement.
                    for slot in s.slots.iter_mut() {
                        if slot.last == Some(t) && plan::linked(&self.rules, slot, &s.last_obs) {
                            slot.broken = true;
                        }
                    }
                    waits.gone.push(t);
                }
                Ok(Done::of(reply, None, waits))
            }
            op if op.is_server_fault() => {
                rec.emit(nemesis_invoke(i, op, target, c));
                let hold = self.cluster.topology.faults.hold;
                let (reply, time) = self
                    .nemesis
                    .server_fault(
                        self.cluster,
                        op,
                        target,
                        hold,
                        self.cluster.topology.faults.delay,
                    )
                    .await?;
                s.clients[c].note_time(time);
                self.observer.reconnect(self.cluster).await?;
                let mut waits = Waits::default();
                if reply == Reply::Ok {
                    waits = plan::fault_waits(
                        &self.rules,
                        &mut s.slots,
                        op,
                        &s.last_obs,
                        &mut s.closing,
                    );
                }
                Ok(Done::of(reply, None, waits))
            }
            Op::Sleep => {
                self.invoke(rec, p, i, step, None);
                tokio::time::sleep(Duration::from_millis(step.ms.unwrap_or(0))).await;
                Ok(Done::of(Reply::Ok, None, Waits::default()))
            }
            _ => self.exec_statement(rec, s, i, step).await,
        }
    }

    /// A `disconnect` or `reconnect` step: close the client's connection (and, to
    /// reconnect, open a new one once the observer has settled).
    async fn exec_disconnect(
        &self,
        rec: &mut Recorder,
        s: &mut Sequence,
        i: usize,
        step: &Step,
    ) -> Result<Done> {
        let c = step.client;
        let p = Process::Client(c);
        let mut closed = None;
        let (fate, b) = plan::disconnect_fate(&self.rules, &s.slots[c], &s.last_obs);
        if fate == ServerFate::Closed {
            closed = b;
        }
        let mut waits = plan::disconnect_waits(fate, b);
        plan::close_at_release(&mut waits, &s.closing);
        self.invoke(rec, p, i, step, None);
        s.clients[c].disconnect();
        // Received on the connection just closed: recorded before the op
        // completes (a reconnect's new connection never listened).
        for r in s.clients[c].take_received() {
            rec.emit(received(c, r));
        }
        s.slots[c].connected = false;
        s.slots[c].broken = false;
        if step.op == Op::Reconnect {
            self.observer.settle(None, &waits).await?;
            s.clients[c]
                .connect(&self.cluster.client_config_for(c))
                .await?;
            s.slots[c].connected = true;
            if self.rules.links_at_connect {
                // Waited for; the new connection may hold that server again at
                // once, or another, which no statement has named yet.
                waits = Waits::default();
                s.slots[c].latest_on_last = false;
            }
        }
        Ok(Done {
            closed,
            ..Done::of(Reply::Ok, None, waits)
        })
    }

    /// A statement's step: open the client's connection if it has none, run the op, and
    /// find the backend that served it.
    async fn exec_statement(
        &self,
        rec: &mut Recorder,
        s: &mut Sequence,
        i: usize,
        step: &Step,
    ) -> Result<Done> {
        let c = step.client;
        let p = Process::Client(c);
        let mut first_look = None;
        if !s.slots[c].connected {
            self.open(rec, &mut s.clients[c], Some(i)).await?;
            s.slots[c].connected = true;
            if self.rules.links_at_connect {
                s.slots[c].latest_on_last = false;
            }
        }
        self.invoke(rec, p, i, step, None);
        let bound = self.op_bound(step, IO_TIMEOUT);
        let (reply, mut served) = s.clients[c]
            .run(step.op, step.key, step.ms, step.guc, i, bound)
            .await;
        // No in-band identity (DISCARD ALL must run alone): find the step's tag.
        if served.is_none() && !reply.is_closed() {
            let obs = self.observer.snapshot().await?;
            served = obs.ran(&crate::sql::tag(i));
            first_look = Some(obs);
            if let Some(b) = served {
                s.clients[c].served_by(b);
            }
        }
        if reply.ended_by_server() {
            s.slots[c].connected = false;
        }
        s.slots[c].broken = false;
        if let Some(b) = served {
            plan::served(&mut s.slots, c, b);
        }
        let mut waits = plan::statement_waits(&self.rules, served);
        plan::close_at_release(&mut waits, &s.closing);
        Ok(Done {
            first_look,
            ..Done::of(reply, served, waits)
        })
    }

    /// The checker's budget per case, from the topology's `run` section.
    pub fn budget(&self) -> crate::history::SearchBudget {
        let r = &self.cluster.topology.run;
        crate::history::SearchBudget {
            max_states: r.search_states,
            max_work: r.search_work,
            max_ms: r.search_time.as_millis() as u64,
        }
    }

    /// The bounds `app.progress` judges this topology's ops by.
    pub fn bounds(&self) -> crate::history::Bounds {
        let t = &self.cluster.topology;
        crate::history::Bounds {
            lock_timeout_ms: t.workload.lock_wait_ms(),
            op_deadline_ms: t.run.op_deadline.as_millis() as u64,
        }
    }

    /// Case setup, shared by both schedules: reset the servers, record the case's start,
    /// make its logical clients and connect every client that has a step (through a pooler
    /// this creates no server connection: PgBouncer assigns servers at a client's first
    /// query). Returns the clients, which of them connected, and the setup's time in us
    /// (counted with the reset, not in the steps).
    pub(crate) async fn begin_case(
        &self,
        rec: &mut Recorder,
        meta: &CaseMeta,
        steps: &[Step],
        schedule: Schedule,
        pools: bool,
    ) -> Result<(Vec<LogicalClient>, Vec<bool>, u64)> {
        let t_reset = Instant::now();
        // A fault of the last case may have restarted a server under the observer.
        self.observer.reconnect(self.cluster).await?;
        self.nemesis.reconnect().await?;
        self.observer.reset().await?;
        let nclients = steps
            .iter()
            .map(|s| s.client + 1)
            .max()
            .unwrap_or(0)
            .max(self.cluster.topology.workload.clients as usize);
        rec.emit(Body::Case(CaseStart {
            case: meta.case,
            schedule,
            seed: meta.seed,
            phase: meta.phase,
            invariant: meta.invariant.clone(),
            clients: nclients,
            steps: steps.len(),
        }));
        self.observer.set_pools(pools);
        let mut clients = self.clients(nclients)?;
        let mut opened = vec![false; nclients];
        // Where a connect links a server (pgpool-II), the concurrent schedule's clients
        // connect when their scripts first need a connection (`concurrent::open_op`).
        let lazy = schedule == Schedule::Concurrent && self.rules.links_at_connect;
        for (i, c) in clients.iter_mut().enumerate() {
            if !lazy && steps.iter().any(|s| s.client == i) {
                self.open(rec, c, None).await?;
                opened[i] = true;
            }
        }
        Ok((clients, opened, t_reset.elapsed().as_micros() as u64))
    }

    /// The logical clients of a case: own connections, or an application pool they share
    /// (a fresh one per case: the reset closes every server connection).
    pub fn clients(&self, n: usize) -> Result<Vec<LogicalClient>> {
        Ok(match self.cluster.topology.app_pool {
            None => (0..n).map(LogicalClient::new).collect(),
            Some(p) => {
                let pool = AppPool::new(self.cluster.client_config(), p.max_open, p.pin)?;
                (0..n)
                    .map(|i| LogicalClient::pooled(i, pool.clone()))
                    .collect()
            }
        })
    }

    /// How long a client may take for a step's op: `base` (getting a connection and an
    /// answer), plus the lock wait for ops that wait on a lock, plus the op's own duration.
    pub fn op_bound(&self, step: &Step, base: Duration) -> Duration {
        let w = &self.cluster.topology.workload;
        let own = step.ms.filter(|_| step.op.takes_duration()).unwrap_or(0);
        let mut b = base + Duration::from_millis(own);
        if step.op.waits_for_lock() {
            b += Duration::from_millis(w.lock_wait_ms());
        }
        b
    }

    fn invoke(
        &self,
        rec: &mut Recorder,
        p: Process,
        i: usize,
        step: &Step,
        target: Option<BackendId>,
    ) {
        // The sequential schedule records no `when` and no message, as it always has.
        rec.emit(Body::Invoke(Invoke {
            when: Default::default(),
            message: None,
            ..Invoke::of_step(p, i, step, target)
        }));
    }

    /// Open a client's connection, recorded as `open` (`step`: before that step's op).
    async fn open(
        &self,
        rec: &mut Recorder,
        c: &mut LogicalClient,
        step: Option<usize>,
    ) -> Result<()> {
        let p = Process::Client(c.index);
        rec.emit(Body::Invoke(Invoke::bare(p, step, Op::Open)));
        c.connect(&self.cluster.client_config_for(c.index)).await?;
        rec.emit(Body::Ok(Completion {
            p,
            step,
            f: Op::Open,
            value: Reply::Ok,
            backend: None,
            server: None,
        }));
        Ok(())
    }

    async fn probe(&self, rec: &mut Recorder, step: usize, why: ProbeWhy, key: Key) -> Result<()> {
        let available = self.observer.probe(key).await?;
        rec.emit(Body::Probe(ProbeEvent {
            step: Some(step),
            why,
            key,
            available,
        }));
        Ok(())
    }
}

/// What the sequential schedule carries from one step to the next.
struct Sequence {
    clients: Vec<LogicalClient>,
    slots: Vec<Slot>,
    /// The observation after the last step.
    last_obs: Observation,
    /// Backends that served a step so far (for the trace).
    seen: Vec<BackendId>,
    /// Servers a fault (RECONNECT) marked to close at their next release.
    closing: Vec<BackendId>,
}

/// What a step's op did, for its completion and the observation after it.
struct Done {
    reply: Reply,
    /// The backend that served the statement.
    served: Option<BackendId>,
    /// What the observer waits for before its observation counts.
    waits: Waits,
    /// The server a disconnect closed.
    closed: Option<BackendId>,
    /// The snapshot that found the statement's backend: the settle's first look.
    first_look: Option<Observation>,
}

impl Done {
    /// An op's outcome that closed no server and took no snapshot.
    fn of(reply: Reply, served: Option<BackendId>, waits: Waits) -> Done {
        Done {
            reply,
            served,
            waits,
            closed: None,
            first_look: None,
        }
    }
}

/// The invoke of fault step `i` (op `f`, client `c`'s, aimed at `target`): the nemesis
/// runs it.
fn nemesis_invoke(i: usize, f: Op, target: Option<BackendId>, c: usize) -> Body {
    Body::Invoke(Invoke {
        p: Process::Nemesis,
        step: Some(i),
        f,
        key: None,
        ms: None,
        guc: None,
        target,
        client: Some(c),
        when: Default::default(),
        message: None,
    })
}

/// A notification a client received, as the history records it.
fn received(c: usize, r: crate::client::Received) -> Body {
    Body::Notification(crate::history::Notified {
        p: Process::Client(c),
        backend: r.backend,
        channel: r.heard.channel,
        payload: r.heard.payload,
        pid: r.heard.pid,
    })
}

/// How long the case's end waits for notifications still on their way (a `NOTIFY` is sent
/// to an idle listener at its commit; the listener's backend, the pooler and the client's
/// connection pass it on within a millisecond or two here).
pub const NOTIFY_SETTLE: Duration = Duration::from_millis(100);

/// At the case's end, when it sent a notification: wait [`NOTIFY_SETTLE`], then take what
/// each client received.
async fn settle_notifications(
    steps: &[Step],
    clients: &mut [crate::client::LogicalClient],
) -> Vec<(usize, crate::client::Received)> {
    if !steps.iter().any(|s| s.op == Op::Notify) {
        return vec![];
    }
    tokio::time::sleep(NOTIFY_SETTLE).await;
    clients
        .iter_mut()
        .enumerate()
        .flat_map(|(c, x)| x.take_received().into_iter().map(move |r| (c, r)))
        .collect()
}

/// The `case_end` event of either schedule: the time in steps since `t_steps`, and the
/// reset's (from [`Runner::begin_case`]).
fn case_end(meta: &CaseMeta, t_steps: Instant, reset_us: u64) -> Body {
    Body::CaseEnd(CaseEnd {
        case: meta.case,
        steps_us: t_steps.elapsed().as_micros() as u64,
        reset_us,
    })
}
