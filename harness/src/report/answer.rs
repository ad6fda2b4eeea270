//! The answer under the matrix's table: for each cell whose worst class is unsafe (ran
//! twice, lost, leaked, stuck, missed), the fix its profile's `fix:` gives for that class,
//! one entry per profile and class with the topologies it applies to. The README's block
//! (`matrix --update-readme`) and `matrix.md` end with it.
//!
//! May import `profile` (the classes) and the matrix it renders.

use super::matrix::Matrix;
use crate::profile::Class;
use std::fmt::Write as _;

/// Prose lines are wrapped at this many characters (the README's rule).
const WIDTH: usize = 100;

impl Matrix {
    /// `Fixes for the unsafe cells` as a Markdown list, or a line saying there is none.
    pub fn fixes(&self) -> String {
        let mut out = String::new();
        for p in &self.profiles {
            // Each unsafe class of this profile's row, with the topologies that showed it.
            let mut by_class: Vec<(Class, Vec<&str>)> = vec![];
            for t in &self.topologies {
                let Some(w) = self.cell(&p.name, t).and_then(|c| c.worst) else {
                    continue;
                };
                if !w.is_unsafe() {
                    continue;
                }
                match by_class.iter_mut().find(|(c, _)| *c == w) {
                    Some((_, ts)) => ts.push(t),
                    None => by_class.push((w, vec![t])),
                }
            }
            by_class.sort_by_key(|(c, _)| *c);
            for (class, tops) in by_class {
                let fix = match p.fix.get(&class) {
                    Some(f) => f.clone(),
                    None => format!(
                        "no fix is written for it: add `fix: {{{class}: ...}}` to {}.",
                        p.file
                    ),
                };
                let item = format!("**{}**, {class} on {}: {fix}", p.name, tops.join(", "));
                out.push_str(&wrap(&format!("- {item}"), "  "));
            }
        }
        if out.is_empty() {
            return "No cell is unsafe: nothing to fix.\n".into();
        }
        let mut s = String::new();
        let _ = writeln!(
            s,
            "The fix for each unsafe cell (from the profiles' `fix:`):\n"
        );
        s.push_str(&out);
        s
    }
}

/// `text` wrapped at [`WIDTH`] on spaces, later lines indented by `indent`; a word longer
/// than the width stays whole on its own line.
fn wrap(text: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
        } else if !line.is_empty() && line != indent {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::matrix::{Cell, ProfileRow};
    use std::collections::BTreeMap;

    fn cell(profile: &str, topology: &str, worst: Class) -> Cell {
        Cell {
            profile: profile.into(),
            topology: topology.into(),
            topology_file: String::new(),
            expected: None,
            accepted: Default::default(),
            require_expected: false,
            worst: Some(worst),
            count: 1,
            runs: vec![],
        }
    }

    fn matrix(cells: Vec<Cell>, fix: BTreeMap<Class, String>) -> Matrix {
        Matrix {
            pgchaos: "0.1.0".into(),
            versions: "PostgreSQL 18.6".into(),
            servers: BTreeMap::new(),
            drift: Default::default(),
            seeds: vec![1],
            replicas: None,
            time_scale_milli: 1000,
            shrink: "once".into(),
            max_shrink_runs: 6,
            plan: vec![],
            partition: None,
            merged: 0,
            jobs: 1,
            accept: Default::default(),
            require_expected: false,
            profiles: vec![ProfileRow {
                name: "rails".into(),
                tool: "Rails".into(),
                file: "profiles/rails.yaml".into(),
                fix,
            }],
            topologies: vec![
                "direct".into(),
                "tx".into(),
                "tx-xact".into(),
                "pgpool".into(),
            ],
            cells,
            run_ms: 1000,
        }
    }

    #[test]
    fn each_unsafe_class_gets_its_fix_with_the_topologies_that_showed_it() {
        let fix = BTreeMap::from([(Class::RanTwice, "Bypass transaction pooling.".to_string())]);
        let m = matrix(
            vec![
                cell("rails", "direct", Class::ErrorPath),
                cell("rails", "tx", Class::RanTwice),
                cell("rails", "tx-xact", Class::RanTwice),
                cell("rails", "pgpool", Class::Leaked),
            ],
            fix,
        );
        let f = m.fixes();
        assert!(
            f.contains("- **rails**, ran twice on tx, tx-xact: Bypass transaction pooling.\n"),
            "{f}"
        );
        // A class with no fix written says where to write it; error path is no fix's business.
        assert!(
            f.contains("- **rails**, leaked on pgpool: no fix is written for it: add `fix: {leaked: ...}` to\n  profiles/rails.yaml."),
            "{f}"
        );
        assert!(!f.contains("error path"), "{f}");
        assert!(f.lines().all(|l| l.len() <= WIDTH), "{f}");
    }

    #[test]
    fn a_matrix_without_unsafe_cells_says_so() {
        let m = matrix(
            vec![
                cell("rails", "direct", Class::ErrorPath),
                cell("rails", "tx", Class::Safe),
            ],
            BTreeMap::new(),
        );
        assert_eq!(m.fixes(), "No cell is unsafe: nothing to fix.\n");
    }

    #[test]
    fn wrapping_keeps_words_and_indents_the_rest() {
        let w = wrap(&format!("- {}", "word ".repeat(40)), "  ");
        assert!(w.lines().all(|l| l.len() <= WIDTH), "{w}");
        assert!(w.lines().skip(1).all(|l| l.starts_with("  word")), "{w}");
        assert_eq!(w.split_whitespace().filter(|x| *x == "word").count(), 40);
    }
}
