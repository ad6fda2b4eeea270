//! `timeline`'s tests.

use super::*;

#[test]
fn scales_map_times_monotonically() {
    let a = Scale::new(vec![(20, 200.0), (10, 100.0), (1000, 300.0), (15, 90.0)]);
    assert_eq!(a.0.len(), 3, "a backwards anchor is dropped");
    assert_eq!(a.x(0), 100.0);
    assert_eq!(a.x(15), 150.0);
    assert_eq!(a.x(510), 250.0);
    assert_eq!(a.x(5000), 300.0);
    let c = Scale::compressed(&[0, 100, 100, 10_100], 0.0, 110.0);
    assert_eq!(c.x(0), 0.0);
    assert_eq!(c.x(100), 10.0, "sqrt(100) of sqrt(100) + sqrt(10000)");
    assert!((c.x(10_100) - 110.0).abs() < 1e-9);
    assert!(c.x(50) < c.x(60) && c.x(5000) < c.x(6000));
    assert_eq!(short_ms(420_000), "0.42 ms");
    assert_eq!(short_ms(210_400_000), "210 ms");
    assert_eq!(fitting(200.0, "try_lock 42", "try_lock"), "try_lock 42");
    assert_eq!(fitting(60.0, "try_lock 4242424242", "try_lock"), "try_lock");
    assert_eq!(fitting(5.0, "try_lock 4242424242", "try_lock"), "");
}

use crate::check::Violation;
use crate::vocab::Op;
use serde_json::{Value, json};

const B1: BackendId = BackendId {
    pid: 4711,
    start_us: 1_796_120_188_503_742,
};

// Events are built from their JSON form, as a history file has them: the test does not
// depend on the structs' other fields.
fn ev(v: Value) -> Event {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn process(f: Op, c: usize) -> String {
    Process::of(f, c).to_string()
}

fn invoke(t: u64, c: usize, step: usize, f: Op, key: Option<i64>) -> Event {
    let mut v = json!({"t": t, "type": "invoke", "p": process(f, c), "step": step, "f": f});
    if let Some(k) = key {
        v["key"] = json!(k);
    }
    if f.is_fault() {
        v["client"] = json!(c);
        v["target"] = json!([B1.pid, B1.start_us]);
    }
    ev(v)
}

fn done(t: u64, c: usize, step: usize, f: Op, value: Reply) -> Event {
    let kind = match value.outcome() {
        Outcome::Ok => "ok",
        Outcome::Fail => "fail",
        Outcome::Info => "info",
    };
    ev(
        json!({"t": t, "type": kind, "p": process(f, c), "step": step, "f": f,
                  "value": value, "backend": [B1.pid, B1.start_us]}),
    )
}

fn obs(t: u64, step: Option<usize>, at: &str, keys: &[i64]) -> Event {
    let locks: Vec<Value> = keys
        .iter()
        .map(|k| json!({"key": k, "mode": "ExclusiveLock", "granted": true}))
        .collect();
    let mut v = json!({"t": t, "type": "obs", "at": at, "backends": [{
            "id": [B1.pid, B1.start_us], "backend_start": B1.backend_start(),
            "state": "idle", "query": "", "locks": locks}]});
    if let Some(s) = step {
        v["step"] = json!(s);
    }
    ev(v)
}

fn case(schedule: &str, body: Vec<Event>) -> Vec<Event> {
    let mut v = vec![ev(json!({"t": 1000, "type": "case", "case": 0,
            "schedule": schedule, "seed": 1, "phase": "evidence",
            "invariant": "app.mutual_exclusion", "clients": 2, "steps": 2}))];
    v.extend(body);
    let end = v.last().map(|e| e.t + 10).unwrap_or(0);
    v.push(ev(
        json!({"t": end, "type": "case_end", "case": 0, "steps_us": 1, "reset_us": 1}),
    ));
    v
}

fn check() -> CaseCheck {
    CaseCheck {
        violations: vec![Violation {
            invariant: "app.mutual_exclusion".into(),
            step: 1,
            detail: "C1 and C2 both believe they hold key 7 <both>".into(),
        }],
        expected: vec![(0, Reply::Bool { value: true })],
        ..Default::default()
    }
}

/// `(t0, t1)` of every `op` bar of a client in the SVG.
fn bars(svg: &str, client: &str) -> Vec<(u64, u64)> {
    svg.lines()
        .filter(|l| {
            l.starts_with("<g class=\"op ") && l.contains(&format!("data-client=\"{client}\""))
        })
        .map(|l| {
            let attr = |name: &str| -> u64 {
                let at = l.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                l[at..at + l[at..].find('"').unwrap()].parse().unwrap()
            };
            (attr("data-t0"), attr("data-t1"))
        })
        .collect()
}

#[test]
fn a_sequential_timeline_has_lanes_bars_holds_and_the_violation() {
    let events = case(
        "sequential",
        vec![
            invoke(2_000, 0, 0, Op::TryLock, Some(7)),
            done(2_500, 0, 0, Op::TryLock, Reply::Bool { value: true }),
            obs(2_600, Some(0), "after", &[7]),
            invoke(3_000, 1, 1, Op::TryLock, Some(7)),
            done(3_400, 1, 1, Op::TryLock, Reply::Bool { value: true }),
            obs(3_500, Some(1), "after", &[7]),
            invoke(4_000, 1, 2, Op::Terminate, None),
            done(4_300, 1, 2, Op::Terminate, Reply::error("57P01 <x>")),
            obs(4_400, Some(2), "after", &[]),
        ],
    );
    let view = CaseView::build(&events).unwrap();
    let svg = timeline("app.mutual_exclusion", &events, &view, &check());
    for needle in [
        "<g class=\"lane\" data-lane=\"C1\" data-client=\"C1\">",
        "<g class=\"lane\" data-lane=\"C2\" data-client=\"C2\">",
        "<g class=\"lane\" data-lane=\"nemesis\"",
        "<g class=\"lane\" data-lane=\"B1\" data-backend=\"B1\" data-pid=\"4711\"",
        "<g class=\"op ok\" data-step=\"0\" data-client=\"C1\" data-op=\"try_lock\" data-key=\"7\" data-pid=\"4711\"",
        "<g class=\"op error\" data-step=\"2\" data-client=\"nemesis\" data-op=\"terminate\"",
        "<g class=\"hold\" data-pid=\"4711\" data-backend-start=\"2026-12-01 10:16:28.503742+00\" data-key=\"7\" data-t0=\"2600\" data-t1=\"4400\">",
        "<g class=\"violation\" data-invariant=\"app.mutual_exclusion\" data-step=\"1\"",
        "believe they hold key 7 &lt;both&gt;",
        "reply: error 57P01 &lt;x&gt;",
        "B1 pid 4711 backend_start 2026-12-01 10:16:28.503742+00",
        "step 3</text>",
    ] {
        assert!(svg.contains(needle), "lacks {needle}:\n{svg}");
    }
    assert!(!svg.contains("<x>") && !svg.contains("<both>"), "{svg}");
    assert_eq!(bars(&svg, "C1"), vec![(2_000, 2_500)]);
}

#[test]
fn a_concurrent_timeline_keeps_overlapping_ops_overlapping() {
    let events = case(
        "concurrent",
        vec![
            invoke(2_000, 0, 0, Op::Lock, Some(7)),
            invoke(2_100, 1, 1, Op::Lock, Some(7)),
            obs(2_200, None, "sample", &[7]),
            done(2_900, 1, 1, Op::Lock, Reply::Ok),
            done(3_000, 0, 0, Op::Lock, Reply::Ok),
            obs(9_000_000, None, "end", &[7]),
        ],
    );
    let view = CaseView::build(&events).unwrap();
    let svg = timeline("app.mutual_exclusion", &events, &view, &check());
    assert!(svg.contains("data-schedule=\"concurrent\""), "{svg}");
    let (a, b) = (bars(&svg, "C1")[0], bars(&svg, "C2")[0]);
    assert!(a.0 < b.1 && b.0 < a.1, "{a:?} {b:?}");
    // Drawn overlapping too: C2's bar starts inside C1's.
    let xs: Vec<f64> = svg
        .lines()
        .filter(|l| l.starts_with("<g class=\"op "))
        .map(|l| {
            let at = l.find("<rect x=\"").unwrap() + 9;
            l[at..at + l[at..].find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert!(xs[0] < xs[1], "{xs:?}");
    assert!(svg.contains("<g class=\"hold\" data-pid=\"4711\""), "{svg}");
    assert!(svg.contains("ms</text>"), "time ticks: {svg}");
    assert!(svg.contains("data-shown=\"true\""), "{svg}");
    let unshown = timeline(
        "app.mutual_exclusion",
        &events,
        &view,
        &CaseCheck::default(),
    );
    assert!(unshown.contains("data-shown=\"false\""), "{unshown}");
    assert!(!unshown.contains("class=\"violation\""), "{unshown}");
}
