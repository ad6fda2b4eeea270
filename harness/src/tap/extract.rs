//! What matters in a tap's record, as a typed list (pure: the record in, items out): each
//! lane's opening (its ports, the process that owned it, the startup's user and database)
//! and end; every statement the clients ran, simple or extended protocol, with what kind of
//! statement it is (`sqlscan::Kind`: SET/RESET, PREPARE/EXECUTE/DEALLOCATE,
//! LISTEN/UNLISTEN/NOTIFY, DECLARE/FETCH/CLOSE, DISCARD, transaction control, or opaque), the
//! advisory-lock calls in it with their keys (literals, or bound parameters in text or binary)
//! and their results where the reply carries them, its outcome (the command tag, the error
//! code, not run because an earlier message failed, no reply), and the transaction state of
//! the ReadyForQuery that closed it; protocol-level prepared statements (a named Parse, a
//! Close); notifications received; cancel requests; and the observer's looks.
//!
//! The step that turns this into the harness's history reads these items (docs/tap.md).

use super::record::{Be, Body, ClosedBy, Event, Fe, Notice, Value};
use super::sqlscan::{self, Arg, Kind, LockFn};
use crate::history::Observation;
use crate::vocab::Key;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// SQL texts in items are cut to this many bytes.
pub const SQL_CAP: usize = 2000;

/// Which protocol carried a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Simple,
    Extended,
}

/// How a statement ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// CommandComplete (its tag), EmptyQueryResponse (`""`) or PortalSuspended (`suspended`).
    Ok {
        tag: String,
    },
    Error(Notice),
    /// Not run: an earlier message of the same query string or batch failed (that error).
    NotRun {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        because: Option<Notice>,
    },
    /// The lane ended (or the record did) before its reply.
    NoReply,
}

/// A lock call's argument values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOf {
    /// `pg_advisory_unlock_all()`.
    None,
    Known(Key),
    /// Not resolvable from the text or the parameters: the argument texts.
    Unknown(Vec<String>),
}

/// One row's result of a lock call, when the call is a column of the reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRow {
    /// true/false for the try forms and unlocks; `None` for the void ones (a row means done).
    pub result: Option<bool>,
    /// The key, when the text could not give it but the reply did (a column holding the
    /// same expression as the argument).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
}

/// A call of an advisory-lock function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockCall {
    pub func: LockFn,
    pub key: KeyOf,
    /// The reply's column values for this call, one per row kept (empty: the call is not a
    /// column of the reply, or nothing came back).
    pub rows: Vec<CallRow>,
}

/// One statement a client ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statement {
    pub lane: u64,
    /// The request (a Query, or an Execute; a failed Parse or Bind for an error there).
    pub n: u64,
    /// Its place in a multi-statement query string.
    pub index: usize,
    pub protocol: Protocol,
    pub t: u64,
    pub wall: u64,
    /// When its last reply came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_done: Option<u64>,
    pub sql: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<LockCall>,
    /// A string or dollar-quoted body in it names an advisory-lock function (not looked into).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The ReadyForQuery status after it (`I`, `T`, `E`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<char>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<Notice>,
}

/// One thing that matters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "item", rename_all = "snake_case")]
pub enum Item {
    Open {
        lane: u64,
        t: u64,
        wall: u64,
        peer_port: u16,
        /// The port the pooler sees as the client's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream_port: Option<u16>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner_pid: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner_pgid: Option<i32>,
        /// The StartupMessage's parameters (user, database, application_name, ...).
        params: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol: Option<String>,
    },
    /// The tap refused the lane (a protocol it does not know, ...).
    Refused {
        lane: u64,
        t: u64,
        why: String,
    },
    Cancel {
        lane: u64,
        t: u64,
        pid: i32,
    },
    Statement(Box<Statement>),
    /// A named Parse (a protocol-level prepared statement), with its error if it failed.
    Prepared {
        lane: u64,
        t: u64,
        name: String,
        sql: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Notice>,
    },
    /// A protocol-level Close of a statement (`S`) or portal (`P`).
    Closed {
        lane: u64,
        t: u64,
        what: char,
        name: String,
    },
    Notification {
        lane: u64,
        t: u64,
        channel: String,
        payload: String,
        pid: i32,
    },
    Close {
        lane: u64,
        t: u64,
        by: ClosedBy,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Look {
        t: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
        obs: Box<Observation>,
    },
}

/// Per lane: what pass one gathered.
#[derive(Default)]
struct LaneInfo {
    upstream: Option<u16>,
    owner: Option<(i32, i32)>,
    /// Replies by the request they answer (indices into the record).
    replies: HashMap<u64, Vec<usize>>,
    /// Requests an error made the server skip, with that error.
    skipped: HashMap<u64, Notice>,
    /// The lane's Sync messages in order (an Execute's batch ends at the next one).
    syncs: Vec<u64>,
}

/// A protocol-level prepared statement, as the lane's client defined it.
#[derive(Clone)]
struct Prep {
    sql: String,
}

/// A bound portal.
#[derive(Clone)]
struct Portal {
    sql: String,
    formats: Vec<i16>,
    params: Vec<Option<Value>>,
    result_formats: Vec<i16>,
}

/// Per lane: the client's named objects while pass two walks the record.
#[derive(Default)]
struct LaneObjects {
    statements: HashMap<String, Prep>,
    portals: HashMap<String, Portal>,
    /// SQL-level PREPAREs: name -> body.
    sql_prepared: HashMap<String, String>,
}

/// The typed list of what matters in `events` (a whole record, in its order).
pub fn extract(events: &[Event]) -> Vec<Item> {
    let mut lanes: HashMap<u64, LaneInfo> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match &e.body {
            Body::Upstream { lane, local_port } => {
                lanes
                    .entry(*lane)
                    .or_default()
                    .upstream
                    .get_or_insert(*local_port);
            }
            Body::Owner { lane, pid, pgid } => {
                lanes.entry(*lane).or_default().owner = Some((*pid, *pgid))
            }
            Body::Be {
                lane,
                answers,
                skipped,
                msg,
                ..
            } => {
                let info = lanes.entry(*lane).or_default();
                if let Some(n) = answers {
                    info.replies.entry(*n).or_default().push(i);
                }
                if let Be::ErrorResponse(notice) = msg {
                    for s in skipped {
                        info.skipped.insert(*s, notice.clone());
                    }
                }
            }
            Body::Fe {
                lane,
                n,
                msg: Fe::Sync,
                ..
            } => lanes.entry(*lane).or_default().syncs.push(*n),
            _ => {}
        }
    }
    let mut objects: HashMap<u64, LaneObjects> = HashMap::new();
    let mut out = Vec::new();
    for e in events {
        let t = e.t;
        match &e.body {
            Body::LaneOpen { lane, peer_port } => {
                let info = lanes.get(lane);
                out.push(Item::Open {
                    lane: *lane,
                    t,
                    wall: e.wall,
                    peer_port: *peer_port,
                    upstream_port: info.and_then(|i| i.upstream),
                    owner_pid: info.and_then(|i| i.owner).map(|o| o.0),
                    owner_pgid: info.and_then(|i| i.owner).map(|o| o.1),
                    params: BTreeMap::new(),
                    protocol: None,
                });
            }
            Body::TapReply {
                lane,
                refused: Some(why),
                ..
            } => out.push(Item::Refused {
                lane: *lane,
                t,
                why: why.clone(),
            }),
            Body::LaneClose {
                lane, by, error, ..
            } => out.push(Item::Close {
                lane: *lane,
                t,
                by: *by,
                error: error.clone(),
            }),
            Body::Look { round, obs } => out.push(Item::Look {
                t,
                round: *round,
                obs: obs.clone(),
            }),
            Body::Be {
                lane,
                msg:
                    Be::NotificationResponse {
                        pid,
                        channel,
                        payload,
                    },
                ..
            } => out.push(Item::Notification {
                lane: *lane,
                t,
                channel: channel.clone(),
                payload: payload.clone(),
                pid: *pid,
            }),
            Body::Fe {
                lane,
                n,
                msg,
                discarded,
                ..
            } => {
                let info = lanes.entry(*lane).or_default();
                let objs = objects.entry(*lane).or_default();
                frontend(events, e, *lane, *n, msg, *discarded, info, objs, &mut out);
            }
            _ => {}
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn frontend(
    events: &[Event],
    e: &Event,
    lane: u64,
    n: u64,
    msg: &Fe,
    discarded: bool,
    info: &LaneInfo,
    objs: &mut LaneObjects,
    out: &mut Vec<Item>,
) {
    let replies: Vec<&Event> = info
        .replies
        .get(&n)
        .map(|v| v.iter().map(|i| &events[*i]).collect())
        .unwrap_or_default();
    let error_of = |rs: &[&Event]| {
        rs.iter().find_map(|r| match &r.body {
            Body::Be {
                msg: Be::ErrorResponse(x),
                ..
            } => Some(x.clone()),
            _ => None,
        })
    };
    match msg {
        Fe::Startup {
            major,
            minor,
            params,
        } => {
            if let Some(Item::Open {
                params: p,
                protocol,
                ..
            }) = out
                .iter_mut()
                .rev()
                .find(|i| matches!(i, Item::Open { lane: l, .. } if *l == lane))
            {
                *p = params.clone();
                *protocol = Some(format!("{major}.{minor}"));
            }
        }
        Fe::CancelRequest { pid, .. } => out.push(Item::Cancel {
            lane,
            t: e.t,
            pid: *pid,
        }),
        Fe::Query { sql } => simple(e, lane, n, sql, &replies, objs, out),
        Fe::Parse { name, sql, .. } => {
            objs.statements
                .insert(name.clone(), Prep { sql: sql.clone() });
            let error = error_of(&replies);
            if !name.is_empty() {
                out.push(Item::Prepared {
                    lane,
                    t: e.t,
                    name: name.clone(),
                    sql: cut(sql),
                    error: error.clone(),
                });
            }
            if let Some(err) = error {
                out.push(failed(e, lane, n, sql, err, Protocol::Extended));
            }
        }
        Fe::Bind {
            portal,
            statement,
            formats,
            params,
            result_formats,
        } => {
            let sql = objs
                .statements
                .get(statement)
                .map(|p| p.sql.clone())
                .unwrap_or_default();
            if let Some(err) = error_of(&replies) {
                out.push(failed(e, lane, n, &sql, err, Protocol::Extended));
            }
            objs.portals.insert(
                portal.clone(),
                Portal {
                    sql,
                    formats: formats.clone(),
                    params: params.clone(),
                    result_formats: result_formats.clone(),
                },
            );
        }
        Fe::Close { what, name } => {
            if *what == 'S' {
                objs.statements.remove(name);
            } else {
                objs.portals.remove(name);
            }
            out.push(Item::Closed {
                lane,
                t: e.t,
                what: *what,
                name: name.clone(),
            });
        }
        Fe::Execute { portal, .. } => {
            let p = objs.portals.get(portal).cloned();
            let sync = info.syncs.iter().find(|s| **s > n).copied();
            let ready = sync.and_then(|s| info.replies.get(&s)).and_then(|v| {
                v.iter().find_map(|i| match &events[*i].body {
                    Body::Be {
                        msg: Be::ReadyForQuery { status },
                        ..
                    } => Some(*status),
                    _ => None,
                })
            });
            let not_run = if discarded {
                Some(None)
            } else {
                info.skipped.get(&n).map(|x| Some(x.clone()))
            };
            out.push(execute(e, lane, n, p, &replies, not_run, ready));
        }
        _ => {}
    }
}

fn cut(s: &str) -> String {
    if s.len() <= SQL_CAP {
        return s.to_string();
    }
    let mut end = SQL_CAP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn failed(e: &Event, lane: u64, n: u64, sql: &str, err: Notice, protocol: Protocol) -> Item {
    let first = sqlscan::statements(sql).into_iter().next();
    Item::Statement(Box::new(Statement {
        lane,
        n,
        index: 0,
        protocol,
        t: e.t,
        wall: e.wall,
        t_done: None,
        sql: cut(sql),
        kind: first
            .as_ref()
            .map(|s| s.kind.clone())
            .unwrap_or(Kind::Opaque {
                verb: String::new(),
            }),
        calls: first
            .map(|s| {
                s.calls
                    .iter()
                    .map(|c| LockCall {
                        func: c.func,
                        key: key_of(&c.args, &[]),
                        rows: vec![],
                    })
                    .collect()
            })
            .unwrap_or_default(),
        hidden: false,
        outcome: Outcome::Error(err),
        ready: None,
        notices: vec![],
    }))
}

/// A value of a parameter in the given format (0 text, 1 binary) as an integer.
fn int_of(v: &Value, binary: bool) -> Option<i64> {
    if !binary {
        return v.v.trim().parse().ok();
    }
    let b = v.bytes();
    match b.len() {
        8 => Some(i64::from_be_bytes(b.try_into().ok()?)),
        4 => Some(i32::from_be_bytes(b.try_into().ok()?) as i64),
        2 => Some(i16::from_be_bytes(b.try_into().ok()?) as i64),
        _ => None,
    }
}

/// The format of parameter or column `i` from a format-code list (none: text; one: all).
fn format_at(formats: &[i16], i: usize) -> bool {
    match formats.len() {
        0 => false,
        1 => formats[0] == 1,
        _ => formats.get(i) == Some(&1),
    }
}

/// The key of a call from its arguments; `params`: the bound values and their formats.
fn key_of(args: &[Arg], params: &[(Option<Value>, bool)]) -> KeyOf {
    if args.is_empty() {
        return KeyOf::None;
    }
    let vals: Vec<Option<i64>> = args
        .iter()
        .map(|a| match a {
            Arg::Int(v) => Some(*v),
            Arg::Param(k) => params
                .get((*k as usize).wrapping_sub(1))
                .and_then(|(v, bin)| v.as_ref().and_then(|v| int_of(v, *bin))),
            Arg::Expr(_) => None,
        })
        .collect();
    let texts = || {
        args.iter()
            .map(|a| match a {
                Arg::Int(v) => v.to_string(),
                Arg::Param(k) => format!("${k}"),
                Arg::Expr(s) => s.clone(),
            })
            .collect()
    };
    match vals.as_slice() {
        [Some(k)] => KeyOf::Known(Key::Big(*k)),
        [Some(a), Some(b)] => match (i32::try_from(*a), i32::try_from(*b)) {
            (Ok(a), Ok(b)) => KeyOf::Known(Key::Pair(a, b)),
            _ => KeyOf::Unknown(texts()),
        },
        _ => KeyOf::Unknown(texts()),
    }
}

/// A boolean column value (text `t`/`f`, binary 1/0).
fn bool_of(v: &Value, binary: bool) -> Option<bool> {
    if binary {
        return match v.bytes().as_slice() {
            [1] => Some(true),
            [0] => Some(false),
            _ => None,
        };
    }
    match v.v.as_str() {
        "t" | "true" => Some(true),
        "f" | "false" => Some(false),
        _ => None,
    }
}

/// The rows of a call's column, and its key from a key column when the text had none.
fn call_rows(
    call: &sqlscan::Call,
    key: &KeyOf,
    rows: &[Vec<Option<Value>>],
    binary: &dyn Fn(usize) -> bool,
) -> Vec<CallRow> {
    let Some(col) = call.column else {
        return vec![];
    };
    rows.iter()
        .map(|r| {
            let result = match r.get(col) {
                Some(Some(v)) if call.func.returns_bool() => bool_of(v, binary(col)),
                _ => None,
            };
            let key = match key {
                KeyOf::Unknown(_) => {
                    let parts: Option<Vec<i64>> = call
                        .arg_columns
                        .iter()
                        .zip(&call.args)
                        .map(|(c, a)| match (a, c) {
                            (Arg::Int(v), _) => Some(*v),
                            (_, Some(c)) => r
                                .get(*c)
                                .cloned()
                                .flatten()
                                .and_then(|v| int_of(&v, binary(*c))),
                            _ => None,
                        })
                        .collect();
                    match parts.as_deref() {
                        Some([k]) => Some(Key::Big(*k)),
                        Some([a, b]) => Some(Key::Pair(*a as i32, *b as i32)),
                        _ => None,
                    }
                }
                _ => None,
            };
            CallRow { result, key }
        })
        .collect()
}

/// What a reply segment said: rows kept, outcome, notices, when it ended.
struct Seg {
    rows: Vec<Vec<Option<Value>>>,
    outcome: Outcome,
    notices: Vec<Notice>,
    t_done: Option<u64>,
}

/// Read replies from `at` up to the end of one statement's reply.
fn segment(replies: &[&Event], at: &mut usize) -> Seg {
    let mut seg = Seg {
        rows: vec![],
        outcome: Outcome::NoReply,
        notices: vec![],
        t_done: None,
    };
    while *at < replies.len() {
        let r = replies[*at];
        *at += 1;
        let Body::Be { msg, .. } = &r.body else {
            continue;
        };
        seg.t_done = Some(r.t);
        match msg {
            Be::DataRow {
                values: Some(v), ..
            } => seg.rows.push(v.clone()),
            Be::NoticeResponse(x) => seg.notices.push(x.clone()),
            Be::CommandComplete { tag } => {
                seg.outcome = Outcome::Ok { tag: tag.clone() };
                return seg;
            }
            Be::EmptyQueryResponse => {
                seg.outcome = Outcome::Ok { tag: String::new() };
                return seg;
            }
            Be::PortalSuspended => {
                seg.outcome = Outcome::Ok {
                    tag: "suspended".into(),
                };
                return seg;
            }
            Be::ErrorResponse(x) => {
                seg.outcome = Outcome::Error(x.clone());
                return seg;
            }
            Be::ReadyForQuery { .. } => {
                *at -= 1;
                return seg;
            }
            _ => {}
        }
    }
    seg
}

/// The statements of a simple Query and their share of its reply.
fn simple(
    e: &Event,
    lane: u64,
    n: u64,
    sql: &str,
    replies: &[&Event],
    objs: &mut LaneObjects,
    out: &mut Vec<Item>,
) {
    let ready = replies.iter().rev().find_map(|r| match &r.body {
        Body::Be {
            msg: Be::ReadyForQuery { status },
            ..
        } => Some(*status),
        _ => None,
    });
    let mut at = 0;
    let mut failed: Option<Notice> = None;
    for (index, s) in sqlscan::statements(sql).into_iter().enumerate() {
        let seg = match &failed {
            Some(x) => Seg {
                rows: vec![],
                outcome: Outcome::NotRun {
                    because: Some(x.clone()),
                },
                notices: vec![],
                t_done: None,
            },
            None => segment(replies, &mut at),
        };
        if let Outcome::Error(x) = &seg.outcome {
            failed = Some(x.clone());
        }
        // EXECUTE of a PREPAREd statement: its body's calls, with the arguments as parameters.
        let (calls, params): (Vec<sqlscan::Call>, Vec<(Option<Value>, bool)>) = match &s.kind {
            Kind::Execute { name, args } => {
                let body = objs.sql_prepared.get(name).cloned().unwrap_or_default();
                let calls = sqlscan::statements(&body)
                    .into_iter()
                    .next()
                    .map(|b| b.calls)
                    .unwrap_or_default();
                let params = args
                    .iter()
                    .map(|a| match a {
                        Arg::Int(v) => (Some(Value::from_bytes(v.to_string().as_bytes())), false),
                        _ => (None, false),
                    })
                    .collect();
                (calls, params)
            }
            _ => (s.calls.clone(), vec![]),
        };
        match &s.kind {
            Kind::Prepare { name, body } if matches!(seg.outcome, Outcome::Ok { .. }) => {
                objs.sql_prepared.insert(name.clone(), body.clone());
            }
            Kind::Deallocate { name } if matches!(seg.outcome, Outcome::Ok { .. }) => {
                if name == "all" {
                    objs.sql_prepared.clear();
                } else {
                    objs.sql_prepared.remove(name);
                }
            }
            _ => {}
        }
        let lock_calls = calls
            .iter()
            .map(|c| {
                let key = key_of(&c.args, &params);
                let rows = call_rows(c, &key, &seg.rows, &|_| false);
                LockCall {
                    func: c.func,
                    key,
                    rows,
                }
            })
            .collect();
        out.push(Item::Statement(Box::new(Statement {
            lane,
            n,
            index,
            protocol: Protocol::Simple,
            t: e.t,
            wall: e.wall,
            t_done: seg.t_done,
            sql: cut(&s.text),
            kind: s.kind,
            calls: lock_calls,
            hidden: s.hidden,
            outcome: seg.outcome,
            ready,
            notices: seg.notices,
        })));
    }
}

/// An Execute of a bound portal.
fn execute(
    e: &Event,
    lane: u64,
    n: u64,
    p: Option<Portal>,
    replies: &[&Event],
    not_run: Option<Option<Notice>>,
    ready: Option<char>,
) -> Item {
    let p = p.unwrap_or(Portal {
        sql: String::new(),
        formats: vec![],
        params: vec![],
        result_formats: vec![],
    });
    let s = sqlscan::statements(&p.sql).into_iter().next();
    let seg = match not_run {
        Some(because) => Seg {
            rows: vec![],
            outcome: Outcome::NotRun { because },
            notices: vec![],
            t_done: None,
        },
        None => segment(replies, &mut 0),
    };
    let params: Vec<(Option<Value>, bool)> = p
        .params
        .iter()
        .enumerate()
        .map(|(i, v)| (v.clone(), format_at(&p.formats, i)))
        .collect();
    let result_formats = p.result_formats.clone();
    let binary = move |c: usize| format_at(&result_formats, c);
    let calls = s
        .as_ref()
        .map(|s| {
            s.calls
                .iter()
                .map(|c| {
                    let key = key_of(&c.args, &params);
                    let rows = call_rows(c, &key, &seg.rows, &binary);
                    LockCall {
                        func: c.func,
                        key,
                        rows,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Item::Statement(Box::new(Statement {
        lane,
        n,
        index: 0,
        protocol: Protocol::Extended,
        t: e.t,
        wall: e.wall,
        t_done: seg.t_done,
        sql: cut(&p.sql),
        kind: s.as_ref().map(|s| s.kind.clone()).unwrap_or(Kind::Opaque {
            verb: String::new(),
        }),
        calls,
        hidden: s.as_ref().is_some_and(|s| s.hidden),
        outcome: seg.outcome,
        ready,
        notices: seg.notices,
    }))
}
