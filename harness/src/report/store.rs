//! Where a run's report goes: `reports/<topology>/<UTC stamp>-<seed>/`, written first into a
//! hidden temporary directory (the history streams into it during the run) and renamed into
//! place at the end, with `latest` pointing at it. An interrupted or failed run removes its
//! temporary directory; one killed outright leaves it, and the next run removes it.

use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

pub struct RunDir {
    parent: PathBuf,
    tmp: PathBuf,
    final_dir: PathBuf,
    committed: bool,
    /// `out_root/<topology>/` did not exist before this run: a run that fails before its
    /// commit removes it too when nothing else is in it (nothing half-written).
    made_parent: bool,
}

impl RunDir {
    /// A fresh temporary directory under `out_root/<topology>/`, to be `<UTC stamp>-<seed>`.
    pub fn create(out_root: &Path, topology: &str, seed: u64) -> Result<RunDir> {
        Self::create_named(
            out_root,
            topology,
            &format!("{}-{seed}", super::utc_stamp()),
        )
    }

    /// The same, to be named `<UTC stamp>` (a `pgchaos run`, which has no seed).
    pub fn create_stamped(out_root: &Path, topology: &str) -> Result<RunDir> {
        Self::create_named(out_root, topology, &super::utc_stamp())
    }

    fn create_named(out_root: &Path, topology: &str, name: &str) -> Result<RunDir> {
        let parent = out_root.join(topology);
        let made_parent = !parent.exists();
        fs::create_dir_all(&parent)
            .with_context(|| format!("{}: creating the report directory", parent.display()))?;
        remove_dead_tmp(&parent);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let tmp = parent.join(format!(".tmp-{}-{nanos}", std::process::id()));
        fs::create_dir(&tmp).with_context(|| format!("{}: creating", tmp.display()))?;
        let final_dir = parent.join(name);
        Ok(RunDir {
            parent,
            tmp,
            final_dir,
            committed: false,
            made_parent,
        })
    }

    /// Where to write while the run goes.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Where the report will be once committed.
    pub fn final_path(&self) -> &Path {
        &self.final_dir
    }

    /// Rename into place and point `latest` at it.
    pub fn commit(mut self) -> Result<PathBuf> {
        let mut target = self.final_dir.clone();
        let mut n = 1;
        while target.exists() {
            n += 1;
            target = self.parent.join(format!(
                "{}-{n}",
                self.final_dir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
            ));
        }
        fs::rename(&self.tmp, &target).with_context(|| {
            format!(
                "moving the report {} to {}",
                self.tmp.display(),
                target.display()
            )
        })?;
        self.committed = true;
        let latest = self.parent.join("latest");
        let tmp_link = self.parent.join(format!(".latest-{}", std::process::id()));
        let _ = fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(target.file_name().expect("named"), &tmp_link)
            .with_context(|| format!("{}: creating a symlink", tmp_link.display()))?;
        fs::rename(&tmp_link, &latest)
            .with_context(|| format!("{}: updating", latest.display()))?;
        Ok(target)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.tmp);
            if self.made_parent {
                // Only when empty: another run may have written beside this one since.
                let _ = fs::remove_dir(&self.parent);
            }
        }
    }
}

/// `.tmp-<pid>-*` directories of runs whose process is gone.
fn remove_dead_tmp(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = name
            .strip_prefix(".tmp-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_complete_or_absent() {
        let root = std::env::temp_dir().join(format!("pgchaos-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        // Dropped without commit: nothing is left.
        let d = RunDir::create(&root, "t", 7).unwrap();
        fs::write(d.path().join("results.json"), "{}").unwrap();
        let tmp = d.path().to_path_buf();
        drop(d);
        assert!(!tmp.exists());
        // The topology's folder it made is gone too: a refused run leaves no trace.
        assert!(!root.join("t").exists());
        // A dead run's leftover is removed by the next run.
        let stale = root.join("t").join(".tmp-999999999-1");
        fs::create_dir_all(&stale).unwrap();
        let d = RunDir::create(&root, "t", 7).unwrap();
        assert!(!stale.exists());
        fs::write(d.path().join("results.json"), "{}").unwrap();
        let done = d.commit().unwrap();
        assert!(done.join("results.json").is_file());
        assert!(done.file_name().unwrap().to_string_lossy().ends_with("-7"));
        assert_eq!(
            fs::read_link(root.join("t").join("latest")).unwrap(),
            Path::new(done.file_name().unwrap())
        );
        let _ = fs::remove_dir_all(&root);
    }
}
