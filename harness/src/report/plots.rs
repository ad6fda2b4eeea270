//! Whole-run performance plots for `report.html` (after Jepsen's perf plots), inline SVG
//! drawn from the recorded history alone: every client op's latency over the run (a point
//! per op at its invoke, log scale, coloured by op kind, hollow when the op failed or its
//! outcome is unknown), and each op kind's completions per second over the run. The
//! nemesis's ops (faults) shade the time they lasted in both plots.
//!
//! Elements for tests and readers: `svg.perf-svg[data-plot=latency|rate][data-series]`,
//! `g.series[data-op][data-ops][data-points]` (ops of that kind, and points drawn: at most
//! [`MAX_POINTS`] per kind, evenly picked), `rect.fault-window[data-op][data-t0][data-t1]`.

use super::markup::esc;
use crate::history::{Body, Event, Process};
use crate::vocab::{Op, Outcome};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

/// Points drawn per op kind in the latency plot (a long run's ops are sampled evenly).
pub const MAX_POINTS: usize = 4000;

const W: f64 = 960.0;
const H: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 36.0;

/// A colour per op kind (a run has at most a dozen or so kinds; past that they repeat).
const PALETTE: [&str; 16] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#393b79", "#843c39", "#637939", "#7b4173", "#8c6d31", "#000000",
];

/// One client op: when it was invoked, how long it took, how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub t: u64,
    pub op: Op,
    pub latency: u64,
    pub outcome: Outcome,
}

/// A nemesis op, from its invoke to its completion (or the case's end).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultWindow {
    pub op: Op,
    pub t0: u64,
    pub t1: u64,
}

/// What the plots draw: every completed client op and every fault of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Perf {
    pub samples: Vec<Sample>,
    pub faults: Vec<FaultWindow>,
    /// The last event's time (ns since the run started).
    pub t_end: u64,
}

impl Perf {
    /// Pair invokes with their completions, case by case (an op left without a completion
    /// when its case ends is not a sample; a fault left open ends with its case).
    pub fn from_events(events: impl IntoIterator<Item = Result<Event>>) -> Result<Perf> {
        let mut perf = Perf::default();
        let mut open: HashMap<(Process, Op), Vec<u64>> = HashMap::new();
        for e in events {
            let e = e?;
            perf.t_end = perf.t_end.max(e.t);
            match &e.body {
                Body::Case(_) | Body::CaseEnd(_) | Body::RunEnd(_) => {
                    perf.close_faults(&mut open, e.t)
                }
                Body::Invoke(i) => open.entry((i.p, i.f)).or_default().push(e.t),
                Body::Ok(_) | Body::Fail(_) | Body::Info(_) => {
                    let c = e.completion().expect("a completion");
                    let Some(t0) = open
                        .get_mut(&(c.p, c.f))
                        .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
                    else {
                        continue;
                    };
                    match c.p {
                        Process::Nemesis => perf.faults.push(FaultWindow {
                            op: c.f,
                            t0,
                            t1: e.t,
                        }),
                        Process::Client(_) => perf.samples.push(Sample {
                            t: t0,
                            op: c.f,
                            latency: e.t.saturating_sub(t0),
                            outcome: c.value.outcome(),
                        }),
                    }
                }
                _ => {}
            }
        }
        let t = perf.t_end;
        perf.close_faults(&mut open, t);
        perf.faults.sort_by_key(|f| (f.t0, f.t1));
        Ok(perf)
    }

    fn close_faults(&mut self, open: &mut HashMap<(Process, Op), Vec<u64>>, t: u64) {
        for ((p, op), starts) in open.drain() {
            if p == Process::Nemesis {
                for t0 in starts {
                    self.faults.push(FaultWindow { op, t0, t1: t });
                }
            }
        }
    }

    /// The history of the run directory `dir`, if it has one.
    pub fn load(dir: &Path) -> Result<Option<Perf>> {
        let path = dir.join(crate::history::store::FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let reader = crate::history::store::HistoryReader::open(&path)?;
        Perf::from_events(reader).map(Some)
    }

    /// The op kinds, in the order of [`Op`], with their samples.
    fn by_op(&self) -> BTreeMap<Op, Vec<&Sample>> {
        let mut m: BTreeMap<Op, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            m.entry(s.op).or_default().push(s);
        }
        m
    }
}

/// The HTML section: a heading, both plots, a caption.
pub fn section(perf: &Perf) -> String {
    let mut b = String::from("<h2 id=\"performance\">Performance over the run</h2>\n");
    if perf.samples.is_empty() {
        b.push_str("<p class=\"caption\">No client op completed in this run's history.</p>\n");
        return b;
    }
    let _ = writeln!(
        b,
        "<p class=\"caption\">{} client ops and {} faults over {:.1}s, every phase of the run \
         (generated cases, shrinking, evidence replays). Shaded: a fault, from its invoke to its \
         completion. Hollow points: the op failed or its outcome is unknown.</p>",
        perf.samples.len(),
        perf.faults.len(),
        perf.t_end as f64 / 1e9
    );
    b.push_str("<div class=\"timeline\">\n");
    b.push_str(&latency_svg(perf));
    b.push_str("</div>\n<div class=\"timeline\">\n");
    b.push_str(&rate_svg(perf));
    b.push_str("</div>\n");
    b
}

fn x_of(t: u64, t_end: u64) -> f64 {
    LEFT + (W - LEFT - RIGHT) * (t as f64 / t_end.max(1) as f64)
}

/// The frame of a plot: the svg's start, fault windows, the time axis.
fn frame(plot: &str, series: usize, perf: &Perf, y_label: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg class=\"perf-svg\" data-plot=\"{plot}\" data-series=\"{series}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\">"
    );
    let bottom = H - BOTTOM;
    for f in &perf.faults {
        let (x0, x1) = (x_of(f.t0, perf.t_end), x_of(f.t1, perf.t_end));
        let _ = writeln!(
            s,
            "<rect class=\"fault-window\" data-op=\"{}\" data-t0=\"{}\" data-t1=\"{}\" x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#ff9800\" fill-opacity=\"0.18\"><title>fault {} from {:.3}s to {:.3}s</title></rect>",
            f.op.name(),
            f.t0,
            f.t1,
            (x1 - x0).max(1.0),
            bottom - TOP,
            f.op.name(),
            f.t0 as f64 / 1e9,
            f.t1 as f64 / 1e9
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#889\"/>",
        W - LEFT - RIGHT,
        bottom - TOP
    );
    let secs = perf.t_end as f64 / 1e9;
    let step = nice_step(secs / 8.0);
    let mut t = 0.0;
    while t <= secs + 1e-9 {
        let x = x_of((t * 1e9) as u64, perf.t_end);
        let _ = writeln!(
            s,
            "<g class=\"tick\"><line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#889\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
            bottom + 4.0,
            bottom + 15.0,
            trim(t)
        );
        t += step;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time since the run started (s)</text>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 4.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(12 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        TOP + (bottom - TOP) / 2.0,
        esc(y_label)
    );
    s
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn legend(s: &mut String, i: usize, op: Op, extra: &str) {
    let y = TOP + 8.0 + 15.0 * i as f64;
    let x = W - RIGHT + 12.0;
    let _ = writeln!(
        s,
        "<g class=\"key\"><rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\" dominant-baseline=\"middle\">{} {}</text></g>",
        y - 5.0,
        PALETTE[i % PALETTE.len()],
        x + 14.0,
        op.name(),
        esc(extra)
    );
}

/// Latency of every client op (log scale, ms), a point at its invoke.
pub fn latency_svg(perf: &Perf) -> String {
    let by_op = perf.by_op();
    let mut s = frame("latency", by_op.len(), perf, "latency (ms, log scale)");
    let bottom = H - BOTTOM;
    let ms = |ns: u64| (ns as f64 / 1e6).max(1e-3);
    let lo = perf
        .samples
        .iter()
        .map(|x| ms(x.latency))
        .fold(f64::MAX, f64::min);
    let hi = perf
        .samples
        .iter()
        .map(|x| ms(x.latency))
        .fold(0.0, f64::max);
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
    );
    let y = |v: f64| bottom - (bottom - TOP) * (v.log10() - lo.log10()) / (hi.log10() - lo.log10());
    let mut d = lo;
    while d <= hi * 1.0001 {
        let yy = y(d);
        let _ = writeln!(
            s,
            "<g class=\"tick\"><line x1=\"{:.1}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#e3e6ea\"/><text x=\"{:.1}\" y=\"{yy:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text></g>",
            LEFT,
            W - RIGHT,
            LEFT - 4.0,
            trim(d)
        );
        d *= 10.0;
    }
    for (i, (op, samples)) in by_op.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let stride = samples.len().div_ceil(MAX_POINTS).max(1);
        let drawn: Vec<&&Sample> = samples.iter().step_by(stride).collect();
        let _ = writeln!(
            s,
            "<g class=\"series\" data-op=\"{}\" data-ops=\"{}\" data-points=\"{}\">",
            op.name(),
            samples.len(),
            drawn.len()
        );
        for p in drawn {
            let fill = if p.outcome == Outcome::Ok {
                colour
            } else {
                "none"
            };
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{fill}\" stroke=\"{colour}\" stroke-width=\"0.8\"/>",
                x_of(p.t, perf.t_end),
                y(ms(p.latency))
            );
        }
        s.push_str("</g>\n");
        legend(&mut s, i, *op, &format!("({})", samples.len()));
    }
    s.push_str("</svg>\n");
    s
}

/// Completions per second of each op kind, over buckets of a fixed width.
pub fn rate_svg(perf: &Perf) -> String {
    let by_op = perf.by_op();
    let mut s = frame("rate", by_op.len(), perf, "ops per second");
    let bottom = H - BOTTOM;
    let bucket = nice_step(perf.t_end as f64 / 1e9 / 60.0).max(0.01);
    let n = ((perf.t_end as f64 / 1e9 / bucket).ceil() as usize).max(1);
    let counts: Vec<(Op, Vec<u64>)> = by_op
        .iter()
        .map(|(op, samples)| {
            let mut c = vec![0u64; n];
            for x in samples {
                let b = ((x.t as f64 / 1e9 / bucket) as usize).min(n - 1);
                c[b] += 1;
            }
            (*op, c)
        })
        .collect();
    let max_rate = counts
        .iter()
        .flat_map(|(_, c)| c.iter())
        .map(|c| *c as f64 / bucket)
        .fold(0.0, f64::max)
        .max(1.0);
    let step = nice_step(max_rate / 5.0);
    let top_rate = (max_rate / step).ceil() * step;
    let y = |r: f64| bottom - (bottom - TOP) * r / top_rate;
    let mut r = 0.0;
    while r <= top_rate + 1e-9 {
        let yy = y(r);
        let _ = writeln!(
            s,
            "<g class=\"tick\"><line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#e3e6ea\"/><text x=\"{:.1}\" y=\"{yy:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text></g>",
            W - RIGHT,
            LEFT - 4.0,
            trim(r)
        );
        r += step;
    }
    let t_bucket = (bucket * 1e9) as u64;
    for (i, (op, c)) in counts.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let points: Vec<String> = c
            .iter()
            .enumerate()
            .map(|(b, k)| {
                let mid = (b as u64 * t_bucket + t_bucket / 2).min(perf.t_end);
                format!("{:.1},{:.1}", x_of(mid, perf.t_end), y(*k as f64 / bucket))
            })
            .collect();
        let _ = writeln!(
            s,
            "<g class=\"series\" data-op=\"{}\" data-ops=\"{}\" data-points=\"{}\"><polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/></g>",
            op.name(),
            c.iter().sum::<u64>(),
            points.len(),
            points.join(" ")
        );
        legend(&mut s, i, *op, "");
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\">buckets of {}s</text>",
        W - RIGHT + 12.0,
        bottom,
        trim(bucket)
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn ev(v: Value) -> Result<Event> {
        Ok(serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}")))
    }

    fn op(t: u64, p: &str, f: &str, kind: &str, value: Value) -> Vec<Result<Event>> {
        vec![
            ev(json!({"t": t, "type": "invoke", "p": p, "f": f})),
            ev(json!({"t": t + 1_000_000, "type": kind, "p": p, "f": f, "value": value})),
        ]
    }

    /// Two cases over 4 s: 3 `lock` ops (one failed), 2 `unlock` ops, a pooler pause that
    /// completes and a pooler kill left open when its case ends.
    fn synthetic() -> Vec<Result<Event>> {
        let s = 1_000_000_000u64;
        let mut v = vec![ev(
            json!({"t": 0, "type": "case", "case": 0, "phase": "run",
            "clients": 2, "steps": 4}),
        )];
        v.extend(op(s / 10, "C1", "lock", "ok", json!({"kind": "ok"})));
        v.extend(op(
            s / 2,
            "C2",
            "lock",
            "fail",
            json!({"kind": "error", "code": "55P03"}),
        ));
        v.push(ev(
            json!({"t": s, "type": "invoke", "p": "nemesis", "f": "pooler_pause"}),
        ));
        v.extend(op(
            s + s / 2,
            "C1",
            "unlock",
            "ok",
            json!({"kind": "bool", "value": true}),
        ));
        v.push(ev(
            json!({"t": 2 * s, "type": "ok", "p": "nemesis", "f": "pooler_pause",
            "value": {"kind": "ok"}}),
        ));
        // An op whose completion never came: not a sample.
        v.push(ev(
            json!({"t": 2 * s + 5, "type": "invoke", "p": "C2", "f": "unlock"}),
        ));
        v.push(ev(
            json!({"t": 2 * s + 10, "type": "invoke", "p": "nemesis", "f": "pooler_kill"}),
        ));
        v.push(ev(
            json!({"t": 3 * s, "type": "case_end", "case": 0, "steps_us": 1,
            "reset_us": 1}),
        ));
        v.push(ev(
            json!({"t": 3 * s + 1, "type": "case", "case": 1, "phase": "run",
            "clients": 2, "steps": 2}),
        ));
        v.extend(op(3 * s + 2, "C1", "lock", "ok", json!({"kind": "ok"})));
        v.extend(op(
            4 * s - 2_000_000,
            "C2",
            "unlock",
            "ok",
            json!({"kind": "bool", "value": false}),
        ));
        v
    }

    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    #[test]
    fn invokes_pair_with_completions_and_faults_become_windows() {
        let p = Perf::from_events(synthetic()).unwrap();
        let ops: Vec<(&str, u64, Outcome)> = p
            .samples
            .iter()
            .map(|s| (s.op.name(), s.latency, s.outcome))
            .collect();
        assert_eq!(
            ops,
            [
                ("lock", 1_000_000, Outcome::Ok),
                ("lock", 1_000_000, Outcome::Fail),
                ("unlock", 1_000_000, Outcome::Ok),
                ("lock", 1_000_000, Outcome::Ok),
                ("unlock", 1_000_000, Outcome::Ok),
            ]
        );
        let s = 1_000_000_000u64;
        let faults: Vec<(&str, u64, u64)> =
            p.faults.iter().map(|f| (f.op.name(), f.t0, f.t1)).collect();
        assert_eq!(
            faults,
            [
                ("pooler_pause", s, 2 * s),
                ("pooler_kill", 2 * s + 10, 3 * s)
            ]
        );
        assert_eq!(p.t_end, 4 * s - 1_000_000);
    }

    #[test]
    fn the_plots_draw_a_point_per_op_a_line_per_kind_and_shade_each_fault() {
        let p = Perf::from_events(synthetic()).unwrap();
        let lat = latency_svg(&p);
        assert!(lat.starts_with("<svg class=\"perf-svg\" data-plot=\"latency\" data-series=\"2\""));
        assert_eq!(count(&lat, "<circle "), 5);
        assert!(
            lat.contains("data-op=\"lock\" data-ops=\"3\" data-points=\"3\""),
            "{lat}"
        );
        assert!(
            lat.contains("data-op=\"unlock\" data-ops=\"2\" data-points=\"2\""),
            "{lat}"
        );
        // The failed lock is hollow; the ok ones filled.
        assert_eq!(count(&lat, "fill=\"none\" stroke=\"#1f77b4\""), 1, "{lat}");
        assert_eq!(count(&lat, "class=\"fault-window\""), 2);
        assert!(
            lat.contains("data-op=\"pooler_pause\" data-t0=\"1000000000\" data-t1=\"2000000000\"")
        );
        let rate = rate_svg(&p);
        assert!(rate.contains("data-plot=\"rate\" data-series=\"2\""));
        assert_eq!(count(&rate, "<polyline "), 2);
        assert_eq!(count(&rate, "class=\"fault-window\""), 2);
        assert!(rate.contains("data-op=\"lock\" data-ops=\"3\""), "{rate}");
        assert!(rate.contains("data-op=\"unlock\" data-ops=\"2\""), "{rate}");
        // A fault window's x span is proportional to its time: the pause lasts 1 s of 4.
        let plot_w = W - LEFT - RIGHT;
        let want = plot_w * 1e9 / p.t_end as f64;
        let at = lat.find("data-op=\"pooler_pause\"").unwrap();
        let w: f64 = lat[at..]
            .split("width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((w - want).abs() < 0.2, "{w} vs {want}");
        let html = section(&p);
        assert_eq!(count(&html, "class=\"perf-svg\""), 2);
    }

    #[test]
    fn a_long_run_samples_its_points_and_an_empty_one_says_so() {
        let mut events = vec![];
        for i in 0..(MAX_POINTS as u64 * 2 + 10) {
            events.extend(op(
                i * 10_000_000,
                "C1",
                "lock",
                "ok",
                json!({"kind": "ok"}),
            ));
        }
        let p = Perf::from_events(events).unwrap();
        let lat = latency_svg(&p);
        let drawn = count(&lat, "<circle ");
        assert!(drawn <= MAX_POINTS && drawn > MAX_POINTS / 2, "{drawn}");
        assert!(lat.contains(&format!(
            "data-ops=\"{}\" data-points=\"{drawn}\"",
            MAX_POINTS * 2 + 10
        )));
        let empty = section(&Perf::default());
        assert!(!empty.contains("<svg"), "{empty}");
        assert!(empty.contains("No client op completed"));
    }

    #[test]
    fn steps_are_one_two_or_five() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(31.0), 50.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
