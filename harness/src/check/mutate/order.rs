//! The edits whose detection depends on the order of overlapping ops (issue 36): where an
//! edited op overlaps, in client time, another op on the same backend, both orders may
//! explain every reply, unless the servers' own times fix the order (`Completion::server`,
//! docs/checker.md, "Server time"). Two groups:
//!
//! - the edits of the first measurement, made wherever they fit (no site left out for
//!   overlapping others): a granted `try_lock` reported refused, a grant reported from another
//!   backend of the case, an unlock that released reported false;
//! - the edits certainly impossible once the servers' order is known, chosen from the
//!   history's server times: an unlock's `true` flipped where a grant of the same key on the
//!   same backend overlaps it in client time and ran before it on the server; a grant moved to
//!   a backend whose server time shows it running another client's statement meanwhile; an
//!   unlock that found nothing and the grant of the same key right after it on its backend,
//!   overlapping it in client time,
//!   swapped in the server's order (their server times exchanged).

use super::{Kind, Site};
use crate::history::{Body, Completion, Event, Process};
use crate::vocab::{BackendId, Op, Reply, ServerTime};

/// A completed op: its invoke and completion events, its client and what it served.
struct Done<'e> {
    inv: usize,
    at: usize,
    p: Process,
    key: Option<crate::vocab::Key>,
    c: &'e Completion,
}

fn done_ops(events: &[Event]) -> Vec<Done<'_>> {
    let mut out = vec![];
    for (at, e) in events.iter().enumerate() {
        let Some(c) = e.completion() else { continue };
        let inv = (0..at).rev().find(|&j| {
            matches!(&events[j].body, Body::Invoke(i) if i.p == c.p && i.f == c.f && i.step == c.step)
        });
        let Some(inv) = inv else { continue };
        let key = match &events[inv].body {
            Body::Invoke(i) => i.key,
            _ => None,
        };
        out.push(Done {
            inv,
            at,
            p: c.p,
            key,
            c,
        });
    }
    out
}

fn granted(c: &Completion) -> bool {
    (c.f == Op::TryLock && c.value == Reply::Bool { value: true })
        || (c.f == Op::Lock && c.value == Reply::Ok)
}

fn released(c: &Completion) -> bool {
    c.f == Op::Unlock && c.value == Reply::Bool { value: true }
}

fn overlap(a: &Done, b: &Done) -> bool {
    a.inv < b.at && b.inv < a.at
}

/// Two server intervals of one clock, both bounded, that overlap.
fn at_once(a: &ServerTime, b: &ServerTime) -> bool {
    match (a.lo, a.hi, b.lo, b.hi) {
        (Some(a0), Some(a1), Some(b0), Some(b1)) => a.clock == b.clock && a0 < b1 && b0 < a1,
        _ => false,
    }
}

/// Whether an op that cannot be placed ([`unplaced`]: no identity row, as `DISCARD ALL`, a
/// timeout; a fault of the servers) other than `mine` overlaps, in client time, the span from
/// event `from` to event `to`: it may have run on any backend anywhere in that span, so the
/// server's clock cannot rule the edit out (an equivalent mutant: seen, a `DISCARD ALL` of
/// unknown backend that may have released the grant before the unlock).
fn blind(ops: &[Done], from: usize, to: usize, mine: &[usize]) -> bool {
    ops.iter()
        .any(|o| !mine.contains(&o.at) && unplaced(o.c) && o.inv < to && from < o.at)
}

/// An op whose effect cannot be placed on a backend and in the server's order: one without a
/// server time, or a fault of the servers (its time is only a lower bound, and it acts on
/// every backend, closing them as they notice).
fn unplaced(c: &Completion) -> bool {
    // A signal's time is not used by the search yet (`entries::server_order`).
    c.server.is_none() || c.f.is_fault()
}

/// Whether an op that cannot be placed, other than the one completing at event `at`, ended
/// after the op whose state the edit contradicts was invoked, or a statement never ended: it
/// may have run after that op on any backend, so the edit may be an equivalent mutant (seen:
/// a `DISCARD ALL` of unknown backend that may have released a grant reported from another
/// backend, or, overlapping the grant an edited unlock follows, released that grant before
/// the unlock). The op whose state the edit contradicts: the edited op itself, or the latest
/// op of the same key on its backend (or on `moved_to`, the backend an edit moves it to)
/// invoked before it. A client's own connection ops (open, disconnect, reconnect, release) run
/// no statement and do not count.
pub fn unseen_after(events: &[Event], at: usize, moved_to: Option<BackendId>) -> bool {
    let connection = |f: Op| matches!(f, Op::Open | Op::Disconnect | Op::Reconnect | Op::Release);
    let all = done_ops(events);
    let answered: Vec<usize> = all.iter().map(|d| d.inv).collect();
    let pending = events.iter().enumerate().any(|(j, e)| {
        matches!(&e.body, Body::Invoke(i) if !connection(i.f)) && !answered.contains(&j)
    });
    let Some(mine) = all.iter().find(|d| d.at == at) else {
        return false;
    };
    let on = |o: &Done, b: Option<BackendId>| b.is_some() && o.c.backend == b;
    let since = all
        .iter()
        .filter(|o| o.key.is_some() && o.key == mine.key && o.inv < mine.inv)
        .filter(|o| on(o, mine.c.backend) || on(o, moved_to))
        .map(|o| o.inv)
        .max()
        .unwrap_or(mine.inv);
    let ops: Vec<Done> = all.into_iter().filter(|d| !connection(d.c.f)).collect();
    pending || blind(&ops, since, events.len(), &[at])
}

fn site(event: usize, backend: Option<BackendId>, other: Option<usize>) -> Site {
    Site {
        event,
        backend,
        key: None,
        value: other.map(|o| o.to_string()),
    }
}

/// Every place a case can take an edit of `kind` (one of [`Kind::ORDERED`]).
pub fn sites(kind: Kind, events: &[Event]) -> Vec<Site> {
    let ops = done_ops(events);
    let backends: Vec<BackendId> = {
        let mut v: Vec<BackendId> = ops.iter().filter_map(|d| d.c.backend).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut out = vec![];
    for d in &ops {
        let c = d.c;
        match kind {
            Kind::GrantRefused if c.f == Op::TryLock && granted(c) => {
                out.push(site(d.at, None, None))
            }
            Kind::UnlockFalse if released(c) => out.push(site(d.at, None, None)),
            Kind::GrantElsewhere if granted(c) => {
                if let Some(b) = backends.iter().find(|b| Some(**b) != c.backend) {
                    out.push(site(d.at, Some(*b), None));
                }
            }
            Kind::UnlockBesideGrant if released(c) => {
                let (Some(b), Some(t)) = (c.backend, c.server) else {
                    continue;
                };
                let beside = ops.iter().any(|g| {
                    granted(g.c)
                        && g.key == d.key
                        && g.c.backend == Some(b)
                        && g.p != d.p
                        && overlap(g, d)
                        && g.c.server.is_some_and(|tg| tg.precedes_on(&t))
                        && !blind(&ops, g.inv.min(d.inv), d.at, &[g.at, d.at])
                });
                if beside {
                    out.push(site(d.at, None, None));
                }
            }
            Kind::GrantToBusy if granted(c) => {
                let Some(t) = c.server else { continue };
                // A backend running another client's statement at that server time.
                let busy = ops.iter().find_map(|o| {
                    let (ob, ot) = (o.c.backend?, o.c.server?);
                    (o.p != d.p && Some(ob) != c.backend && at_once(&ot, &t)).then_some(ob)
                });
                if let Some(b) = busy
                    && !blind(&ops, d.inv, d.at, &[d.at])
                {
                    out.push(site(d.at, Some(b), None));
                }
            }
            Kind::SwapOnBackend if c.f == Op::Unlock && c.value == Reply::Bool { value: false } => {
                let (Some(b), Some(t)) = (c.backend, c.server) else {
                    continue;
                };
                // The next op on that backend in the server's order, a grant of the same key.
                let next = ops
                    .iter()
                    .filter(|o| o.c.backend == Some(b))
                    .filter(|o| o.c.server.is_some_and(|to| t.precedes_on(&to)))
                    .min_by_key(|o| o.c.server.and_then(|to| to.any()));
                // Overlapping in client time: only the server's clock orders them.
                if let Some(n) = next
                    && n.c.f == Op::TryLock
                    && granted(n.c)
                    && n.key == d.key
                    && overlap(n, d)
                    && !blind(&ops, d.inv.min(n.inv), d.at.max(n.at), &[d.at, n.at])
                {
                    out.push(site(d.at, None, Some(n.at)));
                }
            }
            _ => {}
        }
    }
    out
}

/// The case with one edit of `kind` (one of [`Kind::ORDERED`]) at `site`.
pub fn apply(kind: Kind, ev: &mut [Event], site: &Site) {
    let other: Option<usize> = site.value.as_deref().and_then(|v| v.parse().ok());
    let Some(c) = completion_mut(&mut ev[site.event]) else {
        return;
    };
    match kind {
        Kind::GrantRefused | Kind::UnlockFalse | Kind::UnlockBesideGrant => {
            c.value = Reply::Bool { value: false }
        }
        Kind::GrantElsewhere | Kind::GrantToBusy => c.backend = site.backend,
        Kind::SwapOnBackend => {
            let Some(o) = other else { return };
            let mine = c.server;
            let theirs = ev[o].completion().and_then(|x| x.server);
            if let Some(c) = completion_mut(&mut ev[site.event]) {
                c.server = theirs;
            }
            if let Some(x) = completion_mut(&mut ev[o]) {
                x.server = mine;
            }
        }
        _ => {}
    }
}

fn completion_mut(e: &mut Event) -> Option<&mut Completion> {
    match &mut e.body {
        Body::Ok(c) | Body::Fail(c) | Body::Info(c) => Some(c),
        _ => None,
    }
}
