//! The wire tap against real servers and real clients: the bytes it relays are the bytes it
//! was sent, both ways (recorded by two byte loggers of this test's own, one on each side of
//! the tap: psql with its SSLRequest, COPY and a 300 kB row, tokio-postgres's extended
//! protocol with binary parameters, pgbench with prepared statements); and `pgchaos run`
//! end to end: three psql replicas, two rounds, each round on a fresh database, the tap's
//! record shows every lock call with its result, nothing is left; and the bad input a user
//! meets (a missing command, one that exits at once, one that never exits, one that speaks
//! a protocol the tap does not know).

mod common;

use common::{text, tmp};
use pgchaos::tap::record::{self, Body, RecordWriter};
use pgchaos::tap::{Tap, TapOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn pg_bin() -> PathBuf {
    PathBuf::from("/var/cache/pgchaos/postgres/18.6/bin")
}

/// Bytes one logger saw on one connection: client to server, server to client.
#[derive(Default, Clone)]
struct Seen {
    fe: Vec<u8>,
    be: Vec<u8>,
}

/// A byte logger: listens on loopback, forwards each connection to `upstream`, and keeps
/// every byte of both directions under the connection's ports as the two ends saw them:
/// (the client's port, the port it used upstream).
struct Logger {
    port: u16,
    seen: Arc<Mutex<HashMap<(u16, u16), Seen>>>,
}

async fn logger(upstream: u16) -> Logger {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Arc<Mutex<HashMap<(u16, u16), Seen>>> = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (c, peer) = l.accept().await.unwrap();
            let u = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
            let key = (peer.port(), u.local_addr().unwrap().port());
            let seen = s2.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = c.into_split();
                let (mut ur, mut uw) = u.into_split();
                let s1 = seen.clone();
                let a = async move {
                    let mut b = vec![0u8; 8192];
                    while let Ok(n) = cr.read(&mut b).await {
                        if n == 0 {
                            break;
                        }
                        s1.lock()
                            .unwrap()
                            .entry(key)
                            .or_default()
                            .fe
                            .extend_from_slice(&b[..n]);
                        if uw.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = uw.shutdown().await;
                };
                let b = async move {
                    let mut b = vec![0u8; 8192];
                    while let Ok(n) = ur.read(&mut b).await {
                        if n == 0 {
                            break;
                        }
                        seen.lock()
                            .unwrap()
                            .entry(key)
                            .or_default()
                            .be
                            .extend_from_slice(&b[..n]);
                        if cw.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = cw.shutdown().await;
                };
                tokio::join!(a, b);
            });
        }
    });
    Logger { port, seen }
}

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 4, 210, 22, 47];

/// The psql script: simple queries, a COPY in and out, a row of 300 kB (over the tap's
/// caps and its read size), extended protocol through `\bind`, an error in a transaction.
const PSQL_SCRIPT: &str = "\
CREATE TEMP TABLE t(a int, b text);
COPY t FROM STDIN;
1\tone
2\ttwo
\\.
COPY t TO STDOUT;
SELECT repeat('x', 300000) AS big;
SELECT pg_try_advisory_lock($1) \\bind 42 \\g
BEGIN;
SELECT 1/0;
ROLLBACK;
SELECT pg_advisory_unlock_all();
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)] // one real-server test at a time: held for the whole test
async fn the_tap_relays_every_byte_as_it_was_sent() {
    let _serial = serial();
    let mut cluster = common::launch("session-mode").await;
    let pooler = cluster.pooler_port.unwrap();
    let pw = cluster.password("chaos").unwrap().to_string();
    let dir = tmp("tap-bytes");
    let path = dir.join(record::FILE);
    let (writer, rec) = RecordWriter::create(&path).unwrap();
    let inner = logger(pooler).await;
    let tap = Tap::start(
        TapOptions {
            upstream: SocketAddr::from(([127, 0, 0, 1], inner.port)),
            owners: None,
        },
        rec.clone(),
    )
    .unwrap();
    let outer = logger(tap.port()).await;
    let env = [
        ("PGHOST", "127.0.0.1".to_string()),
        ("PGPORT", outer.port.to_string()),
        ("PGUSER", "chaos".to_string()),
        ("PGPASSWORD", pw.clone()),
        ("PGDATABASE", "chaos".to_string()),
        ("PGSSLMODE", "prefer".to_string()),
    ];
    // psql: SSLRequest (answered N by the tap), COPY, a big row, \bind, an error.
    let script = dir.join("script.sql");
    std::fs::write(&script, PSQL_SCRIPT).unwrap();
    let o = std::process::Command::new(pg_bin().join("psql"))
        .args(["-X", "-q", "-f"])
        .arg(&script)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert!(text(&o).contains("division by zero"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2\ttwo"),
        "{}",
        text(&o)
    );
    // tokio-postgres: the extended protocol, binary parameters, a prepared statement.
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(outer.port)
        .user("chaos")
        .password(&pw)
        .dbname("chaos");
    let (c, conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let st = c
        .prepare("SELECT pg_try_advisory_lock($1), $2::text")
        .await
        .unwrap();
    let row = c
        .query_one(&st, &[&4242424242i64, &"y".repeat(70_000)])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    let r: bool = c
        .query_one(
            "SELECT pg_advisory_unlock($1::int4, $2::int4)",
            &[&1i32, &2i32],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!r);
    drop(c);
    // pgbench: prepared statements, two clients at once.
    let bench = dir.join("bench.sql");
    std::fs::write(&bench, "SELECT pg_try_advisory_xact_lock(7);\n").unwrap();
    let o = std::process::Command::new(pg_bin().join("pgbench"))
        .args(["-n", "-c", "2", "-t", "50", "-M", "prepared", "-f"])
        .arg(&bench)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    tokio::time::sleep(Duration::from_millis(300)).await;
    tap.stop();
    drop(rec);
    writer.finish().unwrap();
    let events = record::read(&path).unwrap();
    // Lane -> (port the outer logger used to reach the tap, port the tap used upstream).
    let mut peer: HashMap<u64, u16> = HashMap::new();
    let mut up: HashMap<u64, u16> = HashMap::new();
    let mut answered_n = std::collections::HashSet::new();
    for e in &events {
        match &e.body {
            Body::LaneOpen { lane, peer_port } => {
                peer.insert(*lane, *peer_port);
            }
            Body::Upstream { lane, local_port } => {
                up.insert(*lane, *local_port);
            }
            Body::TapReply { lane, reply, .. } if reply == "N" => {
                answered_n.insert(*lane);
            }
            _ => {}
        }
    }
    let outer_seen = outer.seen.lock().unwrap().clone();
    let inner_seen = inner.seen.lock().unwrap().clone();
    assert!(
        peer.len() >= 4,
        "psql, tokio-postgres, 2 pgbench clients: {peer:?}"
    );
    let mut compared = 0;
    for (lane, p) in &peer {
        let a = outer_seen
            .iter()
            .find(|((_, u), _)| u == p)
            .map(|(_, s)| s)
            .unwrap();
        let Some(b) = up
            .get(lane)
            .and_then(|u| inner_seen.iter().find(|((c, _), _)| c == u))
        else {
            continue;
        };
        let b = b.1;
        let mut fe = a.fe.as_slice();
        let mut be = a.be.as_slice();
        if answered_n.contains(lane) {
            // The tap answered the SSLRequest itself: it went no further, and neither did
            // the `N`.
            assert_eq!(&fe[..8], &SSL_REQUEST, "lane {lane}");
            fe = &fe[8..];
            assert_eq!(be[0], b'N');
            be = &be[1..];
        }
        assert_eq!(fe, b.fe.as_slice(), "lane {lane}: client to server");
        assert_eq!(be, b.be.as_slice(), "lane {lane}: server to client");
        assert!(!b.be.is_empty());
        compared += 1;
    }
    assert!(compared >= 4, "compared {compared} lanes");
    // The big row went through whole, and the record kept its size only.
    assert!(outer_seen.values().any(|s| s.be.len() > 300_000));
    let biggest = events
        .iter()
        .filter_map(|e| match &e.body {
            Body::Be { len, .. } => Some(*len),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(biggest > 300_000);
    let text_size = std::fs::metadata(&path).unwrap().len();
    assert!(text_size < 200_000, "the record is {text_size} bytes");
    if std::env::var_os("PGCHAOS_KEEP_TAP_RECORD").is_some() {
        eprintln!("record kept: {}", path.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    cluster.shutdown();
}

/// The processes whose command line names a run directory of the pgchaos process `pid`.
fn leftovers(pid: u32) -> Vec<String> {
    let needle = format!("run-{pid}-");
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(&needle) {
                out.push(c);
            }
        }
    }
    out
}

/// `pgchaos run` as a user runs it, with its pid (to look for leftovers afterwards).
fn run(args: &[&str]) -> (std::process::Output, u32) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(args)
        .current_dir(common::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

fn results(out: &Path, topology: &str) -> (PathBuf, Value) {
    common::latest(out, topology)
}

fn alive(pgid: i64) -> bool {
    // SAFETY: signal 0 only checks.
    unsafe { libc::kill(-(pgid as i32), 0) == 0 }
}

#[test]
fn run_three_psql_replicas_for_two_rounds() {
    let _serial = serial();
    let out = tmp("tap-run");
    let psql = pg_bin().join("psql");
    let (o, pid) = run(&[
        "run",
        "session-mode",
        "--replicas",
        "3",
        "--rounds",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--",
        psql.to_str().unwrap(),
        "-X",
        "-At",
        "-c",
        "SELECT pg_try_advisory_lock(1)",
        "-c",
        "CREATE TABLE seen_{round}_{replica}()",
        "-c",
        "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE tablename LIKE 'seen%'",
        "{dsn}",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (dir, r) = results(&out, "session-mode");
    assert_eq!(r["kind"], "run");
    let ran = r["ran"].as_array().unwrap();
    assert_eq!(ran.len(), 2);
    for round in ran {
        let n = round["round"].as_u64().unwrap();
        let reps = round["replicas"].as_array().unwrap();
        assert_eq!(reps.len(), 3);
        for rep in reps {
            assert_eq!(rep["code"], 0, "{rep}");
            let stdout =
                std::fs::read_to_string(dir.join(rep["stdout"].as_str().unwrap())).unwrap();
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(lines[0] == "t" || lines[0] == "f", "{stdout}");
            // A fresh database per round: only this round's tables.
            let tables = lines.last().unwrap();
            assert!(
                tables.contains(&format!("seen_{n}_{}", rep["replica"])),
                "{stdout}"
            );
            assert!(
                tables
                    .split(',')
                    .all(|t| t.starts_with(&format!("seen_{n}_"))),
                "round {n}: {stdout}"
            );
            assert!(!alive(rep["pgid"].as_i64().unwrap()));
        }
    }
    let calls = &r["summary"]["lock_calls"]["pg_try_advisory_lock"];
    assert_eq!(calls["calls"], 6, "{calls}");
    assert_eq!(
        calls["true"].as_u64().unwrap() + calls["false"].as_u64().unwrap(),
        6,
        "{calls}"
    );
    for rep in r["summary"]["replicas"].as_array().unwrap() {
        let c = rep["calls"].as_array().unwrap();
        assert_eq!(c.len(), 1, "{rep}");
        assert_eq!(
            (c[0]["func"].as_str(), c[0]["key"].as_str()),
            (Some("pg_try_advisory_lock"), Some("1"))
        );
        assert!(!rep["lanes"].as_array().unwrap().is_empty(), "{rep}");
    }
    assert!(r["summary"]["looks"].as_u64().unwrap() > 0);
    assert!(dir.join(record::FILE).is_file());
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_commands_get_a_clear_error_and_leave_nothing() {
    let _serial = serial();
    let out = tmp("tap-bad");
    let o = out.to_str().unwrap();
    // A command that does not exist: refused before anything starts.
    let (r, _) = run(&[
        "run",
        "direct",
        "--replicas",
        "2",
        "--out",
        o,
        "--",
        "pgchaos-no-such-tool",
    ]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(
        text(&r).contains("pgchaos-no-such-tool: not found on PATH"),
        "{}",
        text(&r)
    );
    assert!(
        std::fs::read_dir(&out).unwrap().next().is_none(),
        "nothing written"
    );
    // One that exits at once without connecting.
    let (r, pid) = run(&["run", "direct", "--replicas", "2", "--out", o, "--", "true"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(
        text(&r).contains("round 1 replica 2: ended (exit code 0)"),
        "{}",
        text(&r)
    );
    assert!(
        text(&r).contains("without connecting through the tap"),
        "{}",
        text(&r)
    );
    assert!(leftovers(pid).is_empty());
    // One that never exits: killed at its deadline, its group gone.
    let (r, pid) = run(&[
        "run",
        "direct",
        "--replicas",
        "2",
        "--deadline",
        "2s",
        "--out",
        o,
        "--",
        "sleep",
        "1000",
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(
        text(&r).contains("still running at the deadline"),
        "{}",
        text(&r)
    );
    let (_, res) = results(&out, "direct");
    for rep in res["ran"][0]["replicas"].as_array().unwrap() {
        assert_eq!(rep["deadline"], true);
        assert!(!alive(rep["pgid"].as_i64().unwrap()), "{rep}");
    }
    assert!(leftovers(pid).is_empty());
    // One that speaks protocol 2.0.
    let speak = "import os, socket, struct, time\n\
        s = socket.create_connection((os.environ['PGHOST'], int(os.environ['PGPORT'])))\n\
        s.sendall(struct.pack('!ii', 8, 0x20000))\n\
        print(s.recv(1000))\n\
        time.sleep(0.5)\n";
    let (r, pid) = run(&[
        "run",
        "direct",
        "--replicas",
        "1",
        "--out",
        o,
        "--",
        "python3",
        "-c",
        speak,
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(
        text(&r).contains("unsupported frontend protocol 2.0"),
        "{}",
        text(&r)
    );
    let (dir, _) = results(&out, "direct");
    let said = std::fs::read_to_string(dir.join("replicas/r1/1.stdout")).unwrap();
    assert!(
        said.contains("unsupported frontend protocol 2.0"),
        "the client was told: {said}"
    );
    assert!(leftovers(pid).is_empty());
    let _ = std::fs::remove_dir_all(&out);
}
