//! Provisioning's unit tests: versions, the cache, the machine's apt sources, commands.

use super::apt::{parse_deb822_sources, parse_one_line_sources};
use super::*;
use crate::pooler::pgbouncer::provision::*;

struct Scratch(PathBuf);
impl Scratch {
    fn new() -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "pgchaos-provision-test-{}-{}",
            std::process::id(),
            unique()
        ));
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn opts(cache: &Path) -> Options {
    Options {
        cache_dir: cache.to_path_buf(),
        strict_versions: false,
        quiet: true,
        source_mirror: None,
    }
}

#[test]
fn deb822_sources() {
    let text = "\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

types: deb deb-src
uris: https://a.example/debian https://b.example/debian/
suites: trixie
components: main contrib
enabled: no
signed-by:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 abc
 -----END PGP PUBLIC KEY BLOCK-----
";
    let s = parse_deb822_sources(text);
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].uris, ["http://mirror.example/debian"]);
    assert_eq!(s[0].suites, ["bookworm", "bookworm-updates"]);
    assert_eq!(
        s[0].signed_by.as_deref(),
        Some("/usr/share/keyrings/debian-archive-keyring.gpg")
    );
    assert!(s[0].enabled);
    assert_eq!(s[1].suites, ["bookworm-security"]);
    assert_eq!(s[2].types, ["deb", "deb-src"]);
    assert_eq!(s[2].uris.len(), 2);
    assert!(!s[2].enabled);
    let key = s[2].signed_by.as_deref().unwrap();
    assert!(key.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nabc"));
    assert_eq!(
        choose_debian_mirror(&s),
        Some((
            "http://mirror.example/debian".into(),
            Some("/usr/share/keyrings/debian-archive-keyring.gpg".into())
        ))
    );
    // Security first in the file: still skipped.
    let mut r = s.clone();
    r.swap(0, 1);
    assert_eq!(
        choose_debian_mirror(&r).unwrap().0,
        "http://mirror.example/debian"
    );
    // Multiple URIs in an enabled stanza: the first; trailing slash dropped.
    let mut m = s[2].clone();
    m.enabled = true;
    assert_eq!(
        choose_debian_mirror(&[m]).unwrap().0,
        "https://a.example/debian"
    );
}

#[test]
fn one_line_sources() {
    let text = "\
# a comment
deb http://mirror.example/debian bookworm main contrib # trailing
deb-src [arch=amd64 signed-by=/etc/apt/keyrings/x.gpg] http://src.example/debian/ bookworm main
deb [ signed-by=/k.gpg arch=amd64 ] http://security.example/debian-security bookworm-security main
deb http://old.example/debian-security bookworm/updates main
deb cdrom:[Debian GNU/Linux 12]/ bookworm main
rpm http://nope.example/ x y
";
    let s = parse_one_line_sources(text);
    assert_eq!(s.len(), 5);
    assert_eq!(s[0].uris, ["http://mirror.example/debian"]);
    assert_eq!(s[0].components, ["main", "contrib"]);
    assert_eq!(s[0].signed_by, None);
    assert_eq!(s[1].types, ["deb-src"]);
    assert_eq!(s[1].signed_by.as_deref(), Some("/etc/apt/keyrings/x.gpg"));
    assert_eq!(s[2].signed_by.as_deref(), Some("/k.gpg"));
    assert_eq!(s[2].uris, ["http://security.example/debian-security"]);
    assert_eq!(
        choose_debian_mirror(&s).unwrap().0,
        "http://mirror.example/debian"
    );
    assert_eq!(
        choose_debian_mirror(&s[2..]),
        None,
        "security, old-style updates and cdrom are not a mirror"
    );
    assert_eq!(
        choose_debian_mirror(&s[1..2]),
        Some((
            "http://src.example/debian".into(),
            Some("/etc/apt/keyrings/x.gpg".into())
        ))
    );
}

#[test]
fn pgbouncer_version_output() {
    let out =
        "PgBouncer 1.24.1\nlibevent 2.1.12-stable\nadns: c-ares 1.34.5\ntls: OpenSSL 3.0.17\n";
    assert_eq!(parse_pgbouncer_version(out).as_deref(), Some("1.24.1"));
    assert_eq!(
        parse_pgbouncer_version("PgBouncer version 1.12.0\n").as_deref(),
        Some("1.12.0")
    );
    assert_eq!(
        parse_pgbouncer_version("\npgbouncer 1.25.2\n").as_deref(),
        Some("1.25.2")
    );
    assert_eq!(parse_pgbouncer_version("postgres (PostgreSQL) 18.6"), None);
    assert_eq!(parse_pgbouncer_version(""), None);
}

#[test]
fn postgres_version_output() {
    assert_eq!(
        parse_pg_version("postgres (PostgreSQL) 18.6\n").as_deref(),
        Some("18.6")
    );
    assert_eq!(
        parse_pg_version("postgres (PostgreSQL) 16.4 (Debian 16.4-1.pgdg120+1)").as_deref(),
        Some("16.4")
    );
    assert_eq!(parse_pg_version("PgBouncer 1.24.1"), None);
    assert_eq!(pg_release("18.6"), "18.6.0");
    assert_eq!(pg_release("18.6.1"), "18.6.1");
}

#[test]
fn versions() {
    assert_eq!(version_key("1.25.2"), [1, 25, 2]);
    assert_eq!(version_key("18.6.0"), [18, 6]);
    assert_eq!(version_key("1.25rc1"), [1, 25]);
    assert!(same_version("18.6", "18.6.0"));
    assert!(!same_version("1.24.1", "1.25.2"));
    assert!(check_version_syntax("1.25.2").is_ok());
    assert!(check_version_syntax("1.25.x").is_err());
    assert!(check_version_syntax("../1").is_err());
    assert!(check_version_syntax("").is_err());
    assert_eq!(upstream_version("1.24.1-1+deb13u2"), "1.24.1");
    assert_eq!(upstream_version("1:1.24.1+dfsg-2"), "1.24.1");
    assert_eq!(upstream_version("1.18.0"), "1.18.0");
    assert_eq!(
        dsc_version("Format: 3.0 (quilt)\nSource: pgbouncer\nVersion: 1.24.1-1+deb13u2\n")
            .as_deref(),
        Some("1.24.1-1+deb13u2")
    );
    let m = missing_packages(
        &["make", "libssl-dev", "libevent-dev"],
        "make install ok installed\nlibssl-dev:amd64 install ok installed\nlibevent-dev deinstall ok config-files\n",
    );
    assert_eq!(m, ["libevent-dev"]);
}

#[test]
fn nearest_version() {
    let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        nearest("1.25.2", &c(&["1.18.0", "1.24.1"])).unwrap(),
        "1.24.1"
    );
    assert_eq!(
        nearest("1.25.2", &c(&["1.24.1", "1.26.1"])).unwrap(),
        "1.26.1"
    );
    assert_eq!(
        nearest("1.25.2", &c(&["1.25.0", "1.26.1"])).unwrap(),
        "1.25.0"
    );
    assert_eq!(
        nearest("1.25.2", &c(&["2.0.0", "1.18.0"])).unwrap(),
        "1.18.0"
    );
    assert_eq!(nearest("1.25.2", &c(&[])), None);
}

#[test]
fn cache_dir_choice() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let all = env(&[
        ("PGCHAOS_CACHE", "/c"),
        ("XDG_CACHE_HOME", "/x"),
        ("HOME", "/h"),
    ]);
    assert_eq!(default_cache_dir(all, true, 0), Path::new("/c"));
    let no_override = env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/root")]);
    assert_eq!(
        default_cache_dir(no_override, true, 0),
        Path::new("/var/cache/pgchaos")
    );
    assert_eq!(
        default_cache_dir(no_override, false, 1000),
        Path::new("/x/pgchaos")
    );
    let home = env(&[("HOME", "/home/u")]);
    assert_eq!(
        default_cache_dir(home, false, 1000),
        Path::new("/home/u/.cache/pgchaos")
    );
}

#[test]
fn cache_completeness() {
    let s = Scratch::new();
    let o = opts(&s.0);
    prepare_cache(&o).unwrap();
    let dest = s.0.join("pgbouncer/1.24.1");
    assert_eq!(entry_state(&dest), Entry::Missing);

    // A half-finished dir (no marker) is never a hit, and is removed under the lock.
    fs::create_dir_all(dest.join("bin")).unwrap();
    fs::write(
        dest.join("bin/pgbouncer"),
        "#!/bin/sh\necho PgBouncer 1.24.1\n",
    )
    .unwrap();
    fs::set_permissions(
        dest.join("bin/pgbouncer"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(entry_state(&dest), Entry::Incomplete);
    assert!(complete_versions(&s.0.join("pgbouncer")).is_empty());
    assert_eq!(bouncer_cache_hit(&o, "1.24.1", &dest, false).unwrap(), None);
    assert!(dest.exists(), "not removed without the lock");
    assert_eq!(bouncer_cache_hit(&o, "1.24.1", &dest, true).unwrap(), None);
    assert!(!dest.exists());

    // A staged dir installed atomically, with its marker, is a hit.
    let tmp = TempDir::new(&s.0).unwrap();
    let staged = tmp.path().join("root");
    fs::create_dir_all(staged.join("bin")).unwrap();
    fs::write(
        staged.join("bin/pgbouncer"),
        "#!/bin/sh\necho PgBouncer 1.24.1\n",
    )
    .unwrap();
    fs::set_permissions(
        staged.join("bin/pgbouncer"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    install_entry(&staged, &dest, "test source").unwrap();
    assert_eq!(entry_state(&dest), Entry::Complete);
    assert_eq!(entry_source(&dest).as_deref(), Some("test source"));
    assert_eq!(complete_versions(&s.0.join("pgbouncer")), ["1.24.1"]);
    let hit = bouncer_cache_hit(&o, "1.24.1", &dest, false)
        .unwrap()
        .unwrap();
    assert_eq!(hit.version, "1.24.1");
    assert_eq!(hit.source, "cache");
    assert_eq!(hit.drift, None);
    let tmp_path = tmp.path().to_path_buf();
    drop(tmp);
    assert!(!tmp_path.exists(), "scratch dir removed on drop");

    // A complete entry whose binary reports another version is discarded.
    let other = s.0.join("pgbouncer/1.25.2");
    fs::create_dir_all(other.join("bin")).unwrap();
    fs::copy(dest.join("bin/pgbouncer"), other.join("bin/pgbouncer")).unwrap();
    fs::write(other.join(COMPLETE), "source=x\n").unwrap();
    assert_eq!(bouncer_cache_hit(&o, "1.25.2", &other, true).unwrap(), None);
    assert!(!other.exists());

    // Drift from a cached build: recorded, or refused when strict.
    let b = settle_bouncer(
        &o,
        "1.25.2",
        dest.join("bin/pgbouncer"),
        "1.24.1".into(),
        "cache".into(),
        "cached build",
    )
    .unwrap();
    assert_eq!(
        b.drift.as_deref(),
        Some("pgbouncer declared 1.25.2, obtained 1.24.1 (nearest available: cached build)")
    );
    let strict = Options {
        strict_versions: true,
        ..o.clone()
    };
    let e = settle_bouncer(
        &strict,
        "1.25.2",
        dest.join("bin/pgbouncer"),
        "1.24.1".into(),
        "cache".into(),
        "Debian source package",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--strict-versions: pgbouncer 1.25.2 cannot be obtained here; nearest is 1.24.1 (Debian source package)"
    );

    // Scratch dirs of dead processes are swept; live ones are kept.
    let dead = s.0.join(".tmp-999999999-abc");
    let live = s.0.join(format!(".tmp-{}-abc", std::process::id()));
    fs::create_dir_all(&dead).unwrap();
    fs::create_dir_all(&live).unwrap();
    sweep_stale_tmp(&s.0);
    assert!(!dead.exists());
    assert!(live.exists());
}

#[test]
fn markers_carry_provenance_and_debian_s_version_decides_the_nearest() {
    let s = Scratch::new();
    let root = s.0.join("pgbouncer");
    let tmp = TempDir::new(&s.0).unwrap();
    let entry = |v: &str, source: &str, fields: &[(&str, &str)]| {
        let staged = tmp.path().join(v);
        fs::create_dir_all(staged.join("bin")).unwrap();
        install_entry_with(&staged, &root.join(v), source, fields).unwrap();
    };
    entry(
        "1.25.2",
        "source mirror /m/pgbouncer-1.25.2.tar.gz",
        &[
            ("tarball", "pgbouncer-1.25.2.tar.gz"),
            ("tarball_sha256", "ab12"),
        ],
    );
    let dir = root.join("1.25.2");
    assert_eq!(
        entry_source(&dir).as_deref(),
        Some("source mirror /m/pgbouncer-1.25.2.tar.gz")
    );
    assert_eq!(entry_field(&dir, "tarball_sha256").as_deref(), Some("ab12"));
    assert_eq!(entry_field(&dir, "nope"), None);
    // A value with a line break would forge another field: refused.
    let staged = tmp.path().join("forged");
    fs::create_dir_all(&staged).unwrap();
    let e =
        install_entry_with(&staged, &root.join("9.9.9"), "x\ntarball_sha256=00", &[]).unwrap_err();
    assert!(e.to_string().contains("line break"), "{e}");
    assert!(!root.join("9.9.9").exists());
    // Debian never tried: it is tried (it may supply the declared version exactly).
    assert!(!debian_known_other(&root, "1.24.1"));
    entry(
        "1.24.1",
        "Debian source package pgbouncer 1.24.1-1 (trixie)",
        &[],
    );
    // Debian's is cached and is another version: the nearest cached build may stand in.
    assert!(debian_known_other(&root, "1.26.1"));
    // ... but not for the version Debian supplies (that is a cache hit anyway).
    assert!(!debian_known_other(&root, "1.24.1"));
}

#[test]
fn strictness_from_the_environment() {
    let env = |v: Option<&'static str>| move |_: &str| v.map(str::to_string);
    assert!(strict_from_env(env(Some("1"))));
    assert!(strict_from_env(env(Some("yes"))));
    assert!(!strict_from_env(env(Some("0"))));
    assert!(!strict_from_env(env(None)));
    assert_eq!(
        mirror::from_env(|k: &str| (k == "PGCHAOS_SOURCE_MIRROR").then(|| "/m".to_string())),
        Some(PathBuf::from("/m"))
    );
}

#[test]
fn explicit_paths_are_checked() {
    let s = Scratch::new();
    let o = opts(&s.0.join("cache"));
    let bin = s.0.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for exe in ["postgres", "initdb"] {
        fs::write(
            bin.join(exe),
            "#!/bin/sh\necho 'postgres (PostgreSQL) 18.6'\n",
        )
        .unwrap();
        fs::set_permissions(bin.join(exe), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let e = postgres("18.6", Some(&bin), &o).unwrap_err().to_string();
    assert!(e.contains("pg_ctl"), "{e}");
    fs::copy(bin.join("initdb"), bin.join("pg_ctl")).unwrap();
    let pg = postgres("18.6", Some(&bin), &o).unwrap();
    assert_eq!(pg.source, "explicit path");
    assert_eq!(pg.version, "18.6");
    let e = pgbouncer("1.25.2", Some(&bin.join("pgbouncer")), &o).unwrap_err();
    assert!(e.to_string().contains("pgbouncer"), "{e}");
}

#[test]
fn failing_command_reports_line_and_tail() {
    let s = Scratch::new();
    let o = opts(&s.0);
    let mut c = Command::new("sh");
    c.args(["-c", "for i in $(seq 1 30); do echo line$i; done; exit 3"]);
    let e = run(&o, "test-fail", &mut c).unwrap_err().to_string();
    assert!(e.contains("`sh -c 'for i in"), "{e}");
    assert!(
        e.contains("line30") && e.contains("line12") && !e.contains("line10\n"),
        "{e}"
    );
    assert!(e.contains("exit status: 3"), "{e}");
    let logs: Vec<_> = fs::read_dir(s.0.join("logs")).unwrap().collect();
    assert_eq!(logs.len(), 1);
}

/// The real thing, from the network and a compiler: `cargo test real_provision --
/// --ignored --nocapture`. Uses `$PGCHAOS_CACHE` when set (e.g. /var/cache/pgchaos),
/// else a fresh temp cache. (Every real-server test provisions through the cache anyway;
/// this one starts from nothing.)
#[test]
#[ignore = "downloads PostgreSQL and builds PgBouncer from scratch (minutes); run with --ignored"]
fn real_provision() {
    let scratch = Scratch::new();
    let cache = env_path("PGCHAOS_CACHE").unwrap_or_else(|| scratch.0.join("cache"));
    let o = Options {
        cache_dir: cache.clone(),
        strict_versions: false,
        quiet: false,
        source_mirror: env_path(mirror::ENV),
    };
    let was_empty = complete_versions(&cache.join("postgres")).is_empty()
        && complete_versions(&cache.join("pgbouncer")).is_empty();
    let timed = |what: &str, f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        f();
        let s = t.elapsed().as_secs_f64();
        eprintln!("real_provision: {what}: {s:.2} s");
        s
    };

    // Two runs at once: one provisions, the other waits for the lock and hits the cache.
    let mut pgs = Vec::new();
    timed("postgres 18.6 cold (2 concurrent runs)", &mut || {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|_| sc.spawn(|| postgres("18.6", None, &o).unwrap()))
                .collect();
            pgs = hs.into_iter().map(|h| h.join().unwrap()).collect();
        })
    });
    for pg in &pgs {
        assert_eq!(pg.version, "18.6");
        assert!(pg.bin_dir.join("postgres").is_file());
        assert_eq!(pg.bin_dir, cache.join("postgres/18.6/bin"));
    }
    if was_empty {
        assert_eq!(
            pgs.iter().filter(|p| p.source == "cache").count(),
            1,
            "{pgs:?}"
        );
    }
    let mut bs = Vec::new();
    timed("pgbouncer 1.25.2 cold (2 concurrent runs)", &mut || {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|_| sc.spawn(|| pgbouncer("1.25.2", None, &o).unwrap()))
                .collect();
            bs = hs.into_iter().map(|h| h.join().unwrap()).collect();
        })
    });
    for b in &bs {
        eprintln!("real_provision: {b:?}");
        assert_eq!(b.declared, "1.25.2");
        assert!(b.path.is_file());
        assert_eq!(b.drift.is_some(), b.version != "1.25.2");
        assert!(version_key(&b.version) >= vec![1, 24], "{b:?}");
    }
    if was_empty {
        assert_eq!(
            bs.iter().filter(|b| b.source == "cache").count(),
            1,
            "{bs:?}"
        );
    }

    let mut pg = None;
    timed("postgres 18.6 warm", &mut || {
        pg = Some(postgres("18.6", None, &o).unwrap())
    });
    assert_eq!(pg.unwrap().source, "cache");
    let mut b = None;
    timed("pgbouncer 1.25.2 warm", &mut || {
        b = Some(pgbouncer("1.25.2", None, &o).unwrap())
    });
    assert_eq!(b.unwrap().source, "cache");
    let strict = Options {
        strict_versions: true,
        ..o.clone()
    };
    if let Err(e) = pgbouncer("1.25.2", None, &strict) {
        eprintln!("real_provision: strict: {e}");
        assert!(e.to_string().starts_with("--strict-versions"), "{e}");
    }
    // No scratch dirs left behind.
    let left: Vec<_> = fs::read_dir(&cache)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
