//! Mutation testing of the checker, as Jepsen tests its checkers: edit a recorded case in one
//! place, in a way no real server could have produced, and see whether the checker says so
//! (a `pg.*` violation). Each [`Kind`] is one kind of edit; [`sites`] finds where a case can be
//! edited so that the result is certainly impossible (an op with nothing running beside it,
//! a look at servers nothing was changing), chosen from the history alone, never from the
//! checker; [`apply`] makes the edit. `pgchaos mutate RUN` and the test suite count the share
//! of mutated cases caught, per kind and schedule.

mod order;
mod site;

pub use site::{Kind, Site};

use super::CheckContext;
use crate::history::{
    At, Body, Completion, Event, HistoryReader, LockRow, ObsEvent, Phase, Process,
};
use crate::vocab::{BackendId, Key, Op, Reply};
use anyhow::{Result, anyhow};
use std::collections::BTreeSet;

/// An op's interval by position in the history (completion `None`: never), with what it
/// touches: its key and the backend that served it or that it targets. Faults, signals and
/// connection changes touch everything (what they end is the search's to work out).
struct Span {
    p: Process,
    inv: usize,
    done: Option<usize>,
    op: Op,
    key: Option<Key>,
    backend: Option<BackendId>,
}

impl Span {
    /// A fault of the servers: what it ends is the search's to work out.
    fn global(&self) -> bool {
        self.op.is_server_fault()
    }
    fn touches(&self, keys: &[Key], backends: &[BackendId]) -> bool {
        self.global()
            || self.key.is_some_and(|k| keys.contains(&k))
            || self.backend.is_none_or(|b| backends.contains(&b))
    }
    /// Running at some point between events `a` and `b` (inclusive).
    fn during(&self, a: usize, b: usize) -> bool {
        self.inv <= b && self.done.is_none_or(|d| d >= a)
    }
}

fn spans(events: &[Event]) -> Vec<Span> {
    let mut out: Vec<Span> = vec![];
    // The backend that last served each client: what its disconnect touches.
    let mut last: std::collections::BTreeMap<Process, BackendId> = Default::default();
    for (i, e) in events.iter().enumerate() {
        if let Some(c) = e.completion()
            && let Some(b) = c.backend
        {
            last.insert(c.p, b);
        }
        match &e.body {
            Body::Invoke(inv) if inv.f != Op::Open => out.push(Span {
                p: inv.p,
                inv: i,
                done: None,
                op: inv.f,
                key: inv.key,
                backend: inv.target.or(match inv.f {
                    Op::Disconnect | Op::Reconnect | Op::Release => last.get(&inv.p).copied(),
                    _ => None,
                }),
            }),
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) if c.f != Op::Open => {
                if let Some(s) = out
                    .iter_mut()
                    .rev()
                    .find(|s| s.p == c.p && s.op == c.f && s.done.is_none())
                {
                    s.done = Some(i);
                    s.backend = s.backend.or(c.backend);
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether nothing but `except` that touches `keys` or `backends` runs between events `a` and
/// `b` (inclusive), by position in the history (its real-time order, samples aside): then the
/// servers' state of those keys and backends is decided there.
fn quiet(
    sp: &[Span],
    a: usize,
    b: usize,
    except: Option<usize>,
    keys: &[Key],
    backends: &[BackendId],
) -> bool {
    sp.iter()
        .enumerate()
        .all(|(i, s)| Some(i) == except || !s.during(a, b) || !s.touches(keys, backends))
}

/// Whether the servers' state is decided before event `at`: since the last look before it, no
/// op whose effect the history cannot place (no identity, an unknown outcome, a fault or a
/// connection change) has run. A look decides what it shows.
fn decided(sp: &[Span], events: &[Event], at: usize, keys: &[Key], backends: &[BackendId]) -> bool {
    let last_look = (0..at)
        .rev()
        .find(|&j| matches!(events[j].body, Body::Obs(_)));
    let from = last_look.unwrap_or(0);
    sp.iter().all(|s| {
        // A lock call that failed may have been granted as it failed: uncertain too.
        let uncertain = s.global()
            || s.backend.is_none()
            || s.done.is_none_or(|d| {
                events[d].completion().is_some_and(|c| {
                    c.value.outcome() == crate::vocab::Outcome::Info
                        || (c.f.waits_for_lock()
                            && matches!(
                                c.value.code(),
                                Some(crate::vocab::reply::code::LOCK_NOT_AVAILABLE)
                                    | Some(crate::vocab::reply::code::QUERY_CANCELED)
                            ))
                })
            });
        !uncertain || !s.touches(keys, backends) || s.inv >= at || s.done.is_some_and(|d| d < from)
    })
}

/// Where a sample's interval begins (the first event written at or after its start).
fn read_start(events: &[Event], i: usize) -> usize {
    match &events[i].body {
        Body::Obs(o) if o.at == At::Sample => {
            let t0 = events[i].t;
            (0..i).find(|&j| events[j].t >= t0).unwrap_or(i)
        }
        _ => i,
    }
}

/// The next look begun after event `i` (a concurrent sample is written when it ends, and
/// dated when it began), if any.
fn next_read(events: &[Event], i: usize) -> Option<usize> {
    let t = events[i].t;
    (i + 1..events.len()).find(|&j| matches!(events[j].body, Body::Obs(_)) && events[j].t > t)
}

fn held(events: &[Event], j: usize) -> BTreeSet<(BackendId, Key)> {
    match &events[j].body {
        Body::Obs(o) => o.obs.held(),
        _ => BTreeSet::new(),
    }
}

fn backends_seen(events: &[Event]) -> Vec<BackendId> {
    let mut out: Vec<BackendId> = vec![];
    for e in events {
        let mut add = |b: BackendId| {
            if !out.contains(&b) {
                out.push(b)
            }
        };
        match &e.body {
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) => {
                if let Some(b) = c.backend {
                    add(b)
                }
            }
            Body::Obs(o) => o.obs.backends.iter().for_each(|r| add(r.id)),
            _ => {}
        }
    }
    out
}

fn granted(op: Op, r: &Reply) -> bool {
    matches!(r, Reply::Bool { value: true }) || (op.waits_for_lock() && *r == Reply::Ok)
}

/// What the search for sites reads of a case: its events, their spans and the backends seen.
struct Case<'a> {
    events: &'a [Event],
    sp: Vec<Span>,
    all: Vec<BackendId>,
}

impl Case<'_> {
    /// The span that event `i` completes, and the invocation it began with.
    fn completed(&self, i: usize) -> Option<(usize, &crate::history::Invoke)> {
        let m = self.sp.iter().position(|s| s.done == Some(i))?;
        let Some(Body::Invoke(inv)) = self.events.get(self.sp[m].inv).map(|e| &e.body) else {
            return None;
        };
        Some((m, inv))
    }
}

/// The site of an edit at event `event`, with the backend, key and value it puts there.
fn site_at(
    event: usize,
    backend: Option<BackendId>,
    key: Option<Key>,
    value: Option<String>,
) -> Site {
    Site {
        event,
        backend,
        key,
        value,
    }
}

/// Every place a case (its events, `case` to `case_end`) can take an edit of `kind`.
pub fn sites(kind: Kind, events: &[Event]) -> Vec<Site> {
    if Kind::ORDERED.contains(&kind) {
        return order::sites(kind, events);
    }
    let case = Case {
        events,
        sp: spans(events),
        all: backends_seen(events),
    };
    let mut out = vec![];
    for (i, e) in events.iter().enumerate() {
        let site = match (kind, &e.body) {
            (Kind::FlipReply, Body::Ok(c)) => flip_reply(&case, i, c),
            (Kind::MoveGrant, Body::Ok(c)) if c.f.acquires() && granted(c.f, &c.value) => {
                move_grant(&case, i, c)
            }
            (Kind::DropHeldRow | Kind::CopyRow, Body::Obs(o)) => held_row(&case, kind, i, o),
            (Kind::DropRelease, Body::Ok(c))
                if c.f == Op::Unlock && c.value == (Reply::Bool { value: true }) =>
            {
                drop_release(&case, i, c)
            }
            (Kind::SplitTransaction, Body::Ok(c) | Body::Fail(c)) => split_transaction(&case, i, c),
            (Kind::DropAfterReconnect, Body::Obs(o)) => drop_after_reconnect(&case, i, o),
            (Kind::ForgeRead | Kind::ReadFromLater, Body::Ok(c)) => forge_read(&case, kind, i, c),
            (Kind::ForgeNotification, Body::Notification(_)) => {
                let sent: BTreeSet<usize> = clients_that(events, |f| f == Op::Notify);
                let nobody = (0..=clients_seen(events)).find(|c| !sent.contains(c));
                nobody.map(|c| site_at(i, None, None, Some(crate::vocab::notify::payload(c, 0))))
            }
            (Kind::RepeatNotification, Body::Notification(_)) => Some(site_at(i, None, None, None)),
            _ => None,
        };
        out.extend(site);
    }
    out
}

/// A boolean reply (`try_lock`, `unlock`, `try_xact_lock`) to flip: nothing else touched its
/// key or backend while it ran, and the servers' state was decided when it began.
fn flip_reply(case: &Case, i: usize, c: &Completion) -> Option<Site> {
    let sp = &case.sp;
    let flippable = matches!(c.f, Op::TryLock | Op::Unlock | Op::TryXactLock)
        && matches!(c.value, Reply::Bool { .. });
    let me = sp.iter().position(|s| s.done == Some(i));
    if flippable
        && let Some(m) = me
        && let (Some(k), Some(b)) = (sp[m].key, c.backend)
        && quiet(sp, sp[m].inv, i, Some(m), &[k], &[b])
        && decided(sp, case.events, sp[m].inv, &[k], &[b])
    {
        return Some(site_at(i, None, None, None));
    }
    None
}

/// A grant (event `i`) to move to another backend: the next look shows it, and another
/// backend of that look holds nothing.
fn move_grant(case: &Case, i: usize, c: &Completion) -> Option<Site> {
    let (sp, events) = (&case.sp, case.events);
    let b = c.backend?;
    let (m, inv) = case.completed(i)?;
    let k = inv.key?;
    let r = next_read(events, i)?;
    let look = held(events, r);
    // The next look shows the grant.
    if !look.contains(&(b, k)) || !decided(sp, events, sp[m].inv, &[k], &[b]) {
        return None;
    }
    let present: Vec<BackendId> = match &events[r].body {
        Body::Obs(o) => o.obs.backends.iter().map(|x| x.id).collect(),
        _ => vec![],
    };
    // Another backend of that look holding nothing, and nothing else on the key
    // or either backend meanwhile.
    let other = case.all.iter().find(|x| {
        **x != b
            && present.contains(x)
            && !look.iter().any(|(y, _)| y == *x)
            && quiet(sp, sp[m].inv, r, Some(m), &[], &[b, **x])
    })?;
    Some(site_at(i, Some(*other), Some(k), None))
}

/// A granted row of a look (event `i`) to drop (`DropHeldRow`: a row nothing was changing
/// while the look was taken) or to copy onto another backend of the look (`CopyRow`).
fn held_row(case: &Case, kind: Kind, i: usize, o: &ObsEvent) -> Option<Site> {
    let (sp, events) = (&case.sp, case.events);
    let start = read_start(events, i);
    let rows = o.obs.held();
    // A row nothing was changing while the look was taken.
    let (b, k) = rows.iter().copied().find(|(b, k)| {
        kind == Kind::CopyRow
            || (quiet(sp, start, i, None, &[*k], &[*b]) && decided(sp, events, start, &[*k], &[*b]))
    })?;
    let other = o.obs.backends.iter().map(|x| x.id).find(|x| *x != b);
    match kind {
        Kind::DropHeldRow => Some(site_at(i, Some(b), Some(k), None)),
        _ => other.map(|o2| site_at(i, Some(o2), Some(k), None)),
    }
}

/// An unlock that returned true (event `i`) to drop: the next look shows the release alone,
/// and until then nothing could release the key on that backend or take it again.
fn drop_release(case: &Case, i: usize, c: &Completion) -> Option<Site> {
    let (sp, events) = (&case.sp, case.events);
    let b = c.backend?;
    let (m, inv) = case.completed(i)?;
    let r = next_read(events, i)?;
    // The release shows in the next look (the count reached zero), alone.
    // Until that look nothing could release the key on that backend, or take it
    // again: then a model that never saw the unlock must hold it there.
    let undisturbed = |k: Key| {
        sp.iter().enumerate().all(|(j, s)| {
            let on_b = s.backend.is_none_or(|x| x == b);
            let releases = matches!(
                s.op,
                Op::UnlockAll
                    | Op::DiscardAll
                    | Op::Disconnect
                    | Op::Reconnect
                    | Op::Release
                    | Op::Terminate
            ) || (s.op == Op::Unlock && s.key == Some(k))
                || (s.op.acquires() && s.key == Some(k));
            j == m || !s.during(sp[m].inv, r) || s.global() || !(on_b && releases)
        }) && sp.iter().all(|s| !s.during(sp[m].inv, r) || !s.global())
    };
    inv.key
        .is_some_and(|k| {
            decided(sp, events, sp[m].inv, &[k], &[b])
                && !held(events, r).contains(&(b, k))
                && undisturbed(k)
        })
        .then(|| site_at(sp[m].inv, None, inv.key, None))
}

/// A client's statement (event `i`) inside its open transaction on a backend, to answer from
/// another backend of the case.
fn split_transaction(case: &Case, i: usize, c: &Completion) -> Option<Site> {
    let events = case.events;
    if !matches!(c.p, Process::Client(_)) {
        return None;
    }
    let b = c.backend?;
    if matches!(c.f, Op::Begin | Op::Commit | Op::Rollback) {
        return None;
    }
    // Inside this client's open transaction on `b`: a BEGIN on b before it with no
    // end of the transaction (or of the connection) between.
    let began = (0..i).rev().find_map(|j| match &events[j].body {
        Body::Ok(x) if x.p == c.p && x.f == Op::Begin && x.backend == Some(b) => Some(true),
        Body::Ok(x) | Body::Fail(x) | Body::Info(x)
            if x.p == c.p
                && (matches!(
                    x.f,
                    Op::Commit | Op::Rollback | Op::Disconnect | Op::Reconnect
                ) || x.value.is_error()) =>
        {
            Some(false)
        }
        _ => None,
    });
    if began == Some(true)
        && let Some(other) = case.all.iter().find(|x| **x != b)
    {
        return Some(site_at(i, Some(*other), None, None));
    }
    None
}

/// A server linked to an open transaction in a look (event `i`) taken after a RECONNECT, to
/// drop from it.
fn drop_after_reconnect(case: &Case, i: usize, o: &ObsEvent) -> Option<Site> {
    let (sp, events) = (&case.sp, case.events);
    // The RECONNECT completed before the look began, and nothing was using the
    // backend while the look was taken.
    let start = read_start(events, i);
    let after =
        (0..start).any(|j| matches!(&events[j].body, Body::Ok(x) if x.f == Op::PoolerReconnect));
    if !after {
        return None;
    }
    let row = o.obs.backends.iter().find(|r| {
        r.in_open_transaction()
            && quiet(sp, start, i, None, &[], &[r.id])
            && decided(sp, events, start, &[], &[r.id])
    })?;
    Some(site_at(i, Some(row.id), None, None))
}

/// A client's read of session state (event `i`) to answer with a value no client could have
/// written before it (`ForgeRead`: never; `ReadFromLater`: only after the read completed).
fn forge_read(case: &Case, kind: Kind, i: usize, c: &Completion) -> Option<Site> {
    if !matches!(c.p, Process::Client(_)) || !matches!(c.value, Reply::Text { .. }) {
        return None;
    }
    let (_, inv) = case.completed(i)?;
    let before = (kind == Kind::ReadFromLater).then_some(i);
    let v = forged_read(case.events, inv, before)?;
    Some(site_at(i, None, None, Some(v)))
}

/// Clients (0-based) that invoked an op `f` matches somewhere in the case.
fn clients_that(events: &[Event], f: impl Fn(Op) -> bool) -> BTreeSet<usize> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            Body::Invoke(inv) if f(inv.f) => match inv.p {
                Process::Client(c) => Some(c),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// One past the highest client index the case names (a client that does not exist is a
/// writer nobody could be).
fn clients_seen(events: &[Event]) -> usize {
    events
        .iter()
        .filter_map(|e| match &e.body {
            Body::Invoke(inv) => match inv.p {
                Process::Client(c) => Some(c + 1),
                _ => None,
            },
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The value a read would show had a client that never wrote it in the case written it: the
/// first such client of the case (or one past them all), for `show` its value of the read's
/// setting, for an object's use its label. With `later` (the read's completion): a client
/// that wrote it in the case, but only in ops invoked after that completion. `None`: not a
/// read of session state, or no such client.
fn forged_read(
    events: &[Event],
    inv: &crate::history::Invoke,
    later: Option<usize>,
) -> Option<String> {
    let writers = |is_write: &dyn Fn(&crate::history::Invoke) -> bool,
                   range: std::ops::Range<usize>| {
        events[range]
            .iter()
            .filter_map(|e| match &e.body {
                Body::Invoke(w) if is_write(w) => match w.p {
                    Process::Client(c) => Some(c),
                    _ => None,
                },
                _ => None,
            })
            .collect::<BTreeSet<usize>>()
    };
    let pick = |is_write: &dyn Fn(&crate::history::Invoke) -> bool| match later {
        None => {
            let wrote = writers(is_write, 0..events.len());
            (0..=clients_seen(events)).find(|c| !wrote.contains(c))
        }
        Some(done) => {
            let before = writers(is_write, 0..done);
            writers(is_write, done..events.len())
                .into_iter()
                .find(|c| !before.contains(c))
        }
    };
    if inv.f == Op::Show {
        let g = inv.guc?;
        let is_write =
            |w: &crate::history::Invoke| matches!(w.f, Op::Set | Op::SetLocal) && w.guc == Some(g);
        return pick(&is_write).map(|c| g.text_of(c));
    }
    let (kind, role) = inv.f.object()?;
    if role != crate::vocab::object::Role::Use {
        return None;
    }
    let create = kind.row().create;
    pick(&|w: &crate::history::Invoke| w.f == create).map(crate::vocab::object::label_of)
}

/// The case with one edit of `kind` at `site`.
pub fn apply(kind: Kind, events: &[Event], site: &Site) -> Vec<Event> {
    let mut ev = events.to_vec();
    match kind {
        Kind::FlipReply => {
            if let Body::Ok(c) = &mut ev[site.event].body
                && let Reply::Bool { value } = &mut c.value
            {
                *value = !*value;
            }
        }
        Kind::MoveGrant | Kind::SplitTransaction => {
            if let Body::Ok(c) | Body::Fail(c) = &mut ev[site.event].body {
                c.backend = site.backend;
            }
        }
        Kind::DropHeldRow => {
            if let Body::Obs(o) = &mut ev[site.event].body
                && let Some(row) = o
                    .obs
                    .backends
                    .iter_mut()
                    .find(|r| Some(r.id) == site.backend)
            {
                row.locks
                    .retain(|l| !(l.granted && Some(l.key) == site.key));
            }
        }
        Kind::CopyRow => {
            if let Body::Obs(o) = &mut ev[site.event].body
                && let Some(row) = o
                    .obs
                    .backends
                    .iter_mut()
                    .find(|r| Some(r.id) == site.backend)
                && let Some(k) = site.key
            {
                row.locks.push(LockRow {
                    key: k,
                    mode: "ExclusiveLock".into(),
                    granted: true,
                });
            }
        }
        Kind::DropRelease => {
            // The unlock's invoke and its completion.
            let Body::Invoke(inv) = &ev[site.event].body else {
                return ev;
            };
            let (p, f) = (inv.p, inv.f);
            let done = (site.event + 1..ev.len())
                .find(|&j| ev[j].completion().is_some_and(|c| c.p == p && c.f == f));
            if let Some(d) = done {
                ev.remove(d);
            }
            ev.remove(site.event);
        }
        Kind::DropAfterReconnect => {
            if let Body::Obs(o) = &mut ev[site.event].body {
                o.obs.backends.retain(|r| Some(r.id) != site.backend);
            }
        }
        Kind::ForgeRead | Kind::ReadFromLater => {
            if let Body::Ok(c) = &mut ev[site.event].body
                && let (Reply::Text { value }, Some(v)) = (&mut c.value, &site.value)
            {
                value.clone_from(v);
            }
        }
        Kind::ForgeNotification => {
            if let Body::Notification(n) = &mut ev[site.event].body
                && let Some(v) = &site.value
            {
                n.payload.clone_from(v);
            }
        }
        Kind::RepeatNotification => {
            let again = ev[site.event].clone();
            ev.insert(site.event + 1, again);
        }
        _ => order::apply(kind, &mut ev, site),
    }
    ev
}

/// One kind's count: cases that could take it, and how many were caught.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub cases: u32,
    pub caught: u32,
    /// Of those, cases where no op of unknown place (`DISCARD ALL`, a timeout, a fault of the
    /// servers, a signal recorded without a time) overlaps or follows the edited op or the
    /// latest op of its key on its backend before it ([`order::unseen_after`]): nothing of
    /// unknown place may have hidden the edit. Edits of the other kind may be equivalent
    /// mutants; these are not, for that reason.
    pub clear: u32,
    pub clear_caught: u32,
}

impl Count {
    pub fn share(&self) -> f64 {
        if self.cases == 0 {
            0.0
        } else {
            100.0 * self.caught as f64 / self.cases as f64
        }
    }

    /// [`Count::share`] of the clear cases.
    pub fn clear_share(&self) -> f64 {
        if self.clear == 0 {
            0.0
        } else {
            100.0 * self.clear_caught as f64 / self.clear as f64
        }
    }
}

fn has_pg(c: &super::CaseCheck) -> bool {
    c.violations.iter().any(|v| v.invariant.starts_with("pg."))
}

/// Every generated case of a history with its check context.
pub fn cases(
    path: &std::path::Path,
) -> Result<(CheckContext, crate::history::RunHeader, Vec<Vec<Event>>)> {
    let events: Vec<Event> = HistoryReader::open(path)?.collect::<Result<_>>()?;
    let header = events
        .iter()
        .find_map(|e| match &e.body {
            Body::Run(h) => Some((**h).clone()),
            _ => None,
        })
        .ok_or_else(|| anyhow!("{}: no `run` event", path.display()))?;
    let cx = CheckContext::of(&header);
    let cases = crate::history::view::cases(&events)
        .into_iter()
        .filter(|c| c[0].case_start().is_some_and(|s| s.phase == Phase::Run))
        .map(|c| c.to_vec())
        .collect();
    Ok((cx, header, cases))
}

/// Per kind of edit: cases that took it, and how many the checker caught. Cases whose
/// unedited form already has a `pg.*` violation (or is unknown) are left out.
pub fn measure(
    cx: &CheckContext,
    cases: &[Vec<Event>],
    misses: bool,
    mut write: impl FnMut(Kind, &[Event]) -> Result<()>,
) -> Result<Vec<(Kind, Count)>> {
    let mut out: Vec<(Kind, Count)> = Kind::ALL
        .iter()
        .chain(Kind::ORDERED.iter())
        .map(|k| (*k, Count::default()))
        .collect();
    for (n, case) in cases.iter().enumerate() {
        let clean = super::check_case(cx, case)?;
        if has_pg(&clean) || clean.unknown.is_some() {
            continue;
        }
        for (kind, count) in out.iter_mut() {
            let sites = sites(*kind, case);
            let Some(site) = pick(&sites, n as u32) else {
                continue;
            };
            let edited = apply(*kind, case, site);
            write(*kind, &edited)?;
            let c = super::check_case(cx, &edited)?;
            count.cases += 1;
            count.caught += u32::from(has_pg(&c));
            let clear = !order::unseen_after(case, site.event, site.backend);
            if clear {
                count.clear += 1;
                count.clear_caught += u32::from(has_pg(&c));
            }
            if misses && !has_pg(&c) {
                let index = case[0].case_start().map(|s| s.case).unwrap_or(0);
                println!(
                    "  missed: case {index}, {}, at event {} ({:?}){}{}",
                    kind.name(),
                    site.event,
                    site,
                    if clear { ", clear" } else { "" },
                    c.unknown
                        .as_deref()
                        .map(|u| format!(", unknown: {u}"))
                        .unwrap_or_default()
                );
            }
        }
    }
    Ok(out)
}

/// Cases a setting's difference affects, and how many the checker flagged judged by `to`.
pub fn measure_as(
    cx: &CheckContext,
    to: &CheckContext,
    cases: &[Vec<Event>],
) -> Result<Option<Count>> {
    let mut count = Count::default();
    let mut known = false;
    for case in cases {
        let clean = super::check_case(cx, case)?;
        if has_pg(&clean) || clean.unknown.is_some() {
            continue;
        }
        match affected(&cx.rules, &to.rules, case) {
            None => return Ok(None),
            Some(false) => known = true,
            Some(true) => {
                known = true;
                count.cases += 1;
                count.caught += u32::from(has_pg(&super::check_case(to, case)?));
            }
        }
    }
    Ok(known.then_some(count))
}

/// The site a case takes for `kind` (one per case: spread over the case by its index).
pub fn pick(sites: &[Site], case: u32) -> Option<&Site> {
    if sites.is_empty() {
        return None;
    }
    sites.get((case as usize).wrapping_mul(7919) % sites.len())
}

/// A pooler setting judged as another value (`analyze --as`): which cases the difference
/// affects, decided from the history alone. `None`: a difference this does not measure.
pub fn affected(
    from: &crate::pooler::PoolRules,
    to: &crate::pooler::PoolRules,
    events: &[Event],
) -> Option<bool> {
    use crate::pooler::PoolMode as M;
    let pooled = from.mode.is_some() && to.mode.is_some();
    if !pooled {
        return None;
    }
    Some(match (from.mode, to.mode) {
        (Some(M::Transaction), Some(M::Session)) => moved_between_statements(events),
        (Some(M::Session), Some(M::Transaction)) => left_holding(events),
        (a, b) if a == b && from.reset_releases_locks && !to.reset_releases_locks => {
            a == Some(M::Session) && left_holding(events)
        }
        (a, b) if a == b && from.reset_always != to.reset_always => {
            if to.reset_always {
                kept_across_reuse(events)
            } else {
                reset_took_a_grant(events)
            }
        }
        _ => return None,
    })
}

/// A session lock seen on a server outside any transaction, still there after that server
/// served another statement (a reset at every release would have cleared it before the
/// server was handed out again).
fn kept_across_reuse(events: &[Event]) -> bool {
    for (i, e) in events.iter().enumerate() {
        let Body::Obs(o) = &e.body else { continue };
        for r in o.obs.backends.iter().filter(|r| !r.in_transaction()) {
            for l in r.locks.iter().filter(|l| l.granted) {
                // A later statement served by it, then a look still showing the lock.
                let reused = (i + 1..events.len()).find(|&j| {
                    matches!(&events[j].body, Body::Ok(c) | Body::Fail(c) if c.backend == Some(r.id))
                });
                let Some(j) = reused else { continue };
                let Some(after) = next_read(events, j) else {
                    continue;
                };
                // Nobody took the key on that backend in between (then the lock seen after is
                // the one seen before), and the reuse began after the first look.
                let retaken = (i..after).any(|x| match &events[x].body {
                    Body::Ok(c) if c.backend == Some(r.id) && c.f.acquires() => {
                        key_of(events, x) == Some(l.key)
                    }
                    _ => false,
                });
                let began_after = (i..j).any(|k| {
                    matches!(&events[k].body, Body::Invoke(inv) if events[j].completion().is_some_and(|c| c.p == inv.p && c.f == inv.f))
                });
                if !retaken && began_after && held(events, after).contains(&(r.id, l.key)) {
                    return true;
                }
            }
        }
    }
    false
}

/// The key of the op completed at event `done` (from its invoke).
fn key_of(events: &[Event], done: usize) -> Option<Key> {
    let c = events[done].completion()?;
    (0..done).rev().find_map(|y| match &events[y].body {
        Body::Invoke(inv) if inv.p == c.p && inv.f == c.f => Some(inv.key),
        _ => None,
    })?
}

/// A client's statements answered by two backends with no reconnect between (session pooling
/// would have kept one server).
fn moved_between_statements(events: &[Event]) -> bool {
    let mut last: std::collections::BTreeMap<Process, BackendId> = Default::default();
    for e in events {
        match &e.body {
            Body::Invoke(i) if matches!(i.f, Op::Disconnect | Op::Reconnect | Op::Open) => {
                last.remove(&i.p);
            }
            Body::Ok(c) | Body::Fail(c) | Body::Info(c) => {
                if c.value.ended_by_server() || c.value.is_closed() {
                    last.remove(&c.p);
                    continue;
                }
                if let Some(b) = c.backend {
                    if last.get(&c.p).is_some_and(|x| *x != b) {
                        return true;
                    }
                    last.insert(c.p, b);
                }
            }
            _ => {}
        }
    }
    false
}

/// A client disconnected while a session lock it had been granted was still on its backend
/// (the look before its disconnect shows it), and the look after shows it gone: the reset at
/// release took it.
fn left_holding(events: &[Event]) -> bool {
    let mut holding: Vec<(Process, BackendId, Key)> = vec![];
    let mut keys: std::collections::BTreeMap<(Process, usize), Key> = Default::default();
    for (i, e) in events.iter().enumerate() {
        match &e.body {
            Body::Invoke(inv) => {
                if let (Some(k), Some(s)) = (inv.key, inv.step) {
                    keys.insert((inv.p, s), k);
                }
                if matches!(inv.f, Op::Disconnect | Op::Reconnect) {
                    let mine: Vec<(BackendId, Key)> = holding
                        .iter()
                        .filter(|(p, _, _)| *p == inv.p)
                        .map(|(_, b, k)| (*b, *k))
                        .collect();
                    let before = (0..i)
                        .rev()
                        .find(|&j| matches!(events[j].body, Body::Obs(_)));
                    let after = next_read(events, i);
                    if let (Some(bf), Some(af)) = (before, after) {
                        let (hb, ha) = (held(events, bf), held(events, af));
                        // Released by a reset: out of a transaction before, and the backend
                        // still there after (not closed with its client).
                        let (Body::Obs(ob), Body::Obs(oa)) = (&events[bf].body, &events[af].body)
                        else {
                            continue;
                        };
                        if mine.iter().any(|x| {
                            hb.contains(x)
                                && !ha.contains(x)
                                && ob.obs.backend(x.0).is_some_and(|r| !r.in_transaction())
                                && oa.obs.alive(x.0)
                        }) {
                            return true;
                        }
                    }
                    holding.retain(|(p, _, _)| *p != inv.p);
                }
            }
            Body::Ok(c) if matches!(c.f, Op::TryLock | Op::Lock) && granted(c.f, &c.value) => {
                if let (Some(b), Some(k)) = (c.backend, c.step.and_then(|s| keys.get(&(c.p, s)))) {
                    holding.push((c.p, b, *k));
                }
            }
            _ => {}
        }
    }
    false
}

/// A session lock granted outside a transaction is gone by the next look, with no unlock by
/// anyone between: the reset at release took it.
fn reset_took_a_grant(events: &[Event]) -> bool {
    let mut keys: std::collections::BTreeMap<(Process, usize), Key> = Default::default();
    for (i, e) in events.iter().enumerate() {
        match &e.body {
            Body::Invoke(inv) => {
                if let (Some(k), Some(s)) = (inv.key, inv.step) {
                    keys.insert((inv.p, s), k);
                }
            }
            Body::Ok(c) if matches!(c.f, Op::TryLock | Op::Lock) && granted(c.f, &c.value) => {
                let (Some(b), Some(k)) = (c.backend, c.step.and_then(|s| keys.get(&(c.p, s))))
                else {
                    continue;
                };
                let Some(r) = next_read(events, i) else {
                    continue;
                };
                let released_between = events[i + 1..r].iter().any(|x| {
                    matches!(&x.body, Body::Invoke(inv) if matches!(inv.f, Op::Unlock | Op::UnlockAll | Op::DiscardAll | Op::Disconnect | Op::Reconnect | Op::Terminate) || inv.f.is_server_fault())
                });
                let in_tx = match &events[r].body {
                    Body::Obs(o) => o.obs.backend(b).is_some_and(|x| x.in_transaction()),
                    _ => false,
                };
                if !released_between && !in_tx && !held(events, r).contains(&(b, *k)) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests;
