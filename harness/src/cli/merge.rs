//! `pgchaos merge DIR... --out DIR`: the partitions of a matrix (`matrix --partition K/N`,
//! run on several machines) combined into the whole: one `matrix.json`, `matrix.md`,
//! `matrix.html` and `junit.xml`, with every partition's runs and composed topologies
//! copied beside them so the links work. Inconsistent inputs (other pgchaos versions or
//! servers, other profiles, topologies, files or seeds, a cell in two partitions, a
//! partition missing or given twice) are refused before anything is written.

use super::Exit;
use super::matrix::{OutDir, finish, write_matrix};
use crate::report::matrix::{Matrix, merge};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The partitions' matrix directories (each holds a `matrix.json`; a report root with
    /// `matrix/latest` works too).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged matrix goes (must not exist, or be empty).
    #[arg(long)]
    out: PathBuf,
    /// Also write the cells as JUnit XML here (the merged directory has `junit.xml` too).
    #[arg(long)]
    junit: Option<PathBuf>,
}

/// A partition's matrix directory: `DIR` with `matrix.json`, or `DIR/matrix/latest`.
fn matrix_dir(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        bail!("{}: no such directory", dir.display());
    }
    for d in [dir.to_path_buf(), dir.join("matrix").join("latest")] {
        if d.join("matrix.json").is_file() {
            return Ok(d);
        }
    }
    bail!(
        "{}: no matrix.json here (nor in matrix/latest/): not a matrix directory",
        dir.display()
    )
}

pub fn merge_cmd(a: Args) -> Result<Exit> {
    let mut parts = vec![];
    for d in &a.dirs {
        let dir = matrix_dir(d)?;
        let file = dir.join("matrix.json");
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("{}: cannot read", file.display()))?;
        let m: Matrix = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a pgchaos matrix.json", file.display()))?;
        parts.push((d.display().to_string(), m, dir));
    }
    let labelled: Vec<(String, Matrix)> = parts
        .iter()
        .map(|(l, m, _)| (l.clone(), m.clone()))
        .collect();
    let merged = merge(&labelled).map_err(|e| anyhow!("merge: {e} (nothing was written)"))?;
    if let Some(j) = &a.junit {
        let parent = match j.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() || j.is_dir() {
            bail!(
                "--junit {}: not a file in an existing directory (nothing was written)",
                j.display()
            );
        }
    }
    let out = OutDir::exact(&a.out)?;
    let root = out.path().to_path_buf();
    for (label, _, dir) in &parts {
        for sub in ["runs", "topologies"] {
            let from = dir.join(sub);
            if from.is_dir() {
                copy_tree(&from, &root.join(sub))
                    .with_context(|| format!("copying {label}'s {sub}/"))?;
            }
        }
    }
    write_matrix(&root, &merged)?;
    let final_dir = out.commit()?;
    eprintln!(
        "pgchaos merge: {} partitions, {} cells",
        merged.merged,
        merged.cells.len()
    );
    finish(&merged, &final_dir, a.junit.as_deref(), None)
}

/// Copy a directory tree (files, directories, symlinks as symlinks); an existing file in
/// the way is an error (partitions never share a run directory).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("{}: creating", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("{}: reading", from.display()))? {
        let e = e.with_context(|| format!("{}: reading", from.display()))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e
            .file_type()
            .with_context(|| format!("{}: reading", src.display()))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src)
                .with_context(|| format!("{}: reading the link", src.display()))?;
            // `latest` links of the runs: the last partition's wins, they point at runs of
            // one cell each, so they never differ.
            let _ = std::fs::remove_file(&dst);
            std::os::unix::fs::symlink(&target, &dst)
                .with_context(|| format!("{}: creating a link", dst.display()))?;
        } else {
            if dst.exists() {
                bail!(
                    "{}: two partitions hold this file ({})",
                    dst.display(),
                    src.display()
                );
            }
            std::fs::copy(&src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
    }
    Ok(())
}
