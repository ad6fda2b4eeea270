//! The machine's apt sources (deb822 `.sources` files and one-line `.list` files), and the
//! Debian mirror chosen from them for the packages a pooler's build needs.

use std::fs;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AptSource {
    pub(super) types: Vec<String>,
    pub(super) uris: Vec<String>,
    pub(super) suites: Vec<String>,
    pub(super) components: Vec<String>,
    /// A keyring path, or an embedded ASCII-armoured key (deb822 only).
    pub(super) signed_by: Option<String>,
    pub(super) enabled: bool,
}

pub(crate) fn machine_apt_sources() -> Vec<AptSource> {
    let mut out = Vec::new();
    if let Ok(t) = fs::read_to_string("/etc/apt/sources.list") {
        out.extend(parse_one_line_sources(&t));
    }
    let mut parts: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    parts.sort();
    for p in parts {
        let Ok(t) = fs::read_to_string(&p) else {
            continue;
        };
        match p.extension().and_then(|e| e.to_str()) {
            Some("sources") => out.extend(parse_deb822_sources(&t)),
            Some("list") => out.extend(parse_one_line_sources(&t)),
            _ => {}
        }
    }
    out
}

/// deb822 `.sources`: stanzas split by blank lines, `#` comments, continuation
/// lines (leading space; " ." is an empty line), case-insensitive field names.
pub(crate) fn parse_deb822_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();
    let flush = |fields: &mut Vec<(String, String)>, out: &mut Vec<AptSource>| {
        if fields.is_empty() {
            return;
        }
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let words = |name: &str| -> Vec<String> {
            get(name)
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        out.push(AptSource {
            types: words("Types"),
            uris: words("URIs"),
            suites: words("Suites"),
            components: words("Components"),
            signed_by: get("Signed-By")
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
            enabled: get("Enabled").is_none_or(|v| !v.trim().eq_ignore_ascii_case("no")),
        });
        fields.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut fields, &mut out);
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                let l = line.trim();
                v.push('\n');
                v.push_str(if l == "." { "" } else { l });
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    flush(&mut fields, &mut out);
    out
}

/// One-line format: `deb [opt=val ...] uri suite component...`, `#` comments.
pub(crate) fn parse_one_line_sources(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (kind, rest) = match line.split_once(char::is_whitespace) {
            Some((k, r)) => (k, r.trim_start()),
            None => continue,
        };
        if kind != "deb" && kind != "deb-src" {
            continue;
        }
        let mut signed_by = None;
        let rest = if let Some(r) = rest.strip_prefix('[') {
            let Some((opts, after)) = r.split_once(']') else {
                continue;
            };
            for o in opts.split_whitespace() {
                if let Some((k, v)) = o.split_once('=')
                    && k.eq_ignore_ascii_case("signed-by")
                {
                    signed_by = Some(v.to_string());
                }
            }
            after
        } else {
            rest
        };
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            types: vec![kind.to_string()],
            uris: vec![uri.to_string()],
            suites: vec![suite.to_string()],
            components: words.map(str::to_string).collect(),
            signed_by,
            enabled: true,
        });
    }
    out
}

/// The machine's main Debian archive: the first enabled http(s) `deb`/`deb-src`
/// source that is not a security or updates suite (preferring one with `main`).
/// Returns its first URI (no trailing slash) and its Signed-By.
pub(crate) fn choose_debian_mirror(sources: &[AptSource]) -> Option<(String, Option<String>)> {
    let usable = |s: &&AptSource| {
        s.enabled
            && s.types.iter().any(|t| t == "deb" || t == "deb-src")
            && s.uris
                .iter()
                .any(|u| u.starts_with("http://") || u.starts_with("https://"))
            && !s.suites.is_empty()
            && s.suites
                .iter()
                .all(|x| !x.contains("security") && !x.contains('/'))
    };
    let with_main = sources
        .iter()
        .filter(usable)
        .find(|s| s.components.iter().any(|c| c == "main"));
    let chosen = with_main.or_else(|| sources.iter().find(usable))?;
    let uri = chosen
        .uris
        .iter()
        .find(|u| u.starts_with("http://") || u.starts_with("https://"))?;
    Some((
        uri.trim_end_matches('/').to_string(),
        chosen.signed_by.clone(),
    ))
}
