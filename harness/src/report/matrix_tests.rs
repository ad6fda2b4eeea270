//! `matrix`'s tests.

use super::*;

fn run(seed: u64, classes: &[Class]) -> CellRun {
    CellRun {
        seed,
        dir: Some(format!("runs/x/{seed}")),
        classes: classes.iter().copied().collect(),
        facts: RunFacts::default(),
        evidence: None,
        error: None,
        run_ms: 1000,
    }
}

fn cell(expected: Class, runs: Vec<CellRun>) -> Cell {
    let mut c = Cell {
        profile: "rails".into(),
        topology: "transaction-mode".into(),
        topology_file: "topologies/rails--transaction-mode.yaml".into(),
        expected: Some(expected),
        accepted: BTreeSet::new(),
        require_expected: false,
        worst: None,
        count: 0,
        runs,
    };
    c.fold();
    c
}

#[test]
fn a_cell_shows_its_worst_class_and_how_many_seeds_showed_it() {
    let c = cell(
        Class::RanTwice,
        vec![
            run(1, &[Class::RanTwice, Class::Leaked]),
            run(2, &[Class::ErrorPath]),
            run(3, &[Class::RanTwice]),
        ],
    );
    assert_eq!(c.worst, Some(Class::RanTwice));
    assert_eq!(c.label(), "ran twice 2/3");
    assert!(!c.differs());
    assert_eq!(c.also(), vec![Class::Leaked, Class::ErrorPath]);
    let c = cell(
        Class::Safe,
        vec![run(1, &[Class::Stuck]), run(2, &[Class::Safe])],
    );
    assert!(c.differs());
    assert_eq!(c.label(), "stuck 1/2");
    let mut bad = run(1, &[]);
    bad.error = Some("boom".into());
    let c = cell(Class::Safe, vec![bad]);
    assert_eq!(c.worst, None);
    assert!(c.differs(), "a cell that could not run differs");
}

/// The gate: a cell without a written expectation expects safe, so any unsafe class
/// fails it unless accepted by name; `error path` is loud, not unsafe; a written
/// expectation not reached passes unless `--require-expected`; worse than written fails.
#[test]
fn a_cell_without_an_expectation_expects_safe() {
    let mut c = cell(Class::Safe, vec![run(1, &[Class::RanTwice, Class::Leaked])]);
    c.expected = None;
    assert!(c.differs());
    let f = c.failure().unwrap();
    assert!(
        f.contains("ran twice 1/1 is unsafe and nothing written expects it")
            && f.contains("--accept ran-twice"),
        "{f}"
    );
    c.accepted.insert(Class::Leaked);
    assert!(c.differs(), "accepting another class accepts nothing here");
    c.accepted.insert(Class::RanTwice);
    assert!(!c.differs() && c.failure().is_none());
    let mut loud = cell(Class::Safe, vec![run(1, &[Class::ErrorPath])]);
    loud.expected = None;
    assert!(!loud.differs());
    let mut short = cell(Class::RanTwice, vec![run(1, &[Class::ErrorPath])]);
    assert!(short.not_reached() && !short.differs());
    short.require_expected = true;
    assert!(short.differs());
    assert!(
        short
            .failure()
            .unwrap()
            .contains("expected ran twice, not reached in 1 seeds"),
        "{:?}",
        short.failure()
    );
    let worse = cell(Class::Stuck, vec![run(1, &[Class::RanTwice])]);
    assert!(worse.differs() && !worse.not_reached());
    assert_eq!(
        worse.failure().unwrap(),
        "expected stuck, got ran twice 1/1"
    );
}

/// A class invariant no run could judge is shown beside the class, not taken for
/// safe; one that another seed found violated is not.
#[test]
fn an_unjudged_class_invariant_is_shown_not_safe() {
    let mut r1 = run(1, &[Class::Safe]);
    r1.facts.unknown.insert("app.notifications_arrive".into());
    let r2 = run(2, &[Class::Safe]);
    let c = cell(Class::Safe, vec![r1.clone(), r2]);
    assert_eq!(
        c.unknown(),
        BTreeSet::from(["app.notifications_arrive".to_string()])
    );
    let m = Matrix {
        pgchaos: "0.1.0".into(),
        versions: "PostgreSQL 18.6".into(),
        servers: BTreeMap::new(),
        drift: BTreeSet::new(),
        seeds: vec![1, 2],
        replicas: None,
        time_scale_milli: 1000,
        shrink: "once".into(),
        max_shrink_runs: 6,
        plan: vec![],
        partition: None,
        merged: 0,
        jobs: 1,
        accept: BTreeSet::new(),
        require_expected: false,
        profiles: vec![ProfileRow {
            name: "rails".into(),
            tool: "x".into(),
            file: "profiles/rails.yaml".into(),
            fix: BTreeMap::new(),
        }],
        topologies: vec!["transaction-mode".into()],
        cells: vec![c],
        run_ms: 2000,
    };
    let t = m.table(None);
    assert!(
        t.contains("safe 2/2 (unknown: app.notifications_arrive) |"),
        "{t}"
    );
    assert!(
        m.html()
            .contains("<small>unknown: app.notifications_arrive</small>")
    );
    let mut r3 = run(3, &[Class::Missed]);
    r3.facts.violated.insert("app.notifications_arrive".into());
    let c = cell(Class::Missed, vec![r1, r3]);
    assert!(c.unknown().is_empty(), "violated in another seed");
    assert_eq!(c.label(), "missed 1/2");
}

#[test]
fn renders_table_html_and_junit() {
    let m = Matrix {
        pgchaos: "0.1.0".into(),
        versions: "PostgreSQL 18.6".into(),
        servers: BTreeMap::new(),
        drift: BTreeSet::new(),
        seeds: vec![1, 2, 3],
        replicas: None,
        time_scale_milli: 1000,
        shrink: "once".into(),
        max_shrink_runs: 6,
        plan: vec![],
        partition: None,
        merged: 0,
        jobs: 1,
        accept: BTreeSet::new(),
        require_expected: false,
        profiles: vec![ProfileRow {
            name: "rails".into(),
            tool: "Rails <7.1> & co".into(),
            file: "profiles/rails.yaml".into(),
            fix: BTreeMap::new(),
        }],
        topologies: vec!["direct".into(), "transaction-mode".into()],
        cells: vec![
            Cell {
                topology: "direct".into(),
                ..cell(Class::ErrorPath, vec![run(1, &[Class::ErrorPath])])
            },
            cell(Class::Safe, vec![run(1, &[Class::RanTwice])]),
        ],
        run_ms: 2000,
    };
    let t = m.table(Some(""));
    assert!(!m.table(None).contains("]("), "no links");
    assert!(t.contains("| profile | direct | transaction-mode |"), "{t}");
    assert!(t.contains("[error path 1/1](runs/x/1/report.md)"), "{t}");
    assert!(
        t.contains("ran twice 1/1](runs/x/1/report.md) **expected safe**"),
        "{t}"
    );
    assert_eq!(seeds_text(&m.seeds), "1-3");
    assert_eq!(seeds_text(&[1, 5]), "1, 5");
    let h = m.html();
    assert!(h.contains("Rails &lt;7.1&gt; &amp; co"), "escaped");
    assert!(h.contains("data-worst=\"ran twice\" data-expected=\"safe\""));
    assert_eq!(h.matches("class=\"cell ").count(), 2);
    let j = m.junit(|_| Some("steps: []".into()));
    assert_eq!(j.len(), 2);
    assert!(j[0].failure.is_none());
    let (msg, body) = j[1].failure.clone().unwrap();
    assert_eq!(msg, "expected safe, got ran twice 1/1");
    assert!(
        body.contains("seed 1: ran twice") && body.contains("steps: []"),
        "{body}"
    );
}

/// A whole matrix of `profiles x topologies` with one run per cell.
fn whole(profiles: &[&str], topologies: &[&str]) -> Matrix {
    let mut plan = vec![];
    let mut cells = vec![];
    for p in profiles {
        for t in topologies {
            plan.push(PlannedCell {
                profile: p.to_string(),
                topology: t.to_string(),
                fingerprint: fingerprint(&[p, t]),
            });
            cells.push(Cell {
                profile: p.to_string(),
                topology: t.to_string(),
                ..cell(Class::Safe, vec![run(1, &[Class::Safe])])
            });
        }
    }
    Matrix {
        pgchaos: "0.1.0".into(),
        versions: "PostgreSQL 18.6 + PgBouncer 1.24.1".into(),
        servers: BTreeMap::from([
            ("postgres".to_string(), "18.6".to_string()),
            ("pgbouncer".to_string(), "1.24.1".to_string()),
        ]),
        drift: BTreeSet::new(),
        seeds: vec![1],
        replicas: None,
        time_scale_milli: 1000,
        shrink: "once".into(),
        max_shrink_runs: 6,
        profiles: profiles
            .iter()
            .map(|p| ProfileRow {
                name: p.to_string(),
                tool: p.to_string(),
                file: format!("profiles/{p}.yaml"),
                fix: BTreeMap::new(),
            })
            .collect(),
        topologies: topologies.iter().map(|t| t.to_string()).collect(),
        plan,
        partition: None,
        merged: 0,
        jobs: 1,
        accept: BTreeSet::new(),
        require_expected: false,
        cells,
        run_ms: 1000,
    }
}

/// Partition `k` of `n` of a whole matrix, as `matrix --partition` runs it.
fn part(m: &Matrix, k: u32, n: u32) -> (String, Matrix) {
    let p = Partition { k, n };
    (
        format!("part{k}"),
        Matrix {
            partition: Some(p),
            cells: p.pick(m.cells.clone()),
            ..m.clone()
        },
    )
}

#[test]
fn partitions_merge_to_the_whole_matrix() {
    let m = whole(
        &["rails", "flyway", "prisma"],
        &["direct", "transaction-mode"],
    );
    for n in 1..=4 {
        let parts: Vec<(String, Matrix)> = (1..=n).rev().map(|k| part(&m, k, n)).collect();
        let merged = merge(&parts).unwrap();
        assert_eq!(merged.cells, m.cells, "n {n}: same cells, in plan order");
        assert_eq!(merged.merged, n);
        assert_eq!(merged.partition, None);
        assert_eq!(merged.table(None), m.table(None));
    }
    // A partition that held no cell (more partitions than cells) still counts.
    let small = whole(&["rails"], &["direct"]);
    let parts: Vec<(String, Matrix)> = (1..=3).map(|k| part(&small, k, 3)).collect();
    assert_eq!(parts[1].1.cells.len(), 0);
    assert_eq!(merge(&parts).unwrap().cells, small.cells);
}

#[test]
fn merge_refuses_inconsistent_partitions() {
    let m = whole(&["rails", "flyway"], &["direct", "transaction-mode"]);
    let parts = |n| (1..=n).map(|k| part(&m, k, n)).collect::<Vec<_>>();
    let e = merge(&parts(3)[..2]).unwrap_err();
    assert!(e.contains("partition 3/3 missing"), "{e}");
    let mut p = parts(2);
    p.push(part(&m, 2, 2));
    let e = merge(&p).unwrap_err();
    assert!(e.contains("partition 2/2 is given twice"), "{e}");
    let mut p = parts(2);
    p[1].1.pgchaos = "0.2.0".into();
    let e = merge(&p).unwrap_err();
    assert!(
        e.contains("different pgchaos versions: 0.1.0 in part1, 0.2.0 in part2"),
        "{e}"
    );
    let mut p = parts(2);
    p[1].1.servers.insert("postgres".into(), "17.2".into());
    let e = merge(&p).unwrap_err();
    assert!(
        e.contains("different servers: postgres 18.6 in part1, 17.2 in part2"),
        "{e}"
    );
    // A partition that ran no PgBouncer (direct cells only) is not a difference.
    let mut p = parts(2);
    p[1].1.servers.remove("pgbouncer");
    p[1].1.versions = "PostgreSQL 18.6".into();
    let merged = merge(&p).unwrap();
    assert_eq!(merged.versions, "PostgreSQL 18.6 + PgBouncer 1.24.1");
    assert_eq!(merged.servers.len(), 2);
    // Overlap: a whole matrix merged with a partition of it.
    let mut p = parts(2);
    p[1].1.partition = Some(Partition { k: 2, n: 2 });
    p[1].1.cells = m.cells.clone();
    let e = merge(&p).unwrap_err();
    assert!(e.contains("overlapping partitions: the cell"), "{e}");
    let mut p = parts(2);
    p[0].1.cells.pop();
    let e = merge(&p).unwrap_err();
    assert!(e.contains("no partition holds the cell"), "{e}");
    let mut p = parts(2);
    p[1].1.plan[0].fingerprint = "edited".into();
    let e = merge(&p).unwrap_err();
    assert!(
        e.contains("not partitions of the same matrix") && e.contains("rails on direct differ"),
        "{e}"
    );
    let mut p = parts(2);
    p[1].1.seeds = vec![1, 2];
    assert!(merge(&p).unwrap_err().contains("seeds 1 against 1, 2"));
    let mut p = parts(2);
    p[1].1.partition = Some(Partition { k: 2, n: 3 });
    assert!(
        merge(&p)
            .unwrap_err()
            .contains("partitions of different splits")
    );
    assert!(merge(&[]).unwrap_err().contains("nothing to merge"));
}
