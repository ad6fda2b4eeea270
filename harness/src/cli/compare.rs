//! `pgchaos compare RUN...`: one table of verdicts across runs.

use super::Exit;
use crate::report::Results;
use crate::report::compare::{compare as table, resolve_run};
use anyhow::{Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    runs: Vec<String>,
    #[arg(long)]
    markdown: bool,
    #[arg(long, default_value = "reports")]
    reports: PathBuf,
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
    Ok(Exit::Ok)
}
