//! A project's dependencies, read from its dependency files, for `pgchaos init`: which
//! packages of which ecosystems it names. Each file kind is a row of [`KINDS`] (file name
//! pattern, ecosystem, parser); the profiles' `detect:` entries are matched against what is
//! found, so a new tool is detected by its profile alone.
//!
//! Read: `Gemfile.lock` (ruby: the gems of `specs:` and `DEPENDENCIES`), `go.mod` (go:
//! `require` lines and blocks), `package.json` (npm: dependencies, devDependencies,
//! peerDependencies, optionalDependencies), `Cargo.toml` (cargo: every dependencies table,
//! a renamed dependency by its `package`), `requirements*.txt` and `pyproject.toml` (pypi:
//! requirement lines; `[project]` dependencies and optional ones, Poetry's tables,
//! `[dependency-groups]`), `mix.lock` (hex), `pom.xml` (maven: `groupId:artifactId` of each
//! `<dependency>` and `<plugin>`). Lock files list what is installed, manifests what is
//! asked for; either names the tool.

use super::Ecosystem;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A package named in a dependency file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// The file, relative to the scanned directory.
    pub file: PathBuf,
    pub ecosystem: Ecosystem,
    /// As written in the file.
    pub package: String,
}

type Parser = fn(&str) -> std::result::Result<Vec<String>, String>;
/// Whether a file name is of a kind.
type NameTest = fn(&str) -> bool;

/// The dependency files read: a name test, the ecosystem, the parser.
const KINDS: &[(NameTest, Ecosystem, Parser)] = &[
    (|n| n == "Gemfile.lock", Ecosystem::Ruby, gemfile_lock),
    (|n| n == "go.mod", Ecosystem::Go, go_mod),
    (|n| n == "package.json", Ecosystem::Npm, package_json),
    (|n| n == "Cargo.toml", Ecosystem::Cargo, cargo_toml),
    (
        |n| n.starts_with("requirements") && n.ends_with(".txt"),
        Ecosystem::Pypi,
        requirements_txt,
    ),
    (|n| n == "pyproject.toml", Ecosystem::Pypi, pyproject_toml),
    (|n| n == "mix.lock", Ecosystem::Hex, mix_lock),
    (|n| n == "pom.xml", Ecosystem::Maven, pom_xml),
];

/// Directories not looked into: installed packages, build output, version control.
const SKIP: &[&str] = &[
    "node_modules",
    "vendor",
    "target",
    "_build",
    "deps",
    "build",
    "dist",
    ".venv",
    "venv",
    ".git",
    ".hg",
    "__pycache__",
];

/// The largest dependency file read (a lock file of a big monorepo is a few MiB); a FIFO, a
/// device or a symlink in its place is refused, not read.
const MAX_FILE: u64 = 32 << 20;

/// How deep below `dir` dependency files are looked for (a monorepo's services).
const DEPTH: usize = 3;

/// Every package named in `dir`'s dependency files (and its subdirectories' down to
/// [`DEPTH`]). Returns the files read, and the packages. A file that cannot be read or
/// parsed is an error naming it.
pub fn scan(dir: &Path) -> Result<(Vec<PathBuf>, Vec<Found>)> {
    if !dir.is_dir() {
        bail!("{}: no such directory", dir.display());
    }
    let mut files = vec![];
    walk(dir, 0, &mut files)?;
    files.sort();
    let mut found = BTreeSet::new();
    for (path, eco, parse) in &files {
        let bytes = crate::safe_fs::read_regular_capped(path, MAX_FILE)
            .with_context(|| format!("{}: cannot read the dependency file", path.display()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8 text", path.display()))?;
        let rel = path.strip_prefix(dir).unwrap_or(path).to_path_buf();
        for package in parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))? {
            found.insert(Found {
                file: rel.clone(),
                ecosystem: *eco,
                package,
            });
        }
    }
    Ok((
        files
            .into_iter()
            .map(|(p, _, _)| p.strip_prefix(dir).unwrap_or(&p).to_path_buf())
            .collect(),
        found.into_iter().collect(),
    ))
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, Ecosystem, Parser)>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("{}: cannot list", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let kind = e
            .file_type()
            .with_context(|| format!("{}: cannot stat", e.path().display()))?;
        if kind.is_dir() {
            if depth < DEPTH && !SKIP.contains(&name.as_str()) && !name.starts_with('.') {
                walk(&e.path(), depth + 1, out)?;
            }
        } else if let Some((_, eco, parse)) = KINDS.iter().find(|(test, _, _)| test(&name)) {
            out.push((e.path(), *eco, *parse));
        }
    }
    Ok(())
}

/// Gemfile.lock: `    name (version)` under `specs:`, `  name` under `DEPENDENCIES`.
fn gemfile_lock(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = vec![];
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            section = line.trim();
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let name = line.trim().split([' ', '!']).next().unwrap_or("");
        let gem = match section {
            "DEPENDENCIES" => indent == 2,
            "GEM" | "PATH" | "GIT" => indent == 4,
            _ => false,
        };
        if gem && !name.is_empty() {
            out.push(name.to_string());
        }
    }
    if out.is_empty() && !text.contains("DEPENDENCIES") && !text.contains("specs:") {
        return Err("not a Gemfile.lock (no specs: and no DEPENDENCIES)".into());
    }
    Ok(out)
}

/// go.mod: `require path version`, and the lines of `require ( ... )` blocks.
fn go_mod(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = vec![];
    let mut in_block = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if in_block {
            if line == ")" {
                in_block = false;
            } else if let Some(path) = line.split_whitespace().next() {
                out.push(path.to_string());
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("require") {
            let rest = rest.trim();
            if rest == "(" {
                in_block = true;
            } else if let Some(path) = rest.split_whitespace().next() {
                out.push(path.to_string());
            } else {
                return Err(format!("line {}: `require` without a module", i + 1));
            }
        }
    }
    if in_block {
        return Err("a `require (` block is not closed".into());
    }
    Ok(out)
}

/// package.json: the keys of the dependency objects.
fn package_json(text: &str) -> std::result::Result<Vec<String>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "line {}, column {}: not valid JSON: {e}",
            e.line(),
            e.column()
        )
    })?;
    let mut out = vec![];
    for key in [
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
    ] {
        if let Some(obj) = v.get(key).and_then(|d| d.as_object()) {
            out.extend(obj.keys().cloned());
        }
    }
    Ok(out)
}

fn toml_doc(text: &str) -> std::result::Result<toml_edit::DocumentMut, String> {
    text.parse::<toml_edit::DocumentMut>()
        .map_err(|e| format!("not valid TOML: {}", e.to_string().trim()))
}

/// A dependencies table's crate names (a renamed one by its `package`).
fn crates_of(t: &dyn toml_edit::TableLike, out: &mut Vec<String>) {
    for (name, item) in t.iter() {
        let real = item
            .as_table_like()
            .and_then(|d| d.get("package"))
            .and_then(|p| p.as_str())
            .unwrap_or(name);
        out.push(real.to_string());
    }
}

/// Cargo.toml: `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`,
/// `[workspace.dependencies]` and `[target.*.dependencies]` (and their `-` spellings).
fn cargo_toml(text: &str) -> std::result::Result<Vec<String>, String> {
    let doc = toml_doc(text)?;
    let mut out = vec![];
    let tables = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut look = |t: &dyn toml_edit::TableLike| {
        for k in tables {
            if let Some(d) = t.get(k).and_then(|d| d.as_table_like()) {
                crates_of(d, &mut out);
            }
        }
    };
    look(doc.as_table());
    if let Some(ws) = doc.get("workspace").and_then(|w| w.as_table_like()) {
        look(ws);
    }
    if let Some(targets) = doc.get("target").and_then(|t| t.as_table_like()) {
        for (_, t) in targets.iter() {
            if let Some(t) = t.as_table_like() {
                look(t);
            }
        }
    }
    Ok(out)
}

/// A PEP 508 requirement's name: what comes before a version, extra, marker or URL.
fn requirement_name(req: &str) -> Option<String> {
    let name: String = req
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    (!name.is_empty()).then_some(name)
}

/// requirements*.txt: one requirement a line; comments, options (`-r`, `-e`, `--hash`)
/// and URLs skipped.
fn requirements_txt(text: &str) -> std::result::Result<Vec<String>, String> {
    Ok(text
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('-'))
        .filter(|l| !l.contains("://"))
        .filter_map(requirement_name)
        .collect())
}

/// pyproject.toml: `[project] dependencies` and `optional-dependencies`,
/// `[dependency-groups]`, Poetry's `[tool.poetry.*dependencies]` and groups.
fn pyproject_toml(text: &str) -> std::result::Result<Vec<String>, String> {
    let doc = toml_doc(text)?;
    let mut out = vec![];
    let strings = |a: &toml_edit::Item, out: &mut Vec<String>| {
        if let Some(arr) = a.as_array() {
            out.extend(
                arr.iter()
                    .filter_map(|v| v.as_str())
                    .filter_map(requirement_name),
            );
        }
    };
    if let Some(p) = doc.get("project") {
        if let Some(d) = p.get("dependencies") {
            strings(d, &mut out);
        }
        if let Some(opt) = p
            .get("optional-dependencies")
            .and_then(|o| o.as_table_like())
        {
            for (_, v) in opt.iter() {
                strings(v, &mut out);
            }
        }
    }
    if let Some(groups) = doc.get("dependency-groups").and_then(|o| o.as_table_like()) {
        for (_, v) in groups.iter() {
            strings(v, &mut out);
        }
    }
    if let Some(poetry) = doc
        .get("tool")
        .and_then(|t| t.get("poetry"))
        .and_then(|p| p.as_table_like())
    {
        for k in ["dependencies", "dev-dependencies"] {
            if let Some(d) = poetry.get(k).and_then(|d| d.as_table_like()) {
                out.extend(
                    d.iter()
                        .map(|(n, _)| n.to_string())
                        .filter(|n| n != "python"),
                );
            }
        }
        if let Some(groups) = poetry.get("group").and_then(|g| g.as_table_like()) {
            for (_, g) in groups.iter() {
                if let Some(d) = g.get("dependencies").and_then(|d| d.as_table_like()) {
                    out.extend(d.iter().map(|(n, _)| n.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// mix.lock: `"name": {:hex, :package, "version", ...}`.
fn mix_lock(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = vec![];
    for line in text.lines() {
        if let Some(rest) = line.split_once("{:hex, :").map(|(_, r)| r) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    if out.is_empty() && !text.trim_start().starts_with("%{") {
        return Err("not a mix.lock (it does not start with %{)".into());
    }
    Ok(out)
}

/// The text of the first `<tag>...</tag>` in `block`.
fn tag<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = block.find(&open)? + open.len();
    let end = block[start..].find(&format!("</{name}>"))? + start;
    Some(block[start..end].trim())
}

/// pom.xml: `groupId:artifactId` of each `<dependency>` and `<plugin>` (comments removed).
fn pom_xml(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut clean = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("<!--") {
        clean.push_str(&rest[..i]);
        rest = match rest[i..].find("-->") {
            Some(j) => &rest[i + j + 3..],
            None => return Err("a comment (<!--) is not closed".into()),
        };
    }
    clean.push_str(rest);
    if !clean.contains("<project") {
        return Err("not a Maven POM (no <project> element)".into());
    }
    let mut out = vec![];
    for el in ["dependency", "plugin"] {
        let open = format!("<{el}>");
        let close = format!("</{el}>");
        let mut s = clean.as_str();
        while let Some(i) = s.find(&open) {
            let body = &s[i + open.len()..];
            let Some(j) = body.find(&close) else {
                return Err(format!("a <{el}> element is not closed"));
            };
            let block = &body[..j];
            // A plugin's groupId defaults to org.apache.maven.plugins.
            let group =
                tag(block, "groupId").or((el == "plugin").then_some("org.apache.maven.plugins"));
            if let (Some(g), Some(a)) = (group, tag(block, "artifactId")) {
                out.push(format!("{g}:{a}"));
            }
            s = &body[j + close.len()..];
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_kind_names_its_packages() {
        let gems = gemfile_lock(
            "GEM\n  remote: https://example.invalid/\n  specs:\n    activerecord (7.1.3)\n      activemodel (= 7.1.3)\n    good_job (4.5.0)\n\nPLATFORMS\n  x86_64-linux\n\nDEPENDENCIES\n  rails (~> 7.1)\n  good_job!\n",
        )
        .unwrap();
        assert_eq!(gems, vec!["activerecord", "good_job", "rails", "good_job"]);
        assert!(gemfile_lock("hello\n").is_err());
        let go = go_mod(
            "module example.com/svc\n\ngo 1.22\n\nrequire github.com/lib/pq v1.10.9\nrequire (\n\tgithub.com/golang-migrate/migrate/v4 v4.19.1 // indirect\n\tgolang.org/x/sync v0.7.0\n)\n",
        )
        .unwrap();
        assert_eq!(
            go,
            vec![
                "github.com/lib/pq",
                "github.com/golang-migrate/migrate/v4",
                "golang.org/x/sync"
            ]
        );
        assert!(go_mod("require (\n  a v1\n").is_err());
        let npm = package_json(
            r#"{"dependencies": {"@prisma/client": "^5"}, "devDependencies": {"prisma": "^5"}}"#,
        )
        .unwrap();
        assert_eq!(npm, vec!["@prisma/client", "prisma"]);
        let e = package_json("{\n  \"dependencies\": {,}\n}").unwrap_err();
        assert!(e.starts_with("line 2, column"), "{e}");
        let cargo = cargo_toml(
            "[package]\nname = \"x\"\n[dependencies]\nserde = \"1\"\ndb = { package = \"sqlx\", version = \"0.8\" }\n[dev-dependencies.tokio]\nversion = \"1\"\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n",
        )
        .unwrap();
        assert_eq!(cargo, vec!["serde", "sqlx", "tokio", "libc"]);
        assert!(
            cargo_toml("[dependencies\n")
                .unwrap_err()
                .contains("not valid TOML")
        );
        let req = requirements_txt(
            "# pinned\nDjango==5.0 # web\n-r base.txt\nalembic[tz]>=1.13 ; python_version > '3.8'\nhttps://example.invalid/x.whl\nSQLAlchemy\n",
        )
        .unwrap();
        assert_eq!(req, vec!["Django", "alembic", "SQLAlchemy"]);
        let py = pyproject_toml(
            "[project]\ndependencies = [\"apache-airflow>=2.9\"]\n[project.optional-dependencies]\npg = [\"psycopg[binary]\"]\n[tool.poetry.dependencies]\npython = \"^3.11\"\nyoyo-migrations = \"*\"\n",
        )
        .unwrap();
        assert_eq!(py, vec!["apache-airflow", "psycopg", "yoyo-migrations"]);
        let hex = mix_lock(
            "%{\n  \"ecto_sql\": {:hex, :ecto_sql, \"3.12.1\", \"hash\", [:mix], [], \"hexpm\", \"h\"},\n  \"oban\": {:hex, :oban, \"2.18.0\", \"h\"},\n}\n",
        )
        .unwrap();
        assert_eq!(hex, vec!["ecto_sql", "oban"]);
        let pom = pom_xml(
            "<project><dependencies><!-- <dependency><groupId>x</groupId><artifactId>gone</artifactId></dependency> -->\n<dependency>\n<groupId>org.flywaydb</groupId>\n<artifactId>flyway-core</artifactId>\n</dependency></dependencies><build><plugins><plugin><artifactId>maven-surefire-plugin</artifactId></plugin></plugins></build></project>",
        )
        .unwrap();
        assert_eq!(
            pom,
            vec![
                "org.flywaydb:flyway-core",
                "org.apache.maven.plugins:maven-surefire-plugin"
            ]
        );
        assert!(pom_xml("<project><!-- open").is_err());
    }

    #[test]
    fn names_compare_as_their_ecosystem_says() {
        assert_eq!(
            Ecosystem::Pypi.normalise("Apache_Airflow"),
            "apache-airflow"
        );
        assert_eq!(
            Ecosystem::Pypi.normalise("zope.interface"),
            "zope-interface"
        );
        assert_eq!(Ecosystem::Pypi.normalise("a--_b"), "a-b");
        assert_eq!(Ecosystem::Cargo.normalise("sqlx_core"), "sqlx-core");
        assert_eq!(Ecosystem::Npm.normalise("@prisma/client"), "@prisma/client");
    }
}
