//! Declared and found versions: their syntax, their comparison, the nearest candidate, and
//! the strict-versions rule (`--strict-versions`, `PGCHAOS_STRICT_VERSIONS`): a binary whose
//! version differs from the declared one is refused under it, else taken with its drift
//! recorded and shown.

use super::{Options, PoolerBinary, notice};
use anyhow::{Result, bail};

/// `PGCHAOS_STRICT_VERSIONS` set to anything but "" or "0" (the test suite sets it: a
/// version other than the declared one fails instead of drifting).
pub(crate) fn strict_from_env(get: impl Fn(&str) -> Option<String>) -> bool {
    get("PGCHAOS_STRICT_VERSIONS").is_some_and(|v| v.trim() != "0")
}

pub(crate) fn check_version_syntax(v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        bail!("version {v:?} is not of the form 18.6 or 1.25.2");
    }
    Ok(())
}

/// Leading numeric components: "1.25.2" -> [1, 25, 2]; "1.25rc1" -> [1, 25].
pub(crate) fn version_key(v: &str) -> Vec<u64> {
    let mut key = Vec::new();
    for part in v.split('.') {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse() {
            Ok(n) => key.push(n),
            Err(_) => break,
        }
        if digits.len() != part.len() {
            break;
        }
    }
    while key.len() > 1 && key.last() == Some(&0) {
        key.pop();
    }
    key
}

/// "18.6" == "18.6.0"; "1.24.1" != "1.25.2".
/// A pooler's binary (`found`, its drift not yet judged) whose version may differ from the
/// declared one: taken as it is when they agree; otherwise refused with `strict`'s message
/// under `--strict-versions`, or taken with `drift` recorded and shown loudly (then the
/// binary's path and `notes`).
pub(crate) fn accept_pooler(
    opts: &Options,
    mut found: PoolerBinary,
    strict: impl FnOnce() -> String,
    drift: impl FnOnce() -> String,
    notes: &[String],
) -> Result<PoolerBinary> {
    if !same_version(&found.version, &found.declared) {
        if opts.strict_versions {
            bail!("{}", strict());
        }
        let text = drift();
        let binary = format!("binary: {}", found.path.display());
        let mut lines: Vec<&str> = vec![&text, &binary];
        lines.extend(notes.iter().map(String::as_str));
        notice(&lines);
        found.drift = Some(text);
    }
    Ok(found)
}

pub(crate) fn same_version(a: &str, b: &str) -> bool {
    a == b || version_key(a) == version_key(b)
}

/// The candidate nearest to `declared`: smallest difference in the major, then
/// minor, then patch number; on a tie the newer.
pub(crate) fn nearest<'a>(declared: &str, candidates: &'a [String]) -> Option<&'a String> {
    let d = version_key(declared);
    let distance = |c: &str| {
        let k = version_key(c);
        (0..d.len().max(k.len()))
            .map(|i| {
                let (a, b) = (
                    d.get(i).copied().unwrap_or(0),
                    k.get(i).copied().unwrap_or(0),
                );
                a.abs_diff(b)
            })
            .collect::<Vec<_>>()
    };
    candidates
        .iter()
        .filter(|c| !version_key(c).is_empty())
        .min_by(|a, b| {
            distance(a)
                .cmp(&distance(b))
                .then_with(|| version_key(b).cmp(&version_key(a)))
        })
}
