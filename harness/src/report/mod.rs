//! What a person reads, rendered from typed data only (the checker's results and the
//! recorded history): `results.json` ([`Results`]), `report.md`, `report.html` (with
//! plots of the whole run and a timeline of each minimal case), JUnit XML, minimal cases
//! (`case.yaml`) with their evidence (`evidence.json`), the terminal's table, progress and
//! findings, and the comparison of runs. A report directory is written into a temporary
//! directory and renamed into place ([`RunDir`]): complete or absent.
//!
//! May import anything upstream (`engine` for its events, `check`, `history`, `topology`).

pub mod answer;
pub mod casefile;
pub mod compare;
pub mod evidence;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod markup;
pub mod matrix;
pub mod plots;
pub mod results;
pub mod store;
pub mod terminal;
pub mod timeline;

pub use casefile::{CaseFile, CaseStep};
pub use results::Results;
pub use store::RunDir;

use crate::check::Tally;
use crate::history::{CaseView, RunHeader};
use crate::topology::Topology;
use anyhow::{Context, Result};
use std::fs;
use std::path::Path;

pub use crate::vocab::backend::utc_stamp;

/// The topology file as recorded in case files: relative to the cwd when possible.
pub fn topo_label(topo: &Topology) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    topo.source
        .strip_prefix(&cwd)
        .unwrap_or(&topo.source)
        .display()
        .to_string()
}

/// Write `results.json`, `report.md`, `report.html` and
/// `failures/<invariant>/{case.yaml,evidence.json}`
/// into `dir` (which exists). `shown_dir` is where the report will live when finished (for
/// the reproduce commands it prints).
pub fn write_report(
    dir: &Path,
    shown_dir: &Path,
    topology: &Topology,
    header: &RunHeader,
    results: &Results,
    tally: &Tally,
) -> Result<()> {
    let write = |path: &Path, text: String| {
        fs::write(path, text).with_context(|| format!("{}: writing", path.display()))
    };
    write(
        &dir.join("results.json"),
        serde_json::to_string_pretty(results)?,
    )?;
    for f in &tally.failures {
        let Some((events, check)) = &f.evidence else {
            continue;
        };
        let view = CaseView::build(events)?;
        let fdir = dir.join("failures").join(&f.invariant);
        fs::create_dir_all(&fdir).with_context(|| format!("{}: creating", fdir.display()))?;
        let mut case = CaseFile::from_case(&results.topology_file, &view, check);
        case.invariant = Some(f.invariant.clone());
        case.case_seed = f.case_seed;
        case.versions = Some(versions_line(header));
        write(&fdir.join("case.yaml"), serde_saphyr::to_string(&case)?)?;
        write(
            &fdir.join("evidence.json"),
            serde_json::to_string_pretty(&evidence::evidence_json(
                header,
                &f.invariant,
                f.case_seed,
                events,
                &view,
                check,
            ))?,
        )?;
    }
    write(
        &dir.join("report.md"),
        markdown::report(
            results,
            topology.description.as_deref(),
            shown_dir,
            &tally.failures,
        ),
    )?;
    // The whole run's plots come from its history: beside the report (chaos), or in the
    // run directory the report is about (analyze).
    let perf = match plots::Perf::load(dir)? {
        Some(p) => Some(p),
        None => plots::Perf::load(shown_dir)?,
    };
    write(
        &dir.join("report.html"),
        html::report(
            results,
            topology.description.as_deref(),
            &tally.failures,
            perf.as_ref(),
        ),
    )?;
    Ok(())
}

/// `PostgreSQL 18.6 + PgBouncer 1.24.1 (declared 1.25.2)`.
pub fn versions_line(header: &RunHeader) -> String {
    let v = &header.versions;
    versions_text(
        &v.postgres,
        &header.pooler,
        v.pooler.as_deref(),
        v.pooler_declared.as_deref(),
    )
}

/// The versions line from its parts (a run's header, or its `results.json`): `pooler` is
/// the pooler's name (`pgbouncer`, `none`), `ran` its version.
pub fn versions_text(
    postgres: &str,
    pooler: &str,
    ran: Option<&str>,
    declared: Option<&str>,
) -> String {
    match ran {
        Some(b) => format!(
            "PostgreSQL {postgres} + {} {b} (declared {})",
            crate::pooler::display_name(pooler),
            declared.unwrap_or_default()
        ),
        None => format!("PostgreSQL {postgres}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_compact_utc() {
        let s = utc_stamp();
        assert_eq!(s.len(), 16, "{s}");
        assert!(
            s.starts_with("20") && s.ends_with('Z') && s.as_bytes()[8] == b'T',
            "{s}"
        );
    }
}
