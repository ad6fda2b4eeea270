//! Runs one case against a live topology, one step at a time (a deterministic schedule):
//! reset to the empty state, run each step through its logical client, observe, probe,
//! and hand the facts to the model and the checker. Knows nothing of reports.

use crate::checker::{self, Probe, StepFacts, Violation};
use crate::client::{BackendId, LogicalClient, Reply, Served};
use crate::key::Key;
use crate::launch::Cluster;
use crate::model::{Model, Plan, PoolSpec, StepCheck};
use crate::observer::{Observation, Observer};
use crate::op::Op;
use crate::workload::Step;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Everything that happened in one step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: usize,
    #[serde(flatten)]
    pub step: Step,
    pub reply: Reply,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Reply>,
    /// The backend that ran the statement, as it reported itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Served>,
    /// The backend a terminate/cancel acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<BackendId>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub probes: Vec<Probe>,
    /// Contender results for every workload key before and after the step (evidence replays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contender_before: Option<Vec<(Key, bool)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contender_after: Option<Vec<(Key, bool)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_before: Option<Observation>,
    pub observation: Observation,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub violations: Vec<Violation>,
    pub elapsed_us: u64,
}

/// One case's run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseRun {
    pub steps: Vec<StepRecord>,
    pub violations: Vec<Violation>,
    /// Time spent in steps (ops, observation, probes), excluding the reset.
    pub steps_us: u64,
    pub reset_us: u64,
}

impl CaseRun {
    pub fn violates(&self, invariant: &str) -> bool {
        self.violations.iter().any(|v| v.invariant == invariant)
    }

    /// Violated invariant names, in first-seen order, without repeats.
    pub fn violated(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for v in &self.violations {
            if !out.contains(&v.invariant) {
                out.push(v.invariant.clone());
            }
        }
        out
    }
}

/// Drives cases on one cluster.
pub struct Runner<'a> {
    pub cluster: &'a Cluster,
    pub observer: Observer,
    spec: PoolSpec,
}

impl<'a> Runner<'a> {
    pub async fn new(cluster: &'a Cluster) -> Result<Runner<'a>> {
        Ok(Runner {
            observer: Observer::connect(cluster).await?,
            spec: PoolSpec::from_topology(&cluster.topology),
            cluster,
        })
    }

    async fn contender_all(&self, keys: &[Key]) -> Result<Vec<(Key, bool)>> {
        let mut out = vec![];
        for k in keys {
            out.push((*k, self.observer.probe(*k).await?));
        }
        Ok(out)
    }

    /// Run a case from the empty state. `evidence`: also probe every key and snapshot
    /// before each step (for minimal cases and replays).
    pub async fn run_case(&self, steps: &[Step], evidence: bool) -> Result<CaseRun> {
        let t_reset = Instant::now();
        self.observer.reset().await?;
        let nclients = steps
            .iter()
            .map(|s| s.client + 1)
            .max()
            .unwrap_or(0)
            .max(self.cluster.topology.workload.clients as usize);
        let keys = &self.cluster.topology.workload.keys;
        let mut model = Model::new(self.spec.clone(), nclients);
        let mut clients: Vec<LogicalClient> = (0..nclients).map(LogicalClient::new).collect();
        // Case setup: every logical client connects before the first step (through a pooler
        // this creates no server connection: PgBouncer assigns servers at a client's first
        // query). Counted with the reset, not in the steps.
        let client_config = self.cluster.client_config();
        for (i, c) in clients.iter_mut().enumerate() {
            if steps.iter().any(|s| s.client == i) {
                c.connect(&client_config).await?;
                model.connected(i);
            }
        }
        let reset_us = t_reset.elapsed().as_micros() as u64;
        let t_steps = Instant::now();
        let mut records = vec![];
        let mut all = vec![];
        let mut server_count = 0usize;
        let trace = std::env::var_os("PGCHAOS_TRACE").is_some();
        let mut seen_backends: Vec<BackendId> = vec![];

        for (i, step) in steps.iter().enumerate() {
            let t = Instant::now();
            let c = step.client;
            let plan = model.plan(c, step.op, server_count);
            let (contender_before, observation_before) = if evidence {
                (
                    Some(self.contender_all(keys).await?),
                    Some(self.observer.snapshot().await?),
                )
            } else {
                (None, None)
            };
            let (connect, target) = match plan {
                Plan::Skip(reason) => {
                    records.push(StepRecord {
                        index: i,
                        step: step.clone(),
                        reply: Reply::Skipped { reason },
                        expected: None,
                        backend: None,
                        target: None,
                        probes: vec![],
                        contender_before,
                        contender_after: None,
                        observation_before,
                        observation: Observation::default(),
                        violations: vec![],
                        elapsed_us: t.elapsed().as_micros() as u64,
                    });
                    continue;
                }
                Plan::Run { connect, target } => (connect, target),
            };

            let t_exec = Instant::now();
            let mut check = StepCheck::default();
            let (reply, served) = match step.op {
                Op::Disconnect => {
                    clients[c].disconnect();
                    check = model.disconnect(c);
                    (Reply::Ok, None)
                }
                Op::Reconnect => {
                    clients[c].disconnect();
                    check = model.disconnect(c);
                    self.observer
                        .settle(None, &[], &check.idle, &check.gone)
                        .await?;
                    clients[c].connect(&client_config).await?;
                    model.connected(c);
                    (Reply::Ok, None)
                }
                Op::Terminate => {
                    let target = target.expect("planned with a target");
                    let reply = self.observer.terminate(target).await?;
                    check = model.terminate(target, &reply);
                    (reply, None)
                }
                Op::Cancel => {
                    let target = target.expect("planned with a target");
                    let reply = self.observer.cancel(target).await?;
                    check = model.cancel(target);
                    (reply, None)
                }
                _ => {
                    if connect {
                        clients[c].connect(&client_config).await?;
                        model.connected(c);
                    }
                    clients[c].run(step.op, step.key, i).await
                }
            };

            let exec_us = t_exec.elapsed().as_micros() as u64;
            let t_obs = Instant::now();
            // The model needs the serving backend before the pooler's asynchronous work can be
            // awaited: in-band identity, else the observer's tag (one snapshot).
            let mut served = served;
            let mut first_look = None;
            if !matches!(
                step.op,
                Op::Disconnect | Op::Reconnect | Op::Terminate | Op::Cancel
            ) {
                if served.is_none() && !reply.is_closed() {
                    let obs = self.observer.snapshot().await?;
                    if let Some(b) = obs.ran_step(i) {
                        served = Some(Served {
                            backend: b,
                            backend_start: obs.backend_start(b).unwrap_or_default().to_string(),
                        });
                    }
                    first_look = Some(obs);
                }
                check = model.apply(
                    c,
                    step.op,
                    step.key,
                    served.as_ref().map(|s| s.backend),
                    &reply,
                );
            }
            let quiet: Vec<BackendId> = served.iter().map(|s| s.backend).collect();
            let observation = self
                .observer
                .settle(first_look, &quiet, &check.idle, &check.gone)
                .await?;
            // A reply of `closed` means the connection is gone on our side too.
            if reply.is_closed() {
                clients[c].disconnect();
            }

            let obs_us = t_obs.elapsed().as_micros() as u64;
            let t_probe = Instant::now();
            let mut probes = vec![];
            for (inv, key) in &check.probes {
                probes.push(Probe {
                    invariant: inv.to_string(),
                    key: *key,
                    available: self.observer.probe(*key).await?,
                    expected_available: !model.key_held(*key),
                });
            }
            let probe_us = t_probe.elapsed().as_micros() as u64;
            if trace {
                let new = match &served {
                    Some(s) if !seen_backends.contains(&s.backend) => {
                        seen_backends.push(s.backend);
                        1
                    }
                    _ => 0,
                };
                eprintln!(
                    "trace {} exec {exec_us} obs {obs_us} probe {probe_us} new {new}",
                    step.op
                );
            }
            let contender_after = if evidence {
                Some(self.contender_all(keys).await?)
            } else {
                None
            };
            let violations = checker::check_step(
                &mut model,
                &StepFacts {
                    step: i,
                    client: c,
                    op: step.op,
                    reply: &reply,
                    check: &check,
                    obs: &observation,
                    probes: &probes,
                },
            );
            // The contender must be a different backend from every one that held or served
            // anything in this case (the acceptance protocol's "fresh" contender).
            let contender = self.observer.contender_id;
            if model.backends.contains_key(&contender) || model.dead.contains(&contender) {
                bail!("the contender's backend {contender} served a client: probes are not fresh");
            }
            server_count = observation.backends.len();
            all.extend(violations.iter().cloned());
            records.push(StepRecord {
                index: i,
                step: step.clone(),
                reply,
                expected: check.expected_reply.clone(),
                backend: served,
                target,
                probes,
                contender_before,
                contender_after,
                observation_before,
                observation,
                violations,
                elapsed_us: t.elapsed().as_micros() as u64,
            });
        }
        drop(clients);
        Ok(CaseRun {
            steps: records,
            violations: all,
            steps_us: t_steps.elapsed().as_micros() as u64,
            reset_us,
        })
    }
}

/// Symbolic names for backends, in order of first appearance in a case: B1, B2, ...
pub fn symbolic(records: &[StepRecord]) -> Vec<BackendId> {
    let mut order: Vec<BackendId> = vec![];
    for r in records {
        for b in r
            .backend
            .as_ref()
            .map(|s| s.backend)
            .into_iter()
            .chain(r.target)
        {
            if !order.contains(&b) {
                order.push(b);
            }
        }
    }
    order
}

/// `B<n>` of a backend in a case's symbolic order.
pub fn symbol(order: &[BackendId], b: BackendId) -> String {
    match order.iter().position(|x| *x == b) {
        Some(i) => format!("B{}", i + 1),
        None => format!("pid {}", b.pid),
    }
}
