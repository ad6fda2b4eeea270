//! `pgchaos/postgres:<version>` and the pooler's image (`pgchaos/pgbouncer:<version>`,
//! `pgchaos/pgpool:<version>`, as its [`ContainerRecipe`] says: the files it carries, given
//! the provisioned executable), built here from the provisioned binaries with no registry
//! and no base image: a root filesystem of the binaries, every shared library `ldd` says
//! they load (at the path it names, `ldd` run with the recipe's library path), `/bin/sh` (the machine's dash, for the entrypoint), a
//! passwd entry and the entrypoint (the pooler's image also the machine's `nft`, for the
//! partition faults, and `pg_isready` for its health check), streamed
//! as a tar archive into `docker import`. Why not debootstrap: it needs a Debian mirror at
//! build time and takes minutes; the binaries' own libraries are all an image needs, and
//! they are exactly the ones the native launcher runs with.
//!
//! Labels record the versions, the main binary's SHA-256 and one SHA-256 over every file,
//! mode and owner of the image (`pgchaos.inputs`); an image is rebuilt only when that
//! differs from the one already tagged, and the image it replaces is removed.

use super::docker;
use crate::pooler::ContainerRecipe;
use crate::provision::{PgBinaries, PoolerBinary};
use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bumped when the layout or an entrypoint changes in a way the inputs hash cannot see.
const FORMAT: &str = "pgchaos-image-v1";
/// Where the PostgreSQL install lives in both images.
pub const PG_PREFIX: &str = "/usr/local/pgsql";
/// The server user inside both images (as in the Alpine-based images of both projects).
pub const UID: u32 = 70;
pub const POSTGRES_REPO: &str = "pgchaos/postgres";
/// PostgreSQL's data directory inside the image (owned by [`UID`], mode 700).
pub const PGDATA: &str = "/var/lib/postgresql/data";

const POSTGRES_ENTRYPOINT: &str = include_str!("entrypoint-postgres.sh");
const ENTRYPOINT_PATH: &str = "usr/local/bin/pgchaos-entrypoint";

/// One image, as `ensure` left it.
#[derive(Debug, Clone)]
pub struct Image {
    /// `repository:tag`.
    pub reference: String,
    /// The image ID docker reports.
    pub id: String,
    /// Built by this call (false: the tagged image already had these inputs).
    pub built: bool,
    /// Seconds this call spent on it (hashing, and building when built).
    pub secs: f64,
    /// Its labels, as written.
    pub labels: BTreeMap<String, String>,
}

/// The images a topology needs.
#[derive(Debug, Clone)]
pub struct Images {
    pub postgres: Image,
    /// The pooler's, when the topology has one.
    pub pooler: Option<Image>,
}

/// A pooler's image to build: its name (`pgbouncer`), its recipe, its executable.
pub struct PoolerImage<'a> {
    pub name: &'a str,
    pub recipe: &'a ContainerRecipe,
    pub binary: &'a PoolerBinary,
}

/// The images a topology needs, from its binaries: PostgreSQL's, and its pooler's as the
/// pooler's [`ContainerRecipe`] says (an error when it has none yet).
pub fn ensure_for(
    t: &crate::topology::Topology,
    pg: &PgBinaries,
    pooler_bin: Option<&PoolerBinary>,
) -> Result<Images> {
    let pooler = crate::pooler::for_topology(t);
    let Some(binary) = pooler_bin else {
        return ensure(pg, None);
    };
    let recipe = pooler.container().ok_or_else(|| {
        anyhow!(
            "{}: {} does not run in a container yet; use launcher native",
            t.source.display(),
            pooler.display_name()
        )
    })?;
    ensure(
        pg,
        Some(&PoolerImage {
            name: pooler.name(),
            recipe: &recipe,
            binary,
        }),
    )
}

/// Build (or find up to date) the images for these binaries.
pub fn ensure(pg: &PgBinaries, pooler: Option<&PoolerImage>) -> Result<Images> {
    let postgres = ensure_one(postgres_plan(pg)?)?;
    let pooler = match pooler {
        Some(p) => Some(ensure_one(pooler_plan(pg, p)?)?),
        None => None,
    };
    Ok(Images { postgres, pooler })
}

#[derive(Debug, Clone)]
enum Content {
    Dir,
    File(PathBuf),
    Data(Vec<u8>),
    Symlink(String),
}

#[derive(Debug, Clone)]
struct Entry {
    content: Content,
    mode: u32,
    uid: u32,
}

/// An image to build: its files by path (relative, no leading slash), its settings.
struct Plan {
    reference: String,
    entries: BTreeMap<String, Entry>,
    /// `docker import --change` lines, labels excluded.
    changes: Vec<String>,
    labels: BTreeMap<String, String>,
}

impl Plan {
    fn new(reference: String) -> Plan {
        Plan {
            reference,
            entries: BTreeMap::new(),
            changes: Vec::new(),
            labels: BTreeMap::new(),
        }
    }

    fn add(&mut self, dst: &str, content: Content, mode: u32, uid: u32) {
        let dst = dst.trim_start_matches('/').to_string();
        // Parents first: docker import does not invent them with sane modes.
        let mut parent = Path::new(&dst).parent();
        while let Some(p) = parent {
            let s = p.to_string_lossy().to_string();
            if s.is_empty() {
                break;
            }
            self.entries.entry(s).or_insert(Entry {
                content: Content::Dir,
                mode: 0o755,
                uid: 0,
            });
            parent = p.parent();
        }
        self.entries.insert(dst, Entry { content, mode, uid });
    }

    /// A host file, mode as on the host.
    fn add_file(&mut self, dst: &str, src: &Path) -> Result<()> {
        let meta = fs::metadata(src).with_context(|| format!("{}: reading", src.display()))?;
        self.add(
            dst,
            Content::File(src.to_path_buf()),
            meta.permissions().mode() & 0o7777,
            0,
        );
        Ok(())
    }

    /// A directory tree from the host under `dst`, symlinks kept as symlinks.
    fn add_tree(&mut self, dst: &str, src: &Path) -> Result<()> {
        let mut list: Vec<_> = fs::read_dir(src)
            .with_context(|| format!("{}: listing", src.display()))?
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("{}: listing", src.display()))?;
        list.sort_by_key(|e| e.file_name());
        self.add(dst, Content::Dir, 0o755, 0);
        for e in list {
            let path = e.path();
            let name = format!("{dst}/{}", e.file_name().to_string_lossy());
            let meta = fs::symlink_metadata(&path)
                .with_context(|| format!("{}: reading", path.display()))?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path)
                    .with_context(|| format!("{}: reading the link", path.display()))?;
                self.add(
                    &name,
                    Content::Symlink(target.to_string_lossy().to_string()),
                    0o777,
                    0,
                );
            } else if meta.is_dir() {
                self.add_tree(&name, &path)?;
            } else {
                self.add_file(&name, &path)?;
            }
        }
        Ok(())
    }

    /// Every library the ELF files among `elfs` load, placed where `ldd` found it (paths
    /// inside the PostgreSQL install are already in the image under [`PG_PREFIX`]).
    fn add_libraries(&mut self, elfs: &[PathBuf], pg_root: &Path) -> Result<()> {
        self.add_libraries_with(elfs, &[pg_root.to_path_buf()], None)
    }

    /// The same, `ldd` run with `library_path` as `LD_LIBRARY_PATH`, and nothing under
    /// `provided` copied (the image has those already, where its `LD_LIBRARY_PATH` looks).
    fn add_libraries_with(
        &mut self,
        elfs: &[PathBuf],
        provided: &[PathBuf],
        library_path: Option<&str>,
    ) -> Result<()> {
        for lib in libraries(elfs, library_path)? {
            if provided.iter().any(|p| lib.starts_with(p)) {
                continue;
            }
            let dst = lib.to_string_lossy().to_string();
            let real = fs::canonicalize(&lib)
                .with_context(|| format!("{}: resolving a library ldd named", lib.display()))?;
            self.add_file(&dst, &real)?;
        }
        Ok(())
    }

    /// `/bin/sh`, passwd, group, nsswitch, /tmp, /dev/null's parent, the entrypoint.
    fn add_base(&mut self, user: &str, home: &str, entrypoint: &str) -> Result<()> {
        let sh = Path::new("/bin/dash");
        if !sh.exists() {
            bail!("/bin/dash: not found (the images' entrypoints are run by the machine's dash)");
        }
        self.add_file("bin/sh", sh)?;
        self.add_libraries(&[sh.to_path_buf()], Path::new("/nonexistent"))?;
        self.add(
            "etc/passwd",
            Content::Data(
                format!("root:x:0:0:root:/:/bin/sh\n{user}:x:{UID}:{UID}:{user}:{home}:/bin/sh\n")
                    .into_bytes(),
            ),
            0o644,
            0,
        );
        self.add(
            "etc/group",
            Content::Data(format!("root:x:0:\n{user}:x:{UID}:\n").into_bytes()),
            0o644,
            0,
        );
        self.add(
            "etc/nsswitch.conf",
            Content::Data(b"passwd: files\ngroup: files\nhosts: files dns\n".to_vec()),
            0o644,
            0,
        );
        self.add("tmp", Content::Dir, 0o1777, 0);
        self.add("dev", Content::Dir, 0o755, 0);
        self.add("proc", Content::Dir, 0o755, 0);
        self.add("sys", Content::Dir, 0o755, 0);
        self.add(home, Content::Dir, 0o700, UID);
        self.add(
            ENTRYPOINT_PATH,
            Content::Data(entrypoint.as_bytes().to_vec()),
            0o755,
            0,
        );
        self.changes
            .push(format!("ENTRYPOINT [\"/bin/sh\", \"/{ENTRYPOINT_PATH}\"]"));
        self.changes.push(format!("USER {UID}:{UID}"));
        self.changes.push("ENV TZ=UTC".to_string());
        self.changes.push(format!(
            "ENV LD_LIBRARY_PATH={PG_PREFIX}/lib:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
        ));
        self.changes.push("WORKDIR /tmp".to_string());
        Ok(())
    }

    /// The PostgreSQL install (bin, lib, share; not the headers).
    fn add_postgres(&mut self, pg: &PgBinaries) -> Result<PathBuf> {
        let root = pg_root(pg)?;
        for sub in ["bin", "lib", "share"] {
            self.add_tree(&format!("{}/{sub}", &PG_PREFIX[1..]), &root.join(sub))?;
        }
        Ok(root)
    }

    /// SHA-256 over every entry: path, kind, mode, owner, content.
    fn inputs_hash(&self) -> Result<String> {
        let mut h = Sha256::new();
        h.update(FORMAT.as_bytes());
        h.update(self.reference.as_bytes());
        for c in &self.changes {
            h.update(c.as_bytes());
            h.update(b"\n");
        }
        for (dst, e) in &self.entries {
            h.update(format!("\n{dst} {:o} {} ", e.mode, e.uid).as_bytes());
            match &e.content {
                Content::Dir => h.update(b"dir"),
                Content::Symlink(t) => h.update(format!("link {t}").as_bytes()),
                Content::Data(d) => h.update(sha256(d).as_bytes()),
                Content::File(p) => h.update(file_sha256(p)?.as_bytes()),
            }
        }
        Ok(hex(&h.finalize()))
    }
}

fn pg_root(pg: &PgBinaries) -> Result<PathBuf> {
    pg.bin_dir
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow!("{}: has no parent directory", pg.bin_dir.display()))
}

fn postgres_plan(pg: &PgBinaries) -> Result<Plan> {
    let mut plan = Plan::new(format!("{POSTGRES_REPO}:{}", pg.version));
    let root = plan.add_postgres(pg)?;
    let elfs = elf_files(&[root.join("bin"), root.join("lib")])?;
    plan.add_libraries(&elfs, &root)?;
    // PostgreSQL was built --with-system-tzdata: it needs the zone it runs in.
    for tz in ["UTC", "Etc/UTC"] {
        let src = Path::new("/usr/share/zoneinfo").join(tz);
        if !src.exists() {
            bail!(
                "{}: not found (PostgreSQL reads its time zone from the system's tzdata)",
                src.display()
            );
        }
        plan.add_file(
            &format!("usr/share/zoneinfo/{tz}"),
            &fs::canonicalize(&src)?,
        )?;
    }
    plan.add_base("postgres", "/var/lib/postgresql", POSTGRES_ENTRYPOINT)?;
    plan.changes.push(format!("ENV PGDATA={PGDATA}"));
    plan.changes.push("EXPOSE 5432".to_string());
    plan.labels
        .insert("pgchaos.postgres.version".into(), pg.version.clone());
    plan.labels.insert(
        "pgchaos.postgres.sha256".into(),
        file_sha256(&pg.bin_dir.join("postgres"))?,
    );
    Ok(plan)
}

/// The machine's nft, copied into the pooler's image.
const NFT: &str = "/usr/sbin/nft";

fn pooler_plan(pg: &PgBinaries, p: &PoolerImage) -> Result<Plan> {
    let (b, r, name) = (p.binary, p.recipe, p.name);
    let mut plan = Plan::new(format!("{}:{}", r.repo, b.version));
    let root = pg_root(pg)?;
    let carried = (r.files)(&b.path)?;
    let main = carried
        .files
        .first()
        .map(|(_, src)| src.clone())
        .ok_or_else(|| anyhow!("{name}'s container recipe carries no file"))?;
    let mut elfs = Vec::new();
    for (dst, src) in &carried.files {
        plan.add_file(dst, src)?;
        if is_elf(src) {
            elfs.push(src.clone());
        }
    }
    // pg_isready for the health check, with the libpq it links.
    let isready = pg.bin_dir.join("pg_isready");
    plan.add_file(&format!("{}/bin/pg_isready", &PG_PREFIX[1..]), &isready)?;
    plan.add_tree(&format!("{}/lib", &PG_PREFIX[1..]), &root.join("lib"))?;
    // nft (the machine's nftables), for the partitions the nemesis makes in this host's
    // network namespace.
    let nft = Path::new(NFT);
    if !nft.is_file() {
        bail!(
            "{NFT}: not found (the pooler's image carries nft for network partitions; install \
             Debian's nftables)"
        );
    }
    plan.add_file(&NFT[1..], nft)?;
    elfs.extend([isready, nft.to_path_buf()]);
    let mut provided = carried.provided.clone();
    provided.push(root.clone());
    plan.add_libraries_with(&elfs, &provided, carried.library_path.as_deref())?;
    plan.add_base(r.user, r.home, r.entrypoint)?;
    plan.changes.push(format!("EXPOSE {}", r.port));
    if let Some(p) = r.admin_port {
        plan.changes.push(format!("EXPOSE {p}"));
    }
    plan.labels
        .insert(format!("pgchaos.{name}.version"), b.version.clone());
    plan.labels
        .insert(format!("pgchaos.{name}.declared"), b.declared.clone());
    plan.labels
        .insert(format!("pgchaos.{name}.sha256"), file_sha256(&main)?);
    plan.labels
        .insert("pgchaos.postgres.version".into(), pg.version.clone());
    Ok(plan)
}

fn ensure_one(mut plan: Plan) -> Result<Image> {
    let t0 = Instant::now();
    let inputs = plan.inputs_hash()?;
    plan.labels.insert("pgchaos.inputs".into(), inputs.clone());
    plan.labels.insert("pgchaos.format".into(), FORMAT.into());
    let before = inspect(&plan.reference)?;
    if let Some((id, labels)) = &before
        && labels.get("pgchaos.inputs") == Some(&inputs)
    {
        let (id, labels) = (id.clone(), labels.clone());
        return Ok(Image {
            reference: plan.reference,
            id,
            built: false,
            secs: t0.elapsed().as_secs_f64(),
            labels,
        });
    }
    let mut args: Vec<String> = vec!["import".into()];
    for c in plan
        .changes
        .iter()
        .cloned()
        .chain(plan.labels.iter().map(|(k, v)| format!("LABEL {k}={v}")))
    {
        args.push("--change".into());
        args.push(c);
    }
    args.push("-".into());
    args.push(plan.reference.clone());
    let entries = plan.entries.clone();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = super::run(
        &super::docker_program(),
        &argv,
        Some(Box::new(move |w| write_tar(w, &entries))),
        super::DOCKER_TIMEOUT,
    )
    .with_context(|| format!("building {}", plan.reference))?;
    let id = out.trim().to_string();
    // The image this one replaces, now untagged: removed unless a container still uses it
    // (then the engine refuses, and it stays until that container is gone).
    if let Some((old, _)) = before
        && old != id
    {
        let _ = docker(&["image", "rm", &old]);
    }
    Ok(Image {
        reference: plan.reference,
        id,
        built: true,
        secs: t0.elapsed().as_secs_f64(),
        labels: plan.labels,
    })
}

/// The tagged image's ID and labels, or None when there is no such image.
pub fn inspect(reference: &str) -> Result<Option<(String, BTreeMap<String, String>)>> {
    let out = match docker(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}} {{json .Config.Labels}}",
        reference,
    ]) {
        Ok(o) => o,
        Err(e) if format!("{e:#}").contains("No such image") => return Ok(None),
        Err(e) => return Err(e),
    };
    let (id, json) = out
        .trim()
        .split_once(' ')
        .ok_or_else(|| anyhow!("docker image inspect {reference}: unexpected output {out:?}"))?;
    let labels: Option<BTreeMap<String, String>> = serde_json::from_str(json)
        .with_context(|| format!("docker image inspect {reference}: labels {json:?}"))?;
    Ok(Some((id.to_string(), labels.unwrap_or_default())))
}

fn write_tar(w: &mut dyn std::io::Write, entries: &BTreeMap<String, Entry>) -> Result<()> {
    let mut tar = tar::Builder::new(w);
    for (dst, e) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(e.mode);
        h.set_uid(u64::from(e.uid));
        h.set_gid(u64::from(e.uid));
        h.set_mtime(0);
        match &e.content {
            Content::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                tar.append_data(&mut h, format!("{dst}/"), std::io::empty())?;
            }
            Content::Symlink(t) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                tar.append_link(&mut h, dst, t)?;
            }
            Content::Data(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(d.len() as u64);
                tar.append_data(&mut h, dst, &d[..])?;
            }
            Content::File(p) => {
                let f = fs::File::open(p).with_context(|| format!("{}: opening", p.display()))?;
                let len = f.metadata()?.len();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(len);
                tar.append_data(&mut h, dst, f)
                    .with_context(|| format!("{}: adding to the image", p.display()))?;
            }
        }
    }
    tar.finish()?;
    Ok(())
}

/// Whether `path` is an ELF object (its first four bytes).
fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The regular files among these directories' entries (recursively) that are ELF objects.
fn elf_files(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).with_context(|| format!("{}: listing", d.display()))? {
            let p = e?.path();
            let meta = fs::symlink_metadata(&p)?;
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() && is_elf(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The libraries `ldd` resolves for these ELF files (those it cannot find are skipped:
/// an extension whose library the machine lacks is not loadable natively either).
fn libraries(elfs: &[PathBuf], library_path: Option<&str>) -> Result<BTreeSet<PathBuf>> {
    let mut found = BTreeSet::new();
    for chunk in elfs.chunks(64) {
        let mut ldd = std::process::Command::new("ldd");
        if let Some(p) = library_path {
            ldd.env("LD_LIBRARY_PATH", p);
        }
        let out = ldd
            .args(chunk)
            .output()
            .context("running ldd (from the machine's libc) to list the images' libraries")?;
        found.extend(parse_ldd(&String::from_utf8_lossy(&out.stdout)));
    }
    Ok(found)
}

/// Paths in ldd's output: `name => /path (0x..)` and the loader's `/path (0x..)`.
pub fn parse_ldd(text: &str) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.contains("(0x") {
            continue;
        }
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line,
        };
        let path = path.split(" (0x").next().unwrap_or("").trim();
        if path.starts_with('/') {
            out.insert(PathBuf::from(path));
        }
    }
    out
}

fn sha256(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// SHA-256 of a file's bytes, hex.
pub fn file_sha256(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).with_context(|| format!("{}: opening", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("{}: reading", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_yields_resolved_paths_and_the_loader_only() {
        let text = "/x/bin/postgres:\n\
                    \tlinux-vdso.so.1 (0x00007f000b107000)\n\
                    \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f000a339000)\n\
                    \tlibpython3.11.so.1.0 => not found\n\
                    \tlibpq.so.5 => /x/bin/../lib/libpq.so.5 (0x00007fe1a4b29000)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f000b109000)\n";
        let got: Vec<String> = parse_ldd(text)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            got,
            [
                "/lib/x86_64-linux-gnu/libz.so.1",
                "/lib64/ld-linux-x86-64.so.2",
                "/x/bin/../lib/libpq.so.5"
            ]
        );
    }

    #[test]
    fn a_plan_lists_parents_before_children_and_hashes_every_mode() {
        let mut a = Plan::new("x:1".into());
        a.add("usr/local/bin/f", Content::Data(b"hi".to_vec()), 0o755, 0);
        let keys: Vec<_> = a.entries.keys().cloned().collect();
        assert_eq!(
            keys,
            ["usr", "usr/local", "usr/local/bin", "usr/local/bin/f"]
        );
        let mut b = Plan::new("x:1".into());
        b.add("usr/local/bin/f", Content::Data(b"hi".to_vec()), 0o644, 0);
        assert_ne!(a.inputs_hash().unwrap(), b.inputs_hash().unwrap());
        let mut c = Plan::new("x:1".into());
        c.add("usr/local/bin/f", Content::Data(b"hi".to_vec()), 0o755, 0);
        assert_eq!(a.inputs_hash().unwrap(), c.inputs_hash().unwrap());
    }
}
