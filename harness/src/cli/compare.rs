//! `pgchaos compare RUN...`: one table of verdicts across runs.

use super::Exit;
use crate::report::Results;
use crate::report::compare::{compare as table, compare_html, resolve_run};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    runs: Vec<String>,
    #[arg(long)]
    markdown: bool,
    #[arg(long, default_value = "reports")]
    reports: PathBuf,
    /// Also write the comparison as a self-contained HTML page to this file.
    #[arg(long, value_name = "PATH")]
    html: Option<PathBuf>,
}

pub fn compare(a: Args) -> Result<Exit> {
    if a.runs.is_empty() {
        bail!("usage: pgchaos compare RUN_DIR|TOPOLOGY...");
    }
    let mut results = vec![];
    for r in &a.runs {
        results.push(Results::load(&resolve_run(r, &a.reports)?)?);
    }
    print!("{}", table(&results, a.markdown));
    if let Some(p) = &a.html {
        std::fs::write(p, compare_html(&results))
            .with_context(|| format!("--html {}: cannot write the comparison", p.display()))?;
        eprintln!("pgchaos: comparison written to {}", p.display());
    }
    Ok(Exit::Ok)
}
