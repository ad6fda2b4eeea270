//! TLS for every connection the harness makes (postgres-native-tls, OpenSSL underneath).
//!
//! A deployment's DSNs register their `sslmode` and `sslrootcert` here, by host, port and
//! user ([`register`]), when its endpoints are read; every connect goes through
//! [`prepare`], which gives the configuration its registered `sslmode` and the connector that
//! verifies as that mode says (libpq's meanings: `require` encrypts without verifying the
//! certificate, `verify-ca` checks it against `sslrootcert` (else the system's roots),
//! `verify-full` the host name too; `allow` is treated as `prefer`). The servers the harness
//! starts itself are not registered: their connections stay plaintext on loopback or a Unix
//! socket (`prefer` there becomes `disable`, so no TLS request costs a round trip).
//!
//! A cancel request (`CancelToken::cancel_query`) carries no host name to look up: it uses
//! the connection's `sslmode` with the connector of [`cancel`], which encrypts without
//! verifying.
//!
//! May import `topology` (a deployment's TLS parameters); the launcher, the pooler's console,
//! the clients and the observer connect through it.

use crate::topology::{SslMode, TlsParams};
use anyhow::{Context, Result};
use postgres_native_tls::MakeTlsConnector;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use tokio_postgres::Config;
use tokio_postgres::config::Host;

type Key = (String, u16, String);

fn table() -> &'static Mutex<BTreeMap<Key, (TlsParams, MakeTlsConnector)>> {
    static T: OnceLock<Mutex<BTreeMap<Key, (TlsParams, MakeTlsConnector)>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn keys(config: &Config) -> Vec<Key> {
    let user = config.get_user().unwrap_or_default().to_string();
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(s) => s.clone(),
                Host::Unix(p) => p.display().to_string(),
            };
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            (host, port, user.clone())
        })
        .collect()
}

/// The connector for `params`.
pub fn connector(params: &TlsParams) -> Result<MakeTlsConnector> {
    let mut b = native_tls::TlsConnector::builder();
    match params.mode {
        SslMode::VerifyFull => {}
        SslMode::VerifyCa => {
            b.danger_accept_invalid_hostnames(true);
        }
        _ => {
            b.danger_accept_invalid_certs(true);
            b.danger_accept_invalid_hostnames(true);
        }
    }
    if let Some(path) = &params.root_cert {
        let pem = std::fs::read(path).with_context(|| format!("sslrootcert {path}: reading"))?;
        let text = String::from_utf8_lossy(&pem);
        let mut n = 0;
        for block in text.split_inclusive("-----END CERTIFICATE-----") {
            if !block.contains("-----BEGIN CERTIFICATE-----") {
                continue;
            }
            let cert = native_tls::Certificate::from_pem(block.trim().as_bytes())
                .with_context(|| format!("sslrootcert {path}: a certificate does not parse"))?;
            b.add_root_certificate(cert);
            n += 1;
        }
        anyhow::ensure!(n > 0, "sslrootcert {path}: no PEM certificate in it");
        b.disable_built_in_roots(true);
    }
    Ok(MakeTlsConnector::new(
        b.build().context("building the TLS connector")?,
    ))
}

/// Register a deployment DSN's TLS parameters (for every host of `config`).
pub fn register(config: &Config, params: &TlsParams) -> Result<()> {
    let c = connector(params)?;
    let mut t = table().lock().expect("tls table");
    for k in keys(config) {
        t.insert(k, (params.clone(), c.clone()));
    }
    Ok(())
}

/// The connector of a cancel request (encrypts when the connection's `sslmode` asks,
/// without verifying).
pub fn cancel() -> MakeTlsConnector {
    static C: OnceLock<MakeTlsConnector> = OnceLock::new();
    C.get_or_init(|| connector(&TlsParams::default()).expect("a TLS connector without roots"))
        .clone()
}

/// `config` with the `sslmode` registered for it, and the connector to connect with.
pub fn prepare(config: &Config) -> (Config, MakeTlsConnector) {
    let t = table().lock().expect("tls table");
    let mut c = config.clone();
    if let Some((params, conn)) = keys(config).iter().find_map(|k| t.get(k)) {
        c.ssl_mode(match params.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        return (c, conn.clone());
    }
    drop(t);
    if c.get_ssl_mode() == tokio_postgres::config::SslMode::Prefer {
        c.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    (c, cancel())
}

/// Connect `config` (TLS as registered, [`prepare`]) with `bound` on the whole startup; the
/// connection's task is spawned. A timeout names where it connected ([`target`]).
pub async fn connect_within(
    config: &Config,
    bound: std::time::Duration,
) -> anyhow::Result<tokio_postgres::Client> {
    let (config, tls) = prepare(config);
    let (client, conn) = tokio::time::timeout(bound, config.connect(tls))
        .await
        .map_err(|_| {
            anyhow::anyhow!("connect to {} timed out after {bound:?}", target(&config))
        })??;
    tokio::spawn(conn);
    Ok(client)
}

/// Where `config` connects, for an error: `user@host:port/dbname` (each host and port it
/// names; a Unix socket as its directory). No password.
pub fn target(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(s) => format!("{s}:{port}"),
                Host::Unix(p) => format!("{}:{port}", p.display()),
            }
        })
        .collect();
    format!(
        "{}@{}/{}",
        config.get_user().unwrap_or("?"),
        hosts.join(","),
        config.get_dbname().unwrap_or("?")
    )
}

/// Whether every host of `config` is this machine (loopback, `localhost`, a Unix socket).
pub fn loopback(config: &Config) -> bool {
    config.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(s) => {
            s == "localhost"
                || s.trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_names_user_hosts_ports_and_database_never_the_password() {
        let mut c = Config::new();
        c.host("127.0.0.1")
            .port(6432)
            .user("chaos")
            .password("s3cret")
            .dbname("app");
        assert_eq!(target(&c), "chaos@127.0.0.1:6432/app");
        let mut u = Config::new();
        u.host_path("/run/pg").host("db.invalid").port(1).port(2);
        let t = target(&u);
        assert_eq!(t, "?@/run/pg:1,db.invalid:2/?");
        assert!(!target(&c).contains("s3cret"));
    }

    #[test]
    fn a_registered_dsn_gets_its_sslmode_and_the_others_stay_plaintext() {
        let mut c = Config::new();
        c.host("tls-test.invalid").port(6543).user("u_tls_test");
        register(
            &c,
            &TlsParams {
                mode: SslMode::VerifyFull,
                root_cert: None,
            },
        )
        .unwrap();
        let (p, _) = prepare(&c);
        assert_eq!(p.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let mut other = c.clone();
        other.user("someone_else");
        let (p, _) = prepare(&other);
        assert_eq!(p.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        assert!(!loopback(&c));
        let mut l = Config::new();
        l.host("127.0.0.1").host("::1").host("localhost");
        assert!(loopback(&l));
    }
}
