//! A case's events folded into steps: what the checker walks and what reporters narrate.
//! Pure: built from events alone.

use super::event::{
    At, Body, CaseEnd, CaseStart, Completion, Event, Invoke, ProbeWhy, Process, Skip,
};
use super::observation::Observation;
use crate::vocab::{BackendId, Key, Op};
use anyhow::{Result, bail};

/// One step of a sequential case, as recorded (borrowed from the case's events).
#[derive(Clone, Debug, Default)]
pub struct StepView<'e> {
    pub index: usize,
    /// The step's client (for faults: the client whose backend was targeted).
    pub client: usize,
    pub op: Option<Op>,
    pub key: Option<Key>,
    pub ms: Option<u64>,
    pub guc: Option<crate::vocab::Guc>,
    /// Scripts: the step's guard and (`raise`) message.
    pub when: crate::vocab::When,
    pub message: Option<&'e str>,
    /// The client (re)connected before the op (its connection was gone).
    pub opened: bool,
    /// That connect, as an op of its own: nanoseconds since the run started at its invoke
    /// and at its completion, and its completion (a timeout: the pooler accepted none).
    pub t_open: Option<u64>,
    pub t_opened: Option<u64>,
    pub open_done: Option<&'e Completion>,
    pub invoke: Option<&'e Invoke>,
    pub done: Option<&'e Completion>,
    pub skip: Option<&'e Skip>,
    /// Nanoseconds since the run started, at invoke and at completion.
    pub t_invoke: Option<u64>,
    pub t_done: Option<u64>,
    pub obs_before: Option<&'e Observation>,
    pub obs_after: Option<&'e Observation>,
    /// Contender probes at the step's boundary: `(key, available)`.
    pub probes: Vec<(Key, bool)>,
    /// Evidence replays: every key before and after.
    pub probes_before: Vec<(Key, bool)>,
    pub probes_after: Vec<(Key, bool)>,
}

impl StepView<'_> {
    /// The backend that ran the op (SQL ops) or that the fault acted on.
    pub fn backend(&self) -> Option<BackendId> {
        self.done
            .as_ref()
            .and_then(|d| d.backend)
            .or(self.invoke.as_ref().and_then(|i| i.target))
    }

    /// The fault's target (terminate, cancel).
    pub fn target(&self) -> Option<BackendId> {
        self.invoke.as_ref().and_then(|i| i.target)
    }

    pub fn ran(&self) -> bool {
        self.done.is_some()
    }

    /// `C1 try_lock 4242424242`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "C{} {}",
            self.client + 1,
            self.op.map(|o| o.name()).unwrap_or("?")
        );
        if let Some(k) = self.key {
            s.push_str(&format!(" {k}"));
        }
        if let Some(g) = self.guc {
            s.push_str(&format!(" {g}"));
        }
        if let Some(ms) = self.ms {
            match self.guc {
                Some(g) => s.push_str(&format!(" {}", g.row().unit.label(ms))),
                None => s.push_str(&format!(" {ms}ms")),
            }
        }
        s
    }
}

/// One case, folded (borrowed from its events: nothing is copied).
#[derive(Clone, Debug)]
pub struct CaseView<'e> {
    pub start: &'e CaseStart,
    /// Clients that connected at case setup.
    pub opened: Vec<usize>,
    pub steps: Vec<StepView<'e>>,
    pub end: Option<&'e CaseEnd>,
}

impl<'e> CaseView<'e> {
    /// Fold one case's events (from its `case` event to its `case_end`).
    pub fn build(events: &'e [Event]) -> Result<CaseView<'e>> {
        let Some(start) = events.first().and_then(Event::case_start) else {
            bail!("a case's events must begin with a `case` event");
        };
        let mut view = CaseView {
            start,
            opened: vec![],
            steps: vec![],
            end: None,
        };
        for ev in &events[1..] {
            let step_of = |view: &mut CaseView<'e>, i: usize| -> usize {
                while view.steps.len() <= i {
                    let index = view.steps.len();
                    view.steps.push(StepView {
                        index,
                        ..Default::default()
                    });
                }
                i
            };
            match &ev.body {
                Body::Invoke(inv) => match (inv.f, inv.step) {
                    (Op::Open, None) => {
                        if let Process::Client(c) = inv.p {
                            view.opened.push(c);
                        }
                    }
                    (Op::Open, Some(i)) => {
                        let i = step_of(&mut view, i);
                        view.steps[i].opened = true;
                        view.steps[i].t_open = Some(ev.t);
                        if let Process::Client(c) = inv.p {
                            view.steps[i].client = c;
                        }
                    }
                    (f, Some(i)) => {
                        let i = step_of(&mut view, i);
                        let s = &mut view.steps[i];
                        s.client = match inv.p {
                            Process::Client(c) => c,
                            Process::Nemesis => inv.client.unwrap_or(0),
                        };
                        s.op = Some(f);
                        s.key = inv.key;
                        s.ms = inv.ms;
                        s.guc = inv.guc;
                        s.when = inv.when;
                        s.message = inv.message.as_deref();
                        s.invoke = Some(inv);
                        s.t_invoke = Some(ev.t);
                    }
                    (_, None) => {}
                },
                Body::Ok(c) | Body::Fail(c) | Body::Info(c) => match (c.step, c.f == Op::Open) {
                    (Some(i), false) => {
                        let i = step_of(&mut view, i);
                        view.steps[i].done = Some(c);
                        view.steps[i].t_done = Some(ev.t);
                    }
                    (Some(i), true) => {
                        let i = step_of(&mut view, i);
                        view.steps[i].open_done = Some(c);
                        view.steps[i].t_opened = Some(ev.t);
                    }
                    (None, _) => {}
                },
                Body::Skip(sk) => {
                    let i = step_of(&mut view, sk.step);
                    let s = &mut view.steps[i];
                    s.client = match sk.p {
                        Process::Client(c) => c,
                        Process::Nemesis => 0,
                    };
                    s.op = Some(sk.f);
                    s.key = sk.key;
                    s.ms = sk.ms;
                    s.guc = sk.guc;
                    s.when = sk.when;
                    s.message = sk.message.as_deref();
                    s.skip = Some(sk);
                }
                Body::Obs(o) => {
                    if let Some(i) = o.step {
                        let i = step_of(&mut view, i);
                        match o.at {
                            At::Before => view.steps[i].obs_before = Some(&o.obs),
                            At::After => view.steps[i].obs_after = Some(&o.obs),
                            At::Sample | At::End => {}
                        }
                    }
                }
                Body::Probe(p) => {
                    if let Some(i) = p.step {
                        let i = step_of(&mut view, i);
                        let s = &mut view.steps[i];
                        let list = match p.why {
                            ProbeWhy::Boundary => &mut s.probes,
                            ProbeWhy::Before => &mut s.probes_before,
                            ProbeWhy::After | ProbeWhy::End => &mut s.probes_after,
                        };
                        list.push((p.key, p.available));
                    }
                }
                Body::CaseEnd(e) => view.end = Some(e),
                Body::Case(_) => bail!("a `case` event inside another case"),
                Body::Run(_) | Body::RunEnd(_) | Body::Notification(_) => {}
            }
        }
        Ok(view)
    }

    /// Symbolic names for backends, in order of first appearance: B1, B2, ...
    pub fn backend_order(&self) -> Vec<BackendId> {
        let mut order: Vec<BackendId> = vec![];
        for s in &self.steps {
            if let Some(b) = s.backend()
                && !order.contains(&b)
            {
                order.push(b);
            }
        }
        order
    }

    /// The steps as generated (ran or skipped), for case files and shrinking.
    pub fn steps(&self) -> Vec<crate::vocab::step::Step> {
        self.steps
            .iter()
            .filter_map(|s| {
                Some(crate::vocab::step::Step {
                    client: s.client,
                    op: s.op?,
                    key: s.key,
                    ms: s.ms,
                    guc: s.guc,
                    when: s.when,
                    message: s.message.map(str::to_string),
                })
            })
            .collect()
    }
}

/// `B<n>` of a backend in a case's symbolic order (`pid N` if it is not in it).
pub fn symbol(order: &[BackendId], b: BackendId) -> String {
    match order.iter().position(|x| *x == b) {
        Some(i) => format!("B{}", i + 1),
        None => format!("pid {}", b.pid),
    }
}

/// Split a run's events into cases: each slice starts at a `case` event and runs to its
/// `case_end` (inclusive). Events outside cases (`run`, `run_end`) are skipped.
pub fn cases(events: &[Event]) -> Vec<&[Event]> {
    let mut out = vec![];
    let mut start = None;
    for (i, ev) in events.iter().enumerate() {
        match &ev.body {
            Body::Case(_) => start = Some(i),
            Body::CaseEnd(_) => {
                if let Some(s) = start.take() {
                    out.push(&events[s..=i]);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::event::{ObsEvent, Phase, ProbeEvent};
    use crate::vocab::Reply;

    fn ev(t: u64, body: Body) -> Event {
        Event { t, body }
    }

    #[test]
    fn a_case_folds_into_its_steps() {
        let b1 = BackendId {
            pid: 10,
            start_us: 1,
        };
        let events = vec![
            ev(
                0,
                Body::Case(CaseStart {
                    case: 0,
                    schedule: Default::default(),
                    seed: Some(9),
                    phase: Phase::Run,
                    invariant: None,
                    clients: 2,
                    steps: 2,
                }),
            ),
            ev(
                1,
                Body::Invoke(Invoke {
                    p: Process::Client(0),
                    step: None,
                    f: Op::Open,
                    key: None,
                    ms: None,
                    guc: None,
                    target: None,
                    client: None,
                    when: Default::default(),
                    message: None,
                }),
            ),
            ev(
                2,
                Body::Invoke(Invoke {
                    p: Process::Client(0),
                    step: Some(0),
                    f: Op::TryLock,
                    key: Some(Key::Big(7)),
                    ms: None,
                    guc: None,
                    target: None,
                    client: None,
                    when: Default::default(),
                    message: None,
                }),
            ),
            ev(
                3,
                Body::completion(Completion {
                    p: Process::Client(0),
                    step: Some(0),
                    f: Op::TryLock,
                    value: Reply::Bool { value: true },
                    backend: Some(b1),
                    server: None,
                }),
            ),
            ev(
                4,
                Body::Obs(ObsEvent {
                    step: Some(0),
                    at: At::After,
                    same: false,
                    delta: None,
                    obs: Observation::default(),
                }),
            ),
            ev(
                5,
                Body::Skip(Skip {
                    p: Process::Client(1),
                    step: 1,
                    f: Op::Terminate,
                    key: None,
                    ms: None,
                    guc: None,
                    reason: "nothing served C2".into(),
                    when: Default::default(),
                    message: None,
                }),
            ),
            ev(
                6,
                Body::Probe(ProbeEvent {
                    step: Some(0),
                    why: ProbeWhy::Boundary,
                    key: Key::Big(7),
                    available: false,
                }),
            ),
            ev(
                7,
                Body::CaseEnd(CaseEnd {
                    case: 0,
                    steps_us: 5,
                    reset_us: 1,
                }),
            ),
        ];
        assert_eq!(cases(&events).len(), 1);
        let v = CaseView::build(&events).unwrap();
        assert_eq!(v.opened, vec![0]);
        assert_eq!(v.steps.len(), 2);
        assert_eq!(v.steps[0].backend(), Some(b1));
        assert_eq!(v.steps[0].t_done, Some(3));
        assert_eq!(v.steps[0].probes, vec![(Key::Big(7), false)]);
        assert!(v.steps[1].skip.is_some() && !v.steps[1].ran());
        assert_eq!(v.steps[0].label(), "C1 try_lock 7");
        assert_eq!(v.backend_order(), vec![b1]);
        assert_eq!(symbol(&v.backend_order(), b1), "B1");
        assert_eq!(v.steps().len(), 2);
        assert!(CaseView::build(&events[1..]).is_err());
    }
}
