//! TLS to a deployment (issue 37): the test makes a self-signed certificate with the
//! `openssl` CLI, starts transaction-mode natively with PostgreSQL's `ssl = on` and
//! PgBouncer's `client_tls_sslmode = require` on it, and then: a chaos run whose DSNs say
//! `sslmode=require` runs against them (every backend of its clients encrypted, as
//! `pg_stat_ssl` shows, and PgBouncer refuses plaintext); `verify-full` fails against the
//! self-signed certificate without `sslrootcert` and connects with it; `sslmode=prefer` to a
//! host that is not loopback is refused before any connection.

mod common;

use common::{text, tmp};
use pgchaos::launch::{CLIENT_ROLE, DB, SUPERUSER, connect};
use pgchaos::topology::ExternalSpec;
use std::process::Command;

const OBSERVER: &str = "pgchaos_observer";

/// The user the servers run as: this one, or `pgchaos` when the test runs as root.
fn server_owner() -> Option<(u32, u32)> {
    // SAFETY: plain getters.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |flag: &str| -> u32 {
        let o = Command::new("id").args([flag, "pgchaos"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    Some((id("-u"), id("-g")))
}

#[tokio::test(flavor = "current_thread")]
async fn sslmode_is_honoured_against_tls_postgres_and_pgbouncer() {
    let dir = tmp("external-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let o = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl CLI");
    assert!(o.status.success(), "{}", text(&o));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    if let Some((uid, gid)) = server_owner() {
        for f in [&cert, &key] {
            std::os::unix::fs::chown(f, Some(uid), Some(gid)).unwrap();
        }
    }
    // transaction-mode with TLS on both servers.
    let base = std::fs::read_to_string(common::topology_path("transaction-mode")).unwrap();
    let (c, k) = (cert.display(), key.display());
    let topo_text = base
        .replace(
            "  settings:\n    max_connections: 40\n",
            &format!(
                "  settings:\n    max_connections: 40\n    ssl: \"on\"\n    ssl_cert_file: \"{c}\"\n    ssl_key_file: \"{k}\"\n"
            ),
        )
        .replace(
            "  max_client_conn: 50\n",
            &format!(
                "  max_client_conn: 50\n  settings:\n    client_tls_sslmode: require\n    client_tls_cert_file: \"{c}\"\n    client_tls_key_file: \"{k}\"\n"
            ),
        );
    assert_ne!(topo_text, base);
    let served = dir.join("transaction-mode.yaml");
    std::fs::write(&served, &topo_text).unwrap();
    let t = pgchaos::topology::Topology::load(&served, &pgchaos::catalog())
        .unwrap_or_else(|e| panic!("{e}"));
    let cluster = pgchaos::launch::launch(&t, Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (pg, pooler) = (cluster.pg_port, cluster.pooler_port.unwrap());
    let su = connect(&cluster.socket_config(SUPERUSER)).await.unwrap();
    su.batch_execute(&format!(
        "CREATE ROLE {OBSERVER} LOGIN PASSWORD 'obs' IN ROLE pg_read_all_stats, pg_signal_backend; \
         ALTER ROLE {CLIENT_ROLE} RESET application_name"
    ))
    .await
    .unwrap();
    let env = |n: &str| match n {
        "T_CLIENT_PW" => cluster.password(CLIENT_ROLE).map(str::to_string),
        "T_OBSERVER_PW" => Some("obs".to_string()),
        "T_ADMIN_PW" => cluster.password(SUPERUSER).map(str::to_string),
        _ => None,
    };
    // A DSN the harness connects with: its TLS registered as a deployment's would be.
    let open = async |dsn: &str| {
        let (c, tls) = ExternalSpec::resolve_with(dsn, "test", env).unwrap();
        pgchaos::tls::register(&c, &tls).unwrap();
        connect(&c).await
    };

    // PgBouncer refuses plaintext: what follows is encrypted because it has to be.
    let plain = open(&format!(
        "postgresql://{CLIENT_ROLE}:${{T_CLIENT_PW}}@127.0.0.1:{pooler}/{DB}?sslmode=disable"
    ))
    .await;
    assert!(plain.is_err(), "PgBouncer took a plaintext client");
    let through = open(&format!(
        "postgresql://{CLIENT_ROLE}:${{T_CLIENT_PW}}@127.0.0.1:{pooler}/{DB}?sslmode=require"
    ))
    .await
    .unwrap_or_else(|e| panic!("sslmode=require through PgBouncer: {e:#}"));
    common::try_rows(&through, "SELECT 1").await.unwrap();
    let direct = open(&format!(
        "host=127.0.0.1 port={pg} user={OBSERVER} dbname={DB} password=${{T_OBSERVER_PW}} sslmode=require"
    ))
    .await
    .unwrap();
    let ssl = common::try_rows(
        &direct,
        "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .await
    .unwrap();
    assert_eq!(
        ssl[0][0].as_deref(),
        Some("true"),
        "PostgreSQL: not encrypted"
    );

    // verify-full: the self-signed certificate is not trusted without its sslrootcert.
    let untrusted = open(&format!(
        "host=localhost port={pg} user={OBSERVER} dbname={DB} password=${{T_OBSERVER_PW}} sslmode=verify-full"
    ))
    .await;
    assert!(
        untrusted.is_err(),
        "verify-full trusted a self-signed certificate"
    );
    let trusted = open(&format!(
        "host=localhost port={pg} user={OBSERVER} dbname={DB} password=${{T_OBSERVER_PW}} sslmode=verify-full sslrootcert={}",
        cert.display()
    ))
    .await;
    assert!(
        trusted.is_ok(),
        "verify-full with sslrootcert: {:?}",
        trusted.err()
    );

    // The server PgBouncer opened for `through` is a backend of the clients' role that the
    // run would not own (the launch refuses it): end it, as a team would before a run.
    drop(through);
    su.batch_execute(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'"
    ))
    .await
    .unwrap();
    let t0 = std::time::Instant::now();
    while !common::try_rows(
        &su,
        &format!("SELECT 1 FROM pg_stat_activity WHERE usename = '{CLIENT_ROLE}'"),
    )
    .await
    .unwrap()
    .is_empty()
    {
        assert!(
            t0.elapsed().as_secs() < 5,
            "the clients' backends did not end"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A chaos run against the TLS deployment with sslmode=require on every DSN.
    let ext = dir.join("ext");
    std::fs::create_dir_all(&ext).unwrap();
    let ext_topo = ext.join("transaction-mode.yaml");
    let dsns = format!(
        "launcher: external\nexternal:\n  pooler: postgresql://{CLIENT_ROLE}:${{T_CLIENT_PW}}@127.0.0.1:{pooler}/{DB}?sslmode=require\n  postgres: postgresql://{OBSERVER}:${{T_OBSERVER_PW}}@127.0.0.1:{pg}/{DB}?sslmode=require\n  admin: postgresql://{SUPERUSER}:${{T_ADMIN_PW}}@127.0.0.1:{pooler}/pgbouncer?sslmode=require\n"
    );
    std::fs::write(&ext_topo, format!("{dsns}{topo_text}")).unwrap();
    let run = |topo: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_pgchaos"))
            .args([
                "chaos",
                topo.to_str().unwrap(),
                "--cases",
                "8",
                "--seed",
                "1",
            ])
            .args(["--max-shrink-runs", "2", "--out"])
            .arg(ext.join("out"))
            .current_dir(common::root())
            .env("PGCHAOS_QUIET", "1")
            .env("T_CLIENT_PW", cluster.password(CLIENT_ROLE).unwrap())
            .env("T_OBSERVER_PW", "obs")
            .env("T_ADMIN_PW", cluster.password(SUPERUSER).unwrap())
            .output()
            .unwrap()
    };
    let o = run(&ext_topo);
    // PgBouncer takes only TLS clients, and every other DSN says `require`: the run's
    // connections were all encrypted. What its exit says: 0 when every verdict is the
    // topology's `expect`, 1 when one is not; 8 cases may not reach each violation the
    // topology expects over 256, but the run itself must be whole and sound.
    let (_, results) = common::latest(&ext.join("out"), "transaction-mode");
    assert_eq!(results["launcher"], "external", "{results}");
    assert_eq!(results["cases"], 8, "every case ran");
    assert!(
        results["judged_cases"].as_u64().unwrap() >= 4,
        "at least half the cases judged: {}",
        results["judged_cases"]
    );
    let passed = results["passed"].as_bool().expect("results.json: passed");
    assert_eq!(
        o.status.code(),
        Some(if passed { 0 } else { 1 }),
        "the exit says whether the verdicts met `expect` (passed: {passed})\n{}",
        text(&o)
    );
    for i in results["invariants"].as_array().unwrap() {
        let (name, verdict, expected) = (
            i["name"].as_str().unwrap(),
            i["verdict"].as_str().unwrap(),
            i["expected"].as_str().unwrap(),
        );
        // PostgreSQL through TLS behaved as PostgreSQL: no pg.* violation, none unjudged.
        if name.starts_with("pg.") {
            assert_eq!(verdict, "holds", "{name}: {i}");
        }
        // A miss is only a violation 8 cases did not reach, never one where none was
        // expected: the TLS run judged what a plaintext run judges.
        let meets = verdict == expected || (expected == "either" && verdict != "unknown");
        if !meets {
            assert_eq!(
                (verdict, expected),
                ("holds", "violated"),
                "{name}: {i}\n{}",
                text(&o)
            );
        }
    }

    // sslmode=prefer to a host that is not this machine: refused before any connection.
    let remote = ext.join("remote.yaml");
    std::fs::write(
        &remote,
        format!(
            "{}{topo_text}",
            dsns.replace("127.0.0.1:", "db.staging.invalid:")
                .replace("?sslmode=require", "")
        ),
    )
    .unwrap();
    let o = run(&remote);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("reaches a host that is not this machine with sslmode=prefer"),
        "{}",
        text(&o)
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
