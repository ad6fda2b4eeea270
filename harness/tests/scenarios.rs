//! Replays every case file in `scenarios/` against the real servers of its topology: the
//! real replies must equal the file's `expected`, the model must agree at every step (no
//! `pg.*` violation), serving backends must match symbolically, and the `app.*` violations
//! must be exactly the file's `expect_violated`.

mod common;

use pgchaos::engine::{Sink, run_one};
use pgchaos::history::{CaseView, Phase, symbol};
use pgchaos::report::CaseFile;
use pgchaos::run::{CaseMeta, Runner};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn replay(name: &str) {
    replay_with(name, None).await
}

async fn replay_with(name: &str, launcher: Option<pgchaos::topology::LauncherKind>) {
    let path = root().join("scenarios").join(format!("{name}.yaml"));
    let case = CaseFile::load(&path).unwrap();
    let topology = Path::new(&case.topology)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let cluster = common::launch_with(&topology, launcher).await;
    let runner = Runner::new(&cluster).await.unwrap();
    let mut sink = Sink::new(
        std::time::Instant::now(),
        pgchaos::engine::check_context(&runner),
        None,
    );
    let meta = CaseMeta {
        case: 0,
        seed: None,
        phase: Phase::Replay,
        invariant: None,
    };
    let (verdict, _, events) = run_one(&runner, &mut sink, meta, &case.steps(), true)
        .await
        .unwrap();
    let view = CaseView::build(&events).unwrap();
    assert_eq!(view.steps.len(), case.steps.len(), "{name}: every step ran");
    let order = view.backend_order();
    let mut problems = vec![];
    for (s, want) in view.steps.iter().zip(&case.steps) {
        let got = s
            .done
            .as_ref()
            .map(|d| d.value.to_string())
            .unwrap_or_else(|| "no reply".into());
        if let Some(expected) = &want.expected
            && *expected != got
        {
            problems.push(format!(
                "step {} {}: got {got}, scenario expects {expected}",
                s.index + 1,
                s.label()
            ));
        }
        let backend = s.backend().map(|b| symbol(&order, b));
        if want.backend.is_some() && want.backend != backend {
            problems.push(format!(
                "step {} {}: served by {backend:?}, scenario expects {:?}",
                s.index + 1,
                s.label(),
                want.backend
            ));
        }
        // Two independent channels must agree after every step: the contender could take a
        // key exactly when pg_locks shows nobody holding it.
        let held: BTreeSet<_> = s
            .obs_after
            .as_ref()
            .map(|o| o.held().into_iter().map(|(_, k)| k).collect())
            .unwrap_or_default();
        assert_eq!(
            s.probes_after.len(),
            cluster.topology.workload.keys.len(),
            "{name}: step {} probed every key",
            s.index + 1
        );
        for (k, free) in &s.probes_after {
            if *free == held.contains(k) {
                problems.push(format!(
                    "step {} {}: the contender found {k} {} but pg_locks says {}",
                    s.index + 1,
                    s.label(),
                    if *free { "free" } else { "taken" },
                    if held.contains(k) { "held" } else { "not held" }
                ));
            }
        }
    }
    for v in &verdict.violations {
        if v.invariant.starts_with("pg.") {
            problems.push(format!(
                "step {}: {}: {}",
                v.step + 1,
                v.invariant,
                v.detail
            ));
        }
    }
    let app: BTreeSet<String> = verdict
        .violated()
        .into_iter()
        .filter(|v| v.starts_with("app."))
        .collect();
    let want: BTreeSet<String> = case.expect_violated.iter().cloned().collect();
    if app != want {
        problems.push(format!("app violations {app:?}, scenario expects {want:?}"));
    }
    assert!(problems.is_empty(), "{name}:\n{}", problems.join("\n"));
}

macro_rules! scenario {
    ($($test:ident => $file:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "current_thread")]
        async fn $test() {
            replay($file).await;
        }
    )*};
}

scenario! {
    xact_lock_released_at_rollback => "xact-lock-released-at-rollback",
    xact_lock_released_at_commit => "xact-lock-released-at-commit",
    xact_lock_waits_and_reconnect => "xact-lock-waits-and-reconnect",
    session_lock_unlock => "session-lock-unlock",
    session_lock_survives_rollback => "session-lock-survives-rollback",
    stacking => "stacking",
    terminate_releases => "terminate-releases",
    cancel_keeps_session_lock => "cancel-keeps-session-lock",
    discard_all_releases => "discard-all-releases",
    abort_releases_xact_locks => "abort-releases-xact-locks",
    handoff_transaction_mode => "handoff-transaction-mode",
    handoff_session_mode => "handoff-session-mode",
    reset_always_drops_session_locks => "reset-always-drops-session-locks",
    // Session state beyond locks: settings (docs/session-state.md).
    settings_leak_transaction_mode => "settings-leak-transaction-mode",
    settings_reset_session_mode => "settings-reset-session-mode",
    settings_local_does_not_leak => "settings-local-does-not-leak",
    settings_reset_always => "settings-reset-always",
    search_path_leak_transaction_mode => "search-path-leak-transaction-mode",
    search_path_reset_session_mode => "search-path-reset-session-mode",
    role_leak_transaction_mode => "role-leak-transaction-mode",
    reset_transaction_mode => "reset-transaction-mode",
    tracked_search_path_follows_client => "tracked-search-path-follows-client",
    tracked_role_still_leaks => "tracked-role-still-leaks",
    // pgpool-II balancing over a standby: lock calls stay on the primary (docs/pgpool.md §17).
    pgpool_load_balance_lock_on_primary => "pgpool-load-balance-lock-on-primary",
    // Named objects a backend owns: prepared statements, temp tables, held cursors.
    objects_leak_transaction_mode => "objects-leak-transaction-mode",
    objects_lost_transaction_mode => "objects-lost-transaction-mode",
    objects_protocol_lost => "objects-protocol-lost",
    objects_protocol_tracked => "objects-protocol-tracked",
    objects_protocol_tracked_discard => "objects-protocol-tracked-discard",
    objects_reset_session_mode => "objects-reset-session-mode",
    objects_rollback => "objects-rollback",
    objects_deallocate => "objects-deallocate",
    // LISTEN and NOTIFY (docs/session-state.md).
    listen_transaction_mode => "listen-transaction-mode",
    listen_session_mode => "listen-session-mode",
    listen_in_transaction => "listen-in-transaction",
    listen_session_mode_no_reset => "listen-session-mode-no-reset",
    listen_reset_always => "listen-reset-always",
    unlisten_transaction_mode => "unlisten-transaction-mode",
    // Faults of the servers: each kind's effect on locks, by identity.
    fault_pooler_reconnect => "fault-pooler-reconnect",
    fault_pooler_reconnect_at_release => "fault-pooler-reconnect-at-release",
    fault_pooler_pause => "fault-pooler-pause",
    fault_pooler_kill => "fault-pooler-kill",
    fault_pooler_reload => "fault-pooler-reload",
    fault_pooler_restart => "fault-pooler-restart",
    fault_pooler_crash => "fault-pooler-crash",
    fault_pooler_freeze => "fault-pooler-freeze",
    fault_pg_restart => "fault-pg-restart",
    fault_pg_crash => "fault-pg-crash",
    fault_backend_kill => "fault-backend-kill",
    fault_backend_freeze => "fault-backend-freeze",
    fault_promote => "fault-promote",
    fault_link_cut => "fault-link-cut",
    fault_link_blackhole => "fault-link-blackhole",
    fault_link_delay => "fault-link-delay",
}

/// The same scenarios with the servers in containers (`launcher: docker`): every kind the
/// docker launcher runs, PgBouncer's faults as engine operations on its container (kill,
/// pause by the cgroup freezer, SIGINT and start again), a backend signalled inside the
/// PostgreSQL container. `just test-docker` runs them.
macro_rules! docker_scenario {
    ($($test:ident => $file:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "current_thread")]
        #[ignore = "needs the Docker engine: just test-docker"]
        async fn $test() {
            replay_with($file, Some(pgchaos::topology::LauncherKind::Docker)).await;
        }
    )*};
}

docker_scenario! {
    docker_session_lock_survives_rollback => "session-lock-survives-rollback",
    docker_terminate_releases => "terminate-releases",
    docker_handoff_transaction_mode => "handoff-transaction-mode",
    docker_handoff_session_mode => "handoff-session-mode",
    docker_fault_pooler_reconnect => "fault-pooler-reconnect",
    docker_fault_pooler_pause => "fault-pooler-pause",
    docker_fault_pooler_kill => "fault-pooler-kill",
    docker_fault_pooler_reload => "fault-pooler-reload",
    docker_fault_pooler_restart => "fault-pooler-restart",
    docker_fault_pooler_crash => "fault-pooler-crash",
    docker_fault_pooler_freeze => "fault-pooler-freeze",
    docker_fault_pg_restart => "fault-pg-restart",
    docker_fault_pg_crash => "fault-pg-crash",
    docker_fault_backend_kill => "fault-backend-kill",
    docker_fault_backend_freeze => "fault-backend-freeze",
    // Faults of whole hosts: only containers have them (launcher native refuses them).
    docker_host_freeze_pooler => "host-freeze-pooler",
    docker_host_freeze_postgres => "host-freeze-postgres",
    docker_host_kill_pooler => "host-kill-pooler",
    docker_host_kill_postgres => "host-kill-postgres",
    docker_host_restart_pooler => "host-restart-pooler",
    docker_host_restart_postgres => "host-restart-postgres",
    docker_partition_pooler_postgres => "partition-pooler-postgres",
    docker_partition_clients_pooler => "partition-clients-pooler",
}

/// Every op a workload can weigh, and every fault, is replayed against the real servers by
/// at least one scenario file (the ops' table is `vocab::op::OPS`).
#[test]
fn every_op_and_fault_is_replayed_by_a_scenario() {
    let mut used = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&p).unwrap();
            for part in text.split("op: ").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                used.insert(name);
            }
        }
    }
    let ops = pgchaos::vocab::Op::ALL
        .into_iter()
        .chain(pgchaos::vocab::Op::FAULTS);
    let missing: Vec<&str> = ops
        .map(|o| o.name())
        .filter(|n| !used.contains(*n))
        .collect();
    assert!(missing.is_empty(), "ops no scenario replays: {missing:?}");
    assert!(
        used.len() > 40,
        "only {} ops found in scenarios/",
        used.len()
    );
}

#[test]
fn every_scenario_file_has_a_test() {
    let src = include_str!("scenarios.rs");
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
            assert!(
                src.contains(&format!("\"{stem}\"")),
                "scenarios/{stem}.yaml has no test"
            );
        }
    }
}
