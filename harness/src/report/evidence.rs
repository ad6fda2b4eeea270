//! `evidence.json`: the acceptance-protocol record of a minimal failure (the seed article's
//! retained-evidence list): holder and contender `(pid, backend_start)`, the boundary
//! action, pg_locks before and after, the contender's result before and after, the pooler's
//! views, the cleanup, the versions and pool mode. Built from the evidence replay's events.
//! A concurrent case adds `samples_during_boundary`: the sampler's rows (pg_locks joined with
//! pg_stat_activity, the pooler's and the application pool's views) taken while the
//! boundary op was running, the rows a wait or a starved pool is proved by.

use crate::check::CaseCheck;
use crate::history::{At, Body, CaseView, Event, RunHeader, symbol};
use crate::launch::DB;
use serde_json::{Value, json};

pub fn evidence_json(
    header: &RunHeader,
    invariant: &str,
    case_seed: Option<u64>,
    events: &[Event],
    view: &CaseView,
    check: &CaseCheck,
) -> Value {
    let order = view.backend_order();
    let boundary = check
        .violations
        .iter()
        .find(|v| v.invariant == invariant)
        .and_then(|v| view.steps.get(v.step))
        .or(view.steps.iter().rev().find(|s| s.ran()));
    let holder = boundary
        .and_then(|s| s.backend())
        .or_else(|| view.steps.iter().rev().find_map(|s| s.backend()));
    let v = &header.versions;
    // Samples taken while the boundary op ran (concurrent schedule only), at most
    // MAX_SAMPLES: the first ones and the last.
    const MAX_SAMPLES: usize = 8;
    let mut samples: Vec<Value> = vec![];
    if let Some(s) = boundary
        && let Some(ti) = s.t_invoke
    {
        let td = s.t_done.unwrap_or(u64::MAX);
        let during: Vec<(u64, &crate::history::Observation)> = events
            .iter()
            .filter(|e| e.t >= ti && e.t <= td)
            .filter_map(|e| match &e.body {
                Body::Obs(o) if o.at == At::Sample => Some((e.t, &o.obs)),
                _ => None,
            })
            .collect();
        let n = during.len();
        for (i, (t, obs)) in during.into_iter().enumerate() {
            if i + 1 < MAX_SAMPLES || i + 1 == n {
                samples.push(json!({ "t_ms": t as f64 / 1e6, "observation": obs }));
            }
        }
    }
    json!({
        "test_case_id": format!("{}/{}/{}", header.topology, invariant, case_seed.unwrap_or(0)),
        "invariant": invariant,
        "postgres_version": v.postgres,
        "pooler": header.pooler,
        "pooler_version": v.pooler,
        "pooler_declared_version": v.pooler_declared,
        "version_drift": v.version_drift,
        "pool_mode": header.rules.mode.map(|m| m.as_str()).unwrap_or("direct"),
        "database": DB,
        "holder": holder.map(|h| json!({
            "symbol": symbol(&order, h),
            "backend_pid": h.pid,
            "backend_start": h.backend_start(),
        })),
        "contender": {
            "backend_pid": header.contender.pid,
            "backend_start": header.contender_start,
        },
        "boundary_step": boundary.map(|s| s.index),
        "boundary_action": boundary.map(|s| s.label()),
        "violations": boundary.map(|s| check.at_step(s.index).collect::<Vec<_>>()),
        "pg_locks_before": boundary.and_then(|s| s.obs_before.as_ref()).map(|o| &o.backends),
        "pg_locks_after": boundary.and_then(|s| s.obs_after.as_ref()).map(|o| &o.backends),
        "show_servers_after": boundary.and_then(|s| s.obs_after.as_ref()).map(|o| &o.servers),
        "show_clients_after": boundary.and_then(|s| s.obs_after.as_ref()).map(|o| &o.clients),
        "show_pools_after": boundary.and_then(|s| s.obs_after.as_ref()).map(|o| &o.pools),
        "samples_during_boundary": samples,
        "contender_try_before": boundary.map(|s| &s.probes_before),
        "contender_try_after": boundary.map(|s| &s.probes_after),
        "cleanup_action": "pooler KILL/RESUME of the database (pooled) and pg_terminate_backend of every client-role backend, then verified: zero client-role backends, zero advisory locks, empty pool",
        "steps": view.steps.iter().map(|s| json!({
            "index": s.index,
            "step": s.label(),
            "reply": s.done.as_ref().map(|d| &d.value),
            "skipped": s.skip.as_ref().map(|k| &k.reason),
            "backend": s.backend().map(|b| json!({
                "symbol": symbol(&order, b),
                "pid": b.pid,
                "backend_start": b.backend_start(),
            })),
            "expected": check.expected_at(s.index),
            "observation_before": s.obs_before,
            "observation": s.obs_after,
            "contender_before": s.probes_before,
            "contender_after": s.probes_after,
            "boundary_probes": s.probes,
            "violations": check.at_step(s.index).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
