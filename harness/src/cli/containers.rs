//! `pgchaos images` and `pgchaos compose`: the container stage's two commands.

use super::{Exit, all_topologies, load};
use crate::container::images;
use crate::launch::compose;
use anyhow::{Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ImagesArgs {
    /// Topologies whose servers to build images of (default: every topology).
    pub topology: Vec<String>,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
pub struct ComposeArgs {
    /// The topology (a name in topologies/ or a path).
    pub topology: String,
    /// The directory to write (default: compose/NAME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace files that differ, and write new passwords into an existing .env.
    #[arg(long)]
    pub force: bool,
    /// A directory of source tarballs (`pgbouncer-<version>.tar.gz`) to build a pooler from,
    /// after the cache and before the upstream download (default: PGCHAOS_SOURCE_MIRROR).
    #[arg(long, value_name = "DIR")]
    pub(super) source_mirror: Option<std::path::PathBuf>,
}

fn print_image(i: &images::Image) {
    println!(
        "{}: {} in {:.1}s ({})",
        i.reference,
        if i.built { "built" } else { "up to date" },
        i.secs,
        i.id
    );
}

pub fn images(a: ImagesArgs) -> Result<Exit> {
    let list = if a.topology.is_empty() {
        all_topologies()?
    } else {
        a.topology
    };
    let mut seen = std::collections::BTreeSet::new();
    for t in &list {
        let topo = load(t)?;
        let (pg, b) = crate::launch::binaries(&topo, false)?;
        if !seen.insert((pg.bin_dir.clone(), b.as_ref().map(|b| b.path.clone()))) {
            continue;
        }
        let imgs = images::ensure_for(&topo, &pg, b.as_ref())?;
        print_image(&imgs.postgres);
        if let Some(i) = &imgs.pooler {
            print_image(i);
        }
    }
    Ok(Exit::Ok)
}

pub fn compose(a: ComposeArgs) -> Result<Exit> {
    let topo = load(&a.topology)?;
    let files = compose::render(&topo)?;
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from("compose").join(&topo.name));
    if out.exists() && !out.is_dir() {
        bail!("{}: exists and is not a directory", out.display());
    }
    let (pg, b) = crate::launch::binaries(&topo, false)?;
    let imgs = images::ensure_for(&topo, &pg, b.as_ref())?;
    print_image(&imgs.postgres);
    if let Some(i) = &imgs.pooler {
        print_image(i);
    }
    let mut all = files;
    all.push(compose::env_file(&topo, &imgs)?);
    let w = compose::write(&out, &all, a.force)?;
    for p in &w.written {
        println!("wrote {}", p.display());
    }
    for p in &w.unchanged {
        println!("unchanged {}", p.display());
    }
    for p in &w.kept {
        println!(
            "kept {} (its passwords may be in use; --force writes new ones)",
            p.display()
        );
    }
    println!(
        "start: cd {dir} && docker-compose up -d; ports: docker-compose port postgres {pg}{pb}; \
         passwords: {dir}/.env; stop: docker-compose down -v",
        dir = out.display(),
        pg = compose::PG_PORT,
        pb = match crate::pooler::for_topology(&topo).container() {
            Some(r) if imgs.pooler.is_some() => {
                let name = crate::pooler::for_topology(&topo).name();
                match r.admin_port {
                    Some(a) => format!(" (and {name} {}, its admin port {name} {a})", r.port),
                    None => format!(" (and {name} {})", r.port),
                }
            }
            _ => String::new(),
        }
    );
    Ok(Exit::Ok)
}
