//! `report.html` in a real browser: chaos runs of a sequential and a concurrent topology
//! against real servers, their report opened by Debian's headless `chromium` (`--dump-dom`
//! and `--screenshot`), and assertions on the DOM the browser built: the verdict table, the
//! timeline's lanes, op bars, lock-holding spans with their backend's `(pid,
//! backend_start)`, the violation mark, and (concurrent) ops of different clients that
//! overlap in time; the whole-run plots (latency and ops/s per op kind, fault windows)
//! agree with the history. Also `--junit`: the XML agrees with `results.json`, and a failure
//! carries its minimal case verbatim.
//!
//! chromium is required: without it the test fails (`just test` installs it first when run
//! as root, and otherwise stops with the command to run; see the justfile's `browser`).

mod common;

use common::{pgchaos, root, text, tmp};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One real-server run at a time (timing-dependent outcomes, two cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Bound on one chromium invocation.
const BROWSER: Duration = Duration::from_secs(90);

/// No PostgreSQL or PgBouncer left behind by a run: this process is the subreaper of
/// everything it started, so an orphaned server would be in its tree.
fn assert_no_servers_left(context: &str) {
    let me = std::process::id() as i32;
    let servers: Vec<common::Proc> = common::tree(me)
        .into_iter()
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", p.pid)).unwrap_or_default();
            matches!(comm.trim(), "postgres" | "pgbouncer")
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Err(left) = rt.block_on(common::wait_dead(&servers, Duration::from_secs(10))) {
        panic!("{context}: servers left running: {left:?}");
    }
}

/// The chromium binary on PATH. Missing is a failure, not a skip.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "chromium is not installed (not on PATH): this test renders report.html in a real \
         browser; install Debian's chromium as root (`apt-get install -y chromium`; `just test` \
         does when run as root)"
    );
}

/// Run headless chromium with `args` then `url`, stdout into `out`, bounded by [`BROWSER`].
fn browse(args: &[String], url: &str, out: &Path, work: &Path) {
    let profile = work.join("chromium-profile");
    let err_path = out.with_extension("stderr");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(File::create(out).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("start chromium");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > BROWSER {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} {url}: no exit within {BROWSER:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "chromium {args:?} {url}: {status}\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&profile);
}

// ---------------------------------------------------------------------------------------
// A small tag scanner: enough to read the DOM chromium serialises, and the JUnit XML.

#[derive(Debug)]
struct Tag {
    name: String,
    attrs: BTreeMap<String, String>,
    /// Byte offset of the `<`, and just past the `>`.
    start: usize,
    end: usize,
}

impl Tag {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.get(name).map(String::as_str)
    }

    fn classes(&self) -> Vec<&str> {
        self.attr("class")
            .map(|c| c.split_whitespace().collect())
            .unwrap_or_default()
    }

    fn has_class(&self, c: &str) -> bool {
        self.classes().contains(&c)
    }

    fn num(&self, name: &str) -> u64 {
        self.attr(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} has no numeric {name}: {:?}", self.name, self.attrs))
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&#10;", "\n")
        .replace("&#13;", "\r")
        .replace("&#9;", "\t")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Every start tag of `doc`, in order.
fn tags(doc: &str) -> Vec<Tag> {
    let b = doc.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while let Some(off) = doc[i..].find('<') {
        let start = i + off;
        i = start + 1;
        if i >= b.len() || !b[i].is_ascii_alphabetic() {
            continue; // end tag, comment, doctype, processing instruction
        }
        let name_end = i + doc[i..]
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(doc.len() - i);
        let name = doc[i..name_end].to_ascii_lowercase();
        let mut attrs = BTreeMap::new();
        let mut j = name_end;
        loop {
            while j < b.len() && (b[j].is_ascii_whitespace() || b[j] == b'/') {
                j += 1;
            }
            if j >= b.len() || b[j] == b'>' {
                j += 1;
                break;
            }
            let an_end = j + doc[j..]
                .find(|c: char| c.is_whitespace() || c == '=' || c == '>' || c == '/')
                .unwrap_or(doc.len() - j);
            let an = doc[j..an_end].to_ascii_lowercase();
            j = an_end;
            let mut value = String::new();
            if j < b.len() && b[j] == b'=' {
                j += 1;
                if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                    let q = b[j] as char;
                    let close = j + 1 + doc[j + 1..].find(q).expect("unterminated attribute");
                    value = unescape(&doc[j + 1..close]);
                    j = close + 1;
                } else {
                    let v_end = j + doc[j..]
                        .find(|c: char| c.is_whitespace() || c == '>')
                        .unwrap_or(doc.len() - j);
                    value = unescape(&doc[j..v_end]);
                    j = v_end;
                }
            }
            attrs.insert(an, value);
        }
        out.push(Tag {
            name,
            attrs,
            start,
            end: j.min(doc.len()),
        });
        i = j.min(doc.len());
    }
    out
}

/// The text of the first `<title>` inside the element starting at `t` (before its `</g>`).
fn title_of(doc: &str, t: &Tag) -> Option<String> {
    let rest = &doc[t.end..];
    let close = rest.find("</g>").unwrap_or(rest.len());
    let open = rest[..close].find("<title>")?;
    let body = &rest[open + 7..];
    Some(unescape(&body[..body.find("</title>")?]))
}

/// The text content between a start tag and its end tag (no nesting of the same name).
fn inner(doc: &str, t: &Tag) -> String {
    let rest = &doc[t.end..];
    let close = rest
        .find(&format!("</{}>", t.name))
        .unwrap_or_else(|| panic!("no </{}>", t.name));
    rest[..close].to_string()
}

// ---------------------------------------------------------------------------------------
// Assertions on a rendered report.

fn load_results(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

fn violated(results: &Value) -> BTreeSet<String> {
    results["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["verdict"] == "violated")
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

/// One timeline of the DOM: its section's invariant and the tags inside its `<svg>`.
struct Timeline<'d> {
    invariant: String,
    schedule: String,
    /// The evidence replay showed the violation.
    shown: bool,
    tags: Vec<&'d Tag>,
}

fn timelines<'d>(dom: &str, all: &'d [Tag]) -> Vec<Timeline<'d>> {
    all.iter()
        .filter(|t| t.name == "svg" && t.has_class("timeline-svg"))
        .map(|svg| {
            let end = svg.end + dom[svg.end..].find("</svg>").expect("</svg>");
            Timeline {
                invariant: svg.attr("data-invariant").unwrap_or_default().to_string(),
                schedule: svg.attr("data-schedule").unwrap_or_default().to_string(),
                shown: match svg.attr("data-shown") {
                    Some("true") => true,
                    Some("false") => false,
                    other => panic!("data-shown {other:?}"),
                },
                tags: all
                    .iter()
                    .filter(|t| t.start > svg.start && t.start < end)
                    .collect(),
            }
        })
        .collect()
}

impl Timeline<'_> {
    fn with_class(&self, class: &str) -> Vec<&Tag> {
        self.tags
            .iter()
            .copied()
            .filter(|t| t.has_class(class))
            .collect()
    }

    fn client_lanes(&self) -> Vec<&str> {
        self.with_class("lane")
            .into_iter()
            .filter_map(|t| t.attr("data-client"))
            .collect()
    }

    fn ops(&self) -> Vec<&Tag> {
        self.with_class("op")
            .into_iter()
            .filter(|t| {
                ["ok", "false", "error", "info", "skip"]
                    .iter()
                    .any(|c| t.has_class(c))
            })
            .collect()
    }
}

/// What every report must show; returns the DOM and its tags for the schedule's checks.
fn check_report(dir: &Path, work: &Path, schedule: &str) -> (String, Vec<Tag>) {
    let html_path = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path)
        .unwrap_or_else(|e| panic!("{}: {e}", html_path.display()));
    // Self-contained: nothing fetched from anywhere.
    let no_ns = html.replace("http://www.w3.org/2000/svg", "");
    for banned in [
        "http://",
        "https://",
        "<script src",
        "<link",
        "@import",
        "url(",
    ] {
        assert!(!no_ns.contains(banned), "report.html contains {banned:?}");
    }
    let url = format!("file://{}", html_path.display());
    let dump = work.join(format!("{schedule}-dom.html"));
    browse(&["--dump-dom".to_string()], &url, &dump, work);
    let dom = std::fs::read_to_string(&dump).unwrap();
    assert!(dom.len() > 1000, "chromium dumped {} bytes", dom.len());
    let all = tags(&dom);
    let results = load_results(dir);
    let want_violated = violated(&results);
    assert!(!want_violated.is_empty(), "the run found no violation");

    // The verdict table, as the browser built it: a row per invariant, the violated ones
    // exactly those of results.json, each linked to its case file.
    let table = all
        .iter()
        .find(|t| t.name == "table" && t.has_class("verdicts"))
        .expect("no verdict table in the DOM");
    let rows: Vec<&Tag> = all
        .iter()
        .filter(|t| t.name == "tr" && t.has_class("inv") && t.start > table.start)
        .collect();
    assert_eq!(
        rows.len(),
        results["invariants"].as_array().unwrap().len(),
        "verdict rows"
    );
    let dom_violated: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.attr("data-verdict") == Some("violated"))
        .map(|r| r.attr("data-invariant").unwrap().to_string())
        .collect();
    assert_eq!(dom_violated, want_violated);
    for inv in &want_violated {
        let href = format!("failures/{inv}/case.yaml");
        assert!(
            all.iter()
                .any(|t| t.name == "a" && t.attr("href") == Some(href.as_str())),
            "no link to {href}"
        );
        assert!(dir.join(&href).is_file(), "{href} missing");
    }
    for (k, v) in [
        (
            "topology",
            results["topology_file"].as_str().unwrap().to_string(),
        ),
        ("seed", results["seed"].to_string()),
    ] {
        let fact = all
            .iter()
            .find(|t| t.attr("data-fact") == Some(k))
            .unwrap_or_else(|| panic!("no {k} in the header"));
        assert_eq!(unescape(&inner(&dom, fact)), v, "header {k}");
    }
    let versions = all
        .iter()
        .find(|t| t.attr("data-fact") == Some("versions"))
        .expect("versions line");
    assert!(
        inner(&dom, versions).starts_with(&format!(
            "PostgreSQL {}",
            results["versions"]["postgres"].as_str().unwrap()
        )),
        "{}",
        inner(&dom, versions)
    );

    // A timeline per violated invariant, of the schedule that ran.
    let tls = timelines(&dom, &all);
    let names: BTreeSet<String> = tls.iter().map(|t| t.invariant.clone()).collect();
    assert_eq!(names, want_violated, "one timeline per minimal case");
    for tl in &tls {
        let inv = &tl.invariant;
        assert_eq!(tl.schedule, schedule, "{inv}");
        assert!(!tl.ops().is_empty(), "{inv}: no op bars");
        for op in tl.ops() {
            assert!(
                op.num("data-t0") <= op.num("data-t1"),
                "{inv}: {:?}",
                op.attrs
            );
            let title = title_of(&dom, op).unwrap_or_else(|| panic!("{inv}: untitled op"));
            assert!(title.contains(op.attr("data-op").unwrap()), "{title}");
            if let Some(pid) = op.attr("data-pid") {
                assert!(
                    title.contains(&format!(
                        "pid {pid} backend_start {}",
                        op.attr("data-backend-start").unwrap()
                    )),
                    "{inv}: op title lacks its backend: {title}"
                );
            }
        }
        // The violation is marked, named, at a step of the case (when the evidence replay
        // showed it: a concurrent one may not, and the report says so).
        let marks = tl.with_class("violation");
        if !tl.shown {
            assert!(marks.is_empty(), "{inv}: a mark for a violation not shown");
            continue;
        }
        assert_eq!(marks.len(), 1, "{inv}: violation marks");
        assert_eq!(marks[0].attr("data-invariant"), Some(inv.as_str()));
        assert!(
            inner(&dom, marks[0]).contains(&format!("{inv} violated")),
            "{inv}: the mark is not labelled"
        );
        assert!(
            tl.tags
                .iter()
                .any(|t| t.name == "line" && t.start > marks[0].start),
            "{inv}: no line"
        );
    }
    // A timeline with two client lanes, op bars, and a lock held by an identified backend
    // (a pid of the minimal case's backends, with its backend_start in the hover text).
    assert!(
        tls.iter().any(|tl| tl.shown),
        "no evidence replay showed its violation"
    );
    let rich = tls
        .iter()
        .find(|tl| {
            let lanes: BTreeSet<&str> = tl.client_lanes().into_iter().collect();
            lanes.len() >= 2 && tl.ops().len() >= 2 && !tl.with_class("hold").is_empty()
        })
        .expect("no timeline with two client lanes, op bars and a lock-holding span");
    let case_yaml =
        std::fs::read_to_string(dir.join(format!("failures/{}/case.yaml", rich.invariant)))
            .unwrap();
    let mut identified = false;
    for hold in rich.with_class("hold") {
        let pid: i32 = hold
            .attr("data-pid")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("hold without a numeric pid: {:?}", hold.attrs));
        assert!(pid > 0);
        let start = hold.attr("data-backend-start").unwrap();
        assert!(start.starts_with("20") && start.contains(':'), "{start}");
        let title = title_of(&dom, hold).expect("hold without a title");
        assert!(
            title.contains(&format!("pid {pid} backend_start {start}")),
            "{title}"
        );
        assert!(title.contains(hold.attr("data-key").unwrap()), "{title}");
        identified |= case_yaml.contains(&format!("backend_pid: {pid}"));
    }
    assert!(
        identified,
        "no lock span of a backend of {}'s minimal case",
        rich.invariant
    );

    check_plots(dir, &dom, &all);

    // A screenshot, beside the report.
    let png = dir.join("report.png");
    browse(
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1400,1000".to_string(),
        ],
        &url,
        &work.join(format!("{schedule}-shot.txt")),
        work,
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank 1400x1000 page is about 7 kB.
    assert!(bytes.len() > 30_000, "screenshot is {} bytes", bytes.len());
    (dom, all)
}

/// The history's client completions per op kind, and its nemesis invokes (faults), read
/// with the test's own parser (not pgchaos's).
fn history_counts(dir: &Path) -> (BTreeMap<String, u64>, u64) {
    use std::io::BufRead;
    let gz = File::open(dir.join("history.jsonl.gz")).unwrap();
    let lines = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(gz)).lines();
    let (mut ops, mut faults) = (BTreeMap::new(), 0);
    for line in lines {
        let e: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let (ty, p) = (e["type"].as_str().unwrap(), e["p"].as_str().unwrap_or(""));
        if p == "nemesis" && ty == "invoke" {
            faults += 1;
        } else if p.starts_with('C') && matches!(ty, "ok" | "fail" | "info") {
            *ops.entry(e["f"].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
    }
    (ops, faults)
}

/// The whole-run plots, as the browser built them: a latency plot and a rate plot, each
/// with a series per op kind the history completed (its op count equal to the history's),
/// a drawn point per op (or an even sample), a shaded window per fault, a non-zero size.
fn check_plots(dir: &Path, dom: &str, all: &[Tag]) {
    let (want_ops, want_faults) = history_counts(dir);
    assert!(!want_ops.is_empty(), "the history has no client op");
    for plot in ["latency", "rate"] {
        let svg = all
            .iter()
            .find(|t| {
                t.name == "svg" && t.has_class("perf-svg") && t.attr("data-plot") == Some(plot)
            })
            .unwrap_or_else(|| panic!("no {plot} plot in the DOM"));
        assert!(
            svg.num("width") > 0 && svg.num("height") > 0,
            "{:?}",
            svg.attrs
        );
        let end = svg.end + dom[svg.end..].find("</svg>").expect("</svg>");
        let inside: Vec<&Tag> = all
            .iter()
            .filter(|t| t.start > svg.start && t.start < end)
            .collect();
        let series: Vec<&&Tag> = inside.iter().filter(|t| t.has_class("series")).collect();
        assert_eq!(
            svg.num("data-series") as usize,
            want_ops.len(),
            "{plot}: series"
        );
        let got: BTreeMap<String, u64> = series
            .iter()
            .map(|g| (g.attr("data-op").unwrap().to_string(), g.num("data-ops")))
            .collect();
        assert_eq!(got, want_ops, "{plot}: ops per kind vs the history");
        for g in &series {
            let g_end = g.end + dom[g.end..].find("</g>").expect("</g>");
            let marks = inside
                .iter()
                .filter(|t| t.start > g.start && t.start < g_end)
                .filter(|t| {
                    t.name
                        == if plot == "latency" {
                            "circle"
                        } else {
                            "polyline"
                        }
                })
                .count() as u64;
            let points = g.num("data-points");
            assert!(points > 0, "{plot}: an empty series {:?}", g.attrs);
            let want = if plot == "latency" { points } else { 1 };
            assert_eq!(marks, want, "{plot}: marks of {:?}", g.attrs);
        }
        let windows = inside
            .iter()
            .filter(|t| t.has_class("fault-window"))
            .count() as u64;
        assert_eq!(
            windows, want_faults,
            "{plot}: fault windows vs nemesis invokes"
        );
    }
    eprintln!("plots: {want_ops:?}, {want_faults} faults");
}

/// `chaos ARGS --out OUT --quiet`, exiting with one of `want_exit` (0: verdicts as expected,
/// 1: they differ, which the report must show all the same); the run directory and its
/// results.
fn chaos(out: &Path, name: &str, args: &[&str], want_exit: &[i32]) -> (PathBuf, Value) {
    let mut a = vec!["chaos"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--out", out.to_str().unwrap(), "--quiet"]);
    let o = pgchaos(&a);
    assert!(
        o.status.code().is_some_and(|c| want_exit.contains(&c)),
        "{a:?}: exit {:?}, want one of {want_exit:?}:\n{}",
        o.status.code(),
        text(&o)
    );
    assert_no_servers_left(name);
    let dir = out.join(name).join("latest").canonicalize().unwrap();
    let results = load_results(&dir);
    let code = if results["passed"] == true { 0 } else { 1 };
    assert_eq!(o.status.code(), Some(code), "exit code vs passed");
    (dir, results)
}

/// A test case of a JUnit document: its name, and its failure's message and body.
type JunitCase = (String, Option<(String, String)>);

/// A loosely parsed JUnit document: its tags, and its test cases.
fn junit(path: &Path) -> (Vec<Tag>, Vec<JunitCase>) {
    let xml = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(xml.starts_with("<?xml version=\"1.0\""), "{xml}");
    let all = tags(&xml);
    let cases: Vec<&Tag> = all.iter().filter(|t| t.name == "testcase").collect();
    let mut out = vec![];
    for (i, c) in cases.iter().enumerate() {
        let next = cases.get(i + 1).map(|n| n.start).unwrap_or(xml.len());
        let failure = all
            .iter()
            .find(|t| t.name == "failure" && t.start > c.start && t.start < next)
            .map(|f| {
                (
                    f.attr("message").unwrap_or_default().to_string(),
                    unescape(&inner(&xml, f)),
                )
            });
        out.push((c.attr("name").unwrap().to_string(), failure));
    }
    (all, out)
}

fn suite_attr(all: &[Tag], name: &str) -> u64 {
    all.iter()
        .find(|t| t.name == "testsuite")
        .expect("no <testsuite>")
        .num(name)
}

/// The sequential schedule: transaction mode's minimal failures, drawn step by step; and
/// `--junit`, agreeing with the results, with a failure carrying its minimal case.
#[test]
fn a_sequential_report_renders_its_timeline_in_a_browser() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::become_subreaper();
    chromium();
    let t0 = Instant::now();
    let out = tmp("seq");
    let junit_path = out.join("junit.xml");
    let (dir, results) = chaos(
        &out,
        "transaction-mode",
        &[
            "topologies/transaction-mode.yaml",
            "--cases",
            "20",
            "--seed",
            "1",
            "--junit",
            junit_path.to_str().unwrap(),
        ],
        &[0, 1],
    );
    let (_dom, all) = check_report(&dir, &out, "sequential");
    assert!(
        all.iter().any(|t| t.name == "tr"
            && t.attr("data-invariant") == Some("app.mutual_exclusion")
            && t.attr("data-verdict") == Some("violated")),
        "transaction mode breaks mutual exclusion"
    );

    // JUnit: a test case per invariant, failures exactly where the verdict is unexpected
    // (none: this run passed).
    let (xml_tags, cases) = junit(&junit_path);
    let invs = results["invariants"].as_array().unwrap();
    assert_eq!(cases.len(), invs.len());
    assert_eq!(suite_attr(&xml_tags, "tests"), invs.len() as u64);
    let unexpected: Vec<String> = invs
        .iter()
        .filter(|i| i["verdict"] != i["expected"])
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    let failed: Vec<String> = cases
        .iter()
        .filter(|(_, f)| f.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(failed, unexpected);
    assert_eq!(suite_attr(&xml_tags, "failures"), failed.len() as u64);
    assert_eq!(results["passed"], failed.is_empty());

    // The same topology with its expect block removed: every violation is now unexpected,
    // the run exits 1, and each failure carries its minimal case verbatim.
    let topo = std::fs::read_to_string(root().join("topologies/transaction-mode.yaml")).unwrap();
    let cut = topo.find("\nexpect:").expect("an expect block");
    let strict = out.join("transaction-mode-strict.yaml");
    std::fs::write(
        &strict,
        topo[..cut].replace("name: transaction-mode", "name: transaction-mode-strict"),
    )
    .unwrap();
    let junit2 = out.join("junit-strict.xml");
    let (dir2, results2) = chaos(
        &out,
        "transaction-mode-strict",
        &[
            strict.to_str().unwrap(),
            "--cases",
            "8",
            "--seed",
            "1",
            "--max-shrink-runs",
            "8",
            "--junit",
            junit2.to_str().unwrap(),
        ],
        &[1],
    );
    let want = violated(&results2);
    assert!(!want.is_empty(), "{results2}");
    let (xml_tags, cases) = junit(&junit2);
    let failed: BTreeSet<String> = cases
        .iter()
        .filter(|(_, f)| f.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(failed, want);
    assert_eq!(suite_attr(&xml_tags, "failures"), want.len() as u64);
    for (name, f) in &cases {
        if let Some((message, body)) = f {
            assert!(
                message.starts_with(&format!("{name}: violated, expected holds")),
                "{message}"
            );
            let case =
                std::fs::read_to_string(dir2.join(format!("failures/{name}/case.yaml"))).unwrap();
            assert!(
                body.contains(&case),
                "{name}: the failure lacks its case:\n{body}"
            );
        }
    }
    let html = std::fs::read_to_string(dir2.join("report.html")).unwrap();
    assert!(
        html.contains("class=\"inv unexpected\""),
        "no unexpected row"
    );

    // A bad --junit path is refused before anything starts, naming the path.
    let o = pgchaos(&[
        "chaos",
        "topologies/transaction-mode.yaml",
        "--junit",
        "/nonexistent-pgchaos-dir/junit.xml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("/nonexistent-pgchaos-dir/junit.xml"),
        "{}",
        text(&o)
    );
    assert_no_servers_left("bad --junit");
    eprintln!(
        "sequential browser test: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// The concurrent schedule: golang-migrate replicas through transaction pooling; their ops
/// overlap in time, and the timeline shows it.
#[test]
fn a_concurrent_report_shows_overlapping_ops_in_a_browser() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::become_subreaper();
    chromium();
    let t0 = Instant::now();
    let out = tmp("conc");
    let (dir, _) = chaos(
        &out,
        "migrate-race-transaction-mode",
        &["topologies/migrate-race-transaction-mode.yaml"],
        &[0, 1],
    );
    let (dom, all) = check_report(&dir, &out, "concurrent");
    let tls = timelines(&dom, &all);
    let overlapping = tls.iter().any(|tl| {
        let ops: Vec<(String, u64, u64)> = tl
            .ops()
            .into_iter()
            .filter(|o| !o.has_class("skip"))
            .map(|o| {
                (
                    o.attr("data-client").unwrap().to_string(),
                    o.num("data-t0"),
                    o.num("data-t1"),
                )
            })
            .collect();
        ops.iter().any(|a| {
            ops.iter().any(|b| {
                a.0 != b.0 && a.0.starts_with('C') && b.0.starts_with('C') && a.1 < b.2 && b.1 < a.2
            })
        })
    });
    assert!(
        overlapping,
        "no two ops of different clients overlap in any concurrent timeline"
    );
    eprintln!(
        "concurrent browser test: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&out);
}
