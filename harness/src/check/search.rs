//! The linearization search: is there an order of a case's operations that respects real
//! time and that the model accepts, reply by reply and read by read?
//!
//! Wing & Gong's question, answered the way Knossos's `linear` checker and Lowe's
//! just-in-time linearization answer it: the history's marks (an operation invoked, an
//! operation completed) are read in real-time order. While an operation is pending it may
//! take effect at any moment; when it completes, it must have. So at each completion the
//! search places pending operations in every order that leads to the completing one being
//! placed, and keeps every configuration that gets there. A configuration is how far each
//! pending operation has got (an operation has one to three *points*: a lock call that waits
//! starts waiting, then is answered; a pooler's safe restart drains, exits, starts) together
//! with the model's state; configurations that agree on the first are merged, and their
//! states kept as a set (Porcupine's powerset of a nondeterministic model), which is Lowe's
//! memoisation of (state, operations placed).
//!
//! The model is nondeterministic: a step returns every state it may lead to (a DISCARD ALL
//! without a known backend resets one of the idle servers: a successor per server), and
//! [`Spec::internal`] gives moves no operation makes (a closed backend finishing its exit, a
//! reset query run after the pooler answered), applied after every step until nothing new
//! comes of them.
//!
//! An operation whose outcome is unknown (Jepsen's `info`) may take effect anywhere after its
//! invoke, or never: it has no completion mark, so nothing ever requires its points placed. When no configuration can place a completing
//! operation, the search reports it with the reasons the model gave and the states it had
//! reached (Knossos's final paths), then places it by force (its recorded outcome ignored) so
//! the rest of the case is still judged. A search that grows past its budget of states or
//! time stops: what it could not judge is unknown, never "holds".

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A fast hasher for states (Fx, as rustc uses): the search hashes every state it reaches,
/// and SipHash's resistance to flooding buys nothing here.
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i)
    }
    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64)
    }
    fn write_i64(&mut self, i: i64) {
        self.add(i as u64)
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64)
    }
}

impl Fx {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FxBuild = std::hash::BuildHasherDefault<Fx>;
type Set<T> = HashSet<T, FxBuild>;
type Map<K, V> = HashMap<K, V, FxBuild>;

/// What the search needs of a model and a history's operations (`e` is an operation's index).
pub trait Spec {
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// Why a point cannot be placed in a state.
    type Why: Clone + PartialEq + std::fmt::Debug;
    /// How many points operation `e` has (1 to 3: a key keeps two bits of phase per slot).
    fn points(&self, e: usize) -> u8;
    /// Point `point` (0-based) of `e` placed in `s` at a moment no later than `now`: the states
    /// it may lead to (never empty), or why it cannot happen there.
    fn step(
        &self,
        s: &Self::State,
        e: usize,
        point: u8,
        now: u64,
    ) -> Result<Vec<Self::State>, Self::Why>;
    /// The point placed as if its recorded outcome were unknown (to go on after a violation):
    /// never fails.
    fn force(&self, s: &Self::State, e: usize, point: u8, now: u64) -> Vec<Self::State>;
    /// Moves of the servers that no operation makes, from `s` by `now` (one move each).
    fn internal(&self, s: &Self::State, now: u64) -> Vec<Self::State>;
    /// Whether [`Spec::internal`] depends on `now` (timeouts): then states are settled again
    /// as time passes.
    fn timed(&self) -> bool {
        false
    }
    /// Operations whose points all come before `e`'s first, whatever real time allows (the
    /// servers' own order of their work, where the history records it: docs/checker.md,
    /// "Server time"). Only those still pending are checked: one already completed has been
    /// placed, and one not yet invoked cannot precede `e` in any case.
    fn after(&self, _e: usize) -> &[usize] {
        &[]
    }
    /// Operations of unknown outcome that were certainly over once `e` completed (sent before
    /// it on the same connection, which answers in order): from then on each has taken all
    /// its effect or none, and takes no more. The search then stops carrying them as pending.
    fn retires(&self, _e: usize) -> &[usize] {
        &[]
    }
}

/// Whether every operation that must come before `e` ([`Spec::after`]) and is still pending
/// has all its points placed in configuration `key`.
fn ready<P: Spec>(spec: &P, pending: &[usize], key: Key, e: usize) -> bool {
    spec.after(e).iter().all(|f| {
        pending
            .iter()
            .position(|x| x == f)
            .is_none_or(|j| phase(key, j) >= spec.points(*f))
    })
}

/// A mark of the history, in real-time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Invoke(usize),
    Complete(usize),
}

/// How far a search may go before it answers unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// States held across all configurations at once.
    pub max_states: usize,
    /// The model's work for one case: calls of its step and internal moves. What decides a
    /// search's end on any machine, so a history is judged the same when it is checked
    /// again (`pgchaos analyze`) on a quieter or busier one.
    pub max_work: u64,
    /// Wall-clock time for one case: a safety net far past what `max_work` takes.
    pub max_time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_states: 20_000,
            max_work: DEFAULT_MAX_WORK,
            max_time: Duration::from_secs(DEFAULT_MAX_SECS),
        }
    }
}

/// [`Budget::max_work`] by default: the topology's `run.search_work` default.
pub const DEFAULT_MAX_WORK: u64 = crate::topology::limits::DEFAULT_SEARCH_WORK as u64;

/// [`Budget::max_time`] by default: the topology's `run.search_time` default.
pub const DEFAULT_MAX_SECS: u64 = crate::topology::limits::DEFAULT_SEARCH_TIME_MS / 1000;

impl From<crate::history::SearchBudget> for Budget {
    fn from(b: crate::history::SearchBudget) -> Self {
        Budget {
            max_states: b.max_states,
            max_work: b.max_work,
            max_time: Duration::from_millis(b.max_ms),
        }
    }
}

/// No order explains an operation.
#[derive(Clone, Debug)]
pub struct Failure<S, W> {
    pub entry: usize,
    /// What the model said of the entry's next point in the states the search had reached.
    pub why: Vec<W>,
    /// Those states (at most a few, for the report).
    pub states: Vec<S>,
    /// How many states the search had reached.
    pub reached: usize,
}

/// A [`Failure`] of a spec's states and reasons.
pub type SpecFailure<P> = Failure<<P as Spec>::State, <P as Spec>::Why>;

/// Why a search stopped short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    States(usize),
    Work(u64),
    Time(Duration),
    /// More operations pending at once than a configuration can say (32).
    Pending(usize),
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::States(n) => write!(f, "more than {n} states"),
            Over::Work(n) => write!(f, "more than {n} model steps"),
            Over::Time(d) => write!(f, "more than {:.1} s", d.as_secs_f64()),
            Over::Pending(n) => write!(f, "{n} operations pending at once"),
        }
    }
}

/// A phase per pending operation, two bits each.
type Key = u64;

fn phase(k: Key, slot: usize) -> u8 {
    ((k >> (2 * slot)) & 3) as u8
}

fn with_phase(k: Key, slot: usize, p: u8) -> Key {
    (k & !(3 << (2 * slot))) | ((p as u64) << (2 * slot))
}

/// The key with `slot` removed (higher slots move down one).
fn without(k: Key, slot: usize) -> Key {
    let low = k & ((1u64 << (2 * slot)) - 1);
    let high = if 2 * slot + 2 >= 64 {
        0
    } else {
        (k >> (2 * slot + 2)) << (2 * slot)
    };
    low | high
}

/// The search over one case, fed mark by mark.
pub struct Search<'a, P: Spec> {
    spec: &'a P,
    budget: Budget,
    started: Instant,
    pending: Vec<usize>,
    configs: Map<Key, Set<P::State>>,
    forced: HashSet<usize>,
    /// Slots from here on were added since the last closure: every configuration is already
    /// closed under the slots before it (so a closure need only try the new ones on it).
    fresh_from: usize,
    /// Points placed (for what was judged).
    pub placed: u64,
    /// The model's work so far: calls of its step and internal moves.
    pub work: u64,
    over: Option<Over>,
}

impl<'a, P: Spec> Search<'a, P> {
    pub fn new(spec: &'a P, initial: P::State, budget: Budget) -> Self {
        let mut configs = Map::default();
        let mut s = Set::default();
        let mut work = 0;
        for st in settle_counted(spec, vec![initial], 0, &mut work) {
            s.insert(st);
        }
        configs.insert(0, s);
        Search {
            spec,
            budget,
            started: Instant::now(),
            pending: vec![],
            configs,
            forced: HashSet::new(),
            fresh_from: 0,
            placed: 0,
            work,
            over: None,
        }
    }

    /// Why the search stopped, if it did.
    pub fn over(&self) -> Option<Over> {
        self.over
    }

    /// Every state the history so far allows (across configurations).
    pub fn states(&self) -> impl Iterator<Item = &P::State> {
        self.configs.values().flatten()
    }

    pub fn state_count(&self) -> usize {
        self.configs.values().map(|s| s.len()).sum()
    }

    /// Feed one mark at time `now`. `Ok(None)`: explained; `Ok(Some(f))`: no order explains
    /// the completing operation (it was then placed by force); `Err`: over budget (the search
    /// has stopped; later marks are ignored).
    pub fn mark(&mut self, m: Mark, now: u64) -> Result<Option<SpecFailure<P>>, Over> {
        if let Some(o) = self.over {
            return Err(o);
        }
        match m {
            Mark::Invoke(e) => {
                if self.pending.len() >= 32 {
                    return Err(self.stop(Over::Pending(self.pending.len() + 1)));
                }
                // A new slot at the end: phase 0 in every key, so keys do not change.
                self.pending.push(e);
                // An operation that must come after this one and was placed before its
                // invoke: that order did not happen (it ran on the server after this one,
                // which was not sent yet).
                let later: Vec<usize> = (0..self.pending.len())
                    .filter(|&j| self.spec.after(self.pending[j]).contains(&e))
                    .collect();
                if !later.is_empty() {
                    self.configs
                        .retain(|k, _| later.iter().all(|&j| phase(*k, j) == 0));
                }
                Ok(None)
            }
            Mark::Complete(e) => {
                let Some(slot) = self.pending.iter().position(|x| *x == e) else {
                    return Ok(None); // never invoked: nothing to place
                };
                if self.spec.timed() {
                    self.resettle(now)?;
                    // Timed moves may have changed every state: close them all again.
                    self.fresh_from = 0;
                }
                let mut why = vec![];
                self.close(now, Some((e, &mut why)))?;
                let need = self.spec.points(e);
                let done = |k: &Key| phase(*k, slot) >= need;
                let failure = if self.configs.keys().any(done) {
                    None
                } else {
                    // What the model says of the entry's next point in every state reached.
                    for (k, set) in &self.configs {
                        let ph = phase(*k, slot);
                        if ph >= need {
                            continue;
                        }
                        for st in set {
                            if let Err(w) = self.spec.step(st, e, ph, now)
                                && !why.contains(&w)
                                && why.len() < 8
                            {
                                why.push(w);
                            }
                        }
                    }
                    let reached = self.state_count();
                    let states: Vec<P::State> = self.states().take(4).cloned().collect();
                    self.forced.insert(e);
                    self.fresh_from = 0;
                    self.close(now, None)?;
                    Some(Failure {
                        entry: e,
                        why,
                        states,
                        reached,
                    })
                };
                let old = std::mem::take(&mut self.configs);
                for (k, set) in old {
                    if phase(k, slot) >= need {
                        self.configs
                            .entry(without(k, slot))
                            .or_default()
                            .extend(set);
                    }
                }
                self.pending.remove(slot);
                for &a in self.spec.retires(e) {
                    self.retire(a);
                }
                self.fresh_from = self.pending.len();
                self.forced.remove(&e);
                Ok(failure)
            }
        }
    }

    /// Operation `a` (of unknown outcome) is over ([`Spec::retires`]): keep the configurations
    /// where it took all its effect or none, merged, and forget its slot. (Were there none, the
    /// search would have nothing left to go on: then it stays pending, as before.)
    fn retire(&mut self, a: usize) {
        let Some(slot) = self.pending.iter().position(|x| *x == a) else {
            return;
        };
        let need = self.spec.points(a);
        let over = |k: &Key| phase(*k, slot) == 0 || phase(*k, slot) >= need;
        if !self.configs.keys().any(over) {
            return;
        }
        let old = std::mem::take(&mut self.configs);
        for (k, set) in old {
            if over(&k) {
                self.configs
                    .entry(without(k, slot))
                    .or_default()
                    .extend(set);
            }
        }
        self.pending.remove(slot);
    }

    fn stop(&mut self, o: Over) -> Over {
        self.over = Some(o);
        self.configs.clear();
        o
    }

    fn check_budget(&mut self, total: usize) -> Result<(), Over> {
        if total > self.budget.max_states {
            return Err(self.stop(Over::States(self.budget.max_states)));
        }
        if self.work > self.budget.max_work {
            return Err(self.stop(Over::Work(self.budget.max_work)));
        }
        if self.started.elapsed() > self.budget.max_time {
            return Err(self.stop(Over::Time(self.budget.max_time)));
        }
        Ok(())
    }

    /// Time has passed: timed internal moves may now be possible in every state.
    fn resettle(&mut self, now: u64) -> Result<(), Over> {
        let mut total = 0;
        for set in self.configs.values_mut() {
            let states: Vec<P::State> = set.drain().collect();
            set.extend(settle_counted(self.spec, states, now, &mut self.work));
            total += set.len();
        }
        self.check_budget(total)
    }

    /// Place pending points in every order, keeping every configuration reached. `target`:
    /// the completing operation, whose rejections are collected.
    fn close(
        &mut self,
        now: u64,
        mut target: Option<(usize, &mut Vec<P::Why>)>,
    ) -> Result<(), Over> {
        // Each work item: a configuration and the first slot to try on it (configurations
        // already closed need only the slots added since).
        let from = self.fresh_from.min(self.pending.len());
        let mut work: Vec<(Key, P::State, usize)> = self
            .configs
            .iter()
            .flat_map(|(k, set)| set.iter().map(move |s| (*k, s.clone(), from)))
            .collect();
        let mut total = self.state_count();
        let mut since_check = 0u32;
        while let Some((key, s, first)) = work.pop() {
            for (slot, &e) in self.pending.iter().enumerate().skip(first) {
                let ph = phase(key, slot);
                if ph >= self.spec.points(e)
                    || (ph == 0 && !ready(self.spec, &self.pending, key, e))
                {
                    continue;
                }
                let next = with_phase(key, slot, ph + 1);
                self.work += 1;
                let succ = if self.forced.contains(&e) {
                    Ok(self.spec.force(&s, e, ph, now))
                } else {
                    self.spec.step(&s, e, ph, now)
                };
                let mut add = |st: P::State, work: &mut Vec<(Key, P::State, usize)>| {
                    if self.configs.entry(next).or_default().insert(st.clone()) {
                        total += 1;
                        work.push((next, st, 0));
                    }
                };
                match succ {
                    Ok(v) => {
                        self.placed += 1;
                        for st in settle_counted(self.spec, v, now, &mut self.work) {
                            add(st, &mut work);
                        }
                    }
                    Err(w) => {
                        if let Some((t, why)) = target.as_mut()
                            && *t == e
                            && !why.contains(&w)
                            && why.len() < 8
                        {
                            why.push(w);
                        }
                    }
                }
            }
            since_check += 1;
            if since_check >= 64 {
                since_check = 0;
                self.check_budget(total)?;
            }
        }
        self.fresh_from = self.pending.len();
        self.check_budget(total)
    }
}

/// The states `states` lead to once every internal move that can happen by `now` has had its
/// chance (each state, and everything reachable from it by internal moves).
pub fn settle<P: Spec>(spec: &P, states: Vec<P::State>, now: u64) -> Vec<P::State> {
    settle_counted(spec, states, now, &mut 0)
}

/// [`settle`], adding its calls of the model's internal moves to `count`.
fn settle_counted<P: Spec>(
    spec: &P,
    states: Vec<P::State>,
    now: u64,
    count: &mut u64,
) -> Vec<P::State> {
    let mut seen: Set<P::State> = Set::default();
    let mut out = vec![];
    let mut work = states;
    while let Some(s) = work.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        *count += 1;
        for n in spec.internal(&s, now) {
            if !seen.contains(&n) {
                work.push(n);
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    //! The search on Knossos's classic models: a register and a mutex, with histories whose
    //! linearizability is known by hand.
    use super::*;

    /// A register: write(v) / read -> v; `None` result: unknown (info).
    #[derive(Clone, Debug)]
    enum RegOp {
        Write(u8),
        Read(Option<u8>),
    }

    struct Register {
        ops: Vec<(RegOp, bool)>,
    }

    impl Spec for Register {
        type State = u8;
        type Why = String;
        fn points(&self, _: usize) -> u8 {
            1
        }
        fn step(&self, s: &u8, e: usize, _: u8, _: u64) -> Result<Vec<u8>, String> {
            match self.ops[e].0 {
                RegOp::Write(v) => Ok(vec![v]),
                RegOp::Read(Some(v)) if v == *s => Ok(vec![*s]),
                RegOp::Read(Some(v)) => Err(format!("read {v}, register holds {s}")),
                RegOp::Read(None) => Ok(vec![*s]),
            }
        }
        fn force(&self, s: &u8, e: usize, p: u8, n: u64) -> Vec<u8> {
            self.step(s, e, p, n).unwrap_or_else(|_| vec![*s])
        }
        fn internal(&self, _: &u8, _: u64) -> Vec<u8> {
            vec![]
        }
    }

    /// Run marks (`(op index, invoke?)` in order) and collect failures.
    fn run<P: Spec>(spec: &P, init: P::State, marks: &[(usize, bool)]) -> Vec<usize> {
        let mut s = Search::new(spec, init, Budget::default());
        let mut failed = vec![];
        for (i, (e, inv)) in marks.iter().enumerate() {
            let m = if *inv {
                Mark::Invoke(*e)
            } else {
                Mark::Complete(*e)
            };
            if let Some(f) = s.mark(m, i as u64).unwrap() {
                failed.push(f.entry);
            }
        }
        failed
    }

    /// A register with the two orderings a history adds: unknown ops a later op shows over
    /// (`Spec::retires`) and ops the servers' clock orders (`Spec::after`); empty when absent.
    struct Constrained {
        reg: Register,
        retires: Vec<Vec<usize>>,
        after: Vec<Vec<usize>>,
    }

    impl Constrained {
        fn retiring(reg: Register, retires: Vec<Vec<usize>>) -> Constrained {
            let after = vec![vec![]; retires.len()];
            Constrained {
                reg,
                retires,
                after,
            }
        }
        fn ordered(reg: Register, after: Vec<Vec<usize>>) -> Constrained {
            let retires = vec![vec![]; after.len()];
            Constrained {
                reg,
                retires,
                after,
            }
        }
    }

    impl Spec for Constrained {
        type State = u8;
        type Why = String;
        fn points(&self, e: usize) -> u8 {
            self.reg.points(e)
        }
        fn step(&self, s: &u8, e: usize, p: u8, n: u64) -> Result<Vec<u8>, String> {
            self.reg.step(s, e, p, n)
        }
        fn force(&self, s: &u8, e: usize, p: u8, n: u64) -> Vec<u8> {
            self.reg.force(s, e, p, n)
        }
        fn internal(&self, _: &u8, _: u64) -> Vec<u8> {
            vec![]
        }
        fn retires(&self, e: usize) -> &[usize] {
            &self.retires[e]
        }
        fn after(&self, e: usize) -> &[usize] {
            &self.after[e]
        }
    }

    /// A write of unknown outcome may take effect at any later moment; once a later op shows
    /// it over, it has taken effect by then or never: a read after that which saw the old
    /// value rules the write out for every read after it.
    #[test]
    fn a_retired_unknown_op_takes_no_effect_later() {
        let reg = || Register {
            ops: vec![
                (RegOp::Write(1), false),
                (RegOp::Read(Some(0)), false),
                (RegOp::Read(Some(0)), false),
                (RegOp::Read(Some(1)), false),
            ],
        };
        // The write never completes; each read runs alone after it was sent.
        let marks = [
            (0, true),
            (1, true),
            (1, false),
            (2, true),
            (2, false),
            (3, true),
            (3, false),
        ];
        let free = Constrained::retiring(reg(), vec![vec![]; 4]);
        assert!(run(&free, 0, &marks).is_empty());
        let retired = Constrained::retiring(reg(), vec![vec![], vec![0], vec![], vec![]]);
        assert_eq!(run(&retired, 0, &marks), vec![3]);
        // Shown over before it could have mattered: every read explained, and nothing left
        // pending (one configuration, one state).
        let quiet = Constrained::retiring(
            Register {
                ops: vec![(RegOp::Write(1), false), (RegOp::Read(Some(0)), false)],
            },
            vec![vec![], vec![0]],
        );
        let mut s = Search::new(&quiet, 0, Budget::default());
        for (i, m) in [Mark::Invoke(0), Mark::Invoke(1), Mark::Complete(1)]
            .into_iter()
            .enumerate()
        {
            assert!(s.mark(m, i as u64).unwrap().is_none());
        }
        assert!(s.pending.is_empty());
        assert_eq!(s.configs.len(), 1);
        let mut states: Vec<u8> = s.states().copied().collect();
        states.sort();
        assert_eq!(states, vec![0, 1]);
    }

    /// A read overlapping a write that saw the old value is explained by client time alone
    /// (the read first); when the servers' clock puts the write first, it is not.
    #[test]
    fn server_order_rules_out_what_client_time_allows() {
        let ops = || vec![(RegOp::Write(1), false), (RegOp::Read(Some(0)), false)];
        // write invoked, read invoked, read completes (saw 0), write completes.
        let marks = [(0, true), (1, true), (1, false), (0, false)];
        let free = Constrained::ordered(Register { ops: ops() }, vec![vec![], vec![]]);
        assert!(run(&free, 0, &marks).is_empty());
        let ordered = Constrained::ordered(Register { ops: ops() }, vec![vec![], vec![0]]);
        assert_eq!(run(&ordered, 0, &marks), vec![1]);
        // The read invoked before the write, and placed (at another op's completion) before
        // the write's invoke: that invoke rules the order out (the read ran after it).
        let ops3 = || {
            let mut v = ops();
            v.push((RegOp::Read(None), false));
            v
        };
        let marks = [
            (1, true),
            (2, true),
            (2, false),
            (0, true),
            (1, false),
            (0, false),
        ];
        let free = Constrained::ordered(Register { ops: ops3() }, vec![vec![], vec![], vec![]]);
        assert!(run(&free, 0, &marks).is_empty());
        let ordered = Constrained::ordered(Register { ops: ops3() }, vec![vec![], vec![0], vec![]]);
        assert_eq!(run(&ordered, 0, &marks), vec![1]);
    }

    #[test]
    fn a_read_overlapping_a_write_may_see_either_value() {
        let r = Register {
            ops: vec![(RegOp::Write(1), false), (RegOp::Read(Some(1)), false)],
        };
        // write invoked, read invoked, read completes (saw 1), write completes.
        assert!(run(&r, 0, &[(0, true), (1, true), (1, false), (0, false)]).is_empty());
        let r0 = Register {
            ops: vec![(RegOp::Write(1), false), (RegOp::Read(Some(0)), false)],
        };
        assert!(run(&r0, 0, &[(0, true), (1, true), (1, false), (0, false)]).is_empty());
    }

    #[test]
    fn a_read_after_a_completed_write_must_see_it() {
        let r = Register {
            ops: vec![(RegOp::Write(1), false), (RegOp::Read(Some(0)), false)],
        };
        // The write completes before the read is invoked: 0 cannot be read.
        assert_eq!(
            run(&r, 0, &[(0, true), (0, false), (1, true), (1, false)]),
            vec![1]
        );
    }

    #[test]
    fn an_unknown_write_may_take_effect_later_or_never() {
        // write(1) never completes (info); a later read may see 0 or 1, and then not 0 again.
        let seen = |vals: &[u8]| {
            let mut ops = vec![(RegOp::Write(1), true)];
            let mut marks = vec![(0, true)];
            for (i, v) in vals.iter().enumerate() {
                ops.push((RegOp::Read(Some(*v)), false));
                marks.push((i + 1, true));
                marks.push((i + 1, false));
            }
            run(&Register { ops }, 0, &marks)
        };
        assert!(seen(&[0, 0, 1, 1]).is_empty());
        assert!(seen(&[0]).is_empty());
        assert_eq!(seen(&[1, 0]), vec![2]);
    }

    #[test]
    fn the_search_goes_on_after_a_violation() {
        // Two impossible reads: both reported, the first forced through.
        let r = Register {
            ops: vec![
                (RegOp::Write(1), false),
                (RegOp::Read(Some(2)), false),
                (RegOp::Read(Some(3)), false),
                (RegOp::Read(Some(1)), false),
            ],
        };
        let marks = [
            (0, true),
            (0, false),
            (1, true),
            (1, false),
            (2, true),
            (2, false),
            (3, true),
            (3, false),
        ];
        assert_eq!(run(&r, 0, &marks), vec![1, 2]);
    }

    /// A mutex: acquire (two points: request, grant) and release, per process; the state is
    /// the holder.
    struct Mutex {
        ops: Vec<(u8, bool)>, // (process, acquire?)
    }

    impl Spec for Mutex {
        type State = Option<u8>;
        type Why = &'static str;
        fn points(&self, e: usize) -> u8 {
            if self.ops[e].1 { 2 } else { 1 }
        }
        fn step(
            &self,
            s: &Option<u8>,
            e: usize,
            p: u8,
            _: u64,
        ) -> Result<Vec<Option<u8>>, &'static str> {
            let (who, acq) = self.ops[e];
            match (acq, p, s) {
                (true, 0, _) => Ok(vec![*s]),
                (true, 1, None) => Ok(vec![Some(who)]),
                (true, 1, Some(_)) => Err("held"),
                (false, _, Some(h)) if *h == who => Ok(vec![None]),
                (false, _, _) => Err("not the holder"),
                _ => unreachable!(),
            }
        }
        fn force(&self, s: &Option<u8>, _: usize, _: u8, _: u64) -> Vec<Option<u8>> {
            vec![*s]
        }
        fn internal(&self, _: &Option<u8>, _: u64) -> Vec<Option<u8>> {
            vec![]
        }
    }

    #[test]
    fn two_overlapping_acquires_need_a_release_between_them() {
        // P0 acquire completes, then P1 acquire completes with no release: impossible.
        let m = Mutex {
            ops: vec![(0, true), (1, true), (0, false)],
        };
        assert_eq!(
            run(&m, None, &[(0, true), (1, true), (0, false), (1, false)]),
            vec![1]
        );
        // With P0's release overlapping P1's acquire, it is fine.
        assert!(
            run(
                &m,
                None,
                &[
                    (0, true),
                    (0, false),
                    (1, true),
                    (2, true),
                    (2, false),
                    (1, false)
                ]
            )
            .is_empty()
        );
    }

    #[test]
    fn keys_drop_a_slot_and_keep_the_others() {
        let k = with_phase(with_phase(with_phase(0, 0, 1), 1, 2), 2, 3);
        let w = without(k, 1);
        assert_eq!((phase(w, 0), phase(w, 1)), (1, 3));
        assert_eq!(phase(without(k, 0), 0), 2);
        let full = with_phase(0, 31, 2);
        assert_eq!(phase(without(full, 30), 30), 2);
        assert_eq!(without(full, 31), 0);
    }

    #[test]
    fn a_search_past_its_budget_says_so() {
        // Many unknown writes of different values pending at once: 2^n subsets of states.
        let n = 12;
        let mut ops: Vec<(RegOp, bool)> =
            (0..n).map(|i| (RegOp::Write(i as u8 + 1), true)).collect();
        ops.push((RegOp::Read(None), false));
        let r = Register { ops };
        let mut s = Search::new(
            &r,
            0,
            Budget {
                max_states: 50,
                max_work: DEFAULT_MAX_WORK,
                max_time: Duration::from_secs(5),
            },
        );
        for i in 0..n {
            s.mark(Mark::Invoke(i), 0).unwrap();
        }
        s.mark(Mark::Invoke(n), 1).unwrap();
        let out = s.mark(Mark::Complete(n), 2);
        assert_eq!(out.unwrap_err(), Over::States(50));
        assert!(s.over().is_some());
    }

    /// The work budget ends a search at the same point on any machine: the same history over
    /// the same budget stops after the same work, and with room to spare it is judged.
    #[test]
    fn a_search_past_its_work_says_so_and_stops_at_the_same_point() {
        let n = 10;
        let mut ops: Vec<(RegOp, bool)> =
            (0..n).map(|i| (RegOp::Write(i as u8 + 1), true)).collect();
        ops.push((RegOp::Read(Some(3)), false));
        let r = Register { ops };
        let run = |max_work: u64| {
            let mut s = Search::new(
                &r,
                0,
                Budget {
                    max_states: 1_000_000,
                    max_work,
                    max_time: Duration::from_secs(60),
                },
            );
            for i in 0..n {
                s.mark(Mark::Invoke(i), 0).unwrap();
            }
            s.mark(Mark::Invoke(n), 1).unwrap();
            (s.mark(Mark::Complete(n), 2).map(|f| f.is_none()), s.work)
        };
        let (ample, used) = run(DEFAULT_MAX_WORK);
        assert_eq!(ample, Ok(true), "the read of 3 is explained");
        let small = used / 2;
        let (a, wa) = run(small);
        let (b, wb) = run(small);
        assert_eq!(a, Err(Over::Work(small)));
        assert_eq!(b, Err(Over::Work(small)));
        assert_eq!(wa, wb, "the same point");
        assert!(wa > small && wa < used, "{wa} of {used}");
    }
}
