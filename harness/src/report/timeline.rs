//! The timeline of a minimal case in `report.html`, an inline SVG drawn from the recorded
//! events alone: a lane per client, the nemesis and each backend, the ops' bars, the locks
//! `pg_locks` showed, the faults of the servers and the violation ([`super::html`] says how).

use super::markup::esc;
use crate::check::CaseCheck;
use crate::history::{Body, CaseView, Event, Process, StepView, symbol};
use crate::topology::Schedule;
use crate::vocab::{BackendId, Key, Outcome, Reply};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Width of the lane labels, left of the plot.
const LABEL_W: f64 = 190.0;
/// Height of a lane.
const LANE_H: f64 = 26.0;
/// Above the lanes: violation labels and the axis.
const TOP: f64 = 44.0;
/// The plot of a concurrent timeline.
const PLOT_W: f64 = 1060.0;
/// Narrowest bar drawn.
const MIN_W: f64 = 3.0;
/// Approximate advance of a 10px monospace character.
const CHAR_W: f64 = 6.1;

/// From event time (ns) to x: piecewise linear through anchors `(t, x)`, increasing in
/// both (clamped outside them). Monotone, so order and overlap are kept exactly.
struct Scale(Vec<(u64, f64)>);

impl Scale {
    /// Anchors in any order; those that would make it non-monotone are dropped.
    fn new(mut anchors: Vec<(u64, f64)>) -> Scale {
        anchors.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let mut mono: Vec<(u64, f64)> = vec![];
        for a in anchors {
            match mono.last() {
                Some(l) if a.0 <= l.0 || a.1 < l.1 => {}
                _ => mono.push(a),
            }
        }
        Scale(mono)
    }

    /// Events at `times` spread over `[x0, x0 + w]`, each gap as wide as the square root of
    /// its duration: short ops stay visible beside long ones.
    fn compressed(times: &[u64], x0: f64, w: f64) -> Scale {
        let mut ts = times.to_vec();
        ts.sort_unstable();
        ts.dedup();
        let gaps: Vec<f64> = ts
            .windows(2)
            .map(|p| ((p[1] - p[0]) as f64).sqrt())
            .collect();
        let total: f64 = gaps.iter().sum();
        let mut x = x0;
        let mut anchors = vec![];
        for (i, t) in ts.iter().enumerate() {
            anchors.push((*t, x));
            if let Some(g) = gaps.get(i) {
                x += if total > 0.0 { g / total * w } else { 0.0 };
            }
        }
        Scale::new(anchors)
    }

    fn x(&self, t: u64) -> f64 {
        let a = &self.0;
        let Some(first) = a.first() else {
            return LABEL_W;
        };
        if t <= first.0 {
            return first.1;
        }
        for w in a.windows(2) {
            let ((ta, xa), (tb, xb)) = (w[0], w[1]);
            if t <= tb {
                let f = (t - ta) as f64 / (tb - ta).max(1) as f64;
                return xa + f * (xb - xa);
            }
        }
        a.last().map(|l| l.1).unwrap_or(LABEL_W)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LaneKind {
    Client(usize),
    Nemesis,
    Backend(BackendId),
}

/// ms since the case began, for people.
fn ms(t: u64, base: u64) -> String {
    format!("{:.3} ms", t.saturating_sub(base) as f64 / 1e6)
}

fn reply_class(r: &Reply) -> &'static str {
    match r {
        Reply::Bool { value: false } => "false",
        _ => match r.outcome() {
            Outcome::Ok => "ok",
            Outcome::Fail => "error",
            Outcome::Info => "info",
        },
    }
}

fn reply_text(r: &Reply) -> String {
    match r {
        Reply::Error { code, message } if !message.is_empty() => {
            format!("error {code} ({message})")
        }
        r => r.to_string(),
    }
}

/// The text that fits in `w` pixels: `full`, else `short`, else nothing.
fn fitting<'a>(w: f64, full: &'a str, short: &'a str) -> &'a str {
    let fits = |s: &str| (s.chars().count() as f64) * CHAR_W + 4.0 <= w;
    if fits(full) {
        full
    } else if fits(short) {
        short
    } else {
        ""
    }
}

/// A lock seen in `pg_locks`, from one observation to the first that lacks it.
struct Span {
    backend: BackendId,
    backend_start: String,
    key: Key,
    mode: String,
    granted: bool,
    t0: u64,
    t1: u64,
    /// Still there at the last observation.
    open_end: bool,
}

/// Lock spans from every observation of the case, in time order.
fn lock_spans(events: &[Event], t_end: u64) -> Vec<Span> {
    type Row = (BackendId, Key, bool);
    let mut open: BTreeMap<Row, (u64, String, String)> = BTreeMap::new();
    let mut out = vec![];
    let mut obs: Vec<(u64, &crate::history::Observation)> = events
        .iter()
        .filter_map(|e| match &e.body {
            Body::Obs(o) => Some((e.t, &o.obs)),
            _ => None,
        })
        .collect();
    obs.sort_by_key(|(t, _)| *t);
    for (t, o) in obs {
        let mut now: BTreeMap<Row, (String, String)> = BTreeMap::new();
        for b in &o.backends {
            for l in &b.locks {
                now.insert(
                    (b.id, l.key, l.granted),
                    (b.backend_start.clone(), l.mode.clone()),
                );
            }
        }
        let gone: Vec<Row> = open
            .keys()
            .filter(|k| !now.contains_key(k))
            .copied()
            .collect();
        for k in gone {
            if let Some((t0, start, mode)) = open.remove(&k) {
                out.push(Span {
                    backend: k.0,
                    backend_start: start,
                    key: k.1,
                    mode,
                    granted: k.2,
                    t0,
                    t1: t,
                    open_end: false,
                });
            }
        }
        for (k, (start, mode)) in now {
            open.entry(k).or_insert((t, start, mode));
        }
    }
    for (k, (t0, start, mode)) in open {
        out.push(Span {
            backend: k.0,
            backend_start: start,
            key: k.1,
            mode,
            granted: k.2,
            t0,
            t1: t_end.max(t0),
            open_end: true,
        });
    }
    out.sort_by_key(|s| (s.t0, s.backend, s.key));
    out
}

/// Who ran a step: a client, or the nemesis (faults).
fn step_process(s: &StepView) -> Process {
    if let Some(i) = s.invoke {
        return i.p;
    }
    if let Some(k) = s.skip {
        return k.p;
    }
    match s.op {
        Some(op) => Process::of(op, s.client),
        None => Process::Client(s.client),
    }
}

/// The timeline of one recorded case as an inline SVG.
pub fn timeline(invariant: &str, events: &[Event], view: &CaseView, check: &CaseCheck) -> String {
    let l = Layout::new(invariant, events, view, check);
    let mut svg = l.head();
    l.axis(&mut svg);
    l.faults(&mut svg);
    for lane in &l.lanes {
        l.lane(&mut svg, lane);
    }
    l.violation(&mut svg);
    svg.push_str("</svg>\n");
    svg
}

/// A case's timeline laid out: its steps, its scale and its lanes, from which each part of
/// the SVG is drawn.
struct Layout<'a> {
    invariant: &'a str,
    view: &'a CaseView<'a>,
    check: &'a CaseCheck,
    /// The steps with an op.
    steps: Vec<&'a StepView<'a>>,
    /// When each skipped step was skipped (skips carry no time in the view).
    skip_t: BTreeMap<usize, u64>,
    /// The case's first event: times are shown since then.
    base: u64,
    sequential: bool,
    /// A step's slot (sequential).
    slot_w: f64,
    scale: Scale,
    /// The plot's right edge.
    x_end: f64,
    /// The end of the time drawn: ops and faults without a reply, and lock spans still
    /// open, end here.
    t_hi: u64,
    /// The backends the steps name, in order of first appearance (`B1`, `B2`, ...).
    order: Vec<BackendId>,
    /// Those, then the backends only `pg_locks` showed.
    backends: Vec<BackendId>,
    spans: Vec<Span>,
    lanes: Vec<LaneKind>,
}

impl<'a> Layout<'a> {
    /// Lay a case out: its steps, its scale (a slot per step, or compressed time) and its
    /// lanes.
    fn new(
        invariant: &'a str,
        events: &[Event],
        view: &'a CaseView<'a>,
        check: &'a CaseCheck,
    ) -> Layout<'a> {
        let base = events.first().map(|e| e.t).unwrap_or(0);
        let t_last = events.last().map(|e| e.t).unwrap_or(base);
        let skip_t: BTreeMap<usize, u64> = events
            .iter()
            .filter_map(|e| match &e.body {
                Body::Skip(k) => Some((k.step, e.t)),
                _ => None,
            })
            .collect();
        let steps: Vec<&StepView> = view.steps.iter().filter(|s| s.op.is_some()).collect();
        let sequential = view.start.schedule == Schedule::Sequential;
        // The scale, and the plot's extent: a slot per step (sequential), or time compressed
        // between events (concurrent).
        let slot_w = (900.0 / view.steps.len().max(1) as f64).clamp(132.0, 240.0);
        let (scale, plot_w, t_hi) = if sequential {
            sequential_scale(view, &skip_t, base, t_last, slot_w)
        } else {
            concurrent_scale(events, &steps, &skip_t, base, t_last)
        };
        let order = view.backend_order();
        let spans = lock_spans(events, t_hi);
        let (lanes, backends) = lanes(&steps, &order, &spans);
        Layout {
            invariant,
            view,
            check,
            steps,
            skip_t,
            base,
            sequential,
            slot_w,
            scale,
            x_end: LABEL_W + plot_w,
            t_hi,
            order,
            backends,
            spans,
            lanes,
        }
    }

    /// When a step began: its invoke, or when it was skipped.
    fn t_start_of(&self, s: &StepView) -> Option<u64> {
        started(s, &self.skip_t)
    }

    /// The x of a time, inside the plot.
    fn x(&self, t: u64) -> f64 {
        self.scale.x(t).clamp(LABEL_W, self.x_end)
    }

    /// The top of a lane.
    fn lane_y(&self, l: &LaneKind) -> f64 {
        TOP + self.lanes.iter().position(|x| x == l).unwrap_or(0) as f64 * LANE_H
    }

    /// The bottom of the last lane.
    fn lanes_bottom(&self) -> f64 {
        TOP + self.lanes.len() as f64 * LANE_H
    }

    /// A backend's symbol: `B1`, `B2`, ... as in `case.yaml`, numbered on for those only
    /// `pg_locks` showed, else its pid.
    fn bsym(&self, b: BackendId) -> String {
        match self.backends.iter().position(|x| *x == b) {
            Some(i) if i < self.order.len() => symbol(&self.order, b),
            Some(i) => format!("B{}", i + 1),
            None => format!("pid {}", b.pid),
        }
    }

    /// The `<svg>` element's opening and the lanes' backgrounds.
    fn head(&self) -> String {
        let height = TOP + self.lanes.len() as f64 * LANE_H + 8.0;
        let width = self.x_end + 16.0;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline-svg\" data-invariant=\"{}\" data-schedule=\"{}\" data-shown=\"{}\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"timeline of the minimal case of {}\">",
            esc(self.invariant),
            if self.sequential {
                "sequential"
            } else {
                "concurrent"
            },
            self.check.violates(self.invariant),
            esc(self.invariant),
        );
        // Lane backgrounds.
        for (i, _) in self.lanes.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<rect class=\"{}\" x=\"0\" y=\"{:.1}\" width=\"{width:.0}\" height=\"{LANE_H}\"/>",
                if i % 2 == 0 { "bg-even" } else { "bg-odd" },
                TOP + i as f64 * LANE_H
            );
        }
        svg
    }

    /// The axis: a slot per step, or milliseconds.
    fn axis(&self, svg: &mut String) {
        let lanes_bottom = self.lanes_bottom();
        svg.push_str("<g class=\"axis\">\n");
        if self.sequential {
            let n = self.view.steps.len();
            let slot_w = self.slot_w;
            for i in 0..=n {
                let xs = LABEL_W + i as f64 * slot_w;
                let _ = write!(
                    svg,
                    "<g class=\"tick\"><line x1=\"{xs:.1}\" y1=\"{:.1}\" x2=\"{xs:.1}\" y2=\"{lanes_bottom:.1}\"/>",
                    TOP - 4.0
                );
                if i < n {
                    let _ = write!(
                        svg,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">step {}</text>",
                        xs + slot_w / 2.0,
                        TOP - 6.0,
                        i + 1
                    );
                }
                svg.push_str("</g>\n");
            }
        } else {
            // Ticks at the events' real times, where there is room for a label.
            let mut last_x = f64::NEG_INFINITY;
            for (t, xs) in &self.scale.0 {
                if xs - last_x < 64.0 || *xs > self.x_end - 20.0 {
                    continue;
                }
                last_x = *xs;
                let _ = writeln!(
                    svg,
                    "<g class=\"tick\"><line x1=\"{xs:.1}\" y1=\"{:.1}\" x2=\"{xs:.1}\" y2=\"{lanes_bottom:.1}\"/><text x=\"{xs:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                    TOP - 4.0,
                    TOP - 6.0,
                    short_ms(t.saturating_sub(self.base))
                );
            }
        }
        svg.push_str("</g>\n");
    }

    /// Faults of the servers: bands across every lane.
    fn faults(&self, svg: &mut String) {
        let base = self.base;
        for s in &self.steps {
            let Some(op) = s.op.filter(|o| o.is_server_fault()) else {
                continue;
            };
            let Some(t0) = self.t_start_of(s) else {
                continue;
            };
            let t1 = s.t_done.unwrap_or(self.t_hi);
            let (x0, x1) = (self.x(t0), self.x(t1));
            let _ = writeln!(
                svg,
                "<rect class=\"fault\" data-op=\"{}\" data-step=\"{}\" data-t0=\"{t0}\" data-t1=\"{t1}\" x=\"{x0:.1}\" y=\"{TOP:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{}</title></rect>",
                op.name(),
                s.index,
                (x1 - x0).max(MIN_W),
                self.lanes_bottom() - TOP,
                esc(&format!(
                    "fault {} (step {}): {} from {} to {}",
                    op.name(),
                    s.index + 1,
                    s.done
                        .map(|d| reply_text(&d.value))
                        .unwrap_or_else(|| "no reply recorded".into()),
                    ms(t0, base),
                    ms(t1, base)
                ))
            );
        }
    }

    /// A lane with its contents: a client's or the nemesis's ops, or what a backend served
    /// and the locks it held or waited for.
    fn lane(&self, svg: &mut String, l: &LaneKind) {
        let y = self.lane_y(l);
        self.lane_label(svg, l, y);
        match l {
            LaneKind::Client(_) | LaneKind::Nemesis => {
                for s in self.steps.iter().filter(|s| {
                    let p = step_process(s);
                    match l {
                        LaneKind::Client(c) => p == Process::Client(*c),
                        _ => p == Process::Nemesis,
                    }
                }) {
                    svg.push_str(&self.op_bar(s, y));
                }
            }
            LaneKind::Backend(b) => {
                self.served(svg, *b, y);
                self.locks(svg, *b, y);
            }
        }
        svg.push_str("</g>\n");
    }

    /// A lane's opening `<g>` and its label (a backend's with its identity as the title).
    fn lane_label(&self, svg: &mut String, l: &LaneKind, y: f64) {
        let (attrs, label) = match l {
            LaneKind::Client(c) => (
                format!("data-lane=\"C{0}\" data-client=\"C{0}\"", c + 1),
                format!("C{}", c + 1),
            ),
            LaneKind::Nemesis => (
                "data-lane=\"nemesis\" data-nemesis=\"nemesis\"".to_string(),
                "nemesis".to_string(),
            ),
            LaneKind::Backend(b) => (
                format!(
                    "data-lane=\"{0}\" data-backend=\"{0}\" data-pid=\"{1}\" data-backend-start=\"{2}\"",
                    esc(&self.bsym(*b)),
                    b.pid,
                    esc(&b.backend_start())
                ),
                format!("{} pid {}", self.bsym(*b), b.pid),
            ),
        };
        let _ = writeln!(svg, "<g class=\"lane\" {attrs}>");
        let _ = write!(
            svg,
            "<text class=\"lane-label\" x=\"8\" y=\"{:.1}\">{}",
            y + LANE_H / 2.0 + 4.0,
            esc(&label)
        );
        if let LaneKind::Backend(b) = l {
            let _ = write!(
                svg,
                "<title>{}</title>",
                esc(&format!(
                    "{} pid {} backend_start {}",
                    self.bsym(*b),
                    b.pid,
                    b.backend_start()
                ))
            );
        }
        svg.push_str("</text>\n");
    }

    /// The ops backend `b` served: thin marks at the bottom of its lane.
    fn served(&self, svg: &mut String, b: BackendId, y: f64) {
        for s in &self.steps {
            let Some(d) = s.done.filter(|d| d.backend == Some(b)) else {
                continue;
            };
            let (Some(t0), Some(t1)) = (s.t_invoke, s.t_done) else {
                continue;
            };
            let (x0, x1) = (self.x(t0), self.x(t1));
            let _ = writeln!(
                svg,
                "<g class=\"serve\" data-step=\"{}\"><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"3\"/><title>{}</title></g>",
                s.index,
                y + LANE_H - 5.0,
                (x1 - x0).max(MIN_W),
                esc(&format!(
                    "{} (pid {}, backend_start {}) served {}: {}",
                    self.bsym(b),
                    b.pid,
                    b.backend_start(),
                    s.label(),
                    reply_text(&d.value)
                ))
            );
        }
    }

    /// The locks backend `b` held or waited for, as `pg_locks` showed them: spans in its lane.
    fn locks(&self, svg: &mut String, b: BackendId, y: f64) {
        let base = self.base;
        for sp in self.spans.iter().filter(|sp| sp.backend == b) {
            let (x0, x1) = (self.x(sp.t0), self.x(sp.t1));
            let w = (x1 - x0).max(MIN_W * 2.0);
            let key = sp.key.to_string();
            let text = fitting(w, &key, "");
            let _ = writeln!(
                svg,
                "<g class=\"{}\" data-pid=\"{}\" data-backend-start=\"{}\" data-key=\"{}\" data-t0=\"{}\" data-t1=\"{}\"><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" rx=\"2\"/>{}<title>{}</title></g>",
                if sp.granted { "hold" } else { "wait" },
                sp.backend.pid,
                esc(&sp.backend_start),
                esc(&key),
                sp.t0,
                sp.t1,
                y + 4.0,
                LANE_H - 11.0,
                bar_text(text, x0 + 3.0, y + LANE_H / 2.0 + 2.0),
                esc(&format!(
                    "{} pid {} backend_start {}\n{} key {} ({}) in pg_locks\nseen from {} to {}{}",
                    self.bsym(sp.backend),
                    sp.backend.pid,
                    sp.backend_start,
                    if sp.granted { "holds" } else { "waits for" },
                    sp.key,
                    sp.mode,
                    ms(sp.t0, base),
                    ms(sp.t1, base),
                    if sp.open_end {
                        " (still there at the last observation)"
                    } else {
                        ""
                    }
                ))
            );
        }
    }

    /// The violation: where the checker found it.
    fn violation(&self, svg: &mut String) {
        let invariant = self.invariant;
        let Some(v) = self
            .check
            .violations
            .iter()
            .find(|v| v.invariant == invariant)
        else {
            return;
        };
        let s = self.view.steps.get(v.step);
        let t = s
            .and_then(|s| s.t_done.or(self.t_start_of(s)))
            .unwrap_or(self.t_hi);
        let xv = self.x(t);
        let lanes_bottom = self.lanes_bottom();
        let anchor = if xv > self.x_end - 160.0 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        let _ = writeln!(
            svg,
            "<g class=\"violation\" data-invariant=\"{}\" data-step=\"{}\" data-t=\"{t}\"><line x1=\"{xv:.1}\" y1=\"4\" x2=\"{xv:.1}\" y2=\"{lanes_bottom:.1}\"/><text x=\"{:.1}\" y=\"14\" text-anchor=\"{anchor}\">{} violated (step {})</text><title>{}</title></g>",
            esc(&v.invariant),
            v.step,
            xv + dx,
            esc(&v.invariant),
            v.step + 1,
            esc(&format!(
                "{} violated at step {}: {}",
                v.invariant,
                v.step + 1,
                v.detail
            ))
        );
    }

    /// One op's bar.
    fn op_bar(&self, s: &StepView, y: f64) -> String {
        let skip_at = self.skip_t.get(&s.index).copied();
        let base = self.base;
        let op = s.op.map(|o| o.name()).unwrap_or("?");
        let key = s.key.map(|k| k.to_string());
        let (t0, t1, class) = match (s.t_invoke, s.done, s.t_done) {
            (Some(t0), Some(d), Some(t1)) => (t0, t1, reply_class(&d.value)),
            (Some(t0), _, _) => (t0, self.t_hi, "info"),
            // Skipped: no invoke; drawn where the schedule skipped it.
            (None, _, _) => (skip_at.unwrap_or(base), skip_at.unwrap_or(base), "skip"),
        };
        let (x0, x1) = if class == "skip" {
            let xm = self.x(t0);
            (xm - 24.0, xm + 24.0)
        } else {
            (self.x(t0), self.x(t1))
        };
        let w = (x1 - x0).max(MIN_W);
        let mut full = op.to_string();
        if let Some(k) = &key {
            full.push(' ');
            full.push_str(k);
        }
        if let Some(m) = s.ms {
            full.push_str(&format!(" {m}ms"));
        }
        let text = fitting(w, &full, op);
        let who = match s.invoke.map(|i| i.p).or(s.skip.map(|k| k.p)) {
            Some(Process::Nemesis) => "nemesis".to_string(),
            _ => format!("C{}", s.client + 1),
        };
        let mut title = format!("{} (step {})", s.label(), s.index + 1);
        if who == "nemesis" {
            title = format!("nemesis: {title}");
        }
        if let Some(k) = s.skip {
            title.push_str(&format!("\nskipped: {}", k.reason));
        } else {
            match s.done {
                Some(d) => {
                    title.push_str(&format!("\nreply: {}", reply_text(&d.value)));
                    if let Some(e) = self.check.expected_at(s.index)
                        && !e.same_as(&d.value)
                    {
                        title.push_str(&format!(" (the model predicted {e})"));
                    }
                }
                None => title.push_str("\nno reply recorded (outcome unknown)"),
            }
            if let Some(b) = s.done.and_then(|d| d.backend) {
                title.push_str(&format!(
                    "\nserved by {} pid {} backend_start {}",
                    self.bsym(b),
                    b.pid,
                    b.backend_start()
                ));
            }
            if let Some(t) = s.target() {
                title.push_str(&format!(
                    "\ntarget {} pid {} backend_start {}",
                    self.bsym(t),
                    t.pid,
                    t.backend_start()
                ));
            }
            title.push_str(&format!(
                "\ninvoked at {}, {} at {} (took {:.3} ms)",
                ms(t0, base),
                if s.done.is_some() {
                    "completed"
                } else {
                    "still running"
                },
                ms(t1, base),
                t1.saturating_sub(t0) as f64 / 1e6
            ));
        }
        for v in self.check.at_step(s.index) {
            title.push_str(&format!("\n-> {} violated: {}", v.invariant, v.detail));
        }
        let backend_attrs = s
            .done
            .and_then(|d| d.backend)
            .map(|b| {
                format!(
                    " data-pid=\"{}\" data-backend-start=\"{}\"",
                    b.pid,
                    esc(&b.backend_start())
                )
            })
            .unwrap_or_default();
        format!(
            "<g class=\"op {class}\" data-step=\"{}\" data-client=\"{}\" data-op=\"{}\"{}{backend_attrs} data-t0=\"{t0}\" data-t1=\"{t1}\"><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" rx=\"2\"/>{}<title>{}</title></g>\n",
            s.index,
            esc(&who),
            op,
            key.as_ref()
                .map(|k| format!(" data-key=\"{}\"", esc(k)))
                .unwrap_or_default(),
            y + 4.0,
            LANE_H - 8.0,
            bar_text(text, x0 + 3.0, y + LANE_H / 2.0 + 3.5),
            esc(&title)
        )
    }
}

/// When a step began: its invoke, or when it was skipped.
fn started(s: &StepView, skip_t: &BTreeMap<usize, u64>) -> Option<u64> {
    s.t_invoke.or(skip_t.get(&s.index).copied())
}

/// A sequential case's scale: a slot per step, its op from 10% to 70% of it (a skip at
/// 40%). Returns the scale, the plot's width and the end of the time drawn.
fn sequential_scale(
    view: &CaseView,
    skip_t: &BTreeMap<usize, u64>,
    base: u64,
    t_last: u64,
    slot_w: f64,
) -> (Scale, f64, u64) {
    let n = view.steps.len().max(1);
    let mut anchors: Vec<(u64, f64)> = vec![(base, LABEL_W)];
    for s in &view.steps {
        let slot = LABEL_W + s.index as f64 * slot_w;
        if let Some(ti) = s.t_invoke {
            anchors.push((ti, slot + 0.1 * slot_w));
            if let Some(td) = s.t_done {
                anchors.push((td, slot + 0.7 * slot_w));
            }
        } else if let Some(t) = skip_t.get(&s.index) {
            anchors.push((*t, slot + 0.4 * slot_w));
        }
    }
    anchors.push((t_last, LABEL_W + n as f64 * slot_w));
    (Scale::new(anchors), n as f64 * slot_w, t_last)
}

/// A concurrent case's scale: time compressed between the steps' and the lock spans' times,
/// from the first step to the last reply or the end observation, padded by 1% each side.
/// Returns the scale, the plot's width and the end of the time drawn.
fn concurrent_scale(
    events: &[Event],
    steps: &[&StepView],
    skip_t: &BTreeMap<usize, u64>,
    base: u64,
    t_last: u64,
) -> (Scale, f64, u64) {
    let lo = steps
        .iter()
        .filter_map(|s| started(s, skip_t))
        .min()
        .unwrap_or(base);
    let hi = steps
        .iter()
        .filter_map(|s| s.t_done)
        .chain(events.iter().filter_map(|e| match &e.body {
            Body::Obs(o) if o.at == crate::history::At::End => Some(e.t),
            _ => None,
        }))
        .max()
        .unwrap_or(t_last)
        .max(lo + 1);
    let pad = (hi - lo) / 100;
    let (lo, hi) = (lo.saturating_sub(pad), hi + pad);
    let mut times: Vec<u64> = vec![lo, hi];
    for s in steps {
        times.extend(started(s, skip_t));
        times.extend(s.t_done);
    }
    for sp in lock_spans(events, hi) {
        times.push(sp.t0.clamp(lo, hi));
        times.push(sp.t1.clamp(lo, hi));
    }
    (Scale::compressed(&times, LABEL_W, PLOT_W), PLOT_W, hi)
}

/// The lanes: clients with steps, the nemesis, backends that served or held. Returns them
/// and the backends in lane order (`order`, then those only the spans have).
fn lanes(
    steps: &[&StepView],
    order: &[BackendId],
    spans: &[Span],
) -> (Vec<LaneKind>, Vec<BackendId>) {
    let mut lanes: Vec<LaneKind> = vec![];
    for s in steps {
        let l = match step_process(s) {
            Process::Client(c) => LaneKind::Client(c),
            Process::Nemesis => LaneKind::Nemesis,
        };
        if !lanes.contains(&l) {
            lanes.push(l);
        }
    }
    lanes.sort();
    let mut backends: Vec<BackendId> = order.to_vec();
    for sp in spans {
        if !backends.contains(&sp.backend) {
            backends.push(sp.backend);
        }
    }
    lanes.extend(backends.iter().map(|b| LaneKind::Backend(*b)));
    (lanes, backends)
}

/// A bar's label at (x, y), or nothing when it does not fit (`text` empty).
fn bar_text(text: &str, x: f64, y: f64) -> String {
    if text.is_empty() {
        return String::new();
    }
    format!("<text x=\"{x:.1}\" y=\"{y:.1}\">{}</text>", esc(text))
}

/// `0.42 ms`, `3.1 ms`, `210 ms` from nanoseconds.
fn short_ms(ns: u64) -> String {
    let m = ns as f64 / 1e6;
    if m < 10.0 {
        format!("{m:.2} ms")
    } else if m < 100.0 {
        format!("{m:.1} ms")
    } else {
        format!("{m:.0} ms")
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
