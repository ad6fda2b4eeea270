//! Positioned errors: `path:line:column: message`, the source line with a caret, hints;
//! the mapping of serde-saphyr's errors onto them; "did you mean" suggestions.

use super::*;

/// A topology that could not be read or is not valid.
///
/// `Display` gives `path:line:column: message`, then the offending source line with a caret under
/// the value, then `hint:` lines. An I/O failure displays as `path: cannot read: <cause>`.
#[derive(Debug)]
pub struct TopologyError {
    pub(super) inner: Box<ErrorInner>,
}

#[derive(Debug)]
pub(super) struct ErrorInner {
    pub(super) path: PathBuf,
    pub(super) message: String,
    pub(super) at: Option<At>,
    pub(super) hints: Vec<String>,
    pub(super) io: Option<std::io::Error>,
}

impl From<ErrorInner> for TopologyError {
    fn from(inner: ErrorInner) -> Self {
        TopologyError {
            inner: Box::new(inner),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct At {
    pub(super) line: usize,
    pub(super) column: usize,
    pub(super) width: usize,
    pub(super) source_line: Option<String>,
}

impl TopologyError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// 1-based line of the offending value (`None` for I/O errors).
    pub fn line(&self) -> Option<usize> {
        self.inner.at.as_ref().map(|a| a.line)
    }

    /// 1-based column (in characters) of the offending value (`None` for I/O errors).
    pub fn column(&self) -> Option<usize> {
        self.inner.at.as_ref().map(|a| a.column)
    }

    /// The one-line message, without position, snippet or hints.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// What would be valid, one hint per entry.
    pub fn hints(&self) -> &[String] {
        &self.inner.hints
    }

    /// True when the file could not be read at all.
    pub fn is_io(&self) -> bool {
        self.inner.io.is_some()
    }
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.inner;
        let path = e.path.display();
        let Some(at) = &e.at else {
            return write!(f, "{path}: {}", e.message);
        };
        write!(f, "{path}:{}:{}: {}", at.line, at.column, e.message)?;
        if let Some(line) = &at.source_line {
            write_snippet(f, at.line, line, at.column, at.width)?;
        }
        for hint in &self.inner.hints {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

/// The source line under a positioned error, with a caret under `column` (1-based) `width`
/// characters wide: the layout every positioned input error uses (YAML topologies, ini).
pub fn write_snippet(
    f: &mut fmt::Formatter<'_>,
    line_no: usize,
    line: &str,
    column: usize,
    width: usize,
) -> fmt::Result {
    let (shown, caret_at) = expand_tabs(line, column);
    let gutter = line_no.to_string();
    let pad = " ".repeat(gutter.len());
    write!(f, "\n{gutter} | {shown}")?;
    write!(
        f,
        "\n{pad} | {}{}",
        " ".repeat(caret_at),
        "^".repeat(width.max(1))
    )
}

impl std::error::Error for TopologyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.io.as_ref().map(|e| e as _)
    }
}

/// Expands tabs (to 4 spaces) in a snippet line; returns it and the caret's display offset for
/// the 1-based character `column`.
pub(super) fn expand_tabs(line: &str, column: usize) -> (String, usize) {
    let mut shown = String::new();
    let mut caret_at = None;
    for (i, c) in line.chars().enumerate() {
        if i + 1 == column {
            caret_at = Some(shown.chars().count());
        }
        if c == '\t' {
            shown.push_str("    ");
        } else {
            shown.push(c);
        }
    }
    let end = shown.chars().count();
    (shown, caret_at.unwrap_or(end))
}

pub(super) fn is_blank_document(src: &str) -> bool {
    src.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

/// Conversion context: the source text (for snippets) and the path (for messages).
pub(super) struct Cx<'a> {
    pub(super) src: &'a str,
    pub(super) path: &'a Path,
    /// The invariants `expect` may name.
    pub(super) catalog: &'a [InvariantInfo],
    /// The poolers whose sections the topology may have.
    pub(super) poolers: &'a [&'a dyn PoolerSection],
}

pub(super) type Res<T> = Result<T, TopologyError>;

impl Cx<'_> {
    pub(super) fn error_at(
        &self,
        line: usize,
        column: usize,
        width: usize,
        message: impl Into<String>,
        hints: Vec<String>,
    ) -> TopologyError {
        let (line, column) = (line.max(1), column.max(1));
        let source_line = self
            .src
            .lines()
            .nth(line - 1)
            .map(|l| l.trim_end_matches('\r').to_string());
        let width = match &source_line {
            Some(l) => {
                let rest = l.chars().count().saturating_sub(column - 1);
                width.clamp(1, rest.max(1))
            }
            None => 1,
        };
        TopologyError::from(ErrorInner {
            path: self.path.to_path_buf(),
            message: message.into(),
            at: Some(At {
                line,
                column,
                width,
                source_line,
            }),
            hints,
            io: None,
        })
    }

    pub(super) fn err(
        &self,
        loc: &Location,
        message: impl Into<String>,
        hints: Vec<String>,
    ) -> TopologyError {
        self.error_at(
            loc.line() as usize,
            loc.column() as usize,
            loc.span().len() as usize,
            message,
            hints,
        )
    }

    /// The source text of a node, when it is a short single-line scalar.
    pub(super) fn raw_text(&self, loc: &Location) -> Option<&str> {
        let span = loc.span();
        let (off, len) = (span.byte_offset()? as usize, span.byte_len()? as usize);
        let text = self.src.get(off..off + len)?;
        (!text.is_empty() && !text.contains('\n')).then_some(text)
    }

    /// How to describe what was found, for "expected X, found Y" messages.
    pub(super) fn found(&self, leaf: &Leaf) -> String {
        match &leaf.value {
            Node::Absent | Node::Null => "an empty value".into(),
            Node::Seq(_) => "a sequence".into(),
            Node::Map(_) => "a mapping".into(),
            other => {
                let text = self
                    .raw_text(&leaf.referenced)
                    .map(str::to_string)
                    .unwrap_or_else(|| other.scalar_text().unwrap_or_default());
                if text.chars().count() > 60 {
                    format!("{} starting `{}`", other.kind(), truncate(&text, 40))
                } else {
                    format!("`{text}`")
                }
            }
        }
    }

    pub(super) fn yaml_error(&self, err: &serde_saphyr::Error) -> TopologyError {
        use serde_saphyr::Error as E;
        let loc = err.location().unwrap_or(Location::UNKNOWN);
        let mut inner = err;
        while let E::WithSnippet { error, .. } | E::AliasError { error, .. } = inner {
            inner = error;
        }
        let (line, col, width) = (
            loc.line() as usize,
            loc.column() as usize,
            loc.span().len() as usize,
        );
        match inner {
            E::SerdeUnknownField {
                field, expected, ..
            } => {
                let section = section_of(expected);
                let mut message = format!("unknown key `{field}`");
                match section {
                    Some("") => message.push_str(" at the top level"),
                    Some(s) => message.push_str(&format!(" in `{s}`")),
                    None => {}
                }
                let mut hints = Vec::new();
                let close = close_matches(field, expected.iter().copied());
                if !close.is_empty() {
                    hints.push(did_you_mean(&close));
                }
                if section == Some("postgres") && is_setting_name(field) {
                    hints.push(format!(
                        "postgresql.conf settings go under `postgres.settings`, e.g. `settings: {{ {field}: ... }}`"
                    ));
                }
                hints.push(format!("valid keys here: {}", expected.join(", ")));
                self.error_at(line, col, width, message, hints)
            }
            E::DuplicateMappingKey { key, .. } => {
                let message = match key {
                    Some(k) => format!("duplicate key `{k}`"),
                    None => "duplicate key".to_string(),
                };
                self.error_at(
                    line,
                    col,
                    width,
                    message,
                    vec!["each key may appear only once in a mapping; remove one of them".into()],
                )
            }
            E::SerdeMissingField { field, .. } => self.error_at(
                line,
                col,
                1,
                format!("missing required key `{field}`"),
                Vec::new(),
            ),
            E::Unexpected { expected, .. } if expected.contains("mapping") => {
                let rest: String = self
                    .src
                    .lines()
                    .nth(line.saturating_sub(1))
                    .map(|l| l.chars().skip(col.saturating_sub(1)).collect())
                    .unwrap_or_default();
                let found = match self.raw_text(&loc) {
                    _ if rest.starts_with(['-', '[']) => "a sequence".to_string(),
                    Some(t) => format!("`{t}`"),
                    None => "another kind of value".to_string(),
                };
                self.error_at(
                    line,
                    col,
                    width,
                    format!("expected a mapping here, found {found}"),
                    vec![
                        "a topology and each of its sections are `key: value` mappings; see docs/topology.md"
                            .into(),
                    ],
                )
            }
            E::MultipleDocuments { .. } => self.error_at(
                line,
                col,
                width,
                "a topology file holds one YAML document, but a second one starts here",
                vec!["remove the `---` separator and what follows it, or split the file".into()],
            ),
            E::SerdeInvalidType {
                unexpected,
                expected,
                ..
            } => self.error_at(
                line,
                col,
                width,
                format!(
                    "expected {}, found {}",
                    humanize_expected(expected),
                    humanize_unexpected(unexpected)
                ),
                Vec::new(),
            ),
            other => {
                use serde_saphyr::MessageFormatter;
                let text = serde_saphyr::DefaultMessageFormatter.format_message(other);
                let message = lowercase_first(&text);
                let mut hints = Vec::new();
                let (mut line, mut col) = (line, col);
                if message.contains("tab") {
                    hints.push("YAML indentation must use spaces, not tabs".into());
                    // Point at the tab itself when the parser reports the character after it.
                    if let Some(l) = self.src.lines().nth(line.saturating_sub(1))
                        && col >= 2
                        && l.chars().nth(col - 2) == Some('\t')
                    {
                        col -= 1;
                    }
                } else if matches!(other, E::Eof { .. }) {
                    line = line.max(1);
                    col = col.max(1);
                    hints.push("the document ends early: check brackets and quotes".into());
                }
                self.error_at(line, col, width.max(1), message, hints)
            }
        }
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub(super) fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) if !s.starts_with("YAML") => first.to_lowercase().chain(c).collect(),
        _ => s.to_string(),
    }
}

pub(super) fn humanize_expected(expected: &str) -> String {
    if expected.starts_with("struct ") || expected.contains("map") {
        "a mapping".into()
    } else if expected.contains("sequence") {
        "a sequence".into()
    } else {
        expected.to_string()
    }
}

pub(super) fn humanize_unexpected(unexpected: &str) -> String {
    match unexpected {
        "map" => "a mapping".into(),
        "sequence" => "a sequence".into(),
        "unit value" | "null" => "an empty value".into(),
        other => other.to_string(),
    }
}

pub fn did_you_mean(close: &[&str]) -> String {
    format!("did you mean {}?", or_list(close))
}

/// "`a`", "`a` or `b`", "`a`, `b` or `c`".
pub(super) fn or_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|c| format!("`{c}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Levenshtein distance, by characters.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to three candidates close to `word`: small edit distance, or one containing the other.
pub fn close_matches<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &'a str)> = candidates
        .into_iter()
        .filter(|c| *c != word)
        .filter_map(|c| {
            let d = edit_distance(word, c);
            let contains = word.len() >= 4 && (c.contains(word) || word.contains(c));
            (d <= limit || contains).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}
