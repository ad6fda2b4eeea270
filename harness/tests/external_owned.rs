//! `launcher: external` owns what it touches and proves it first (issue 37): against a
//! transaction-mode deployment started natively by the test, with the roles a team would
//! make (an observer with the documented grants and a password holding `@`, `%` and a
//! space), the launch refuses a session of the clients' role it did not open (naming its
//! pid, backend_start, application_name and address, and leaving it untouched); a second
//! run while one holds the deployment's lease is refused, naming the holder; console faults
//! are refused without the topology's opt-in, while another user is on the database, and
//! RELOAD always; a `pooler_pause` interrupted during its hold by SIGTERM, then by SIGKILL,
//! is resumed (by teardown, then by the reaper) within 10 s; no file a run writes holds a
//! password.

mod common;

use common::{text, tmp};
use pgchaos::launch::{CLIENT_ROLE, Cluster, DB, SUPERUSER, connect};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OBSERVER: &str = "pgchaos_observer";
/// A password that changes the host, the port or a parameter if pasted into a DSN.
const OBSERVER_PW: &str = "o@b s%40erv:er/?x=1";

fn yaml(cluster: &Cluster, external_extra: &str, faults: &str) -> String {
    let base = std::fs::read_to_string(common::topology_path("transaction-mode")).unwrap();
    let pooler = cluster.pooler_port.unwrap();
    let mut y = String::from("launcher: external\nexternal:\n");
    y.push_str(&format!(
        "  pooler: postgresql://{CLIENT_ROLE}:${{T_CLIENT_PW}}@127.0.0.1:{pooler}/{DB}\n"
    ));
    y.push_str(&format!(
        "  postgres: \"host=127.0.0.1 port={} user={OBSERVER} dbname={DB} password=${{T_OBSERVER_PW}}\"\n",
        cluster.pg_port
    ));
    y.push_str(&format!(
        "  admin: postgresql://{SUPERUSER}:${{T_ADMIN_PW}}@127.0.0.1:{pooler}/pgbouncer\n"
    ));
    y.push_str(external_extra);
    format!("{y}{base}").replace("\nrun:\n", &format!("\n{faults}\nrun:\n"))
}

fn command(cluster: &Cluster, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pgchaos"));
    c.args(args)
        .current_dir(common::root())
        .env("PGCHAOS_QUIET", "1")
        .env("T_CLIENT_PW", cluster.password(CLIENT_ROLE).unwrap())
        .env("T_OBSERVER_PW", OBSERVER_PW)
        .env("T_ADMIN_PW", cluster.password(SUPERUSER).unwrap());
    c
}

fn run(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    command(cluster, args).output().expect("run pgchaos")
}

/// A run in the background, its stderr in `log`.
fn spawn(cluster: &Cluster, args: &[&str], log: &Path) -> Child {
    command(cluster, args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn first(c: &tokio_postgres::Client, sql: &str) -> String {
    common::try_rows(c, sql).await.unwrap()[0][0]
        .clone()
        .unwrap_or_default()
}

/// Whether PgBouncer has database `db` paused now (`SHOW DATABASES`).
async fn paused(admin: &tokio_postgres::Client, db: &str) -> bool {
    for m in admin.simple_query("SHOW DATABASES").await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m
            && r.get("name") == Some(db)
        {
            return r.get("paused") == Some("1");
        }
    }
    panic!("no database {db} in SHOW DATABASES")
}

async fn until(what: &str, within: Duration, mut f: impl AsyncFnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f().await {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// Every file under `dir` (recursively) that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = vec![];
    let mut stack = vec![dir.to_path_buf()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                n += 1;
                let bytes = std::fs::read(&p).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(p.display().to_string());
                }
            }
        }
    }
    assert!(
        n > 3,
        "{}: only {n} files: did the run write any?",
        dir.display()
    );
    hits
}

#[tokio::test(flavor = "current_thread")]
async fn an_external_run_owns_what_it_touches_and_proves_it_first() {
    common::become_subreaper();
    let cluster = common::launch("transaction-mode").await;
    let su = connect(&cluster.direct_config(SUPERUSER)).await.unwrap();
    let pw = OBSERVER_PW.replace('\'', "''");
    su.batch_execute(&format!(
        "CREATE ROLE {OBSERVER} LOGIN PASSWORD '{pw}' IN ROLE pg_read_all_stats, pg_signal_backend; \
         ALTER ROLE {CLIENT_ROLE} RESET application_name"
    ))
    .await
    .unwrap();
    let dir = tmp("external-owned");
    let topo = dir.join("transaction-mode.yaml");
    let topo_s = topo.to_str().unwrap().to_string();
    let write = |t: String| std::fs::write(&topo, t).unwrap();
    let chaos = |seed: &'static str, out: &Path| -> Vec<String> {
        vec![
            "chaos".into(),
            topo_s.clone(),
            "--cases".into(),
            "100000".into(),
            "--seed".into(),
            seed.into(),
            "--out".into(),
            out.display().to_string(),
        ]
    };

    // 1. A session of the clients' role that pgchaos did not open: refused before any
    // statement, named; the session and its lock are untouched.
    write(yaml(&cluster, "", ""));
    let mut by = cluster.direct_config(CLIENT_ROLE);
    by.application_name("psql-by-hand");
    let by = connect(&by).await.unwrap();
    let by_row = common::try_rows(
        &by,
        "SELECT pg_backend_pid()::text, backend_start::text, pg_advisory_lock(4242)::text \
         FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    )
    .await
    .unwrap();
    let (by_pid, by_start) = (by_row[0][0].clone().unwrap(), by_row[0][1].clone().unwrap());
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    let named = format!(
        "(pid {by_pid}, backend_start {by_start}) application_name \"psql-by-hand\" from 127.0.0.1 in database {DB}"
    );
    assert!(out.contains("refusing to run"), "{out}");
    assert!(out.contains(&named), "wants {named:?}:\n{out}");
    let still = first(
        &su,
        &format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND pid = {by_pid}"
        ),
    )
    .await;
    assert_eq!(still, "1", "the bystander's lock is untouched");
    assert_eq!(
        first(&by, "SELECT pg_backend_pid()::text").await,
        by_pid,
        "the bystander's session is the same backend"
    );
    drop(by);
    until("the bystander gone", Duration::from_secs(5), async || {
        first(
            &su,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'"),
        )
        .await
            == "0"
    })
    .await;

    // 2. One run at a time: while a run holds the lease, a second is refused, naming it.
    let one_log = dir.join("one.log");
    let mut one = spawn(
        &cluster,
        &chaos("2", &dir.join("one"))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &one_log,
    );
    let lease = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885823848 \
                 AND objid = 1634693921 AND objsubid = 2 AND granted";
    let t0 = Instant::now();
    while first(&su, lease).await != "1" {
        assert!(
            t0.elapsed() < Duration::from_secs(30) && one.try_wait().unwrap().is_none(),
            "the first run's lease, not within 30 s: {}",
            log(&one_log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let holder = first(
        &su,
        "SELECT pid::text FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885823848 AND objsubid = 2",
    )
    .await;
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "3"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("another pgchaos run holds the lease")
            && out.contains(&format!("(pid {holder},")),
        "{out}"
    );
    assert!(one.try_wait().unwrap().is_none(), "the first run goes on");
    // SIGTERM: an orderly end; nothing of the run is left.
    unsafe { libc::kill(one.id() as i32, libc::SIGTERM) };
    let status = one.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    until(
        "the first run's backends gone",
        Duration::from_secs(10),
        async || {
            first(
                &su,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'"),
            )
            .await
                == "0"
        },
    )
    .await;
    until(
        "the lease gone with the run",
        Duration::from_secs(5),
        async || first(&su, lease).await == "0",
    )
    .await;

    // 3. Console faults: refused without the opt-in, RELOAD always, and while another user
    // is on the database.
    let pause = "faults:\n  kinds: { pooler_pause: 1 }\n  weight: 1000\n  hold: 8s\n";
    write(yaml(&cluster, "", pause));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("without `external.console_faults: true`"),
        "{}",
        text(&o)
    );
    write(yaml(
        &cluster,
        "  console_faults: true\n",
        "faults:\n  kinds: { pooler_reload: 1 }\n",
    ));
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("pgchaos never sends it to a deployment"),
        "{}",
        text(&o)
    );
    write(yaml(&cluster, "  console_faults: true\n", pause));
    let mut other = tokio_postgres::Config::new();
    other
        .host("127.0.0.1")
        .port(cluster.pooler_port.unwrap())
        .user(SUPERUSER)
        .password(cluster.password(SUPERUSER).unwrap())
        .dbname(DB)
        .application_name("another-app");
    let other = connect(&other).await.unwrap();
    let other_pid = first(&other, "SELECT pg_backend_pid()::text").await;
    let o = run(&cluster, &["chaos", &topo_s, "--cases", "4", "--seed", "1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!("client of user {SUPERUSER} on database {DB}"))
            && out.contains("another-app"),
        "{out}"
    );
    assert_eq!(
        first(&other, "SELECT pg_backend_pid()::text").await,
        other_pid,
        "the other user's session was not killed"
    );
    drop(other);

    // 4. A pause interrupted during its hold: SIGTERM (teardown resumes), then SIGKILL (the
    // reaper resumes), each within 10 s; the admin console sees it paused first.
    let mut admin = tokio_postgres::Config::new();
    admin
        .host("127.0.0.1")
        .port(cluster.pooler_port.unwrap())
        .user(SUPERUSER)
        .password(cluster.password(SUPERUSER).unwrap())
        .dbname("pgbouncer");
    let admin = connect(&admin).await.unwrap();
    assert!(!paused(&admin, DB).await);
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGKILL, "SIGKILL")] {
        let r_log = dir.join(format!("{name}.log"));
        let mut r = spawn(
            &cluster,
            &chaos("4", &dir.join(name))
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &r_log,
        );
        let t0 = Instant::now();
        while !paused(&admin, DB).await {
            assert!(
                t0.elapsed() < Duration::from_secs(60) && r.try_wait().unwrap().is_none(),
                "{name}: no pause within 60 s: {}",
                log(&r_log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        unsafe { libc::kill(r.id() as i32, signal) };
        let status = r.wait().unwrap();
        let took = until(
            &format!("{name}: resumed"),
            Duration::from_secs(10),
            async || !paused(&admin, DB).await,
        )
        .await;
        eprintln!("{name} during the hold: {status:?}, resumed {took:?} later");
        until(
            &format!("{name}: the run's backends gone"),
            Duration::from_secs(10),
            async || {
                first(
                    &su,
                    &format!(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'"
                    ),
                )
                .await
                    == "0"
            },
        )
        .await;
    }

    // 5. A whole run's directory holds no password (its topology.yaml names the variables).
    write(yaml(&cluster, "", ""));
    let out_dir = dir.join("finished");
    let o = run(
        &cluster,
        &[
            "chaos",
            &topo_s,
            "--cases",
            "6",
            "--seed",
            "5",
            "--max-shrink-runs",
            "2",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    for secret in [
        OBSERVER_PW,
        cluster.password(CLIENT_ROLE).unwrap(),
        cluster.password(SUPERUSER).unwrap(),
    ] {
        let hits = files_holding(&out_dir, secret);
        assert!(hits.is_empty(), "a password in {hits:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
