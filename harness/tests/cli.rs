//! The command line end to end, against real servers: chaos runs and their exit codes,
//! minimal cases and their replays, compare, and the errors a user meets.

mod common;

use common::{latest, pgchaos, root, text, tmp};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One real-server test at a time: the concurrent experiments' outcomes depend on timing, and
/// two chaos runs sharing two cores change it (a run of the fault topologies beside the
/// starvation experiment once let a queued worker get a second server).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn invariant<'a>(results: &'a Value, name: &str) -> &'a Value {
    results["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap()
}

/// No `pg.*` invariant violated, in a generated case or a replay (a short run may leave one
/// unknown: nothing exercised it; the run says so and fails).
fn assert_no_pg_violation(results: &Value) {
    for i in results["invariants"].as_array().unwrap() {
        if i["tier"] == "pg" {
            assert_ne!(i["verdict"], "violated", "{} violated: {i}", i["name"]);
        }
    }
    assert!(
        results["replay_violations"]
            .as_array()
            .is_none_or(|v| v.is_empty()),
        "pg.* in a replay: {}",
        results["replay_violations"]
    );
}

/// The lines of a run's report.md that say what a pg.* verdict rests on (`- pg.* in case N:
/// ...`), or why there are none to show.
fn pg_details(out: &Path, name: &str) -> String {
    let report = out.join(name).join("latest").join("report.md");
    match std::fs::read_to_string(&report) {
        Ok(md) => md
            .lines()
            .filter(|l| l.starts_with("- pg.") && l.contains(" in "))
            .take(12)
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("({}: {e})", report.display()),
    }
}

/// The headline: transaction mode breaks mutual exclusion; pgchaos finds it within 64 cases,
/// shrinks it to at most 3 steps, for seeds 1 to 5, exits 0 because it is expected, and the
/// minimal case replays 10 times out of 10.
#[test]
fn transaction_mode_mutual_exclusion_is_found_shrunk_and_reproduced() {
    let _serial = serial();
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
        assert_eq!(results["versions"]["postgres"], "18.6");
        assert_eq!(results["versions"]["postgres_declared"], "18.6");
        // Strict versions: the declared PgBouncer ran, no drift, and its provenance (the
        // source tarball's SHA-256) is recorded.
        assert_eq!(results["versions"]["pooler"], "1.25.2");
        assert_eq!(results["version_drift"], serde_json::json!([]));
        let sha = results["versions"]["pooler_tarball_sha256"]
            .as_str()
            .unwrap_or("");
        assert!(
            sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "pooler_tarball_sha256: {}",
            results["versions"]
        );
        // The history is on disk, compact, and re-checked to the same verdicts.
        let h = &results["history"];
        assert!(h["events"].as_u64().unwrap() > 100, "{h}");
        assert!(h["bytes_per_step"].as_f64().unwrap() < 400.0, "{h}");
        assert_analyze_agrees(&dir, &results);
        assert!(results["timing"]["steps_per_sec"].as_f64().unwrap() > 0.0);
        // The default `--cpu auto` pins the run to one of the machine's CPUs.
        let online = results["cpu"]["online"].as_u64().unwrap();
        assert!(results["cpu"]["pinned"].as_u64().unwrap() < online);
        for f in [
            "results.json",
            "history.jsonl.gz",
            "topology.yaml",
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

/// `pgchaos analyze DIR` re-checks the stored history with the current checker: the same
/// verdicts, violating and unknown cases and minimal sizes as the run printed; and `history`
/// prints a case of it. The search's budget is the model's work (`run.search_work`), not
/// wall-clock time, so a case over budget is over it in both checks, on any machine. (Before,
/// with 2 s of wall clock, CI saw case 1 of a session-mode-faults run judged in 1.9 s online
/// and over 2 s in analyze, and this test had to accept either.)
fn assert_analyze_agrees(dir: &Path, results: &Value) {
    let o = pgchaos(&["analyze", dir.to_str().unwrap()]);
    let analysed: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("analysis/results.json")).unwrap())
            .unwrap();
    common::exit_is_the_verdicts(&o, &analysed);
    type Row = (String, u64, Option<u64>, Option<u64>);
    let cases = |v: &Value| -> std::collections::BTreeSet<u64> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    let table = |r: &Value| -> Vec<(String, Row)> {
        r["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().unwrap().to_string(),
                    (
                        i["verdict"].as_str().unwrap().to_string(),
                        i["violating_cases"].as_u64().unwrap(),
                        i["first_failure"]["case_index"].as_u64(),
                        i["first_failure"]["minimal_steps"].as_u64(),
                    ),
                )
            })
            .collect()
    };
    let unknown = |r: &Value, name: &str| {
        r["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .map(|i| (cases(&i["violating"]), cases(&i["unknown"])))
            .unwrap()
    };
    let (ran, again) = (table(results), table(&analysed));
    assert_eq!(
        ran.iter().map(|r| &r.0).collect::<Vec<_>>(),
        again.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    let mut agreed_on_violations = std::collections::BTreeSet::new();
    for ((name, r), (_, a)) in ran.iter().zip(&again) {
        assert_eq!(
            unknown(results, name),
            unknown(&analysed, name),
            "{name} in {}: (violating, unknown) cases, run vs analyze",
            dir.display()
        );
        assert_eq!(r, a, "{name} in {}", dir.display());
        if r.0 == "violated" {
            agreed_on_violations.insert(name.clone());
        }
    }
    let want = if results["passed"] == true { 0 } else { 1 };
    assert_eq!(o.status.code(), Some(want), "{}", text(&o));
    assert_eq!(analysed["cases"], results["cases"]);
    assert_eq!(analysed["steps"], results["steps"]);
    assert_eq!(analysed["skipped_steps"], results["skipped_steps"]);
    for f in std::fs::read_dir(dir.join("failures"))
        .into_iter()
        .flatten()
    {
        let name = f.unwrap().file_name();
        if !agreed_on_violations.contains(name.to_str().unwrap_or_default()) {
            continue;
        }
        assert!(
            dir.join("analysis/failures")
                .join(&name)
                .join("case.yaml")
                .is_file(),
            "analysis lacks {name:?}"
        );
    }
    let o = pgchaos(&["history", dir.to_str().unwrap(), "--case", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("case 0 (Run"), "{t}");
    assert!(
        t.contains(" invoke ") && (t.contains("observed after") || t.contains("observed (sample)")),
        "{t}"
    );
}

/// Every other shipped topology: 256 cases, verdicts as its `expect` says, no pg.* violation,
/// the same verdicts again from `analyze`; then the comparison matrix.
#[test]
fn shipped_topologies_meet_their_expectations_and_compare() {
    let _serial = serial();
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
        assert_analyze_agrees(&dir, &results);
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
        "/256 cases, min",
    ] {
        assert!(table.contains(needle), "compare lacks {needle}:\n{table}");
    }
    let widest = table.lines().map(|l| l.chars().count()).max().unwrap();
    let table_width = table.lines().next().unwrap().chars().count();
    assert!(
        table_width < 130,
        "the table is {table_width} wide:\n{table}"
    );
    assert!(widest >= table_width);
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

/// The concurrent schedule of the shipped generated topologies meets `expect_concurrent`
/// (falling back to `expect`): exit 0, no `pg.*` violation in any case or replay, every case
/// that ran judged, the same verdicts from `analyze`; and its clients leave when their steps are
/// done (`clients_leave_when_done`), so in transaction mode no client is starved of a server by
/// one that finished inside a transaction (`app.progress` holds; starvation is what the
/// `*starvation` topologies show, with their wait-for graphs), and transaction pooling's trap is
/// still found.
#[test]
fn the_concurrent_schedule_meets_expect_concurrent() {
    let _serial = serial();
    let out = tmp("concurrent");
    for name in [
        "direct",
        "session-mode",
        "session-mode-no-reset",
        "transaction-mode",
    ] {
        let o = pgchaos(&[
            "chaos",
            name,
            "--schedule",
            "concurrent",
            "--cases",
            "64",
            "--seed",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        if o.status.code() != Some(0) {
            // What each pg.* verdict rests on (the op, the state the search reached), first,
            // so that a failure on a machine whose run directory is gone can be read.
            panic!(
                "{name}: exit {:?}\n{}\n{}",
                o.status.code(),
                pg_details(&out, name),
                text(&o)
            );
        }
        let (dir, results) = latest(&out, name);
        assert_eq!(results["schedule"], "concurrent");
        // The run's time limit (60 s) may stop transaction mode's slower cases early: every
        // case that ran is judged, and enough ran to find what is expected.
        let cases = results["cases"].as_u64().unwrap();
        assert!(cases >= 16, "{name}: only {cases} cases ran");
        // Every case that ran is judged, but for the search's state budget: a concurrent case
        // whose clients time out behind a starved pool can leave several statements of unknown
        // outcome at once, and their orders outgrow 20,000 states (CI saw one such case of 64
        // on transaction-mode, seed 1, on 2026-12-06; docs/checker.md, "The search's budget").
        // Such a case is shown as unknown, never judged; at most one of 64 is tolerated, and
        // only for that reason.
        let judged = results["judged_cases"].as_u64().unwrap();
        // `unknown_why` is left out of results.json when it is empty.
        let why: Vec<String> = results["unknown_why"]
            .as_array()
            .map(|a| a.iter().map(|w| w.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(cases - judged, why.len() as u64, "{name}: {why:?}");
        assert!(
            cases - judged <= 1,
            "{name}: {} unknown: {why:?}",
            cases - judged
        );
        for w in &why {
            assert!(
                w.contains("states"),
                "{name}: unknown for another reason than the state budget: {w}"
            );
        }
        assert_no_pg_violation(&results);
        assert_analyze_agrees(&dir, &results);
    }
    let (dir, tx) = latest(&out, "transaction-mode");
    assert_eq!(
        invariant(&tx, "app.mutual_exclusion")["verdict"],
        "violated"
    );
    // Before clients left when done, this run starved (9 of 64 cases when expect_concurrent
    // was set, 2026-12-02): a client whose steps ended inside a transaction kept one of the
    // pool's two servers.
    assert_eq!(invariant(&tx, "app.progress")["verdict"], "holds");
    let left = clients_leave_when_done(&dir);
    assert!(left >= 64, "only {left} clients left in 64 cases");
    let timed = signals_are_timed(&dir);
    assert!(
        timed >= 5,
        "only {timed} terminates with a server time in 64 cases"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Every terminate that signalled its backend carries the server's time from before its
/// signal to after its backend was confirmed gone, of the clock its backend's statements
/// report, and every statement that backend ran lies before that end; a cancel carries the time
/// before its signal and none after. Returns how many terminates were timed.
fn signals_are_timed(dir: &Path) -> usize {
    use pgchaos::history::{Body, HistoryReader, Process};
    use pgchaos::vocab::{BackendId, Op, Reply, ServerTime};
    let events: Vec<_> = HistoryReader::open(dir)
        .unwrap()
        .map(|e| e.unwrap().body)
        .collect();
    let mut targets: std::collections::BTreeMap<usize, BackendId> = Default::default();
    let mut ends: Vec<(BackendId, ServerTime)> = vec![];
    for body in &events {
        match body {
            Body::Invoke(i) if i.p == Process::Nemesis => {
                if let (Some(step), Some(t)) = (i.step, i.target) {
                    targets.insert(step, t);
                }
            }
            Body::Ok(c) if c.p == Process::Nemesis && c.value == (Reply::Bool { value: true }) => {
                let s = c
                    .server
                    .unwrap_or_else(|| panic!("{:?} of step {:?} has no server time", c.f, c.step));
                let lo = s.lo.expect("a time before the signal");
                match c.f {
                    Op::Terminate => {
                        let hi = s.hi.expect("a time after the exit");
                        assert!(lo < hi, "terminate of step {:?}: {s:?}", c.step);
                        ends.push((targets[&c.step.unwrap()], s));
                    }
                    Op::Cancel => assert_eq!(s.hi, None, "a cancel's effect has no known end"),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for body in &events {
        if let Body::Ok(c) | Body::Fail(c) = body
            && let (Some(b), Some(s)) = (c.backend, c.server)
        {
            for (target, end) in &ends {
                if *target == b {
                    assert_eq!(s.clock, end.clock, "{b}: one PostgreSQL, one clock");
                    assert!(
                        s.any().unwrap() < end.hi.unwrap(),
                        "{:?} of step {:?} on {b} ran after its terminate's end {end:?}",
                        c.f,
                        c.step
                    );
                }
            }
        }
    }
    ends.len()
}

/// In a concurrent run of a generated workload, every client's last op of a case is a
/// `disconnect`: its own step, or the one of no step it sends when its steps are done; or its
/// connection was already gone (a reply that says the server ended it). Returns how many
/// clients left that way.
fn clients_leave_when_done(dir: &Path) -> usize {
    use pgchaos::history::{Body, HistoryReader, Process};
    use pgchaos::vocab::Op;
    let mut last: std::collections::BTreeMap<usize, pgchaos::history::Completion> =
        Default::default();
    let (mut left, mut cases) = (0, 0);
    for e in HistoryReader::open(dir).unwrap() {
        match e.unwrap().body {
            Body::Case(_) => last.clear(),
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) => {
                if let Process::Client(i) = c.p {
                    last.insert(i, c);
                }
            }
            Body::CaseEnd(_) => {
                cases += 1;
                for (i, c) in &last {
                    if c.f == Op::Disconnect {
                        left += usize::from(c.step.is_none());
                    } else {
                        assert!(
                            c.value.ended_by_server(),
                            "case {cases}: C{} ended on {:?} {:?} and stayed connected",
                            i + 1,
                            c.f,
                            c.value
                        );
                    }
                }
            }
            _ => {}
        }
    }
    assert!(cases > 0, "no case in {}", dir.display());
    left
}

/// Every shipped `compose/NAME` directory is what `pgchaos compose NAME` writes today (no
/// Docker needed to write it): a change to what the servers are given at start (init.sql,
/// configs) that forgot to regenerate them fails here, in `just test`, and not only in the
/// Docker recipe. The secrets file is the run's own and is not shipped.
#[test]
fn shipped_compose_directories_are_what_compose_writes() {
    let shipped = root().join("compose");
    let mut checked = 0;
    for d in std::fs::read_dir(&shipped).unwrap() {
        let d = d.unwrap();
        if !d.file_type().unwrap().is_dir() {
            continue;
        }
        let name = d.file_name().to_string_lossy().to_string();
        let out = tmp(&format!("fresh-compose-{name}"));
        let o = pgchaos(&["compose", &name, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "compose {name}: {}", text(&o));
        // Read what it wrote, then remove it before judging (nothing left when a file differs).
        let mut written = vec![];
        for f in std::fs::read_dir(&out).unwrap() {
            let f = f.unwrap().file_name().to_string_lossy().to_string();
            if f != ".env" {
                written.push((std::fs::read_to_string(out.join(&f)).unwrap(), f));
            }
        }
        let _ = std::fs::remove_dir_all(&out);
        for (want, f) in &written {
            let have = std::fs::read_to_string(d.path().join(f)).unwrap_or_else(|e| {
                panic!("compose/{name}/{f}: {e} (run pgchaos compose {name} --force)")
            });
            assert_eq!(
                &have, want,
                "compose/{name}/{f} is stale: run pgchaos compose {name} --force"
            );
        }
        assert!(
            written.len() >= 3,
            "compose {name} wrote {} files",
            written.len()
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "only {checked} compose directories under {}",
        shipped.display()
    );
}

#[test]
fn a_malformed_topology_exits_2_naming_file_line_and_column() {
    let _serial = serial();
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

/// A topology that asks for a capability its launcher lacks is refused by `check`, naming
/// the file, the launcher, the faults that ask for it and the launcher that has it: host
/// faults on the native launcher (processes of this machine have no host of their own), the
/// link faults on the docker launcher (the link proxy is a loopback process of the harness).
/// The shipped files, each on its own launcher, pass.
#[test]
fn check_refuses_a_fault_its_launcher_lacks_naming_the_file_and_the_fault() {
    let _serial = serial();
    let dir = tmp("capability");
    for (shipped, from, to, wants) in [
        (
            "topologies/transaction-mode-host-faults.yaml",
            "launcher: docker",
            "launcher: native",
            "launcher native cannot run the host faults host_freeze_pooler, host_freeze_postgres, \
             host_kill_pooler, host_kill_postgres, host_restart_pooler",
        ),
        (
            "topologies/network-faults.yaml",
            "\nname:",
            "\nlauncher: docker\nname:",
            "launcher docker cannot run the link faults",
        ),
    ] {
        let o = pgchaos(&["check", shipped]);
        assert_eq!(o.status.code(), Some(0), "{shipped}: {}", text(&o));
        let yaml = std::fs::read_to_string(root().join(shipped)).unwrap();
        assert!(yaml.contains(from), "{shipped} has {from:?}");
        let moved = dir.join(Path::new(shipped).file_name().unwrap());
        std::fs::write(&moved, yaml.replacen(from, to, 1)).unwrap();
        let o = pgchaos(&["check", moved.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{shipped} moved: {t}");
        assert!(t.contains(&format!("{}: {wants}", moved.display())), "{t}");
        assert!(
            t.contains("; use launcher "),
            "names a launcher that has it: {t}"
        );
        assert!(!t.contains(": ok ("), "not passed: {t}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_and_environment_errors_exit_2_with_the_cause() {
    let _serial = serial();
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
    let _serial = serial();
    let o = pgchaos(&["up", "transaction-mode", "--once", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["topology"], "transaction-mode");
    assert_eq!(v["postgres"]["version"], "18.6");
    assert_eq!(v["pooler"]["declared_version"], "1.25.2");
    assert_eq!(v["pooler"]["pool_mode"], "transaction");
    assert_eq!(v["pooler"]["version"], "1.25.2", "strict versions: {v}");
    assert_eq!(v["version_drift"], serde_json::json!([]));
    for dsn in [
        &v["postgres"]["dsn"],
        &v["pooler"]["dsn"],
        &v["pooler"]["admin_dsn"],
    ] {
        assert!(
            dsn.as_str().unwrap().contains("@127.0.0.1:"),
            "loopback only: {dsn}"
        );
    }
    for pid in [&v["postgres"]["pid"], &v["pooler"]["pid"]] {
        let pid = pid.as_i64().unwrap();
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} outlived `up --once`"
        );
    }
    let o = pgchaos(&["up", "direct", "--once", "--json"]);
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert!(v["pooler"].is_null());
}

/// A stored run directory can be re-checked and printed; bad ones are errors naming the path.
#[test]
fn analyze_and_history_refuse_what_is_not_a_run() {
    let _serial = serial();
    let o = pgchaos(&["analyze", "/nonexistent/run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("/nonexistent/run"), "{}", text(&o));
    let dir = tmp("notarun");
    std::fs::write(dir.join("history.jsonl.gz"), b"not gzip").unwrap();
    std::fs::write(
        dir.join("topology.yaml"),
        "name: x\npostgres: { version: \"18.6\" }\n",
    )
    .unwrap();
    let o = pgchaos(&["analyze", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("history.jsonl.gz"), "{}", text(&o));
    assert!(!dir.join("analysis").exists(), "nothing half-written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The declared PostgreSQL version stays what the file says, and every output lists the
/// difference from what ran: a topology declaring 18.5, run on the 18.6 binaries.
#[test]
fn postgres_drift_keeps_the_declared_version_and_is_listed() {
    let _serial = serial();
    let dir = tmp("drift");
    let topo = dir.join("drift.yaml");
    let src = std::fs::read_to_string(root().join("topologies/direct.yaml"))
        .unwrap()
        .replace("version: \"18.6\"", "version: \"18.5\"")
        .replace("name: direct", "name: drift");
    assert!(src.contains("18.5"));
    std::fs::write(&topo, src).unwrap();
    let t = pgchaos::topology::Topology::load(
        &root().join("topologies/direct.yaml"),
        &pgchaos::catalog(),
    )
    .unwrap();
    let (pg, _) = pgchaos::launch::binaries(&t, true).unwrap();
    // This test is about drift: not strict, whatever the suite's environment says.
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgchaos"))
            .args(args)
            .current_dir(root())
            .env("PGCHAOS_QUIET", "1")
            .env("PGCHAOS_STRICT_VERSIONS", "0")
            .env("PGCHAOS_PG_BIN", &pg.bin_dir)
            .output()
            .unwrap()
    };
    let o = run(&["up", topo.to_str().unwrap(), "--once", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert_eq!(v["postgres"]["declared_version"], "18.5");
    assert_eq!(v["postgres"]["version"], "18.6");
    assert!(
        v["version_drift"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == "postgres declared 18.5, ran 18.6"),
        "{v}"
    );
    let out = dir.join("reports");
    let o = run(&[
        "chaos",
        topo.to_str().unwrap(),
        "--cases",
        "4",
        "--seed",
        "1",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        text(&o).contains("postgres declared 18.5, ran 18.6"),
        "{}",
        text(&o)
    );
    let (_, results) = latest(&out, "drift");
    assert_eq!(results["versions"]["postgres_declared"], "18.5");
    assert_eq!(results["versions"]["postgres"], "18.6");
    assert!(
        results["version_drift"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == "postgres declared 18.5, ran 18.6")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The source mirror the suite builds PgBouncer from: `PGCHAOS_SOURCE_MIRROR`, else
/// `../shared/pgbouncer` beside the repository (as `.ci/run` and `just` choose it).
fn source_mirror() -> PathBuf {
    let dir = std::env::var_os("PGCHAOS_SOURCE_MIRROR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/pgbouncer"));
    assert!(
        dir.join("pgbouncer-1.25.2.tar.gz").is_file(),
        "no pgbouncer-1.25.2.tar.gz in the source mirror {} (set PGCHAOS_SOURCE_MIRROR)",
        dir.display()
    );
    dir
}

/// A source mirror's bad inputs are errors naming the file, with nothing left in the cache: a
/// mirror directory that does not exist (flag and variable), a corrupt tarball, and a tarball
/// whose name says one version and whose build reports another (the real 1.25.2 source named
/// 1.25.9). Each provisions into an empty cache of its own (PostgreSQL from an explicit path).
#[test]
fn source_mirror_errors_name_the_file_and_cache_nothing() {
    let _serial = serial();
    let dir = tmp("mirror");
    let t = pgchaos::topology::Topology::load(
        &root().join("topologies/direct.yaml"),
        &pgchaos::catalog(),
    )
    .unwrap();
    let (pg, _) = pgchaos::launch::binaries(&t, true).unwrap();
    let topo = |version: &str| {
        let path = dir.join(format!("mirror-{version}.yaml"));
        let src = std::fs::read_to_string(root().join("topologies/transaction-mode.yaml"))
            .unwrap()
            .replace("name: transaction-mode", "name: mirror-test")
            .replace("version: \"1.25.2\"", &format!("version: \"{version}\""));
        std::fs::write(&path, src).unwrap();
        path
    };
    let cache = dir.join("cache");
    let provision = |mirror: &Path, flag: bool, topology: &Path| {
        let mut c = common::command();
        c.arg("provision").arg(topology).current_dir(root());
        c.env("PGCHAOS_CACHE", &cache)
            .env("PGCHAOS_PG_BIN", &pg.bin_dir);
        if flag {
            c.arg("--source-mirror").arg(mirror);
            c.env_remove("PGCHAOS_SOURCE_MIRROR");
        } else {
            c.env("PGCHAOS_SOURCE_MIRROR", mirror);
        }
        c.output().unwrap()
    };
    let nothing_cached = |what: &str| {
        let left: Vec<String> = std::fs::read_dir(&cache)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".tmp-"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{what}: scratch left in the cache: {left:?}"
        );
        let built: Vec<_> = std::fs::read_dir(cache.join("pgbouncer"))
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            built.iter().all(|n| n.to_string_lossy().starts_with('.')),
            "{what}: a build was cached: {built:?}"
        );
    };
    let v125 = topo("1.25.2");

    // A mirror that does not exist, by flag (checked before anything runs) and by variable.
    let gone = dir.join("no-such-mirror");
    for flag in [true, false] {
        let o = provision(&gone, flag, &v125);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let want = format!(
            "source mirror {} (--source-mirror or PGCHAOS_SOURCE_MIRROR) does not exist",
            gone.display()
        );
        assert!(text(&o).contains(&want), "flag {flag}: {}", text(&o));
        nothing_cached("missing mirror");
    }

    // A corrupt tarball.
    let bad = dir.join("bad-mirror");
    std::fs::create_dir_all(&bad).unwrap();
    let corrupt = bad.join("pgbouncer-1.25.2.tar.gz");
    std::fs::write(&corrupt, b"not a tarball\n").unwrap();
    let o = provision(&bad, true, &v125);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let want = format!("{} does not unpack", corrupt.display());
    assert!(text(&o).contains(&want), "{}", text(&o));
    nothing_cached("corrupt tarball");

    // The real 1.25.2 source under another version's name: built, then refused.
    let renamed = dir.join("renamed-mirror");
    std::fs::create_dir_all(&renamed).unwrap();
    let wrong = renamed.join("pgbouncer-1.25.9.tar.gz");
    std::fs::copy(source_mirror().join("pgbouncer-1.25.2.tar.gz"), &wrong).unwrap();
    let o = provision(&renamed, true, &topo("1.25.9"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let want = format!(
        "{}: its name says version 1.25.9, but the binary built from it reports 1.25.2",
        wrong.display()
    );
    assert!(text(&o).contains(&want), "{}", text(&o));
    nothing_cached("wrong version");
    let _ = std::fs::remove_dir_all(&dir);
}

/// PgBouncer 1.24.1 (Debian 13's) stays reachable as a declared version: the strict suite
/// runs `transaction-mode-1-24` on it with no drift, beside `transaction-mode` on 1.25.2, and
/// `compare` puts the two releases side by side, each run naming the version that ran.
#[test]
fn pgbouncer_1_24_stays_a_declared_version_and_compares_with_1_25() {
    let _serial = serial();
    let out = tmp("v124");
    let args = ["--cases", "24", "--seed", "1", "--max-shrink-runs", "0"];
    let (_, old) = chaos_judged(&out, "transaction-mode-1-24", &args);
    let (_, new) = chaos_judged(&out, "transaction-mode", &args);
    for (r, v) in [(&old, "1.24.1"), (&new, "1.25.2")] {
        assert_eq!(r["versions"]["pooler"], v, "{}", r["versions"]);
        assert_eq!(r["versions"]["pooler_declared"], v, "{}", r["versions"]);
        assert_eq!(r["version_drift"], serde_json::json!([]), "{v}");
    }
    let o = pgchaos(&[
        "compare",
        "transaction-mode-1-24",
        "transaction-mode",
        "--reports",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let table = text(&o);
    for (name, v) in [
        ("transaction-mode-1-24", "1.24.1"),
        ("transaction-mode", "1.25.2"),
    ] {
        let want = format!("PgBouncer {v}; version drift: none");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&format!("{name}: ")) && l.ends_with(&want)),
            "compare has no line for {name} ending {want:?}:\n{table}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Run `chaos NAME EXTRA.. --out OUT --quiet`: exit 0 (verdicts as expected), no `pg.*`
/// violation, `analyze` agrees. Returns the run directory and its results.
fn chaos_as_expected(out: &Path, name: &str, extra: &[&str]) -> (PathBuf, Value) {
    let mut args = vec!["chaos", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", out.to_str().unwrap(), "--quiet"]);
    let o = pgchaos(&args);
    assert_eq!(o.status.code(), Some(0), "{name}:\n{}", text(&o));
    let (dir, results) = latest(out, name);
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    (dir, results)
}

/// Run `chaos NAME EXTRA..` like [`chaos_as_expected`], accepting verdicts that differ from
/// the expect block (exit 1) but not a usage or run error: no `pg.*` violation, `analyze`
/// agrees.
fn chaos_judged(out: &Path, name: &str, extra: &[&str]) -> (PathBuf, Value) {
    let mut args = vec!["chaos", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", out.to_str().unwrap(), "--quiet"]);
    let o = pgchaos(&args);
    let (dir, results) = latest(out, name);
    common::exit_is_the_verdicts(&o, &results);
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    (dir, results)
}

/// The first violation's detail in a failure's evidence.json.
fn evidence_detail(dir: &Path, invariant: &str) -> (Value, String) {
    let evidence: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("failures/{invariant}/evidence.json"))).unwrap(),
    )
    .unwrap();
    let detail = evidence["violations"][0]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    (evidence, detail)
}

/// The third article, concurrent schedule: five pinned workers queued on one session lock
/// starve an application pool of five; the sixth caller's `SELECT 1` misses its deadline
/// (app.progress), the verdict carries the wait-for graph and the sampler's rows, a connection
/// from outside is refused with 53300, and the minimal case reproduces by verdict.
#[test]
fn starvation_is_found_with_its_wait_for_graph_and_reproduced() {
    let _serial = serial();
    let out = tmp("starve");
    let (dir, results) = chaos_as_expected(&out, "starvation", &["--max-shrink-runs", "0"]);
    let p = invariant(&results, "app.progress");
    assert_eq!(p["verdict"], "violated", "{p}");
    for name in ["app.mutual_exclusion", "app.no_orphans"] {
        assert_eq!(invariant(&results, name)["verdict"], "holds", "{name}");
    }
    let (evidence, detail) = evidence_detail(&dir, "app.progress");
    assert_eq!(evidence["boundary_action"], "C6 ping", "{evidence}");
    for needle in [
        "C6 ping took",
        "waits for a connection from the application pool (5/5 open, 0 idle, 1 waiting)",
        "(Lock advisory), blocked by pid",
        "(the connection of C",
        "holds 42",
        "refused 53300",
    ] {
        assert!(detail.contains(needle), "lacks {needle:?}: {detail}");
    }
    // The rows behind it: samples taken while the ping waited, with a waiting lock and the
    // application pool full.
    let samples = evidence["samples_during_boundary"].as_array().unwrap();
    assert!(!samples.is_empty(), "{evidence}");
    let waiting = samples.iter().any(|s| {
        s["observation"]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["wait_event_type"] == "Lock" && b["backend_start"].is_string())
    });
    assert!(waiting, "no sample shows a lock wait: {samples:?}");
    assert!(
        samples
            .iter()
            .any(|s| s["observation"]["app_pool"]["waiting"].as_u64() == Some(1))
    );
    let case = dir.join("failures/app.progress/case.yaml");
    let yaml = std::fs::read_to_string(&case).unwrap();
    assert!(yaml.contains("schedule: concurrent"), "{yaml}");
    let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("app.progress: violated in 2/2 replays (reproduces"),
        "{}",
        text(&o)
    );
    // A scripted topology does not run sequentially.
    let o = pgchaos(&["chaos", "starvation", "--schedule", "sequential"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("`workload.script`"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

/// Five golang-migrate replicas race for the migration lock: directly and through session
/// pooling the lock excludes and the migration is applied once; through transaction pooling
/// the lock does not exclude, the migration is applied twice, and the unlock misses.
#[test]
fn migrate_race_holds_directly_and_in_session_mode_and_breaks_in_transaction_mode() {
    let _serial = serial();
    let out = tmp("migrate");
    for name in [
        "migrate-race",
        "migrate-race-session-mode",
        "migrate-race-transaction-mode",
    ] {
        let (_, results) = chaos_as_expected(&out, name, &[]);
        assert_eq!(results["passed"], true, "{name}");
        let want = if name.ends_with("transaction-mode") {
            "violated"
        } else {
            "holds"
        };
        for inv in ["app.mutual_exclusion", "app.applied_once", "app.progress"] {
            let want = if inv == "app.progress" { "holds" } else { want };
            assert_eq!(invariant(&results, inv)["verdict"], want, "{name}: {inv}");
        }
    }
    let (dir, results) = latest(&out, "migrate-race-transaction-mode");
    let applied = invariant(&results, "app.applied_once");
    let minimal = applied["first_failure"]["minimal_steps"].as_u64().unwrap();
    assert!(
        minimal <= 8,
        "applied_once minimal case has {minimal} steps"
    );
    let case = dir.join("failures/app.applied_once/case.yaml");
    let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "3"]);
    let t = text(&o);
    assert!(t.contains("app.applied_once: violated in "), "{t}");
    assert!(t.contains(" replays ("), "{t}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The third article's application pool: unpinned, the unlock lands on the other pooled
/// connection and the lock stays behind on an idle one; pinned, both hold.
#[test]
fn an_unpinned_app_pool_strands_the_lock_and_pinning_fixes_it() {
    let _serial = serial();
    let out = tmp("apppool");
    for name in ["app-pool-unpinned", "app-pool-pinned"] {
        let (_, results) = chaos_as_expected(&out, name, &[]);
        let want = if name == "app-pool-unpinned" {
            "violated"
        } else {
            "holds"
        };
        for inv in ["app.unlock_reaches_owner", "app.no_orphans"] {
            assert_eq!(invariant(&results, inv)["verdict"], want, "{name}: {inv}");
        }
    }
    let (dir, _) = latest(&out, "app-pool-unpinned");
    let (_, detail) = evidence_detail(&dir, "app.unlock_reaches_owner");
    assert!(
        detail.contains("which it took on pid ") && detail.contains("but the unlock ran on pid "),
        "{detail}"
    );
    assert_eq!(
        detail.matches("(backend_start 20").count(),
        2,
        "both backends by (pid, backend_start): {detail}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Transaction pooling with blocking locks: waiters occupy servers or queue in PgBouncer,
/// queued workers re-enter the lock on its server, and a health check starves; with
/// transaction-scoped locks the same waits end at COMMIT and everything holds.
#[test]
fn transaction_pooling_waits_starve_with_session_locks_and_not_with_xact_locks() {
    let _serial = serial();
    let out = tmp("txwait");
    for name in ["transaction-mode-starvation", "transaction-mode-xact-wait"] {
        let (dir, results) = if name == "transaction-mode-starvation" {
            // Which of two servers released within microseconds of each other PgBouncer hands
            // a replica's unlock decides app.no_orphans/app.unlock_reaches_owner here (seen
            // in 1 of 4 cases on some runs): judged below are the verdicts the experiment is
            // about, not the whole expect block.
            chaos_judged(&out, name, &["--max-shrink-runs", "0"])
        } else {
            chaos_as_expected(&out, name, &["--max-shrink-runs", "0"])
        };
        let want = if name == "transaction-mode-starvation" {
            "violated"
        } else {
            "holds"
        };
        for inv in ["app.mutual_exclusion", "app.progress"] {
            assert_eq!(invariant(&results, inv)["verdict"], want, "{name}: {inv}");
        }
        // The waits were real: a backend waiting on the lock, clients queued in PgBouncer.
        let o = pgchaos(&["history", dir.to_str().unwrap(), "--case", "0"]);
        let t = text(&o);
        assert!(t.contains(" waits for 42"), "{name}: {t}");
        assert!(t.contains("clients wait for a server"), "{name}: {t}");
    }
    let (dir, _) = latest(&out, "transaction-mode-starvation");
    let (_, detail) = evidence_detail(&dir, "app.progress");
    for needle in [
        "C5 ping took",
        "waits for a server from the pooler's pool (",
        "(Lock advisory), blocked by pid",
        "holds 42 (active",
    ] {
        assert!(detail.contains(needle), "lacks {needle:?}: {detail}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `bench` on real servers: three arms, each with a rate per round, ratios from the medians,
/// pgbench's statements the workers' own; bad arguments and an app-pool topology refused.
#[test]
fn bench_measures_workers_and_pgbench_side_by_side() {
    let _serial = serial();
    let out = tmp("bench");
    let o = pgchaos(&[
        "bench",
        "transaction-mode",
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--clients",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let files: Vec<PathBuf> = std::fs::read_dir(out.join("bench"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].extension().unwrap() == "json", "{files:?}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let arms = r["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 3);
    assert_eq!(arms[0]["name"], "pgbench");
    for a in arms {
        let rate = a["median"].as_f64().unwrap();
        assert!(rate > 0.0, "{a}");
        assert_eq!(a["rates"].as_array().unwrap().len(), 1);
    }
    let base = arms[0]["median"].as_f64().unwrap();
    let off = arms[1]["median"].as_f64().unwrap();
    assert!((r["ratio_off_vs_pgbench"].as_f64().unwrap() - off / base).abs() < 1e-9);
    assert!(
        r["samples_per_s"].as_f64().unwrap() > 0.0,
        "the sampler ran"
    );
    assert_eq!(r["pool_mode"], "transaction");
    assert!(
        r["sql"][0]
            .as_str()
            .unwrap()
            .contains("pg_try_advisory_lock")
    );
    assert!(text(&o).contains("vs pgbench"), "{}", text(&o));
    for bad in [&["--seconds", "0"][..], &["--rounds", "0"][..]] {
        let mut args = vec!["bench", "direct"];
        args.extend_from_slice(bad);
        let o = pgchaos(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(bad[0]), "{}", text(&o));
    }
    let o = pgchaos(&["bench", "app-pool-pinned", "--seconds", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("app_pool"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

/// A failover loses every advisory lock: chaos on `failover` finds `app.no_lost_lock` and
/// shrinks it to at most three client steps plus the `promote`; the minimal case replays
/// (the new primary holds no lock while the old holder still believes); no `pg.*`
/// violation, and `analyze` re-checks the run to the same verdicts.
#[test]
fn failover_loss_is_found_shrunk_and_reproduced() {
    let _serial = serial();
    let out = tmp("failover");
    let o = pgchaos(&[
        "chaos",
        "failover",
        "--seed",
        "1",
        "--cases",
        "12",
        "--time-limit",
        "60s",
        "--max-shrink-runs",
        "40",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let (dir, results) = latest(&out, "failover");
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    let lost = invariant(&results, "app.no_lost_lock");
    assert_eq!(lost["verdict"], "violated", "{}\n{lost}", text(&o));
    let minimal = lost["first_failure"]["minimal_steps"].as_u64().unwrap();
    assert!(minimal <= 4, "minimal case of {minimal} steps: {lost}");
    let case = dir.join(lost["first_failure"]["case_file"].as_str().unwrap());
    let yaml = std::fs::read_to_string(&case).unwrap();
    assert_eq!(yaml.matches("op: promote").count(), 1, "{yaml}");
    assert!(
        yaml.contains("promote closed the backend that granted it"),
        "{yaml}"
    );
    let o = pgchaos(&["reproduce", case.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("reproduced 1/1"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

/// A SET left on a shared server (transaction-mode-settings, docs/session-state.md): found,
/// shrunk to a SET and another client's read of it, and reproduced; the model explains every
/// read (no `pg.*`). All 256 cases, so every expectation of the topology is reached; only the
/// leak is shrunk.
#[test]
fn a_leaked_setting_is_found_shrunk_and_reproduced() {
    let _serial = serial();
    let out = tmp("settings");
    let o = pgchaos(&[
        "chaos",
        "transaction-mode-settings",
        "--seed",
        "5",
        "--shrink-only",
        "app.settings_stay_put",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (dir, results) = latest(&out, "transaction-mode-settings");
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    assert_eq!(invariant(&results, "pg.show_matches")["verdict"], "holds");
    let leak = invariant(&results, "app.settings_stay_put");
    assert_eq!(leak["verdict"], "violated", "{}\n{leak}", text(&o));
    let minimal = leak["first_failure"]["minimal_steps"].as_u64().unwrap();
    assert!(minimal <= 3, "minimal case of {minimal} steps: {leak}");
    let case = dir.join(leak["first_failure"]["case_file"].as_str().unwrap());
    let yaml = std::fs::read_to_string(&case).unwrap();
    assert_eq!(yaml.matches("op: set\n").count(), 1, "{yaml}");
    assert_eq!(yaml.matches("op: show\n").count(), 1, "{yaml}");
    assert!(yaml.contains("(the value C1 sets)"), "{yaml}");
    let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "10"]);
    assert!(text(&o).contains("reproduced 10/10 times"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

/// A LISTEN left on a shared server (transaction-mode-listen, docs/session-state.md): the
/// notification goes to the client holding the server, not the one that listened; found,
/// shrunk to a LISTEN and another client's NOTIFY, and reproduced; the model explains every
/// notification received (no `pg.*`).
#[test]
fn a_misdelivered_notification_is_found_shrunk_and_reproduced() {
    let _serial = serial();
    let out = tmp("listen");
    let o = pgchaos(&[
        "chaos",
        "transaction-mode-listen",
        "--seed",
        "1",
        "--cases",
        "64",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (dir, results) = latest(&out, "transaction-mode-listen");
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    assert_eq!(
        invariant(&results, "pg.notification_matches")["verdict"],
        "holds"
    );
    let lost = invariant(&results, "app.notifications_arrive");
    assert_eq!(lost["verdict"], "violated", "{}\n{lost}", text(&o));
    let minimal = lost["first_failure"]["minimal_steps"].as_u64().unwrap();
    assert!(minimal <= 3, "minimal case of {minimal} steps: {lost}");
    let case = dir.join(lost["first_failure"]["case_file"].as_str().unwrap());
    let yaml = std::fs::read_to_string(&case).unwrap();
    assert_eq!(yaml.matches("op: listen\n").count(), 1, "{yaml}");
    assert_eq!(yaml.matches("op: notify\n").count(), 1, "{yaml}");
    assert!(yaml.contains("and stayed, but never received"), "{yaml}");
    let o = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "5"]);
    assert!(text(&o).contains("reproduced 5/5 times"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}

/// The fault topologies under both schedules (a few cases each): faults run, no `pg.*`
/// violation, and a fault's lost lock is found where the topology expects it.
#[test]
fn fault_topologies_keep_pg_semantics_under_both_schedules() {
    let _serial = serial();
    let out = tmp("faults");
    for name in [
        "transaction-mode-faults",
        "session-mode-faults",
        "network-faults",
    ] {
        for schedule in ["sequential", "concurrent"] {
            let o = pgchaos(&[
                "chaos",
                name,
                "--schedule",
                schedule,
                "--seed",
                "1",
                "--cases",
                "12",
                "--time-limit",
                "30s",
                "--max-shrink-runs",
                "4",
                "--out",
                out.to_str().unwrap(),
                "--quiet",
            ]);
            let (dir, results) = latest(&out, name);
            assert!(
                results["steps"].as_u64().unwrap() > 0,
                "{name} {schedule}: {}",
                text(&o)
            );
            assert_no_pg_violation(&results);
            assert_analyze_agrees(&dir, &results);
            // A fault of the servers ran (terminate and cancel are the nemesis's too, so they
            // do not count).
            let faults = pgchaos::history::HistoryReader::open(&dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(
                    |e| matches!(&e.body, pgchaos::history::Body::Ok(c) if c.f.is_server_fault()),
                )
                .count();
            assert!(faults > 0, "{name} {schedule}: no fault ran");
            if schedule == "sequential" {
                assert_eq!(
                    invariant(&results, "app.no_lost_lock")["verdict"],
                    "violated",
                    "{name}: {}",
                    text(&o)
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `import` turns a production-style pgbouncer.ini into a topology that runs: the pooling
/// settings carried over, what the harness controls dropped with a note, and a chaos run on
/// it keeps every `pg.*` invariant and finds transaction pooling's broken mutual exclusion.
#[test]
fn an_imported_pgbouncer_ini_runs() {
    let _serial = serial();
    let dir = tmp("import");
    let ini = dir.join("prod.ini");
    std::fs::write(
        &ini,
        "[databases]\n\
         app = host=10.0.0.5 port=5432 dbname=app\n\n\
         [pgbouncer]\n\
         listen_addr = *\n\
         listen_port = 6432\n\
         auth_type = scram-sha-256\n\
         auth_file = /etc/pgbouncer/userlist.txt\n\
         admin_users = admin\n\
         pool_mode = transaction\n\
         default_pool_size = 2\n\
         max_client_conn = 1000\n\
         server_reset_query = DISCARD ALL\n\
         server_lifetime = 3600\n\
         max_prepared_statements = 200\n\
         logfile = /var/log/pgbouncer.log\n",
    )
    .unwrap();
    let topo = dir.join("prod.yaml");
    let o = pgchaos(&[
        "import",
        ini.to_str().unwrap(),
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let yaml = std::fs::read_to_string(&topo).unwrap();
    assert!(yaml.contains("pool_mode: transaction"), "{yaml}");
    assert!(yaml.contains("dropped listen_port"), "{yaml}");
    assert!(!yaml.contains("10.0.0.5"), "no host copied: {yaml}");
    // Importing again does not overwrite.
    let again = pgchaos(&[
        "import",
        ini.to_str().unwrap(),
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(&topo).unwrap(), yaml);
    let out = dir.join("reports");
    let o = pgchaos(&[
        "chaos",
        topo.to_str().unwrap(),
        "--seed",
        "1",
        "--cases",
        "16",
        "--max-shrink-runs",
        "8",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let (_, results) = latest(&out, "prod");
    assert!(results["steps"].as_u64().unwrap() > 0, "{}", text(&o));
    assert_no_pg_violation(&results);
    assert_eq!(
        invariant(&results, "app.mutual_exclusion")["verdict"],
        "violated",
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `import` turns a production-style pgpool.conf into a topology that runs: its pooling
/// settings carried over (`reset_query_list = 'ABORT'`), what the harness controls dropped
/// with a note, a bad value refused at its line and column with nothing written, and a chaos
/// run on it keeps every `pg.*` invariant and finds the lock a departed client leaves on its
/// child's cached backend (docs/pgpool.md §4).
#[test]
fn an_imported_pgpool_conf_runs() {
    let _serial = serial();
    let dir = tmp("import-pgpool");
    let conf = dir.join("pgpool.conf");
    std::fs::write(
        &conf,
        "# production\n\
         backend_clustering_mode = 'streaming_replication'\n\
         listen_addresses = '*'\n\
         port = 9999\n\
         backend_hostname0 = '10.0.0.5'\n\
         backend_port0 = 5432\n\
         enable_pool_hba = on\n\
         sr_check_password = 'hunter2'\n\
         num_init_children = 4\n\
         max_pool = 1\n\
         child_life_time = 300\n\
         reset_query_list = 'ABORT'\n\
         load_balance_mode = on\n\
         log_per_node_statement = on\n",
    )
    .unwrap();
    let topo = dir.join("prod.yaml");
    let o = pgchaos(&[
        "import",
        conf.to_str().unwrap(),
        "--name",
        "prod",
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let yaml = std::fs::read_to_string(&topo).unwrap();
    assert!(yaml.contains("\npgpool:\n  version: \"4.3.5\"\n"), "{yaml}");
    assert!(yaml.contains("reset_query_list: \"ABORT\""), "{yaml}");
    assert!(yaml.contains("dropped port = 9999"), "{yaml}");
    assert!(
        yaml.contains("with one backend there is nothing to balance"),
        "{yaml}"
    );
    assert!(
        !yaml.contains("10.0.0.5") && !yaml.contains("hunter2"),
        "{yaml}"
    );
    // A value the topology cannot express: exit 2 at its line and column, nothing written.
    let bad = dir.join("bad.conf");
    std::fs::write(&bad, "num_init_children = 4\nconnection_cache = off\n").unwrap();
    let bad_out = dir.join("bad.yaml");
    let o = pgchaos(&[
        "import",
        bad.to_str().unwrap(),
        "--out",
        bad_out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "{}:2:20: `connection_cache = off` is not modelled",
            bad.display()
        )),
        "{}",
        text(&o)
    );
    assert!(!bad_out.exists());
    let out = dir.join("reports");
    let o = pgchaos(&[
        "chaos",
        topo.to_str().unwrap(),
        "--seed",
        "1",
        "--cases",
        "16",
        "--max-shrink-runs",
        "8",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let (_, results) = latest(&out, "prod");
    assert!(results["steps"].as_u64().unwrap() > 0, "{}", text(&o));
    assert_eq!(
        results["versions"]["pooler"], "4.3.5",
        "{}",
        results["versions"]
    );
    assert_no_pg_violation(&results);
    assert_eq!(
        invariant(&results, "app.no_orphans")["verdict"],
        "violated",
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const DEBIAN_SAMPLE: &str = "usr/share/pgpool2/pgpool.conf";

/// The pgpool.conf Debian's package ships (in the provisioned 4.3.5) imports, and the
/// topology written from it passes `pgchaos check`: pgpool-II's defaults for what it leaves
/// out (32 children, 4 slots, `ABORT; DISCARD ALL`), said in comments.
#[test]
fn debian_s_sample_pgpool_conf_imports_and_checks() {
    let _serial = serial();
    let opts = pgchaos::provision::Options::from_env(true);
    let bin = pgchaos::pooler::pgpool::provision::pgpool("4.3.5", None, &opts)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let root = bin
        .path
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("root");
    let sample = root.join(DEBIAN_SAMPLE);
    assert!(
        sample.is_file(),
        "{} is not in the package",
        sample.display()
    );
    let dir = tmp("import-pgpool-sample");
    let topo = dir.join("debian.yaml");
    let o = pgchaos(&[
        "import",
        sample.to_str().unwrap(),
        "--name",
        "debian-sample",
        "--out",
        topo.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let yaml = std::fs::read_to_string(&topo).unwrap();
    for line in [
        "  num_init_children: 32\n",
        "  max_pool: 4\n",
        "  reset_query_list: \"ABORT; DISCARD ALL\"\n",
        "  child_life_time: 300\n",
    ] {
        assert!(yaml.contains(line), "missing {line:?} in\n{yaml}");
    }
    let o = pgchaos(&["check", topo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}\n{yaml}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The matrix end to end: two profiles on two topologies, one seed. Flyway's transactional
/// lock is safe behind transaction pooling; Rails on PostgreSQL directly takes its own error
/// path (one try: the replicas that lose it raise ConcurrentMigrationError); every cell has
/// its composed topology, its run, and a JUnit test case; a bad profile name exits 2.
#[test]
fn the_matrix_classes_real_tools_on_real_poolers() {
    let _one = serial();
    let dir = tmp("matrix");
    let junit = dir.join("junit.xml");
    let o = pgchaos(&[
        "matrix",
        "--profiles",
        "rails,flyway",
        "--topologies",
        "direct,transaction-mode",
        "--seeds",
        "1",
        "--max-shrink-runs",
        "2",
        "--out",
        dir.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        // Every cell here has a written expectation: held to it exactly.
        "--require-expected",
    ]);
    let out = text(&o);
    let mdir = dir.join("matrix").join("latest").canonicalize().unwrap();
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(mdir.join("matrix.json")).unwrap()).unwrap();
    common::exit_is_the_cells(&o, &m);
    let cell = |p: &str, t: &str| {
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["profile"] == p && c["topology"] == t)
            .unwrap_or_else(|| panic!("no cell {p} on {t}: {m}"))
            .clone()
    };
    assert_eq!(m["cells"].as_array().unwrap().len(), 4);
    let flyway = cell("flyway", "transaction-mode");
    assert_eq!(flyway["worst"], "safe", "{flyway}");
    let rails = cell("rails", "direct");
    assert_eq!(rails["worst"], "error path", "{rails}");
    let raised = rails["runs"][0]["facts"]["raised"].as_object().unwrap();
    assert!(
        raised
            .keys()
            .any(|k| k.contains("Cannot run migrations because another migration process")),
        "{rails}"
    );
    for c in m["cells"].as_array().unwrap() {
        let run = &c["runs"][0];
        assert!(run["error"].is_null(), "{c}");
        assert!(
            mdir.join(run["dir"].as_str().unwrap())
                .join("results.json")
                .is_file()
        );
        assert!(mdir.join(c["topology_file"].as_str().unwrap()).is_file());
        assert!(
            !run["facts"]["violated"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v.as_str().unwrap().starts_with("pg.")),
            "{c}"
        );
    }
    let md = std::fs::read_to_string(mdir.join("matrix.md")).unwrap();
    assert!(
        md.contains("| profile | direct | transaction-mode |"),
        "{md}"
    );
    assert!(
        std::fs::read_to_string(mdir.join("matrix.html"))
            .unwrap()
            .contains("data-worst=\"safe\"")
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 4, "{xml}");
    // The exit code says whether every cell was as expected.
    let differs = m["cells"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["worst"] != c["expected"]);
    assert_eq!(o.status.code(), Some(if differs { 1 } else { 0 }), "{out}");
    // A cell's minimal case replays after the matrix directory was moved into place: its
    // composed topology is found beside its run (the recorded path was the temporary one).
    // Rails behind transaction pooling runs twice (its expected cell), so that cell has a
    // minimal case, and replaying it violates the same invariant again: at least the
    // shrinker's share of replays (2 of 3), exit 0.
    let rails_tx = cell("rails", "transaction-mode");
    assert_eq!(rails_tx["worst"], "ran twice", "{rails_tx}");
    let ev = rails_tx["runs"][0]["evidence"]
        .as_str()
        .unwrap_or_else(|| panic!("ran twice without a minimal case: {rails_tx}"));
    let inv = ev
        .split("failures/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("evidence {ev}: not a failures/<invariant>/case.yaml"));
    assert!(
        ["app.mutual_exclusion", "app.applied_once"].contains(&inv),
        "{ev}"
    );
    let case = mdir.join(ev);
    assert!(case.is_file(), "{} is missing", case.display());
    let r = pgchaos(&["reproduce", case.to_str().unwrap(), "--times", "3"]);
    let replayed = text(&r);
    assert_eq!(r.status.code(), Some(0), "{replayed}");
    assert!(
        replayed.contains(&format!("{inv}: violated in"))
            && replayed.contains("(reproduces;")
            && !replayed.contains("below the bar"),
        "{replayed}"
    );
    let bad = pgchaos(&[
        "matrix",
        "--profiles",
        "no-such-tool",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).contains("no-such-tool.yaml"), "{}", text(&bad));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two PgBouncers side by side: the run meets its expectations with no pg.* violation, each
/// replica's SHOW SERVERS is in the history (rows of both), the clients of the second
/// replica were served by servers only it lists, and a minimal case of the trap stays inside
/// one replica (its clients are those of one replica).
#[test]
fn two_poolers_keep_their_servers_apart() {
    let _serial = serial();
    let out = tmp("two-poolers");
    let o = pgchaos(&[
        "chaos",
        "transaction-mode-two-poolers",
        "--cases",
        "96",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let (dir, results) = latest(&out, "transaction-mode-two-poolers");
    assert_no_pg_violation(&results);
    assert_analyze_agrees(&dir, &results);
    assert_eq!(
        invariant(&results, "app.mutual_exclusion")["verdict"],
        "violated",
        "{}",
        text(&o)
    );
    // Which backends each replica lists, and which backend served each client.
    let mut listed: [std::collections::BTreeSet<i32>; 2] = Default::default();
    let mut served: Vec<(usize, i32)> = Vec::new();
    for e in pgchaos::history::HistoryReader::open(&dir).unwrap() {
        match e.unwrap().body {
            pgchaos::history::Body::Obs(o) => {
                for s in &o.obs.servers {
                    if let Some(pid) = s.pid {
                        listed[usize::from(s.replica)].insert(pid);
                    }
                }
            }
            pgchaos::history::Body::Ok(c) => {
                if let (pgchaos::history::event::Process::Client(i), Some(b)) = (c.p, c.backend) {
                    served.push((i, b.pid));
                }
            }
            _ => {}
        }
    }
    assert!(
        !listed[0].is_empty() && !listed[1].is_empty(),
        "both replicas' servers are read: {listed:?}"
    );
    assert!(
        listed[0].is_disjoint(&listed[1]),
        "a server is one replica's: {listed:?}"
    );
    // Every client was served only by its own replica's servers (client c uses c % 2).
    let wrong: Vec<&(usize, i32)> = served
        .iter()
        .filter(|(c, pid)| listed[1 - c % 2].contains(pid))
        .collect();
    assert!(wrong.is_empty(), "served across replicas: {wrong:?}");
    let _ = std::fs::remove_dir_all(&out);
}

/// `--partition` and `merge`: the same small matrix (Rails and Flyway on direct and
/// transaction pooling, one seed) run whole and as three partitions, merged: the same cells
/// with the same classes; merge refuses a missing partition, one given twice, another
/// pgchaos version and an output directory in use, writing nothing.
#[test]
fn partitions_merge_into_the_whole_matrix() {
    let _one = serial();
    let dir = tmp("partitions");
    let d = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let matrix = |extra: &[&str]| {
        let mut args = vec![
            "matrix",
            "--profiles",
            "rails,flyway",
            "--topologies",
            "direct,transaction-mode",
            "--seeds",
            "1",
            "--max-shrink-runs",
            "2",
        ];
        args.extend_from_slice(extra);
        pgchaos(&args)
    };
    let json = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(Path::new(p).join("matrix.json")).unwrap())
            .unwrap()
    };
    let o = matrix(&["--dir", &d("whole")]);
    common::exit_is_the_cells(&o, &json(&d("whole")));
    for k in 1..=3 {
        let o = matrix(&[
            "--partition",
            &format!("{k}/3"),
            "--dir",
            &d(&format!("p{k}")),
        ]);
        common::exit_is_the_cells(&o, &json(&d(&format!("p{k}"))));
        assert!(
            text(&o).contains(&format!("partition {k}/3")),
            "{}",
            text(&o)
        );
    }
    // Count partitions of the four cells in matrix order: 2, 1 and 1 cells.
    let sizes: Vec<usize> = (1..=3)
        .map(|k| {
            json(&d(&format!("p{k}")))["cells"]
                .as_array()
                .unwrap()
                .len()
        })
        .collect();
    assert_eq!(sizes, vec![2, 1, 1]);
    let o = pgchaos(&["merge", &d("p3"), &d("p1"), &d("p2"), "--out", &d("merged")]);
    let (whole, merged) = (json(&d("whole")), json(&d("merged")));
    common::exit_is_the_cells(&o, &merged);
    let key = |m: &Value| -> Vec<(String, String, String, String)> {
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["profile"].to_string(),
                    c["topology"].to_string(),
                    c["expected"].to_string(),
                    c["worst"].to_string(),
                )
            })
            .collect()
    };
    assert_eq!(key(&merged), key(&whole), "same cells, same classes");
    assert_eq!(merged["plan"], whole["plan"]);
    assert_eq!(merged["merged"], 3);
    // Every cell's run and evidence came along: the links of the merged matrix resolve.
    for c in merged["cells"].as_array().unwrap() {
        let run = &c["runs"][0];
        let rd = run["dir"].as_str().unwrap();
        assert!(
            dir.join("merged").join(rd).join("results.json").is_file(),
            "{c}"
        );
        if let Some(ev) = run["evidence"].as_str() {
            assert!(dir.join("merged").join(ev).is_file(), "{ev}");
        }
    }
    let junit = std::fs::read_to_string(dir.join("merged/junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase").count(), 4, "{junit}");
    assert!(
        std::fs::read_to_string(dir.join("merged/matrix.md"))
            .unwrap()
            .contains("merged from 3 partitions")
    );
    // Refusals: exit 2, the reason, nothing written.
    let refused = |args: &[&str], needle: &str| {
        let out = d("refused");
        let mut all = vec!["merge"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--out", &out]);
        let o = pgchaos(&all);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(needle), "{needle}: {}", text(&o));
        assert!(!Path::new(&out).exists(), "nothing written for {needle}");
    };
    refused(&[&d("p1"), &d("p2")], "partition 3/3 missing");
    refused(
        &[&d("p1"), &d("p1"), &d("p2"), &d("p3")],
        "partition 1/3 is given twice",
    );
    refused(&[&d("whole"), &d("p1")], "partitions of different splits");
    let copy = dir.join("p3-other");
    std::fs::create_dir_all(&copy).unwrap();
    let mut other = json(&d("p3"));
    other["pgchaos"] = "0.0.1".into();
    std::fs::write(copy.join("matrix.json"), other.to_string()).unwrap();
    refused(
        &[&d("p1"), &d("p2"), copy.to_str().unwrap()],
        "different pgchaos versions",
    );
    refused(&[&d("p1"), &d("nowhere")], "no such directory");
    let o = pgchaos(&["merge", &d("p1"), &d("p2"), &d("p3"), "--out", &d("whole")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not an empty directory"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pgchaos init` on three sample repositories (a Rails app's Gemfile.lock with a
/// pgbouncer.ini, a Go service's go.mod, a Node app's package.json): each gets the profiles
/// of the tools its dependency files name; bad input writes nothing; and the Rails app's
/// generated setup runs through the matrix (its imported topology and the detected rails
/// profile, one seed).
#[test]
fn init_writes_a_working_setup_from_a_repository() {
    let _one = serial();
    let dir = tmp("init");
    let fixtures = root().join("harness/tests/fixtures/init");
    for app in ["rails-app", "go-service", "node-app"] {
        let from = fixtures.join(app);
        let to = dir.join(app);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    let init = |args: &[&str]| {
        let mut all = vec!["init"];
        all.extend_from_slice(args);
        pgchaos(&all)
    };
    let at = |app: &str| dir.join(app).to_str().unwrap().to_string();
    let profiles = |app: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(app).join("pgchaos/profiles"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let ini = dir.join("rails-app/pgbouncer.ini");
    let o = init(&[
        &at("rails-app"),
        "--from",
        ini.to_str().unwrap(),
        "--name",
        "prod",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        profiles("rails-app"),
        vec!["good-job.yaml", "rails-prepared.yaml", "rails.yaml"]
    );
    assert!(text(&o).contains("profile rails: activerecord (ruby) in Gemfile.lock"));
    assert!(text(&o).contains("profile rails-prepared: activerecord (ruby) in Gemfile.lock"));
    let o = init(&[&at("go-service")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(profiles("go-service"), vec!["golang-migrate.yaml"]);
    let o = init(&[&at("node-app")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(profiles("node-app"), vec!["prisma.yaml"]);
    for app in ["rails-app", "go-service", "node-app"] {
        let r = dir.join(app);
        assert!(r.join(".github/workflows/pgchaos.yml").is_file());
        assert!(r.join("pgchaos/topologies/direct.yaml").is_file());
        let sh = std::fs::read_to_string(r.join("pgchaos/matrix.sh")).unwrap();
        assert!(sh.contains(
            "pgchaos matrix --profiles pgchaos/profiles --topologies pgchaos/topologies"
        ));
    }
    let prod = std::fs::read_to_string(dir.join("rails-app/pgchaos/topologies/prod.yaml")).unwrap();
    assert!(prod.contains("pool_mode: transaction"), "{prod}");
    // Bad input: nothing is written.
    let o = init(&[&at("go-service")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("give --force"), "{}", text(&o));
    let o = init(&[dir.join("nowhere").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no such directory"), "{}", text(&o));
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("package.json"), "{ \"dependencies\": ").unwrap();
    std::os::unix::fs::symlink("/nonexistent/go.mod", broken.join("go.mod")).unwrap();
    let o = init(&[broken.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("cannot read the dependency file") || text(&o).contains("not valid JSON"),
        "{}",
        text(&o)
    );
    assert!(!broken.join("pgchaos").exists() && !broken.join(".github").exists());
    std::fs::remove_file(broken.join("go.mod")).unwrap();
    let o = init(&[broken.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("package.json: line 1, column"),
        "{}",
        text(&o)
    );
    assert!(!broken.join("pgchaos").exists());
    // The generated setup runs: the Rails app's imported topology (and the direct baseline)
    // with the detected rails profile, from the repository's root as matrix.sh runs it. It is
    // a gate that fails: the profile writes no expectation for `prod`, so the cell expects
    // safe, and Rails runs twice behind the team's transaction pooling: exit 1, the cell
    // named with its class. Accepted explicitly (`--accept ran-twice`), the same runs pass.
    let app = dir.join("rails-app");
    let gate = |out: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pgchaos"))
            .args([
                "matrix",
                "--profiles",
                "pgchaos/profiles/rails.yaml",
                "--topologies",
                "pgchaos/topologies",
                "--seeds",
                "1",
                "--max-shrink-runs",
                "2",
                "--dir",
                out,
            ])
            .args(extra)
            .current_dir(&app)
            .output()
            .unwrap()
    };
    let o = gate("matrix-out", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("rails on prod: ran twice 1/1 is unsafe and nothing written expects it"),
        "{}",
        text(&o)
    );
    let junit = std::fs::read_to_string(app.join("matrix-out/junit.xml")).unwrap();
    assert_eq!(junit.matches("<failure").count(), 1, "{junit}");
    let o = gate("matrix-accepted", &["--accept", "ran-twice"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = gate("matrix-bad", &["--accept", "ran-thrice"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--accept \"ran-thrice\": not an outcome class"));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(app.join("matrix-out/matrix.json")).unwrap())
            .unwrap();
    let worst = |t: &str| {
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["topology"] == t)
            .unwrap_or_else(|| panic!("no cell on {t}: {m}"))["worst"]
            .clone()
    };
    // Rails behind the team's transaction pooling runs twice; directly, its error path.
    assert_eq!(worst("prod"), "ran twice", "{m}");
    assert_eq!(worst("direct"), "error path", "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}
