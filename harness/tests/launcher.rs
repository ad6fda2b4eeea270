//! The launcher's control hooks and timeouts against real servers: a paused pooler makes a
//! connect time out (bounded, not a hang), resume brings it back, restart gives a new
//! postmaster on the same port, kill is reported as a death; the pooler runs what the topology
//! declares, and a RELOADed edit of its ini is reported setting by setting.

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

/// The pooler runs what was declared: a launch passes the check; a pgbouncer.ini edited
/// behind the harness's back and RELOADed (another pool_mode; then a line PgBouncer cannot
/// parse, which RELOAD answers OK while the settings after it fall back to their defaults) is
/// reported setting by setting, directly and by the nemesis's `pooler_reload`; a restart
/// writes the topology's ini again and passes.
#[tokio::test(flavor = "current_thread")]
async fn the_pooler_runs_what_was_declared() {
    use pgchaos::nemesis::Nemesis;
    use pgchaos::vocab::Op;

    let cluster = launch("transaction-mode").await;
    cluster.verify_pooler_config("after launch").await.unwrap();
    let ini_path = cluster.run_dir.join("pgbouncer.ini");
    let declared = std::fs::read_to_string(&ini_path).unwrap();
    assert!(
        declared.contains("\npool_mode = transaction\n"),
        "{declared}"
    );
    let reload = async || {
        let admin = cluster.console().await.unwrap();
        admin.command("RELOAD").await.unwrap();
    };

    // Another pool_mode, reloaded: the check names it, with both values.
    std::fs::write(
        &ini_path,
        declared.replace("\npool_mode = transaction\n", "\npool_mode = session\n"),
    )
    .unwrap();
    reload().await;
    let err = cluster
        .verify_pooler_config("after RELOAD")
        .await
        .expect_err("session mode is not what transaction-mode declares");
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with(
            "after RELOAD, PgBouncer does not run what topology transaction-mode declares (SHOW CONFIG):\n  pool_mode: declared \"transaction\" (pgbouncer.pool_mode), PgBouncer reports \"session\"\n"
        ),
        "{msg}"
    );
    assert_eq!(
        msg.matches("declared \"").count(),
        1,
        "one difference: {msg}"
    );

    // The nemesis's RELOAD of the same file is an error of the run.
    let nemesis = Nemesis::connect(&cluster).await.unwrap();
    let hold = Duration::from_millis(10);
    let err = nemesis
        .server_fault(&cluster, Op::PoolerReload, None, hold, hold)
        .await
        .expect_err("the nemesis checks after its RELOAD");
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with("after the nemesis's pooler_reload, PgBouncer does not run")
            && msg.contains("pool_mode: declared \"transaction\""),
        "{msg}"
    );

    // A line PgBouncer cannot parse (it takes no units): RELOAD answers OK, and every
    // setting after the line is back at its default.
    std::fs::write(
        &ini_path,
        declared.replace(
            "\npool_mode = transaction\n",
            "\nserver_lifetime = 1min\npool_mode = transaction\n",
        ),
    )
    .unwrap();
    // PgBouncer 1.25.2 answers RELOAD with an error (1.24.1 answered OK), the log names the
    // line, and, as on 1.24.1, every setting after the line is back at its default.
    let admin = cluster.console().await.unwrap();
    let refused = admin
        .command("RELOAD")
        .await
        .expect_err("1.25.2 refuses a bad line");
    assert!(
        format!("{refused:#}").contains("RELOAD failed"),
        "{refused:#}"
    );
    let log = std::fs::read_to_string(cluster.run_dir.join("pgbouncer.log")).unwrap();
    assert!(
        log.contains("invalid value \"1min\" for parameter server_lifetime"),
        "the log names the bad value"
    );
    let err = cluster
        .verify_pooler_config("after RELOAD")
        .await
        .expect_err("the settings after the bad line are PgBouncer's defaults");
    let msg = format!("{err:#}");
    for line in [
        "  pool_mode: declared \"transaction\" (pgbouncer.pool_mode), PgBouncer reports \"session\"",
        "  default_pool_size: declared \"2\" (pgbouncer.default_pool_size), PgBouncer reports \"20\"",
        "  max_client_conn: declared \"50\" (pgbouncer.max_client_conn), PgBouncer reports \"100\"",
    ] {
        assert!(msg.lines().any(|l| l == line), "{line} missing:\n{msg}");
    }

    // A restart (the nemesis's pooler_restart) writes the topology's ini again: it passes.
    nemesis
        .server_fault(&cluster, Op::PoolerRestart, None, hold, hold)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&ini_path).unwrap(), declared);
    cluster.verify_pooler_config("after restart").await.unwrap();
    let pooled = connect(&cluster.client_config()).await.unwrap();
    assert_eq!(simple_first(&pooled, "SELECT 6").await.unwrap(), "6");
}
