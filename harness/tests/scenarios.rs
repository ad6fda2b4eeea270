//! Replays every case file in `scenarios/` against the real servers of its topology: the
//! real replies must equal the file's `expected`, the model must agree at every step (no
//! `pg.*` violation), serving backends must match symbolically, and the `app.*` violations
//! must be exactly the file's `expect_violated`.

use pgchaos::launch::Cluster;
use pgchaos::report::CaseFile;
use pgchaos::runner::{Runner, symbol, symbolic};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn replay(name: &str) {
    let path = root().join("scenarios").join(format!("{name}.yaml"));
    let case = CaseFile::load(&path).unwrap();
    let topo_path = root().join(&case.topology);
    let cluster: Cluster = pgchaos::cli::start(topo_path.to_str().unwrap(), false)
        .await
        .unwrap();
    let runner = Runner::new(&cluster).await.unwrap();
    let run = runner.run_case(&case.steps(), true).await.unwrap();
    assert_eq!(run.steps.len(), case.steps.len(), "{name}: every step ran");
    let order = symbolic(&run.steps);
    let mut problems = vec![];
    for (r, want) in run.steps.iter().zip(&case.steps) {
        let got = r.reply.to_string();
        if let Some(expected) = &want.expected
            && *expected != got
        {
            problems.push(format!(
                "step {} {}: got {got}, scenario expects {expected}",
                r.index + 1,
                r.step
            ));
        }
        let backend = r
            .backend
            .as_ref()
            .map(|s| s.backend)
            .or(r.target)
            .map(|b| symbol(&order, b));
        if want.backend.is_some() && want.backend != backend {
            problems.push(format!(
                "step {} {}: served by {backend:?}, scenario expects {:?}",
                r.index + 1,
                r.step,
                want.backend
            ));
        }
        for v in &r.violations {
            if v.invariant.starts_with("pg.") {
                problems.push(format!(
                    "step {} {}: {}: {}",
                    r.index + 1,
                    r.step,
                    v.invariant,
                    v.detail
                ));
            }
        }
    }
    let app: BTreeSet<String> = run
        .violated()
        .into_iter()
        .filter(|v| v.starts_with("app."))
        .collect();
    let want: BTreeSet<String> = case.expect_violated.iter().cloned().collect();
    if app != want {
        problems.push(format!("app violations {app:?}, scenario expects {want:?}"));
    }
    // The contender really probed: evidence replays record it around every step.
    assert!(run.steps.iter().all(|s| s.contender_after.is_some()
        || matches!(s.reply, pgchaos::client::Reply::Skipped { .. })));
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
