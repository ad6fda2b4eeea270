//! Embeds the shipped profiles (`profiles/*.yaml`) and reference topologies
//! (`topologies/*.yaml`) in the binary, so `pgchaos init` works from an installed binary,
//! away from this repository: `$OUT_DIR/embedded.rs` lists every file found (no list of
//! names here: a new profile file is embedded by being there).

use std::fmt::Write as _;
use std::path::Path;

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = vec![];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                let abs = std::fs::canonicalize(&p).unwrap();
                out.push((stem, abs.display().to_string()));
            }
        }
    }
    out.sort();
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut s = String::new();
    for (konst, dir) in [("PROFILES", "profiles"), ("TOPOLOGIES", "topologies")] {
        let d = root.join(dir);
        println!("cargo:rerun-if-changed={}", d.display());
        let _ = writeln!(s, "pub const {konst}: &[(&str, &str)] = &[");
        for (name, path) in files(&d) {
            println!("cargo:rerun-if-changed={path}");
            let _ = writeln!(s, "    ({name:?}, include_str!({path:?})),");
        }
        let _ = writeln!(s, "];");
    }
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("embedded.rs");
    std::fs::write(out, s).unwrap();
}
