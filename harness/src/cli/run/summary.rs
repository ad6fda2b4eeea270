//! What `pgchaos run` says of a run, from the tap's typed list (`tap::extract`) and the
//! replicas' ends: each lane attributed to the replica whose process group owned its socket,
//! the advisory-lock calls each replica made and what they returned, and the errors per
//! replica (still running at the deadline, refused by the tap, ended without ever
//! connecting). Pure: the items and the ends in, the summary out.

use super::replica::Ended;
use crate::tap::extract::{Item, KeyOf, Outcome, Statement};
use serde::Serialize;
use std::collections::BTreeMap;

/// One round's replicas, as they ended.
pub struct RoundEnds {
    pub round: u32,
    pub ends: Vec<Ended>,
    /// The round's span on the record's clock.
    pub t0: u64,
    pub t1: u64,
}

/// A lock call, in a line.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CallLine {
    pub lane: u64,
    pub func: &'static str,
    /// The key, or `?` and the argument texts.
    pub key: String,
    /// `true`/`false` per row, `done` for a void call that returned, `-` when the reply did
    /// not carry it (the call is not a column); or the statement's error code, `not run`,
    /// `no reply`.
    pub result: String,
}

/// Counts per function.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub calls: u64,
    #[serde(rename = "true")]
    pub t: u64,
    #[serde(rename = "false")]
    pub f: u64,
    pub done: u64,
    pub error: u64,
    /// Not run, no reply, or a result the reply did not carry.
    pub unknown: u64,
}

/// What one replica did through the tap.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplicaTap {
    pub round: u32,
    pub replica: u32,
    pub lanes: Vec<u64>,
    pub statements: u64,
    pub calls: Vec<CallLine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The tap's side of results.json.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub lanes: u64,
    pub statements: u64,
    pub looks: u64,
    /// Per lock function: calls and their results.
    pub lock_calls: BTreeMap<&'static str, Counts>,
    pub replicas: Vec<ReplicaTap>,
    /// Lanes whose owner could not be read (the process had gone): attributed to no replica.
    pub unowned_lanes: Vec<u64>,
    pub errors: Vec<String>,
}

fn line(s: &Statement, c: &crate::tap::extract::LockCall) -> CallLine {
    let key = match &c.key {
        KeyOf::None => String::new(),
        KeyOf::Known(k) => k.to_string(),
        KeyOf::Unknown(texts) => {
            let from_reply: Vec<String> = c
                .rows
                .iter()
                .filter_map(|r| r.key.map(|k| k.to_string()))
                .collect();
            if from_reply.is_empty() {
                format!("? {}", texts.join(", "))
            } else {
                from_reply.join(",")
            }
        }
    };
    let result = match &s.outcome {
        Outcome::Error(n) => format!("error {}", n.code),
        Outcome::NotRun { .. } => "not run".into(),
        Outcome::NoReply => "no reply".into(),
        Outcome::Ok { .. } if c.rows.is_empty() => "-".into(),
        Outcome::Ok { .. } => c
            .rows
            .iter()
            .map(|r| match r.result {
                Some(true) => "true",
                Some(false) => "false",
                None if !c.func.returns_bool() => "done",
                None => "-",
            })
            .collect::<Vec<_>>()
            .join(","),
    };
    CallLine {
        lane: s.lane,
        func: c.func.name(),
        key,
        result,
    }
}

fn count(counts: &mut Counts, l: &CallLine) {
    counts.calls += 1;
    for r in l.result.split(',') {
        match r {
            "true" => counts.t += 1,
            "false" => counts.f += 1,
            "done" => counts.done += 1,
            r if r.starts_with("error") => counts.error += 1,
            _ => counts.unknown += 1,
        }
    }
}

/// The summary of a run: `items` from the whole record, `rounds` as their replicas ended.
pub fn summarize(items: &[Item], rounds: &[RoundEnds], deadline_s: f64) -> Summary {
    let mut sum = Summary::default();
    // lane -> (round, replica)
    let mut owner_of: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    let mut lane_t: BTreeMap<u64, u64> = BTreeMap::new();
    for it in items {
        if let Item::Open {
            lane,
            t,
            owner_pgid,
            ..
        } = it
        {
            sum.lanes += 1;
            lane_t.insert(*lane, *t);
            let found = owner_pgid.and_then(|g| {
                rounds.iter().find_map(|r| {
                    r.ends
                        .iter()
                        .find(|e| e.pgid == g)
                        .map(|e| (r.round, e.replica))
                })
            });
            match found {
                Some(o) => {
                    owner_of.insert(*lane, o);
                }
                None => sum.unowned_lanes.push(*lane),
            }
        }
    }
    let mut per: BTreeMap<(u32, u32), ReplicaTap> = BTreeMap::new();
    for r in rounds {
        for e in &r.ends {
            per.insert(
                (r.round, e.replica),
                ReplicaTap {
                    round: r.round,
                    replica: e.replica,
                    ..Default::default()
                },
            );
        }
    }
    for (lane, o) in &owner_of {
        if let Some(p) = per.get_mut(o) {
            p.lanes.push(*lane);
        }
    }
    for it in items {
        match it {
            Item::Statement(s) => {
                sum.statements += 1;
                let rep = owner_of.get(&s.lane).and_then(|o| per.get_mut(o));
                let lines: Vec<CallLine> = s.calls.iter().map(|c| line(s, c)).collect();
                for l in &lines {
                    count(sum.lock_calls.entry(l.func).or_default(), l);
                }
                if let Some(p) = rep {
                    p.statements += 1;
                    p.calls.extend(lines);
                }
            }
            Item::Refused { lane, why, .. } => {
                match owner_of.get(lane).and_then(|o| per.get_mut(o)) {
                    Some(p) => p.error = Some(format!("the tap refused its connection: {why}")),
                    None => sum
                        .errors
                        .push(format!("lane {lane}: the tap refused a connection: {why}")),
                }
            }
            Item::Look { .. } => sum.looks += 1,
            _ => {}
        }
    }
    for r in rounds {
        for e in &r.ends {
            let p = per.get_mut(&(r.round, e.replica)).expect("inserted above");
            if e.deadline {
                p.error = Some(format!(
                    "still running at the deadline ({deadline_s} s): its process group was terminated"
                ));
            } else if p.lanes.is_empty() && p.error.is_none() {
                // Only when no lane of unknown owner opened while it ran could it have connected.
                let start = r.t0 + e.start_ms * 1_000_000;
                let end = start + e.ms * 1_000_000;
                let maybe = sum.unowned_lanes.iter().any(|l| {
                    lane_t
                        .get(l)
                        .is_some_and(|t| *t >= start && *t <= end.max(r.t1))
                });
                if !maybe {
                    let how = match (e.code, e.signal) {
                        (Some(c), _) => format!("exit code {c}"),
                        (_, Some(s)) => format!("signal {s}"),
                        _ => "status unknown".into(),
                    };
                    p.error = Some(format!(
                        "ended ({how}) after {} ms without connecting through the tap (its output: {})",
                        e.ms, e.stderr
                    ));
                }
            }
            if let Some(err) = &p.error {
                sum.errors
                    .push(format!("round {} replica {}: {err}", r.round, e.replica));
            }
        }
    }
    sum.replicas = per.into_values().collect();
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::extract::{CallRow, LockCall, Protocol};
    use crate::tap::sqlscan::{Kind, LockFn};
    use crate::vocab::Key;

    fn open(lane: u64, t: u64, pgid: Option<i32>) -> Item {
        Item::Open {
            lane,
            t,
            wall: 0,
            peer_port: 1,
            upstream_port: None,
            owner_pid: pgid,
            owner_pgid: pgid,
            params: Default::default(),
            protocol: None,
        }
    }

    fn stmt(lane: u64, result: Option<bool>) -> Item {
        Item::Statement(Box::new(Statement {
            lane,
            n: 1,
            index: 0,
            protocol: Protocol::Simple,
            t: 0,
            wall: 0,
            t_done: None,
            sql: "SELECT pg_try_advisory_lock(1)".into(),
            kind: Kind::Opaque {
                verb: "select".into(),
            },
            calls: vec![LockCall {
                func: LockFn::TryLock,
                key: KeyOf::Known(Key::Big(1)),
                rows: vec![CallRow { result, key: None }],
            }],
            hidden: false,
            outcome: Outcome::Ok {
                tag: "SELECT 1".into(),
            },
            ready: Some('I'),
            notices: vec![],
        }))
    }

    fn ended(replica: u32, pgid: i32, deadline: bool) -> Ended {
        Ended {
            replica,
            pgid,
            start_ms: 0,
            ms: 10,
            code: Some(0),
            deadline,
            ..Default::default()
        }
    }

    #[test]
    fn lanes_go_to_their_replicas_and_errors_are_named() {
        let items = vec![
            open(1, 5, Some(100)),
            stmt(1, Some(true)),
            open(2, 6, Some(200)),
            stmt(2, Some(false)),
        ];
        let rounds = vec![RoundEnds {
            round: 1,
            ends: vec![
                ended(1, 100, false),
                ended(2, 200, false),
                ended(3, 300, true),
                ended(4, 400, false),
            ],
            t0: 0,
            t1: 1_000_000_000,
        }];
        let s = summarize(&items, &rounds, 60.0);
        assert_eq!(
            s.lock_calls["pg_try_advisory_lock"],
            Counts {
                calls: 2,
                t: 1,
                f: 1,
                ..Default::default()
            }
        );
        assert_eq!(s.replicas[0].calls[0].result, "true");
        assert_eq!(s.replicas[1].calls[0].result, "false");
        assert!(s.replicas[2].error.as_ref().unwrap().contains("deadline"));
        assert!(
            s.replicas[3]
                .error
                .as_ref()
                .unwrap()
                .contains("without connecting")
        );
        assert_eq!(s.errors.len(), 2);
        // A lane of unknown owner opened while replica 4 ran: it may have been its own.
        let mut items = items;
        items.push(open(3, 7, None));
        let s = summarize(&items, &rounds, 60.0);
        assert!(s.replicas[3].error.is_none());
        assert_eq!(s.unowned_lanes, vec![3]);
    }
}
