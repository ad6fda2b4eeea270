//! The command line end to end, against real servers: chaos runs and their exit codes,
//! minimal cases and their replays, compare, and the errors a user meets.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// Run the binary from the workspace root.
fn pgchaos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(args)
        .current_dir(root())
        .env("PGCHAOS_QUIET", "1")
        .output()
        .expect("run pgchaos")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pgchaos-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn latest(out: &Path, topology: &str) -> (PathBuf, Value) {
    let dir = out.join(topology).join("latest").canonicalize().unwrap();
    let v =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    (dir, v)
}

fn invariant<'a>(results: &'a Value, name: &str) -> &'a Value {
    results["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap()
}

fn assert_no_pg_violation(results: &Value) {
    for i in results["invariants"].as_array().unwrap() {
        if i["tier"] == "pg" {
            assert_eq!(i["verdict"], "holds", "{} violated: {i}", i["name"]);
        }
    }
}

/// The headline: transaction mode breaks mutual exclusion; pgchaos finds it within 64 cases,
/// shrinks it to at most 3 steps, for seeds 1 to 5, exits 0 because it is expected, and the
/// minimal case replays 10 times out of 10.
#[test]
fn transaction_mode_mutual_exclusion_is_found_shrunk_and_reproduced() {
    let out = tmp("tx");
    for seed in 1..=5 {
        let seed = seed.to_string();
        let o = pgchaos(&[
            "chaos",
            "transaction-mode",
            "--cases",
            "64",
            "--seed",
            &seed,
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(o.status.code(), Some(0), "seed {seed}:\n{}", text(&o));
        let (dir, results) = latest(&out, "transaction-mode");
        assert_eq!(results["seed"].as_u64().unwrap().to_string(), seed);
        assert_eq!(results["passed"], true);
        assert_no_pg_violation(&results);
        let me = invariant(&results, "app.mutual_exclusion");
        assert_eq!(me["verdict"], "violated", "seed {seed}");
        let minimal = me["first_failure"]["minimal_steps"].as_u64().unwrap();
        assert!(
            minimal <= 3,
            "seed {seed}: minimal case has {minimal} steps"
        );
        assert!(me["first_failure"]["shrink_runs"].as_u64().unwrap() > 0);
        assert!(results["version_drift"].is_array());
        assert!(results["versions"]["postgres"] == "18.6");
        assert!(results["timing"]["steps_per_sec"].as_f64().unwrap() > 0.0);
        // The default `--cpu auto` pins the run to one of the machine's CPUs.
        let online = results["cpu"]["online"].as_u64().unwrap();
        assert!(results["cpu"]["pinned"].as_u64().unwrap() < online);
        for f in [
            "results.json",
            "history.jsonl",
            "report.md",
            "failures/app.mutual_exclusion/case.yaml",
            "failures/app.mutual_exclusion/evidence.json",
        ] {
            assert!(dir.join(f).is_file(), "missing {f}");
        }
        let evidence: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("failures/app.mutual_exclusion/evidence.json"))
                .unwrap(),
        )
        .unwrap();
        for field in [
            "holder",
            "contender",
            "boundary_action",
            "pg_locks_before",
            "pg_locks_after",
            "contender_try_before",
            "contender_try_after",
            "cleanup_action",
            "postgres_version",
            "pool_mode",
        ] {
            assert!(!evidence[field].is_null(), "evidence lacks {field}");
        }
        assert_ne!(
            evidence["holder"]["backend_pid"],
            evidence["contender"]["backend_pid"]
        );
        if seed == "1" {
            // Every minimal case of the run, not only the headline one, replays 10 out of 10.
            for entry in std::fs::read_dir(dir.join("failures")).unwrap() {
                let case = entry.unwrap().path().join("case.yaml");
                let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "10"]);
                assert_eq!(o.status.code(), Some(0), "{}: {}", case.display(), text(&o));
                assert!(text(&o).contains("reproduced 10/10 times"), "{}", text(&o));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Every other shipped topology: 256 cases, verdicts as its `expect` says, no pg.* violation;
/// then the comparison matrix.
#[test]
fn shipped_topologies_meet_their_expectations_and_compare() {
    let out = tmp("all");
    let names = [
        "direct",
        "session-mode",
        "session-mode-no-reset",
        "transaction-mode-xact",
        "transaction-mode-reset-always",
        "transaction-mode",
    ];
    for name in names {
        let o = pgchaos(&[
            "chaos",
            name,
            "--cases",
            "256",
            "--seed",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(o.status.code(), Some(0), "{name}:\n{}", text(&o));
        let (dir, results) = latest(&out, name);
        assert_no_pg_violation(&results);
        assert_eq!(results["passed"], true);
        for entry in std::fs::read_dir(dir.join("failures")).unwrap() {
            let case = entry.unwrap().path().join("case.yaml");
            let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "10"]);
            assert!(
                text(&o).contains("reproduced 10/10 times"),
                "{}: {}",
                case.display(),
                text(&o)
            );
        }
    }
    let (_, xact) = latest(&out, "transaction-mode-xact");
    assert_eq!(invariant(&xact, "app.mutual_exclusion")["verdict"], "holds");
    let (_, session) = latest(&out, "session-mode");
    assert_eq!(invariant(&session, "app.no_orphans")["verdict"], "holds");
    let (_, tx) = latest(&out, "transaction-mode");
    assert_eq!(invariant(&tx, "app.no_orphans")["verdict"], "violated");

    let reports = out.to_str().unwrap();
    let o = pgchaos(&[
        "compare",
        "session-mode",
        "transaction-mode",
        "transaction-mode-xact",
        "--reports",
        reports,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let table = text(&o);
    for needle in [
        "app.mutual_exclusion",
        "session-mode",
        "transaction-mode-xact",
        "violated",
        "holds",
        "version drift",
    ] {
        assert!(table.contains(needle), "compare lacks {needle}:\n{table}");
    }
    let o = pgchaos(&[
        "compare",
        "session-mode",
        "transaction-mode",
        "--markdown",
        "--reports",
        reports,
    ]);
    assert!(text(&o).contains("| app.mutual_exclusion"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_malformed_topology_exits_2_naming_file_line_and_column() {
    let dir = tmp("bad");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "name: bad\npostgres:\n  version: \"18.6\"\npgbouncer:\n  version: \"1.25.2\"\n  pool_mode: transction\n").unwrap();
    for cmd in ["check", "chaos", "up"] {
        let o = pgchaos(&[cmd, bad.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o));
        let t = text(&o);
        assert!(t.contains(&format!("{}:6:14", bad.display())), "{cmd}: {t}");
        assert!(
            t.contains("transaction"),
            "the error lists valid modes: {t}"
        );
    }
    let o = pgchaos(&["check", "topologies/direct.yaml", "transaction-mode"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = pgchaos(&["check", "no-such-topology"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no-such-topology"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_and_environment_errors_exit_2_with_the_cause() {
    let o = pgchaos(&["chaos", "transaction-mode", "--seed", "banana"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--seed \"banana\""), "{}", text(&o));
    let o = pgchaos(&["chaos", "transaction-mode", "--time-limit", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    let o = pgchaos(&["chaos", "transaction-mode", "--cpu", "fast"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--cpu: \"fast\": expected"),
        "{}",
        text(&o)
    );
    let o = pgchaos(&[
        "reproduce",
        "--cpu",
        "100000",
        "--seed",
        "1",
        "transaction-mode",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("CPU 100000 is not available"),
        "{}",
        text(&o)
    );
    let o = pgchaos(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = pgchaos(&["reproduce", "/nonexistent/case.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("/nonexistent/case.yaml"), "{}", text(&o));
    let o = pgchaos(&["compare", "never-ran-topology", "--reports", "/nonexistent"]);
    assert_eq!(o.status.code(), Some(2));
    // A missing binary: an explicit PostgreSQL directory without postgres in it.
    let empty = tmp("nobin");
    let o = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["up", "direct", "--once"])
        .current_dir(root())
        .env("PGCHAOS_PG_BIN", &empty)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(empty.to_str().unwrap()),
        "names the directory: {}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn up_once_json_reports_versions_drift_and_endpoints() {
    let o = pgchaos(&["up", "transaction-mode", "--once", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["topology"], "transaction-mode");
    assert_eq!(v["postgres"]["version"], "18.6");
    assert_eq!(v["pgbouncer"]["declared_version"], "1.25.2");
    assert_eq!(v["pgbouncer"]["pool_mode"], "transaction");
    let ran = v["pgbouncer"]["version"].as_str().unwrap();
    assert_eq!(
        v["version_drift"].as_array().unwrap().is_empty(),
        ran == "1.25.2"
    );
    for dsn in [
        &v["postgres"]["dsn"],
        &v["pgbouncer"]["dsn"],
        &v["pgbouncer"]["admin_dsn"],
    ] {
        assert!(
            dsn.as_str().unwrap().contains("@127.0.0.1:"),
            "loopback only: {dsn}"
        );
    }
    for pid in [&v["postgres"]["pid"], &v["pgbouncer"]["pid"]] {
        let pid = pid.as_i64().unwrap();
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} outlived `up --once`"
        );
    }
    let o = pgchaos(&["up", "direct", "--once", "--json"]);
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert!(v["pgbouncer"].is_null());
}

/// `pgchaos up NAME --json` in the background, once it has printed its JSON line.
fn spawn_up(topology: &str) -> (std::process::Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgchaos"))
        .args(["up", topology, "--json"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let v = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (child, v)
}

/// A server that dies under the harness: `up` notices, exits 2 naming it, and stops the other.
#[test]
fn a_server_that_dies_is_reported() {
    let (mut child, v) = spawn_up("transaction-mode");
    let pg = v["postgres"]["pid"].as_i64().unwrap() as i32;
    let bouncer = v["pgbouncer"]["pid"].as_i64().unwrap() as i32;
    // SAFETY: signalling a process this test's child started.
    unsafe { libc::kill(pg, libc::SIGKILL) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("Postgres") && err.contains("died"), "{err}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !Path::new(&format!("/proc/{bouncer}")).exists(),
        "pgbouncer outlived the harness"
    );
}

/// Ctrl-C on `up`: exit 130, both servers stopped, run directory removed.
#[test]
fn ctrl_c_stops_the_servers() {
    let (mut child, v) = spawn_up("session-mode");
    let pids = [
        v["postgres"]["pid"].as_i64().unwrap(),
        v["pgbouncer"]["pid"].as_i64().unwrap(),
    ];
    for pid in pids {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "server {pid} is up before Ctrl-C"
        );
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    for pid in pids {
        let gone = (0..100).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            if alive {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            !alive
        });
        assert!(gone, "server {pid} outlived Ctrl-C");
    }
}
