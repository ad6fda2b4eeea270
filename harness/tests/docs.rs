//! The documentation's own checks, no servers: every relative link and `#anchor` in the
//! README, the book (`docs/**/*.md`) and the other READMEs resolves to a file that is
//! committed and a heading it has (anchors as GitHub renders them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown files the link test walks, relative to the repository's root.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    for (dir, any_name) in [
        ("docs", true),
        ("compose", false),
        ("examples", false),
        ("reports", false),
        ("scenarios", false),
    ] {
        walk(root, Path::new(dir), any_name, &mut out);
    }
    out.sort();
    out
}

fn walk(root: &Path, rel: &Path, any_name: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for e in entries {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            walk(root, &r, any_name, out);
        } else if (any_name && r.extension().is_some_and(|x| x == "md"))
            || e.file_name() == "README.md"
        {
            out.push(r);
        }
    }
}

/// A heading's anchor as GitHub makes it: the rendered text (markup dropped, a link's text
/// kept), lowercased, every character that is not a letter, a digit, `-`, `_` or a space
/// dropped, spaces to hyphens. Duplicates are numbered by [`anchors`].
fn slug(heading: &str) -> String {
    rendered(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as rendered: `[text](url)` as its text, HTML tags dropped (code spans
/// keep their content; their backticks go with the punctuation).
fn rendered(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(['[', '<']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with('<') {
            match tail.find('>') {
                Some(j) => rest = &tail[j + 1..],
                None => {
                    out.push_str(tail);
                    rest = "";
                }
            }
            continue;
        }
        match (tail.find("]("), tail.find(')')) {
            (Some(a), Some(b)) if a < b => {
                out.push_str(&tail[1..a]);
                rest = &tail[b + 1..];
            }
            _ => {
                out.push('[');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A file's lines outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = vec![];
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker: String = t.chars().take_while(|c| *c == '`' || *c == '~').collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap()) {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) && t.trim() == marker => {
                    fence = None
                }
                Some(_) => {}
            }
            continue;
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// Every anchor a Markdown file offers: its headings' (duplicates `-1`, `-2`, ...) and
/// explicit `<a name=...>` / `id=...`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        if line.len() - t.len() <= 3 && t.starts_with('#') {
            let level = t.chars().take_while(|c| *c == '#').count();
            let body = &t[level..];
            if level <= 6 && (body.is_empty() || body.starts_with([' ', '\t'])) {
                let text = body.trim().trim_end_matches('#').trim();
                let base = slug(text);
                let n = seen.entry(base.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
        }
        for attr in ["name=\"", "id=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                let v = &rest[i + attr.len()..];
                if let Some(j) = v.find('"') {
                    out.insert(v[..j].to_string());
                }
                rest = &rest[i + attr.len()..];
            }
        }
    }
    out
}

/// A line with its code spans blanked out (`` `[not](a link)` `` is code, not a link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find('`') {
        out.push_str(&rest[..i]);
        let ticks = rest[i..].chars().take_while(|c| *c == '`').count();
        let after = &rest[i + ticks..];
        let close = "`".repeat(ticks);
        match after.find(&close) {
            Some(j) => rest = &after[j + ticks..],
            None => {
                out.push_str(&rest[i..i + ticks]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every link target of a file, with its line: inline `[text](target)` and images,
/// reference definitions `[label]: target`, and HTML `href="..."` / `src="..."`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    for (n, line) in prose_lines(text) {
        let line = without_code(line);
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some(i) = t.find("]:")
            && !t[..i].contains('(')
        {
            if let Some(target) = t[i + 2..].split_whitespace().next() {
                out.push((n, target.to_string()));
            }
            continue;
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let mut depth = 0usize;
            let mut end = after.len();
            for (j, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = j;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let target = after[..end].trim();
            let target = target.split(" \"").next().unwrap_or("").trim();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            out.push((n, target.to_string()));
            rest = &after[end.min(after.len())..];
        }
        for attr in ["href=\"", "src=\""] {
            let mut rest = line.as_str();
            while let Some(i) = rest.find(attr) {
                let v = &rest[i + attr.len()..];
                if let Some(j) = v.find('"') {
                    out.push((n, v[..j].to_string()));
                }
                rest = &rest[i + attr.len()..];
            }
        }
    }
    out
}

/// Why a link of `file` (relative to `root`) does not resolve, if it does not.
fn broken(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let path = path.replace("%20", " ");
    let resolved = if path.is_empty() {
        root.join(file)
    } else if let Some(abs) = path.strip_prefix('/') {
        root.join(abs)
    } else {
        root.join(file).parent().unwrap().join(&path)
    };
    if !resolved.exists() {
        return Some(format!("{} does not exist", resolved.display()));
    }
    let anchor = anchor?;
    if resolved.is_dir() {
        return Some(format!("#{anchor} on a directory"));
    }
    let text = std::fs::read_to_string(&resolved).ok()?;
    if resolved.extension().is_some_and(|x| x == "md") {
        if anchors(&text).contains(anchor) {
            return None;
        }
        return Some(format!(
            "no heading of {} has the anchor #{anchor}",
            resolved.display()
        ));
    }
    // GitHub's line anchors on other files: #L12 or #L12-L20, within the file.
    let lines = text.lines().count();
    let ok = anchor.split('-').all(|l| {
        l.strip_prefix('L')
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= 1 && n <= lines)
    });
    (!ok).then(|| format!("#{anchor} is not a line of {}", resolved.display()))
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let files = markdown_files(&root);
    let mut bad = vec![];
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            if let Some(why) = broken(&root, f, &target) {
                bad.push(format!("{}:{line}: ({target}) {why}", f.display()));
            }
        }
    }
    assert!(
        files.iter().any(|f| f == Path::new("README.md"))
            && files.iter().filter(|f| f.starts_with("docs")).count() >= 10,
        "the walk found too few files: {files:?}"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let from_readme = links(&readme)
        .into_iter()
        .filter(|(_, t)| !t.contains("://"))
        .count();
    assert!(
        from_readme >= 3,
        "only {from_readme} relative links in README.md ({checked} in {} files)",
        files.len()
    );
    assert!(
        bad.is_empty(),
        "{} of {checked} relative links do not resolve:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let text = "# pgchaos\n\
        ## Reports to look at: `report.html`, JUnit, `compare --html`\n\
        ### Several poolers: `replicas: N`\n\
        ## 1. A server is terminated (`pg_terminate_backend`) under transaction pooling\n\
        ## Tests\n\
        ```sh\n\
        # Tests\n\
        ```\n\
        ## Tests\n\
        ## See [the book](docs/SUMMARY.md) ##\n\
        <a name=\"here\"></a>\n";
    let got = anchors(text);
    let want: BTreeSet<String> = [
        "pgchaos",
        "reports-to-look-at-reporthtml-junit-compare---html",
        "several-poolers-replicas-n",
        "1-a-server-is-terminated-pg_terminate_backend-under-transaction-pooling",
        "tests",
        "tests-1",
        "see-the-book",
        "here",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
}

#[test]
fn links_are_found_outside_code_only() {
    let text = "See [a](docs/a.md#x) and `[b](nope.md)`, ![c](img.png \"t\").\n\
        ```\n\
        [d](inside-a-fence.md)\n\
        ```\n\
        [ref]: docs/ref.md\n\
        <a href=\"docs/h.md\">h</a> [e](<docs/with space.md>) [f](x_(1).md)\n";
    let got: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        got,
        [
            "docs/a.md#x",
            "img.png",
            "docs/ref.md",
            "docs/with space.md",
            "x_(1).md",
            "docs/h.md"
        ]
    );
}

/// The paragraphs of a file's leading `//!` doc (blank lines between its comments included),
/// each paragraph's lines joined.
fn module_doc(text: &str) -> Vec<String> {
    let mut paragraphs = vec![String::new()];
    for line in text.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            if line.trim().is_empty() {
                paragraphs.push(String::new());
                continue;
            }
            break;
        };
        let doc = doc.trim();
        if doc.is_empty() {
            paragraphs.push(String::new());
        } else {
            let p = paragraphs.last_mut().unwrap();
            if !p.is_empty() {
                p.push(' ');
            }
            p.push_str(doc);
        }
    }
    paragraphs.retain(|p| !p.is_empty());
    paragraphs
}

/// The first sentence of a text: up to the first `. ` outside code spans and brackets (or
/// all of it), rustdoc's ``[`X`]`` links as `` `X` ``.
fn first_sentence(text: &str) -> String {
    let mut depth = 0i32;
    let mut code = false;
    let chars: Vec<char> = text.chars().collect();
    let mut end = chars.len();
    for (i, c) in chars.iter().enumerate() {
        match c {
            '`' => code = !code,
            '(' | '[' if !code => depth += 1,
            ')' | ']' if !code => depth -= 1,
            '.' if !code && depth == 0 && chars.get(i + 1).is_none_or(|n| *n == ' ') => {
                end = i + 1;
                break;
            }
            _ => {}
        }
    }
    let s: String = chars[..end].iter().collect();
    s.replace("[`", "`").replace("`]", "`").replace('|', "\\|")
}

/// The sentence of a module doc that says what it may import, without its first words.
fn may_import(paragraphs: &[String]) -> String {
    for p in paragraphs {
        if let Some(i) = p.find("May import") {
            return first_sentence(&p[i + "May import".len()..])
                .trim()
                .to_string();
        }
    }
    "(its doc does not say)".into()
}

/// The module table of docs/design.md, made from `harness/src`: each stage folder (with its
/// `mod.rs`) and each file of its own beside `lib.rs`, its doc's first sentence, what it
/// holds and what it may import.
fn module_table(src: &Path) -> String {
    let mut rows = vec![];
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let (shown, doc_file, holds) = if p.is_dir() {
            let mut holds: Vec<String> = std::fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter_map(|f| {
                    let n = f.file_name().unwrap().to_string_lossy().to_string();
                    if f.is_dir() {
                        Some(format!("{n}/"))
                    } else {
                        n.strip_suffix(".rs")
                            .filter(|s| !matches!(*s, "mod" | "tests"))
                            .map(String::from)
                    }
                })
                .collect();
            holds.sort();
            (format!("`{name}/`"), p.join("mod.rs"), holds.join(", "))
        } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
            (format!("`{name}`"), p.clone(), String::new())
        } else {
            continue;
        };
        let text = std::fs::read_to_string(&doc_file)
            .unwrap_or_else(|e| panic!("{}: {e}", doc_file.display()));
        let doc = module_doc(&text);
        assert!(!doc.is_empty(), "{} has no //! doc", doc_file.display());
        rows.push(format!(
            "| {shown} | {} | {holds} | {} |",
            first_sentence(&doc[0]),
            may_import(&doc)
        ));
    }
    format!(
        "<!-- generated from harness/src by harness/tests/docs.rs (just docs); do not edit -->\n\n\
         | module | what it owns (its doc's first sentence) | files | may import |\n\
         |---|---|---|---|\n{}\n",
        rows.join("\n")
    )
}

const MODULES_BEGIN: &str = "<!-- modules:begin -->";
const MODULES_END: &str = "<!-- modules:end -->";

/// docs/design.md's module table is what the source tree's module docs say today; with
/// `PGCHAOS_WRITE_DOCS=1` (`just docs`) the table is rewritten instead.
#[test]
fn the_module_table_is_the_source_trees() {
    let root = root();
    let path = root.join("docs/design.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let b = text
        .find(MODULES_BEGIN)
        .expect("docs/design.md: no modules:begin");
    let e = text
        .find(MODULES_END)
        .expect("docs/design.md: no modules:end");
    let have = &text[b + MODULES_BEGIN.len() + 1..e];
    let want = module_table(&root.join("harness/src"));
    assert!(
        want.contains("`launch/`") && want.contains("`pooler/`") && want.contains("`engine.rs`"),
        "{want}"
    );
    if std::env::var_os("PGCHAOS_WRITE_DOCS").is_some() {
        let new = format!(
            "{}{want}{}",
            &text[..b + MODULES_BEGIN.len() + 1],
            &text[e..]
        );
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert_eq!(
        have, want,
        "docs/design.md's module table is stale: run `just docs` (PGCHAOS_WRITE_DOCS=1 cargo test --release --test docs)"
    );
}

#[test]
fn a_module_docs_first_sentence_ends_outside_code_and_brackets() {
    assert_eq!(
        first_sentence("The pooler (`a.b`, [`X`] e.g. x). Then more. And more."),
        "The pooler (`a.b`, `X` e.g. x)."
    );
    assert_eq!(first_sentence("No full stop"), "No full stop");
    let doc = module_doc(
        "//! First line\n//! goes on.\n\n//! May import `vocab`. Else.\nfn x() {}\n//! not doc\n",
    );
    assert_eq!(doc, ["First line goes on.", "May import `vocab`. Else."]);
    assert_eq!(may_import(&doc), "`vocab`.");
}

/// docs/SUMMARY.md (mdBook's table of contents) lists every chapter of docs/, once, and
/// nothing that is not there.
#[test]
fn the_summary_lists_every_chapter() {
    let root = root();
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).unwrap();
    let listed: Vec<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let mut chapters: Vec<String> = markdown_files(&root)
        .into_iter()
        .filter_map(|f| f.strip_prefix("docs").ok().map(|r| r.display().to_string()))
        .filter(|f| f != "SUMMARY.md")
        .collect();
    chapters.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    let mut unique = sorted.clone();
    unique.dedup();
    assert_eq!(sorted, unique, "a chapter listed twice in docs/SUMMARY.md");
    assert_eq!(
        sorted, chapters,
        "docs/SUMMARY.md's chapters (left) are not docs/'s Markdown files (right)"
    );
}
