//! JUnit XML, for CI systems that show test results: a generic writer ([`JunitCase`],
//! [`junit_xml`]) and a run's cases ([`from_results`]): one test case per invariant, failed
//! when its verdict differs from the topology's `expect` block (what `passed` means in
//! `results.json`), the failure carrying the minimal case (`case.yaml`) verbatim.

use super::Results;
use crate::vocab::Verdict;
use std::fmt::Write as _;
use std::path::Path;

/// One `<testcase>`.
#[derive(Clone, Debug, PartialEq)]
pub struct JunitCase {
    pub classname: String,
    pub name: String,
    /// `(message, body)`: the `<failure>` element's `message` attribute and its text.
    pub failure: Option<(String, String)>,
    /// Seconds.
    pub time_s: f64,
}

/// Characters XML 1.0 allows (a document with any other is not well-formed, escaped or not).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r')
        || matches!(c as u32, 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// Escape element text: markup characters, and characters XML cannot carry written as
/// `\u{..}` so nothing is silently lost.
pub fn xml_text(s: &str) -> String {
    escape(s, false)
}

/// Escape an attribute value (double-quoted): as [`xml_text`], plus quotes, and tab and line
/// breaks as character references (attribute normalisation would turn them into spaces).
pub fn xml_attr(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, attr: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attr => out.push_str("&quot;"),
            '\'' if attr => out.push_str("&apos;"),
            '\n' if attr => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attr => out.push_str("&#9;"),
            c if !xml_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn seconds(t: f64) -> String {
    format!("{:.3}", if t.is_finite() && t > 0.0 { t } else { 0.0 })
}

/// A JUnit XML document: `<testsuites>` with one `<testsuite>` named `suite_name` holding
/// `cases`, with test, failure and time totals.
pub fn junit_xml(suite_name: &str, cases: &[JunitCase]) -> String {
    let tests = cases.len();
    let failures = cases.iter().filter(|c| c.failure.is_some()).count();
    let time: f64 = cases
        .iter()
        .map(|c| if c.time_s.is_finite() { c.time_s } else { 0.0 })
        .sum();
    let name = xml_attr(suite_name);
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{}\">",
        seconds(time)
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{}\">",
        seconds(time)
    );
    for c in cases {
        let head = format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
            xml_attr(&c.classname),
            xml_attr(&c.name),
            seconds(c.time_s)
        );
        match &c.failure {
            None => {
                let _ = writeln!(x, "{head}/>");
            }
            Some((message, body)) => {
                let _ = writeln!(
                    x,
                    "{head}>\n      <failure message=\"{}\" type=\"failure\">{}</failure>\n    </testcase>",
                    xml_attr(message),
                    xml_text(body)
                );
            }
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// A run's test cases: one per invariant (classname `pgchaos.<topology>`), failed when the
/// verdict differs from the expected one; a violation's failure carries its minimal case,
/// read from `run_dir`.
pub fn from_results(results: &Results, run_dir: &Path) -> Vec<JunitCase> {
    let classname = format!("pgchaos.{}", results.topology);
    results
        .invariants
        .iter()
        .map(|i| {
            let failure = i.fails(results.require_expected).then(|| {
                let message = format!(
                    "{}: {}, expected {} ({}/{} cases violated it)",
                    i.name, i.verdict, i.expected, i.violating_cases, results.cases
                );
                let body = match (i.verdict, &i.first_failure) {
                    (Verdict::Violated, Some(f)) => {
                        let path = run_dir.join(&f.case_file);
                        let case = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                            format!("(the minimal case {} cannot be read: {e})\n", path.display())
                        });
                        format!(
                            "{message}\nMinimal case: {} steps (from {}; {} shrink runs), {}\nReproduce: pgchaos reproduce {}\n\n{case}",
                            f.minimal_steps,
                            f.original_steps,
                            f.shrink_runs,
                            path.display(),
                            path.display(),
                        )
                    }
                    (Verdict::Violated, None) => format!("{message}\n(no minimal case recorded)\n"),
                    (Verdict::Unknown, _) => format!(
                        "{message}\nThe checker could not judge {}: {}\n",
                        i.name,
                        i.note.as_deref().unwrap_or("its search ran out of budget on every case")
                    ),
                    // Never a verdict, only an expectation.
                    (Verdict::Either, _) => format!("{message}\n"),
                    (Verdict::Holds, _) => format!(
                        "{message}\nThe topology's expect block says {} is violated in this topology, but none of the {} cases violated it ({}; the run requires it: --require-expected): run more cases, or correct the expect block.\n",
                        i.name,
                        results.cases,
                        i.not_reached_note(results.cases)
                    ),
                };
                (message, body)
            });
            JunitCase {
                classname: classname.clone(),
                name: i.name.clone(),
                failure,
                time_s: 0.0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::results::*;
    use super::*;
    use crate::vocab::Tier;

    fn case(name: &str, failure: Option<(&str, &str)>) -> JunitCase {
        JunitCase {
            classname: "pgchaos.t".into(),
            name: name.into(),
            failure: failure.map(|(m, b)| (m.into(), b.into())),
            time_s: 0.25,
        }
    }

    #[test]
    fn escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(xml_text("a<b>&c"), "a&lt;b&gt;&amp;c");
        assert_eq!(xml_text("\"q\" 'a'\n\tx"), "\"q\" 'a'\n\tx");
        assert_eq!(
            xml_attr("\"q\" 'a'\n\tx"),
            "&quot;q&quot; &apos;a&apos;&#10;&#9;x"
        );
        assert_eq!(
            xml_text("esc\u{1b}[0m bell\u{7} nul\u{0}"),
            "esc\\u{1b}[0m bell\\u{7} nul\\u{0}"
        );
        assert_eq!(xml_text("\u{fffe}"), "\\u{fffe}");
        assert_eq!(xml_text("]]> ünï ✓"), "]]&gt; ünï ✓");
        assert_eq!(xml_text("cr\r"), "cr&#13;");
    }

    #[test]
    fn counts_and_a_failure_element_exactly_for_failed_cases() {
        let x = junit_xml(
            "suite <1>",
            &[
                case("pg.exclusion", None),
                case(
                    "app.mutual_exclusion",
                    Some(("violated \"x\"", "step 1 & <2>\u{1}")),
                ),
                case("app.no_orphans", None),
            ],
        );
        assert!(
            x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
            "{x}"
        );
        assert!(
            x.contains("<testsuites name=\"suite &lt;1&gt;\" tests=\"3\" failures=\"1\" errors=\"0\" time=\"0.750\">"),
            "{x}"
        );
        assert!(
            x.contains("<testsuite name=\"suite &lt;1&gt;\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"0\" time=\"0.750\">"),
            "{x}"
        );
        assert_eq!(x.matches("<testcase ").count(), 3, "{x}");
        assert_eq!(x.matches("<failure ").count(), 1, "{x}");
        assert!(
            x.contains("<testcase classname=\"pgchaos.t\" name=\"pg.exclusion\" time=\"0.250\"/>"),
            "{x}"
        );
        assert!(
            x.contains("<failure message=\"violated &quot;x&quot;\" type=\"failure\">step 1 &amp; &lt;2&gt;\\u{1}</failure>"),
            "{x}"
        );
        assert!(x.trim_end().ends_with("</testsuites>"), "{x}");
        // No raw control character survives.
        assert!(!x.chars().any(|c| c.is_control() && c != '\n'), "{x:?}");
        let empty = junit_xml("none", &[]);
        assert!(empty.contains("tests=\"0\" failures=\"0\""), "{empty}");
        assert!(!empty.contains("<failure"), "{empty}");
        assert!(!junit_xml("t", &[case("a", None)]).contains("<failure"));
    }

    fn inv(name: &str, verdict: Verdict, expected: Verdict) -> InvariantResult {
        InvariantResult {
            name: name.into(),
            tier: Tier::App,
            verdict,
            expected,
            violating_cases: if verdict == Verdict::Violated { 3 } else { 0 },
            unknown_cases: 0,
            exercised: 1,
            note: None,
            violating: vec![],
            unknown: vec![],
            first_failure: (verdict == Verdict::Violated).then(|| FailureOut {
                case_file: format!("failures/{name}/case.yaml"),
                case_seed: Some(9),
                case_index: 1,
                minimal_steps: 2,
                original_steps: 7,
                shrink_runs: 11,
                unshrunk: false,
            }),
            expected_rate: None,
        }
    }

    #[test]
    fn a_run_fails_exactly_the_invariants_whose_verdict_is_unexpected() {
        let dir = std::env::temp_dir().join(format!("pgchaos-junit-{}", std::process::id()));
        let fdir = dir.join("failures/app.no_orphans");
        std::fs::create_dir_all(&fdir).unwrap();
        std::fs::write(
            fdir.join("case.yaml"),
            "steps:\n- client: C1\n  op: try_lock <&>\n",
        )
        .unwrap();
        let results: Results = serde_json::from_value(serde_json::json!({
            "topology": "t", "topology_file": "topologies/t.yaml", "pooler": "pgbouncer",
            "pool_mode": "transaction",
            "versions": {"postgres": "18.6", "postgres_declared": "18.6", "postgres_full": "",
                         "pooler": null, "pooler_declared": null},
            "version_drift": [], "cpu": {"pinned": null, "online": 2}, "seed": 1, "cases": 20,
            "steps": 100, "skipped_steps": 0, "stopped_by_time_limit": false, "passed": false,
            "invariants": [],
            "timing": {"topology_ready_ms": 0, "run_ms": 0, "steps_ms": 0, "reset_ms": 0,
                       "steps_per_sec": 0.0, "overall_steps_per_sec": 0.0,
                       "time_to_first_violation_ms": null, "time_to_first_minimal_ms": null,
                       "shrink_ms": 0}
        }))
        .unwrap();
        let mut results = results;
        results.invariants = vec![
            inv("pg.exclusion", Verdict::Holds, Verdict::Holds),
            inv("app.mutual_exclusion", Verdict::Violated, Verdict::Violated),
            inv("app.no_orphans", Verdict::Violated, Verdict::Holds),
            inv("app.rollback_releases", Verdict::Holds, Verdict::Violated),
        ];
        // An expected violation not reached fails only a run that requires it.
        let lenient = from_results(&results, &dir);
        let failed: Vec<&str> = lenient
            .iter()
            .filter(|c| c.failure.is_some())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(failed, ["app.no_orphans"]);
        results.require_expected = true;
        let cases = from_results(&results, &dir);
        assert_eq!(cases.len(), 4);
        let failed: Vec<&str> = cases
            .iter()
            .filter(|c| c.failure.is_some())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(failed, ["app.no_orphans", "app.rollback_releases"]);
        assert!(cases.iter().all(|c| c.classname == "pgchaos.t"));
        let (msg, body) = cases[2].failure.clone().unwrap();
        assert_eq!(
            msg,
            "app.no_orphans: violated, expected holds (3/20 cases violated it)"
        );
        assert!(
            body.contains("steps:\n- client: C1\n  op: try_lock <&>\n"),
            "{body}"
        );
        assert!(body.contains("Reproduce: pgchaos reproduce "), "{body}");
        let (_, body) = cases[3].failure.clone().unwrap();
        assert!(body.contains("none of the 20 cases violated it"), "{body}");
        let x = junit_xml("pgchaos.t", &cases);
        assert!(x.contains("tests=\"4\" failures=\"2\""), "{x}");
        assert!(x.contains("op: try_lock &lt;&amp;&gt;"), "{x}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
