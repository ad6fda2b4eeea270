//! The TLS parameters of a DSN, as libpq spells them: `sslmode` (`disable`, `allow`,
//! `prefer`, `require`, `verify-ca`, `verify-full`) and `sslrootcert`. tokio-postgres 0.7
//! knows only `disable`, `prefer` and `require`, and no `sslrootcert`: [`split_tls`] takes
//! both out of the DSN's text (URL or key=value form) before it is parsed, and the launcher
//! sets up the TLS connector from them (`tls.rs`).

/// libpq's `sslmode`, in its order of strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether every connection is encrypted (`require` and stronger).
    pub fn encrypts(self) -> bool {
        self >= SslMode::Require
    }
}

/// A DSN's TLS parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TlsParams {
    /// libpq's default is `prefer`.
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of the certificates to trust (else the system's).
    pub root_cert: Option<String>,
}

impl Default for TlsParams {
    fn default() -> Self {
        TlsParams {
            mode: SslMode::Prefer,
            root_cert: None,
        }
    }
}

/// `dsn` without its `sslmode` and `sslrootcert`, and those two read.
pub fn split_tls(dsn: &str, key: &str) -> Result<(String, TlsParams), String> {
    let mut tls = TlsParams::default();
    let mut take = |k: &str, v: String| -> Result<bool, String> {
        match k {
            "sslmode" => {
                tls.mode = SslMode::parse(&v).ok_or_else(|| {
                    format!(
                        "`{key}`: sslmode={v:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                    )
                })?;
                Ok(true)
            }
            "sslrootcert" => {
                tls.root_cert = Some(v);
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let Some((base, query)) = dsn.split_once('?') else {
            return Ok((dsn.to_string(), tls));
        };
        let mut kept = vec![];
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(k, percent_decode(v))? {
                kept.push(pair);
            }
        }
        match kept.is_empty() {
            true => base.to_string(),
            false => format!("{base}?{}", kept.join("&")),
        }
    } else {
        let mut out = String::new();
        for (span, k, v) in key_values(dsn).map_err(|e| format!("`{key}`: {e}"))? {
            if !take(&k, v)? {
                out.push_str(&dsn[span.0..span.1]);
                out.push(' ');
            }
        }
        out.trim_end().to_string()
    };
    Ok((rest, tls))
}

/// `%XX` decoded (a URL's query value).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && b[i + 1].is_ascii_hexdigit()
            && b[i + 2].is_ascii_hexdigit()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// The pairs of a key=value DSN: each one's span in the text, key and unquoted value
/// (libpq's rules: spaces around `=`, single quotes, backslash escapes).
/// One pair of a key=value DSN: its span in the text, key and value.
type Pair = ((usize, usize), String, String);

fn key_values(s: &str) -> Result<Vec<Pair>, String> {
    let b = s.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            return Ok(out);
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let k = s[start..i].to_string();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() || b[i] != b'=' {
            return Err(format!("`{k}` has no `=`"));
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut v = Vec::new();
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(format!("`{k}`'s quoted value is not closed")),
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < b.len() => {
                        v.push(b[i + 1]);
                        i += 2;
                    }
                    Some(c) => {
                        v.push(*c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                v.push(b[i]);
                i += 1;
            }
        }
        out.push(((start, i), k, String::from_utf8_lossy(&v).to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_come_out_of_both_forms() {
        let (rest, tls) = split_tls(
            "postgresql://u:${PW}@db:5432/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
            "k",
        )
        .unwrap();
        assert_eq!(rest, "postgresql://u:${PW}@db:5432/app?connect_timeout=3");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        let (rest, tls) = split_tls(
            "host=db user=u sslmode = 'verify-ca' sslrootcert='/a b/ca.pem' password=${PW}",
            "k",
        )
        .unwrap();
        assert_eq!(rest, "host=db user=u password=${PW}");
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some("/a b/ca.pem"));
        let (rest, tls) = split_tls("postgresql://u@db/app", "k").unwrap();
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgresql://u@db/app", SslMode::Prefer)
        );
        let bad = split_tls("host=db sslmode=maybe", "external.pooler").unwrap_err();
        assert!(
            bad.contains("`external.pooler`: sslmode=\"maybe\""),
            "{bad}"
        );
        assert!(SslMode::Require.encrypts() && !SslMode::Prefer.encrypts());
    }
}
