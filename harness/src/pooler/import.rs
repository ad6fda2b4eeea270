//! What every pooler's import (`pooler/<name>/import.rs`, `pgchaos import`) shares: the error
//! at `path:line:column` with the line and a caret under the culprit, in the style of the
//! topology's errors, the catalog a probe topology is read with, and the parts of the written
//! topology that do not depend on the pooler (its head and its tail).

use std::fmt;
use std::path::{Path, PathBuf};

/// What an import's probe topology (does pgchaos accept this version, this setting?) is read
/// with: the poolers' sections, and no invariants, since a probe names no `expect:`.
pub fn probe_catalog() -> crate::topology::Catalog<'static> {
    crate::topology::Catalog {
        invariants: &[],
        poolers: &super::SECTIONS,
    }
}

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
        // Shown on a terminal: a control character is shown as U+FFFD (one character, so
        // the caret stays under it), never sent as it is.
        let source_line: String = self
            .src
            .lines()
            .nth(line.saturating_sub(1))
            .unwrap_or("")
            .trim_end_matches('\r')
            .chars()
            .map(|c| if forbidden(c) { '\u{fffd}' } else { c })
            .collect();
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

/// A character a configuration file may not hold anywhere: a control character other than a
/// tab (C0, DEL, C1 with U+0085 NEL) and the Unicode line and paragraph separators. YAML and
/// terminals read some of them as line breaks (a bare `\r` ends a YAML comment), so a value
/// holding one could write keys of its own into the topology.
pub fn forbidden(c: char) -> bool {
    (c.is_control() && c != '\t') || c == '\u{2028}' || c == '\u{2029}'
}

/// `U+000D (carriage return)`.
fn char_name(c: char) -> String {
    let name = match c {
        '\0' => "NUL",
        '\r' => "carriage return",
        '\u{b}' => "vertical tab",
        '\u{c}' => "form feed",
        '\u{1b}' => "escape",
        '\u{7f}' => "delete",
        '\u{85}' => "next line, NEL",
        '\u{2028}' => "line separator",
        '\u{2029}' => "paragraph separator",
        _ => "a control character",
    };
    format!("U+{:04X} ({name})", c as u32)
}

/// Refuses a file that holds a [`forbidden`] character, at its line and column (lines end at
/// `\n`; a `\r` right before it is a CRLF line end, allowed). Every importer calls it first.
pub fn refuse_control(f: &ConfFile) -> Result<(), ConfError> {
    for (i, line) in f.src.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some((col, c)) = line.chars().enumerate().find(|(_, c)| forbidden(*c)) {
            return Err(f.error(
                i + 1,
                col + 1,
                1,
                format!("{} in the file: refused", char_name(c)),
                vec![
                    "a configuration file holds printable text, tabs and line ends (\\n or \\r\\n) only: a bare \\r, NUL or another control character is what a line break can hide behind".into(),
                ],
            ));
        }
    }
    Ok(())
}

/// The 1-based character column of byte offset `byte` in `line`.
pub fn col_of(line: &str, byte: usize) -> usize {
    line[..byte].chars().count() + 1
}

/// The PostgreSQL release an imported topology declares.
pub const POSTGRES_VERSION: &str = "18.6";
/// `workload.clients` of an imported topology (the shipped topologies').
pub const CLIENTS: u32 = 4;

/// An imported topology's head: where it came from, `about` (comment lines saying what it
/// holds, each ending in a newline), its name, a description naming the file and `pooler`,
/// and `postgres:` with its version (the caller goes on with the section's settings).
pub fn topology_head(origin: &crate::pooler::Origin, about: &str, pooler: &str) -> String {
    let file = origin
        .ini
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "# Imported by `pgchaos import` from {} at {}.\n{about}\nname: {}\ndescription: {}\n\n\
         postgres:\n  version: \"{POSTGRES_VERSION}\"\n",
        origin.ini.display(),
        origin.when,
        origin.name,
        yaml_quote(&format!("{pooler} settings imported from {file}.")),
    )
}

/// An imported topology's tail: the workload, the run, and an `expect:` to fill in after a
/// first run, with `example` as the invariant its comment shows.
pub fn topology_tail(example: &str) -> String {
    format!(
        "\nworkload:\n  clients: {CLIENTS}\n  keys: [4242424242, 612001]\n  api: session\n  steps: 1..40\n  lock_timeout: 1ms\n\
         \nrun:\n  cases: 256\n  seed: random\n  time_limit: 60s\n\
         \n# Fill this in after a first run (`pgchaos chaos FILE`): list the app.* invariants the\n\
         # verdict table shows as violated and that you accept, e.g.\n\
         #   {example}: violated\n\
         # Anything not listed is expected to hold.\nexpect:\n"
    )
}

/// A YAML double-quoted scalar.
pub fn yaml_quote(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if forbidden(c) || c == '\t' => s.push_str(&format!("\\u{:04x}", c as u32)),
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
        assert_eq!(
            yaml_quote("x\r y\u{85}\u{2028}\0"),
            "\"x\\u000d y\\u0085\\u2028\\u0000\""
        );
    }

    fn origin() -> crate::pooler::Origin<'static> {
        crate::pooler::Origin {
            ini: Path::new("/etc/pooler.conf"),
            when: "2026-12-06 16:00:00+00",
            name: "hostile",
            version: None,
            select: Default::default(),
        }
    }

    /// Hostile input for both importers: a bare carriage return (YAML reads it as a line
    /// break: the issue's `listen_addr = x\r  binary: /tmp/evil\r#` wrote a key of its own
    /// into the topology), NUL, NEL, a C1 control, the line separator, escape, in a key, a
    /// value, a comment, a dropped key's value: each refused at its line and column, with
    /// the character named and the snippet free of it. CRLF line ends and tabs are fine.
    #[test]
    fn control_characters_are_refused_by_both_importers() {
        type Convert =
            fn(&str, &Path, &crate::pooler::Origin) -> anyhow::Result<crate::pooler::Imported>;
        let importers: [(&str, &str, Convert); 2] = [
            (
                "[pgbouncer]\npool_mode = transaction\n",
                "pgbouncer.ini",
                crate::pooler::pgbouncer::import::convert,
            ),
            (
                "backend_clustering_mode = 'streaming_replication'\nconnection_cache = on\n",
                "pgpool.conf",
                crate::pooler::pgpool::import::convert,
            ),
        ];
        let hostile: &[(&str, usize, usize, &str)] = &[
            (
                "listen_addr = x\r  binary: /tmp/evil\r#\n",
                3,
                16,
                "U+000D (carriage return)",
            ),
            ("log_line_prefix = 'a\0b'\n", 3, 21, "U+0000 (NUL)"),
            (
                "listen_addr = 'x\u{85}y'\n",
                3,
                17,
                "U+0085 (next line, NEL)",
            ),
            ("# a comment \u{9b}31m\n", 3, 13, "U+009B"),
            (
                "listen_addr = 'x\u{2028}y'\n",
                3,
                17,
                "U+2028 (line separator)",
            ),
            ("list\u{1b}en_addr = x\n", 3, 5, "U+001B (escape)"),
            ("\u{b}listen_addr = x\n", 3, 1, "U+000B (vertical tab)"),
        ];
        for (base, file, convert) in importers {
            for (line, l, c, what) in hostile {
                let src = format!("{base}{line}");
                let e = convert(&src, Path::new(file), &origin())
                    .err()
                    .unwrap_or_else(|| panic!("{file}: {line:?} was accepted"));
                let ce = e
                    .downcast_ref::<ConfError>()
                    .unwrap_or_else(|| panic!("{file}: {line:?}: not a ConfError: {e}"));
                assert_eq!((ce.line, ce.column), (*l, *c), "{file}: {line:?}: {e}");
                let shown = e.to_string();
                assert!(
                    shown.starts_with(&format!("{file}:{l}:{c}: "))
                        && shown.contains(what)
                        && shown.contains("refused"),
                    "{shown}"
                );
                assert!(
                    !shown.chars().any(|ch| forbidden(ch) && ch != '\n'),
                    "the message echoes the character: {shown:?}"
                );
            }
            // CRLF line ends and tabs are plain text.
            let crlf = format!("{}\tmax_client_conn = 100\r\n", base.replace('\n', "\r\n"));
            let crlf = if file == "pgpool.conf" {
                crlf.replace("max_client_conn = 100", "num_init_children = 4")
            } else {
                crlf
            };
            convert(&crlf, Path::new(file), &origin())
                .unwrap_or_else(|e| panic!("{file}: CRLF refused: {e}"));
        }
    }
}
