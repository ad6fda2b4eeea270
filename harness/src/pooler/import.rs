//! What every pooler's import (`pooler/<name>/import.rs`, `pgchaos import`) shares: the error
//! at `path:line:column` with the line and a caret under the culprit, in the style of the
//! topology's errors.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration file's error: `path:line:column: message`, the line with a caret, hints.
#[derive(Debug)]
pub struct ConfError {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
    width: usize,
    source_line: String,
    pub message: String,
    pub hints: Vec<String>,
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )?;
        crate::topology::write_snippet(f, self.line, &self.source_line, self.column, self.width)?;
        for h in &self.hints {
            write!(f, "\nhint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfError {}

/// A configuration file being read: its text and where it came from, to position errors.
pub struct ConfFile<'a> {
    pub src: &'a str,
    pub path: &'a Path,
}

impl ConfFile<'_> {
    /// An error at `line`:`column` (1-based, in characters), `width` characters underlined.
    pub fn error(
        &self,
        line: usize,
        column: usize,
        width: usize,
        message: impl Into<String>,
        hints: Vec<String>,
    ) -> ConfError {
        let source_line = self
            .src
            .lines()
            .nth(line.saturating_sub(1))
            .unwrap_or("")
            .trim_end_matches('\r')
            .to_string();
        let rest = source_line
            .chars()
            .count()
            .saturating_sub(column.saturating_sub(1));
        ConfError {
            path: self.path.to_path_buf(),
            line,
            column,
            width: width.clamp(1, rest.max(1)),
            source_line,
            message: message.into(),
            hints,
        }
    }
}

/// The 1-based character column of byte offset `byte` in `line`.
pub fn col_of(line: &str, byte: usize) -> usize {
    line[..byte].chars().count() + 1
}

/// A YAML double-quoted scalar.
pub fn yaml_quote(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => s.push_str(&format!("\\x{:02x}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shows_its_place_and_a_caret() {
        let f = ConfFile {
            src: "a = 1\n  bad = x\n",
            path: Path::new("x.conf"),
        };
        let e = f.error(2, 9, 1, "no", vec!["h".into()]);
        let s = e.to_string();
        assert!(
            s.starts_with("x.conf:2:9: no\n2 |   bad = x\n  |         ^"),
            "{s}"
        );
        assert!(s.ends_with("\nhint: h"), "{s}");
        assert_eq!(yaml_quote("a\"b\\"), "\"a\\\"b\\\\\"");
    }
}
