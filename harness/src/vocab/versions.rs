//! The server versions a run declared and the ones that actually ran.

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

/// The versions that actually ran, beside the declared ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Versions {
    pub postgres: String,
    /// What the topology file says, never overwritten by what ran.
    pub postgres_declared: String,
    pub postgres_full: String,
    /// The pooler (`pgbouncer`), when there is one (histories of format 1 have only
    /// PgBouncer and leave it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooler_name: Option<String>,
    /// The pooler's version that ran.
    #[serde(alias = "pgbouncer")]
    pub pooler: Option<String>,
    #[serde(alias = "pgbouncer_declared")]
    pub pooler_declared: Option<String>,
    /// Where the pooler's binary was built from, as its cache entry records it
    /// ("source mirror /srv/mirror/pgbouncer-1.25.2.tar.gz"): provenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooler_built_from: Option<String>,
    /// The SHA-256 of the source tarball the pooler was built from, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooler_tarball_sha256: Option<String>,
    /// One line per server whose version differs from the declared one.
    pub version_drift: Vec<String>,
}

impl Versions {
    /// The pooler's name as drift lines and reports give it.
    pub fn pooler_label(&self) -> &str {
        self.pooler_name.as_deref().unwrap_or("pgbouncer")
    }

    /// Record what ran; every difference from the declared versions becomes a drift line.
    pub fn ran(&mut self, postgres_full: &str, pooler: Option<&str>) -> Result<()> {
        self.postgres = parse_pg_version(postgres_full)
            .ok_or_else(|| anyhow!("cannot read the PostgreSQL version from {postgres_full:?}"))?;
        self.postgres_full = postgres_full.to_string();
        self.version_drift
            .retain(|d| !d.starts_with("postgres declared"));
        if self.postgres != self.postgres_declared {
            self.version_drift.insert(
                0,
                format!(
                    "postgres declared {}, ran {}",
                    self.postgres_declared, self.postgres
                ),
            );
        }
        self.pooler = pooler.map(str::to_string);
        let label = self.pooler_label().to_string();
        match (pooler, &self.pooler_declared) {
            (Some(ran), Some(declared)) if ran != declared => {
                // Provisioning may already have said why (e.g. the nearest version built).
                if !self.version_drift.iter().any(|d| d.starts_with(&label)) {
                    self.version_drift
                        .push(format!("{label} declared {declared}, ran {ran}"));
                }
            }
            _ => self.version_drift.retain(|d| !d.starts_with(&label)),
        }
        Ok(())
    }
}

/// "PostgreSQL 18.6 on x86_64-..." -> "18.6"
pub fn parse_pg_version(full: &str) -> Option<String> {
    let v = full
        .strip_prefix("PostgreSQL ")?
        .split_whitespace()
        .next()?;
    Some(v.trim_end_matches(',').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_version_parsing() {
        assert_eq!(
            parse_pg_version("PostgreSQL 18.6 on x86_64-pc-linux-gnu, compiled by gcc").as_deref(),
            Some("18.6")
        );
        assert_eq!(
            parse_pg_version("PostgreSQL 19beta1, compiled").as_deref(),
            Some("19beta1")
        );
        assert_eq!(parse_pg_version("Postgres 18"), None);
    }

    #[test]
    fn drift_names_every_server_that_differs_and_keeps_the_declared_version() {
        let mut v = Versions {
            postgres_declared: "18.6".into(),
            pooler_declared: Some("1.25.2".into()),
            ..Default::default()
        };
        v.ran(
            "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64",
            Some("1.24.1"),
        )
        .unwrap();
        assert_eq!(v.postgres, "15.20");
        assert_eq!(
            v.postgres_declared, "18.6",
            "declared stays what the file says"
        );
        assert_eq!(
            v.version_drift,
            [
                "postgres declared 18.6, ran 15.20",
                "pgbouncer declared 1.25.2, ran 1.24.1"
            ]
        );
        // Running again (a restart) does not repeat the lines.
        v.ran("PostgreSQL 15.20 on x86_64", Some("1.24.1")).unwrap();
        assert_eq!(v.version_drift.len(), 2, "{:?}", v.version_drift);
        v.ran("PostgreSQL 18.6 on x86_64", Some("1.25.2")).unwrap();
        assert!(v.version_drift.is_empty(), "{:?}", v.version_drift);
        // Provisioning's own explanation of a PgBouncer drift is kept, not repeated.
        let mut p = Versions {
            postgres_declared: "18.6".into(),
            pooler_declared: Some("1.25.2".into()),
            version_drift: vec!["pgbouncer declared 1.25.2, obtained 1.24.1 (nearest)".into()],
            ..Default::default()
        };
        p.ran("PostgreSQL 18.6 on x86_64", Some("1.24.1")).unwrap();
        assert_eq!(
            p.version_drift,
            ["pgbouncer declared 1.25.2, obtained 1.24.1 (nearest)"]
        );
        assert!(v.ran("Postgres", None).is_err());
    }
}
