//! pgpool-II through the pooler seam, against the real pgpool (Debian 12's 4.3.5, provisioned
//! into the cache) and PostgreSQL 18.6: what docs/pgpool.md §4 confirmed by hand, asserted
//! through the harness's launcher, its PCP view and a direct observer. With one child and
//! `reset_query_list = 'ABORT'` the lock a client leaves stays on the cached backend, held by
//! nobody's session, and the next client of that child is handed the same backend
//! (pid, backend_start) and re-enters it; with the default list (`ABORT; DISCARD ALL`) the same
//! backend comes back holding nothing. A SIGKILLed harness leaves no pgpool process and no
//! System V segment of its.

mod common;

use common::*;
use pgchaos::launch::Cluster;
use std::path::Path;
use std::time::Duration;

const KEY: i64 = 4242;

fn one_child(reset: &str) -> String {
    format!(
        "name: pgpool-one-child\n\
         description: One pgpool-II child, so every client gets the same cached backend.\n\
         postgres: {{ version: \"18.6\", settings: {{ max_connections: 40 }} }}\n\
         pgpool: {{ version: \"4.3.5\", num_init_children: 1, reset_query_list: \"{reset}\" }}\n\
         workload: {{ clients: 1, keys: [4242], api: session, steps: 1..2 }}\n\
         run: {{ cases: 1, seed: 1, time_limit: 60s }}\n"
    )
}

async fn launch_text(text: &str) -> Cluster {
    let t = pgchaos::topology::Topology::parse(
        text,
        Path::new("pgpool-one-child.yaml"),
        &pgchaos::catalog(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    match tokio::time::timeout(
        LAUNCH,
        pgchaos::launch::launch(&t, common::launch_options()),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("launching pgpool: {e:#}"),
        Err(_) => panic!("launching pgpool: not ready within {LAUNCH:?}"),
    }
}

/// The pgpool view of the harness's database through the seam (PCP).
async fn look(cluster: &Cluster) -> pgchaos::pooler::view::Look {
    let console = cluster.console().await.unwrap_or_else(|e| panic!("{e:#}"));
    console
        .look(pgchaos::launch::DB, false)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// A client leaves: its connection closed with a Terminate, and pgpool done with it (its
/// child's slot no longer `Connected`).
async fn leave(cluster: &Cluster, c: tokio_postgres::Client) {
    drop(c);
    let t0 = std::time::Instant::now();
    loop {
        let l = look(cluster).await;
        if l.servers.iter().all(|s| s.client.is_none()) {
            return;
        }
        assert!(
            t0.elapsed() < STEP,
            "pgpool still shows a linked client: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn without_discard_the_next_client_of_the_child_re_enters_the_orphaned_lock() {
    let mut cluster = launch_text(&one_child("ABORT")).await;
    assert_eq!(cluster.pooler.name(), "pgpool");
    let obs = Observer::connect(&cluster).await;
    obs.assert_free(KEY, "before").await;

    let c1 = client(&cluster).await;
    let (first, got) = try_lock(&c1, KEY).await;
    assert!(got, "C1 takes {KEY} on {first}");
    let linked = look(&cluster).await;
    assert_eq!(
        linked
            .servers
            .iter()
            .map(|s| (s.pid, s.state))
            .collect::<Vec<_>>(),
        [(Some(first.pid), pgchaos::pooler::view::ServerState::Linked)],
        "PCP shows C1's backend linked: {linked:?}"
    );
    leave(&cluster, c1).await;

    // The orphan: still held by C1's backend, which pgpool keeps cached and idle.
    obs.assert_held_by(KEY, &first, "after C1 left (reset 'ABORT')")
        .await;
    let idle = look(&cluster).await;
    assert_eq!(
        idle.servers
            .iter()
            .map(|s| (s.pid, s.state))
            .collect::<Vec<_>>(),
        [(Some(first.pid), pgchaos::pooler::view::ServerState::Idle)],
        "PCP shows the backend cached and idle: {idle:?}"
    );
    let contender = direct(&cluster).await;
    assert!(
        !probe(&contender, KEY, &[&first]).await,
        "a direct contender is refused the orphaned key"
    );

    // C2, the next client of the only child: the same backend, and it re-enters the key.
    let c2 = client(&cluster).await;
    let (second, got) = try_lock(&c2, KEY).await;
    assert_eq!(
        second, first,
        "C2 is handed C1's backend (pid, backend_start)"
    );
    assert!(got, "C2 re-enters the key C1 left");
    let (_, released) = unlock(&c2, KEY).await;
    assert!(released);
    obs.assert_held_by(KEY, &first, "one unlock of a re-entered key leaves it held")
        .await;
    let (_, released) = unlock(&c2, KEY).await;
    assert!(released, "the second unlock releases C1's hold");
    obs.assert_free(KEY, "after both unlocks").await;
    drop(c2);
    drop(contender);
    cluster.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn with_discard_all_the_same_backend_comes_back_holding_nothing() {
    let mut cluster = launch_text(&one_child("ABORT; DISCARD ALL")).await;
    let obs = Observer::connect(&cluster).await;
    let c1 = client(&cluster).await;
    // Inside a transaction, left open: pgpool aborts it and keeps the backend (PgBouncer
    // would close it).
    exec(&c1, "BEGIN").await;
    let (first, got) = try_lock(&c1, KEY).await;
    assert!(got);
    leave(&cluster, c1).await;
    obs.wait_free(KEY, "after C1 left inside a transaction")
        .await;
    let c2 = client(&cluster).await;
    let (second, got) = try_lock(&c2, KEY).await;
    assert_eq!(
        second, first,
        "C2 is handed the cached backend C1 left inside its transaction"
    );
    assert!(got);
    let (_, n) = call(&c2, "(SELECT count(*) FROM pg_prepared_statements)::text").await;
    assert_eq!(n.as_deref(), Some("0"));
    drop(c2);
    cluster.shutdown();
}

/// System V shared memory segments created by `pid` (`ipcs -m -p`: shmid, owner, cpid, lpid).
fn segments_of(pid: i32) -> Vec<String> {
    let out = std::process::Command::new("ipcs")
        .args(["-m", "-p"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[2] == pid.to_string()).then(|| f[0].to_string())
        })
        .collect()
}

/// Processes in process group `pgid`.
fn group(pgid: i32) -> Vec<i32> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid=,pgid="])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let pid: i32 = f.next()?.parse().ok()?;
            let g: i32 = f.next()?.parse().ok()?;
            (g == pgid).then_some(pid)
        })
        .collect()
}

#[test]
fn a_sigkilled_harness_leaves_no_pgpool_process_and_no_segment_of_its() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["up", "pgpool-caching", "--json"])
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(v["pooler"]["kind"], "pgpool", "{v}");
    let main = v["pooler"]["pid"].as_i64().unwrap() as i32;
    let members = group(main);
    assert!(
        members.len() > 4,
        "pgpool's main, its 4 children and its helpers share a group: {members:?}"
    );
    let segments = segments_of(main);
    assert!(
        !segments.is_empty(),
        "pgpool's main created its shared memory segment"
    );
    child.kill().unwrap(); // SIGKILL: the main gets SIGKILL too (parent-death signal)
    child.wait().unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let left = group(main);
        let kept: Vec<String> = segments_of(main)
            .into_iter()
            .filter(|s| segments.contains(s))
            .collect();
        if left.is_empty() && kept.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "10 s after SIGKILL of the harness: pgpool processes {left:?}, segments {kept:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two children and three clients who keep their connections (docs/pgpool.md §3): the third
/// client's connect waits in pgpool-II's accept queue, without an error, until its bound. The
/// run goes on and completes: the third client's `open` is its `timeout`, app.progress is
/// violated with the children and the clients they serve at the deadline, the step after it
/// sent nothing (`not_connected`) and no pg.* verdict comes of it.
#[test]
fn more_clients_than_children_is_stuck_with_the_children_named_and_the_run_completes() {
    let out = tmp("pgpool-children");
    let topo = out.join("pgpool-two-children.yaml");
    std::fs::write(
        &topo,
        "name: pgpool-two-children\n\
         description: Three clients keep their connections on two pgpool-II children.\n\
         postgres: { version: \"18.6\", settings: { max_connections: 40 } }\n\
         pgpool: { version: \"4.3.5\", num_init_children: 2 }\n\
         workload:\n  keys: [42]\n  script:\n\
         \x20   - clients: 2\n      ops: [ping, sleep: 3500ms, ping]\n\
         \x20   - clients: 1\n      ops: [sleep: 200ms, ping]\n\
         run: { schedule: concurrent, cases: 1, seed: 1, time_limit: 2m, op_deadline: 500ms, \
         case_time_limit: 30s, max_shrink_runs: 0 }\n\
         expect:\n  app.progress: violated\n",
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let o = pgchaos(&[
        "chaos",
        topo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    // As expected (the expect block says violated): exit 0, like any expected violation.
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (dir, results) = latest(&out, "pgpool-two-children");
    let invariants = results["invariants"].as_array().unwrap();
    let verdict = |name: &str| {
        invariants
            .iter()
            .find(|i| i["name"] == name)
            .map(|i| i["verdict"].clone())
            .unwrap_or_default()
    };
    assert_eq!(verdict("app.progress"), "violated", "{results}");
    for i in invariants {
        if i["tier"] == "pg" {
            assert_ne!(i["verdict"], "violated", "{i}");
        }
    }
    let evidence: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("failures/app.progress/evidence.json")).unwrap(),
    )
    .unwrap();
    let detail = evidence["violations"][0]["detail"].as_str().unwrap();
    for needle in [
        "C3 open took",
        "its bound is 0.500 s (it never completed: the client gave up)",
        "C3 open (",
        "waits for the pooler to accept it: its 2 client connections are served",
        "(the connection of C1)",
        "(the connection of C2)",
    ] {
        assert!(detail.contains(needle), "lacks {needle:?}: {detail}");
    }
    // The history: C3's open timed out and its ping sent nothing.
    let zcat = std::process::Command::new("zcat")
        .arg(dir.join("history.jsonl.gz"))
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&zcat.stdout);
    assert!(
        history
            .lines()
            .any(|l| l.contains("\"f\":\"open\"") && l.contains("\"code\":\"timeout\"")),
        "no timed-out open in the history"
    );
    assert!(
        history.contains("\"code\":\"not_connected\""),
        "no step that sent nothing"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(110),
        "{:?}",
        t0.elapsed()
    );
    let _ = std::fs::remove_dir_all(&out);
}
