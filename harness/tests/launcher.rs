//! The launcher's control hooks and timeouts against real servers: a paused pooler makes a
//! connect time out (bounded, not a hang), resume brings it back, restart gives a new
//! postmaster on the same port, kill is reported as a death.

mod common;

use common::launch;
use pgchaos::launch::{Control, IO_TIMEOUT, SUPERUSER, Which, connect, simple_first};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "current_thread")]
async fn pause_resume_restart_and_kill() {
    let cluster = launch("transaction-mode").await;
    let client = connect(&cluster.client_config()).await.unwrap();
    assert_eq!(simple_first(&client, "SELECT 1").await.unwrap(), "1");

    // SIGSTOP the pooler: a new connection neither succeeds nor hangs past the timeout.
    cluster
        .control(Which::Pooler, Control::Pause)
        .await
        .unwrap();
    let t = Instant::now();
    let Err(err) = connect(&cluster.client_config()).await else {
        panic!("a paused pooler cannot accept");
    };
    let waited = t.elapsed();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        waited >= IO_TIMEOUT && waited < IO_TIMEOUT + Duration::from_secs(3),
        "{waited:?}"
    );
    cluster
        .control(Which::Pooler, Control::Resume)
        .await
        .unwrap();
    let again = connect(&cluster.client_config()).await.unwrap();
    assert_eq!(simple_first(&again, "SELECT 2").await.unwrap(), "2");

    // Restart PostgreSQL: a new postmaster, reachable again directly and through the pooler.
    let (old_pg, _) = cluster.pids();
    cluster.restart(Which::Postgres).await.unwrap();
    let (new_pg, _) = cluster.pids();
    assert_ne!(old_pg, new_pg);
    let direct = connect(&cluster.direct_config(SUPERUSER)).await.unwrap();
    assert_eq!(simple_first(&direct, "SELECT 3").await.unwrap(), "3");
    let pooled = connect(&cluster.client_config()).await.unwrap();
    assert_eq!(
        simple_first(&pooled, "SELECT 4").await.unwrap(),
        "4",
        "the pooler reaches the restarted server"
    );
    // Restart PgBouncer: same port, so clients' DSNs stay valid.
    let port = cluster.pooler_port;
    cluster.restart(Which::Pooler).await.unwrap();
    assert_eq!(cluster.pooler_port, port);
    let pooled = connect(&cluster.client_config()).await.unwrap();
    assert_eq!(simple_first(&pooled, "SELECT 5").await.unwrap(), "5");

    // Kill PostgreSQL: the harness reports it dead, naming it.
    cluster
        .control(Which::Postgres, Control::Kill)
        .await
        .unwrap();
    let err = cluster
        .check_alive()
        .expect_err("a killed server is reported");
    assert!(err.to_string().contains("Postgres"), "{err}");
    let run_dir = cluster.run_dir.clone();
    drop(cluster);
    assert!(!run_dir.exists(), "teardown removes the run directory");
}
