//! What the workers do: steps and cases, generated from a topology's `workload` with proptest
//! strategies, seeded per case so any case can be regenerated, and shrunk with proptest's
//! value trees (fewer steps, lower client numbers, simpler ops, lower keys) by [`shrink`],
//! whatever decides that a candidate still fails (a live run, or a pure predicate in tests).
//!
//! May import `vocab` and `topology`.

pub mod keys;

use crate::topology::Workload;
use crate::vocab::{Op, When};
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

pub use crate::vocab::step::Step;

/// Ops in shrinking order (`vocab::op::OPS` lists the workload's simplest first).
const SIMPLICITY: [Op; Op::ALL.len()] = Op::ALL;

/// A strategy for one step of this workload.
pub fn step_strategy(w: &Workload) -> BoxedStrategy<Step> {
    let mut ops: Vec<(u32, BoxedStrategy<Op>)> = SIMPLICITY
        .iter()
        .filter_map(|op| {
            let weight = w.ops.get(op).copied().unwrap_or(0);
            (weight > 0).then(|| (weight, Just(*op).boxed()))
        })
        .collect();
    // Faults of the servers last, as one alternative: shrinking turns a fault into a client
    // op, or removes it.
    let faults: Vec<(u32, BoxedStrategy<Op>)> = Op::FAULTS
        .iter()
        .filter_map(|op| {
            let weight = w.faults.get(op).copied().unwrap_or(0);
            (weight > 0).then(|| (weight, Just(*op).boxed()))
        })
        .collect();
    if !faults.is_empty() && w.fault_weight > 0 {
        ops.push((w.fault_weight, Union::new_weighted(faults).boxed()));
    }
    let op = Union::new_weighted(ops);
    let keys = w.keys.clone();
    let gucs = w.settings.clone();
    (0..w.clients as usize, op, 0..keys.len(), 0..gucs.len())
        .prop_map(move |(client, op, k, g)| {
            let guc = op.takes_guc().then(|| gucs[g]);
            Step {
                client,
                op,
                key: op.takes_key().then(|| keys[k]),
                // A client sets its own value (`vocab::setting`), so a value read says who
                // set it.
                ms: guc.filter(|_| op.sets()).map(|g| g.value_of(client)),
                guc,
                when: When::Ok,
                message: None,
            }
        })
        .boxed()
}

/// A strategy for a whole case.
pub fn case_strategy(w: &Workload) -> BoxedStrategy<Vec<Step>> {
    proptest::collection::vec(step_strategy(w), w.steps_min..=w.steps_max).boxed()
}

/// The seed of case `index` of a run seeded `run_seed` (so one case can be regenerated alone).
pub fn case_seed(run_seed: u64, index: u32) -> u64 {
    // splitmix64 of the pair: well spread, stable across versions.
    let mut z = run_seed ^ (u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value tree of the case with this seed: `current()` is the case, `simplify()` /
/// `complicate()` walk its shrinks.
pub fn case_tree(w: &Workload, seed: u64) -> Box<dyn ValueTree<Value = Vec<Step>>> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    Box::new(
        case_strategy(w)
            .new_tree(&mut runner)
            .expect("case strategies never reject"),
    )
}

/// The case with this seed: the script's steps for a scripted workload (the same every
/// case; only think times vary with the seed), else the value tree's current value.
pub fn case(w: &Workload, seed: u64) -> Vec<Step> {
    if w.script.is_empty() {
        case_tree(w, seed).current()
    } else {
        script_steps(w)
    }
}

/// Shrink the case with this seed while `fails` says a candidate still fails: proptest's
/// value tree first (it removes steps from the ends, lowers clients, ops and keys), then a
/// greedy pass dropping whole clients, then single steps, then clients renamed in order of
/// first appearance (kept if it still fails). A scripted case has no value tree and keeps
/// its protocol: whole replicas are dropped, and a replica's script only cut short from
/// its end (a replica that stopped early), never a lock skipped in the middle. Stops after `max_runs` candidates. Returns the smallest failing
/// case found and the number of candidates tried.
pub async fn shrink<F>(
    w: &Workload,
    seed: u64,
    max_runs: u32,
    mut fails: F,
) -> anyhow::Result<(Vec<Step>, u32)>
where
    F: AsyncFnMut(&[Step]) -> anyhow::Result<bool>,
{
    let mut runs = 0;
    let mut best = case(w, seed);
    if w.script.is_empty() {
        let mut tree = case_tree(w, seed);
        let mut moved = tree.simplify();
        while moved && runs < max_runs {
            runs += 1;
            let candidate = tree.current();
            if fails(&candidate).await? {
                best = candidate;
                moved = tree.simplify();
            } else {
                moved = tree.complicate();
            }
        }
    }
    // Whole clients, last first (replicas are alike, so the last goes first).
    let mut clients: Vec<usize> = best.iter().map(|s| s.client).collect();
    clients.sort_unstable();
    clients.dedup();
    for c in clients.into_iter().rev() {
        if runs >= max_runs {
            break;
        }
        let candidate: Vec<Step> = best.iter().filter(|s| s.client != c).cloned().collect();
        if candidate.is_empty() {
            continue;
        }
        runs += 1;
        if fails(&candidate).await? {
            best = candidate;
        }
    }
    if w.script.is_empty() {
        let mut i = 0;
        while i < best.len() && runs < max_runs {
            let mut candidate = best.clone();
            candidate.remove(i);
            if candidate.is_empty() {
                i += 1;
                continue;
            }
            runs += 1;
            if fails(&candidate).await? {
                best = candidate;
            } else {
                i += 1;
            }
        }
    } else {
        // A script is a protocol: a replica never skips one of its ops, but it may stop
        // early (a crash). So a replica's script is only cut short, from its end.
        let mut clients: Vec<usize> = best.iter().map(|s| s.client).collect();
        clients.sort_unstable();
        clients.dedup();
        for c in clients {
            while runs < max_runs {
                let Some(last) = best.iter().rposition(|s| s.client == c) else {
                    break;
                };
                let mut candidate = best.clone();
                candidate.remove(last);
                if candidate.is_empty() || !candidate.iter().any(|s| s.client == c) {
                    break;
                }
                runs += 1;
                if fails(&candidate).await? {
                    best = candidate;
                } else {
                    break;
                }
            }
        }
    }
    let relabelled = relabel_clients(&best);
    if relabelled != best && runs < max_runs {
        runs += 1;
        if fails(&relabelled).await? {
            best = relabelled;
        }
    }
    Ok((best, runs))
}

/// The same case with clients renumbered in order of first appearance.
pub fn relabel_clients(steps: &[Step]) -> Vec<Step> {
    let mut order: Vec<usize> = vec![];
    for s in steps {
        if !order.contains(&s.client) {
            order.push(s.client);
        }
    }
    steps
        .iter()
        .map(|s| {
            let client = order.iter().position(|c| *c == s.client).expect("seen");
            Step {
                client,
                // A client sets its own value.
                ms: match s.guc {
                    Some(g) if s.op.sets() => Some(g.value_of(client)),
                    _ => s.ms,
                },
                ..s.clone()
            }
        })
        .collect()
}

/// A fresh random seed for `seed: random`.
pub fn random_seed() -> u64 {
    rand::random::<u64>() >> 1 // keep it a positive i64 for JSON consumers
}

/// The steps of a scripted case: each replica's ops, in order (client numbers by group).
pub fn script_steps(w: &Workload) -> Vec<Step> {
    let mut out = vec![];
    let mut client = 0;
    for g in &w.script {
        for _ in 0..g.clients {
            for op in &g.ops {
                out.push(Step {
                    client,
                    op: op.op,
                    key: op.key,
                    ms: op
                        .guc
                        .filter(|_| op.op.sets())
                        .map(|g| g.value_of(client))
                        .or(op.ms),
                    guc: op.guc,
                    when: op.when,
                    message: op.message.clone(),
                });
            }
            client += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{Guc, Key};
    use std::collections::BTreeMap;

    fn workload() -> Workload {
        let mut ops = BTreeMap::new();
        for op in [
            Op::TryLock,
            Op::Unlock,
            Op::Begin,
            Op::Rollback,
            Op::Terminate,
        ] {
            ops.insert(op, 1);
        }
        Workload {
            clients: 3,
            keys: vec![Key::Big(4242424242), Key::Pair(1, 2)],
            api: crate::topology::Api::Session,
            steps_min: 1,
            steps_max: 20,
            ops,
            lock_timeout_ms: 20,
            think: None,
            script: vec![],
            settings: Guc::ALL.to_vec(),
            faults: BTreeMap::new(),
            fault_weight: 0,
        }
    }

    #[test]
    fn faults_are_drawn_with_their_weight_and_shrink_away() {
        let mut w = workload();
        w.faults = BTreeMap::from([(Op::PoolerReconnect, 1), (Op::PgRestart, 1)]);
        w.fault_weight = 5;
        let steps: Vec<Step> = (0..40).flat_map(|s| case(&w, s)).collect();
        let faults = steps.iter().filter(|s| s.op.is_server_fault()).count();
        // 5 of 10 weight units: about half the steps (a wide band: 40 cases, ~400 steps).
        assert!(
            faults * 4 > steps.len() && faults * 4 < steps.len() * 3,
            "{faults} of {}",
            steps.len()
        );
        assert!(steps.iter().any(|s| s.op == Op::PgRestart));
        assert!(
            steps
                .iter()
                .all(|s| !s.op.is_server_fault() || w.faults.contains_key(&s.op))
        );
        // Weight 0: never drawn.
        w.fault_weight = 0;
        assert!(
            (0..40)
                .flat_map(|s| case(&w, s))
                .all(|s| !s.op.is_server_fault())
        );
        // A failure that needs only a try_lock shrinks every fault away.
        w.fault_weight = 5;
        let seed = (0..100)
            .find(|s| {
                let c = case(&w, *s);
                c.iter().any(|s| s.op == Op::TryLock) && c.iter().any(|s| s.op.is_server_fault())
            })
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (min, _) = rt
            .block_on(shrink(&w, seed, 500, async |c: &[Step]| {
                Ok(c.iter().any(|s| s.op == Op::TryLock))
            }))
            .unwrap();
        assert_eq!(min.len(), 1, "{min:?}");
        assert_eq!(min[0].op, Op::TryLock);
    }

    /// `step_strategy` draws only the ops SIMPLICITY lists: every op a workload can weigh
    /// (`Op::ALL`) must be there exactly once, or a weighted op would never be generated
    /// (and shrinking would have no place for it). Script-only ops and faults of the servers
    /// are not drawn from it: a workload's `ops` cannot name a script-only op
    /// (`Op::from_name` knows only `Op::ALL`), and faults are their own alternative.
    #[test]
    fn simplicity_orders_every_workload_op_once() {
        for op in Op::ALL {
            assert_eq!(
                SIMPLICITY.iter().filter(|o| **o == op).count(),
                1,
                "{op}: in SIMPLICITY exactly once"
            );
        }
        for op in SIMPLICITY {
            assert!(Op::ALL.contains(&op), "{op}: not a workload op");
            assert!(!Op::SCRIPT_ONLY.contains(&op), "{op}: script-only");
            assert!(!op.is_server_fault(), "{op}: a fault of the servers");
        }
        for op in Op::SCRIPT_ONLY {
            assert_eq!(Op::from_name(op.name()), None, "{op} is script-only");
        }
        // And as the generator uses it: a workload weighing every op draws every op.
        let mut w = workload();
        w.ops = Op::ALL.iter().map(|op| (*op, 1)).collect();
        let drawn: std::collections::BTreeSet<Op> =
            (0..100).flat_map(|s| case(&w, s)).map(|s| s.op).collect();
        assert_eq!(drawn, Op::ALL.into_iter().collect());
    }

    #[test]
    fn same_seed_same_case_and_different_seeds_differ() {
        let w = workload();
        let a = case_tree(&w, 42).current();
        assert_eq!(a, case_tree(&w, 42).current());
        let distinct: std::collections::BTreeSet<String> = (0..20)
            .map(|s| format!("{:?}", case_tree(&w, s).current()))
            .collect();
        assert!(distinct.len() > 15, "seeds should give different cases");
        assert_ne!(case_seed(1, 0), case_seed(1, 1));
        assert_ne!(case_seed(1, 0), case_seed(2, 0));
    }

    #[test]
    fn generated_steps_respect_the_workload() {
        let w = workload();
        for seed in 0..50 {
            let case = case_tree(&w, seed).current();
            assert!((1..=20).contains(&case.len()));
            for s in &case {
                assert!(s.client < 3);
                assert!(w.ops.contains_key(&s.op), "{} not in workload", s.op);
                assert_eq!(s.key.is_some(), s.op.takes_key());
                if let Some(k) = s.key {
                    assert!(w.keys.contains(&k));
                }
            }
        }
    }

    /// The engine's own shrink ([`shrink`]) on a pure stand-in for a violation: two
    /// different clients take the same key.
    #[test]
    fn shrinking_reaches_a_minimal_failing_case() {
        let fails = |c: &[Step]| {
            let takers: std::collections::BTreeSet<_> = c
                .iter()
                .filter(|s| s.op == Op::TryLock && s.key == Some(Key::Big(4242424242)))
                .map(|s| s.client)
                .collect();
            takers.len() >= 2
        };
        let w = workload();
        let seed = (0..500)
            .find(|s| fails(&case_tree(&w, *s).current()))
            .expect("some seed fails");
        let original = case_tree(&w, seed).current();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut calls = 0u32;
        let (best, runs) = rt
            .block_on(shrink(&w, seed, 10_000, async |c: &[Step]| {
                calls += 1;
                Ok(fails(c))
            }))
            .unwrap();
        assert!(fails(&best));
        assert_eq!(best.len(), 2, "{best:?} from {original:?}");
        assert_eq!((best[0].client, best[1].client), (0, 1), "relabelled");
        assert_eq!(runs, calls, "every run is one call of the predicate");
        // The cap is respected.
        let (_, capped) = rt
            .block_on(shrink(&w, seed, 3, async |c: &[Step]| Ok(fails(c))))
            .unwrap();
        assert!(capped <= 3);
    }

    /// A scripted case shrinks by whole replicas and single ops: five replicas of
    /// `lock, sleep, unlock` where the stand-in failure needs two lockers.
    #[test]
    fn a_script_shrinks_to_two_replicas_and_their_locks() {
        use crate::topology::{ScriptGroup, ScriptOp};
        let mut w = workload();
        w.script = vec![ScriptGroup {
            clients: 5,
            ops: vec![
                ScriptOp {
                    op: Op::Lock,
                    key: Some(Key::Big(7)),
                    ms: None,
                    guc: None,
                    when: Default::default(),
                    message: None,
                },
                ScriptOp {
                    op: Op::Sleep,
                    key: None,
                    ms: Some(100),
                    guc: None,
                    when: Default::default(),
                    message: None,
                },
                ScriptOp {
                    op: Op::Unlock,
                    key: Some(Key::Big(7)),
                    ms: None,
                    guc: None,
                    when: Default::default(),
                    message: None,
                },
            ],
        }];
        w.clients = 5;
        let case = case(&w, 1);
        assert_eq!(case.len(), 15);
        assert_eq!(
            case,
            super::case(&w, 2),
            "a script is the same for every seed"
        );
        let fails = |c: &[Step]| {
            let lockers: std::collections::BTreeSet<_> = c
                .iter()
                .filter(|s| s.op == Op::Lock)
                .map(|s| s.client)
                .collect();
            lockers.len() >= 2
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (best, _) = rt
            .block_on(shrink(&w, 1, 1000, async |c: &[Step]| Ok(fails(c))))
            .unwrap();
        // Two replicas, each cut short after its lock; no op skipped in the middle.
        assert_eq!(best.len(), 2, "{best:?}");
        assert!(best.iter().all(|s| s.op == Op::Lock));
        assert_eq!((best[0].client, best[1].client), (0, 1));
        // A failure that needs the sleep keeps the lock before it.
        let needs_sleep = |c: &[Step]| c.iter().any(|s| s.op == Op::Sleep);
        let (best, _) = rt
            .block_on(shrink(&w, 1, 1000, async |c: &[Step]| Ok(needs_sleep(c))))
            .unwrap();
        assert_eq!(
            best.iter().map(|s| s.op).collect::<Vec<_>>(),
            vec![Op::Lock, Op::Sleep],
            "{best:?}"
        );
    }

    /// `set`, `set_local` and `show` name a setting; a set sets its client's own value, also
    /// after shrinking renumbers the clients.
    #[test]
    fn settings_ops_name_a_setting_and_their_client_s_value() {
        let mut w = workload();
        w.ops = BTreeMap::from([
            (Op::Set, 2),
            (Op::SetLocal, 1),
            (Op::Show, 2),
            (Op::TryLock, 1),
        ]);
        let steps: Vec<Step> = (0..30).flat_map(|s| case(&w, s)).collect();
        let gucs: std::collections::BTreeSet<Guc> = steps.iter().filter_map(|s| s.guc).collect();
        assert_eq!(gucs.len(), Guc::ALL.len(), "every setting is drawn");
        for s in &steps {
            assert_eq!(s.guc.is_some(), s.op.takes_guc(), "{s}");
            match (s.op.sets(), s.guc) {
                (true, Some(g)) => assert_eq!(s.ms, Some(g.value_of(s.client)), "{s}"),
                _ => assert_eq!(s.ms, None, "{s}"),
            }
        }
        let set = |client| Step {
            client,
            op: Op::Set,
            key: None,
            ms: Some(Guc::LockTimeout.value_of(client)),
            guc: Some(Guc::LockTimeout),
            when: Default::default(),
            message: None,
        };
        let r = relabel_clients(&[set(2), set(0)]);
        assert_eq!(r[0].ms, Some(1100));
        assert_eq!(r[1].ms, Some(1200));
    }

    #[test]
    fn clients_are_renumbered_in_order_of_first_appearance() {
        let s = |client, op| Step {
            client,
            op,
            key: None,
            ms: None,
            guc: None,
            when: Default::default(),
            message: None,
        };
        let case = vec![s(2, Op::Begin), s(0, Op::Begin), s(2, Op::Commit)];
        let r = relabel_clients(&case);
        assert_eq!(
            r.iter().map(|s| s.client).collect::<Vec<_>>(),
            vec![0, 1, 0]
        );
    }

    #[test]
    fn steps_round_trip_through_yaml_spelling() {
        let s = Step {
            client: 1,
            op: Op::TryLock,
            key: Some(Key::Big(7)),
            ms: None,
            guc: None,
            when: Default::default(),
            message: None,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"client":"C2","op":"try_lock","key":7}"#);
        assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), s);
        assert!(serde_json::from_str::<Step>(r#"{"client":"X","op":"begin"}"#).is_err());
    }
}
