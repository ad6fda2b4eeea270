//! `launcher: external` against a deployment pgchaos did not start: the test starts
//! transaction-mode natively (the "staging" deployment), makes the roles a team would make
//! (an observer with pg_read_all_stats and pg_signal_backend, a bystander application), and
//! describes the deployment as an external topology whose DSNs take their passwords from the
//! environment. Then: the refusals (another role holding an advisory lock, named with its
//! pid, backend_start, role and key; a superuser as the clients' role), a matrix cell run
//! against it with the class the native cell has, and what is left afterwards (none of the
//! clients' backends; the bystander's session untouched).

mod common;

use common::{text, tmp};
use pgchaos::launch::{CLIENT_ROLE, Cluster, DB, SUPERUSER, connect};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const OBSERVER: &str = "pgchaos_observer";
const BYSTANDER: &str = "bystander";

/// The deployment as a team would describe it: transaction-mode's pooler section, the
/// DSNs with `${VAR}` passwords.
fn external_yaml(cluster: &Cluster, admin: bool, client_user: &str) -> String {
    let base = std::fs::read_to_string(common::topology_path("transaction-mode")).unwrap();
    let pooler = cluster.pooler_port.unwrap();
    let mut y = String::from("launcher: external\nexternal:\n");
    y.push_str(&format!(
        "  pooler: postgresql://{client_user}:${{T_CLIENT_PW}}@127.0.0.1:{pooler}/{DB}\n"
    ));
    y.push_str(&format!(
        "  postgres: postgresql://{OBSERVER}:${{T_OBSERVER_PW}}@127.0.0.1:{}/{DB}\n",
        cluster.pg_port
    ));
    if admin {
        y.push_str(&format!(
            "  admin: postgresql://{SUPERUSER}:${{T_ADMIN_PW}}@127.0.0.1:{pooler}/pgbouncer\n"
        ));
    }
    format!("{y}{base}")
}

fn run(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(args)
        .current_dir(common::root())
        .env("PGCHAOS_QUIET", "1")
        .env("T_CLIENT_PW", cluster.password(CLIENT_ROLE).unwrap())
        .env("T_OBSERVER_PW", "observer-pw")
        .env("T_ADMIN_PW", cluster.password(SUPERUSER).unwrap())
        .output()
        .expect("run pgchaos")
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    common::try_rows(c, sql).await.unwrap()[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn an_external_deployment_is_refused_when_not_its_own_and_runs_a_matrix_cell() {
    let cluster = common::launch("transaction-mode").await;
    let su = connect(&cluster.direct_config(SUPERUSER)).await.unwrap();
    su.batch_execute(&format!(
        "CREATE ROLE {OBSERVER} LOGIN PASSWORD 'observer-pw' IN ROLE pg_read_all_stats; \
         CREATE ROLE {BYSTANDER} LOGIN PASSWORD 'bystander-pw'; \
         ALTER ROLE {CLIENT_ROLE} RESET application_name"
    ))
    .await
    .unwrap();
    let dir = tmp("external");
    // Named as the shipped topology, so the profile's expected cell applies.
    let topo = dir.join("transaction-mode.yaml");
    let write = |text: String| std::fs::write(&topo, text).unwrap();
    let topo_s = topo.to_str().unwrap().to_string();

    // An observer without pg_signal_backend: refused, with the GRANT to run.
    write(external_yaml(&cluster, true, CLIENT_ROLE));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("GRANT pg_signal_backend TO {OBSERVER}")),
        "{}",
        text(&o)
    );
    su.batch_execute(&format!(
        "GRANT pg_signal_backend, pg_read_all_data TO {OBSERVER}"
    ))
    .await
    .unwrap();

    // A password reference that is not set is named with its key.
    write(external_yaml(&cluster, true, CLIENT_ROLE).replace("T_CLIENT_PW", "T_UNSET_PW"));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("`external.pooler` refers to ${T_UNSET_PW}, which is not set"),
        "{}",
        text(&o)
    );

    // Another role's advisory lock: refused, with the holder's identity and key.
    let mut by = cluster.direct_config(BYSTANDER);
    by.password("bystander-pw");
    let by = connect(&by).await.unwrap();
    let held = common::try_rows(
        &by,
        "SELECT pg_backend_pid(), backend_start::text, pg_advisory_lock(77)::text \
         FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    )
    .await
    .unwrap();
    let (by_pid, by_start) = (held[0][0].clone().unwrap(), held[0][1].clone().unwrap());
    write(external_yaml(&cluster, true, CLIENT_ROLE));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("refusing to run"), "{out}");
    let evidence = format!("pid {by_pid} backend_start {by_start} role {BYSTANDER} key 77");
    assert!(out.contains(&evidence), "wants {evidence:?}: {out}");

    // A superuser as the clients' role: refused, naming the privilege.
    write(external_yaml(&cluster, true, SUPERUSER));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("has privileges a role made for pgchaos should not have: SUPERUSER"),
        "{}",
        text(&o)
    );

    // A fault pgchaos cannot perform on a deployment: refused before anything runs.
    write(external_yaml(&cluster, true, CLIENT_ROLE).replace(
        "\nrun:\n",
        "\nfaults:\n  kinds: { pg_restart: 1 }\n\nrun:\n",
    ));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("launcher external cannot run the process faults pg_restart"),
        "{}",
        text(&o)
    );

    // The bystander releases its lock (its session stays), and a matrix cell runs against
    // the deployment.
    common::try_rows(&by, "SELECT pg_advisory_unlock_all()")
        .await
        .unwrap();
    write(external_yaml(&cluster, true, CLIENT_ROLE));
    let mdir = dir.join("m");
    let o = run(
        &cluster,
        &[
            "matrix",
            "--profiles",
            "golang-migrate",
            "--topologies",
            &topo_s,
            "--seeds",
            "1",
            "--jobs",
            "1",
            "--max-shrink-runs",
            "2",
            "--dir",
            mdir.to_str().unwrap(),
        ],
    );
    let out = text(&o);
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(mdir.join("matrix.json")).unwrap()).unwrap();
    common::exit_is_the_cells(&o, &m);
    let cell = &m["cells"][0];
    assert_eq!(cell["topology"], "transaction-mode", "{cell}");
    // The class the profile's source predicts for transaction pooling, as the native cell.
    assert_eq!(cell["worst"], "ran twice", "{cell}\n{out}");
    let run_dir = mdir.join(cell["runs"][0]["dir"].as_str().expect("the run completed"));
    let results: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(&run_dir).join("results.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(results["launcher"], "external", "{results}");

    // SIGKILL mid-run, while a client's backend holds an advisory lock: the reaper ends the
    // clients' backends (transaction pooling would keep the lock on a pooled server).
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args([
            "chaos", &topo_s, "--cases", "100000", "--seed", "2", "--out",
        ])
        .arg(dir.join("killed"))
        .current_dir(common::root())
        .env("PGCHAOS_QUIET", "1")
        .env("T_CLIENT_PW", cluster.password(CLIENT_ROLE).unwrap())
        .env("T_OBSERVER_PW", "observer-pw")
        .env("T_ADMIN_PW", cluster.password(SUPERUSER).unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let held = format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND a.usename = '{CLIENT_ROLE}'"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count(&su, &held).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no client lock within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let backends = format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'");
    loop {
        let (n, locks) = (count(&su, &backends).await, count(&su, &held).await);
        if n == 0 && locks == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "15 s after SIGKILL: {n} client backends, {locks} locks"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Nothing of the run is left: no backend of the clients' role; the bystander's session
    // (another role) was never terminated.
    assert_eq!(
        count(
            &su,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'")
        )
        .await,
        0
    );
    let again = common::try_rows(&by, "SELECT pg_backend_pid()::text")
        .await
        .unwrap();
    assert_eq!(again[0][0].as_deref(), Some(by_pid.as_str()));
    let _ = std::fs::remove_dir_all(&dir);
}
