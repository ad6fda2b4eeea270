//! By hand: what a pooler does with protocol-level named prepared statements (tokio-postgres
//! `prepare` sends a named Parse `s<n>`; executing it sends Bind/Execute of that name), the
//! transcripts of docs/session-state.md ("Named objects"). Run against a PgBouncer in
//! transaction mode with a pool of 2 (`pgchaos up NAME` prints the connection string):
//! `cargo run --example protocol_prepared -- 'host=127.0.0.1 port=... user=... dbname=...'`
use std::time::Duration;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const ID: &str = "SELECT pg_backend_pid()::text, backend_start::text FROM pg_stat_get_activity(pg_backend_pid())";
const T: Duration = Duration::from_secs(5);

async fn connect(conninfo: &str) -> anyhow::Result<Client> {
    let (client, conn) =
        tokio::time::timeout(T, tokio_postgres::connect(conninfo, NoTls)).await??;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

async fn simple(who: &str, c: &Client, sql: &str) {
    match tokio::time::timeout(T, c.simple_query(sql)).await {
        Ok(Ok(msgs)) => {
            let rows: Vec<String> = msgs
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(r) => Some(
                        (0..r.len())
                            .map(|i| r.get(i).unwrap_or("NULL").to_string())
                            .collect::<Vec<_>>()
                            .join(" | "),
                    ),
                    _ => None,
                })
                .collect();
            println!("{who}: {sql}\n    -> {}", rows.join("; "));
        }
        Ok(Err(e)) => println!("{who}: {sql}\n    -> ERROR {}", describe(&e)),
        Err(_) => println!("{who}: {sql}\n    -> no reply in {T:?}"),
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

async fn execute(who: &str, c: &Client, s: &tokio_postgres::Statement, name: &str) {
    match tokio::time::timeout(T, c.query(s, &[])).await {
        Ok(Ok(rows)) => {
            let r = &rows[0];
            let (pid, start, label): (String, String, String) = (r.get(0), r.get(1), r.get(2));
            println!(
                "{who}: Bind/Execute {}\n    -> {pid} | {start} | {label}",
                name
            );
        }
        Ok(Err(e)) => println!(
            "{who}: Bind/Execute {}\n    -> ERROR {}",
            name,
            describe(&e)
        ),
        Err(_) => println!("{who}: Bind/Execute {}\n    -> no reply in {T:?}", name),
    }
}

async fn prepare(who: &str, c: &Client, label: &str) -> Option<tokio_postgres::Statement> {
    let text = format!(
        "SELECT pg_backend_pid()::text, backend_start::text, '{label}'::text FROM pg_stat_get_activity(pg_backend_pid())"
    );
    match tokio::time::timeout(T, c.prepare(&text)).await {
        Ok(Ok(s)) => {
            println!("{who}: Parse ({label})\n    -> ok");
            Some(s)
        }
        Ok(Err(e)) => {
            println!("{who}: Parse ({label})\n    -> ERROR {}", describe(&e));
            None
        }
        Err(_) => None,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let conninfo = std::env::args().nth(1).expect("a connection string");
    let a = connect(&conninfo).await?;
    let b = connect(&conninfo).await?;
    println!("-- 1. A prepares; B holds A's server in a transaction; A executes");
    let s1 = prepare("A", &a, "A1").await.expect("prepared");
    execute("A", &a, &s1, "A1").await;
    simple("B", &b, &format!("BEGIN; {ID}")).await;
    execute("A", &a, &s1, "A1").await;
    simple("A", &a, ID).await;
    simple("B", &b, "COMMIT").await;
    execute("A", &a, &s1, "A1").await;
    println!("-- 2. A prepares inside a transaction that rolls back");
    simple("A", &a, &format!("BEGIN; {ID}")).await;
    let s2 = prepare("A", &a, "A2").await.expect("prepared");
    simple("A", &a, "ROLLBACK").await;
    simple("B", &b, &format!("BEGIN; {ID}")).await;
    execute("A", &a, &s2, "A2").await;
    simple("B", &b, "COMMIT").await;
    execute("A", &a, &s2, "A2").await;
    println!("-- 3. A, in a failed transaction on a server without its statement, executes it");
    let s3 = prepare("A", &a, "A3").await;
    simple("B", &b, &format!("BEGIN; {ID}")).await;
    simple("A", &a, &format!("BEGIN; {ID}")).await;
    simple("A", &a, "SELECT 1/0").await;
    if let Some(s3) = &s3 {
        execute("A", &a, s3, "A3").await;
    }
    simple("A", &a, "ROLLBACK").await;
    simple("B", &b, "COMMIT").await;
    println!("-- 4. A sends DISCARD ALL, then executes its statement");
    simple("A", &a, ID).await;
    simple("A", &a, "DISCARD ALL").await;
    execute("A", &a, &s2, "A2").await;
    simple("A", &a, ID).await;
    println!("    (A's connection closed: {})", a.is_closed());
    println!("-- 5. A leaves; C connects and asks which statements its server has");
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c = connect(&conninfo).await?;
    simple(
        "C",
        &c,
        &format!("{ID}; SELECT string_agg(name, ',' ORDER BY name) FROM pg_prepared_statements"),
    )
    .await;
    simple(
        "B",
        &b,
        &format!("{ID}; SELECT string_agg(name, ',' ORDER BY name) FROM pg_prepared_statements"),
    )
    .await;
    Ok(())
}
