//! HTML text for every page the reports write (`report.html`, its plots, the comparison
//! page, the matrix): the shared style and document shell, and escaping.

use std::fmt::Write as _;

/// Escape text for HTML (element content and quoted attribute values alike).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline would make the document invalid.
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em; color: #1d232b; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d6dbe1; padding-bottom: .2em; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .92em; }
pre { background: #f5f7f9; padding: .8em; overflow-x: auto; white-space: pre-wrap; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .15em 1em; }
dl.facts dt { color: #5b6670; }
dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #d6dbe1; padding: .25em .6em; text-align: left; }
th { background: #eef1f4; }
td.violated { color: #b3261e; font-weight: 600; }
td.holds { color: #2e7d32; }
tr.unexpected td, td.unexpected { background: #fde8e6; }
.pass { color: #2e7d32; font-weight: 600; }
.fail { color: #b3261e; font-weight: 600; }
.timeline { overflow-x: auto; border: 1px solid #d6dbe1; margin: .8em 0; }
.legend span { display: inline-block; margin-right: 1.2em; }
.legend i { display: inline-block; width: 1.6em; height: .9em; vertical-align: middle; margin-right: .3em; border: 1px solid #889; }
ul.violations li { margin: .2em 0; }
p.caption { color: #5b6670; font-size: .88em; margin-top: -.4em; }
svg text { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 10px; }
svg .lane-label { font-size: 11px; fill: #1d232b; }
svg .bg-even { fill: #fafbfc; }
svg .bg-odd { fill: #f0f3f6; }
svg .tick line { stroke: #d6dbe1; }
svg .tick text { fill: #5b6670; }
svg .op rect { stroke: #33404d; stroke-width: .5; }
svg .op text { fill: #10161c; pointer-events: none; }
svg .op.ok rect { fill: #66bb6a; } .legend i.ok { background: #66bb6a; }
svg .op.false rect { fill: #f6c343; } .legend i.false { background: #f6c343; }
svg .op.error rect { fill: #ef6b57; } .legend i.error { background: #ef6b57; }
svg .op.info rect { fill: #b58ae6; } .legend i.info { background: #b58ae6; }
svg .op.skip rect { fill: #e3e6ea; stroke-dasharray: 3 2; } .legend i.skip { background: #e3e6ea; border-style: dashed; }
svg .hold rect { fill: #4a86d9; fill-opacity: .75; } .legend i.hold { background: #6f9fe2; }
svg .hold text { fill: #fff; }
svg .wait rect { fill: #bcd6f5; stroke: #4a86d9; stroke-dasharray: 3 2; } .legend i.wait { background: #bcd6f5; border: 1px dashed #4a86d9; }
svg .serve rect { fill: #33404d; }
svg rect.fault { fill: #ff9800; fill-opacity: .18; stroke: #ff9800; stroke-opacity: .6; } .legend i.fault { background: #ffe6c2; border-color: #ff9800; }
svg .violation line { stroke: #d50000; stroke-width: 2; }
svg .violation text { fill: #d50000; font-weight: 700; font-size: 11px; }
.legend i.violation { background: #d50000; width: .25em; border: 0; }
"#;

/// A complete HTML document around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        esc(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_escapes_markup_quotes_and_control_characters() {
        assert_eq!(
            esc("a<b>&\"c\"'d'"),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;"
        );
        assert_eq!(esc("plain text 42"), "plain text 42");
        assert_eq!(esc("tab\tand\nnewline"), "tab\tand\nnewline");
        assert_eq!(esc("bell\u{7}"), "bell\\u{7}");
        assert_eq!(esc("&amp;"), "&amp;amp;");
        assert_eq!(
            esc("</script><svg onload=x>"),
            "&lt;/script&gt;&lt;svg onload=x&gt;"
        );
        assert_eq!(esc("ünïcode ✓"), "ünïcode ✓");
    }
}
